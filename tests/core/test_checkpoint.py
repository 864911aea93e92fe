"""The checkpoint (storage/journal/checkpoint.py): a clean close saves every data file's columns, and the next
load uses them for each file whose bytes still CRC32C to what they were, instead of decoding every
frame. Whatever happened to the files or the checkpoint in between, that load returns exactly what a
load that decodes every file returns -- the reference here is a read-only load, which never uses a
checkpoint -- and a checkpoint that is damaged, forged, stale or missing only costs a decode.

The compiled core and the twin run the same tests (the twin suite runs this file too)."""
from __future__ import annotations

import os
import random
import shutil
import struct
import subprocess
import sys
import textwrap

import pytest
from damage import flip_byte
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal_engine import IMPLEMENTATION, Broker, Journal
from journal_engine._impl import crc32c, image_size
from journal_engine.crashtest import checkpoint_attack
from journal_engine.storage.journal import checkpoint as checkpoints
from journal_engine.storage.journal.format import CHECKPOINT_FILE

SMALL = 64 * 1024


def _records(result) -> list:
    return [(record.record_id, record.record_type, bytes(record.body),
             [(user_type, bytes(body)) for user_type, body in record.updates]) for record in result.records.values()]


def _prepared(result) -> list:
    return [(tx.tx_id, bytes(tx.xid), [(op.kind, op.record_id, op.record_type, bytes(op.body)) for op in tx.records])
            for tx in result.prepared]


def _report(result) -> tuple:
    report = result.report
    return (report.torn_tail, sorted(report.corrupt), sorted(report.anomalies), report.files_read,
            report.records_read, sorted(report.incomplete_transactions) or sorted(report.rolled_back))


def _decoded(directory) -> tuple:
    """What a load that decodes every file returns (a read-only load uses no checkpoint)."""
    with Journal(directory, file_size=SMALL, read_only=True) as journal:
        result = journal.load()
        assert result.report.checkpointed_files == 0
        return _records(result), _prepared(result), _report(result)


def _load(directory, **options) -> tuple:
    """A writing load's records, prepared transactions, report, and how many files it took from the checkpoint."""
    with Journal(directory, file_size=SMALL, **options) as journal:
        result = journal.load()
        assert not os.path.exists(os.path.join(directory, CHECKPOINT_FILE)), "a load takes the checkpoint"
        return _records(result), _prepared(result), _report(result), result.report.checkpointed_files


def _checkpoint(directory) -> str:
    return os.path.join(directory, CHECKPOINT_FILE)


def _entries(directory) -> int:
    """How many data files the checkpoint names (every data file the close had, not the pool's empty ones)."""
    with open(_checkpoint(directory), "rb") as handle:
        return checkpoints._HEADER.unpack(handle.read(checkpoints._HEADER.size))[3]


def _write_mixed(directory, seed: int = 1) -> None:
    """The crash campaign's pristine journal of 900 records (checkpoint_attack.write_pristine): adds,
    updates, deletes, a committed, a prepared and an incomplete transaction, and record groups, over
    several files, closed cleanly."""
    checkpoint_attack.write_pristine(str(directory), seed, records=900)


def test_a_clean_close_saves_every_files_columns_and_the_next_load_returns_the_same(tmp_path):
    _write_mixed(tmp_path)
    assert os.path.exists(_checkpoint(tmp_path))
    expected = _decoded(tmp_path)
    entries = _entries(tmp_path)
    records, prepared, report, checkpointed = _load(tmp_path)
    assert (records, prepared, report) == expected
    assert checkpointed == entries >= 4
    assert os.path.exists(_checkpoint(tmp_path)), "a clean close saves a checkpoint again"
    expected = _decoded(tmp_path)       # (the file pool may have made a file ready meanwhile)
    records, prepared, report, checkpointed = _load(tmp_path)
    assert (records, prepared, report) == expected and checkpointed == entries


