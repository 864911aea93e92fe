"""One test per row of the recovery decision table (docs/internals/recovery.md).

Each test builds a journal through the public API, closes it, puts the
directory in the state the row describes (by editing bytes or files the way a
crash, a disk or an operator would) and checks what load() does and reports.
"""
from __future__ import annotations

import dataclasses
import os
from contextlib import contextmanager
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from journal_engine import (CorruptRecordError, IncompatibleFormatError, Journal, RecordKind)
from journal_engine._impl import crc32c, encode_frame, scan_frames
from journal_engine.storage.journal.format import stamp_of
from journal_engine.record_format import FrameCheck
from journal_engine.storage.journal.segment_files import list_directory
from journal_engine.limits import DATA_START_BYTES

import crash_worker
from damage import flip_byte
from locations import HELPERS

# damage is also announced as a RuntimeWarning; these tests check the report instead
pytestmark = pytest.mark.filterwarnings("ignore:journal damage:RuntimeWarning")

FILE_SIZE = 256 * 1024
WORKER = str(HELPERS / "crash_worker.py")


# ----- helpers ------------------------------------------------------------------------------------
def body(record_id: int, size: int = 100, salt: int = 0) -> bytes:
    """A body of non-zero bytes (so zeroing any byte of it changes it) naming its record."""
    head = struct.pack("<QI", record_id, salt)
    return head + bytes((record_id * 7 + salt * 13 + i) % 255 + 1 for i in range(size - len(head)))


def data_files(directory) -> list:
    """Data files in replay order."""
    return list_directory(os.fspath(directory)).data


def frames(data) -> list:
    """scan_frames rows of one data file: (offset, check, kind, type, record id, tx id, body)."""
    raw = Path(data.path).read_bytes()
    return scan_frames(raw, stamp_of(data.header.file_id), data.header.data_start)


def record_frames(data) -> list:
    return [row for row in frames(data) if row[1] == FrameCheck.VALID and row[2] != RecordKind.PAD]


def files_with_records(directory) -> list:
    return [data for data in data_files(directory) if record_frames(data)]


def clean_end(data) -> int:
    """Where the file's valid data ends (the offset of the scan's last row)."""
    return frames(data)[-1][0]


def write_at(path: str, offset: int, raw: bytes) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(raw)


def append_frames(directory, specs: list) -> tuple[str, int]:
    """Write raw frames at the clean end of the last file holding records, stamped for that file;
    specs are (kind, user type, record id, tx id, body). Returns (path, offset of the first)."""
    data = files_with_records(directory)[-1]
    offset = clean_end(data)
    raw = b"".join(encode_frame(kind, user_type, stamp_of(data.header.file_id), record_id, tx_id, payload)
                   for kind, user_type, record_id, tx_id, payload in specs)
    write_at(data.path, offset, raw)
    return data.path, offset


@contextmanager
def loaded_journal(directory, *, file_size: int = FILE_SIZE, sync: str = "none", **options):
    """The journal in ``directory``, opened and loaded; closed on leaving the block."""
    with Journal(directory, file_size=file_size, sync=sync, **options) as journal:
        journal.load()
        yield journal


def build(directory, count: int, *, sync: str = "none", size: int = 100, **options) -> dict[int, bytes]:
    """`count` records added and closed; returns id -> body."""
    expected = {}
    with loaded_journal(directory, sync=sync, **options) as journal:
        for record_id in range(count):
            expected[record_id] = body(record_id, size)
            journal.add(record_id, 1, expected[record_id])
    return expected


def reopen(directory, **options):
    """Load the directory in a fresh Journal, close it; returns the LoadResult."""
    with Journal(directory, file_size=FILE_SIZE, **options) as journal:
        return journal.load()


def bodies(result) -> dict[int, bytes]:
    return {rid: rec.body for rid, rec in result.records.items()}


def assert_clean(report) -> None:
    assert not report.torn_tail_truncated and report.torn_tail is None
    assert report.corrupt == [] and report.anomalies == [] and report.rolled_back == []


def assert_one_corrupt(report, path: str, offset: int, reason: str) -> None:
    """The load reported one damaged region, at ``offset`` of ``path``, saying ``reason``; no torn tail cut."""
    assert not report.torn_tail_truncated
    assert [(p, o) for p, o, _ in report.corrupt] == [(path, offset)]
    assert reason in report.corrupt[0][2]


