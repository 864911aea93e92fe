"""A journal directory holding foreign or damaged files.

Foreign names are ignored and never touched. A file that claims a journal name
but does not hold a journal file header is refused with the error the CONTRACT
names (path, offset, field and a hint), and load() changes nothing on disk, so
the evidence survives for whoever repairs it.
"""
from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest

from journal_engine import (
    CorruptRecordError,
    IncompatibleFormatError,
    Journal,
    JournalError,
)
from journal_engine._impl import crc32c
from journal_engine.limits import FILE_HEADER_SIZE_BYTES
from journal_engine.storage.journal.format import DATA_NAME, FORMAT_VERSION, MAGIC

SMALL = 64 * 1024
FOREIGN_ID_NAME = "journal-00000000000000f1.jej"   # no journal of these tests reaches file id 0xf1


def snapshot(directory: Path) -> dict[str, bytes | str]:
    """Every entry of the directory with its bytes (a subdirectory or link: its kind), by relative name."""
    out: dict[str, bytes | str] = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs:
            out[os.path.relpath(os.path.join(root, name), directory)] = "<dir>"
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, directory)
            out[rel] = f"<link {os.readlink(path)}>" if os.path.islink(path) else Path(path).read_bytes()
    return out


def make_journal(directory: Path) -> dict[int, bytes]:
    """A closed journal with a few records, spread over more than one file."""
    records = {}
    with Journal(directory, file_size=SMALL) as journal:
        journal.load()
        for rid in range(40):
            body = random.Random(rid).randbytes(rid * 97)
            journal.add(rid, 3, body)
            records[rid] = body
        journal.delete(5)
        del records[5]
    return records


def data_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if DATA_NAME.match(p.name))


def first_data_file_with_records(directory: Path) -> Path:
    for path in data_files(directory):
        if any(path.read_bytes()[FILE_HEADER_SIZE_BYTES:]):
            return path
    raise AssertionError("no data file holds a record")


def refuse_and_leave_untouched(directory: Path, error_type=CorruptRecordError) -> JournalError:
    """load() must raise error_type, change no byte of the directory, and keep refusing."""
    before = snapshot(directory)
    journal = Journal(directory, file_size=SMALL)
    try:
        with pytest.raises(error_type) as info:
            journal.load()
    finally:
        journal.close()
    after = snapshot(directory)
    after.pop("journal.lock", None)
    before.pop("journal.lock", None)
    assert after.keys() == before.keys(), "load() added or removed files of a directory it refused"
    for name in before:
        assert after[name] == before[name], f"load() changed {name} of a directory it refused"
    error = info.value
    assert isinstance(error, ValueError)   # CorruptRecordError is also a ValueError
    assert error.path is not None and os.path.dirname(error.path) == str(directory)
    assert error.offset is not None and error.offset >= 0
    assert error.field
    assert error.hint
    assert str(error.path) in str(error) and f"offset {error.offset}" in str(error)
    # a second attempt says the same, and a journal that was refused does not hold the lock
    with Journal(directory, file_size=SMALL) as again, pytest.raises(error_type):
        again.load()
    return error


def rewrite_header(path: Path, offset: int, fmt: str, value, *, fix_crc: bool) -> None:
    raw = bytearray(path.read_bytes())
    struct.pack_into(fmt, raw, offset, value)
    if fix_crc:
        struct.pack_into("<I", raw, FILE_HEADER_SIZE_BYTES - 4, crc32c(bytes(raw[:FILE_HEADER_SIZE_BYTES - 4])))
    path.write_bytes(bytes(raw))


def load_records(directory: Path) -> dict[int, bytes]:
    with Journal(directory, file_size=SMALL) as journal:
        loaded = journal.load()
        assert loaded.report.corrupt == [] and not loaded.report.torn_tail_truncated
        return {rid: rec.body for rid, rec in loaded.records.items()}


# ----- foreign names ---------------------------------------------------------------------------------------

FOREIGN = {
    "notes.txt": b"the operator's notes\n",
    "README": b"",
    "journal-1.jej": b"too short an id to be ours",
    "journal-0000000000000001.jej.bak": os.urandom(5000),
    "JOURNAL-0000000000000001.JEJ": os.urandom(100),
    "journal-000000000000000g.jej": os.urandom(100),   # not hex
    "journal-0000000000000001.jefx": os.urandom(100),
    "notes.tmp": b"a tmp file that is not one of the journal's",
    "compaction.ctl.bak": b"{}",
}


def test_foreign_names_are_ignored_and_left_untouched(journal_dir):
    records = make_journal(journal_dir)
    for name, content in FOREIGN.items():
        (journal_dir / name).write_bytes(content)
    (journal_dir / "subdir").mkdir()
    (journal_dir / "subdir" / "journal-0000000000000002.jej").write_bytes(b"not in the journal's directory")
    (journal_dir / "link-to-nowhere").symlink_to("/nonexistent/target")
    foreign_before = {k: v for k, v in snapshot(journal_dir).items()
                      if k in FOREIGN or k.startswith("subdir") or k == "link-to-nowhere"}

    with Journal(journal_dir, file_size=SMALL, compact_min_files=0) as journal:
        loaded = journal.load()
        assert {rid: rec.body for rid, rec in loaded.records.items()} == records
        assert loaded.report.corrupt == [] and loaded.report.anomalies == []
        for rid in range(100, 300):   # new files, a switch or two and a compaction around the foreign files
            journal.add(rid, 1, bytes(700))
            journal.delete(rid)
        journal.compact()
    assert load_records(journal_dir) == records
    after = snapshot(journal_dir)
    for name, content in foreign_before.items():
        assert after.get(name) == content, f"{name} was changed"


