"""The broker's hot paths, and persist-queue's SQLiteAckQueue doing the same job in the same run.

Groups (numbers and the command in docs/broker.md, "Benchmarks"):
  broker-durable     send -> receive -> ack of durable 256-byte messages, one thread, the message store
                     in "group" sync mode (sends return before the disk has them; the flusher makes them
                     durable within buffer_timeout_us; every round ends with broker.sync()); the same loop
                     on a non-persistent broker (what the store adds), and with
                     persist_delivery_count_before_delivery (each dispatch's count survives a killed
                     process: the delivery-count shadow); SQLiteAckQueue put -> get -> ack with
                     its defaults (auto_commit: a SQLite commit per call). Target: >= 100k messages/s and
                     >= 20x SQLiteAckQueue.
  broker-redelivery  receive -> rollback (redelivery delay 0, max_delivery_attempts -1) of 100 durable
                     messages, all in flight, then all rolled back, over and over; with Artemis's default
                     max_redelivery_records=10 (counts above 10 are not written) and with -1 (a
                     delivery-count record per rollback). Target: >= 50k/s.
Every round checks afterwards (untimed) that the queue holds what it should.
"""
from __future__ import annotations

import pytest
from workload import BODY

import journal_engine
from journal_engine import AddressSettings, Broker

STORE_OPTIONS = {"file_size": 64 * 1024 * 1024}
MESSAGES_PER_ROUND = 50_000
SQLITE_MESSAGES_PER_ROUND = 2_000
ROLLBACKS_PER_ROUND = 100_000
REDELIVERY_QUEUE_DEPTH = 100


def _broker(directory, **options) -> Broker:
    broker = Broker(directory, store_options=STORE_OPTIONS, **options)
    broker.create_queue("bench")
    return broker


def _send_receive_ack(broker: Broker, consumer, n: int) -> None:
    send, receive, ack = broker.send, consumer.receive, consumer.ack
    for _ in range(n):
        send("bench", BODY)
        ack(receive(0))


@pytest.mark.benchmark(group="broker-durable")
@pytest.mark.parametrize("where", ["durable-group-commit", "durable-strict-counts", "in-memory"])
def test_broker_send_receive_ack(rate, case_dir, where):
    broker = _broker(case_dir / "broker" if where != "in-memory" else None,
                     persist_delivery_count_before_delivery=where == "durable-strict-counts")
    consumer = broker.create_consumer("bench")

    def one_round():
        _send_receive_ack(broker, consumer, MESSAGES_PER_ROUND)
        broker.sync()

    try:
        rate(one_round, records=MESSAGES_PER_ROUND, case=f"broker send-receive-ack, {where}",
             settings=f"1 thread, durable messages, {journal_engine.IMPLEMENTATION} core", warmup_rounds=1)
        info = broker.queue("bench")
        assert info.message_count == 0 and info.messages_acknowledged == info.messages_added
        if broker.store is not None:
            assert broker.store.stats()["messages"] == 0
    finally:
        broker.close()


@pytest.mark.benchmark(group="broker-durable")
def test_persist_queue_sqlite_ack_queue_put_get_ack(rate, case_dir):
    persistqueue = pytest.importorskip("persistqueue")
    queue = persistqueue.SQLiteAckQueue(str(case_dir / "sqlite"), multithreading=False)

    def one_round():
        for _ in range(SQLITE_MESSAGES_PER_ROUND):
            queue.put(BODY)
            queue.ack(queue.get(block=False))

    rate(one_round, records=SQLITE_MESSAGES_PER_ROUND, case="persist-queue SQLiteAckQueue put-get-ack",
         settings=f"1 thread, defaults (auto_commit), persist-queue {persistqueue.__version__}")
    assert queue.qsize() == 0


@pytest.mark.benchmark(group="broker-redelivery")
@pytest.mark.parametrize("cap", [10, -1])
def test_broker_rollback_redeliver(rate, case_dir, cap):
    broker = _broker(case_dir / "broker", max_redelivery_records=cap)
    broker.address_settings.add("bench", AddressSettings(max_delivery_attempts=-1))
    for _ in range(REDELIVERY_QUEUE_DEPTH):
        broker.send("bench", BODY)
    consumer = broker.create_consumer("bench")
    receive, rollback = consumer.receive, consumer.rollback

    def one_round():
        # the whole queue in flight, then every message rolled back: each goes back in message order
        for _ in range(ROLLBACKS_PER_ROUND // REDELIVERY_QUEUE_DEPTH):
            delivered = [receive(0) for _ in range(REDELIVERY_QUEUE_DEPTH)]
            for message in delivered:
                rollback(message)
        broker.sync()

    try:
        rate(one_round, records=ROLLBACKS_PER_ROUND, case=f"broker receive-rollback, max_redelivery_records={cap}",
             settings=f"1 thread, {REDELIVERY_QUEUE_DEPTH} durable messages, delay 0", warmup_rounds=1)
        info = broker.queue("bench")
        assert (info.message_count, info.delivering_count) == (REDELIVERY_QUEUE_DEPTH, 0)
        rate.benchmark.extra_info["delivery_count_records_written"] = \
            broker.store.stats()["delivery_count_records_written"]
    finally:
        broker.close()
