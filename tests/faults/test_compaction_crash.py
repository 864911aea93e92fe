"""Crashes at every step of compaction and file activation; automatic compaction; replaceable updates.

A child process (tests/helpers/crash_worker.py) compacts a journal with
JOURNAL_ENGINE_CRASH_AT=<point> and dies there with status 137. Whatever the
point, the next load must give exactly the live set and prepared transactions
the journal had (compacted or not, nothing else), report no damage, leave no
compaction leftovers, and a later compaction must succeed.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import journal_engine
from journal_engine import Journal

import crash_worker
from crash_worker import (AFTER_COMPACTION_FIRST_ID, COMPACTION_REPLACEABLE, FILE_SIZE,
                          after_compaction_body, build_compaction_journal, expected_compaction_state)
from locations import HELPERS

WORKER = str(HELPERS / "crash_worker.py")
PACKAGE = Path(journal_engine.__file__).parent


def crash_points_in_source() -> list[str]:
    """Every crash point the package declares, so a new step is crash-tested the day it is added."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        names.update(re.findall(r'crash_point\(\s*"([^"]+)"\s*\)', path.read_text()))
    return sorted(names)


CRASH_POINTS = crash_points_in_source()
# points hit only after the control file (the commit point) is durable: the compaction must be finished
AFTER_COMMIT = {"compact-control-written", "compact-first-output-renamed", "compact-swapped"}


def test_the_known_crash_points_are_all_declared():
    assert {"create-before-rename", "activate-before-rename", "compact-outputs-written",
            "compact-control-written", "compact-first-output-renamed", "compact-swapped"} <= set(CRASH_POINTS)


def state_of(result) -> tuple[dict, dict]:
    records = {rid: (rec.record_type, rec.body, list(rec.updates)) for rid, rec in result.records.items()}
    prepared = {tx.tx_id: (tx.xid, [(r.kind, r.record_id, r.record_type, r.body) for r in tx.records])
                for tx in result.prepared}
    return records, prepared


def open_built(directory, **options) -> Journal:
    options.setdefault("compact_min_files", 0)
    return Journal(directory, file_size=FILE_SIZE, replaceable_types=COMPACTION_REPLACEABLE, **options)


def leftovers(directory) -> list[str]:
    return [n for n in os.listdir(directory) if n.endswith((".jec", ".tmp")) or n.startswith("compaction.ctl")]


def data_file_count(directory) -> int:
    return sum(name.endswith(".jej") for name in os.listdir(directory))


@pytest.fixture(scope="module")
def built_journal(tmp_path_factory):
    directory = tmp_path_factory.mktemp("compaction") / "built"
    build_compaction_journal(str(directory))
    return directory


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_crash_at_every_compaction_step_loads_the_same_live_set(point, built_journal, tmp_path):
    directory = tmp_path / "journal"
    shutil.copytree(built_journal, directory)
    files_before = data_file_count(directory)
    env = dict(os.environ, JOURNAL_ENGINE_CRASH_AT=point)
    child = subprocess.run([sys.executable, WORKER, "compact", str(directory), "compact"], env=env,
                           capture_output=True, text=True, timeout=120)
    out = child.stdout.split()
    assert child.returncode == 137, f"{point}: the child did not die there ({child.returncode}):\n{child.stderr}"
    assert "compacting" in out, f"{point}: died before compacting: {child.stdout}"
    assert "closed" not in out

    with open_built(directory) as journal:
        result = journal.load()
        report = result.report
        assert report.corrupt == [] and report.anomalies == [], f"{point}: {report}"
        assert report.rolled_back == []
        records, prepared = state_of(result)
        # the records appended after the compaction: every acknowledged one, byte-exact
        acked = [int(word) for line in child.stdout.splitlines() if line.startswith("acked ")
                 for word in line.split()[1:]]
        later = {rid: records.pop(rid) for rid in list(records) if rid >= AFTER_COMPACTION_FIRST_ID}
        for record_id in acked:
            assert later.get(record_id) == (9, after_compaction_body(record_id), []), f"{point}: {record_id}"
        unacked = set(later) - set(acked)
        assert unacked <= {max(acked, default=AFTER_COMPACTION_FIRST_ID - 1) + 1}, f"{point}: {sorted(unacked)}"
        for record_id in unacked:
            assert later[record_id] == (9, after_compaction_body(record_id), [])
        # the rest: exactly the live set before the compaction, compacted or not
        compacted = expected_compaction_state(compacted=True)
        uncompacted = expected_compaction_state(compacted=False)
        if point in AFTER_COMMIT or "compacted" in out:
            assert (records, prepared) == compacted, f"{point}: the committed compaction was not finished"
        elif point == "compact-outputs-written":
            assert (records, prepared) == uncompacted, f"{point}: an uncommitted compaction took effect"
        else:
            assert (records, prepared) in (compacted, uncompacted), f"{point}: the live set changed"
    assert leftovers(directory) == [], f"{point}: recovery left {leftovers(directory)}"

    # compaction works again afterwards, and changes nothing but the layout
    with open_built(directory) as journal:
        before = state_of(journal.load())
        journal.compact()
        assert journal.stats()["compactions"] == 1
        assert journal.stats()["last_compaction_error"] is None
    with open_built(directory) as journal:
        result = journal.load()
        assert result.report.corrupt == [] and result.report.anomalies == []
        after_records, after_prepared = state_of(result)
    assert after_prepared == before[1]
    assert after_records == crash_worker.compact_updates(before[0]), f"{point}: recompaction changed records"
    assert data_file_count(directory) <= files_before + 2
    assert leftovers(directory) == []


def test_crash_while_activating_the_first_file_of_a_new_journal(tmp_path):
    """A new journal's first files are created and activated at load: a crash there leaves a
    directory that loads as an empty journal."""
    for point in ("create-before-rename", "activate-before-rename"):
        directory = tmp_path / point
        code = ("import sys; from journal_engine import Journal; "
                "j = Journal(sys.argv[1], file_size=262144); j.load(); print('loaded')")
        child = subprocess.run([sys.executable, "-c", code, str(directory)], capture_output=True, text=True,
                               env=dict(os.environ, JOURNAL_ENGINE_CRASH_AT=point), timeout=60)
        assert child.returncode == 137, f"{point}: {child.returncode} {child.stderr}"
        assert "loaded" not in child.stdout
        with Journal(directory, file_size=FILE_SIZE) as journal:
            result = journal.load()
            assert result.records == {} and result.report.corrupt == []
            journal.add(1, 1, b"after the crash", sync=True)
        with Journal(directory, file_size=FILE_SIZE) as journal:
            assert journal.load().records[1].body == b"after the crash"
        assert leftovers(directory) == []


def test_automatic_compaction_runs_and_keeps_the_live_set(journal_dir):
    expected = {}
    with Journal(journal_dir, file_size=FILE_SIZE, sync="none", compact_min_files=2) as journal:
        journal.load()
        for record_id in range(3000):
            body = crash_worker.make_body(record_id, record_id, 900)
            journal.add(record_id, 1, body)
            expected[record_id] = body
            if record_id % 10:
                journal.delete(record_id)
                del expected[record_id]
        deadline = time.monotonic() + 10       # it runs in the background: give it time to finish
        while journal.stats()["compactions"] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        stats = journal.stats()
        assert stats["compactions"] > 0, stats
        assert stats["last_compaction_error"] is None
        assert stats["live_records"] == len(expected)
    with Journal(journal_dir, file_size=FILE_SIZE) as journal:
        result = journal.load()
        assert result.report.corrupt == [] and result.report.anomalies == []
        assert {rid: rec.body for rid, rec in result.records.items()} == expected
        assert journal.stats()["data_files"] < 3000 * 930 // FILE_SIZE


def test_replaceable_updates_keep_only_the_last_per_record_type_and_key(journal_dir):
    """replaceable_types={34: 4}: updates of type 34 whose first 4 body bytes match replace each other."""
    with Journal(journal_dir, file_size=FILE_SIZE, sync="none", compact_min_files=0,
                 replaceable_types={34: 4, 36: 4}) as journal:
        journal.load()
        journal.add(1, 45, b"message one")
        journal.add(2, 45, b"message two")
        for count in range(1, 6):
            journal.update(1, 34, b"q001" + bytes([count]))
            journal.update(1, 34, b"q002" + bytes([count * 10]))
            journal.update(1, 36, b"q001" + bytes([count]) * 8)
            journal.update(1, 7, b"kept " + bytes([count]))          # not replaceable: all kept
            journal.update(2, 34, b"q001" + bytes([count + 100]))
        journal.compact()
    with Journal(journal_dir, file_size=FILE_SIZE, replaceable_types={34: 4, 36: 4}) as journal:
        result = journal.load()
        assert result.report.corrupt == []
        one = result.records[1].updates
        assert [u for u in one if u[0] == 7] == [(7, b"kept " + bytes([c])) for c in range(1, 6)]
        assert [u for u in one if u[0] == 34] == [(34, b"q001\x05"), (34, b"q002" + bytes([50]))]
        assert [u for u in one if u[0] == 36] == [(36, b"q001" + bytes([5]) * 8)]
        assert result.records[2].updates == [(34, b"q001" + bytes([105]))]
        assert result.records[1].body == b"message one"
        # the order of what is kept follows the order of appends
        assert one[-3:] == [(34, b"q002" + bytes([50])), (36, b"q001" + bytes([5]) * 8), (7, b"kept \x05")]


def test_repeated_compaction_does_not_grow_the_directory(journal_dir):
    """Each compaction reclaims the files it replaced; calling it again and again (an idle broker
    compacting on a timer) must reuse them, not leave one more file behind every time."""
    with Journal(journal_dir, file_size=FILE_SIZE, sync="none", compact_min_files=0) as journal:
        journal.load()
        for record_id in range(10):
            journal.add(record_id, 1, b"x" * 1000)
        journal.compact()
        files_after_first = len([n for n in os.listdir(journal_dir) if n.endswith((".jej", ".jef"))])
        for _ in range(20):
            journal.compact()
        files = sorted(n for n in os.listdir(journal_dir) if n.endswith((".jej", ".jef")))
    assert len(files) <= files_after_first + 2, (
        f"20 compactions of an unchanged journal grew it from {files_after_first} to {len(files)} files "
        f"({len(files) * FILE_SIZE // 1024} KiB): {files}")