@pytest.mark.parametrize("seed", range(4))
def test_sessions_of_random_work_load_the_same_with_the_checkpoint_as_without(tmp_path, seed):
    """Each session loads (through the checkpoint of the last), appends, sometimes compacts, and
    closes; each load equals a full decode of the files as they were."""
    rng = random.Random(seed)
    live: set[int] = set()
    next_id = 1
    for session in range(5):
        expected = _decoded(tmp_path) if session else None
        with Journal(tmp_path, file_size=SMALL, sync="none", compact_min_files=0) as journal:
            result = journal.load()
            if expected is not None:
                assert (_records(result), _prepared(result), _report(result)) == expected
                assert result.report.checkpointed_files >= 1
            for _ in range(rng.randrange(50, 600)):
                action = rng.random()
                if action < 0.6 or not live:
                    journal.add(next_id, rng.randrange(0, 256), rng.randbytes(rng.randrange(0, 400)))
                    live.add(next_id)
                    next_id += 1
                elif action < 0.8:
                    journal.update(rng.choice(sorted(live)), rng.randrange(0, 256), rng.randbytes(rng.randrange(0, 90)))
                else:
                    gone = rng.choice(sorted(live))
                    journal.delete(gone)
                    live.discard(gone)
            if rng.random() < 0.5:
                journal.compact()
    assert sorted(record[0] for record in _decoded(tmp_path)[0]) == sorted(live)


def _data_files(directory) -> list[str]:
    return sorted(str(path) for path in directory.glob("journal-*.jej"))


@pytest.mark.parametrize("change", ["bit flip in a body", "cut short", "bytes past the end", "header rewritten"])
def test_a_data_file_changed_after_the_close_is_decoded_and_reported_as_a_full_decode_reports_it(tmp_path, change):
    _write_mixed(tmp_path)
    files = _data_files(tmp_path)
    target = files[1] if change != "bytes past the end" else files[-2]
    if change == "bit flip in a body":
        flip_byte(target, 4096 + 300, 0x40)
    elif change == "cut short":
        os.truncate(target, SMALL - 8192)
    elif change == "bytes past the end":
        with open(target, "r+b") as handle:      # garbage where the zeros past the last frame were
            data = handle.read()
            end = len(data.rstrip(b"\0")) + 64
            handle.seek(end)
            handle.write(b"\x13" * 40)
    else:
        with open(target, "rb") as handle:       # the same bytes, another life: the checkpoint's key stays
            data = handle.read()
        os.unlink(target)
        with open(target, "wb") as handle:
            handle.write(data)
    expected = _decoded(tmp_path)
    entries = _entries(tmp_path)
    with pytest.warns(RuntimeWarning) if change in ("bit flip in a body", "cut short") else _no_warning():
        records, prepared, report, checkpointed = _load(tmp_path)
    assert (records, prepared, report) == expected
    assert checkpointed == (entries if change == "header rewritten" else entries - 1)


class _no_warning:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _rewrite_checkpoint(directory, change) -> None:
    """Apply `change` to the checkpoint's bytes and, as a forger would, make every CRC32C match again."""
    path = _checkpoint(directory)
    with open(path, "rb") as handle:
        data = bytearray(handle.read())
    change(data)
    head = checkpoints._HEADER
    entry = checkpoints._ENTRY
    count = head.unpack_from(data, 0)[3]
    for index in range(count):
        at = head.size + index * entry.size
        fields = list(entry.unpack_from(data, at))
        rows, image_at = fields[4], fields[7]
        if rows < 2**40 and image_at + image_size(rows) <= len(data):    # (an image a forged field moved away keeps its CRC)
            fields[10] = crc32c(bytes(data[image_at:image_at + image_size(rows)]))
            entry.pack_into(data, at, *fields)
    table_end = head.size + count * entry.size
    fields = list(head.unpack_from(data, 0))
    fields[5] = crc32c(bytes(data[head.size:table_end]))
    fields[6] = 0
    head.pack_into(data, 0, *fields)
    struct.pack_into("=I", data, head.size - 4, crc32c(bytes(data[:head.size - 4])))
    with open(path, "wb") as handle:
        handle.write(data)


