"""Round trips of every record kind through close and reopen, and the errors of misuse.

Each test writes through the public Journal API, closes, reopens and checks what
load() returns against what was written.
"""
from __future__ import annotations

import random

import pytest

import journal_engine
from journal_engine import (
    DuplicateRecordError,
    Journal,
    JournalClosedError,
    JournalError,
    JournalLockedError,
    RecordTooLargeError,
    UnknownRecordError,
    UnknownTransactionError,
)
from journal_engine.limits import (
    DATA_START_BYTES,
    FRAME_ALIGNMENT_BYTES,
    FRAME_HEADER_SIZE_BYTES,
    RECORD_ID_MAX,
    SECTOR_SIZE_BYTES,
    TX_ID_MAX,
    max_body_bytes,
)

SMALL = 64 * 1024
U64_MAX = 2 ** 64 - 1


def frame_bytes(body_len: int) -> int:
    """A frame's size on disk: header + body, padded to the alignment."""
    raw = FRAME_HEADER_SIZE_BYTES + body_len
    return raw + (-raw) % FRAME_ALIGNMENT_BYTES


def picture(records: dict) -> dict:
    """Live records as plain tuples (RecordInfo of either implementation compares equal through this)."""
    return {rid: (rec.record_id, rec.record_type, rec.body, list(rec.updates)) for rid, rec in records.items()}


def reopen(open_journal, journal, **options):
    journal.close()
    return open_journal(**options)


# ----- every record kind ---------------------------------------------------------------------------

def test_add_update_delete_survive_reopen(open_journal):
    journal, loaded = open_journal(file_size=SMALL)
    assert loaded.records == {} and loaded.prepared == [] and loaded.report.rolled_back == []
    journal.add(1, 10, b"first")
    journal.add(2, 11, b"second")
    journal.add(3, 12, b"third")
    journal.update(1, 20, b"u1")
    journal.update(1, 21, b"u2")
    journal.update(2, 22, b"")
    journal.delete(3)
    journal, loaded = reopen(open_journal, journal, file_size=SMALL)
    assert picture(loaded.records) == {
        1: (1, 10, b"first", [(20, b"u1"), (21, b"u2")]),
        2: (2, 11, b"second", [(22, b"")]),
    }
    assert loaded.report.corrupt == [] and not loaded.report.torn_tail_truncated
    assert loaded.report.files_read >= 1


