"""Transactions are all-or-nothing across close and reopen.

A transaction's records become live only at its COMMIT; a ROLLBACK (explicit, or
appended by load() for a transaction that never completed) drops them; a
PREPARE keeps them pending across any number of reopens until decided.
"""
from __future__ import annotations

import mmap
import os
import random

import pytest

from journal_engine import RecordKind, UnknownRecordError, UnknownTransactionError
from journal_engine._impl import crc32c, scan_frames
from journal_engine.limits import FILE_HEADER_SIZE_BYTES
from journal_engine.storage.journal.format import DATA_NAME, FileHeader, stamp_of

SMALL = 64 * 1024


def picture(records: dict) -> dict:
    return {rid: (rec.record_id, rec.record_type, rec.body, list(rec.updates)) for rid, rec in records.items()}


def frames_of(directory) -> list[tuple]:
    """(kind, record_id, tx_id) of every valid frame in the directory's data files, in replay order."""
    files = []
    for name in os.listdir(directory):
        if DATA_NAME.match(name):
            path = os.path.join(directory, name)
            with open(path, "rb") as handle:
                header = FileHeader.decode(handle.read(FILE_HEADER_SIZE_BYTES), path, crc32c)
            files.append((header.sequence, path, header.file_id, header.data_start))
    out = []
    for _sequence, path, file_id, data_start in sorted(files):
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            for offset, check, kind, _user, record_id, tx_id, _body in scan_frames(view, stamp_of(file_id),
                                                                                 data_start):
                if check == 0:
                    out.append((kind, record_id, tx_id))
    return out


def reopen(open_journal, journal, **options):
    journal.close()
    options.setdefault("file_size", SMALL)
    return open_journal(**options)


@pytest.mark.parametrize("count", [1, 10, 600])
def test_transaction_without_commit_is_invisible_after_reopen_and_rolled_back_once(open_journal, journal_dir,
                                                                                  count):
    journal, _ = open_journal(file_size=SMALL)
    journal.add(1, 1, b"outside")
    for index in range(count):
        journal.add_tx(42, 1000 + index, 2, bytes([index % 256]) * 300)
    journal.update_tx(42, 1, 3, b"tx update of an outside record")
    journal.sync()
    journal, loaded = reopen(open_journal, journal)
    assert picture(loaded.records) == {1: (1, 1, b"outside", [])}
    assert loaded.report.rolled_back == [42]
    assert loaded.prepared == []
    assert journal.stats()["pending_transactions"] == 0
    # load appended (and synced) a ROLLBACK for it
    assert (RecordKind.ROLLBACK, 0, 42) in frames_of(journal_dir)
    journal, loaded = reopen(open_journal, journal)
    assert loaded.report.rolled_back == []
    assert picture(loaded.records) == {1: (1, 1, b"outside", [])}
    assert [f for f in frames_of(journal_dir) if f[0] == RecordKind.ROLLBACK] == [(RecordKind.ROLLBACK, 0, 42)]


@pytest.mark.parametrize("count", [1, 10, 600])
def test_commit_applies_every_record_of_the_transaction(open_journal, count):
    rng = random.Random(count)
    journal, _ = open_journal(file_size=SMALL)
    bodies = {1000 + index: rng.randbytes(rng.randrange(0, 400)) for index in range(count)}
    for rid, body in bodies.items():
        journal.add_tx(7, rid, 4, body)
    assert journal.stats()["live_records"] == 0
    journal.commit(7)
    assert journal.stats()["live_records"] == count
    journal, loaded = reopen(open_journal, journal)
    assert picture(loaded.records) == {rid: (rid, 4, body, []) for rid, body in bodies.items()}
    assert loaded.report.rolled_back == []


@pytest.mark.parametrize("count", [1, 10, 600])
def test_rollback_applies_none_of_the_transaction(open_journal, count):
    journal, _ = open_journal(file_size=SMALL)
    journal.add(1, 1, b"kept")
    for index in range(count):
        journal.add_tx(8, 1000 + index, 4, bytes(200))
    journal.update_tx(8, 1, 9, b"never")
    journal.delete_tx(8, 1)
    journal.rollback(8)
    assert journal.stats()["pending_transactions"] == 0
    journal, loaded = reopen(open_journal, journal)
    assert picture(loaded.records) == {1: (1, 1, b"kept", [])}
    assert loaded.report.rolled_back == []