# ----- files that claim a journal name --------------------------------------------------------------------------

def test_random_garbage_with_a_data_file_name_is_refused_on_magic(journal_dir):
    records = make_journal(journal_dir)
    garbage = journal_dir / FOREIGN_ID_NAME
    garbage.write_bytes(random.Random(1).randbytes(SMALL))
    error = refuse_and_leave_untouched(journal_dir)
    assert error.path.endswith(FOREIGN_ID_NAME)
    assert error.field == "magic" and error.offset == 0
    garbage.unlink()
    assert load_records(journal_dir) == records   # moving the foreign file out is the whole repair


def test_garbage_in_an_empty_directory_is_refused_and_nothing_is_created(journal_dir):
    (journal_dir / FOREIGN_ID_NAME).write_bytes(b"\x00" * 1000 + b"garbage")
    refuse_and_leave_untouched(journal_dir)
    assert sorted(p.name for p in journal_dir.iterdir()) == sorted([FOREIGN_ID_NAME, "journal.lock"])


@pytest.mark.parametrize("length", [0, 1, 8, 40, FILE_HEADER_SIZE_BYTES - 1])
def test_truncated_header_is_refused(journal_dir, length):
    make_journal(journal_dir)
    source = first_data_file_with_records(journal_dir)
    (journal_dir / FOREIGN_ID_NAME).write_bytes(source.read_bytes()[:length])
    error = refuse_and_leave_untouched(journal_dir)
    assert error.path.endswith(FOREIGN_ID_NAME)
    assert error.field == "header" and error.offset == 0
    assert str(length) in str(error)


def test_valid_header_on_a_file_cut_short_is_refused(journal_dir):
    make_journal(journal_dir)
    source = first_data_file_with_records(journal_dir)
    source.write_bytes(source.read_bytes()[:FILE_HEADER_SIZE_BYTES + 100])
    error = refuse_and_leave_untouched(journal_dir)
    assert error.path == str(source)
    assert error.field == "file_size"


@pytest.mark.parametrize("version", [0, FORMAT_VERSION + 1, 2 ** 32 - 1])
def test_wrong_format_version_is_refused_as_incompatible(journal_dir, version):
    make_journal(journal_dir)
    source = first_data_file_with_records(journal_dir)
    rewrite_header(source, len(MAGIC), "<I", version, fix_crc=True)
    error = refuse_and_leave_untouched(journal_dir, IncompatibleFormatError)
    assert isinstance(error, CorruptRecordError)
    assert error.path == str(source)
    assert error.field == "format_version" and error.offset == len(MAGIC)
    assert str(version) in str(error)


@pytest.mark.parametrize("offset", [len(MAGIC), 16, 24, 40, FILE_HEADER_SIZE_BYTES - 5, FILE_HEADER_SIZE_BYTES - 1])
def test_header_with_a_bad_crc_is_refused(journal_dir, offset):
    records = make_journal(journal_dir)
    source = first_data_file_with_records(journal_dir)
    original = source.read_bytes()
    raw = bytearray(original)
    raw[offset] ^= 0x01
    source.write_bytes(bytes(raw))
    error = refuse_and_leave_untouched(journal_dir)
    assert error.path == str(source)
    assert error.field == "header_crc" and error.offset == FILE_HEADER_SIZE_BYTES - 4
    source.write_bytes(original)
    assert load_records(journal_dir) == records


def test_bad_magic_on_a_real_data_file_is_refused(journal_dir):
    make_journal(journal_dir)
    source = first_data_file_with_records(journal_dir)
    raw = bytearray(source.read_bytes())
    raw[1] ^= 0xFF
    source.write_bytes(bytes(raw))
    error = refuse_and_leave_untouched(journal_dir)
    assert error.field == "magic" and error.offset == 0 and error.path == str(source)


def test_wrong_header_size_field_is_refused(journal_dir):
    make_journal(journal_dir)
    source = first_data_file_with_records(journal_dir)
    rewrite_header(source, 12, "<I", 128, fix_crc=True)
    error = refuse_and_leave_untouched(journal_dir)
    assert error.field == "header_size" and error.offset == 12 and error.path == str(source)


def test_two_files_claiming_the_same_replay_position_are_refused(journal_dir):
    make_journal(journal_dir)
    files = [p for p in data_files(journal_dir) if any(p.read_bytes()[FILE_HEADER_SIZE_BYTES:])]
    assert len(files) >= 2
    first_sequence = struct.unpack_from("<Q", files[0].read_bytes(), 24)[0]
    rewrite_header(files[1], 24, "<Q", first_sequence, fix_crc=True)
    error = refuse_and_leave_untouched(journal_dir)
    assert error.field == "sequence"


def test_damaged_compaction_control_file_is_refused(journal_dir):
    make_journal(journal_dir)
    (journal_dir / "compaction.ctl").write_bytes(b'{"outputs": [], "replaced": []}\n12345')
    error = refuse_and_leave_untouched(journal_dir)
    assert error.field == "control"


@pytest.mark.parametrize("kind", ["directory", "dangling symlink"])
def test_non_file_entry_with_a_data_file_name_is_refused_with_its_path(journal_dir, kind):
    make_journal(journal_dir)
    entry = journal_dir / FOREIGN_ID_NAME
    if kind == "directory":
        entry.mkdir()
    else:
        entry.symlink_to(journal_dir / "nowhere")
    error = refuse_and_leave_untouched(journal_dir)
    assert error.path.endswith(FOREIGN_ID_NAME)
