"""A delivery handed back without failing (a consumer or a session closed) lowers the count, and the
lowered count is persisted and judged by the dead-letter rule, as Artemis's ServerConsumerImpl.cancelRefs
followed by QueueImpl.checkRedelivery (ignoring the redelivery delay) do. Artemis's
RedeliveryConsumerTest#testDeliveryPersistent, on both stores."""
from __future__ import annotations

import pytest

from journal_engine import AddressSettings, Broker, ManualClock

NOW = 1_700_000_000_000
BACKENDS = ["journal", "lmdb"]


def open_broker(directory, store, **options) -> Broker:
    small = {"file_size": 256 * 1024} if store == "journal" else None
    return Broker(directory, clock=ManualClock(NOW), store=store, store_options=small,
                  persist_delivery_count_before_delivery=True, **options)


def hand_back(broker: Broker, how: str) -> list[int]:
    """Receive every message of "address" without acknowledging it, then close (consumer or session)."""
    if how == "consumer":
        consumer = broker.create_consumer("address")
        counts = [m.delivery_count for m in iter(lambda: consumer.receive(0), None)]
        consumer.close()
    else:
        session = broker.create_session()
        consumer = session.create_consumer("address")
        counts = [m.delivery_count for m in iter(lambda: consumer.receive(0), None)]
        session.close()
        consumer.close()            # a consumer of a closed session: nothing more happens
    return counts


@pytest.mark.parametrize("store", BACKENDS)
@pytest.mark.parametrize("how", ["consumer", "session"])
def test_redelivery_consumer_test_delivery_persistent(tmp_path, store, how):
    """Strict mode; ten messages handed back uncounted five times; restart: each is delivered with count 1;
    then acknowledged in a transaction that is never committed, restart after restart: 1, 2, 3, 4, 5."""
    directory = tmp_path / "b"
    broker = open_broker(directory, store)
    broker.create_queue("address")
    for index in range(10):
        broker.send("address", str(index).encode())
    for _ in range(5):
        assert hand_back(broker, how) == [1] * 10           # no failed delivery: always 1
    broker.close()
    for loop_ack in range(1, 6):
        broker = open_broker(directory, store)
        session = broker.create_session()
        consumer = session.create_consumer("address")
        messages = list(iter(lambda: consumer.receive(0), None))
        for message in messages:
            consumer.ack(message)                               # in the transaction
        received = [(m.body, m.delivery_count) for m in messages]
        assert received == [(str(i).encode(), loop_ack) for i in range(10)]
        broker.close()                                          # the open transaction is lost


@pytest.mark.parametrize("store", BACKENDS)
def test_the_lowered_count_is_written_once_and_only_when_it_differs(tmp_path, store):
    broker = open_broker(tmp_path / "b", store, max_redelivery_records=-1)
    broker.create_queue("q")
    broker.send("q", b"m")
    queue_id = broker.queue("q").queue_id
    consumer = broker.create_consumer("q")
    message = consumer.receive(0)
    assert broker.store.persisted_delivery_count(queue_id, message.message_id) == 1     # strict: at dispatch
    consumer.close()
    assert broker.store.persisted_delivery_count(queue_id, message.message_id) == 0     # lowered, persisted
    broker.close()


def test_without_strict_mode_an_unchanged_count_writes_nothing(tmp_path):
    broker = Broker(tmp_path / "b", clock=ManualClock(NOW), max_redelivery_records=-1)
    broker.create_queue("q")
    broker.send("q", b"m")
    consumer = broker.create_consumer("q")
    consumer.rollback(consumer.receive(0), delay_ms=0)          # count 1, persisted
    consumer.receive(0)                                         # count 2, in memory only
    before = broker.store.record_count(34)
    consumer.close()                                            # lowered to 1 = the persisted count
    assert broker.store.record_count(34) == before
    assert broker.create_consumer("q").receive(0).delivery_count == 2
    broker.close()


def test_the_dead_letter_rule_applies_to_the_lowered_count_without_a_delay(tmp_path):
    """A count restored above a lowered max_delivery_attempts: the close dead-letters the message."""
    directory = tmp_path / "b"
    broker = Broker(directory, clock=ManualClock(NOW))
    broker.create_queue("q")
    broker.create_queue("dead", address="DLA")
    broker.send("q", b"m")
    consumer = broker.create_consumer("q")
    for _ in range(3):
        consumer.rollback(consumer.receive(0), delay_ms=0)      # count 3, persisted
    broker.close()
    broker = Broker(directory, clock=ManualClock(NOW))
    broker.address_settings.add("q", AddressSettings(max_delivery_attempts=3, dead_letter_address="DLA",
                                                     redelivery_delay=60_000))
    consumer = broker.create_consumer("q")
    assert consumer.receive(0).delivery_count == 4
    consumer.close()                                            # lowered to 3 = max: dead-lettered
    assert broker.queue("q").message_count == 0
    (copy,) = broker.browse("dead")
    assert copy.properties["_JE_DEAD_LETTER_REASON"] == "max-delivery-attempts"
    broker.close()


def test_a_close_applies_no_redelivery_delay(tmp_path):
    broker = Broker(tmp_path / "b", clock=ManualClock(NOW))
    broker.address_settings.add("q", AddressSettings(redelivery_delay=60_000))
    broker.create_queue("q")
    broker.send("q", b"m")
    consumer = broker.create_consumer("q")
    consumer.receive(0)
    consumer.close()
    assert broker.queue("q").scheduled_count == 0
    assert broker.create_consumer("q").receive(0).delivery_count == 1
    broker.close()
