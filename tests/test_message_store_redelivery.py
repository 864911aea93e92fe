"""The delivery-count (34) and scheduled-time (36) writers: Artemis's max-redelivery-records rules,
the batch entry point, strict mode at dispatch, and compaction of the replaceable records."""
from __future__ import annotations

from array import array

import pytest

from journal_engine import MessageStore, RecordType, RecoveredReference, UnknownRecordError

SMALL_FILE = 256 * 1024
NOW_MS = 1_700_000_000_000
COUNT = RecordType.UPDATE_DELIVERY_COUNT
TIME = RecordType.SET_SCHEDULED_DELIVERY_TIME


@pytest.fixture
def open_store(tmp_path):
    opened = []

    def _open(name="store", **options):
        options.setdefault("file_size", SMALL_FILE)
        store = MessageStore(tmp_path / name, **options)
        opened.append(store)
        return store, store.load(now_ms=NOW_MS)

    yield _open
    for store in opened:
        store.close()


def _one_message(store, queue_id=1, message_id=1):
    if queue_id not in store.queues():
        store.store_queue(queue_id, f"q{queue_id}", "a")
    store.store_message(message_id, "a", b"body")
    store.store_reference(queue_id, message_id)


def _rollbacks(store, times, *, delay_ms=1, queue_id=1, message_id=1):
    """What the broker does on each rollback (Artemis checkRedelivery): persist the count, then the
    scheduled time when there is a redelivery delay."""
    for delivery_count in range(1, times + 1):
        store.update_delivery_count(queue_id, message_id, delivery_count)
        if delay_ms:
            store.update_scheduled_delivery_time(queue_id, message_id, NOW_MS + delay_ms, delivery_count)


@pytest.mark.parametrize("cap, records", [(0, 0), (1, 2), (-1, 200)])
def test_hundred_rollbacks_write_as_many_records_as_artemis(open_store, cap, records):
    """RescheduleJDBCDeliveryTest: redelivery delay 1, 100 rollbacks -> 0 / 2 / 200 records of 34+36."""
    store, _ = open_store(max_redelivery_records=cap)
    _one_message(store)
    _rollbacks(store, 100)
    assert store.record_count(COUNT) + store.record_count(TIME) == records
    store.close()
    store, state = open_store(max_redelivery_records=cap)
    assert [ref.message_id for ref in state.references[1]] == [1]     # still delivered after the restart
    assert state.references[1][0].delivery_count == {0: 0, 1: 1, -1: 100}[cap]


def test_a_count_equal_to_the_persisted_one_is_not_written_again(open_store):
    store, _ = open_store(max_redelivery_records=-1)
    _one_message(store)
    assert store.update_delivery_count(1, 1, 0) is False     # 0 is what a new reference has persisted
    assert store.update_delivery_count(1, 1, 2) is True
    assert store.update_delivery_count(1, 1, 2) is False
    assert store.update_delivery_count(1, 1, 1) is True      # a lower count is a change (Artemis: !=)
    assert store.record_count(COUNT) == 2
    assert store.persisted_delivery_count(1, 1) == 1


def test_scheduled_time_has_the_cap_but_not_the_unchanged_rule(open_store):
    store, _ = open_store(max_redelivery_records=2)
    _one_message(store)
    assert store.update_scheduled_delivery_time(1, 1, NOW_MS + 10, 2) is True
    assert store.update_scheduled_delivery_time(1, 1, NOW_MS + 10, 2) is True    # same again: written
    assert store.update_scheduled_delivery_time(1, 1, NOW_MS + 10, 3) is False   # above the cap
    # a message sent with a delivery time has count 0: written even with cap 0, as in Artemis
    store0, _ = open_store("cap0", max_redelivery_records=0)
    _one_message(store0)
    assert store0.update_scheduled_delivery_time(1, 1, NOW_MS + 10, 0) is True
    assert store0.update_delivery_count(1, 1, 1) is False
    assert store0.update_scheduled_delivery_time(1, 1, NOW_MS + 10, 1) is False
    assert store.record_count(TIME) == 2 and store0.record_count(TIME) == 1


@pytest.mark.parametrize("cap", [0, 1, 3, 10, -1])
def test_counts_are_written_only_up_to_the_cap(open_store, cap):
    store, _ = open_store(max_redelivery_records=cap)
    _one_message(store)
    written = [store.update_delivery_count(1, 1, count) for count in range(1, 16)]
    limit = 15 if cap < 0 else cap
    assert written == [count <= limit for count in range(1, 16)]
    store.close()
    _store, state = open_store(max_redelivery_records=cap)
    # above the cap a crash (or restart) loses the extra counts: the documented consequence
    assert state.references[1] == [RecoveredReference(1, limit, 0)]