def _last_image_end(path) -> int:
    """Where the last image of the checkpoint at `path` ends (its padding and the trailer follow)."""
    with open(path, "rb") as handle:
        data = handle.read()
    count = checkpoints._HEADER.unpack_from(data, 0)[3]
    fields = [checkpoints._ENTRY.unpack_from(data, checkpoints._HEADER.size + index * checkpoints._ENTRY.size)
              for index in range(count)]
    return max(entry[7] + image_size(entry[4]) for entry in fields)


def _image_of_first_entry(data) -> tuple[int, int]:
    fields = checkpoints._ENTRY.unpack_from(data, checkpoints._HEADER.size)
    return fields[7], fields[4]     # where its image lies, its rows


def _forge_offset(data) -> None:     # the first row's frame far past the end of any file
    image_at, _rows = _image_of_first_entry(data)
    struct.pack_into("=q", data, image_at, 1 << 40)


def _forge_body_length(data) -> None:      # the first row's body longer than its frame
    image_at, rows = _image_of_first_entry(data)
    body_offsets = image_at + 16 * rows
    for row in range(1, rows + 1):
        value = struct.unpack_from("=q", data, body_offsets + 8 * row)[0]
        struct.pack_into("=q", data, body_offsets + 8 * row, value + 100_000)


def _forge_check(data) -> None:     # a damage code no scan makes
    image_at, rows = _image_of_first_entry(data)
    data[image_at + 40 * rows + 8] = 9


def _forge_end_offset(data) -> None:     # past what any journal file holds (and past a C integer)
    struct.pack_into("=Q", data, checkpoints._HEADER.size + 48, (1 << 64) - 5)


def _forge_record_id(pick):
    """A change that makes one valid row of the first file (``pick`` chooses it from their row indexes)
    claim another record id: the file's CRC32C still matches."""
    def forge(data) -> None:
        image_at, rows = _image_of_first_entry(data)
        valid = [row for row in range(rows) if data[image_at + 40 * rows + 8 + row] == 0]
        struct.pack_into("=Q", data, image_at + 24 * rows + 8 + 8 * pick(valid), 987654321)
    return forge


@pytest.mark.parametrize("damage", ["header bit flip", "entry table bit flip", "image bit flip", "cut short",
                                    "empty", "garbage", "another version", "forged offset", "forged body length",
                                    "forged check", "forged end offset"])
