"""The last divergences from ActiveMQ Classic 5.17.2 (issue 28), each test citing the Classic class whose
rule it holds us to; ../shared/reference/activemq-classic-observed.md is what the real broker did."""
from __future__ import annotations

import logging

import pytest

from journal_engine import Broker, ClassicBrokerConfig, ClassicRedeliveryPolicy, ManualClock
from journal_engine.broker.classic.dead_letter_strategy import IndividualDeadLetterStrategy
from journal_engine.broker.classic.destinations import QUEUE, TOPIC, ClassicDestinationMap
from journal_engine.broker.classic.plugins import RedeliveryPlugin

START = 1_700_000_000_000


def classic_broker(config=None, clock=None, **options):
    return Broker(clock=clock or ManualClock(START), config=config or ClassicBrokerConfig(), **options)


def plugin_config(policy, kind=QUEUE, pattern=">"):
    policies = ClassicDestinationMap()
    policies.put(kind, pattern, policy)
    return ClassicBrokerConfig(redelivery_plugin=RedeliveryPlugin(policies), scheduler_support=True)


# ---------------------------------------------------------------- 1. non-durable topic subscriptions
def test_a_poison_ack_on_a_non_durable_subscription_is_not_dead_lettered(caplog):
    # ActiveMQ 5.17.2 TopicSubscription.acknowledge: a poison ack only updates the subscription's statistics
    broker = classic_broker()
    broker.create_queue("volatile", address="prices", routing_type="multicast", durable=False)
    broker.send("prices", b"p")
    consumer = broker.create_consumer("volatile")
    with caplog.at_level(logging.WARNING, logger="journal_engine.broker"):
        consumer.rollback(consumer.receive(0))
    assert "ActiveMQ.DLQ" not in broker.queue_names()
    info = broker.queue("volatile")
    assert (info.message_count, info.messages_killed, info.messages_dropped) == (0, 1, 1)
    assert "TopicSubscription.acknowledge" in caplog.text and "'volatile'" in caplog.text


def test_a_poison_ack_on_a_durable_subscription_is_still_dead_lettered():
    # ActiveMQ 5.17.2 DurableTopicSubscription is a PrefetchSubscription: its poison ack goes to sendToDLQ
    config = ClassicBrokerConfig()
    broker = classic_broker(config)
    broker.create_queue("client-1:sub", address="prices", routing_type="multicast")
    broker.create_queue("volatile", address="prices", routing_type="multicast", durable=False)
    broker.send("prices", b"p")
    for name in ("client-1:sub", "volatile"):
        consumer = broker.create_consumer(name)
        consumer.rollback(consumer.receive(0))
    [dead] = broker.browse("ActiveMQ.DLQ")
    assert dead.properties["originalDestination"] == "topic://prices"
    assert broker.queue("volatile").messages_dropped == 1


def test_the_redelivery_plugin_never_sees_a_non_durable_subscription_poison_ack():
    # ActiveMQ 5.17.2 TopicSubscription.acknowledge does not call Broker.sendToDeadLetterQueue, which the
    # RedeliveryPlugin intercepts: the message is gone, not scheduled again
    clock = ManualClock(START)
    broker = classic_broker(plugin_config(ClassicRedeliveryPolicy(maximum_redeliveries=3), TOPIC), clock)
    broker.create_queue("volatile", address="prices", routing_type="multicast", durable=False)
    broker.send("prices", b"p")
    consumer = broker.create_consumer("volatile")
    consumer.rollback(consumer.receive(0))
    clock.advance(60_000)
    assert consumer.receive(0) is None and broker.queue("volatile").messages_dropped == 1


def test_a_consumer_policy_on_a_non_durable_subscription_redelivers_then_the_poison_ack_drops():
    # ActiveMQ 5.17.2 ActiveMQMessageConsumer redelivers under its RedeliveryPolicy, then its poison ack
    # reaches TopicSubscription.acknowledge
    clock = ManualClock(START)
    broker = classic_broker(clock=clock)
    broker.create_queue("volatile", address="prices", routing_type="multicast", durable=False)
    broker.send("prices", b"p")
    consumer = broker.create_consumer("volatile", redelivery_policy=ClassicRedeliveryPolicy(
        maximum_redeliveries=1, initial_redelivery_delay=0))
    consumer.rollback(consumer.receive(0))
    message = consumer.receive(0)
    assert message.delivery_count == 2
    consumer.rollback(message)
    assert consumer.receive(0) is None and "ActiveMQ.DLQ" not in broker.queue_names()
    assert broker.queue("volatile").messages_dropped == 1


# ---------------------------------------------------------------- 3. the redelivery plugin's delay
def test_the_plugin_delay_follows_the_redelivery_counter_raised_by_disconnects():
    # ActiveMQ 5.17.2 RedeliveryPlugin.sendToDeadLetterQueue: delay = initialRedeliveryDelay, then
    # getNextRedeliveryDelay once per earlier redelivery (messageReference.getRedeliveryCounter())
    clock = ManualClock(START)
    policy = ClassicRedeliveryPolicy(maximum_redeliveries=10, use_exponential_backoff=True, backoff_multiplier=2.0)
    broker = classic_broker(plugin_config(policy), clock)
    broker.create_queue("orders")
    broker.send("orders", b"o")
    for _ in range(2):                          # two disconnects: the counter rises, the plugin is not asked
        consumer = broker.create_consumer("orders")
        assert consumer.receive(0) is not None
        consumer.close()
    consumer = broker.create_consumer("orders")
    message = consumer.receive(0)
    assert message.delivery_count == 3          # redelivery counter 2
    consumer.rollback(message)
    clock.advance(3999)
    assert consumer.receive(0) is None
    clock.advance(1)
    message = consumer.receive(0)
    assert message.properties["redeliveryDelay"] == 4000
    consumer.rollback(message)
    clock.advance(7999)
    assert consumer.receive(0) is None
    clock.advance(1)
    assert consumer.receive(0).properties["redeliveryDelay"] == 8000


def test_the_plugin_delay_ignores_a_redelivery_delay_property_the_sender_set():
    # ActiveMQ 5.17.2 RedeliveryPlugin reads no property of the message; only its redelivery counter
    clock = ManualClock(START)
    policy = ClassicRedeliveryPolicy(maximum_redeliveries=10, use_exponential_backoff=True, backoff_multiplier=2.0)
    broker = classic_broker(plugin_config(policy), clock)
    broker.create_queue("orders")
    broker.send("orders", b"o", properties={"redeliveryDelay": 50_000})
    consumer = broker.create_consumer("orders")
    consumer.receive(0)
    consumer.close()                            # redelivery counter 1
    consumer = broker.create_consumer("orders")
    consumer.rollback(consumer.receive(0))
    clock.advance(2000)                         # 1000, then doubled once: not 50,000 doubled
    assert consumer.receive(0).properties["redeliveryDelay"] == 2000
