"""Torn tails at every byte of the last record, and bit flips anywhere (issue 2, recovery).

A torn tail (the end of the last file cut inside a record) is truncated and
reported, every earlier record survives, and the next load is clean. A flipped
bit anywhere in the data is detected: the frame holding it is reported (path and
offset) and dropped, every other record is recovered byte-exact, and the
damaged file is not rewritten.
"""
from __future__ import annotations

import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import journal_engine
from journal_engine import CorruptRecordError, Journal, RecordKind
from journal_engine._impl import scan_frames
from journal_engine.limits import DATA_START_BYTES
from journal_engine.storage.journal.format import HEADER_FLAG_RECYCLED, stamp_of
from journal_engine.crashtest import power_loss
from journal_engine.crashtest.power_loss import OP_MARK, OP_OPEN, OP_SYNC_BEGIN, OP_SYNC_END, OP_WRITE
from journal_engine.record_format import FrameCheck
from journal_engine.storage.journal.segment_files import list_directory

pytestmark = pytest.mark.filterwarnings("ignore:journal damage:RuntimeWarning")

FILE_SIZE = 256 * 1024
HEADER = 64


@pytest.fixture
def scratch(tmp_path):
    """Where the damaged copies go: memory-backed when the machine has /dev/shm, since every load
    fdatasyncs the freshly copied files and the bytes on a real disk add nothing here."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        path = Path(tempfile.mkdtemp(prefix="journal-flip-", dir="/dev/shm"))
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield tmp_path


def body(record_id: int, size: int, salt: int = 0) -> bytes:
    """Non-zero bytes only, so zeroing any byte of a body changes it."""
    head = struct.pack("<QI", record_id, salt)
    return head + bytes((record_id * 31 + salt * 7 + i) % 251 + 1 for i in range(size - len(head)))


def load(directory):
    with Journal(directory, file_size=FILE_SIZE) as journal:
        return journal.load()


def state_of(result) -> dict:
    return {rid: (rec.record_type, rec.body, list(rec.updates)) for rid, rec in result.records.items()}


def scan(path: str, file_id: int) -> list:
    return scan_frames(Path(path).read_bytes(), stamp_of(file_id), DATA_START_BYTES)


def frame_table(directory) -> list[tuple]:
    """Every valid frame of every data file in replay order:
    (path, offset, end, kind, type, record id, tx id, body)."""
    table = []
    for data in list_directory(os.fspath(directory)).data:
        rows = scan(data.path, data.header.file_id)
        for index, (offset, check, kind, user_type, record_id, tx_id, payload) in enumerate(rows):
            if check != FrameCheck.VALID:
                continue
            end = rows[index + 1][0] if index + 1 < len(rows) else offset
            table.append((data.path, offset, end, kind, user_type, record_id, tx_id, payload))
    return table


def replay_model(frames) -> dict:
    """The live records a list of frames means (the rules of docs/internals/recovery.md)."""
    records, pending = {}, {}
    for _path, _offset, _end, kind, user_type, record_id, tx_id, payload in frames:
        if kind == RecordKind.ADD:
            records[record_id] = (user_type, payload, [])
        elif kind == RecordKind.UPDATE:
            if record_id in records:
                records[record_id][2].append((user_type, payload))
        elif kind == RecordKind.DELETE:
            records.pop(record_id, None)
        elif kind in (RecordKind.ADD_TX, RecordKind.UPDATE_TX, RecordKind.DELETE_TX):
            pending.setdefault(tx_id, []).append((kind, user_type, record_id, payload))
        elif kind == RecordKind.COMMIT:
            ops = pending.pop(tx_id, None)
            if ops is None or struct.unpack("<I", payload[:4])[0] != len(ops):
                continue
            for op_kind, op_type, op_id, op_body in ops:
                if op_kind == RecordKind.ADD_TX:
                    records[op_id] = (op_type, op_body, [])
                elif op_kind == RecordKind.UPDATE_TX:
                    if op_id in records:
                        records[op_id][2].append((op_type, op_body))
                else:
                    records.pop(op_id, None)
        elif kind == RecordKind.ROLLBACK:
            pending.pop(tx_id, None)
    return records


# ----- torn tail ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torn_journal(tmp_path_factory):
    """A closed journal whose last record is a small frame without padding (48-byte body)."""
    directory = tmp_path_factory.mktemp("torn") / "pristine"
    with Journal(directory, file_size=FILE_SIZE, sync="none") as journal:
        journal.load()
        for record_id in range(60):
            journal.add(record_id, 1, body(record_id, 200))
        journal.update(3, 2, body(3, 64, salt=1))
        journal.add(1000, 5, body(1000, 48))
    table = frame_table(directory)
    last = [row for row in table if row[3] != RecordKind.PAD][-1]
    assert last[5] == 1000 and last[2] - last[1] == 32 + 48
    return directory, last, state_of(load_copy(directory, directory.parent / "check"))


def load_copy(pristine, target):
    if os.path.exists(target):
        shutil.rmtree(target)
    shutil.copytree(pristine, target)
    return load(target)


def cut_tail(pristine, work, path_name: str, cut: int, how: str) -> Path:
    shutil.copytree(pristine, work)
    path = work / path_name
    if how == "zeroed":
        with open(path, "r+b") as handle:
            handle.seek(cut)
            handle.write(bytes(FILE_SIZE - cut))
    else:
        os.truncate(path, cut)
    return path


@pytest.mark.parametrize("how", ["zeroed", "truncated"])
def test_torn_last_record_at_every_byte_is_truncated_and_reported(torn_journal, scratch, how):
    pristine, last, full = torn_journal
    path_name = os.path.basename(last[0])
    start, end = last[1], last[2]
    before = {rid: rec for rid, rec in full.items() if rid != 1000}
    for cut in range(start, end):
        work = scratch / f"cut-{cut}"
        path = cut_tail(pristine, work, path_name, cut, how)
        result = load(work)
        report = result.report
        assert state_of(result) == before, f"cut at {cut}: earlier records not recovered exactly"
        assert report.anomalies == [], f"cut at {cut}: {report}"
        if how == "truncated":
            # a file is never shorter than it was allocated after a crash: a cut is damage at rest
            assert [(p, o) for p, o, _r in report.corrupt] == [(str(path), cut)], f"cut at {cut}: {report}"
            assert "cut short" in report.corrupt[0][2]
        else:
            assert report.corrupt == [], f"cut at {cut}: {report}"
        if cut == start and how == "zeroed":
            # nothing of the record was written: a clean end
            assert not report.torn_tail_truncated, f"cut at {cut}: {report}"
        else:
            # part of the record was written (or the pre-allocated file was cut short): a torn tail
            assert report.torn_tail == (str(path), start), f"cut at {cut}: {report}"
            assert report.torn_tail_truncated
        assert os.path.getsize(path) == FILE_SIZE, f"cut at {cut}: the file was not restored to its size"
        rows = scan(str(path), int(path_name[8:24], 16))
        assert all(row[1] == FrameCheck.VALID for row in rows[:-1]), f"cut at {cut}: damage left behind"
        assert rows[-1][1] != FrameCheck.INVALID, f"cut at {cut}: the torn bytes were not erased"
        # the next open is clean and appends
        with Journal(work, file_size=FILE_SIZE) as journal:
            again = journal.load()
            assert again.report.torn_tail is None and again.report.corrupt == [], f"cut at {cut}"
            assert state_of(again) == before
            journal.add(2000, 1, body(2000, 100), sync=True)
        after = load(work)
        assert after.report.torn_tail is None and after.report.corrupt == []
        assert after.records[2000].body == body(2000, 100)
        shutil.rmtree(work)


#: loads each cut's copy in turn under the system-call recorder, which records one directory: each copy is
#: renamed to "current" for its load, and its name printed first (a mark in the log) says whose calls follow
_LOAD_EACH = """
import os, sys
from journal_engine import Journal
scratch, file_size, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
current = os.path.join(scratch, "current")
for name in names:
    os.rename(os.path.join(scratch, name), current)
    os.write(1, name.encode() + b"\\n")
    with Journal(current, file_size=file_size) as journal:
        journal.load()
    os.rename(current, os.path.join(scratch, name))