def test_interleaved_transactions_each_keep_their_own_outcome(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    rng = random.Random(5)
    outcomes = {tx: rng.choice(["commit", "rollback", "open", "prepare"]) for tx in range(1, 41)}
    expected = {}
    for round_ in range(5):
        for tx in outcomes:
            rid = tx * 100 + round_
            body = rng.randbytes(rng.randrange(1, 300))
            journal.add_tx(tx, rid, tx % 256, body)
            if outcomes[tx] == "commit":
                expected[rid] = (rid, tx % 256, body, [])
    for tx, outcome in outcomes.items():
        if outcome == "commit":
            journal.commit(tx)
        elif outcome == "rollback":
            journal.rollback(tx)
        elif outcome == "prepare":
            journal.prepare(tx, f"xid-{tx}".encode())
    journal, loaded = reopen(open_journal, journal)
    assert picture(loaded.records) == expected
    assert sorted(loaded.report.rolled_back) == sorted(tx for tx, o in outcomes.items() if o == "open")
    assert sorted((t.tx_id, t.xid) for t in loaded.prepared) == sorted(
        (tx, f"xid-{tx}".encode()) for tx, o in outcomes.items() if o == "prepare")
    for tx in loaded.prepared:
        assert [r.record_id for r in tx.records] == [tx.tx_id * 100 + r for r in range(5)]


def test_prepared_transaction_survives_several_reopens_until_committed(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    journal.add(1, 1, b"live")
    journal.add_tx(77, 2, 2, b"prepared add")
    journal.update_tx(77, 1, 3, b"prepared update")
    journal.prepare(77, b"global-xid")
    for cycle in range(4):
        journal, loaded = reopen(open_journal, journal)
        assert [(t.tx_id, t.xid, len(t.records)) for t in loaded.prepared] == [(77, b"global-xid", 2)]
        assert loaded.report.rolled_back == []
        assert picture(loaded.records) == {1: (1, 1, b"live", [])} | {
            10 + c: (10 + c, 9, bytes(100), []) for c in range(cycle)}
        assert journal.stats()["pending_transactions"] == 1
        journal.add(10 + cycle, 9, bytes(100))   # unrelated work between the reopens
    journal.commit(77)
    journal, loaded = reopen(open_journal, journal)
    assert loaded.prepared == []
    assert picture(loaded.records)[1] == (1, 1, b"live", [(3, b"prepared update")])
    assert picture(loaded.records)[2] == (2, 2, b"prepared add", [])


def test_prepared_transaction_survives_compaction_and_reopen(open_journal):
    journal, _ = open_journal(file_size=SMALL, compact_min_files=0)
    journal.add_tx(5, 1, 1, b"waiting")
    journal.prepare(5, b"xa")
    for rid in range(100, 400):   # several files of records that are deleted again
        journal.add(rid, 2, bytes(600))
    for rid in range(100, 400):
        journal.delete(rid)
    journal.compact()
    assert journal.stats()["compactions"] == 1
    journal, loaded = reopen(open_journal, journal, compact_min_files=0)
    assert [(t.tx_id, t.xid) for t in loaded.prepared] == [(5, b"xa")]
    assert loaded.records == {}
    journal.rollback(5)
    journal, loaded = reopen(open_journal, journal, compact_min_files=0)
    assert loaded.prepared == [] and loaded.records == {}


def test_open_transaction_survives_compaction_then_commits(open_journal):
    journal, _ = open_journal(file_size=SMALL, compact_min_files=0)
    journal.add(1, 1, b"target")
    journal.add_tx(6, 2, 1, b"in flight")
    journal.update_tx(6, 1, 2, b"in flight update")
    for rid in range(100, 300):
        journal.add(rid, 2, bytes(600))
        journal.delete(rid)
    journal.compact()
    journal.commit(6)
    journal, loaded = reopen(open_journal, journal, compact_min_files=0)
    assert picture(loaded.records) == {1: (1, 1, b"target", [(2, b"in flight update")]),
                                       2: (2, 1, b"in flight", [])}


def test_update_tx_and_delete_tx_of_records_added_outside_the_transaction(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    journal.add(1, 1, b"one")
    journal.add(2, 1, b"two")
    journal.update_tx(3, 1, 5, b"one updated")
    journal.delete_tx(3, 2)
    # nothing changes before the commit
    journal, loaded = reopen(open_journal, journal)
    assert picture(loaded.records) == {1: (1, 1, b"one", []), 2: (2, 1, b"two", [])}
    assert loaded.report.rolled_back == [3]
    journal.update_tx(3, 1, 5, b"one updated")
    journal.delete_tx(3, 2)
    journal.commit(3)
    assert journal.stats()["live_records"] == 1
    journal, loaded = reopen(open_journal, journal)
    assert picture(loaded.records) == {1: (1, 1, b"one", [(5, b"one updated")])}


def test_update_tx_and_delete_tx_of_records_added_inside_the_transaction(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    journal.add_tx(4, 10, 1, b"ten")
    journal.add_tx(4, 11, 1, b"eleven")
    journal.update_tx(4, 10, 2, b"ten updated")
    journal.update_tx(4, 10, 3, b"ten updated again")
    journal.delete_tx(4, 11)
    journal.commit(4)
    journal, loaded = reopen(open_journal, journal)
    assert picture(loaded.records) == {10: (10, 1, b"ten", [(2, b"ten updated"), (3, b"ten updated again")])}


def test_update_tx_of_a_record_added_in_another_open_transaction_is_refused(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    journal.add_tx(1, 10, 1, b"not yet live")
    with pytest.raises(UnknownRecordError):
        journal.update_tx(2, 10, 1, b"x")
    with pytest.raises(UnknownRecordError):
        journal.delete_tx(2, 10)
    assert journal.stats()["pending_transactions"] == 1


def test_delete_then_add_of_the_same_id_in_one_transaction_replaces_the_record(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    journal.add(1, 1, b"old")
    journal.update(1, 2, b"old update")
    journal.delete_tx(9, 1)
    journal.add_tx(9, 1, 3, b"new")
    journal.commit(9)
    journal, loaded = reopen(open_journal, journal)
    assert picture(loaded.records) == {1: (1, 3, b"new", [])}
    journal.update(1, 4, b"after")   # the replaced record is live for the non-tx API too
    journal, loaded = reopen(open_journal, journal)
    assert picture(loaded.records) == {1: (1, 3, b"new", [(4, b"after")])}


def test_tx_update_of_a_record_deleted_before_the_commit_does_not_resurrect_it(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    journal.add(1, 1, b"x")
    journal.update_tx(2, 1, 2, b"late")
    journal.delete(1)
    journal.commit(2)
    assert journal.stats()["live_records"] == 0
    journal, loaded = reopen(open_journal, journal)
    assert loaded.records == {}
    assert loaded.report.corrupt == []


def test_transaction_id_can_be_reused_after_commit_rollback_or_load_rollback(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    journal.add_tx(1, 1, 1, b"first")
    journal.commit(1)
    journal.add_tx(1, 2, 1, b"second, rolled back")
    journal.rollback(1)
    journal.add_tx(1, 3, 1, b"third, left open")
    journal, loaded = reopen(open_journal, journal)
    assert loaded.report.rolled_back == [1]
    with pytest.raises(UnknownTransactionError):
        journal.commit(1)   # load already rolled it back
    journal.add_tx(1, 4, 1, b"fourth")
    journal.commit(1)
    journal, loaded = reopen(open_journal, journal)
    assert sorted(loaded.records) == [1, 4]


def test_prepared_transaction_is_not_rolled_back_but_open_ones_next_to_it_are(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    journal.add_tx(1, 1, 1, b"prepared")
    journal.prepare(1, b"x1")
    journal.add_tx(2, 2, 1, b"open")
    journal.add_tx(3, 3, 1, b"committed")
    journal.commit(3)
    journal, loaded = reopen(open_journal, journal)
    assert loaded.report.rolled_back == [2]
    assert [t.tx_id for t in loaded.prepared] == [1]
    assert sorted(loaded.records) == [3]
    assert journal.stats()["pending_transactions"] == 1
    journal.commit(1)
    journal, loaded = reopen(open_journal, journal)
    assert sorted(loaded.records) == [1, 3] and loaded.prepared == [] and loaded.report.rolled_back == []
