"""Record groups: records appended as one unit (``append_group``), which no write-out, sync or crash
separates — a send's message and references, a rollback's delivery count and scheduled time.

The crash test kills a broker (SIGKILL) at random moments while it sends to several queues and rolls
back with a redelivery delay, with nothing waiting for the disk, and checks that every recovered
send is whole and every recovered rollback has both of its records.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from journal_engine import Journal, MessageStore
from journal_engine.errors import DuplicateRecordError, RecordTooLargeError, UnknownRecordError
from journal_engine.record_format import RecordKind

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import group_worker  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "group_worker.py")
KILLS = 8
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
        delay_s = rng.uniform(0.05, 0.4)
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
