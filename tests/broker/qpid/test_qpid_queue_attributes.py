"""Qpid Broker-J's own queue attributes as declare arguments (QueueArgumentsConverter.convertWireArgsToModel
takes every argument named after a Queue attribute): ``maximumDeliveryAttempts`` with an ``alternateBinding``
to any destination (the documented way to get a DLQ), ``expiryPolicy`` (AbstractQueue.expireEntry), and the
virtual host's defaults (context variables ``queue.deadLetterQueueEnabled``, ``queue.maximumDeliveryAttempts``,
``queue.defaultExpiryPolicy``; AbstractVirtualHost.shouldCreateDLQ in 6.1)."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from journal_engine import Broker, ConfigError, ManualClock

START = 1_700_000_000_000
SCAN = 30_000        # the expiry scan's period (Broker-J's housekeepingCheckPeriod, Artemis's message-expiry-scan-period)


def fail(broker, queue, times):
    consumer = broker.create_consumer(queue)
    for _ in range(times):
        message = consumer.receive(0)
        assert message is not None
        consumer.rollback(message)
    consumer.close()


def test_maximum_delivery_attempts_with_an_alternate_binding_to_any_queue():
    # Queue.MAXIMUM_DELIVERY_ATTEMPTS + Queue.ALTERNATE_BINDING {"destination": ...}: past the maximum the
    # message is routed to the alternate destination (QueueEntryImpl.routeToAlternate), keeping its id
    broker = Broker(clock=ManualClock(START))
    broker.create_queue("poison")
    broker.create_queue("orders", arguments={"maximumDeliveryAttempts": 2,
                                             "alternateBinding": {"destination": "poison"}})
    sent = broker.send("orders", b"o", properties={"k": 1})
    fail(broker, "orders", 2)
    assert broker.queue_names() == ["orders", "poison"]          # no <queue>_DLQ is made for an alternate
    [dead] = broker.browse("poison")
    assert dead.message_id == sent and dead.properties["k"] == 1
    assert dead.properties["_JE_DEAD_LETTER_REASON"] == "max-delivery-attempts"


def test_an_alternate_binding_given_as_json_text_and_to_an_exchange_with_two_queues():
    # a Map attribute may come as its JSON text (Broker-J's attribute conversion); an exchange routes to
    # every queue bound to it (here: an address with two multicast queues)
    broker = Broker(clock=ManualClock(START))
    broker.create_queue("a", address="dead", routing_type="multicast")
    broker.create_queue("b", address="dead", routing_type="multicast")
    broker.create_queue("orders", arguments={"maximumDeliveryAttempts": "1",
                                             "alternateBinding": json.dumps({"destination": "dead"})})
    broker.send("orders", b"o")
    fail(broker, "orders", 1)
    assert [m.body for m in broker.browse("a")] == [b"o"] and [m.body for m in broker.browse("b")] == [b"o"]


def test_the_wire_argument_outranks_the_attribute_name():
    # QueueArgumentsConverter: ATTRIBUTE_MAPPINGS are applied after the attribute-named arguments
    broker = Broker(clock=ManualClock(START))
    broker.create_queue("orders", arguments={"maximumDeliveryAttempts": 5, "x-qpid-maximum-delivery-count": 1})
    broker.send("orders", b"o")
    fail(broker, "orders", 1)
    assert broker.queue("orders").message_count == 0 and broker.queue("orders").messages_dropped == 1


def test_alternate_exchange_wire_argument_and_an_alternate_that_has_no_queue_discards(caplog):
    broker = Broker(clock=ManualClock(START))
    broker.create_queue("orders", arguments={"x-qpid-maximum-delivery-count": 1, "alternateExchange": "nowhere",
                                             "x-qpid-dlq-enabled": True})
    assert broker.queue_names() == ["orders"]        # an alternate exchange: no DLQ made (shouldCreateDLQ)
    broker.send("orders", b"o")
    with caplog.at_level(logging.WARNING, logger="journal_engine.broker"):
        fail(broker, "orders", 1)
    assert broker.queue("orders").messages_dropped == 1 and "'nowhere'" in caplog.text


def test_expiry_policy_delete_is_the_default():
    # Queue.DEFAULT_EXPIRY_POLICY = DELETE: an expired message is deleted even with an alternate binding
    clock = ManualClock(START)
    broker = Broker(clock=clock)
    broker.create_queue("dlq")
    broker.create_queue("orders", arguments={"alternateBinding": {"destination": "dlq"}})
    broker.send("orders", b"o", expiration=START + 10)
    clock.advance(SCAN)
    assert broker.queue("orders").messages_expired == 1 and broker.browse("dlq") == []


def test_expiry_policy_route_to_alternate():
    # AbstractQueue.expireEntry ROUTE_TO_ALTERNATE: the expired message goes to the alternate destination
    clock = ManualClock(START)
    broker = Broker(clock=clock)
    broker.create_queue("dlq")
    broker.create_queue("orders", arguments={"alternateBinding": {"destination": "dlq"},
                                             "expiryPolicy": "ROUTE_TO_ALTERNATE"})
    sent = broker.send("orders", b"o", expiration=START + 10)
    clock.advance(SCAN)
    [expired] = broker.browse("dlq")
    assert expired.message_id == sent and expired.expiration == 0
    assert expired.properties["_JE_DEAD_LETTER_REASON"] == "expired"
    assert broker.queue("orders").messages_expired == 1
    clock.advance(10 * SCAN)
    assert len(broker.browse("dlq")) == 1


def test_expiry_policy_route_to_alternate_without_an_alternate_deletes():
    clock = ManualClock(START)
    broker = Broker(clock=clock)
    broker.create_queue("orders", arguments={"expiryPolicy": "ROUTE_TO_ALTERNATE"})
    broker.send("orders", b"o", expiration=START + 10)
    clock.advance(SCAN)
    assert broker.queue("orders").messages_dropped == 1


def test_the_virtual_host_creates_dlqs_by_default_when_told():
    # VirtualHost "queue.deadLetterQueueEnabled" (6.1 AbstractVirtualHost.shouldCreateDLQ): every queue gets
    # <name>_DLE and <name>_DLQ unless its x-qpid-dlq-enabled says otherwise or it has an alternate exchange
    broker = Broker(clock=ManualClock(START), qpid_context={"queue.deadLetterQueueEnabled": "true",
                                                            "queue.maximumDeliveryAttempts": "2"})
    broker.create_queue("orders")
    broker.create_queue("quiet", arguments={"x-qpid-dlq-enabled": False})
    assert broker.queue_names() == ["orders", "orders_DLQ", "quiet"]
    broker.send("orders", b"o")
    broker.send("quiet", b"q")
    fail(broker, "orders", 2)
    fail(broker, "quiet", 2)
    assert [m.body for m in broker.browse("orders_DLQ")] == [b"o"]
    assert broker.queue("quiet").messages_dropped == 1
    fail(broker, "orders_DLQ", 5)                  # the DLQ itself has no DLQ and no maximum
    assert [m.body for m in broker.browse("orders_DLQ")] == [b"o"]


def test_the_virtual_host_default_expiry_policy():
    clock = ManualClock(START)
    broker = Broker(clock=clock, qpid_context={"queue.defaultExpiryPolicy": "ROUTE_TO_ALTERNATE"})
    broker.create_queue("dlq")
    broker.create_queue("orders", arguments={"alternateBinding": {"destination": "dlq"}})
    broker.send("orders", b"o", expiration=START + 1)
    clock.advance(SCAN)
    assert len(broker.browse("dlq")) == 1


@pytest.mark.parametrize("arguments, field", [
    ({"maximumDeliveryAttempts": -1}, "maximumDeliveryAttempts"),
    ({"maximumDeliveryAttempts": "many"}, "maximumDeliveryAttempts"),
    ({"expiryPolicy": "delete"}, "expiryPolicy"),
    ({"expiryPolicy": "ROUTE"}, "expiryPolicy"),
    ({"alternateBinding": {}}, "alternateBinding"),
    ({"alternateBinding": {"destination": ""}}, "alternateBinding"),
    ({"alternateBinding": {"destination": "x", "colour": "red"}}, "alternateBinding"),
    ({"alternateBinding": "{not json"}, "alternateBinding"),
    ({"alternateBinding": 7}, "alternateBinding"),
    ({"alternateExchange": ""}, "alternateExchange"),
    ({"maximumQueueDepthMessages": 10}, "arguments"),
])
def test_bad_arguments_are_refused_naming_the_argument(arguments, field):
    broker = Broker()
    with pytest.raises(ConfigError) as caught:
        broker.create_queue("q", arguments=arguments)
    assert caught.value.field == field and broker.queue_names() == []


@pytest.mark.parametrize("context, field", [
    ({"queue.deadLetterQueueEnabled": "maybe"}, "queue.deadLetterQueueEnabled"),
    ({"queue.maximumDeliveryAttempts": "-3"}, "queue.maximumDeliveryAttempts"),
    ({"queue.defaultExpiryPolicy": "KEEP"}, "queue.defaultExpiryPolicy"),
    ({"queue.colour": "red"}, "qpid_context"),
])
def test_bad_virtual_host_context_is_refused(context, field):
    with pytest.raises(ConfigError) as caught:
        Broker(qpid_context=context)
    assert caught.value.field == field


def test_a_restarted_broker_keeps_the_alternate_binding_and_expiry_policy(tmp_path):
    # a second process recovers the queue with its attributes (kept with its binding) and acts on them
    directory = tmp_path / "broker"
    broker = Broker(directory, clock=ManualClock(START))
    broker.create_queue("dlq")
    broker.create_queue("orders", arguments={"maximumDeliveryAttempts": 1, "expiryPolicy": "ROUTE_TO_ALTERNATE",
                                             "alternateBinding": {"destination": "dlq"}})
    broker.send("orders", b"poison")
    broker.send("orders", b"late", expiration=START + 10)
    broker.close()
    script = f"""
from journal_engine import Broker, ManualClock
clock = ManualClock({START})
broker = Broker({str(directory)!r}, clock=clock)
consumer = broker.create_consumer("orders")
consumer.rollback(consumer.receive(0))
clock.advance({SCAN})
print(sorted(m.body.decode() for m in broker.browse("dlq")))
broker.close()
"""
    env = {**os.environ}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['late', 'poison']"
