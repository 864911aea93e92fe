"""The columnar scan decoder: one parser of the format, the same in the compiled core and the twin.

Rows are checked against what was written (kinds, ids, types, transaction ids, bodies), damage
in the middle of a file and at its end against the recovery table's wording, and the compiled
columns against the twin's, byte for byte, on random journals with random damage.
"""
from __future__ import annotations

import os
import random

import pytest
from damage import flip_byte
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal_engine import Journal
from journal_engine._impl import IMPLEMENTATION, scan_columns
from journal_engine._twin import replay as twin_replay, scan as twin_scan
from journal_engine.record_format import FrameCheck, RecordKind
from journal_engine.storage.journal.format import stamp_of
from journal_engine.storage.journal.scan import scan_directory, scan_file
from journal_engine.storage.journal.segment_files import list_directory

SMALL = 64 * 1024
COLUMNS = ("offset", "size", "check", "kind", "record_type", "record_id", "tx_id", "body_offsets")


def _write_mixed(directory, seed: int = 1, count: int = 300) -> dict:
    """A journal of adds, updates, deletes and transactions; returns what load() should see."""
    rng = random.Random(seed)
    live = {}
    with Journal(directory, file_size=SMALL, sync="none") as journal:
        journal.load()
        for record_id in range(count):
            body = rng.randbytes(rng.randrange(0, 300))
            journal.add(record_id, rng.randrange(256), body)
            live[record_id] = body
            if record_id % 7 == 3:
                journal.update(record_id, 9, b"u" * (record_id % 50))
            if record_id % 11 == 5:
                journal.delete(record_id)
                del live[record_id]
            if record_id % 50 == 49:
                journal.add_tx(record_id, 10_000 + record_id, 4, b"in a transaction")
                journal.commit(record_id)
                live[10_000 + record_id] = b"in a transaction"
    return live


def _columns_as_lists(cols) -> dict:
    out = {name: list(getattr(cols, name)) for name in COLUMNS}
    out.update(count=cols.count, end_offset=cols.end_offset, end_check=cols.end_check, bodies=cols.bodies)
    return out


def test_rows_are_the_frames_written(tmp_path):
    _write_mixed(tmp_path)
    scans = scan_directory(str(tmp_path))
    assert len(scans) >= 2
    kinds = {}
    adds = {}
    for scan in scans:
        cols = scan.columns
        assert len(cols.body_offsets) == cols.count + 1 and cols.body_offsets[cols.count] == len(cols.bodies)
        assert cols.end_check in (FrameCheck.ZERO, FrameCheck.FOREIGN)
        assert all(c == FrameCheck.VALID for c in cols.check)
        for row in range(cols.count):
            kinds[cols.kind[row]] = kinds.get(cols.kind[row], 0) + 1
            if cols.kind[row] == RecordKind.ADD:
                adds[cols.record_id[row]] = cols.body(row)
            assert cols.offset[row] % 8 == 0 and cols.size[row] >= 32 + len(cols.body(row))
    assert kinds[RecordKind.ADD] == 300 and kinds[RecordKind.DELETE] == len(range(5, 300, 11))
    assert kinds[RecordKind.UPDATE] == len(range(3, 300, 7))
    assert kinds[RecordKind.ADD_TX] == kinds[RecordKind.COMMIT] == 6
    rng = random.Random(1)
    assert adds[0] == rng.randbytes(rng.randrange(0, 300))


def test_columns_own_their_bytes_after_the_file_is_gone(tmp_path):
    _write_mixed(tmp_path, count=50)
    path = list_directory(str(tmp_path)).data[0].path
    scan = scan_file(path)
    expected = [scan.columns.body(row) for row in range(scan.columns.count)]
    os.truncate(path, 0)
    os.unlink(path)
    assert [scan.columns.body(row) for row in range(scan.columns.count)] == expected
    assert not scan.cut_short and scan.header.file_id == scan.data.header.file_id


def test_damage_in_the_middle_is_a_row_and_a_torn_end_is_the_end_check(tmp_path):
    _write_mixed(tmp_path, count=40)
    data = list_directory(str(tmp_path)).data[0]
    before = scan_file(data.path).columns
    victim = 5
    flip_byte(data.path, before.offset[victim] + 40, 0x40)
    after = scan_file(data.path).columns
    assert after.count == before.count
    assert after.check[victim] == FrameCheck.INVALID and after.kind[victim] == 0
    assert after.size[victim] == before.size[victim] and after.body(victim) == b""
    assert list(after.record_id)[victim + 1:] == list(before.record_id)[victim + 1:]
    # damage the last frame: nothing valid follows, so it is where data ends
    last = before.count - 1
    with open(data.path, "r+b") as handle:
        handle.seek(before.offset[last] + 16)
        handle.write(b"\xff")
    torn = scan_file(data.path).columns
    assert torn.count == before.count - 1
    assert torn.end_offset == before.offset[last] and torn.end_check == FrameCheck.INVALID


