"""The crash harness's faults from outside the process (journal_engine.crashtest.outside): each mode
runs and counts its runs, and each check catches the fault it is for, shown on a real outcome (a file
cut by the test, a lock a real holder let go of, real processes that crash); and a --ci campaign
that skipped a mode or fell short of an acceptance figure fails with exit status 5, naming it."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

from journal_engine.crashtest import Campaign, broker_workload, campaign as campaign_module, command, outside
from journal_engine.crashtest.campaign import _run_workload
from journal_engine.crashtest.model import Model
from journal_engine.storage.journal import recovery

EXIT_INCOMPLETE = 5


def _campaign(tmp_path, seed: int = 1) -> Campaign:
    campaign = Campaign(tmp_path / "scratch", size="smoke", seed=seed)
    campaign.scratch.mkdir(parents=True)
    return campaign


def test_the_outside_file_mode_runs_and_counts_each_action(tmp_path):
    campaign = _campaign(tmp_path, seed=2)
    campaign.outside_file_runs(0, 3)
    assert campaign.report.runs["outside-file"] == 3
    assert sum(campaign.report.outside["outside-file"].values()) == 3
    # one run per action; every violation (the bugs this mode exists for) names its run and what was done
    assert all(v.startswith("outside-file run ") and ("truncated" in v or "overwrote" in v or "deleted" in v
                                                       or "no file touched" in v)
               for v in campaign.report.violations), campaign.report.violations


def _journal_with_acknowledged_records(directory: str) -> list[str]:
    """A closed journal of several files written by the workload in sync mode always; its oracle."""
    lines, returncode, stderr = _run_workload(directory, "always", 5, 1, 1, kill_after=None, max_calls=1_500)
    assert returncode == 0, stderr
    return lines


def _cut_the_first_data_file(directory: str) -> str:
    first = min(path for path, _start, _end in outside.frame_bounds(directory))
    frames = [start for path, start, _end in outside.frame_bounds(directory) if path == first]
    os.truncate(first, frames[len(frames) // 2])
    return f"truncated {os.path.basename(first)} to {frames[len(frames) // 2]} bytes"


def test_the_outside_file_check_catches_acknowledged_records_lost_without_a_report(tmp_path, monkeypatch):
    """A file cut short by the test (at a frame boundary) loses acknowledged records: recovery reports
    it at the file (no violation); recovery as it was before format version 2, which took a file cut
    at a frame boundary for a clean end, is caught losing them silently."""
    campaign = _campaign(tmp_path)
    pristine = str(tmp_path / "journal")
    lines = _journal_with_acknowledged_records(pristine)
    directory = shutil.copytree(pristine, str(tmp_path / "reported"))
    touched = _cut_the_first_data_file(directory)
    outcome = campaign._check_outside_file(directory, Model(), lines, touched, "cut by the test")
    assert outcome in ("acknowledged records lost, reported at the file", "refused, naming the file")
    assert campaign.report.violations == []

    directory = shutil.copytree(pristine, str(tmp_path / "hidden"))     # the same cut, under a recovery that hides it
    touched = _cut_the_first_data_file(directory)
    monkeypatch.setattr(recovery, "cut_short", lambda data: False)     # recovery before format version 2
    outcome = campaign._check_outside_file(directory, Model(), lines, touched, "cut by the test")
    assert outcome == "acknowledged records lost silently"
    assert any("acknowledged records lost silently" in v for v in campaign.report.violations)


@pytest.mark.same_on_both     # every variant is refused by the directory lock, Python on either core
def test_the_second_opener_mode_runs_every_variant_and_counts(tmp_path):
    campaign = _campaign(tmp_path, seed=3)
    campaign.second_opener_runs(0, 3)
    assert campaign.report.runs["second-opener"] == 3
    outcomes = campaign.report.outside["second-opener"]
    assert sum(outcomes.values()) == 3
    assert {name.split(":")[0] for name in outcomes} <= set(outside.SECOND_OPENER_VARIANTS) | {
        "workload ended before the second open"}


_HOLDER_THAT_LETS_GO = """
import sys, time
from journal_engine import Journal
journal = Journal(sys.argv[1])
journal.load()
journal.add(1, 1, b"held", sync=True)
if sys.argv[2] == "lets go":
    journal._directory_lock.release()      # a lock that no longer keeps anyone out
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.same_on_both     # the harness's own checks (the modes above run on the twin)
def test_the_second_opener_check_catches_a_directory_whose_holder_keeps_nobody_out(tmp_path):
    """A real process holds a journal: a second opener is refused; when the holder's lock lets go
    (what a removed lock file did to the old lock), the check reports the second opener let in."""
    for how, caught in (("holds", False), ("lets go", True)):
        directory = str(tmp_path / how.replace(" ", "-"))
        holder = subprocess.Popen([sys.executable, "-c", _HOLDER_THAT_LETS_GO, directory, how],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "ready"
            problem = outside.second_open("journal", directory, "lock held")
        finally:
            holder.kill()
            holder.wait()
        assert bool(problem) == caught, problem
        if caught:
            assert "was let in" in problem


@pytest.mark.same_on_both     # the tools as products (tests/tools, the main suite's), the same code on either core
def test_the_live_inspect_mode_runs_each_backend_and_counts(tmp_path):
    campaign = _campaign(tmp_path, seed=4)
    campaign.live_inspect_runs(0, 4)        # journal and LMDB, a record store and a broker directory
    assert campaign.report.runs["live-inspect"] == 4
    outcomes = campaign.report.outside["live-inspect"]
    assert sum(outcomes.values()) == 4
    assert any("on journal" in name for name in outcomes) and any("on lmdb" in name for name in outcomes)


@pytest.mark.same_on_both     # the harness's own checks (the modes above run on the twin)
def test_the_inspection_check_catches_a_tool_that_dies_of_a_signal_or_prints_a_traceback(tmp_path):
    """Real processes: an inspection that ends in SIGBUS, one that ends in a traceback, and a real
    `journal-engine verify` of a healthy journal (exit 0, nothing to report)."""
    directory = str(tmp_path / "journal")
    _journal_with_acknowledged_records(directory)
    crashing = {"sigbus": "import os, signal; os.kill(os.getpid(), signal.SIGBUS)",
                "traceback": "raise RuntimeError('a reader crashed')"}
    for name, code in crashing.items():
        errors = tempfile.TemporaryFile()
        process = subprocess.Popen([sys.executable, "-c", code], stderr=errors)
        returncode, problems = outside.inspection_problems(process, errors, ("verify",), name)
        assert problems, (name, returncode)
    assert "died of SIGBUS" in outside.inspection_problems(
        subprocess.Popen([sys.executable, "-c", crashing["sigbus"]]), tempfile.TemporaryFile(), ("verify",), "x")[1][0]
    process, errors = outside.start_inspection(directory, ("verify", "--json"))
    assert outside.inspection_problems(process, errors, ("verify", "--json"), "healthy") == (0, [])


@pytest.mark.same_on_both     # the harness's own checks (the modes above run on the twin)
def test_the_broker_check_catches_a_message_dead_lettered_twice(tmp_path):
    """Dead letters are keyed by their original id: a second copy of one was invisible to the check."""
    directory = str(tmp_path / "broker")
    broker = broker_workload.open_broker(directory, "always", False, 1_000_000)
    message_id = broker_workload.send_new(broker, 1)
    for _ in range(2):      # the copy the broker makes when it dead-letters, made twice
        broker.send(broker_workload.DEAD_LETTER_ADDRESS, broker_workload.body_of(message_id),
                    properties={broker_workload.ORIGINAL_ID: message_id})
    broker.close()
    recovered = broker_workload.recovered_state(directory, "always", 1_000_000)
    assert recovered["dead_copies"] == {message_id: 2}
    problems = broker_workload.check_broker({"queue": {}, "dead": {}}, ["R", f"O 1 send {message_id}", "A 1"],
                                            recovered, strict=False, context="twice")
    assert problems == [f"twice: message {message_id} is in the dead-letter queue 2 times"]


def _tiny_ci(monkeypatch, **plan) -> None:
    """The --ci size cut to a few kills (every other mode planned at zero runs)."""
    tiny = {key: 0 for key in campaign_module.SIZES["smoke"]}
    monkeypatch.setitem(campaign_module.SIZES, "ci", {**tiny, "kills": 2, **plan})


@pytest.mark.same_on_both     # the harness's own checks (the modes above run on the twin)
def test_a_ci_campaign_that_skips_a_mode_exits_5_naming_it(tmp_path, monkeypatch, capsys):
    _tiny_ci(monkeypatch)
    monkeypatch.setitem(campaign_module.ACCEPTANCE, "ci", {})      # only the skipped mode can fail it
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))        # no fiu-run on this PATH
    status = command.run("ci", 3, None, str(tmp_path / "scratch"))
    out = capsys.readouterr()
    assert status == EXIT_INCOMPLETE, out.out + out.err
    assert "INCOMPLETE the libfiu mode did not run: libfiu's fiu-run is not installed" in out.out
    assert out.out.strip().splitlines()[-1] == "violations: 0"


