"""Another project's own tests, taken from its source distribution at test time: pip fetches the sdist
of a pinned version, it is unpacked into a temporary directory and one module of it imported from
there (we never copy such a file into our tree). When the sdist cannot be fetched (no network, no
pip) the test skips, naming what is missing (CI's skip gate then fails the run)."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

FETCH_TIMEOUT_S = 180


def extract_safely(archive_path: Path, directory: Path) -> None:
    """Unpacks ``archive_path`` into ``directory``, refusing members that would land outside it.

    ``extractall(filter="data")`` exists from Python 3.10.12 and 3.11.4; pyproject.toml claims 3.10+, and
    Debian 12's own Python is 3.11.2. Where ``tarfile`` has no ``data_filter``, the members are checked here
    instead: no absolute path, no ``..``, no link pointing outside, nothing but files, folders and links."""
    with tarfile.open(archive_path) as archive:
        if hasattr(tarfile, "data_filter"):
            archive.extractall(directory, filter="data")
            return
        root = directory.resolve()
        for member in archive.getmembers():
            _check_member(member, root)
        archive.extractall(directory)


def _check_member(member: tarfile.TarInfo, root: Path) -> None:
    """Raises ``tarfile.TarError`` for a member that would write outside ``root`` or is no plain file,
    folder or link."""
    name = member.name
    if name.startswith(("/", "\\")) or Path(name).is_absolute() or ".." in Path(name).parts:
        raise tarfile.TarError(f"unsafe member {name!r}: absolute path or '..'")
    target = (root / name).resolve()
    if target != root and root not in target.parents:
        raise tarfile.TarError(f"unsafe member {name!r}: lands outside {root}")
    if member.issym() or member.islnk():
        link = Path(member.linkname)
        pointed = ((root if member.islnk() else target.parent) / link).resolve()
        if link.is_absolute() or (pointed != root and root not in pointed.parents):
            raise tarfile.TarError(f"unsafe member {name!r}: links outside {root} ({member.linkname!r})")
    elif not (member.isfile() or member.isdir()):
        raise tarfile.TarError(f"unsafe member {name!r}: neither file, folder nor link")


def import_from_sdist(directory: Path, requirement: str, member: str, what: str) -> ModuleType:
    """The module ``member`` (a path below the sdist's top folder) of ``requirement``'s sdist, fetched into
    ``directory``; ``what`` names the suite in a skip message."""
    command = [sys.executable, "-m", "pip", "download", requirement, "--no-binary", ":all:", "--no-deps",
               "--disable-pip-version-check", "-d", str(directory)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as error:
        pytest.skip(f"{what} is missing: `{' '.join(command)}` could not run ({error})")
    project = requirement.split("==")[0]
    archives = sorted(directory.glob(f"{project}-*.tar.gz"))
    if result.returncode != 0 or not archives:
        pytest.skip(f"{what} is missing: `{' '.join(command)}` fetched no sdist "
                    f"(exit {result.returncode}: {result.stderr.strip()[-300:]})")
    extract_safely(archives[0], directory)
    source = directory / archives[0].name[:-len(".tar.gz")] / member
    if not source.is_file():
        pytest.fail(f"{archives[0].name} has no {member}: {project}'s layout changed")
    spec = importlib.util.spec_from_file_location(f"{project}_sdist_{source.stem}", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
