"""The Python group commit's leader rule (journal_engine/_twin/group_commit.py), shared by the twin
core and the LMDB store, and the one record writer both message-store backends use."""
from __future__ import annotations

import threading
import time

import pytest

from journal_engine import MessageStore, _impl
from journal_engine._twin.group_commit import BatchGathering


def test_a_leader_waits_until_as_many_waiters_joined_as_last_time():
    lock = threading.Lock()
    gathering = BatchGathering(lock, window_us=5_000_000)
    gathering.served(4)
    started = time.monotonic()

    def waiter() -> None:
        time.sleep(0.05)
        with lock:
            gathering.join()

    threads = [threading.Thread(target=waiter) for _ in range(4)]
    for thread in threads:
        thread.start()
    with lock:
        gathering.wait()
        batch = gathering.take()
    for thread in threads:
        thread.join()
    assert batch == 4
    assert time.monotonic() - started < 2.5, "the leader waited out the window although its batch was full"


def test_a_leader_stops_gathering_at_the_end_of_the_window():
    lock = threading.Lock()
    gathering = BatchGathering(lock, window_us=50_000)
    gathering.served(8)
    with lock:
        gathering.join()
        started = time.monotonic()
        gathering.wait()
        elapsed = time.monotonic() - started
        assert gathering.take() == 1
    assert 0.04 <= elapsed < 1.0


@pytest.mark.parametrize("last_batch", [0, 1])
def test_a_leader_after_a_lone_commit_does_not_wait(last_batch):
    lock = threading.Lock()
    gathering = BatchGathering(lock, window_us=5_000_000)
    gathering.last_batch = last_batch
    started = time.monotonic()
    with lock:
        gathering.wait()
    assert time.monotonic() - started < 0.5


def test_a_leader_stops_gathering_when_told():
    lock = threading.Lock()
    gathering = BatchGathering(lock, window_us=5_000_000)
    gathering.served(3)
    started = time.monotonic()
    with lock:
        gathering.wait(lambda: False)
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("backend", ["journal", "lmdb"])
def test_both_backends_get_the_same_record_writer(tmp_path, backend):
    """One writer for both stores: the journal's frames go straight into its core, LMDB's records
    through the record-store protocol (before, LMDB ran the Python twin's writer)."""
    pytest.importorskip("lmdb", reason="the LMDB backend needs lmdb: pip install 'journal_engine[lmdb]'")
    later_ms = int(time.time() * 1000) + 86_400_000      # a time already past comes back as 0 ("now")
    store = MessageStore(tmp_path / backend, backend=backend)
    try:
        store.load()
        assert type(store._writer) is _impl.RecordWriter
        store.store_queue(1, "q", "q")
        store.store_message(7, "q", b"body")
        store.store_reference(1, 7)
        assert store.update_delivery_count(1, 7, 1) is True
        assert store.update_delivery_count(1, 7, 1) is False          # unchanged: not written again
        assert store.update_scheduled_delivery_time(1, 7, later_ms, 1) is True
    finally:
        store.close()
    again = MessageStore(tmp_path / backend, backend=backend)
    try:
        state = again.load()
        [reference] = state.references[1]
        assert (reference.message_id, reference.delivery_count, reference.scheduled_delivery_time) == (
            7, 1, later_ms)
    finally:
        again.close()
