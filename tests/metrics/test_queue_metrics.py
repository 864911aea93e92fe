"""The per-queue metrics (journal_engine/metrics/broker.py) of a real broker driven through sends,
receives, acknowledgements, rollbacks until a message is dead-lettered, a poison ack and an expiry:
the exposition text parsed with prometheus_client's own parser, every value checked against the
numbers the scenario makes and against the broker's own QueueInfo."""
from __future__ import annotations

import pytest
from metrics_text import sample, samples_named, samples_of

from journal_engine import AddressSettings, Broker, ClassicRedeliveryPolicy, ManualClock
from journal_engine.metrics import BrokerCollector, registry_for, render

# QueueInfo field behind each per-queue metric (a sample name, as the parser gives it)
QUEUE_FIELDS = {
    "journal_engine_queue_messages": "message_count",
    "journal_engine_queue_scheduled_messages": "scheduled_count",
    "journal_engine_queue_delivering_messages": "delivering_count",
    "journal_engine_queue_consumers": "consumer_count",
    "journal_engine_queue_messages_added_total": "messages_added",
    "journal_engine_queue_messages_delivered_total": "messages_delivered",
    "journal_engine_queue_messages_redelivered_total": "messages_redelivered",
    "journal_engine_queue_messages_acknowledged_total": "messages_acknowledged",
    "journal_engine_queue_messages_rolled_back_total": "messages_rolled_back",
    "journal_engine_queue_messages_expired_total": "messages_expired",
    "journal_engine_queue_messages_dropped_total": "messages_dropped",
}


@pytest.fixture
def clock():
    return ManualClock(start_ms=1_000)


@pytest.fixture
def broker(tmp_path, clock):
    broker = Broker(tmp_path / "broker", clock=clock)
    broker.address_settings.add("orders", AddressSettings(
        max_delivery_attempts=3, dead_letter_address="DLA", auto_create_dead_letter_resources=True,
        expiry_address="EXA", auto_create_expiry_resources=True))
    broker.create_queue("orders")
    yield broker
    broker.close()


def drive(broker: Broker, clock: ManualClock) -> None:
    """Four sends; one acknowledged, one rolled back until dead-lettered (3 attempts), one poison-acked
    by a consumer whose Classic redelivery policy allows no redelivery, one expired."""
    for body in (b"first", b"failing", b"poisoned"):
        broker.send("orders", body)
    broker.send("orders", b"expiring", expiration=clock.now_ms() + 500)
    consumer = broker.create_consumer("orders")
    consumer.ack(consumer.receive())
    for _ in range(3):
        failing = consumer.receive()
        assert failing.body == b"failing"
        consumer.rollback(failing)
    consumer.close()
    giving_up = broker.create_consumer("orders", redelivery_policy=ClassicRedeliveryPolicy(maximum_redeliveries=0))
    poisoned = giving_up.receive()
    assert poisoned.body == b"poisoned"
    giving_up.rollback(poisoned)
    giving_up.close()
    clock.advance(1_000)
    assert broker.create_consumer("orders").receive() is None      # the last one expired on the way


def test_queue_metrics_count_what_the_broker_did(broker, clock):
    drive(broker, clock)
    families = samples_of(render(registry_for(broker))[0])
    orders = {"queue": "orders", "address": "orders"}
    expected = {
        "journal_engine_queue_messages": 0,
        "journal_engine_queue_consumers": 1,                    # the last, still open
        "journal_engine_queue_messages_added_total": 4,
        "journal_engine_queue_messages_delivered_total": 5,     # first, failing x3, poisoned
        "journal_engine_queue_messages_redelivered_total": 2,   # failing's second and third
        "journal_engine_queue_messages_acknowledged_total": 1,
        "journal_engine_queue_messages_rolled_back_total": 4,
        "journal_engine_queue_messages_expired_total": 1,
        "journal_engine_queue_messages_dropped_total": 0,
    }
    for name, value in expected.items():
        assert sample(families, name, orders) == value, name
    reason = dict(orders, reason="max-delivery-attempts")
    assert sample(families, "journal_engine_queue_messages_dead_lettered_total", reason) == 1
    assert sample(families, "journal_engine_queue_messages_dead_lettered_total", dict(orders, reason="poison-ack")) == 1
    dead_letter_queue = {"queue": "DLQ.orders", "address": "DLA"}
    assert sample(families, "journal_engine_queue_messages", dead_letter_queue) == 2
    assert sample(families, "journal_engine_queue_messages_added_total", {"queue": "EXP.orders", "address": "EXA"}) == 1
    assert sample(families, "journal_engine_broker_queues", {}) == 3


def test_every_queue_metric_is_its_queue_info(broker, clock):
    drive(broker, clock)
    broker.send("orders", b"waiting")
    broker.send("orders", b"later", scheduled_delivery_time=clock.now_ms() + 60_000)
    held = broker.create_consumer("orders")
    assert held.receive() is not None
    families = samples_of(render(registry_for(broker))[0])
    infos = broker.queue_infos()
    assert [info.name for info in infos] == broker.queue_names()
    for info in infos:
        labels = {"queue": info.name, "address": info.address}
        for name, field in QUEUE_FIELDS.items():
            assert sample(families, name, labels) == getattr(info, field), (info.name, name)
        dead = {found.labels["reason"]: found.value
                for found in samples_named(families, "journal_engine_queue_messages_dead_lettered_total")
                if found.labels["queue"] == info.name}
        assert dead == info.dead_letters
        assert sum(info.dead_letters.values()) == info.messages_killed
    orders = broker.queue("orders")
    assert (orders.message_count, orders.scheduled_count, orders.delivering_count) == (2, 1, 1)


def test_a_session_rollback_and_a_close_count_as_the_queue_says(broker):
    """A transacted session rolled back is a failed delivery; a consumer's close hands its message
    back uncounted, so the next delivery is not a redelivery."""
    broker.send("orders", b"one")
    session = broker.create_session(transacted=True)
    consumer = session.create_consumer("orders")
    assert consumer.receive() is not None
    session.rollback()
    session.close()
    closing = broker.create_consumer("orders")
    assert closing.receive().delivery_count == 2
    closing.close()
    info = broker.queue("orders")
    assert (info.messages_delivered, info.messages_redelivered, info.messages_rolled_back) == (2, 1, 1)
    again = broker.create_consumer("orders")
    assert again.receive().delivery_count == 2          # the close took its count back
    info = broker.queue("orders")
    assert (info.messages_delivered, info.messages_redelivered, info.messages_rolled_back) == (3, 2, 1)


def test_an_embedder_registers_the_collector_in_its_own_registry():
    from prometheus_client import CollectorRegistry, generate_latest

    with Broker() as broker:            # in memory: no store, so no journal metrics
        broker.create_queue("jobs")
        broker.send("jobs", b"x")
        registry = CollectorRegistry()
        registry.register(BrokerCollector(broker))
        families = samples_of(generate_latest(registry))
        assert sample(families, "journal_engine_queue_messages", {"queue": "jobs", "address": "jobs"}) == 1
        text, content_type = render(registry_for(broker))
        assert content_type.startswith("text/plain; version=")
        assert b"journal_engine_journal_" not in text and b"journal_engine_broker_recovery_seconds" not in text
