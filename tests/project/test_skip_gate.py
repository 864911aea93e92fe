"""CI cannot stay green on a skip nobody allowed: pytest in a child process, as CI runs it, on small test
files that skip, with the gate of tests/helpers/skips_allowed.py registered as tests/conftest.py registers it."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from skips_allowed import AllowedSkip
from locations import HELPERS

pytestmark = pytest.mark.same_on_both   # the skip gate itself

HERE = HELPERS

CONFTEST = """
from skips_allowed import AllowedSkip, SkipGate

ALLOWED = (AllowedSkip("test_skips.py::test_allowed*", "compiled", "on purpose",
                       "the case exists to be skipped"),)

def pytest_configure(config):
    config.pluginmanager.register(SkipGate("compiled", ALLOWED), "journal_engine_skip_gate")
"""


def run_pytest(tmp_path: Path, body: str, *, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_skips.py").write_text(textwrap.dedent(body))
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path),
                           "-c", os.devnull, "test_skips.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


UNLISTED = """
    import pytest

    def test_runs():
        pass

    def test_needs_a_tool():
        pytest.skip("fiu-run is not installed")
"""


def test_on_ci_a_skip_not_allowed_fails_the_run_naming_the_test_and_its_reason(tmp_path):
    done = run_pytest(tmp_path, UNLISTED, ci="true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "SKIP test_skips.py::test_needs_a_tool: fiu-run is not installed -- NOT ALLOWED" in done.stdout
    assert "CI fails: 1 skip(s) not in tests/helpers/skips_allowed.py" in done.stdout


def test_off_ci_the_same_skip_is_listed_and_the_run_passes(tmp_path):
    done = run_pytest(tmp_path, UNLISTED, ci=None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SKIP test_skips.py::test_needs_a_tool: fiu-run is not installed -- NOT ALLOWED" in done.stdout


def test_on_ci_an_allowed_skip_passes_and_is_listed_with_why_it_is_allowed(tmp_path):
    done = run_pytest(tmp_path, """
        import pytest

        def test_allowed_one():
            pytest.skip("skipped on purpose")
    """, ci="true")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SKIP test_skips.py::test_allowed_one: skipped on purpose -- allowed: the case exists to be skipped" \
        in done.stdout


def test_on_ci_an_allowed_test_skipping_for_another_reason_fails(tmp_path):
    done = run_pytest(tmp_path, """
        import pytest

        def test_allowed_one():
            pytest.skip("mount is not permitted")
    """, ci="true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "test_allowed_one: mount is not permitted -- NOT ALLOWED" in done.stdout


def test_on_ci_a_whole_module_skipped_at_collection_fails(tmp_path):
    done = run_pytest(tmp_path, """
        import pytest

        pytest.importorskip("journal_engine_no_such_module", reason="the extra is not installed")

        def test_never_collected():
            pass
    """, ci="true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "SKIP test_skips.py: the extra is not installed -- NOT ALLOWED" in done.stdout


def test_on_ci_a_skip_in_a_fixture_fails_and_an_expected_failure_is_no_skip(tmp_path):
    done = run_pytest(tmp_path, """
        import pytest

        @pytest.fixture
        def full_disk():
            pytest.skip("mounting a tmpfs is not permitted here")

        def test_disk_full(full_disk):
            pass

        @pytest.mark.xfail(strict=True, reason="a known blind spot")
        def test_known_blind_spot():
            assert False
    """, ci="true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "SKIP test_skips.py::test_disk_full: mounting a tmpfs is not permitted here -- NOT ALLOWED" in done.stdout
    assert "test_known_blind_spot" not in done.stdout.split("skips (compiled part)")[1]


@pytest.mark.parametrize("part, says, reason", [("nightly", "x", "y"), ("twin", " ", "y"), ("twin", "x", "")])
def test_an_allowed_skip_names_its_part_its_message_and_its_reason(part, says, reason):
    with pytest.raises(ValueError, match="AllowedSkip"):
        AllowedSkip("tests/test_x.py::*", part, says, reason)
