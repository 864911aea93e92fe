"""Journals with known contents for the Spark tests, written by the broker (and by a journal, for damage).

The broker's story (a ManualClock, so every time is known): six messages to ``orders``, each with its
send time in the property ``sent_at``; the first acknowledged; the second rolled back three times
(redelivery delay 1 s) and dead-lettered to ``DLA`` (queue ``dead``); the third and fourth
acknowledged; the fifth and sixth left in the queue; a transacted session sends a seventh and commits,
sends an eighth and rolls back. The constants below are what the analyses must find.
"""
from __future__ import annotations

import mmap
import shutil
from pathlib import Path

from journal_engine import AddressSettings, Broker, Journal, ManualClock
from journal_engine._impl import scan_frames
from journal_engine.record_format import RecordKind
from journal_engine.storage.journal.format import stamp_of
from journal_engine.storage.journal.segment_files import list_directory

NOW = 1_700_000_000_000
REDELIVERY_DELAY_MS = 1000
MAX_DELIVERY_ATTEMPTS = 3
POISON_BODY = b"poison!"
FAILED_AT = [NOW + 10_000 + k * REDELIVERY_DELAY_MS for k in range(MAX_DELIVERY_ATTEMPTS)]
POISON_SENT_AT = NOW + 1


def write_broker(directory: Path, store: str = "journal") -> dict:
    """The broker story of the module docstring (``store``: the broker's backend); returns the message ids
    by role."""
    clock = ManualClock(NOW)
    broker = Broker(str(directory), clock=clock, store=store)
    try:
        broker.address_settings.add("orders", AddressSettings(max_delivery_attempts=MAX_DELIVERY_ATTEMPTS,
                                                              dead_letter_address="DLA",
                                                              redelivery_delay=REDELIVERY_DELAY_MS))
        broker.create_queue("orders")
        broker.create_queue("dead", address="DLA")
        consumer = broker.create_consumer("orders")
        first = broker.send("orders", b"first", properties={"sent_at": clock.now_ms(), "n": 0})
        consumer.ack(consumer.receive(0))
        clock.advance(POISON_SENT_AT - clock.now_ms())
        poison = broker.send("orders", POISON_BODY, properties={"sent_at": clock.now_ms(), "n": 1, "f": 2.5,
                                                                "flag": True, "raw": b"\x01\x02", "none": None})
        clock.advance(FAILED_AT[0] - clock.now_ms())
        for failed_at in FAILED_AT:
            clock.advance(failed_at - clock.now_ms())
            message = consumer.receive(0)
            assert message.message_id == poison
            consumer.rollback(message)
        others = []
        for n in range(2, 6):
            clock.advance(1)
            others.append(broker.send("orders", b"m%d" % n, properties={"sent_at": clock.now_ms(), "n": n}))
        for _ in range(2):
            consumer.ack(consumer.receive(0))
        session = broker.create_session(transacted=True)
        committed = session.send("orders", b"in a transaction", properties={"sent_at": clock.now_ms()})
        session.commit()
        session.send("orders", b"rolled back", properties={"sent_at": clock.now_ms()})
        session.rollback()
        session.close()
    finally:
        broker.close()
    return {"first": first, "poison": poison, "others": others, "committed": committed}


def write_journal(directory: Path, records: int = 400, file_size: int = 64 * 1024) -> None:
    """A plain journal over several files: adds, updates, deletes, a committed and a rolled-back transaction."""
    with Journal(str(directory), file_size=file_size) as journal:
        journal.load()
        for record_id in range(1, records + 1):
            journal.add(record_id, 7, b"record %d " % record_id * 24)
            if record_id % 5 == 0:
                journal.update(record_id, 8, b"update")
            if record_id % 7 == 0:
                journal.delete(record_id)
            if record_id % 50 == 0:
                journal.sync()
        journal.add_tx(99, 10_001, 9, b"committed")
        journal.commit(99)
        journal.add_tx(100, 10_002, 9, b"rolled back")
        journal.rollback(100)
        journal.sync()


def python_rows(journal: str) -> list[tuple]:
    """Every valid frame of a journal as the Python reader finds it: (path, offset, kind, id, type, tx, body)."""
    rows = []
    for data in list_directory(journal, as_if_compacted=True).data:
        with open(data.path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            frames = scan_frames(view, stamp_of(data.header.file_id), data.header.data_start)
        rows += [(data.path, offset, RecordKind(kind).name, record_id, user_type, tx_id, body)
                 for offset, check, kind, user_type, record_id, tx_id, body in frames if check == 0]
    return rows


def copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target
