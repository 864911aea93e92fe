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
    with tarfile.open(archives[0]) as archive:
        archive.extractall(directory, filter="data")
    source = directory / archives[0].name[:-len(".tar.gz")] / member
    if not source.is_file():
        pytest.fail(f"{archives[0].name} has no {member}: {project}'s layout changed")
    spec = importlib.util.spec_from_file_location(f"{project}_sdist_{source.stem}", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