def test_scan_frames_rows_come_from_the_columns(tmp_path):
    from journal_engine._impl import scan_frames
    _write_mixed(tmp_path, count=60)
    data = list_directory(str(tmp_path)).data[0]
    with open(data.path, "rb") as handle:
        raw = handle.read()
    stamp, start = stamp_of(data.header.file_id), data.header.data_start
    cols = scan_columns(raw, stamp, start)
    rows = scan_frames(raw, stamp, start)
    assert len(rows) == cols.count + 1
    assert rows[-1][:2] == (cols.end_offset, cols.end_check)
    for row, frame in enumerate(rows[:-1]):
        assert frame == (cols.offset[row], 0, cols.kind[row], cols.record_type[row], cols.record_id[row],
                         cols.tx_id[row], cols.body(row))


def test_an_empty_region_gives_no_rows():
    cols = scan_columns(bytes(8192), 7, 4096)
    assert cols.count == 0 and cols.end_offset == 4096 and cols.end_check == FrameCheck.ZERO
    assert list(cols.body_offsets) == [0] and cols.bodies == b""
    with pytest.raises(IndexError):
        cols.body(0)


@pytest.mark.twin
@pytest.mark.parametrize("seed", range(12))
def test_compiled_columns_equal_the_twins_on_damaged_files(tmp_path, seed):
    from journal_engine import _scan
    _write_mixed(tmp_path, seed=seed, count=120)
    rng = random.Random(seed)
    for data in list_directory(str(tmp_path)).data:
        raw = bytearray(open(data.path, "rb").read())
        for _ in range(rng.randrange(0, 6)):   # random damage, some of it in headers and lengths
            at = rng.randrange(data.header.data_start, min(len(raw), data.header.data_start + 20_000))
            raw[at] ^= 1 << rng.randrange(8)
        stamp, start = stamp_of(data.header.file_id), data.header.data_start
        compiled = _scan.scan_columns(bytes(raw), stamp, start)
        twin = twin_scan.scan_columns(bytes(raw), stamp, start)
        assert _columns_as_lists(compiled) == _columns_as_lists(twin)
        assert _scan.scan_frames(bytes(raw), stamp, start) == twin_scan.scan_frames(bytes(raw), stamp, start)


@pytest.mark.twin
@pytest.mark.parametrize("stamp", [0x1234, 0])
def test_a_valid_frame_after_zeros_of_any_length_is_found_as_the_twin_finds_it(stamp):
    """The compiled search for the next valid frame steps over zeros 64 bytes at a time (a stamp
    other than 0 cannot lie in them): a frame after a zeroed gap of any length and alignment, or
    with only its stamp word past the zeros, is found where the twin finds it, and with a stamp of
    0 the search is the twin's, word by word."""
    from journal_engine import _codec, _scan
    first = _codec.encode_frame(RecordKind.ADD, 1, stamp, 1, 0, b"first")
    second = _codec.encode_frame(RecordKind.ADD, 1, stamp, 2, 0, b"after the gap")
    for gap in range(0, 400, 8):
        for lead in (0, 8, 56):
            raw = bytes(lead) + first + bytes(gap) + second + bytes(200)
            compiled = _scan.scan_columns(raw, stamp, lead)
            assert _columns_as_lists(compiled) == _columns_as_lists(twin_scan.scan_columns(raw, stamp, lead))
            assert 2 in list(compiled.record_id)


def _replay_directory(replay, scan, directory):
    """A ReplayState of `replay` (compiled _replay or the twin) over every file of a directory, scanned
    by `scan` (compiled _scan or the twin)."""
    state = replay.ReplayState((9,))
    for data in list_directory(str(directory)).data:
        raw = open(data.path, "rb").read()
        state.replay_columns(scan.scan_columns(raw, stamp_of(data.header.file_id), data.header.data_start),
                             data.path)
    return state


def test_load_records_are_a_mapping_made_when_looked_at(tmp_path):
    from collections.abc import Mapping
    live = _write_mixed(tmp_path, count=400)
    with Journal(tmp_path, read_only=True) as journal:
        records = journal.load().records
    assert isinstance(records, Mapping) and len(records) == len(live)
    assert list(records) == list(records.keys()) and set(records) == set(live)
    assert {record_id: rec.body for record_id, rec in records.items()} == live
    assert [rec.record_id for rec in records.values()] == list(records)
    assert 3 in records and records[3].updates == [(9, b"u" * 3)] and records.get(5) is None and 5 not in records
    assert records.get(-1) is None and "3" not in records
    with pytest.raises(KeyError):
        records[5]
    assert records == dict(records.items()) and records[3] == records[3]
    if IMPLEMENTATION == "cython":   # the twin keeps a dict of RecordInfo; the core makes them on demand
        assert records[3] is not records[3]


