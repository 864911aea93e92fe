"""Qpid Broker-J's maximum delivery count and DLQ, declared with queue-declare arguments (the seed's
chapter "Handling Undeliverable Messages")."""
from __future__ import annotations

import logging

import pytest

from journal_engine import Broker, ConfigError, ManualClock, QueueExistsError

ARGS = {"x-qpid-maximum-delivery-count": 3, "x-qpid-dlq-enabled": True}


def test_the_dlq_feature_creates_the_dead_letter_exchange_and_queue():
    broker = Broker()
    broker.create_queue("prices", arguments=ARGS)
    assert broker.queue_names() == ["prices", "prices_DLQ"]
    assert broker.queue("prices_DLQ").address == "prices_DLE"


def test_rollbacks_up_to_the_maximum_then_the_message_moves_to_the_dlq():
    broker = Broker(clock=ManualClock(0))
    broker.create_queue("prices", arguments=ARGS)
    sent = broker.send("prices", b"poison", properties={"k": 1})
    broker.send("prices", b"good")
    consumer = broker.create_consumer("prices")
    counts = []
    for _ in range(3):
        message = consumer.receive(0)
        assert message.body == b"poison"
        counts.append(message.delivery_count)           # visible to the consumer, unlike Qpid
        consumer.rollback(message)
    assert counts == [1, 2, 3]
    assert consumer.receive(0).body == b"good"          # the poison message no longer blocks the queue
    [dead] = broker.browse("prices_DLQ")
    assert dead.message_id == sent and dead.body == b"poison"
    assert {k: v for k, v in dead.properties.items() if not k.startswith("_JE_")} == {"k": 1}
    assert dead.properties["_JE_DEAD_LETTER_REASON"] == "max-delivery-attempts"
    assert broker.queue("prices").messages_killed == 1


def test_session_rollback_counts_too():
    broker = Broker(clock=ManualClock(0))
    broker.create_queue("q", arguments={"x-qpid-maximum-delivery-count": 2, "x-qpid-dlq-enabled": True})
    broker.send("q", b"x")
    session = broker.create_session(transacted=True)
    consumer = session.create_consumer("q")
    for _ in range(2):
        assert consumer.receive(0) is not None
        session.rollback()
    assert consumer.receive(0) is None and len(broker.browse("q_DLQ")) == 1


def test_a_consumer_that_goes_away_is_not_counted():
    broker = Broker(clock=ManualClock(0))
    broker.create_queue("q", arguments={"x-qpid-maximum-delivery-count": 2, "x-qpid-dlq-enabled": True})
    broker.send("q", b"x")
    for _ in range(5):
        consumer = broker.create_consumer("q")
        message = consumer.receive(0)
        assert message.delivery_count == 1
        consumer.close()
    assert broker.browse("q_DLQ") == [] and broker.queue("q").message_count == 1


def test_without_a_dlq_the_message_is_discarded_and_logged(caplog):
    broker = Broker(clock=ManualClock(0))
    broker.create_queue("q", arguments={"x-qpid-maximum-delivery-count": 1})
    broker.send("q", b"x")
    consumer = broker.create_consumer("q")
    with caplog.at_level(logging.WARNING, logger="journal_engine.broker"):
        consumer.rollback(consumer.receive(0))
    assert broker.queue_names() == ["q"] and broker.queue("q").message_count == 0
    assert broker.queue("q").messages_dropped == 1
    assert "'q'" in caplog.text and "no DLQ" in caplog.text


def test_no_maximum_means_redelivered_forever():
    broker = Broker(clock=ManualClock(0))
    broker.create_queue("q", arguments={"x-qpid-dlq-enabled": True})
    broker.send("q", b"x")
    consumer = broker.create_consumer("q")
    for count in range(1, 30):
        message = consumer.receive(0)
        assert message.delivery_count == count
        consumer.rollback(message)


@pytest.mark.parametrize("arguments, field", [({"x-qpid-maximum-delivery-count": -1}, "x-qpid-maximum-delivery-count"),
                                              ({"x-qpid-dlq-enabled": "maybe"}, "x-qpid-dlq-enabled"),
                                              ({"x-other": 1}, "arguments")])
