"""The asyncio face: coroutines append and are resumed once their records are durable, resolved by
the journal's flusher with one hand-over per sync and event loop (storage/journal/durable_futures.py)."""
from __future__ import annotations

import asyncio
import threading

import pytest

from journal_engine import Broker, Journal, MessageStore
from journal_engine.errors import JournalClosedError
from journal_engine.record_format import RecordKind


def _journal(directory, sync: str) -> Journal:
    journal = Journal(directory, sync=sync)
    journal.load()
    return journal


@pytest.mark.parametrize("sync", ["always", "group", "none"])
def test_every_async_write_returns_durable(tmp_path, sync):
    journal = _journal(tmp_path, sync)
    try:
        async def main():
            await journal.add_async(1, 1, b"one")
            assert journal.durable_bytes == journal.appended_bytes
            await journal.update_async(1, 2, b"two")
            await journal.append_group_async([(RecordKind.ADD, 2, 1, b"a"), (RecordKind.UPDATE, 2, 3, b"b")])
            assert journal.durable_bytes == journal.appended_bytes
            journal.add_tx(9, 3, 1, b"tx")
            await journal.commit_async(9)
            await journal.delete_async(2)
            assert journal.durable_bytes == journal.appended_bytes
            journal.add(4, 1, b"later", sync=False)
            await journal.sync_async()
            assert journal.durable_bytes == journal.appended_bytes

        asyncio.run(main())
    finally:
        journal.close()
    with Journal(tmp_path) as reopened:
        records = reopened.load().records
    assert sorted(records) == [1, 3, 4]
    assert records[1].updates == [(2, b"two")]


def test_many_waiters_share_syncs_and_each_sync_wakes_a_loop_once(tmp_path):
    """256 coroutines, 8 records each: a sync resumes its loop with one call_soon_threadsafe."""
    journal = _journal(tmp_path, "group")
    loop = asyncio.new_event_loop()
    hand_overs = []
    call_soon_threadsafe = loop.call_soon_threadsafe

    def counted(callback, *args, **kwargs):
        hand_overs.append(callback)
        return call_soon_threadsafe(callback, *args, **kwargs)

    loop.call_soon_threadsafe = counted
    waiters, per_waiter = 256, 8

    async def waiter(index: int) -> None:
        for n in range(per_waiter):
            await journal.add_async(index * per_waiter + n, 1, b"r" * 64)

    async def main() -> None:
        await asyncio.gather(*(waiter(index) for index in range(waiters)))

    try:
        syncs_before = journal.sync_count
        loop.run_until_complete(main())
        syncs = journal.sync_count - syncs_before
        assert journal.durable_bytes == journal.appended_bytes
    finally:
        loop.close()
        journal.close()
    records = waiters * per_waiter
    # a hand-over per sync, and now and then one after a pass that found its batch durable already
    # (its waiters appended just before the previous sync ended)
    assert len(hand_overs) <= 2 * syncs, f"{len(hand_overs)} hand-overs for {syncs} syncs"
    assert len(hand_overs) <= records // 32, f"{len(hand_overs)} hand-overs for {records} records: waiters did not share"


def test_loops_in_several_threads_and_a_thread_wait_together(tmp_path):
    journal = _journal(tmp_path, "group")
    errors = []

    def run_loop(base: int) -> None:
        async def main():
            await asyncio.gather(*(journal.add_async(base + n, 1, b"x") for n in range(50)))
        try:
            asyncio.run(main())
        except BaseException as exc:    # reported below: a thread's exception is otherwise lost
            errors.append(exc)

    def run_thread() -> None:
        for n in range(50):
            journal.add(10_000 + n, 1, b"t", sync=True)

    threads = [threading.Thread(target=run_loop, args=(base,)) for base in (0, 1000, 2000)]
    threads.append(threading.Thread(target=run_thread))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert not errors and not any(thread.is_alive() for thread in threads)
        assert journal.stats()["live_records"] == 200
        assert journal.durable_bytes == journal.appended_bytes
    finally:
        journal.close()


def test_async_writes_on_a_closed_journal_raise(tmp_path):
    journal = _journal(tmp_path, "group")
    journal.close()
    with pytest.raises(JournalClosedError):
        asyncio.run(journal.add_async(1, 1, b"x"))
    with pytest.raises(JournalClosedError):
        asyncio.run(journal.sync_async())


@pytest.mark.parametrize("backend", ["journal", "lmdb"])
def test_message_store_async_writes(tmp_path, backend):
    with MessageStore(tmp_path, backend=backend, sync="group") as store:
        store.load()
        store.store_queue(1, "q", "a")
        store.store_queue(2, "r", "a")

        async def main():
            await asyncio.gather(*(store.store_message_references_async(m, "a", b"m%d" % m, [1, 2])
                                   for m in range(1, 41)))
            assert await store.update_redelivery_async(1, 5, 1, 2**62) == 2
            assert await store.acknowledge_async(2, 7) is False
            await store.sync_async()

        asyncio.run(main())
    with MessageStore(tmp_path, backend=backend) as store:
        state = store.load()
    assert [ref.message_id for ref in state.references[1]] == list(range(1, 41))
    assert 7 not in [ref.message_id for ref in state.references[2]]
    assert state.references[1][4].scheduled_delivery_time == 2**62


def test_broker_send_and_receive_async(tmp_path):
    broker = Broker(tmp_path)
    try:
        broker.create_queue("q")
        consumer = broker.create_consumer("q")

        async def main():
            assert await broker.receive_async(consumer, 0.01) is None
            receiving = asyncio.ensure_future(broker.receive_async(consumer, 5))
            await asyncio.sleep(0.01)
            message_id = await broker.send_async("q", b"hello")
            message = await receiving
            assert (message.message_id, message.body) == (message_id, b"hello")
            consumer.ack(message)
            await broker.sync_async()

        asyncio.run(main())
        stats = broker.stats()["store"]
        assert stats["messages"] == 0
    finally:
        broker.close()