@pytest.mark.twin
def test_compiled_replay_equals_the_twins_record_for_record(tmp_path):
    from journal_engine import _replay, _scan
    _write_mixed(tmp_path, seed=3, count=500)
    with Journal(tmp_path, file_size=SMALL, sync="none") as journal:   # re-adds after deletes, open tx
        journal.load()
        journal.delete(0)
        journal.add(0, 7, b"again")
        journal.update(0, 9, b"later")
        journal.add_tx(77, 5_000, 1, b"never committed")
    compiled, twin = _replay_directory(_replay, _scan, tmp_path), _replay_directory(twin_replay, twin_scan, tmp_path)
    assert list(compiled.records.items()) == list(twin.records.items())
    assert list(compiled.records)[-1] == 0
    assert compiled.records[0].updates == [(9, b"later")]
    for name in ("corrupt", "anomalies", "frames_read", "replaceable_updates", "adds"):
        assert getattr(compiled, name) == getattr(twin, name), name
    assert sorted(compiled.live.items()) == sorted(twin.live.items()) and len(compiled.live) == len(compiled.records)
    assert {tx: [op[:3] + (compiled.body(op[3]),) for op in ops] for tx, (ops, *_rest) in compiled.transactions.items()} \
        == {tx: [op[:3] + (twin.body(op[3]),) for op in ops] for tx, (ops, *_rest) in twin.transactions.items()} \
        == {77: [(RecordKind.ADD_TX, 5_000, 1, b"never committed")]}


@pytest.mark.twin
@pytest.mark.parametrize("ids_in_order", [True, False])
def test_records_are_found_by_id_before_and_after_the_live_set_is_taken(tmp_path, ids_in_order):
    """The compiled replay finds a record by id through its table of entries while it runs; taking
    ``live`` turns that table into the live set in place, and the records are then found by a binary
    search of the ids (added in order) or a table of their own (not in order) -- the same answers."""
    from journal_engine import _replay, _scan
    ids = list(range(0, 900, 3)) if ids_in_order else random.Random(7).sample(range(5_000), 300)
    with Journal(tmp_path, file_size=SMALL, sync="none") as journal:
        journal.load()
        for record_id in ids:
            journal.add(record_id, 4, b"body %d" % record_id)
        for record_id in ids[::5]:
            journal.update(record_id, 9, b"update %d" % record_id)
        for record_id in ids[1::7]:
            journal.delete(record_id)
    states = {"compiled": _replay_directory(_replay, _scan, tmp_path),
              "twin": _replay_directory(twin_replay, twin_scan, tmp_path)}
    deleted, absent = ids[1], max(ids) + 1
    before = {name: {record_id: state.records.get(record_id) for record_id in ids} for name, state in states.items()}
    for state in states.values():
        live = dict(state.live.items())
        assert len(live) == len(state.records) and sum(live.values()) == state.live.total_bytes
        records = state.records
        assert {record_id: records.get(record_id) for record_id in ids} == before["twin"]
        assert deleted not in records and absent not in records and records.get(deleted) is None
        assert records[ids[0]].updates == [(9, b"update %d" % ids[0])]
        assert list(records) == [record_id for record_id in ids if record_id in live]
    assert before["compiled"] == before["twin"]
    assert sorted(states["compiled"].live.items()) == sorted(states["twin"].live.items())
    with pytest.raises(RuntimeError, match="ended"):    # the compiled replay's table is the live set now
        states["compiled"].replay_columns(states["compiled"].files[0], "again")


def _records_of_columns(columns) -> list:
    """(id, type, body, updates) of every record of RecordColumns, read through its columns."""
    buffers = columns.buffers
    out = []
    for i in range(len(columns)):
        updates = [(columns.update_type[u],
                    buffers[columns.update_buffer[u]][columns.update_start[u]:columns.update_end[u]])
                   for u in range(columns.update_first[i], columns.update_first[i + 1])]
        out.append((columns.record_id[i], columns.record_type[i],
                    buffers[columns.body_buffer[i]][columns.body_start[i]:columns.body_end[i]], updates))
    return out


@pytest.mark.twin
def test_record_columns_of_the_live_set_equal_those_of_its_records(tmp_path):
    """The message store's recovery reads the live set as columns (no RecordInfo made): they hold
    what the RecordInfos hold, in the same order, also for records re-added and updated across files."""
    from journal_engine import _replay, _scan
    _write_mixed(tmp_path, seed=5, count=600)
    with Journal(tmp_path, file_size=SMALL, sync="none") as journal:
        journal.load()
        journal.delete(0)
        journal.add(0, 7, b"again")
        journal.update(0, 9, b"later")
        journal.update(0, 10, b"")
    compiled, twin = _replay_directory(_replay, _scan, tmp_path), _replay_directory(twin_replay, twin_scan, tmp_path)
    from_live = _records_of_columns(_replay.record_columns(compiled.records))
    expected = [(rec.record_id, rec.record_type, rec.body, rec.updates) for rec in twin.records.values()]
    assert from_live == expected == _records_of_columns(_replay.record_columns(twin.records))
    assert from_live[-1] == (0, 7, b"again", [(9, b"later"), (10, b"")])
    assert _replay.record_columns({1: twin_replay.RecordInfo(1, 2, bytearray(b"x"))}) is None   # not bytes
    assert len(_replay.record_columns({})) == 0