def test_batch_entry_point_writes_what_single_calls_write(open_store):
    single, _ = open_store("single", max_redelivery_records=4)
    batch, _ = open_store("batch", max_redelivery_records=4)
    for store in (single, batch):
        store.store_queue(1, "a", "a")
        store.store_queue(2, "b", "a")
        for message_id in range(1, 51):
            store.store_message(message_id, "a", b"x")
            store.store_reference(1, message_id)
            store.store_reference(2, message_id)
    plan = [(queue_id, message_id, (message_id * queue_id + step) % 7)
            for step in range(6) for queue_id in (1, 2) for message_id in range(1, 51)]
    expected = sum(single.update_delivery_count(q, m, c) for q, m, c in plan)
    expected_times = sum(single.update_scheduled_delivery_time(q, m, NOW_MS + c, c) for q, m, c in plan)
    queues, messages, counts = (array("Q", [p[0] for p in plan]), [p[1] for p in plan], [p[2] for p in plan])
    assert batch.update_delivery_counts(queues, messages, counts) == expected
    assert batch.update_scheduled_delivery_times(queues, messages, [NOW_MS + c for c in counts], counts) \
        == expected_times
    for queue_id in (1, 2):
        for message_id in range(1, 51):
            assert batch.persisted_delivery_count(queue_id, message_id) == \
                single.persisted_delivery_count(queue_id, message_id)
    assert batch.record_count(COUNT) == single.record_count(COUNT) == expected
    assert batch.record_count(TIME) == single.record_count(TIME) == expected_times


def test_batch_with_an_unknown_reference_writes_nothing(open_store):
    store, _ = open_store(max_redelivery_records=-1)
    _one_message(store)
    with pytest.raises(UnknownRecordError, match="message 2"):
        store.update_delivery_counts([1, 1], [1, 2], [5, 5])
    with pytest.raises(UnknownRecordError):
        store.update_scheduled_delivery_times([1, 1], [1, 2], [NOW_MS, NOW_MS], [5, 5])
    with pytest.raises(ValueError, match="differ in length"):
        store.update_delivery_counts([1, 1], [1], [5, 5])
    with pytest.raises(OverflowError):
        store.update_delivery_counts([1], [1], [-1])
    assert store.persisted_delivery_count(1, 1) == 0
    assert store.record_count(COUNT) == store.record_count(TIME) == 0
    assert store.update_delivery_counts([], [], []) == 0


def test_batch_with_sync_waits_once_for_the_disk(open_store):
    store, _ = open_store(sync="none", max_redelivery_records=-1)
    store.store_queue(1, "a", "a")
    for message_id in range(1, 101):
        store.store_message(message_id, "a", b"x")
        store.store_reference(1, message_id)
    journal = store._journal
    syncs = journal.stats()["syncs"]
    assert store.update_delivery_counts([1] * 100, range(1, 101), [1] * 100, sync=True) == 100
    assert journal.stats()["syncs"] == syncs + 1
    assert journal.durable_bytes == journal.appended_bytes


# ----- persist_delivery_count_before_delivery ---------------------------------------------------------------

def test_before_delivery_does_nothing_without_the_strict_mode(open_store):
    store, _ = open_store()
    _one_message(store)
    assert store.before_delivery(1, 1, 1) is False
    assert store.record_count(COUNT) == 0


def test_strict_mode_hands_the_record_to_the_os_without_waiting_for_the_disk(open_store):
    store, _ = open_store(sync="none", persist_delivery_count_before_delivery=True)
    _one_message(store)
    journal = store._journal
    syncs = journal.stats()["syncs"]
    assert store.before_delivery(1, 1, 1) is True
    assert journal.written_bytes == journal.appended_bytes        # with the OS: survives a killed process
    assert journal.stats()["syncs"] == syncs                       # not synced: a power cut may lose it
    assert store.before_delivery(1, 1, 1) is False                 # unchanged: nothing more
    assert store.update_delivery_count(1, 1, 1) is False           # the rollback after it writes no count


def test_strict_delivery_sync_waits_for_the_disk(open_store):
    store, _ = open_store(sync="group", buffer_timeout_us=10_000_000, persist_delivery_count_before_delivery=True,
                          strict_delivery_sync=True)
    _one_message(store)
    journal = store._journal
    assert store.before_delivery(1, 1, 1) is True
    assert journal.durable_bytes == journal.appended_bytes


