"""A process killed inside the write() that carries a record group, in a recycled file.

A SIGKILL cannot split the group between two writes (it reaches the kernel in one: the compiled core
holds the GIL from _begin_group to _end_group, the twin its append lock), but it can land inside that
one pwrite: the kernel copies a write page by page and stops at a fatal signal, so the file keeps a
prefix of the write. Past the prefix lie the bytes the file held before; in a recycled file those are
its earlier life's frames, not zeros. Every such prefix must recover the group whole or not at all,
and as a torn tail, not as damage. The zero-filled case is tests/core/test_group_frames.py's."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from journal_engine import Journal
from journal_engine.storage.journal.format import FREE_SUFFIX
from journal_engine.record_format import RecordKind

FILE_SIZE = 256 * 1024
CUT_STEP = 512           # finer than the kernel's page: every sector of the write


def _body(record_id: int, size: int, salt: int = 0) -> bytes:
    return (f"{record_id}:{salt}:".encode() * size)[:size]


def _recycled_active_file(journal) -> str:
    """Fill three files, delete everything and compact, then append until a file the compaction freed
    (its earlier life's frames still in it) is the active one; returns its path."""
    for record_id in range(700):
        journal.add(record_id, 1, _body(record_id, 1000))
    for record_id in range(700):
        journal.delete(record_id)
    journal.compact()
    fresh = {journal.stats()["active_file"]}
    record_id = 10_000
    while True:
        journal.add(record_id, 2, _body(record_id, 1000))
        record_id += 1
        active = journal.stats()["active_file"]
        if active not in fresh:
            journal.sync()
            data = Path(active).read_bytes()
            if any(data[journal.stats()["active_position"]:]):
                return active
            fresh.add(active)
        assert record_id < 14_000, "no recycled file became the active file"


def test_a_kill_inside_a_groups_write_in_a_recycled_file_recovers_all_of_it_or_none(tmp_path):
    directory = tmp_path / "journal"
    group = [(RecordKind.UPDATE, 10_000, 3, _body(10_000, 200, 1)), (RecordKind.DELETE, 10_001, 0, b""),
             (RecordKind.ADD, 20_000, 3, _body(20_000, 3000)), (RecordKind.ADD, 20_001, 3, _body(20_001, 3000)),
             (RecordKind.ADD, 20_002, 3, _body(20_002, 3000))]
    with Journal(directory, file_size=FILE_SIZE, sync="none", compact_min_files=0) as journal:
        journal.load()
        active = _recycled_active_file(journal)
        start = journal.stats()["active_position"]           # after a sync: a sector boundary
        before = Path(active).read_bytes()
        journal.append_group(group)
        journal.flush()                                       # one write, start .. end
        end = journal.stats()["active_position"]
        after = Path(active).read_bytes()
        assert journal.stats()["active_file"] == active and end - start > 2 * 4096
        assert any(before[start:end]), "the group's place held the file's earlier life"
        cuts = list(range(start, end, CUT_STEP)) + [end]
        outcomes = set()
        for cut in cuts:
            copy = tmp_path / f"cut-{cut}"
            # the open journal's file pool prepares free files (.jef) meanwhile, renaming them: they hold
            # nothing a load reads, so the copy leaves them out rather than race the pool
            shutil.copytree(directory, copy, ignore=shutil.ignore_patterns("*.tmp", "*" + FREE_SUFFIX))
            Path(copy / os.path.basename(active)).write_bytes(after[:cut] + before[cut:])
            with Journal(copy, file_size=FILE_SIZE, compact_min_files=0) as reopened:
                result = reopened.load()
            records, report = result.records, result.report
            applied = [20_000 in records, 20_001 in records, 20_002 in records, 10_001 not in records,
                       len(records[10_000].updates) == 1]
            assert all(applied) or not any(applied), (cut, applied)
            assert not report.corrupt and not report.anomalies, (cut, report)
            assert all(applied) == (cut == end), (cut, applied)
            outcomes.add(all(applied))
            shutil.rmtree(copy)
        assert outcomes == {True, False}