@pytest.mark.parametrize("records, threads_wanted", [(150, False), (700, True)])
def test_files_are_decoded_on_several_threads_only_when_there_are_enough_bytes(tmp_path, monkeypatch, records,
                                                                              threads_wanted):
    """A pool of threads costs more than it saves on a small journal (the crash harness loads
    thousands of them): below SCAN_THREADS_MIN_BYTES recovery decodes on its own thread."""
    from journal_engine.storage.journal import scan
    pools = []
    real_pool = scan.ThreadPoolExecutor
    monkeypatch.setattr(scan.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(scan, "ThreadPoolExecutor", lambda *args, **kwargs: pools.append(kwargs) or real_pool(*args, **kwargs))
    with Journal(str(tmp_path), file_size=1024 * 1024, sync="none") as journal:
        journal.load()
        for record_id in range(records):
            journal.add(record_id, 1, bytes([record_id % 251]) * 8000)
    data = list_directory(str(tmp_path)).data
    assert len(data) >= 2 and (sum(d.size for d in data) >= scan.SCAN_THREADS_MIN_BYTES) == threads_wanted
    with Journal(str(tmp_path), read_only=True) as journal:
        assert len(journal.load().records) == records
    assert bool(pools) == threads_wanted


_PLAIN_AND_TX = st.lists(st.tuples(
    st.sampled_from([RecordKind.ADD, RecordKind.ADD, RecordKind.UPDATE, RecordKind.UPDATE, RecordKind.DELETE,
                     RecordKind.ADD_TX, RecordKind.UPDATE_TX, RecordKind.DELETE_TX, RecordKind.COMMIT,
                     RecordKind.ROLLBACK]),
    st.integers(0, 40),          # a small id space: re-adds of live ids and updates of dead ones happen
    st.integers(0, 3),           # tx id
    st.sampled_from([1, 9])),    # user type (9 is replaceable)
    max_size=400)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_PLAIN_AND_TX, files=st.integers(1, 4), damaged=st.booleans(), grown=st.booleans())
def test_compiled_replay_of_any_frames_equals_the_twins(ops, files, damaged, grown):
    """The compiled replay applies runs of plain adds, updates and deletes without the GIL and hands
    every other row -- a transaction's, a damaged region, an add of a live id, an update of one that
    is not live, a table or an entry array that must grow (sized for nothing here), a chain of
    updates in a file not chained before -- to its path with the GIL: the same records, live set,
    anomalies and counts as the twin's, frame for frame."""
    from journal_engine import _codec, _replay, _scan
    stamp = 0x1234
    if grown:   # more records than the tables hold at first: they grow in the middle of a run
        ops = [(RecordKind.ADD, 100 + i, 0, 1) for i in range(1500)] + ops
    chunks = [ops[len(ops) * i // files:len(ops) * (i + 1) // files] for i in range(files)]
    buffers = []
    for index, chunk in enumerate(chunks):
        frames = []
        for kind, record_id, tx_id, user_type in chunk:
            body = b"%d:%d" % (record_id, len(frames))
            if kind in (RecordKind.COMMIT, RecordKind.ROLLBACK):
                body = b""
            frames.append(_codec.encode_frame(kind, user_type, stamp, record_id, tx_id, body))
        if damaged and index == 0 and len(frames) > 2:
            frames.insert(1, b"\xff" * len(frames[1]))     # a damaged region followed by valid frames
        buffers.append(b"".join(frames) + bytes(64))
    states = {"compiled": _replay.ReplayState((9,)), "twin": twin_replay.ReplayState((9,))}
    scan_of = {"compiled": _scan, "twin": twin_scan}
    for name, state in states.items():
        for index, buffer in enumerate(buffers):
            state.replay_columns(scan_of[name].scan_columns(buffer, stamp, 0), f"file-{index}")
    compiled, twin = states["compiled"], states["twin"]
    for name in ("corrupt", "anomalies", "frames_read", "replaceable_updates", "adds"):
        assert getattr(compiled, name) == getattr(twin, name), name
    assert list(compiled.records.items()) == list(twin.records.items())
    assert sorted(compiled.live.items()) == sorted(twin.live.items())
    assert compiled.live.total_bytes == twin.live.total_bytes
