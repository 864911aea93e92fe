"""The crash harness as a product (journal_engine.crashtest, `journal-engine crash-test`): a campaign
runs every fault mode and finds no violation on the journal, and it does find the bugs it exists for
(shown by putting one back)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from journal_engine.crashtest import Campaign
from journal_engine.storage import durability
from journal_engine.storage.journal import recovery
from journal_engine.storage.journal import journal as journal_module


def test_a_smoke_campaign_runs_every_fault_mode_and_finds_no_violation(tmp_path):
    report = Campaign(tmp_path / "scratch", size="smoke", seed=11).run()
    assert report.violations == []
    assert set(report.runs) >= {"kill", "crash-point", "io-error", "bit-flip", "truncation", "power-loss",
                                "broker-kill", "takeover", "outside-file", "second-opener", "live-inspect",
                                "checkpoint"}
    # libfiu and the small tmpfs run where the machine has them; skipped modes say why
    assert set(report.runs) | set(report.skipped) == {"kill", "crash-point", "io-error", "bit-flip", "truncation",
                                                      "power-loss", "libfiu", "full-disk", "broker-kill",
                                                      "takeover", "outside-file", "second-opener", "live-inspect",
                                                      "checkpoint"}
    assert report.power_loss["states"] >= 15 * 2 and report.broker["kills"] == 4
    assert report.takeover["takeovers"] == 1 and report.takeover["receipted"] > 0
    assert report.takeover["resent"] > 0        # the kill left SENDs without their RECEIPT: resends were made
    assert report.runs["checkpoint"] == 30 and sum(report.damage["checkpoint"].values()) == 30
    assert all(report.crash_points_hit[point] >= 1 for point in durability.CRASH_POINTS)
    assert report.acknowledged > 0 and report.calls >= report.acknowledged


@pytest.mark.same_on_both     # the harness's own checks (the smoke campaign above runs on the twin)
def test_the_checkpoint_attack_catches_a_forged_checkpoint_put_back_by_a_refused_load(tmp_path, monkeypatch):
    """A refused load that puts back whatever it took, as before the fix: the forged checkpoint outlives
    the load, which the attack's judge must call a violation (and the fixed one does not)."""
    from journal_engine.crashtest import checkpoint_attack
    from journal_engine.storage.journal import checkpoint as checkpoints
    pristine = str(tmp_path / "pristine")
    checkpoint_attack.write_pristine(pristine, seed=2)
    with open(os.path.join(pristine, "journal.jck"), "rb") as handle:
        content = handle.read()
    forged = next(attack for attack in (checkpoint_attack.random_attack(content, __import__("random").Random(n))
                                        for n in range(500)) if attack.holder == "load refused")
    expected = checkpoint_attack.decoded(pristine)
    assert checkpoint_attack.run_attack(pristine, str(tmp_path / "work"), forged, expected) == ("not put back", "")
    monkeypatch.setattr(checkpoints.Checkpoint, "_sound", lambda self: True)
    outcome, broke = checkpoint_attack.run_attack(pristine, str(tmp_path / "work"), forged, expected)
    assert outcome == "outlived" and "put the forged checkpoint back" in broke


@pytest.mark.same_on_both     # the harness's own checks (the smoke campaign above runs on the twin)
def test_the_campaign_catches_a_file_cut_short_that_recovery_does_not_report(tmp_path, monkeypatch):
    """Recovery as it was before format version 2: a file cut at a frame boundary lost records silently."""
    monkeypatch.setattr(recovery, "cut_short", lambda data: False)
    campaign = Campaign(tmp_path / "scratch", size="smoke", seed=3)
    campaign.damage_at_rest()
    silent = [v for v in campaign.report.violations if "report says clean" in v and "truncation" in v]
    assert silent, "the harness did not notice records lost without a report"



@pytest.mark.same_on_both     # the harness's own checks (the smoke campaign above runs on the twin)
def test_the_campaign_catches_damage_at_rest_passed_off_as_a_torn_tail(tmp_path, monkeypatch):
    """A recovery that calls every damage of the journal a torn write: a bit flip in a synced record
    then loses it under the verdict "torn tail", which the bit-flip check must not count as detected
    (a flip the real recovery reads as a torn tail is one in the seal pad after the last synced frame:
    nothing lost)."""
    real = journal_module.analyze

    def damage_read_as_a_torn_tail(*args, **kwargs):
        analysis = real(*args, **kwargs)
        if analysis.report.corrupt and not analysis.report.torn_tail:
            path, offset, _reason = analysis.report.corrupt.pop(0)
            analysis.report.torn_tail = (path, offset)
        return analysis

    monkeypatch.setattr(journal_module, "analyze", damage_read_as_a_torn_tail)
    campaign = Campaign(tmp_path / "scratch", size="smoke", seed=3)
    campaign.damage_at_rest()
    passed_off = [v for v in campaign.report.violations if "only a torn tail was reported" in v and "bit flip" in v]
    assert passed_off, campaign.report.damage

