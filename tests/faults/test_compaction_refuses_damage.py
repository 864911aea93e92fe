"""Compaction never drops a record it cannot prove dead: a data file that another process cut short,
overwrote or removed -- while the journal is open or while it is closed -- makes compact() (and the
automatic trigger) raise CorruptRecordError naming the file, before anything is written; the damage
stays on disk for load() and `journal-engine verify` to report. Before, compaction read its sources
through a replay that skipped load's cut-short check: the records past the cut vanished and the next
load was clean."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import warnings

import pytest

from journal_engine import CorruptRecordError, Journal
from journal_engine.storage.journal.segment_files import list_directory

FILE_SIZE = 64 * 1024
RECORDS = 39
CUT_TO = 8192


def body(record_id: int) -> bytes:
    return record_id.to_bytes(4, "little") * 750          # ~3 KB: about 20 records a file


@contextlib.contextmanager
def opened(directory, **options):
    """The journal opened and loaded (load()'s warnings of the damage it reports silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with Journal(directory, sync="always", file_size=FILE_SIZE, **options) as journal:
            journal.result = journal.load()
            yield journal


@contextlib.contextmanager
def filled(directory):
    """A new journal with RECORDS records of ~3 KB over four 64 KiB files, open."""
    with opened(directory) as journal:
        for record_id in range(1, RECORDS + 1):
            journal.add(record_id, 45, body(record_id))
        yield journal


def built_and_cut(tmp_path) -> tuple:
    """A closed journal whose oldest data file another process cut to CUT_TO bytes: (directory, path)."""
    directory = tmp_path / "journal"
    with filled(directory):
        pass
    path = oldest(directory)
    cut_by_another_process(path)
    return directory, path


def oldest(directory) -> str:
    return list_directory(str(directory)).data[0].path


def cut_by_another_process(path: str, size: int = CUT_TO) -> None:
    """`truncate`, as an operator's tool (or a confused script) would do it: a real second process."""
    subprocess.run(["truncate", "-s", str(size), path], check=True)


def reload(directory):
    with opened(directory) as journal:
        return journal.result


def verify(directory) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "journal_engine", "verify", "--json", str(directory)],
                          capture_output=True, text=True, timeout=120)


def assert_cut_still_reported(directory, path: str) -> None:
    result = reload(directory)
    assert any(entry[0] == path and "cut short" in entry[2] for entry in result.report.corrupt), result.report.corrupt
    assert set(range(16, RECORDS + 1)) <= set(result.records), "records of later files were lost"
    checked = verify(directory)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    assert not report["healthy"] and any(path in json.dumps(problem) for problem in report["problems"]), report


def test_a_file_cut_while_the_journal_is_open_refuses_compaction_and_stays_reported(tmp_path):
    directory = tmp_path / "journal"
    with filled(directory) as journal:
        path = oldest(directory)
        cut_by_another_process(path)
        with pytest.raises(CorruptRecordError) as refused:
            journal.compact()
        assert refused.value.path == path and refused.value.offset == CUT_TO
        assert "cut short" in str(refused.value)
        files_before = sorted(os.listdir(directory))
        with pytest.raises(CorruptRecordError):           # again, and without rolling to a new file
            journal.compact()
        assert sorted(os.listdir(directory)) == files_before
        journal.add(RECORDS + 1, 45, body(RECORDS + 1))   # the journal keeps working
    assert_cut_still_reported(directory, path)


def test_a_file_cut_while_the_journal_is_closed_refuses_compaction_after_load_reported_it(tmp_path):
    directory, path = built_and_cut(tmp_path)
    with opened(directory) as journal:
        assert [entry[0] for entry in journal.result.report.corrupt] == [path]
        with pytest.raises(CorruptRecordError) as refused:
            journal.compact()
        assert refused.value.path == path
    assert_cut_still_reported(directory, path)


def test_the_automatic_compaction_refuses_a_cut_file_and_says_so_in_stats(tmp_path):
    directory, path = built_and_cut(tmp_path)
    with opened(directory, compact_min_files=2, compact_percentage=90) as journal:
        for record_id in range(16, RECORDS + 1):          # deletes make the trigger due
            journal.delete(record_id)
        for record_id in range(100, 160):                 # file switches fire it
            journal.add(record_id, 45, body(record_id))
            journal.delete(record_id)
            if journal._compaction_thread is not None:
                journal._compaction_thread.join()
        error = journal.stats()["last_compaction_error"]
        assert error is not None and os.path.basename(path) in error and "cut short" in error
        assert journal.compaction_count == 0
    result = reload(directory)
    assert any(entry[0] == path for entry in result.report.corrupt)
    assert 1 in result.records                            # what lies before the cut is still there


def test_a_file_overwritten_by_another_process_refuses_compaction(tmp_path):
    directory = tmp_path / "journal"
    with filled(directory) as journal:
        path = oldest(directory)
        subprocess.run(["dd", "if=/dev/urandom", f"of={path}", "bs=4096", "seek=3", "count=2", "conv=notrunc",
                        "status=none"], check=True)
        with pytest.raises(CorruptRecordError) as refused:
            journal.compact()
        assert refused.value.path == path
    result = reload(directory)
    assert any(entry[0] == path for entry in result.report.corrupt)


def test_a_file_removed_by_another_process_refuses_compaction_naming_it(tmp_path):
    directory = tmp_path / "journal"
    with filled(directory) as journal:
        path = oldest(directory)
        subprocess.run(["rm", path], check=True)
        with pytest.raises(CorruptRecordError) as refused:
            journal.compact()
        assert refused.value.path == path


def test_accept_damage_compacts_what_can_be_read(tmp_path):
    directory, path = built_and_cut(tmp_path)
    with opened(directory) as journal:
        kept = set(journal.result.records)
        journal.compact(accept_damage=True)
        assert journal.compaction_count == 1
    result = reload(directory)
    assert set(result.records) == kept
    assert result.report.corrupt == []


def test_an_undamaged_journal_still_compacts(tmp_path):
    directory = tmp_path / "journal"
    with filled(directory) as journal:
        for record_id in range(1, 30):
            journal.delete(record_id)
        journal.compact()
        assert journal.compaction_count == 1
    result = reload(directory)
    assert set(result.records) == set(range(30, RECORDS + 1)) and result.report.clean
