"""What users install: the sdist carries the compiled core's sources, the build refuses to go on without
them (or without Cython) instead of shipping the Python twin alone, the version is said once, the licence
file matches the metadata, and the package says it is typed.

.ci/run installs the sdist into a fresh virtual environment and checks IMPLEMENTATION == "cython" there;
these tests check the parts that need no compiler. The sdist is built from a copy of the project in a
temporary directory, so that the build's by-products (egg-info, Cython's .c files) never land in the
checkout that other builds use.
"""
from __future__ import annotations

import ast
import importlib.metadata
import importlib.resources
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import journal_engine
from locations import ROOT

pytestmark = pytest.mark.packaging

PROJECT = ROOT
PYX_DIR = PROJECT / "pyx" / "journal_engine"
COMPILED_SOURCE_SUFFIXES = (".pyx", ".pxd", ".h", ".pyi")
# by-products of builds and test runs that a copy of the project leaves out (C and HTML only where Cython
# generates them: journal_engine/crashtest/iorecord.c and the console's templates are sources)
_BY_PRODUCTS = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", "*.so",
                                      ".hypothesis", ".pytest_cache", ".benchmarks", ".venv")


def COPY_IGNORED(directory: str, names: list[str]) -> set[str]:
    generated = ({name for name in names if name.endswith((".c", ".html"))} if "pyx" in Path(directory).parts
                 else set())
    return set(_BY_PRODUCTS(directory, names)) | generated

needs_project = pytest.mark.skipif(not (PROJECT / "pyproject.toml").is_file() or not PYX_DIR.is_dir(),
                                   reason="needs the project's sources (a checkout or an unpacked sdist)")


def copy_project(destination: Path) -> Path:
    copy = destination / "project"
    shutil.copytree(PROJECT, copy, ignore=COPY_IGNORED)
    return copy


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> tarfile.TarFile:
    """The sdist built by `python -m build --sdist` (isolated: pip fetches setuptools and Cython)."""
    pytest.importorskip("build", reason="`build` is in the test extra: pip install -e '.[test]'")
    work = tmp_path_factory.mktemp("sdist")
    project = copy_project(work)
    out = work / "dist"
    result = subprocess.run([sys.executable, "-m", "build", "--sdist", "--outdir", str(out), str(project)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"sdist build failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    (archive,) = out.glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        yield tar


def sdist_names(tar: tarfile.TarFile) -> set[str]:
    """Member paths without the leading `journal_engine-X.Y.Z/`."""
    return {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}


@needs_project
@pytest.mark.slow
def test_sdist_holds_the_compiled_cores_sources(sdist):
    names = sdist_names(sdist)
    expected = {f"pyx/journal_engine/{path.name}" for path in PYX_DIR.iterdir()
                if path.suffix in COMPILED_SOURCE_SUFFIXES}
    assert any(name.endswith(".pyx") for name in expected), "no .pyx in the checkout to compare with"
    assert any(name.endswith(".pxd") for name in expected) and any(name.endswith(".h") for name in expected)
    assert expected <= names, f"missing from the sdist: {sorted(expected - names)}"
    generated_c = sorted(name for name in names if name.startswith("pyx/") and name.endswith(".c"))
    assert not generated_c, f"Cython's generated C belongs to the build, not the sdist: {generated_c}"
    for name in ("setup.py", "pyproject.toml", "MANIFEST.in", "LICENSE", "README.md",
                 "journal_engine/py.typed", "journal_engine/__init__.py", "tests/conftest.py",
                 "journal_engine/crashtest/iorecord.c", "journal_engine/console/templates/base.html",
                 "journal_engine/console/templates/dead_letters.html", "journal_engine/console/static/console.css",
                 "journal_engine/console/static/console.js"):
        assert name in names, f"{name} missing from the sdist"


@needs_project
@pytest.mark.slow
def test_sdist_metadata_has_the_version_and_licence(sdist):
    (pkg_info,) = [member for member in sdist.getmembers() if member.name.count("/") == 1
                   and member.name.endswith("/PKG-INFO")]
    metadata = sdist.extractfile(pkg_info).read().decode()
    assert f"\nVersion: {journal_engine.__version__}\n" in metadata
    assert "\nLicense-Expression: Apache-2.0\n" in metadata
    assert "\nLicense-File: LICENSE\n" in metadata


@needs_project
def test_build_stops_without_the_compiled_sources(tmp_path):
    project = copy_project(tmp_path)
    shutil.rmtree(project / "pyx")
    result = subprocess.run([sys.executable, "setup.py", "--version"], cwd=project,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "journal_engine build error: no Cython sources found" in result.stderr


@needs_project
def test_build_stops_without_cython(tmp_path):
    project = copy_project(tmp_path)
    # None in sys.modules makes `import Cython` raise ImportError, installed or not
    hide_cython = ("import sys; sys.modules['Cython'] = None; sys.argv = ['setup.py', '--version']; "
                   "exec(compile(open('setup.py').read(), 'setup.py', 'exec'))")
    result = subprocess.run([sys.executable, "-c", hide_cython], cwd=project,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "journal_engine build error: Cython is not installed" in result.stderr


def test_version_is_single_sourced():
    assert importlib.metadata.version("journal_engine") == journal_engine.__version__


@needs_project
def test_pyproject_takes_the_version_from_the_package():
    # tomllib is in the standard library from 3.11; before it, pytest itself depends on tomli, the same parser
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    project = tomllib.loads((PROJECT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "journal_engine.__version__"}
    # setuptools reads a literal assignment without importing the package (which needs the compiled core)
    tree = ast.parse((PROJECT / "journal_engine" / "__init__.py").read_text())
    literals = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and [getattr(target, "id", None) for target in node.targets] == ["__version__"]
                and isinstance(node.value, ast.Constant)]
    assert literals == [journal_engine.__version__]


@needs_project
def test_licence_file_matches_the_metadata():
    licence = (PROJECT / "LICENSE").read_text()
    assert licence.lstrip().startswith("Apache License\n") and "Version 2.0, January 2004" in licence
    assert "END OF TERMS AND CONDITIONS" in licence
    metadata = importlib.metadata.metadata("journal_engine")
    assert metadata["License-Expression"] == "Apache-2.0"


def test_installed_distribution_carries_the_licence():
    files = importlib.metadata.files("journal_engine") or []
    assert any(file.name == "LICENSE" for file in files), "LICENSE not among the installed distribution's files"


def test_package_is_marked_typed():
    assert importlib.resources.files("journal_engine").joinpath("py.typed").is_file()
    files = importlib.metadata.files("journal_engine") or []
    if any(str(file) == "journal_engine/__init__.py" for file in files):   # a regular (not editable) install
        assert any(str(file) == "journal_engine/py.typed" for file in files)