@pytest.mark.same_on_both     # the harness's own checks (the smoke campaign above runs on the twin)
def test_the_command_prints_violations_and_a_json_report(tmp_path):
    report_path = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "journal_engine", "crash-test", "--smoke", "--seed", "5",
                           "--json", str(report_path), "--scratch", str(tmp_path / "scratch")],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == "violations: 0"
    data = json.loads(report_path.read_text())
    assert data["seed"] == 5 and data["violations"] == [] and data["reproduce"].endswith("--smoke --seed 5")
    assert data["power_loss"]["states"] > 0 and data["broker"]["kills"] > 0
    png = report_path.with_suffix(".png")
    assert f"plot: {png}" in done.stdout and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


JOURNAL_ONLY = {"crash-point", "io-error", "bit-flip", "truncation", "outside-file", "checkpoint"}


@pytest.mark.same_on_both     # the harness's own checks (the smoke campaign above runs on the twin)
def test_the_campaign_crashes_the_lmdb_store_with_power_loss_and_libfiu_and_says_what_cannot_apply(tmp_path):
    report = Campaign(tmp_path / "scratch", size="smoke", seed=4, store="lmdb").run()
    assert report.violations == []
    assert report.runs["kill"] == 6 and report.acknowledged > 0
    assert report.runs["power-loss"] >= 15 * 2 and report.power_loss["crash_points"] == 15
    assert set(report.not_applicable) == JOURNAL_ONLY and all(report.not_applicable.values())
    if "libfiu" not in report.skipped:
        assert report.runs["libfiu"] >= 10 and report.libfiu["refused_after"] > 0
    assert set(report.runs) | set(report.skipped) == {"kill", "power-loss", "libfiu", "second-opener", "live-inspect",
                                                      "broker-kill", "takeover", "full-disk"}
    assert report.broker["kills_on_lmdb"] == report.broker["kills"] > 0
    assert report.takeover["on_lmdb"] == report.takeover["takeovers"] == 1
    assert {"kill", "power-loss", "libfiu", "campaign"} - set(report.skipped) <= set(report.phases)


USER_STORE = '''
from journal_engine import Journal


def open_store(directory, sync):
    return Journal(directory, sync=sync, file_size=256 * 1024)
'''


@pytest.mark.same_on_both     # the harness's own checks (the smoke campaign above runs on the twin)
def test_the_command_crashes_a_user_store_given_by_import_path(tmp_path):
    (tmp_path / "mystore.py").write_text(USER_STORE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-m", "journal_engine", "crash-test", "--smoke", "--seed", "2",
                           "--store", "mystore:open_store", "--scratch", str(tmp_path / "scratch")],
                          capture_output=True, text=True, timeout=600, check=False, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "on mystore:open_store" in done.stdout and done.stdout.strip().endswith("violations: 0")
    assert "power loss" in done.stdout and "not applicable to this store" in done.stdout


MAPPING_STORE = '''
from journal_engine.storage.lmdb.store import LmdbRecordStore


def open_store(directory, sync):      # LMDB maps its lock file shared and writable
    return LmdbRecordStore(directory, sync=sync)
'''


@pytest.mark.same_on_both     # the harness's own checks (the smoke campaign above runs on the twin)
def test_power_loss_is_not_applicable_to_a_user_store_that_writes_through_a_shared_mapping(tmp_path, monkeypatch):
    (tmp_path / "mappingstore.py").write_text(MAPPING_STORE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    campaign = Campaign(tmp_path / "scratch", size="smoke", seed=6, store="mappingstore:open_store")
    campaign.scratch.mkdir(parents=True)
    try:
        for task in campaign.power_loss_tasks():
            task.absorb(task.function(*task.args))
    finally:
        campaign.remove_scratch()
    assert "power-loss" not in campaign.report.runs
    assert "lock.mdb through a shared writable mapping" in campaign.report.not_applicable["power-loss"]
