"""A campaign stopped by a signal leaves no scratch and no process behind, and the scratch of one
killed outright (SIGKILL: no code of it runs again) is removed by the next campaign's start."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from journal_engine.crashtest import scratch as scratch_module
from journal_engine.crashtest.children import descendants

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _owned_by(pid: int, parents: list[Path]) -> list[Path]:
    owned = []
    for parent in parents:
        for path in parent.glob(scratch_module.PREFIX + "*"):
            try:
                owner = (path / scratch_module.OWNER_FILE).read_text().split()
            except OSError:
                continue
            if owner[:1] == [str(pid)]:      # an owner file being written reads empty: not yet
                owned.append(path)
    return owned


def _sigint_as_from_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _campaign_under_way(tmp_path: Path) -> tuple[subprocess.Popen, set[int], list[Path]]:
    """A quick campaign started in a child, once its workers run and its scratch holds their files."""
    scratch = tmp_path / "scratch"
    # SIGINT as a terminal delivers it, also when this test runs where it is ignored (a background job
    # of a shell without job control), which the child would inherit and keep
    campaign = subprocess.Popen([sys.executable, "-m", "journal_engine", "crash-test", "--seed", "3",
                                 "--scratch", str(scratch)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                preexec_fn=_sigint_as_from_a_terminal)
    parents = [scratch] + [Path(p) for p in scratch_module.default_parents()]
    deadline = time.monotonic() + 300
    try:
        return _wait_until_under_way(campaign, parents, deadline)
    except BaseException:
        campaign.kill()
        campaign.wait()
        raise


def _wait_until_under_way(campaign: subprocess.Popen, parents: list[Path], deadline: float):
    while time.monotonic() < deadline:
        owned = _owned_by(campaign.pid, parents)
        busy = [p for p in owned if len(os.listdir(p)) > 1]
        if busy and len(descendants(campaign.pid)) >= 3:      # the workers and a child of theirs
            return campaign, descendants(campaign.pid), owned
        if campaign.poll() is not None:
            pytest.fail(f"the campaign ended first: {campaign.stderr.read().decode()}")
        time.sleep(0.05)
    campaign.kill()
    pytest.fail("the campaign never got under way")


def _all_gone(pids: set[int], timeout_s: float = 15) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = {pid for pid in pids if os.path.exists(f"/proc/{pid}") and
                 not open(f"/proc/{pid}/stat", "rb").read().rsplit(b")", 1)[1].split()[0] == b"Z"}
        if not alive:
            return set()
        time.sleep(0.05)
    return alive


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_campaign_stopped_by_a_signal_removes_its_scratch_and_ends_its_processes(tmp_path, signum):
    campaign, processes, owned = _campaign_under_way(tmp_path)
    campaign.send_signal(signum)
    assert campaign.wait(60) == 128 + signum
    assert "its scratch is removed" in campaign.stderr.read().decode()
    assert _all_gone(processes) == set(), "a worker or workload outlived the campaign"
    assert [p for p in owned if p.exists()] == []


def test_the_scratch_of_a_campaign_killed_outright_is_removed_at_the_next_start(tmp_path):
    campaign, processes, owned = _campaign_under_way(tmp_path)
    campaign.send_signal(signal.SIGKILL)
    campaign.wait(60)
    campaign.stderr.close()
    assert _all_gone(processes) == set(), "workers and workloads must die with the campaign"
    left = [p for p in owned if p.exists()]
    assert left, "a campaign killed outright cannot clean up: its scratch stays until the next start"
    # the next campaign sweeps the stale scratch as it starts; it is stopped once that is done (what it
    # then does with its own scratch is the test above)
    following = subprocess.Popen([sys.executable, "-m", "journal_engine", "crash-test", "--smoke", "--seed", "4",
                                  "--scratch", str(tmp_path / "scratch")],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while any(p.exists() for p in left) and following.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [p for p in left if p.exists()] == [], (
            "the next campaign's start left the stale scratch: " + (following.stderr.read().decode()
                                                                    if following.poll() is not None else "still running"))
    finally:
        following.send_signal(signal.SIGTERM)
        following.wait(120)
        following.stderr.close()


def test_scratch_of_a_live_owner_or_of_no_known_owner_is_left_alone(tmp_path):
    mine = Path(scratch_module.make_owned_dir(tmp_path))
    unowned = tmp_path / (scratch_module.PREFIX + "unowned")
    unowned.mkdir()
    gone = Path(scratch_module.make_owned_dir(tmp_path))
    (gone / scratch_module.OWNER_FILE).write_text("999999999 1\n")     # no such process
    assert scratch_module.sweep_stale([tmp_path]) == [str(gone)]
    assert mine.exists() and unowned.exists() and not gone.exists()