@pytest.mark.same_on_both     # the harness's own checks (the modes above run on the twin)
def test_a_ci_campaign_below_an_acceptance_figure_exits_5_naming_it(tmp_path, monkeypatch, capsys):
    _tiny_ci(monkeypatch)
    status = command.run("ci", 3, str(tmp_path / "report.json"), str(tmp_path / "scratch"))
    out = capsys.readouterr()
    assert status == EXIT_INCOMPLETE, out.out + out.err
    assert "INCOMPLETE acceptance figure not reached: SIGKILLs: 2 reached, 500 required" in out.out
    assert "power-loss states: 0 reached, 100,000 required" in out.out
    assert "SIGKILLs: 2 reached, 500 required" in json.loads((tmp_path / "report.json").read_text())["shortfalls"]
    monkeypatch.setitem(campaign_module.ACCEPTANCE, "ci", {"SIGKILLs": 2})     # reached: the run passes
    status = command.run("ci", 3, None, str(tmp_path / "scratch"))
    out = capsys.readouterr()
    assert "INCOMPLETE acceptance figure" not in out.out
    assert status == (EXIT_INCOMPLETE if "INCOMPLETE the" in out.out else 0), out.out


def test_a_compaction_asked_as_soon_as_the_workload_recovered_is_made_not_fatal(tmp_path):
    """The outside-file mode signals the workload (SIGUSR1) as soon as it reads its R line; the
    workload resolves the prepared transactions it recovered after that line. Its handler must be in
    place before it: the --ci campaign of seed 15 saw a workload die of SIGUSR1 when it was installed
    after them. Forty prepared transactions, each resolved with a sync, hold that window open."""
    from journal_engine import Journal
    from journal_engine.crashtest.bodies import make_body, xid_of
    directory = str(tmp_path / "journal")
    with Journal(directory, file_size=256 * 1024) as journal:
        journal.load()
        for tx_id in range(1, 41):
            journal.add_tx(tx_id, tx_id, 1, make_body(tx_id, tx_id, 10))
            journal.prepare(tx_id, xid_of(tx_id), sync=True)
    lines, returncode, stderr = _run_workload(directory, "always", 3, 100, 100, kill_after=None, max_calls=50,
                                              outside=(0.0, lambda pid: os.kill(pid, signal.SIGUSR1)))
    assert returncode == 0, stderr
    assert any(line.split()[2] == "cpt" for line in lines if line.startswith("O "))
