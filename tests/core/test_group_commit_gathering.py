"""The Python group commit's leader rule (journal_engine/storage/group_commit.py), shared by the twin
core and the LMDB store, and the one record writer both message-store backends use."""
from __future__ import annotations

import threading
import time

import pytest

from journal_engine import MessageStore, _impl
from journal_engine.storage.group_commit import BatchGathering


#: a window no test waits out: a leader that returns at all did not wait for it (no bound on how fast)
WINDOW_NEVER_REACHED_US = 3_600_000_000
RETURNS_WITHIN_S = 60        # how long a test waits for a leader that must return before its window


def _leader_returns(lead) -> None:
    """Runs `lead` (a leader's wait under the lock) in a thread and checks that it returned."""
    leader = threading.Thread(target=lead, daemon=True)
    leader.start()
    leader.join(RETURNS_WITHIN_S)
    assert not leader.is_alive(), "the leader waited out a window of an hour"


def test_a_leader_waits_until_as_many_waiters_joined_as_last_time():
    lock = threading.Lock()
    gathering = BatchGathering(lock, window_us=WINDOW_NEVER_REACHED_US)
    gathering.served(4)
    holding, batches = threading.Event(), []

    def join() -> None:
        with lock:
            gathering.join()

    def lead() -> None:
        with lock:
            holding.set()          # the waiters below can join only once wait() releases the lock
            gathering.wait()
            batches.append(gathering.take())

    waiters = [threading.Thread(target=join) for _ in range(4)]

    def start_waiters_once_the_leader_holds_the_lock() -> None:
        holding.wait()
        for waiter in waiters:
            waiter.start()

    starter = threading.Thread(target=start_waiters_once_the_leader_holds_the_lock)
    starter.start()
    _leader_returns(lead)
    starter.join()
    for waiter in waiters:
        waiter.join()
    assert batches == [4]


def test_a_leader_stops_gathering_at_the_end_of_the_window():
    lock = threading.Lock()
    gathering = BatchGathering(lock, window_us=50_000)
    gathering.served(8)
    waited, batches = [], []

    def lead() -> None:
        with lock:
            gathering.join()
            started = time.monotonic()
            gathering.wait()
            waited.append(time.monotonic() - started)
            batches.append(gathering.take())

    _leader_returns(lead)
    assert batches == [1] and waited[0] >= 0.05     # it gathered for the whole window (no bound on how fast)


@pytest.mark.parametrize("last_batch", [0, 1])
def test_a_leader_after_a_lone_commit_does_not_wait(last_batch):
    lock = threading.Lock()
    gathering = BatchGathering(lock, window_us=WINDOW_NEVER_REACHED_US)
    gathering.last_batch = last_batch

    def lead() -> None:
        with lock:
            gathering.wait()

    _leader_returns(lead)


def test_a_leader_stops_gathering_when_told():
    lock = threading.Lock()
    gathering = BatchGathering(lock, window_us=WINDOW_NEVER_REACHED_US)
    gathering.served(3)

    def lead() -> None:
        with lock:
            gathering.wait(lambda: False)

    _leader_returns(lead)


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