def test_strict_dispatchers_share_one_sync(open_store):
    """Many concurrent dispatchers in strict_delivery_sync mode: fewer syncs than dispatches."""
    import threading

    store, _ = open_store(sync="group", persist_delivery_count_before_delivery=True, strict_delivery_sync=True,
                          max_redelivery_records=-1)
    store.store_queue(1, "a", "a")
    threads_n, per_thread = 8, 40
    for message_id in range(threads_n * per_thread):
        store.store_message(message_id, "a", b"x")
        store.store_reference(1, message_id)
    store.sync()
    syncs = store._journal.stats()["syncs"]
    start = threading.Barrier(threads_n)

    def dispatcher(first):
        start.wait()
        for message_id in range(first, first + per_thread):
            assert store.before_delivery(1, message_id, 1)

    threads = [threading.Thread(target=dispatcher, args=(index * per_thread,)) for index in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    used = store._journal.stats()["syncs"] - syncs
    assert 1 <= used < threads_n * per_thread
    assert store.record_count(COUNT) == threads_n * per_thread


def test_before_delivery_above_the_cap_writes_nothing(open_store):
    store, _ = open_store(persist_delivery_count_before_delivery=True, max_redelivery_records=2)
    _one_message(store)
    assert [store.before_delivery(1, 1, count) for count in (1, 2, 3, 4)] == [True, True, False, False]
    assert store.before_delivery_batch([1], [1], [2]) == 0
    assert store.record_count(COUNT) == 2


# ----- compaction ------------------------------------------------------------------------------------------

def test_compaction_keeps_only_the_latest_count_and_time_per_reference(open_store):
    store, _ = open_store(max_redelivery_records=-1)
    store.store_queue(1, "a", "a")
    store.store_queue(2, "b", "a")
    for message_id in range(1, 21):
        store.store_message(message_id, "a", b"x" * 100)
        store.store_reference(1, message_id)
        store.store_reference(2, message_id)
    for count in range(1, 31):
        for message_id in range(1, 21):
            store.update_delivery_count(1, message_id, count)
            store.update_scheduled_delivery_time(1, message_id, NOW_MS + count, count)
            if message_id % 2:
                store.update_delivery_count(2, message_id, count + 100)
    store.store_acknowledge(2, 3)
    assert store.record_count(COUNT) == 20 * 30 + 10 * 30
    store.compact()
    # one 34 per live (message, queue) that has one; message 3's count on queue 2 stays in front of its ack
    assert store.record_count(COUNT) == 20 + 10
    assert store.record_count(TIME) == 20
    assert store.record_count(RecordType.ADD_REF) == 40
    store.update_delivery_count(1, 1, 31)
    store.close()
    store, state = open_store(max_redelivery_records=-1)
    counts = {(queue_id, ref.message_id): (ref.delivery_count, ref.scheduled_delivery_time)
              for queue_id, refs in state.references.items() for ref in refs}
    assert counts[(1, 1)] == (31, NOW_MS + 30)
    assert counts[(1, 2)] == (30, NOW_MS + 30)
    assert counts[(2, 1)] == (130, 0)
    assert counts[(2, 2)] == (0, 0)
    assert (2, 3) not in counts
    assert state.anomalies == []


def test_update_factor_triggers_compaction_of_count_records(open_store):
    """Artemis's rule (b): replaceable updates / adds > 10 with more than compact_min_files files."""
    store, _ = open_store(max_redelivery_records=-1, file_size=64 * 1024, compact_min_files=2,
                          compact_percentage=0)
    store.store_queue(1, "a", "a")
    for message_id in range(1, 5):
        store.store_message(message_id, "a", b"x")
        store.store_reference(1, message_id)
    queues, messages = [1] * 4, [1, 2, 3, 4]
    rounds = 5000                       # 20000 records of 48 bytes: about 15 files of 64 KiB
    for count in range(1, rounds + 1):
        store.update_delivery_counts(queues, messages, [count] * 4)
    journal = store._journal
    if journal._compaction_thread is not None:
        journal._compaction_thread.join()
    # compact_percentage=0 turns rule (a) off: only the update factor can have started these
    assert journal.compaction_count >= 1
    # what is left: the latest per reference plus the records written since the last compaction
    assert store.record_count(COUNT) < 4 * rounds
    store.close()
    _store, state = open_store(max_redelivery_records=-1, file_size=64 * 1024, compact_min_files=2,
                               compact_percentage=0)
    assert [ref.delivery_count for ref in state.references[1]] == [rounds] * 4
