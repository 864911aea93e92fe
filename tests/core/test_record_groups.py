"""Record groups: records appended as one unit (``append_group``), which no write-out, sync or crash
separates — a send's message and references, a rollback's delivery count and scheduled time.

The crash test kills a broker (SIGKILL) at random moments while it sends to several queues and rolls
back with a redelivery delay, with nothing waiting for the disk, and checks that every recovered
send is whole and every recovered rollback has both of its records. ``JOURNAL_ENGINE_GROUP_KILLS``
sets the number of kills per backend (default 8).
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest

from journal_engine import (AddressSettings, Broker, ClassicBrokerConfig, ClassicRedeliveryPolicy, Journal, ManualClock,
                            MessageStore)
from journal_engine.errors import DuplicateRecordError, RecordTooLargeError, UnknownRecordError
from journal_engine.record_format import RecordKind
from journal_engine.storage.journal.format import FREE_SUFFIX, TMP_SUFFIX
from journal_engine.message_store.message_store import StoreTransaction

import group_worker  # noqa: E402
from locations import HELPERS

WORKER = str(HELPERS / "group_worker.py")
# kills per backend (JOURNAL_ENGINE_GROUP_KILLS): each recovery is checked on its own, whatever the number
KILLS = int(os.environ.get("JOURNAL_ENGINE_GROUP_KILLS", "8"))
ADD, UPDATE, DELETE = RecordKind.ADD, RecordKind.UPDATE, RecordKind.DELETE


# ----- the journal's append_group -----------------------------------------------------------------------
def test_append_group_writes_every_record_in_order(tmp_path):
    with Journal(tmp_path, sync="group") as journal:
        journal.load()
        journal.add(1, 1, b"one")
        journal.append_group([(ADD, 2, 3, b"x"), (UPDATE, 2, 4, b"y"), (DELETE, 1, 0, b""),
                              (UPDATE, 2, 5, bytearray(b"z"))], sync=True)
        assert journal.durable_bytes == journal.appended_bytes
    with Journal(tmp_path) as journal:
        records = journal.load().records
    assert list(records) == [2]
    assert (records[2].record_type, records[2].body, records[2].updates) == (3, b"x", [(4, b"y"), (5, b"z")])


@pytest.mark.parametrize("group, error", [
    ([(ADD, 7, 1, b"a"), (ADD, 7, 1, b"b")], DuplicateRecordError),      # added twice within the group
    ([(ADD, 7, 1, b"a"), (UPDATE, 8, 1, b"b")], UnknownRecordError),     # 8 is not live
    ([(ADD, 7, 1, b"a"), (DELETE, 7, 0, b""), (UPDATE, 7, 1, b"c")], UnknownRecordError),   # deleted before
    ([(ADD, 7, 1, b"a"), (RecordKind.ADD_TX, 8, 1, b"b")], ValueError),  # transactions have their own unit
    ([(ADD, 7, 256, b"a")], ValueError),
])
def test_a_bad_record_anywhere_in_a_group_writes_none_of_it(tmp_path, group, error):
    with Journal(tmp_path, sync="none") as journal:
        journal.load()
        before = journal.appended_bytes
        with pytest.raises(error):
            journal.append_group(group)
        assert journal.appended_bytes == before
        assert not journal.is_live(7)


def test_a_group_larger_than_a_file_is_refused(tmp_path):
    with Journal(tmp_path, sync="none", file_size=64 * 1024) as journal:
        journal.load()
        body = b"b" * 20_000
        with pytest.raises(RecordTooLargeError):
            journal.append_group([(ADD, i, 1, body) for i in range(4)])
        assert journal.appended_bytes == journal.durable_bytes


def test_a_group_that_does_not_fit_the_active_file_goes_whole_into_the_next(tmp_path):
    with Journal(tmp_path, sync="none", file_size=64 * 1024) as journal:
        journal.load()
        for record_id in range(15):          # most of the first file
            journal.add(record_id, 1, b"f" * 4000)
        first = journal.stats()["active_file"]
        journal.append_group([(ADD, 100 + i, 1, b"g" * 4000) for i in range(4)])
        assert journal.stats()["active_file"] != first
    with Journal(tmp_path) as journal:
        assert set(range(100, 104)) <= set(journal.load().records)


# ----- the message store and its two record stores -------------------------------------------------------
@pytest.mark.parametrize("backend", ["journal", "lmdb"])
def test_store_send_to_several_queues_and_redelivery_records(tmp_path, backend):
    with MessageStore(tmp_path, backend=backend, sync="group") as store:
        store.load()
        for queue_id in (1, 2, 3):
            store.store_queue(queue_id, f"q{queue_id}", "a")
        store.store_message_references(10, "a", b"body", [1, 2, 3])
        assert store.update_redelivery(2, 10, 1, 2**62) == 2
        assert store.update_redelivery(2, 10, 1, 2**62 + 1) == 1    # the count is unchanged: the time alone
        store.sync()
    with MessageStore(tmp_path, backend=backend) as store:
        state = store.load()
    assert [ref.message_id for queue_id in (1, 2, 3) for ref in state.references[queue_id]] == [10, 10, 10]
    ref = state.references[2][0]
    assert (ref.delivery_count, ref.scheduled_delivery_time) == (1, 2**62 + 1)


def test_redelivery_records_stop_at_the_cap(tmp_path):
    with MessageStore(tmp_path, sync="none", max_redelivery_records=2) as store:
        store.load()
        store.store_queue(1, "q", "a")
        store.store_message_references(5, "a", b"body", [1])
        before = store.stats()["messages_journal"]["appended_bytes"]
        assert store.update_redelivery(1, 5, 3, 1000) == 0
        assert store.stats()["messages_journal"]["appended_bytes"] == before
        with pytest.raises(UnknownRecordError):
            store.update_redelivery(2, 5, 1, 1000)


# ----- killed at random moments -----------------------------------------------------------------------------
def _run_and_kill(directory, backend: str, delay_s: float) -> None:
    worker = subprocess.Popen([sys.executable, WORKER, str(directory), backend], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        line = worker.stdout.readline()
        assert line.strip() == "ready", f"the worker did not start: {line!r} {worker.stderr.read()}"
        time.sleep(delay_s)
        assert worker.poll() is None, f"the worker stopped: {worker.stderr.read()}"
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        worker.stdout.close()
        worker.stderr.close()


@pytest.mark.parametrize("backend", ["journal", "lmdb"])
def test_sigkill_at_random_moments_recovers_whole_sends_and_whole_rollbacks(tmp_path, backend):
    rng = random.Random(16)
    recovered_messages = recovered_rollbacks = 0
    for kill in range(KILLS):
        directory = tmp_path / f"kill-{kill}"
        # the LMDB store's first commit of the loop's sends and rollbacks comes 0.4-1 s after 'ready' (a
        # loaded 2-core machine; the journal's flusher writes out within milliseconds): kill it later
        delay_s = rng.uniform(0.05, 0.4) if backend == "journal" else rng.uniform(0.6, 1.6)
        _run_and_kill(directory, backend, delay_s)
        with MessageStore(directory, backend=backend) as store:
            state = store.load()
        names = {queue_id: queue.name for queue_id, queue in state.queues.items()}
        references: dict[int, list[str]] = {}
        for queue_id, refs in state.references.items():
            for ref in refs:
                references.setdefault(ref.message_id, []).append(names[queue_id])
                if names[queue_id] == group_worker.queue_name(0):
                    # every rollback writes a count and a scheduled time: one without the other is a split group
                    assert (ref.delivery_count > 0) == (ref.scheduled_delivery_time > 0), (
                        f"kill {kill} after {delay_s:.3f} s: message {ref.message_id} recovered with delivery "
                        f"count {ref.delivery_count} and scheduled time {ref.scheduled_delivery_time}")
                    recovered_rollbacks += ref.delivery_count > 0
        for message_id, queues in references.items():
            assert len(queues) == group_worker.QUEUES, (
                f"kill {kill} after {delay_s:.3f} s: message {message_id} recovered with references on "
                f"{sorted(queues)} only: its send was split")
        recovered_messages += len(references)
    assert recovered_messages > 0 and recovered_rollbacks > 0, "the kills found nothing written: the test saw nothing"


# ----- a broker operation is one unit: the process dies before any one of its store calls ------------------
# Deterministic: the process "dies" (a BaseException nothing on the way catches) on entry to the k-th store
# write of one broker operation, for every k; everything appended before it is then made durable, the
# directory copied as it is, and the copy recovered. It must hold the state before the operation or the
# state after it, nothing in between. The store calls are the broker's units of writing: a record group,
# a transaction's commit, a single record.

NOW = 1_700_000_000_000
SMALL = {"file_size": 256 * 1024}
STORE_WRITES = ("store_queue", "update_queue_arguments", "delete_queue", "store_message", "store_reference",
                "store_acknowledge", "delete_message", "update_delivery_count", "update_delivery_count_after_cancel",
                "update_scheduled_delivery_time", "update_redelivery", "update_delivery_counts",
                "update_scheduled_delivery_times", "before_delivery", "before_delivery_batch",
                "store_message_references", "acknowledge")


class Died(BaseException):
    """The process died here."""


def _broker(directory, **options) -> Broker:
    broker = Broker(directory, clock=ManualClock(NOW), store_options=SMALL, **options)
    broker.address_settings.add("orders", AddressSettings(redelivery_delay=100, max_delivery_attempts=2,
                                                          dead_letter_address="DLA"))
    broker.create_queue("orders")
    broker.create_queue("DLQ", address="DLA")
    return broker


def _received(broker, queue: str = "orders", **options):
    consumer = broker.create_consumer(queue, **options)
    return consumer, consumer.receive(0)


def artemis_rollback_that_dead_letters(directory):
    broker = _broker(directory)
    broker.send("orders", b"m")
    consumer, message = _received(broker)
    consumer.rollback(message)                  # count 1, due NOW + 100
    broker.clock.advance(100)
    message = consumer.receive(0)               # count 2 = max_delivery_attempts
    return broker, lambda: consumer.rollback(message)


def artemis_rollback_that_schedules(directory):
    broker = _broker(directory)
    broker.send("orders", b"m")
    consumer, message = _received(broker)
    return broker, lambda: consumer.rollback(message)


def qpid_rollback_that_dead_letters(directory):
    broker = _broker(directory)
    broker.create_queue("q", arguments={"x-qpid-maximum-delivery-count": 2, "x-qpid-dlq-enabled": True})
    broker.send("q", b"m")
    consumer, message = _received(broker, "q")
    consumer.rollback(message)                  # count 1: back at once
    message = consumer.receive(0)
    return broker, lambda: consumer.rollback(message)


def classic_policy_rollback_that_schedules(directory):
    broker = _broker(directory)
    broker.send("orders", b"m")
    consumer, message = _received(broker, redelivery_policy=ClassicRedeliveryPolicy(
        maximum_redeliveries=3, initial_redelivery_delay=500))
    return broker, lambda: consumer.rollback(message)


def classic_poison_ack(directory):
    broker = Broker(directory, clock=ManualClock(NOW), store_options=SMALL, config=ClassicBrokerConfig())
    broker.create_queue("orders")
    broker.send("orders", b"m")
    consumer, message = _received(broker)
    return broker, lambda: consumer.rollback(message)


def scheduled_send_to_two_queues(directory):
    broker = _broker(directory)
    broker.create_queue("a", address="fan", routing_type="multicast")
    broker.create_queue("b", address="fan", routing_type="multicast")
    return broker, lambda: broker.send("fan", b"m", scheduled_delivery_time=NOW + 5000)


OPERATIONS = [artemis_rollback_that_dead_letters, artemis_rollback_that_schedules, qpid_rollback_that_dead_letters,
              classic_policy_rollback_that_schedules, classic_poison_ack, scheduled_send_to_two_queues]


def _recovered(directory, copy) -> dict:
    """Every stored reference (queue name -> sorted (message id, delivery count, scheduled time)) as recovery
    finds it in a copy of ``directory`` taken now. A queue without one is left out: a dead-letter queue
    created on first use is a step of its own, harmless when the move after it is lost."""
    # files the journal's pool thread prepares and renames at any moment (``*.tmp`` once ready, a free
    # ``*.jef`` once taken into use) are left out: they hold no record yet, and may vanish mid-copy
    shutil.copytree(directory, copy, ignore=shutil.ignore_patterns("*" + TMP_SUFFIX, "*" + FREE_SUFFIX))
    with MessageStore(copy, **SMALL) as store:
        state = store.load(now_ms=NOW)
    return {queue.name: sorted((ref.message_id, ref.delivery_count, ref.scheduled_delivery_time)
                               for ref in state.references[queue_id])
            for queue_id, queue in state.queues.items() if state.references.get(queue_id)}


def _die_at(monkeypatch, call: int) -> list:
    """Make the ``call``-th store write from now on (0-based) raise Died before it writes anything."""
    seen: list = []

    def wrap(cls, name):
        method = getattr(cls, name)

        def dying(*args, **kwargs):
            seen.append(name)
            if len(seen) - 1 == call:
                raise Died(name)
            return method(*args, **kwargs)
        monkeypatch.setattr(cls, name, dying)

    for name in STORE_WRITES:
        wrap(MessageStore, name)
    wrap(StoreTransaction, "commit")
    return seen


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda operation: operation.__name__)
def test_a_broker_operation_recovers_whole_or_not_at_all_wherever_the_process_dies(tmp_path, monkeypatch,
                                                                                  operation):
    broker, run = operation(tmp_path / "whole")
    broker.sync()
    before = _recovered(tmp_path / "whole", tmp_path / "before")
    run()
    broker.sync()
    after = _recovered(tmp_path / "whole", tmp_path / "after")
    broker.close()
    assert before != after, "the operation wrote nothing: the test would see nothing"
    call = 0
    while True:
        directory = tmp_path / f"dies-at-{call}"
        broker, run = operation(directory)
        broker.sync()
        with monkeypatch.context() as patched:
            seen = _die_at(patched, call)
            try:
                run()
            except Died:
                pass
        broker.sync()                           # the worst case: everything appended before the death is durable
        state = _recovered(directory, tmp_path / f"dies-at-{call}-copy")
        broker.close()
        assert state in (before, after), (
            f"{operation.__name__}, died at store call {call} ({seen}): recovered {state}, "
            f"neither the state before {before} nor after {after}")
        if len(seen) <= call:                   # the operation ran to its end: every point was tried
            break
        call += 1