"""


def _durable_when_overwritten(entries: list, path: str, start: int, torn: bytes) -> bytes:
    """What a power cut would keep of [start, start + len(torn)) of `path` at the moment a load first
    writes non-zero bytes there (the seal's pad), or at the end of its calls: writes count once a
    successful sync of their file began after them."""
    durable, pending, fds, syncs = bytearray(torn), [], set(), {}
    for serial, entry in enumerate(entries):
        if entry.op == OP_OPEN:
            (fds.add if entry.path == path else fds.discard)(entry.fd)
        elif entry.op == OP_WRITE and entry.fd in fds:
            low, high = max(start, entry.a), min(start + len(torn), entry.a + len(entry.data))
            if low < high:
                piece = entry.data[low - entry.a:high - entry.a]
                if any(piece):
                    return bytes(durable)
                pending.append((serial, low, piece))
        elif entry.op == OP_SYNC_BEGIN and entry.fd in fds:
            syncs[entry.a] = serial
        elif entry.op == OP_SYNC_END and entry.a in syncs:
            began = syncs.pop(entry.a)
            if entry.b:
                for _serial, low, piece in [write for write in pending if write[0] < began]:
                    durable[low - start:low - start + len(piece)] = piece
                pending = [write for write in pending if write[0] >= began]
    return bytes(durable)


@pytest.mark.skipif(power_loss.recorder_library() is None,
                    reason="the system-call recorder is not built (python setup.py build_ext --inplace)")
@pytest.mark.parametrize("how", ["zeroed", "truncated"])
def test_torn_bytes_are_erased_and_synced_before_the_seal_pads_over_them(torn_journal, scratch, how):
    """The seal after recovery pads the torn tail's sector, so the file after a load cannot tell an erased
    tear shorter than a sector from one left in place: the load's own calls must show the erase. A second
    process loads every cut under the system-call recorder; at the pad's first write the torn bytes must
    already be zeros on the disk (a power cut during the pad's write then finds no torn record)."""
    pristine, last, _full = torn_journal
    path_name = os.path.basename(last[0])
    start, end = last[1], last[2]
    names = [f"cut-{cut}" for cut in range(start + 1, end)]
    for name, cut in zip(names, range(start + 1, end)):
        cut_tail(pristine, scratch / name, path_name, cut, how)
    torn = (pristine / path_name).read_bytes()
    log_path = scratch / "calls.log"
    env = dict(os.environ, LD_PRELOAD=power_loss.recorder_library(), **{
        power_loss.LOG_ENV: str(log_path), power_loss.DIR_ENV: os.path.realpath(scratch / "current"),
        power_loss.MARK_ENV: "1"})
    done = subprocess.run([sys.executable, "-c", _LOAD_EACH, str(scratch), str(FILE_SIZE), *names],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    entries = power_loss.read_log(str(log_path))
    marks = [index for index, entry in enumerate(entries) if entry.op == OP_MARK] + [len(entries)]
    assert [entries[index].data.decode().strip() for index in marks[:-1]] == names
    data_path = os.path.join(os.path.realpath(scratch / "current"), path_name)
    for name, begin, stop in zip(names, marks, marks[1:]):
        cut = int(name[4:])
        kept = _durable_when_overwritten(entries[begin + 1:stop], data_path, start, torn[start:cut])
        assert kept == bytes(cut - start), f"{how} at {cut}: the torn bytes were not erased before the pad"


# ----- bit flips --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def flip_journal(tmp_path_factory):
    """A closed multi-file journal with adds, updates, deletes and a committed transaction."""
    directory = tmp_path_factory.mktemp("flip") / "pristine"
    rng = random.Random(5)
    with Journal(directory, file_size=FILE_SIZE, sync="none") as journal:
        journal.load()
        for record_id in range(1400):
            journal.add(record_id, 1, body(record_id, rng.randrange(20, 900)))
            if record_id % 7 == 3:
                journal.update(record_id - 2, 4, body(record_id - 2, 40, salt=record_id))
            if record_id % 11 == 5:
                journal.delete(record_id - 4)
            if record_id == 400:
                journal.add_tx(9, 5000, 3, body(5000, 64))
                journal.update_tx(9, 399, 3, body(399, 24, salt=9))
                journal.commit(9)
    table = frame_table(directory)
    assert len({row[0] for row in table}) >= 3, "the journal should span several files"
    return directory, table


def flip_positions(table, rng: random.Random) -> list[tuple[str, int]]:
    """Every byte of a few chosen frames, then random bytes across the data of every file."""
    paths = sorted({row[0] for row in table}, key=lambda p: [row[0] for row in table].index(p))
    records = [row for row in table if row[3] != RecordKind.PAD]
    small = [row for row in records if row[2] - row[1] <= 160]
    chosen = [
        [row for row in small if row[0] == paths[0]][0],                    # a record of the first file
        [row for row in small if row[3] == RecordKind.UPDATE][5],           # an update
        [row for row in records if row[3] == RecordKind.COMMIT][0],         # a commit
        [row for row in small if row[0] == paths[-1]][len([r for r in small if r[0] == paths[-1]]) // 2],
        records[-1],                                                        # last record of the last file
    ]
    positions = [(row[0], offset) for row in chosen for offset in range(row[1], row[2])]
    # the last record of a file that is not the last: its header and the end of its body
    row = [row for row in records if row[0] == paths[0]][-1]
    data_end = row[1] + 32 + len(row[7])
    positions += [(row[0], offset) for offset in list(range(row[1], row[1] + 32)) + list(range(data_end - 8, data_end))]
    ends = {path: max(row[2] for row in table if row[0] == path) for path in paths}
    for _ in range(150):
        path = rng.choice(paths)
        positions.append((path, rng.randrange(0, ends[path])))
    return positions


def test_every_bit_flip_is_detected_and_nothing_else_is_lost(flip_journal, scratch):
    pristine, table = flip_journal
    original = replay_model(table)
    rng = random.Random(11)
    positions = flip_positions(table, rng)
    if journal_engine.IMPLEMENTATION == "python":
        # the twin loads a journal some thirty times slower: it takes every fifth position, 133 of 662,
        # which still land in frame headers (at 26 of their 32 byte offsets, more than every third
        # position reached), bodies and padding; the compiled core takes every one
        positions = positions[::5]
    ends = {path: max(row[2] for row in table if row[0] == path) for path, _o in positions}
    undetected = []
    expected_without = {}
    for index, (path, offset) in enumerate(positions):
        work = scratch / f"flip-{index}"
        shutil.copytree(pristine, work)
        target = work / os.path.basename(path)
        raw = bytearray(target.read_bytes())
        raw[offset] ^= 1 << rng.randrange(8)
        target.write_bytes(bytes(raw))
        where = f"bit flip in {os.path.basename(path)} at {offset}"
        if offset < HEADER:
            with pytest.raises(CorruptRecordError) as caught:
                load(work)
            assert caught.value.path == str(target), where
            shutil.rmtree(work)
            continue
        if offset < DATA_START_BYTES:
            # the rest of the header's sector holds nothing (frames start on the next sector): nothing changes
            result = load(work)
            assert state_of(result) == original and result.report.corrupt == [], where
            shutil.rmtree(work)
            continue
        [frame] = [row for row in table if row[0] == path and row[1] <= offset < row[2]]
        result = load(work)
        report = result.report
        if offset >= frame[1] + 32 + len(frame[7]):
            # the zero padding that aligns a frame to 8 bytes holds no data and no checksum covers it
            assert state_of(result) == original, f"{where}: a flip in padding changed the records"
            shutil.rmtree(work)
            continue
        # what must come back: everything but the damaged frame (and what it alone held together)
        key = (frame[0], frame[1])
        if key not in expected_without:
            expected_without[key] = replay_model([row for row in table if row is not frame])
        expected = expected_without[key]
        recovered = state_of(result)
        assert recovered == expected, (
            f"{where}: recovered records differ from the journal without the damaged frame "
            f"({sorted(set(recovered) ^ set(expected))[:5]} differ in presence)")
        entries = [(p, o) for p, o, _r in report.corrupt]
        if report.torn_tail:
            entries.append(report.torn_tail)
        if frame[3] != RecordKind.PAD and (str(target), frame[1]) not in entries:
            undetected.append((os.path.basename(path), offset, frame[1], RecordKind(frame[3]).name, offset - frame[1]))
        # the damaged file is not rewritten: its data, before and after the damage, is as it was
        # (a torn tail is erased from its start on; load may append after the old end, e.g. a ROLLBACK)
        after = target.read_bytes()
        keep = ends[path]
        if report.torn_tail and report.torn_tail[0] == str(target):
            keep = report.torn_tail[1]
        assert after[:keep] == bytes(raw[:keep]), f"{where}: the damaged file was rewritten"
        shutil.rmtree(work)
    assert original, "the journal is not empty"
    assert undetected == [], (
        f"{len(undetected)} bit flips dropped a record frame without a report naming it "
        f"(file, flipped offset, frame offset, kind, byte within frame): {undetected[:12]}")


@pytest.mark.xfail(strict=True, reason=(
    "known gap: in a recycled file, a frame whose stamp is damaged looks like the file's earlier life; "
    "as the last frame of the file's data it reads as a clean end and the record is dropped without a "
    "report (a PAD written over the rest of a file when the writer leaves it would close the gap)"))
def test_stamp_flip_in_the_last_frame_of_a_recycled_file_is_reported(journal_dir):
    with Journal(journal_dir, file_size=FILE_SIZE, sync="none", compact_min_files=0) as journal:
        journal.load()
        for record_id in range(700):
            journal.add(record_id, 1, body(record_id, 1000))
        for record_id in range(700):
            journal.delete(record_id)
        journal.compact()                         # the old files become free files, reused next
        for record_id in range(1000, 2000):
            journal.add(record_id, 1, body(record_id, 900))
    files = list_directory(os.fspath(journal_dir)).data
    recycled = [d for d in files[:-1] if d.header.flags & HEADER_FLAG_RECYCLED]
    assert recycled, "no recycled file was left behind by the writer"
    target = recycled[0]
    rows = scan(target.path, target.header.file_id)
    offset, _c, _k, _t, record_id, _tx, _b = [row for row in rows if row[1] == FrameCheck.VALID][-1]
    raw = bytearray(Path(target.path).read_bytes())
    raw[offset + 13] ^= 0x04                       # one bit of the stamp
    Path(target.path).write_bytes(bytes(raw))
    result = load(journal_dir)
    assert record_id not in result.records
    assert (target.path, offset) in [(p, o) for p, o, _r in result.report.corrupt], (
        f"record {record_id} was dropped without a report")