def test_committed_transaction_of_every_tx_kind_survives_reopen(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    journal.add(1, 1, b"outside")
    journal.add(2, 1, b"doomed")
    journal.add_tx(7, 3, 5, b"inside")
    journal.update_tx(7, 1, 6, b"tx-update")
    journal.update_tx(7, 3, 6, b"update of a record added in the same tx")
    journal.delete_tx(7, 2)
    journal.commit(7)
    journal, loaded = reopen(open_journal, journal, file_size=SMALL)
    assert picture(loaded.records) == {
        1: (1, 1, b"outside", [(6, b"tx-update")]),
        3: (3, 5, b"inside", [(6, b"update of a record added in the same tx")]),
    }
    assert loaded.report.rolled_back == []


def test_rolled_back_transaction_leaves_no_trace_after_reopen(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    journal.add(1, 1, b"keep")
    journal.add_tx(9, 2, 1, b"never")
    journal.update_tx(9, 1, 1, b"never either")
    journal.delete_tx(9, 1)
    journal.rollback(9)
    journal, loaded = reopen(open_journal, journal, file_size=SMALL)
    assert picture(loaded.records) == {1: (1, 1, b"keep", [])}
    assert loaded.prepared == [] and loaded.report.rolled_back == []


@pytest.mark.parametrize("decision", ["commit", "rollback"])
def test_prepared_transaction_is_returned_with_its_xid_and_decided_after_reopen(open_journal, decision):
    journal, _ = open_journal(file_size=SMALL)
    journal.add(1, 1, b"live")
    journal.add_tx(5, 2, 3, b"tx add")
    journal.update_tx(5, 1, 4, b"tx update")
    journal.delete_tx(5, 1)
    journal.prepare(5, b"\x00xid-\xff")
    journal, loaded = reopen(open_journal, journal, file_size=SMALL)
    assert picture(loaded.records) == {1: (1, 1, b"live", [])}
    assert len(loaded.prepared) == 1
    tx = loaded.prepared[0]
    assert tx.tx_id == 5 and tx.xid == b"\x00xid-\xff"
    assert [(r.kind, r.record_id, r.record_type, r.body) for r in tx.records] == [
        ("add", 2, 3, b"tx add"), ("update", 1, 4, b"tx update"), ("delete", 1, 0, b"")]
    assert loaded.report.rolled_back == []
    getattr(journal, decision)(5)
    journal, loaded = reopen(open_journal, journal, file_size=SMALL)
    assert loaded.prepared == []
    if decision == "commit":
        assert picture(loaded.records) == {2: (2, 3, b"tx add", [])}
    else:
        assert picture(loaded.records) == {1: (1, 1, b"live", [])}


def test_empty_xid_round_trips(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    journal.add_tx(1, 1, 1, b"x")
    journal.prepare(1, b"")
    journal, loaded = reopen(open_journal, journal, file_size=SMALL)
    assert [(t.tx_id, t.xid) for t in loaded.prepared] == [(1, b"")]


# ----- bodies ----------------------------------------------------------------------------------------

BODY_SIZES = [0, 1, 7, 8, 9, 31, 32, 33, 255, 4095, 4096, 4097, 20_000,
              max_body_bytes(SMALL) - 1, max_body_bytes(SMALL)]


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview], ids=["bytes", "bytearray", "memoryview"])
def test_bodies_of_every_size_round_trip_byte_exact(open_journal, wrap):
    rng = random.Random(len(BODY_SIZES))
    bodies = {index: rng.randbytes(size) for index, size in enumerate(BODY_SIZES)}
    journal, _ = open_journal(file_size=SMALL, sync="none")
    for index, body in bodies.items():
        journal.add(index, index % 256, wrap(body))
        journal.update(index, 200, wrap(body[::-1]))
    journal.add_tx(1, 1000, 1, wrap(bodies[len(BODY_SIZES) - 1]))
    journal.update_tx(1, 0, 2, wrap(b""))
    journal.commit(1)
    journal, loaded = reopen(open_journal, journal, file_size=SMALL)
    expected = {index: (index, index % 256, body, [(200, body[::-1])]) for index, body in bodies.items()}
    expected[1000] = (1000, 1, bodies[len(BODY_SIZES) - 1], [])
    expected[0] = (0, 0, b"", [(200, b""), (2, b"")])
    assert picture(loaded.records) == expected


def test_memoryview_slice_body_writes_only_the_slice(open_journal):
    backing = bytearray(b"0123456789abcdef")
    journal, _ = open_journal(file_size=SMALL)
    journal.add(1, 1, memoryview(backing)[3:9])
    backing[3:9] = b"XXXXXX"   # changing the buffer afterwards must not change the record
    journal, loaded = reopen(open_journal, journal, file_size=SMALL)
    assert loaded.records[1].body == b"345678"


@pytest.mark.parametrize("operation", ["add", "update", "add_tx", "update_tx", "prepare"])
def test_body_one_past_max_raises_record_too_large_and_writes_nothing(open_journal, operation):
    journal, _ = open_journal(file_size=SMALL)
    journal.add(1, 1, b"existing")
    journal.sync()
    before = journal.stats()["appended_bytes"]
    too_big = bytes(max_body_bytes(SMALL) + 1)
    with pytest.raises(RecordTooLargeError) as info:
        if operation == "add":
            journal.add(2, 1, too_big)
        elif operation == "update":
            journal.update(1, 1, too_big)
        elif operation == "add_tx":
            journal.add_tx(3, 2, 1, too_big)
        elif operation == "update_tx":
            journal.update_tx(3, 1, 1, too_big)
        else:
            journal.add_tx(3, 2, 1, b"small")
            journal.prepare(3, too_big[4:])   # the PREPARE body is a 4-byte count + the xid
    assert isinstance(info.value, ValueError)
    assert "file_size" in str(info.value)   # the hint names the knob
    if operation != "prepare":
        assert journal.stats()["appended_bytes"] == before
    journal, loaded = reopen(open_journal, journal, file_size=SMALL)
    assert picture(loaded.records) == {1: (1, 1, b"existing", [])}
    assert loaded.prepared == []


def test_body_of_exactly_max_fills_a_whole_file(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    body = random.Random(1).randbytes(max_body_bytes(SMALL))
    journal.add(1, 1, body)
    journal.add(2, 1, body[::-1])
    journal.update(1, 2, body[:100])
    stats = journal.stats()
    assert stats["data_files"] >= 3
    journal, loaded = reopen(open_journal, journal, file_size=SMALL)
    assert picture(loaded.records) == {1: (1, 1, body, [(2, body[:100])]), 2: (2, 1, body[::-1], [])}


def test_max_xid_round_trips(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    xid = random.Random(2).randbytes(max_body_bytes(SMALL) - 4)
    journal.add_tx(1, 1, 1, b"r")
    journal.prepare(1, xid)
    journal, loaded = reopen(open_journal, journal, file_size=SMALL)
    assert [(t.tx_id, t.xid) for t in loaded.prepared] == [(1, xid)]


# ----- many files ------------------------------------------------------------------------------------

def test_reopen_and_continue_appending_across_many_file_switches(open_journal):
    """Ten open/append/close cycles over 64 KiB files: every cycle continues where the last stopped."""
    rng = random.Random(7)
    model: dict[int, tuple] = {}
    next_id = 0
    journal, _ = open_journal(file_size=SMALL, sync="none", compact_min_files=0)
    for cycle in range(10):
        for _ in range(100):
            roll = rng.random()
            if roll < 0.6 or not model:
                body = rng.randbytes(rng.randrange(0, 3000))
                journal.add(next_id, cycle, body)
                model[next_id] = (next_id, cycle, body, [])
                next_id += 1
            elif roll < 0.85:
                rid = rng.choice(sorted(model))
                body = rng.randbytes(rng.randrange(0, 500))
                journal.update(rid, 100 + cycle, body)
                model[rid][3].append((100 + cycle, body))
            else:
                rid = rng.choice(sorted(model))
                journal.delete(rid)
                del model[rid]
        if cycle % 3 == 1:
            journal.sync()
        journal, loaded = reopen(open_journal, journal, file_size=SMALL, sync="none", compact_min_files=0)
        assert picture(loaded.records) == model, f"cycle {cycle}"
        assert loaded.report.corrupt == [] and not loaded.report.torn_tail_truncated
    assert journal.stats()["data_files"] >= 12
    assert loaded.report.files_read >= 12


# ----- ids and types ---------------------------------------------------------------------------------

def test_record_and_transaction_ids_up_to_u64_max_round_trip(open_journal):
    assert RECORD_ID_MAX == U64_MAX and TX_ID_MAX == U64_MAX
    journal, _ = open_journal(file_size=SMALL)
    for rid in (0, 1, 2 ** 32, 2 ** 63, U64_MAX):
        journal.add(rid, 1, rid.to_bytes(8, "little"))
    journal.update(U64_MAX, 2, b"top")
    journal.add_tx(U64_MAX, U64_MAX - 1, 3, b"tx max")
    journal.commit(U64_MAX)
    journal.add_tx(U64_MAX - 1, 5, 3, b"prepared")
    journal.prepare(U64_MAX - 1, b"x")
    journal, loaded = reopen(open_journal, journal, file_size=SMALL)
    assert sorted(loaded.records) == [0, 1, 2 ** 32, 2 ** 63, U64_MAX - 1, U64_MAX]
    assert loaded.records[U64_MAX].updates == [(2, b"top")]
    assert loaded.records[U64_MAX - 1].body == b"tx max"
    assert [t.tx_id for t in loaded.prepared] == [U64_MAX - 1]
    journal.commit(U64_MAX - 1)


def test_compaction_keeps_records_with_ids_up_to_u64_max(open_journal):
    journal, _ = open_journal(file_size=SMALL, sync="none", compact_min_files=0)
    ids = [0, 2 ** 31, 2 ** 32, 2 ** 63 - 1, 2 ** 63, U64_MAX]
    for rid in ids:
        journal.add(rid, 1, rid.to_bytes(8, "little"))
        journal.update(rid, 2, b"u")
    for filler in range(100, 300):   # older files full of dead records, so compaction rewrites the live ones
        journal.add(filler, 3, bytes(600))
        journal.delete(filler)
    journal.compact()
    journal.update(U64_MAX, 4, b"after compaction")
    journal, loaded = reopen(open_journal, journal, file_size=SMALL, compact_min_files=0)
    assert sorted(loaded.records) == ids
    assert loaded.records[U64_MAX].updates == [(2, b"u"), (4, b"after compaction")]
    assert loaded.records[2 ** 63].updates == [(2, b"u")]


@pytest.mark.parametrize("bad_id", [-1, 2 ** 64])
def test_ids_outside_u64_are_rejected(open_journal, bad_id):
    journal, _ = open_journal(file_size=SMALL)
    journal.add(1, 1, b"x")
    calls = [lambda: journal.add(bad_id, 1, b""), lambda: journal.update(bad_id, 1, b""),
             lambda: journal.delete(bad_id), lambda: journal.add_tx(bad_id, 2, 1, b""),
             lambda: journal.add_tx(1, bad_id, 1, b"")]
    for call in calls:
        with pytest.raises((OverflowError, ValueError)):
            call()
    # no transaction can have such an id (the compiled core says OverflowError, the twin "unknown")
    with pytest.raises((OverflowError, ValueError, UnknownTransactionError)):
        journal.commit(bad_id)
    assert journal.stats()["pending_transactions"] == 0


def test_record_types_0_and_255_round_trip(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    journal.add(1, 0, b"zero")
    journal.add(2, 255, b"max")
    journal.update(1, 255, b"u255")
    journal.update(2, 0, b"u0")
    journal.add_tx(1, 3, 255, b"tx")
    journal.update_tx(1, 3, 0, b"txu")
    journal.commit(1)
    journal, loaded = reopen(open_journal, journal, file_size=SMALL)
    assert picture(loaded.records) == {1: (1, 0, b"zero", [(255, b"u255")]), 2: (2, 255, b"max", [(0, b"u0")]),
                                       3: (3, 255, b"tx", [(0, b"txu")])}


@pytest.mark.parametrize("bad_type", [256, -1, 1000])
def test_record_type_outside_u8_raises_value_error_and_writes_nothing(open_journal, bad_type):
    journal, _ = open_journal(file_size=SMALL)
    journal.add(1, 1, b"x")
    journal.sync()                  # the group-mode flusher pads what it syncs: before it, not during the calls
    before = journal.stats()["appended_bytes"]
    for call in (lambda: journal.add(2, bad_type, b"y"), lambda: journal.update(1, bad_type, b"y"),
                 lambda: journal.add_tx(1, 3, bad_type, b"y"), lambda: journal.update_tx(1, 1, bad_type, b"y")):
        with pytest.raises(ValueError):
            call()
    assert journal.stats()["appended_bytes"] == before
    assert journal.stats()["pending_transactions"] == 0
    journal, loaded = reopen(open_journal, journal, file_size=SMALL)
    assert picture(loaded.records) == {1: (1, 1, b"x", [])}


# ----- misuse ------------------------------------------------------------------------------------------

def test_update_or_delete_of_unknown_id_raises_unknown_record(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    journal.add(1, 1, b"x")
    journal.delete(1)
    for call in (lambda: journal.update(1, 1, b"y"), lambda: journal.delete(1),
                 lambda: journal.update(99, 1, b"y"), lambda: journal.delete(99),
                 lambda: journal.update_tx(5, 99, 1, b"y"), lambda: journal.delete_tx(5, 99)):
        with pytest.raises(UnknownRecordError) as info:
            call()
        assert isinstance(info.value, KeyError) and isinstance(info.value, JournalError)
        assert "99" in str(info.value) or "1" in str(info.value)
    assert journal.stats()["pending_transactions"] == 0


def test_duplicate_add_raises_and_a_deleted_id_can_be_added_again(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    journal.add(1, 1, b"a")
    with pytest.raises(DuplicateRecordError):
        journal.add(1, 1, b"b")
    journal.delete(1)
    journal.add(1, 2, b"again")
    journal, loaded = reopen(open_journal, journal, file_size=SMALL)
    assert picture(loaded.records) == {1: (1, 2, b"again", [])}
    with pytest.raises(DuplicateRecordError):
        journal.add(1, 1, b"after reopen")


def test_transaction_control_of_unknown_transaction_raises(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    for call in (lambda: journal.commit(1), lambda: journal.rollback(1), lambda: journal.prepare(1, b"x")):
        with pytest.raises(UnknownTransactionError):
            call()
    journal.add_tx(1, 1, 1, b"x")
    journal.prepare(1, b"x")
    with pytest.raises(UnknownTransactionError):
        journal.prepare(1, b"again")
    journal.commit(1)
    with pytest.raises(UnknownTransactionError):
        journal.commit(1)


def _every_call(journal):
    return {
        "add": lambda: journal.add(50, 1, b"x"),
        "update": lambda: journal.update(1, 1, b"x"),
        "delete": lambda: journal.delete(1),
        "add_tx": lambda: journal.add_tx(9, 51, 1, b"x"),
        "update_tx": lambda: journal.update_tx(9, 1, 1, b"x"),
        "delete_tx": lambda: journal.delete_tx(9, 1),
        "prepare": lambda: journal.prepare(2, b"x"),
        "commit": lambda: journal.commit(2),
        "rollback": lambda: journal.rollback(2),
        "sync": lambda: journal.sync(),
        "compact": lambda: journal.compact(),
    }


@pytest.mark.parametrize("call", list(_every_call(None)))
def test_every_call_after_close_raises_journal_closed(journal_dir, call):
    journal = Journal(journal_dir, file_size=SMALL)
    journal.load()
    journal.add(1, 1, b"live")
    journal.add_tx(2, 3, 1, b"pending")
    journal.close()
    with pytest.raises(JournalClosedError):
        _every_call(journal)[call]()
    journal.close()   # closing twice is harmless
    reopened = Journal(journal_dir, file_size=SMALL)
    try:
        loaded = reopened.load()
        assert sorted(loaded.records) == [1]
        assert loaded.report.rolled_back == [2]
    finally:
        reopened.close()


# Before load, and after close for ids the journal never saw, the answer must still be
# "closed": a lookup of the id first would tell the caller "unknown record" instead.
@pytest.mark.parametrize("call", list(_every_call(None)))
def test_every_call_before_load_raises_journal_closed(journal_dir, call):
    with Journal(journal_dir, file_size=SMALL) as journal:
        with pytest.raises(JournalClosedError):
            _every_call(journal)[call]()
        loaded = journal.load()
        assert loaded.records == {}


@pytest.mark.parametrize("call", list(_every_call(None)))
def test_every_call_after_close_with_ids_never_seen_raises_journal_closed(journal_dir, call):
    journal = Journal(journal_dir, file_size=SMALL)
    journal.load()
    journal.close()
    with pytest.raises(JournalClosedError):
        _every_call(journal)[call]()


def test_load_twice_raises_and_load_after_close_raises(journal_dir):
    journal = Journal(journal_dir, file_size=SMALL)
    journal.load()
    with pytest.raises(JournalError):
        journal.load()
    journal.close()
    with pytest.raises(JournalError):
        journal.load()


def test_second_journal_on_same_directory_is_locked_out_until_close(journal_dir):
    first = Journal(journal_dir, file_size=SMALL)
    first.load()
    first.add(1, 1, b"owned")
    with pytest.raises(JournalLockedError) as info:
        Journal(journal_dir, file_size=SMALL)
    assert info.value.hint
    with pytest.raises(JournalLockedError):
        Journal(journal_dir, file_size=SMALL)   # a refused open does not leave the lock half-taken
    first.close()
    with Journal(journal_dir, file_size=SMALL) as second:
        assert sorted(second.load().records) == [1]


def test_context_manager_closes_and_releases_the_directory(journal_dir):
    with Journal(journal_dir, file_size=SMALL) as journal:
        journal.load()
        journal.add(1, 1, b"x")
    with pytest.raises(JournalClosedError):
        journal.add(2, 1, b"y")
    with Journal(journal_dir, file_size=SMALL) as again:
        assert sorted(again.load().records) == [1]


# ----- stats -----------------------------------------------------------------------------------------

def test_stats_track_records_bytes_files_and_transactions(open_journal):
    journal, _ = open_journal(file_size=SMALL, sync="none")
    stats = journal.stats()
    assert stats["sync_mode"] == "none" and stats["file_size"] == SMALL
    assert stats["implementation"] == journal_engine.IMPLEMENTATION
    assert stats["live_records"] == 0 and stats["live_bytes"] == 0
    assert stats["data_files"] == 1
    assert stats["durable_bytes"] == stats["appended_bytes"]
    start = stats["appended_bytes"]

    bodies = {rid: bytes(rid * 10) for rid in range(1, 21)}
    for rid, body in bodies.items():
        journal.add(rid, 1, body)
    journal.update(3, 1, b"12345")
    journal.delete(4)
    journal.add_tx(1, 100, 1, b"tx")
    stats = journal.stats()
    expected_live = sum(frame_bytes(len(b)) for rid, b in bodies.items() if rid != 4) + frame_bytes(5)
    assert stats["live_records"] == 19
    assert stats["live_bytes"] == expected_live
    assert stats["add_count"] == 20
    assert stats["pending_transactions"] == 1
    # adds, one update, one delete, one add_tx: nothing else (no padding without a sync in "none" mode)
    written = sum(frame_bytes(len(b)) for b in bodies.values()) + frame_bytes(5) + frame_bytes(0) + frame_bytes(2)
    assert stats["appended_bytes"] - start == written
    assert stats["durable_bytes"] <= stats["appended_bytes"]
    assert stats["active_position"] == DATA_START_BYTES + stats["appended_bytes"]

    journal.commit(1)
    journal.sync()
    stats = journal.stats()
    assert stats["pending_transactions"] == 0
    assert stats["live_records"] == 20 and stats["add_count"] == 21
    assert stats["durable_bytes"] == stats["appended_bytes"]
    assert stats["active_position"] % SECTOR_SIZE_BYTES == 0   # a sync pads to a sector boundary
    assert stats["syncs"] >= 1
    assert stats["compactions"] == 0 and stats["last_compaction_error"] is None
    assert stats["needs_compaction"] is False


def test_stats_live_bytes_agree_with_a_reopen(open_journal):
    journal, _ = open_journal(file_size=SMALL, sync="none")
    rng = random.Random(3)
    for rid in range(200):
        journal.add(rid, 1, rng.randbytes(rng.randrange(0, 900)))
    for rid in range(0, 200, 3):
        journal.update(rid, 2, rng.randbytes(rng.randrange(0, 100)))
    for rid in range(0, 200, 5):
        journal.delete(rid)
    before = journal.stats()
    journal, loaded = reopen(open_journal, journal, file_size=SMALL, sync="none")
    after = journal.stats()
    assert after["live_records"] == before["live_records"] == len(loaded.records)
    assert after["live_bytes"] == before["live_bytes"]
    assert after["data_files"] >= before["data_files"] - 1
