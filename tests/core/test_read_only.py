"""Journal(directory, read_only=True) (CONTRACT): load() and reading only; it never writes, truncates,
rolls back or creates anything — checked on every file's bytes, size and mtime — and returns what a
writing load would return."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from journal_engine import Journal, JournalClosedError, JournalError
from journal_engine.storage import durability

from read_only_journals import FILE_SIZE, build, snapshot, tear_tail


def writing_load(directory: Path, tmp_path: Path):
    copy = tmp_path / "copy-for-a-writing-load"
    shutil.copytree(directory, copy)
    with Journal(copy, file_size=FILE_SIZE) as journal:
        return journal.load()


def test_read_only_load_changes_nothing_and_returns_what_a_writing_load_returns(tmp_path):
    directory = tmp_path / "journal"
    build(directory)
    tear_tail(directory)
    (directory / "journal-00000000000000ff.jef.tmp").write_bytes(b"\0" * 4096)   # an unfinished creation
    before = snapshot(directory)
    with Journal(directory, read_only=True) as journal:
        result = journal.load()
        stats = journal.stats()
        with pytest.raises(JournalClosedError, match="read-only"):
            journal.add(1, 1, b"no")
        with pytest.raises(JournalClosedError):
            journal.sync()
        with pytest.raises(JournalError, match="read-only"):
            journal.compact()
        counts = journal.record_type_counts()
    assert snapshot(directory) == before, "a read-only journal changed the directory"
    written = writing_load(directory, tmp_path)
    assert {rid: rec.body for rid, rec in result.records.items()} == {
        rid: rec.body for rid, rec in written.records.items()}
    assert [(p.tx_id, p.xid) for p in result.prepared] == [(9, b"xid-9")]
    assert result.report.incomplete_transactions == [10] and result.report.rolled_back == []
    assert written.report.rolled_back == [10]
    assert result.report.torn_tail is not None and written.report.torn_tail is not None
    assert (os.path.basename(result.report.torn_tail[0]), result.report.torn_tail[1]) == (
        os.path.basename(written.report.torn_tail[0]), written.report.torn_tail[1])
    assert not result.report.torn_tail_truncated and not result.report.clean
    assert stats["read_only"] and stats["live_records"] == len(result.records)
    assert counts == {1: len(result.records)}


def test_read_only_reads_an_interrupted_compaction_as_finished_without_finishing_it(tmp_path):
    directory = tmp_path / "journal"
    expected = build(directory)
    with Journal(directory, file_size=FILE_SIZE, compact_min_files=0) as journal:
        journal.load()
        with durability.injected_failure("compact-control-written"):
            with pytest.raises(JournalError):
                journal.compact()
        # simulate the crash at that point: the control file stays, nothing more is done
        journal._state = "closed"   # noqa: SLF001 — stop close() from finishing anything
        journal._core_close()
        journal._pool.close()       # a crash stops the file pool's thread too: no file appears after it
        journal._directory_lock.release()
    assert (directory / "compaction.ctl").exists()
    before = snapshot(directory)
    with Journal(directory, read_only=True) as journal:
        result = journal.load()
    assert snapshot(directory) == before
    assert {rid: rec.body for rid, rec in result.records.items()} == expected
    assert result.report.corrupt == [] and result.report.anomalies == []


def test_read_only_never_creates_a_directory(tmp_path):
    missing = tmp_path / "no-such-journal"
    with pytest.raises(JournalError) as caught:
        Journal(missing, read_only=True)
    assert isinstance(caught.value, OSError) and caught.value.errno == 2
    assert not missing.exists()


def test_read_only_opens_beside_a_writer_and_takes_no_lock(tmp_path):
    directory = tmp_path / "journal"
    with Journal(directory, file_size=FILE_SIZE, sync="always") as writer:
        writer.load()
        writer.add(1, 1, b"synced")
        with Journal(directory, read_only=True) as reader:
            assert reader.load().records[1].body == b"synced"
        writer.add(2, 1, b"the writer goes on")
    assert not os.path.exists(directory / "journal.lock.tmp")


@pytest.mark.parametrize("command", ["stats", "verify", "print"])
def test_inspecting_commands_change_nothing(tmp_path, command):
    import subprocess
    import sys
    directory = tmp_path / "journal"
    build(directory)
    tear_tail(directory)
    before = snapshot(directory)
    done = subprocess.run([sys.executable, "-m", "journal_engine", command, str(directory)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode in (0, 1), done.stderr
    assert snapshot(directory) == before, f"`journal-engine {command}` changed the journal"
    missing = tmp_path / "mistyped"
    done = subprocess.run([sys.executable, "-m", "journal_engine", command, str(missing)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0 and not missing.exists()
