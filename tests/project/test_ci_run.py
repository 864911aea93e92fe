""".ci/run's set-up: a tool the fault tests need that cannot be installed fails the run at once, saying
which (before, it printed a line and went on, and the libfiu tests skipped in a green run). The script
runs as CI runs it, stopped after its set-up (--setup-only); CI_FIU_PACKAGE names a package that does not
exist, so that apt-get (or its absence) refuses it. Likewise the oldest Python pyproject.toml claims, which the
second lane runs on and which cannot be downloaded: CI_OLDEST_PYTHON names an interpreter that is not there."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from locations import ROOT

CI_RUN = ROOT / ".ci" / "run"

pytestmark = [pytest.mark.skipif(not CI_RUN.is_file(), reason="needs the checkout's .ci/run (not in an sdist)"),
              pytest.mark.same_on_both]   # CI's own machinery
# installed, so that the set-up goes on past them to what a test checks
needs_the_fault_tools = pytest.mark.skipif(shutil.which("fiu-run") is None or shutil.which("fiu-ctrl") is None
                                           or not os.access("/usr/bin/chromium", os.X_OK),
                                           reason="libfiu's fiu-run / fiu-ctrl or Chromium are not installed "
                                                  "(Debian: fiu-utils, chromium)")


def run_setup(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CI_RUN), "--setup-only"], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL)


def test_a_fault_tool_that_cannot_be_installed_fails_the_run_naming_it():
    done = run_setup(CI_FIU_PACKAGE="journal-engine-no-such-package")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ci: FAILED:" in done.stderr and "journal-engine-no-such-package" in done.stderr
    assert "ci: set-up done" not in done.stdout


def test_a_browser_that_cannot_be_installed_fails_the_run_naming_it():
    """The console's browser tests need Debian's Chromium: .ci/run installs it beside libfiu, in one apt-get."""
    done = run_setup(CI_CHROMIUM_PACKAGE="journal-engine-no-such-browser")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ci: FAILED:" in done.stderr and "journal-engine-no-such-browser" in done.stderr
    assert "ci: set-up done" not in done.stdout


@needs_the_fault_tools
def test_with_the_fault_tools_in_place_the_set_up_passes():
    done = run_setup()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ci: set-up done" in done.stdout


@needs_the_fault_tools
def test_a_missing_oldest_python_fails_the_run_naming_it():
    done = run_setup(CI_OLDEST_PYTHON="/nonexistent/bin/python3.10")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ci: FAILED: Python 3.10" in done.stderr and "/nonexistent/bin/python3.10" in done.stderr
    assert "ci: set-up done" not in done.stdout
