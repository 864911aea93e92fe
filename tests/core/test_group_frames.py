"""Record groups against power loss: a group is one unit on disk (format version 3), not only in the
buffer. A power cut may keep any sector of the write that carried a group and lose another (or tear
it at 512 B); every reader checks the group whole (its GROUP frame's member count, length and CRC32C)
before applying any of its records, so a group is recovered whole or not at all.

Each test tears a group's write the way a power cut can, in the file itself, and loads. On the
format before group frames (version 2) each of these recovered the surviving part of the group.
"""
from __future__ import annotations

import os

import pytest

from journal_engine import Journal
from journal_engine._impl import encode_frame, encode_group, scan_columns
from journal_engine.limits import SECTOR_SIZE_BYTES
from journal_engine.record_format import FrameCheck, RecordKind
from journal_engine.storage.journal.scan import scan_directory
from locations import GOLDEN

ADD, UPDATE, DELETE = RecordKind.ADD, RecordKind.UPDATE, RecordKind.DELETE
SECTOR = SECTOR_SIZE_BYTES
BIG = 3 * SECTOR          # a member body spanning sectors: the group's write covers several


def write_group_after_synced_record(directory) -> tuple[str, int, int]:
    """Record 1 synced, then one group (record 2 small, record 3 large, an update of record 1) synced
    as one write; (data file, where the group's write starts, where its last member ends). The write
    goes on to the next sector boundary with the sync's PAD frame."""
    with Journal(directory, sync="always") as journal:
        journal.load()
        journal.add(1, 7, b"durable before the group")
        journal.append_group([(ADD, 2, 7, b"small first member"), (ADD, 3, 7, bytes(range(256)) * (BIG // 256)),
                              (UPDATE, 1, 8, b"last member")])
    (scan,) = [scan for scan in scan_directory(directory) if len(scan.columns)]
    cols = scan.columns
    rows = [row for row in range(cols.count) if cols.record_id[row] == 2 and cols.kind[row] == ADD]
    # a sync pads to a sector boundary, so the group's write is the one starting at the next boundary
    start = cols.offset[rows[0]] // SECTOR * SECTOR
    last = max(row for row in range(cols.count) if cols.record_id[row] == 1)
    end = cols.offset[last] + cols.size[last]
    assert end - start > 2 * SECTOR
    return scan.path, start, end


def write_end(end: int) -> int:
    """Where the sync's write that ended its frames at `end` ends: its PAD reaches the next sector."""
    return -(-end // SECTOR) * SECTOR


def zero(path: str, start: int, end: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(start)
        handle.write(bytes(end - start))


def load(directory):
    """(live records by id, load report) of a load of `directory`."""
    with Journal(directory) as journal:
        result = journal.load()
        return dict(result.records), result.report


def test_whole_group_is_recovered_with_its_group_frame(tmp_path):
    write_group_after_synced_record(tmp_path)
    records, report = load(tmp_path)
    assert sorted(records) == [1, 2, 3]
    assert [update[0] for update in records[1].updates] == [8]
    assert report.clean


def test_power_cut_keeping_only_the_first_sector_of_a_group_recovers_none_of_it(tmp_path):
    """The first sector (the group's first member whole, the next one begun) reached the disk, the
    rest of the write did not: a torn tail, erased, and none of the group applied."""
    path, start, end = write_group_after_synced_record(tmp_path)
    zero(path, start + SECTOR, write_end(end))
    records, report = load(tmp_path)
    assert sorted(records) == [1] and records[1].updates == []
    assert report.torn_tail_truncated and report.torn_tail == (path, start)
    records, report = load(tmp_path)          # erased: the next load finds a clean journal
    assert sorted(records) == [1] and report.clean


@pytest.mark.parametrize("tear_bytes", [512, SECTOR])
def test_power_cut_losing_the_first_sector_of_a_group_keeps_none_of_the_later_ones(tmp_path, tear_bytes):
    """Sectors written out of order: the group's later sectors (whole member frames among them, and
    the sync's PAD frame) reached the disk, its first 512 B or 4 KiB did not. Valid frames (the PAD)
    follow the damage, so it is reported as damage; none of the group is applied."""
    path, start, end = write_group_after_synced_record(tmp_path)
    zero(path, start, start + tear_bytes)
    with pytest.warns(RuntimeWarning, match="unwritten gap"):
        records, report = load(tmp_path)
    assert sorted(records) == [1] and records[1].updates == []
    assert [entry[1] for entry in report.corrupt] == [start]


def test_power_cut_losing_the_first_sector_and_the_pad_of_a_group_write_is_a_torn_tail(tmp_path):
    path, start, end = write_group_after_synced_record(tmp_path)
    zero(path, start, start + SECTOR)
    zero(path, end, write_end(end))
    records, report = load(tmp_path)
    assert sorted(records) == [1] and records[1].updates == []
    assert report.torn_tail_truncated and report.torn_tail == (path, start) and not report.corrupt
    records, report = load(tmp_path)          # the surviving members were erased with the tail
    assert sorted(records) == [1] and report.clean


def test_power_cut_tearing_the_last_sector_of_a_group_recovers_none_of_it(tmp_path):
    path, start, end = write_group_after_synced_record(tmp_path)
    zero(path, end - 512, write_end(end))
    records, report = load(tmp_path)
    assert sorted(records) == [1] and records[1].updates == []
    assert report.torn_tail_truncated


def test_torn_group_followed_by_later_records_is_damage_and_the_later_records_apply(tmp_path):
    """A group torn in the middle of a file (later sectors of the file written) is damage, reported;
    none of it is applied, and what follows it is."""
    path, start, end = write_group_after_synced_record(tmp_path)
    with Journal(tmp_path, sync="always") as journal:
        journal.load()
        journal.add(4, 7, b"after the group")
    zero(path, start + SECTOR, start + 2 * SECTOR)
    with pytest.warns(RuntimeWarning, match="damaged frame"):
        records, report = load(tmp_path)
    assert sorted(records) == [1, 4] and records[1].updates == []
    assert [entry[1] for entry in report.corrupt] == [start] and not report.torn_tail_truncated


def test_group_whose_member_bytes_are_another_valid_frame_fails_its_checksum():
    """A member sector left from an earlier write (same file, same stamp, valid frames of the same
    size) passes every frame check; the group's CRC32C over its members does not."""
    stamp = 5
    group = bytearray(encode_group(stamp, [(ADD, 1, 9, b"a" * 40), (UPDATE, 1, 9, b"b" * 40)]))
    other = encode_group(stamp, [(ADD, 1, 9, b"a" * 40), (UPDATE, 1, 9, b"c" * 40)])
    second = len(group) - (len(group) - 48) // 2
    group[second:] = other[second:]
    buffer = bytes(64) + bytes(group) + encode_frame(ADD, 9, stamp, 2, 0, b"after") + bytes(64)
    cols = scan_columns(buffer, stamp, 64)
    assert [cols.check[row] for row in range(cols.count)] == [FrameCheck.INVALID, FrameCheck.VALID]
    assert cols.record_id[1] == 2
    intact = bytes(64) + encode_group(stamp, [(ADD, 1, 9, b"a" * 40), (UPDATE, 1, 9, b"b" * 40)]) + bytes(64)
    cols = scan_columns(intact, stamp, 64)
    assert [cols.kind[row] for row in range(cols.count)] == [RecordKind.GROUP, ADD, UPDATE]
    assert cols.end_check == FrameCheck.ZERO


def test_member_frame_without_its_group_frame_is_never_applied():
    stamp = 5
    group = encode_group(stamp, [(ADD, 1, 9, b"a" * 40), (ADD, 2, 9, b"b" * 40)])
    members_only = bytes(64) + bytes(48) + group[48:] + bytes(64)
    cols = scan_columns(members_only, stamp, 64)
    assert cols.count == 0 and cols.end_offset == 64 and cols.end_check == FrameCheck.INVALID


def test_group_frame_of_a_group_counting_more_members_than_follow_is_torn():
    stamp = 5
    group = encode_group(stamp, [(ADD, 1, 9, b"a" * 40), (ADD, 2, 9, b"b" * 40)])
    first_only = bytes(64) + group[:48 + 80] + bytes(256)
    cols = scan_columns(first_only, stamp, 64)
    assert cols.count == 0 and cols.end_check == FrameCheck.INVALID


def test_power_cut_dropping_an_early_frame_of_a_transaction_but_keeping_its_commit_discards_it(tmp_path):
    """Transactions carry the same guard as groups: COMMIT holds the transaction's record count,
    so a commit whose earlier records a power cut lost applies nothing (reported as damage)."""
    with Journal(tmp_path, sync="always") as journal:
        journal.load()
        journal.add(1, 7, b"durable")
        journal.add_tx(9, 2, 7, b"x" * BIG)
        journal.add_tx(9, 3, 7, b"y" * 100)
        journal.commit(9)
    (scan,) = [scan for scan in scan_directory(tmp_path) if len(scan.columns)]
    cols = scan.columns
    first = [row for row in range(cols.count) if cols.record_id[row] == 2][0]
    zero(scan.path, cols.offset[first], cols.offset[first] + SECTOR)
    with pytest.warns(RuntimeWarning) as warned:
        records, report = load(tmp_path)
    assert any("committed with 2 records, 1 found" in str(warning.message) for warning in warned)
    assert sorted(records) == [1]
    assert any("committed with 2 records, 1 found" in entry[2] for entry in report.corrupt)


def test_format_version_2_journal_is_continued_in_a_new_version_3_file(tmp_path):
    """A version-2 reader would misread group frames, so they never go into a version-2 file."""
    import shutil

    from journal_engine.storage.journal.format import FORMAT_VERSION
    golden = GOLDEN / "format-v2"
    shutil.copytree(golden, tmp_path / "j")
    with Journal(tmp_path / "j", file_size=64 * 1024, sync="none", min_files=2) as journal:
        journal.load()
        journal.append_group([(ADD, 500, 7, b"a"), (ADD, 501, 7, b"b")], sync=True)
    versions = {}
    for scan in scan_directory(tmp_path / "j"):
        kinds = {scan.columns.kind[row] for row in range(scan.columns.count)}
        versions[os.path.basename(scan.path)] = (scan.header.version, RecordKind.GROUP in kinds)
    assert (FORMAT_VERSION, True) in versions.values()
    assert all(version == FORMAT_VERSION for version, has_group in versions.values() if has_group)


def test_verify_and_print_show_a_torn_group_as_a_torn_tail_and_none_of_its_records(tmp_path, capsys):
    """The tools read through the same decoder: the torn group is where the torn tail begins, and
    `print` shows no record of it."""
    import json

    from journal_engine.cli import main
    path, start, end = write_group_after_synced_record(tmp_path)
    zero(path, start + SECTOR, write_end(end))
    capsys.readouterr()
    assert main(["verify", str(tmp_path), "--json"]) == 1
    (problem,) = json.loads(capsys.readouterr().out)["problems"]
    assert (problem["path"], problem["offset"]) == (path, start) and problem["problem"].startswith("torn tail")
    assert main(["print", str(tmp_path), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line.get("record_id") for line in lines if "kind" in line] == [1]
    assert [(line["offset"], line["check"]) for line in lines if "check" in line] == [(start, "INVALID")]


def test_compaction_rewrites_grouped_records_as_plain_frames_that_load_the_same(tmp_path):
    """Compaction writes no groups (its outputs become data whole, when its control file commits):
    the live records of groups come out as plain frames, never as members without their GROUP frame."""
    with Journal(tmp_path, file_size=64 * 1024, sync="none", compact_min_files=0) as journal:
        journal.load()
        for index in range(300):
            journal.append_group([(ADD, index, 45, bytes([index % 256]) * 200), (UPDATE, index, 32, b"q" * 8)]
                                 + ([(DELETE, index - 1, 0, b"")] if index % 2 else []))
        journal.sync()
        journal.compact()
    records, report = load(tmp_path)
    assert report.clean and sorted(records) == [index for index in range(300) if index % 2]
    assert all(records[index].updates == [(32, b"q" * 8)] for index in records)
    compacted = [scan for scan in scan_directory(tmp_path) if scan.header.flags & 1]
    assert compacted and all(scan.columns.kind[row] != RecordKind.GROUP
                             for scan in compacted for row in range(scan.columns.count))


@pytest.mark.twin
def test_a_replay_scan_counts_group_frames_instead_of_making_rows(tmp_path):
    """Recovery's scan makes no row of a GROUP frame (groups=False): the same rows as a full scan but
    those, the groups counted, in the compiled core and the twin alike; load() reports every frame read."""
    from journal_engine import _scan
    from journal_engine._twin import scan as twin_scan
    from journal_engine.storage.journal.format import stamp_of
    from journal_engine.storage.journal.segment_files import list_directory
    with Journal(tmp_path, sync="none") as journal:
        journal.load()
        for index in range(1, 200):
            journal.append_group([(ADD, index, 45, bytes([index % 256]) * 100), (UPDATE, index, 32, b"q" * 8)])
            if index % 3 == 0:
                journal.add(10_000 + index, 7, b"alone")
    frames = 0
    for data in list_directory(str(tmp_path)).data:
        raw = open(data.path, "rb").read()
        stamp, start = stamp_of(data.header.file_id), data.header.data_start
        full = _scan.scan_columns(raw, stamp, start)
        kept = [row for row in range(full.count) if full.kind[row] != RecordKind.GROUP]
        frames += full.count
        for module in (_scan, twin_scan):
            cols = module.scan_columns(raw, stamp, start, groups=False)
            assert cols.groups_skipped == full.count - len(kept)
            assert [(cols.offset[row], cols.kind[row], cols.record_id[row], cols.body(row)) for row in range(cols.count)] \
                == [(full.offset[row], full.kind[row], full.record_id[row], full.body(row)) for row in kept]
            assert (cols.end_offset, cols.end_check) == (full.end_offset, full.end_check)
    assert frames > 199 * 3
    with Journal(tmp_path, sync="none") as journal:
        result = journal.load()
        assert result.report.records_read == frames and len(result.records) == 199 + 66
