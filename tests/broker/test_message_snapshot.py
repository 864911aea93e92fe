"""A received message is a snapshot: every delivery is its own copy, as in every seed system.

ActiveMQ Classic 5.17.2 RedeliveryPlugin.scheduleRedelivery copies the message (``old.copy()``) before it
sets ``redeliveryDelay`` on the copy; Artemis's and HornetQ's consumers get a copy per delivery
(``ServerConsumerImpl.handle`` → ``MessageReference.getMessage().copy()`` for the wire); Qpid Broker-J
sends an encoded copy per delivery. So a Message held by the application never changes afterwards.
"""
from __future__ import annotations

from journal_engine import AddressSettings, Broker, ClassicBrokerConfig, ClassicRedeliveryPolicy, ManualClock
from journal_engine.broker.classic.destinations import ClassicDestinationMap
from journal_engine.broker.classic.plugins import RedeliveryPlugin

START = 1_700_000_000_000


def redelivering_broker(clock):
    """A broker with Classic's redelivery plugin (3 redeliveries after 1000 ms each) and a queue ``orders``."""
    plugin = RedeliveryPlugin(ClassicDestinationMap(), ClassicRedeliveryPolicy(maximum_redeliveries=3))
    broker = Broker(clock=clock, config=ClassicBrokerConfig(redelivery_plugin=plugin, scheduler_support=True))
    broker.create_queue("orders")
    return broker


def test_a_held_message_keeps_its_properties_when_the_redelivery_plugin_marks_its_redelivery():
    # ActiveMQ 5.17.2 RedeliveryPlugin.scheduleRedelivery: the delay is set on a copy, not on the delivered one
    clock = ManualClock(START)
    broker = redelivering_broker(clock)
    broker.send("orders", b"a", properties={"k": 1})
    consumer = broker.create_consumer("orders")
    first = consumer.receive(0)
    assert dict(first.properties) == {"k": 1}
    consumer.rollback(first)
    assert dict(first.properties) == {"k": 1}              # the poison ack does not reach the held copy
    clock.advance(1000)
    second = consumer.receive(0)
    assert dict(second.properties) == {"k": 1, "redeliveryDelay": 1000}
    consumer.rollback(second)
    clock.advance(1000)
    third = consumer.receive(0)
    assert dict(first.properties) == {"k": 1} and dict(second.properties) == {"k": 1, "redeliveryDelay": 1000}
    assert third.properties["redeliveryDelay"] == 1000 and third.delivery_count == 3


def test_a_held_message_without_properties_stays_without_them():
    clock = ManualClock(START)
    broker = redelivering_broker(clock)
    broker.send("orders", b"a")
    consumer = broker.create_consumer("orders")
    first = consumer.receive(0)
    consumer.rollback(first)
    clock.advance(1000)
    assert dict(consumer.receive(0).properties) == {"redeliveryDelay": 1000}
    assert dict(first.properties) == {}


def test_a_held_message_keeps_its_properties_when_an_openwire_poison_ack_records_its_cause():
    # Artemis AMQConsumer (OpenWire) sets dlqDeliveryFailureCause on the server message it dead-letters; the
    # delivered copy the client holds never changes
    broker = Broker(clock=ManualClock(START))
    broker.address_settings.add("#", AddressSettings(dead_letter_address="DLA"))
    broker.create_queue("DLQ", address="DLA")
    broker.create_queue("orders")
    broker.send("orders", b"a", properties={"k": 1})
    consumer = broker.create_consumer("orders", redelivery_policy=ClassicRedeliveryPolicy(maximum_redeliveries=0))
    held = consumer.receive(0)
    consumer.rollback(held)
    [dead] = broker.browse("DLQ")
    assert "dlqDeliveryFailureCause" in dead.properties
    assert dict(held.properties) == {"k": 1}


def test_a_browsed_message_is_a_snapshot_too():
    clock = ManualClock(START)
    broker = redelivering_broker(clock)
    broker.send("orders", b"a", properties={"k": 1})
    [browsed] = broker.browse("orders")
    consumer = broker.create_consumer("orders")
    consumer.rollback(consumer.receive(0))
    assert dict(browsed.properties) == {"k": 1}