def test_a_damaged_or_forged_checkpoint_costs_a_decode_never_a_wrong_record_or_a_crash(tmp_path, damage):
    _write_mixed(tmp_path)
    expected = _decoded(tmp_path)
    entries = _entries(tmp_path)
    path = _checkpoint(tmp_path)
    size = os.path.getsize(path)
    if damage == "header bit flip":
        flip_byte(path, 9, 0x40)
    elif damage == "entry table bit flip":
        flip_byte(path, checkpoints._HEADER.size + 3, 0x40)
    elif damage == "image bit flip":
        flip_byte(path, _last_image_end(path) - 5, 0x40)
    elif damage == "cut short":
        os.truncate(path, size // 2)
    elif damage == "empty":
        os.truncate(path, 0)
    elif damage == "garbage":
        with open(path, "wb") as handle:
            handle.write(os.urandom(size))
    elif damage == "another version":
        _rewrite_checkpoint(tmp_path, lambda data: struct.pack_into("=I", data, 8, 99))
    else:
        _rewrite_checkpoint(tmp_path, {"forged offset": _forge_offset, "forged body length": _forge_body_length,
                                       "forged check": _forge_check, "forged end offset": _forge_end_offset}[damage])
    records, prepared, report, checkpointed = _load(tmp_path)
    assert (records, prepared, report) == expected
    if damage in ("image bit flip", "forged offset", "forged body length", "forged check"):
        assert checkpointed == entries - 1       # the one file whose image does not hold is decoded
    else:
        assert checkpointed == 0
    assert _load(tmp_path)[3] == entries, "the close after it saved a good checkpoint"


@pytest.mark.parametrize("row", ["first", "middle", "last"])
def test_a_row_forged_with_every_checksum_recomputed_is_checked_against_the_file_and_costs_a_decode(tmp_path, row):
    """Every row is held to the frame header where it lies (docs/internals/format.md, "What the
    checkpoint assumes"): a forged record id, wherever it stands, makes the file decoded."""
    _write_mixed(tmp_path)
    expected = _decoded(tmp_path)
    entries = _entries(tmp_path)
    pick = {"first": lambda valid: valid[0], "middle": lambda valid: valid[len(valid) // 2],
            "last": lambda valid: valid[-1]}[row]
    _rewrite_checkpoint(tmp_path, _forge_record_id(pick))
    records, prepared, report, checkpointed = _load(tmp_path)
    assert (records, prepared, report) == expected
    assert checkpointed == entries - 1


def test_a_load_that_refuses_the_directory_puts_the_checkpoint_back_byte_for_byte(tmp_path):
    _write_mixed(tmp_path)
    with open(_checkpoint(tmp_path), "rb") as handle:
        saved = handle.read()
    flip_byte(_data_files(tmp_path)[0], 2, 0x40)        # the magic of a data file's header
    with pytest.raises(Exception, match="magic"):
        with Journal(tmp_path, file_size=SMALL) as journal:
            journal.load()
    with open(_checkpoint(tmp_path), "rb") as handle:
        assert handle.read() == saved


def test_a_read_only_load_neither_takes_nor_writes_the_checkpoint(tmp_path):
    _write_mixed(tmp_path)
    with open(_checkpoint(tmp_path), "rb") as handle:
        saved = handle.read()
    with Journal(tmp_path, file_size=SMALL, read_only=True) as journal:
        assert journal.load().report.checkpointed_files == 0
    with open(_checkpoint(tmp_path), "rb") as handle:
        assert handle.read() == saved


def test_a_copying_load_decodes_and_its_close_saves_a_checkpoint_the_next_load_uses(tmp_path):
    _write_mixed(tmp_path)
    expected = _decoded(tmp_path)
    with Journal(tmp_path, file_size=SMALL) as journal:
        result = journal.load(copy=True)
        assert result.report.checkpointed_files == 0 and not os.path.exists(_checkpoint(tmp_path))
        assert all(type(record.body) is bytes for record in result.records.values())
        assert (_records(result), _prepared(result), _report(result)) == expected
    expected = _decoded(tmp_path)       # (the file pool may have made a file ready meanwhile)
    entries = _entries(tmp_path)
    records, prepared, report, checkpointed = _load(tmp_path)
    assert (records, prepared, report) == expected and checkpointed == entries


def test_a_process_killed_after_its_load_leaves_no_checkpoint_and_the_next_load_decodes_what_it_wrote(tmp_path):
    _write_mixed(tmp_path)
    child = textwrap.dedent(f"""
        import os
        from journal_engine import Journal
        journal = Journal({str(tmp_path)!r}, file_size={SMALL}, sync="always")
        journal.load()
        for record_id in range(50_000, 50_300):
            journal.add(record_id, 1, b"after the checkpoint" * 10)
        os._exit(9)
    """)
    assert subprocess.run([sys.executable, "-c", child]).returncode == 9
    assert not os.path.exists(_checkpoint(tmp_path))
    expected = _decoded(tmp_path)
    records, prepared, report, checkpointed = _load(tmp_path)
    assert (records, prepared, report) == expected and checkpointed == 0
    assert [record[0] for record in records if record[0] >= 50_000] == list(range(50_000, 50_300))
    entries = _entries(tmp_path)
    assert _load(tmp_path)[3] == entries


def test_a_close_that_cannot_write_the_checkpoint_still_closes_and_the_next_load_decodes(tmp_path, caplog):
    _write_mixed(tmp_path)
    with Journal(tmp_path, file_size=SMALL) as journal:
        journal.load()
        os.mkdir(_checkpoint(tmp_path) + ".tmp")     # where the checkpoint is written: not a file
    assert "no checkpoint was saved" in caplog.text
    assert not os.path.exists(_checkpoint(tmp_path))
    expected = _decoded(tmp_path)
    os.rmdir(_checkpoint(tmp_path) + ".tmp")
    records, prepared, report, checkpointed = _load(tmp_path)
    assert (records, prepared, report) == expected and checkpointed == 0


def test_a_checkpoint_of_another_directory_is_decoded_around(tmp_path):
    """A checkpoint copied from another journal names files by id and sequence that exist here too;
    their bytes differ, so each one is decoded."""
    _write_mixed(tmp_path / "a", seed=1)
    _write_mixed(tmp_path / "b", seed=2)
    shutil.copy(_checkpoint(tmp_path / "a"), _checkpoint(tmp_path / "b"))
    expected = _decoded(tmp_path / "b")
    records, prepared, report, checkpointed = _load(tmp_path / "b")
    assert (records, prepared, report) == expected and checkpointed == 0


def test_a_broker_restarts_through_the_checkpoint_with_every_message(tmp_path):
    broker = Broker(tmp_path, sync="none")
    broker.create_queue("orders")
    for number in range(3000):
        broker.send("orders", b"order %d" % number)
    broker.close()
    checkpoints_saved = [path for path in tmp_path.rglob(CHECKPOINT_FILE)]
    assert checkpoints_saved, "the broker's journal saved a checkpoint at its clean close"
    broker = Broker(tmp_path)
    consumer = broker.create_consumer("orders")
    got = [consumer.receive(timeout=1).body for _ in range(3000)]
    broker.close()
    assert got == [b"order %d" % number for number in range(3000)]


def test_the_saved_columns_are_the_columns_a_decode_makes(tmp_path):
    from journal_engine.storage.journal.scan import scan_data_file
    from journal_engine.storage.journal.segment_files import list_directory
    _write_mixed(tmp_path)
    checkpoint = checkpoints.take(str(tmp_path))
    compared = 0
    for data in list_directory(str(tmp_path)).data:
        saved = checkpoint.saved(data)
        if saved is None:
            continue        # an empty file the pool made after the close
        decoded = scan_data_file(data, copy=False, groups=False)
        columns = scan_data_file(data, copy=False, groups=False, saved=saved)
        assert checkpoint.files_used == compared + 1, "the saved columns were used, not a decode"
        for name in ("offset", "size", "check", "kind", "record_type", "record_id", "tx_id", "body_offsets"):
            assert getattr(columns, name).tolist() == getattr(decoded, name).tolist(), name
        assert (columns.count, columns.end_offset, columns.end_check, columns.groups_skipped) == \
               (decoded.count, decoded.end_offset, decoded.end_check, decoded.groups_skipped)
        assert [bytes(columns.body(row)) for row in range(columns.count)] == \
               [bytes(decoded.body(row)) for row in range(decoded.count)]
        compared += 1
    assert compared >= 4 and checkpoint.files_used == compared


# ----- the three reproductions of the attack on a42bd1a, each in a child process (a signal death fails
# the test, not the runner); docs/internals/recovery.md, row K1 -------------------------------------------

_CHILD_LOAD = textwrap.dedent("""
    import os, sys
    from journal_engine import Journal
    from journal_engine.crashtest.checkpoint_attack import digest
    directory, holder = sys.argv[1], sys.argv[2]
    checkpoint = os.path.join(directory, "journal.jck")
    held = None
    if holder == "hard link":
        os.link(checkpoint, os.path.join(directory, "backup.jck"))
    elif holder == "descriptor":
        held = os.open(checkpoint, os.O_RDWR)
    from journal_engine import FileChangedError
    with Journal(directory, file_size=65536) as journal:
        result = journal.load()
        if holder == "hard link":
            os.truncate(os.path.join(directory, "backup.jck"), 0)
        elif holder == "descriptor":
            os.ftruncate(held, 0)
        if holder:
            try:        # the ids and offsets of the records lie in the cut checkpoint
                for record in result.records.values():
                    bytes(record.body)
            except FileChangedError as cut:
                print("refused", os.path.basename(cut.path))
            else:       # (the twin reads the checkpoint into memory: nothing of it can be cut)
                print("read", digest(result))
        print(digest(result) if not holder else "-", result.report.checkpointed_files)
""")


def _load_in_child(directory, holder: str = "") -> tuple[str, int]:
    """(digest, checkpointed files) of a writing load in a child process (with `holder`: "hard link" or
    "descriptor", another holder of the checkpoint's inode taken before the load cuts it to 0 after the
    load, and reading the records must raise FileChangedError naming the checkpoint)."""
    done = subprocess.run([sys.executable, "-c", _CHILD_LOAD, str(directory), holder], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"the loading process ended with {done.returncode}: {done.stderr[-2000:]}"
    lines = done.stdout.splitlines()
    if holder and IMPLEMENTATION == "cython":
        assert lines[0] == f"refused {CHECKPOINT_FILE}", done.stdout
    elif holder:
        found, checkpointed = lines[0].split()[1], lines[-1].split()[1]
        return found, int(checkpointed)
    found, checkpointed = lines[-1].split()
    return found, int(checkpointed)


def _decoded_digest(directory) -> str:
    with Journal(directory, file_size=SMALL, read_only=True) as journal:
        return checkpoint_attack.digest(journal.load())


@pytest.mark.parametrize("holder", ["hard link", "descriptor"])
def test_a_checkpoint_cut_by_another_holder_of_its_inode_while_its_records_are_in_use_kills_nothing(tmp_path, holder):
    """Reproduction 1: a hard link (a `cp -al` backup) or a descriptor opened before the load cuts the
    taken checkpoint to nothing while the records are read. Its lost pages read as zeros, never
    SIGBUS, and the read that met them raises FileChangedError naming the checkpoint; the clean close
    after it saves a checkpoint from the files, and the next load is the full decode."""
    _write_mixed(tmp_path)
    entries = _entries(tmp_path)
    expected = _decoded_digest(tmp_path)
    found, checkpointed = _load_in_child(tmp_path, holder)
    assert checkpointed == entries
    if IMPLEMENTATION != "cython":
        assert found == expected, "the twin reads the checkpoint into memory: its records are the full decode"
    expected = _decoded_digest(tmp_path)
    assert _load_in_child(tmp_path) == (expected, entries)


@pytest.mark.parametrize("offset", [2**63 - 1, 2**63 - 2**16, 2**62])
def test_a_row_offset_forged_near_the_top_of_a_signed_integer_is_refused_before_any_read(tmp_path, offset):
    """Reproduction 2: a row's offset of 2**63 - 1 with every checksum recomputed once passed the row
    check (``offset + size`` overflowed) and made ``bytes(record.body)`` read far outside the mapping."""
    _write_mixed(tmp_path)
    expected = _decoded_digest(tmp_path)
    entries = _entries(tmp_path)
    _rewrite_checkpoint(tmp_path, lambda data: struct.pack_into("=q", data, _image_of_first_entry(data)[0], offset))
    assert _load_in_child(tmp_path) == (expected, entries - 1)


@pytest.mark.parametrize("field, value", [("end check", 2**31), ("end check", 2**32 - 1), ("rows", 2**63),
                                          ("rows", 2**64 - 1), ("groups skipped", 2**63), ("data start", 2**63),
                                          ("end offset", 2**64 - 1), ("image at", 2**63 + 8)])
def test_an_entry_field_out_of_range_costs_a_decode_and_never_bricks_the_journal(tmp_path, field, value):
    """Reproduction 3: an entry field no C integer holds once raised OverflowError out of load(), and a
    refused load put the checkpoint back, so every later load failed the same way. Now the checkpoint
    is ignored (every file decoded), and the clean close after the load saves a good one."""
    _write_mixed(tmp_path)
    expected = _decoded_digest(tmp_path)
    entries = _entries(tmp_path)
    at = {"data start": 24, "rows": 32, "groups skipped": 40, "end offset": 48, "image at": 56, "end check": 64}[field]
    width = 4 if field == "end check" else 8
    _rewrite_checkpoint(tmp_path, lambda data: data.__setitem__(
        slice(checkpoints._HEADER.size + at, checkpoints._HEADER.size + at + width), value.to_bytes(width, sys.byteorder)))
    assert _load_in_child(tmp_path) == (expected, 0)
    assert _load_in_child(tmp_path)[1] == entries, "the close after the decode saved a checkpoint the next load took"


def test_a_forged_checkpoint_is_not_put_back_by_a_load_that_refuses_the_directory(tmp_path):
    """A refused load puts back only a checkpoint whose every image checks without its files: a forged
    one does not outlive the load that took it."""
    _write_mixed(tmp_path)
    _rewrite_checkpoint(tmp_path, lambda data: struct.pack_into("=q", data, _image_of_first_entry(data)[0], 2**63 - 1))
    flip_byte(_data_files(tmp_path)[0], 2, 0x40)        # the magic of a data file's header
    with pytest.raises(Exception, match="magic"):
        with Journal(tmp_path, file_size=SMALL) as journal:
            journal.load()
    assert not os.path.exists(_checkpoint(tmp_path))


def test_a_checkpoint_cut_between_its_taking_and_the_reading_of_its_columns_costs_a_decode(tmp_path, monkeypatch):
    """A checkpoint cut after the load took it, before its columns are read (another holder's
    truncate): its pages read as zeros, the load notices and decodes every file -- never a signal,
    never an error. (The twin reads the checkpoint whole when it takes it: the cut changes nothing.)"""
    _write_mixed(tmp_path)
    expected = _decoded(tmp_path)
    entries = _entries(tmp_path)
    link = tmp_path / "backup.jck"
    os.link(_checkpoint(tmp_path), link)
    taken = checkpoints.take

    def take_then_cut(directory):
        found = taken(directory)
        os.truncate(link, checkpoints._HEADER.size + 10)
        return found
    monkeypatch.setattr(checkpoints, "take", take_then_cut)
    records, prepared, report, checkpointed = _load(tmp_path)
    assert (records, prepared, report) == expected
    assert checkpointed == (0 if IMPLEMENTATION == "cython" else entries)


@pytest.fixture(scope="module")
def pristine_journal(tmp_path_factory):
    """One cleanly closed journal (checkpoint_attack's) and the digest of its full decode."""
    directory = tmp_path_factory.mktemp("pristine") / "journal"
    checkpoint_attack.write_pristine(str(directory), seed=3)
    return directory, checkpoint_attack.decoded(str(directory))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(patches=st.lists(st.tuples(st.integers(0, 1 << 20), st.binary(min_size=1, max_size=8)), max_size=5),
       recompute=st.booleans(), cut=st.one_of(st.none(), st.integers(0, 1 << 20)))
def test_any_patched_checkpoint_loads_as_a_full_decode(pristine_journal, tmp_path, patches, recompute, cut):
    """Bytes written anywhere in the checkpoint, its checksums recomputed or not, then cut: the load is
    the full decode (the crash harness's mode `checkpoint` and the atheris target do this in children)."""
    pristine, expected = pristine_journal
    work = tmp_path / f"work-{random.getrandbits(32)}"
    shutil.copytree(pristine, work)
    path = _checkpoint(work)
    with open(path, "rb") as handle:
        content = bytearray(handle.read())
    for at, patch in patches:
        at %= len(content)
        content[at:at + len(patch)] = patch
    content = bytearray(checkpoint_attack._recomputed(content, images=True)) if recompute else content
    with open(path, "wb") as handle:
        handle.write(content[:cut] if cut is not None else content)
    with Journal(work, file_size=checkpoint_attack.FILE_SIZE) as journal:
        assert checkpoint_attack.digest(journal.load()) == expected
    shutil.rmtree(work)