def test_bad_arguments_are_named(arguments, field):
    with pytest.raises(ConfigError) as caught:
        Broker().create_queue("q", arguments=arguments)
    assert caught.value.field == field


def test_string_arguments_as_amqp_clients_send_them_and_a_taken_name():
    broker = Broker(clock=ManualClock(0))
    broker.create_queue("q", arguments={"x-qpid-maximum-delivery-count": "1", "x-qpid-dlq-enabled": "true"})
    broker.send("q", b"x")
    consumer = broker.create_consumer("q")
    consumer.rollback(consumer.receive(0))
    assert len(broker.browse("q_DLQ")) == 1
    with pytest.raises(QueueExistsError):
        broker.create_queue("q", arguments=ARGS)


@pytest.mark.parametrize("backend", ["journal", "lmdb"])
def test_the_dlq_move_is_durable(tmp_path, backend):
    broker = Broker(tmp_path / "b", store=backend, clock=ManualClock(0))
    broker.create_queue("q", arguments={"x-qpid-maximum-delivery-count": 1, "x-qpid-dlq-enabled": True})
    sent = broker.send("q", b"x")
    consumer = broker.create_consumer("q")
    consumer.rollback(consumer.receive(0))
    broker.close()
    again = Broker(tmp_path / "b", store=backend, clock=ManualClock(0))
    try:
        assert again.queue("q").message_count == 0
        [dead] = again.browse("q_DLQ")
        assert dead.message_id == sent and dead.body == b"x"
    finally:
        again.close()


@pytest.mark.parametrize("backend", ["journal", "lmdb"])
def test_the_arguments_survive_a_restart_with_the_queue(tmp_path, backend):
    broker = Broker(tmp_path / "b", store=backend, clock=ManualClock(0))
    broker.create_queue("q", arguments={"x-qpid-maximum-delivery-count": 2, "x-qpid-dlq-enabled": True})
    broker.create_queue("plain")
    broker.send("q", b"x")
    consumer = broker.create_consumer("q")
    consumer.rollback(consumer.receive(0))
    broker.close()
    again = Broker(tmp_path / "b", store=backend, clock=ManualClock(0))
    try:
        assert again.queue_names() == ["plain", "q", "q_DLQ"]
        consumer = again.create_consumer("q")
        message = consumer.receive(0)
        assert message.delivery_count == 2          # the persisted count + 1: the maximum, kept with the queue
        consumer.rollback(message)
        assert consumer.receive(0) is None and len(again.browse("q_DLQ")) == 1
    finally:
        again.close()


@pytest.mark.parametrize("backend", ["journal", "lmdb"])
def test_arguments_set_on_a_queue_are_kept_and_can_be_taken_away(tmp_path, backend):
    broker = Broker(tmp_path / "b", store=backend, clock=ManualClock(0))
    broker.create_queue("q")
    broker.send("q", b"x")
    broker.set_queue_arguments("q", {"x-qpid-maximum-delivery-count": 1, "x-qpid-dlq-enabled": True})
    broker.close()
    again = Broker(tmp_path / "b", store=backend, clock=ManualClock(0))
    try:
        consumer = again.create_consumer("q")
        consumer.rollback(consumer.receive(0))      # the maximum of 1, set before the restart
        assert len(again.browse("q_DLQ")) == 1
        again.send("q", b"y")
        again.set_queue_arguments("q", None)        # taken away: redelivered without limit
    finally:
        again.close()
    third = Broker(tmp_path / "b", store=backend, clock=ManualClock(0))
    try:
        consumer = third.create_consumer("q")
        for attempt in range(1, 4):
            message = consumer.receive(0)
            assert message.body == b"y" and message.delivery_count == attempt
            consumer.rollback(message)
        assert len(third.browse("q_DLQ")) == 1
    finally:
        third.close()


def test_a_queue_binding_keeps_its_arguments_and_a_plain_one_its_old_bytes():
    from journal_engine.record_format import decode_queue, encode_queue
    plain = encode_queue("q", "q")
    assert plain[0] == 1 and decode_queue(1, plain).arguments is None
    with_arguments = encode_queue("q", "q", arguments=ARGS)
    assert with_arguments[0] == 2 and with_arguments.startswith(b"\x02" + plain[1:])
    assert decode_queue(1, with_arguments).arguments == ARGS