def without(expected: dict[int, bytes], record_id: int) -> dict[int, bytes]:
    """The bodies expected after a load that lost ``record_id`` (the record the damage hit)."""
    return {rid: raw for rid, raw in expected.items() if rid != record_id}


def assert_no_report_on_next_load(directory, expected: dict[int, bytes]) -> None:
    result = reopen(directory)
    assert_clean(result.report)
    assert bodies(result) == expected


# ----- clean ends --------------------------------------------------------------------------------
def test_empty_directory_starts_a_journal_and_reports_nothing(journal_dir):
    result = reopen(journal_dir)
    assert_clean(result.report)
    assert result.records == {} and result.prepared == []
    names = os.listdir(journal_dir)
    assert sum(n.endswith(".jej") for n in names) >= 1
    assert sum(n.endswith((".jej", ".jef")) for n in names) >= 2      # min_files kept ready


def test_clean_end_by_zeros_is_not_reported(journal_dir):
    expected = build(journal_dir, 50)
    data = files_with_records(journal_dir)[-1]
    assert frames(data)[-1][1] == FrameCheck.ZERO
    result = reopen(journal_dir)
    assert_clean(result.report)
    assert bodies(result) == expected


def test_a_sealed_files_end_is_marked_so_earlier_bytes_never_read_as_its_damage(journal_dir):
    """A recycled file keeps its earlier life's bytes past the new data, and a body there can hold this
    file's stamp (a small number, like the record ids and sequence numbers in it) where the scan reads
    the stamp of the next frame header: read as a damaged frame of this file, followed by later files,
    a clean journal was reported damaged and compaction refused it (found by the crash campaign). The
    file switch now writes a zero header after the last frame (E1)."""
    with loaded_journal(journal_dir, sync="always", compact_min_files=0) as journal:
        journal.add(0, 1, body(0))
        first = Path(journal.stats()["active_file"])
        stamp = stamp_of(int(first.name[8:24], 16))
        # the earlier life, planted over the file's unused part: every 8-aligned 32 bytes read as a
        # header of this file (the stamp at its place) with garbage around it
        written = scan_frames(first.read_bytes(), stamp, DATA_START_BYTES)[-1][0]
        with open(first, "r+b") as handle:
            handle.seek(written)
            handle.write(struct.pack("<II", 0x93E3EB94, stamp) * ((FILE_SIZE - written) // 8))
        expected = {0: body(0)}
        record_id = 1
        while Path(journal.stats()["active_file"]) == first:     # fill it: the switch seals it
            expected[record_id] = body(record_id, 1000)
            journal.add(record_id, 1, expected[record_id], sync=False)
            record_id += 1
        for later in range(record_id, record_id + 5):              # data in the next file
            expected[later] = body(later)
            journal.add(later, 1, expected[later])
    result = reopen(journal_dir)
    assert_clean(result.report)
    assert bodies(result) == expected


def test_clean_end_by_bytes_of_a_recycled_file_is_not_reported(journal_dir):
    """A reclaimed file keeps its old frames; stamped for its old id, they end the new data."""
    expected = {}
    with loaded_journal(journal_dir, compact_min_files=0) as journal:
        for record_id in range(700):                       # about three files of 1 KiB records
            journal.add(record_id, 1, body(record_id, 1000))
        for record_id in range(700):
            journal.delete(record_id)
        journal.compact()                                  # the old files become free (recycled) files
        assert any(name.endswith(".jef") for name in os.listdir(journal_dir))
        record_id = 10_000
        recycled_active = False
        seen = set()
        for _ in range(4000):
            expected[record_id] = body(record_id, 1000)
            journal.add(record_id, 2, expected[record_id])
            record_id += 1
            active = journal.stats()["active_file"]
            if active in seen:
                continue
            seen.add(active)
            journal.sync()
            stamp = stamp_of(int(Path(active).name[8:24], 16))
            if scan_frames(Path(active).read_bytes(), stamp, DATA_START_BYTES)[-1][1] == FrameCheck.FOREIGN:
                recycled_active = True
                break
        assert recycled_active, "no recycled file became the active file"
    data = files_with_records(journal_dir)[-1]
    assert frames(data)[-1][1] == FrameCheck.FOREIGN          # still there after close
    result = reopen(journal_dir)
    assert_clean(result.report)
    assert bodies(result) == expected


# ----- torn tail and damage ----------------------------------------------------------------------
def test_torn_tail_of_the_last_file_is_zeroed_and_reported(journal_dir):
    expected = build(journal_dir, 40)
    data = files_with_records(journal_dir)[-1]
    offset, *_ = record_frames(data)[-1]
    # the last record lost the end of its body, and the sync's pad after it never reached the disk
    write_at(data.path, offset + 40, bytes(data.size - offset - 40))
    del expected[39]
    result = reopen(journal_dir)
    assert result.report.torn_tail_truncated
    assert result.report.torn_tail == (data.path, offset)
    assert result.report.corrupt == []
    assert bodies(result) == expected
    assert Path(data.path).read_bytes()[offset:].strip(b"\0") != b""   # new data (the seal) follows
    assert_no_report_on_next_load(journal_dir, expected)


def test_damaged_frame_followed_by_valid_frames_is_reported_and_nothing_is_truncated(journal_dir):
    expected = build(journal_dir, 40)
    data = files_with_records(journal_dir)[-1]
    offset, _c, _k, _t, damaged_id, _tx, _b = record_frames(data)[10]
    flip_byte(data.path, offset + 50, 0x10)
    raw = Path(data.path).read_bytes()
    result = reopen(journal_dir)
    assert_one_corrupt(result.report, data.path, offset, "damaged frame")
    assert bodies(result) == without(expected, damaged_id)   # the 29 records after it are all there
    after = Path(data.path).read_bytes()
    end = clean_end_of_bytes(raw, data)
    assert after[:end] == raw[:end]                          # nothing before the old end rewritten


def clean_end_of_bytes(raw: bytes, data) -> int:
    return scan_frames(raw, stamp_of(data.header.file_id), data.header.data_start)[-1][0]


def test_zero_gap_followed_by_valid_frames_is_reported(journal_dir):
    expected = build(journal_dir, 40)
    data = files_with_records(journal_dir)[-1]
    offset, _c, _k, _t, record_id, _tx, payload = record_frames(data)[5]
    write_at(data.path, offset, bytes(32 + len(payload)))
    result = reopen(journal_dir)
    assert_one_corrupt(result.report, data.path, offset, "unwritten gap")
    assert bodies(result) == without(expected, record_id)


def test_foreign_bytes_followed_by_valid_frames_are_reported(journal_dir):
    expected = build(journal_dir, 40)
    data = files_with_records(journal_dir)[-1]
    offset, _c, _k, _t, record_id, _tx, payload = record_frames(data)[5]
    foreign = encode_frame(RecordKind.ADD, 1, stamp_of(data.header.file_id) ^ 0x5A5A, record_id, 0, payload)
    write_at(data.path, offset, foreign)
    result = reopen(journal_dir)
    assert_one_corrupt(result.report, data.path, offset, "another file id")
    assert bodies(result) == without(expected, record_id)


def test_damaged_end_of_a_file_that_is_not_the_last_is_reported_as_corrupt(journal_dir):
    expected = build(journal_dir, 600, size=1000)            # about three files
    files = files_with_records(journal_dir)
    assert len(files) >= 2
    first = files[0]
    offset, _c, _k, _t, record_id, _tx, _b = record_frames(first)[-1]
    flip_byte(first.path, offset + 40, 0x01)
    raw = Path(first.path).read_bytes()
    result = reopen(journal_dir)
    assert_one_corrupt(result.report, first.path, offset, "followed by later files")
    assert bodies(result) == without(expected, record_id)
    assert Path(first.path).read_bytes() == raw              # the damaged file is not rewritten


def test_empty_data_files_after_the_last_one_with_data_become_ready_files(journal_dir):
    expected = build(journal_dir, 10)
    listing = data_files(journal_dir)
    with_data = files_with_records(journal_dir)
    empty = [d for d in listing if not record_frames(d)]
    assert empty and empty[0].header.sequence > with_data[-1].header.sequence
    with Journal(journal_dir, file_size=FILE_SIZE, sync="none") as journal:
        result = journal.load()
        assert_clean(result.report)
        assert bodies(result) == expected
        stats = journal.stats()
        assert stats["data_files"] == len(with_data)
        assert stats["ready_files"] >= 1
        # the writer's next file is the first empty data file, not a new one
        for record_id in range(100, 400):
            journal.add(record_id, 1, body(record_id, 1000))
            if journal.stats()["active_file"] != with_data[-1].path:
                break
        assert journal.stats()["active_file"] == empty[0].path


def test_empty_data_file_of_another_file_size_is_reclaimed_as_free(journal_dir):
    expected = {}
    with loaded_journal(journal_dir, file_size=FILE_SIZE * 2) as journal:        # reopened below at FILE_SIZE
        for record_id in range(10):
            expected[record_id] = body(record_id, 100)
            journal.add(record_id, 1, expected[record_id])
    empty = [d for d in data_files(journal_dir) if not record_frames(d)][0]
    assert empty.size == FILE_SIZE * 2
    result = reopen(journal_dir)
    assert_clean(result.report)
    assert bodies(result) == expected
    assert not os.path.exists(empty.path)
    assert [d.size for d in data_files(journal_dir) if not record_frames(d)] == [FILE_SIZE]


# ----- transactions ------------------------------------------------------------------------------
def test_incomplete_transaction_is_rolled_back_and_a_rollback_record_appended(journal_dir):
    with loaded_journal(journal_dir) as journal:
        journal.add(1, 1, body(1))
        journal.add_tx(77, 2, 1, body(2))
        journal.update_tx(77, 1, 3, body(1, salt=1))
    result = reopen(journal_dir)
    assert result.report.rolled_back == [77]
    assert bodies(result) == {1: body(1)} and result.records[1].updates == []
    assert result.prepared == []
    last = files_with_records(journal_dir)[-1]
    assert [(r[2], r[5]) for r in record_frames(last)][-1] == (RecordKind.ROLLBACK, 77)
    assert_no_report_on_next_load(journal_dir, {1: body(1)})   # rolled back once, for good


def test_prepared_transaction_is_returned_and_not_applied(journal_dir):
    with loaded_journal(journal_dir) as journal:
        journal.add(1, 1, body(1))
        journal.add_tx(5, 2, 4, body(2))
        journal.delete_tx(5, 1)
        journal.prepare(5, b"xid-5")
    with Journal(journal_dir, file_size=FILE_SIZE) as journal:
        result = journal.load()
        assert_clean(result.report)
        assert bodies(result) == {1: body(1)}
        [tx] = result.prepared
        assert (tx.tx_id, tx.xid) == (5, b"xid-5")
        assert [(r.kind, r.record_id, r.record_type, r.body) for r in tx.records] == [
            ("add", 2, 4, body(2)), ("delete", 1, 0, b"")]
        journal.commit(5)                                   # the caller decides
    result = reopen(journal_dir)
    assert bodies(result) == {2: body(2)} and result.prepared == []


def test_committed_transaction_is_applied_and_rolled_back_one_dropped(journal_dir):
    with loaded_journal(journal_dir) as journal:
        journal.add(1, 1, body(1))
        journal.add_tx(5, 2, 1, body(2))
        journal.update_tx(5, 1, 9, body(1, salt=5))
        journal.commit(5)
        journal.add_tx(6, 3, 1, body(3))
        journal.delete_tx(6, 1)
        journal.rollback(6)
    result = reopen(journal_dir)
    assert_clean(result.report)
    assert bodies(result) == {1: body(1), 2: body(2)}
    assert result.records[1].updates == [(9, body(1, salt=5))]


def test_commit_whose_record_count_does_not_match_is_reported_and_discarded(journal_dir):
    build(journal_dir, 3)
    path, offset = append_frames(journal_dir, [
        (RecordKind.ADD_TX, 1, 100, 8, body(100)),
        (RecordKind.ADD_TX, 1, 101, 8, body(101)),
        (RecordKind.COMMIT, 0, 0, 8, struct.pack("<I", 3)),     # says 3 records, 2 were written
    ])
    result = reopen(journal_dir)
    commit_offset = offset + 2 * len(encode_frame(RecordKind.ADD_TX, 1, 0, 100, 8, body(100)))
    assert_one_corrupt(result.report, path, commit_offset, "committed with 3 records, 2 found")
    assert set(result.records) == {0, 1, 2}
    assert result.prepared == [] and result.report.rolled_back == []


def test_prepare_whose_record_count_does_not_match_is_reported_and_not_returned(journal_dir):
    build(journal_dir, 3)
    path, offset = append_frames(journal_dir, [
        (RecordKind.ADD_TX, 1, 100, 8, body(100)),
        (RecordKind.PREPARE, 0, 0, 8, struct.pack("<I", 2) + b"xid"),
    ])
    result = reopen(journal_dir)
    prepare_offset = offset + len(encode_frame(RecordKind.ADD_TX, 1, 0, 100, 8, body(100)))
    assert_one_corrupt(result.report, path, prepare_offset, "prepared with 2 records, 1 found")
    assert result.prepared == [] and set(result.records) == {0, 1, 2}


def test_commit_or_rollback_of_an_unknown_transaction_is_ignored(journal_dir):
    expected = build(journal_dir, 3)
    append_frames(journal_dir, [
        (RecordKind.COMMIT, 0, 0, 404, struct.pack("<I", 2)),
        (RecordKind.ROLLBACK, 0, 0, 405, b""),
    ])
    result = reopen(journal_dir)
    assert_clean(result.report)
    assert bodies(result) == expected


# ----- legal-looking but inconsistent frames ------------------------------------------------------
def test_update_of_a_record_that_is_not_live_is_an_anomaly(journal_dir):
    expected = build(journal_dir, 3)
    path, offset = append_frames(journal_dir, [(RecordKind.UPDATE, 2, 999, 0, body(999))])
    result = reopen(journal_dir)
    assert result.report.corrupt == []
    assert [(p, o) for p, o, _ in result.report.anomalies] == [(path, offset)]
    assert "update of record 999, which is not live" in result.report.anomalies[0][2]
    assert bodies(result) == expected


def test_add_of_a_record_that_is_already_live_is_an_anomaly_and_the_later_add_wins(journal_dir):
    expected = build(journal_dir, 3)
    path, offset = append_frames(journal_dir, [(RecordKind.ADD, 2, 1, 0, body(1, salt=9))])
    result = reopen(journal_dir)
    assert [(p, o) for p, o, _ in result.report.anomalies] == [(path, offset)]
    assert "already live" in result.report.anomalies[0][2]
    expected[1] = body(1, salt=9)
    assert bodies(result) == expected


def test_transactional_update_of_a_record_that_is_not_live_is_an_anomaly(journal_dir):
    expected = build(journal_dir, 3)
    path, offset = append_frames(journal_dir, [
        (RecordKind.UPDATE_TX, 2, 999, 12, body(999)),
        (RecordKind.COMMIT, 0, 0, 12, struct.pack("<I", 1)),
    ])
    result = reopen(journal_dir)
    assert result.report.corrupt == []
    assert len(result.report.anomalies) == 1
    assert result.report.anomalies[0][0] == path
    assert "transactional update of record 999" in result.report.anomalies[0][2]
    assert bodies(result) == expected


def test_delete_of_a_record_that_is_not_live_is_ignored(journal_dir):
    """Legal: compaction drops a record's add while its delete stays in a later file."""
    expected = build(journal_dir, 3)
    append_frames(journal_dir, [(RecordKind.DELETE, 0, 999, 0, b"")])
    result = reopen(journal_dir)
    assert_clean(result.report)
    assert bodies(result) == expected


# ----- file headers and names --------------------------------------------------------------------
def _three_records_first_file(directory):
    """A journal of three records, closed; returns its first data file (the one a test damages)."""
    build(directory, 3)
    return files_with_records(directory)[0]


def _load_error(directory, error: type[Exception] = CorruptRecordError) -> Exception:
    """The ``error`` that loading the damaged directory raises."""
    with pytest.raises(error) as caught:
        reopen(directory)
    return caught.value


def test_bad_magic_raises_corrupt_record_error_with_path_offset_and_hint(journal_dir):
    data = _three_records_first_file(journal_dir)
    write_at(data.path, 0, b"NOTAJRNL")
    error = _load_error(journal_dir)
    assert (error.path, error.offset, error.field) == (data.path, 0, "magic")
    assert error.hint


def test_bad_header_checksum_raises_corrupt_record_error(journal_dir):
    data = _three_records_first_file(journal_dir)
    write_at(data.path, 24, struct.pack("<Q", data.header.sequence + 1000))    # sequence, crc not fixed
    error = _load_error(journal_dir)
    assert (error.path, error.field) == (data.path, "header_crc")
    assert error.hint


def test_other_format_version_raises_incompatible_format_error(journal_dir):
    data = _three_records_first_file(journal_dir)
    header = bytearray(Path(data.path).read_bytes()[:64])
    header[8:12] = struct.pack("<I", 99)
    header[60:64] = struct.pack("<I", crc32c(bytes(header[:60])))
    write_at(data.path, 0, bytes(header))
    error = _load_error(journal_dir, IncompatibleFormatError)
    assert (error.path, error.offset, error.field) == (data.path, 8, "format_version")
    assert "99" in str(error) and error.hint


def test_truncated_header_raises_corrupt_record_error(journal_dir):
    data = _three_records_first_file(journal_dir)
    os.truncate(data.path, 40)
    error = _load_error(journal_dir)
    assert (error.path, error.field) == (data.path, "header")
    assert error.hint


def test_data_file_cut_short_raises_corrupt_record_error(journal_dir):
    data = _three_records_first_file(journal_dir)
    os.truncate(data.path, 2000)
    error = _load_error(journal_dir)
    assert (error.path, error.field) == (data.path, "file_size")


def test_two_data_files_with_the_same_sequence_raise_corrupt_record_error(journal_dir):
    build(journal_dir, 600, size=1000)
    first, second = files_with_records(journal_dir)[:2]
    write_at(second.path, 0, dataclasses.replace(second.header, sequence=first.header.sequence).encode(crc32c))
    error = _load_error(journal_dir)
    assert error.field == "sequence"
    assert error.path in (first.path, second.path)
    assert error.hint


def test_leftover_tmp_files_are_deleted(journal_dir):
    expected = build(journal_dir, 3)
    leftover = journal_dir / "journal-00000000000000ff.jef.tmp"
    leftover.write_bytes(b"\0" * 4096)
    control_tmp = journal_dir / "compaction.ctl.tmp"
    control_tmp.write_bytes(b"{half")
    result = reopen(journal_dir)
    assert_clean(result.report)
    assert bodies(result) == expected
    assert not leftover.exists() and not control_tmp.exists()


def test_foreign_files_are_left_alone(journal_dir):
    expected = build(journal_dir, 3)
    (journal_dir / "README.txt").write_text("operator notes")
    (journal_dir / "journal-backup.jej.bak").write_bytes(b"junk")
    result = reopen(journal_dir)
    assert_clean(result.report)
    assert bodies(result) == expected
    assert (journal_dir / "README.txt").read_text() == "operator notes"
    assert (journal_dir / "journal-backup.jej.bak").read_bytes() == b"junk"


# ----- interrupted compaction ---------------------------------------------------------------------
def _compaction_child(directory, phase: str, crash_at: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("JOURNAL_ENGINE_CRASH_AT", None)
    if crash_at:
        env["JOURNAL_ENGINE_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, WORKER, "compact", os.fspath(directory), phase], env=env,
                          capture_output=True, text=True, timeout=60)


def _load_compaction_journal(directory):
    with Journal(directory, file_size=FILE_SIZE, compact_min_files=0,
                 replaceable_types=crash_worker.COMPACTION_REPLACEABLE) as journal:
        return journal.load()


def _state(result):
    records = {rid: (rec.record_type, rec.body, list(rec.updates)) for rid, rec in result.records.items()}
    prepared = {tx.tx_id: (tx.xid, [(r.kind, r.record_id, r.record_type, r.body) for r in tx.records])
                for tx in result.prepared}
    return records, prepared


def test_compaction_control_file_means_the_interrupted_compaction_is_finished(journal_dir):
    assert _compaction_child(journal_dir, "build").returncode == 0
    crashed = _compaction_child(journal_dir, "compact", "compact-control-written")
    assert crashed.returncode == 137, crashed.stderr
    names = os.listdir(journal_dir)
    assert "compaction.ctl" in names and any(n.endswith(".jec") for n in names)
    result = _load_compaction_journal(journal_dir)
    assert_clean(result.report)
    assert _state(result) == crash_worker.expected_compaction_state(compacted=True)
    names = os.listdir(journal_dir)
    assert "compaction.ctl" not in names and not any(n.endswith(".jec") for n in names)


def test_compaction_outputs_without_a_control_file_are_deleted(journal_dir):
    assert _compaction_child(journal_dir, "build").returncode == 0
    crashed = _compaction_child(journal_dir, "compact", "compact-outputs-written")
    assert crashed.returncode == 137, crashed.stderr
    names = os.listdir(journal_dir)
    assert "compaction.ctl" not in names and any(n.endswith(".jec") for n in names)
    result = _load_compaction_journal(journal_dir)
    assert_clean(result.report)
    assert _state(result) == crash_worker.expected_compaction_state(compacted=False)
    assert not any(n.endswith(".jec") for n in os.listdir(journal_dir))


def test_damaged_compaction_control_file_raises_corrupt_record_error(journal_dir):
    expected = build(journal_dir, 3)
    control = journal_dir / "compaction.ctl"
    control.write_bytes(b'{"outputs": [], "replaced": []}\n12345')
    error = _load_error(journal_dir)
    assert (error.path, error.field) == (str(control), "control")
    assert error.hint
    control.unlink()
    assert bodies(reopen(journal_dir)) == expected
