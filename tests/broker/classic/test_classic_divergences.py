"""The last divergences from ActiveMQ Classic 5.17.2 (issue 28), each test citing the Classic class whose
rule it holds us to, checked against what a real Classic 5.17.2 broker did."""
from __future__ import annotations

import logging

import pytest

from journal_engine import Broker, ClassicBrokerConfig, ClassicRedeliveryPolicy, ManualClock
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


# ---------------------------------------------------------------- 2. session rollback
ACTIVEMQ_XML = """<beans xmlns="http://www.springframework.org/schema/beans">
<broker xmlns="http://activemq.apache.org/schema/core" brokerName="localhost"/>
</beans>"""


def classic_session(clock):
    """A broker read from an activemq.xml with one message on ``orders``, and a transacted session."""
    broker = Broker(clock=clock, config=ACTIVEMQ_XML)
    broker.create_queue("orders")
    broker.send("orders", b"o")
    return broker, broker.create_session(transacted=True)


def test_a_session_rollback_redelivers_under_the_openwire_default_policy_then_poisons():
    # ActiveMQ 5.17.2 ActiveMQMessageConsumer.rollback: the redelivery counter rises, the message comes back
    # after RedeliveryPolicy's delay (defaults: initialRedeliveryDelay 1000, maximumRedeliveries 6, no
    # back-off); past the maximum the consumer sends a poison ack (RegionBroker.sendToDeadLetterQueue)
    clock = ManualClock(START)
    broker, session = classic_session(clock)
    consumer = session.create_consumer("orders")
    assert consumer.redelivery_policy == ClassicRedeliveryPolicy()
    for delivery in range(1, 8):
        message = consumer.receive(0)
        assert message is not None and message.delivery_count == delivery
        if delivery % 2:
            consumer.ack(message)               # acknowledged in the transaction or not: both roll back
        session.rollback()
        assert "ActiveMQ.DLQ" not in broker.queue_names() or delivery == 7
        if delivery < 7:
            clock.advance(999)
            assert consumer.receive(0) is None
            clock.advance(1)
    [dead] = broker.browse("ActiveMQ.DLQ")
    assert dead.properties["dlqDeliveryFailureCause"].startswith(
        "java.lang.Throwable: Delivery[7] exceeds redelivery policy limit:RedeliveryPolicy {")
    assert broker.queue("orders").message_count == 0


def test_a_session_consumer_takes_the_policy_it_is_given():
    broker, session = classic_session(ManualClock(START))
    consumer = session.create_consumer("orders", redelivery_policy=ClassicRedeliveryPolicy(
        maximum_redeliveries=1, initial_redelivery_delay=0))
    consumer.receive(0)
    session.rollback()
    assert consumer.receive(0).delivery_count == 2
    session.rollback()
    assert len(broker.browse("ActiveMQ.DLQ")) == 1
    with pytest.raises(TypeError):
        session.create_consumer("orders", redelivery_policy={"maximum_redeliveries": 1})


def test_without_a_client_policy_a_session_rollback_only_restores_the_pending_acks():
    # ActiveMQ 5.17.2 StompSubscription.onStompAbort / ProtocolConverter.onStompAbort: an ABORT undoes the
    # transaction's acks; the messages stay dispatched to the subscription, nothing is redelivered or dead-lettered
    clock = ManualClock(START)
    broker = Broker(clock=clock, config=ACTIVEMQ_XML)
    broker.create_queue("orders")
    broker.send("orders", b"a")
    broker.send("orders", b"b")
    session = broker.create_session(transacted=True)
    consumer = session.create_consumer("orders", redelivery_policy=None)
    first, second = consumer.receive(0), consumer.receive(0)
    consumer.ack(first)
    session.send("orders", b"discarded")
    session.rollback()
    assert consumer.delivering_count == 2 and consumer.receive(0) is None
    assert broker.queue("orders").message_count == 2 and "ActiveMQ.DLQ" not in broker.queue_names()
    consumer.ack(first)                         # still this consumer's, pending again
    consumer.ack(second)
    session.commit()
    assert broker.queue("orders").message_count == 0


def test_on_an_artemis_broker_a_session_consumer_policy_is_followed_at_session_rollback():
    # the policy given to Session.create_consumer is the consumer's whatever the broker (as Broker.create_consumer's)
    clock = ManualClock(START)
    broker = Broker(clock=clock)
    broker.create_queue("orders")
    broker.send("orders", b"o")
    session = broker.create_session(transacted=True)
    consumer = session.create_consumer("orders", redelivery_policy=ClassicRedeliveryPolicy(initial_redelivery_delay=500))
    consumer.receive(0)
    session.rollback()
    assert consumer.receive(0) is None
    clock.advance(500)
    assert consumer.receive(0).delivery_count == 2
    assert broker.create_session().create_consumer("orders").redelivery_policy is None   # no Classic config


def test_a_closing_session_hands_its_acknowledged_messages_back_redelivered_not_dead_lettered():
    # ActiveMQ 5.17.2: the open transaction of a session that goes away rolls back (TransactionBroker) and its
    # consumer's dispatched messages return to the queue with their redelivery counter (no poison ack)
    broker = Broker(clock=ManualClock(START), config=ACTIVEMQ_XML)
    broker.create_queue("orders")
    broker.send("orders", b"o")
    session = broker.create_session(transacted=True)
    consumer = session.create_consumer("orders")
    consumer.ack(consumer.receive(0))
    session.close()
    assert "ActiveMQ.DLQ" not in broker.queue_names()
    message = broker.create_consumer("orders").receive(0)
    assert message.delivery_count == 2 and message.redelivered


def test_an_expired_message_on_a_non_durable_subscription_is_discarded_not_dead_lettered():
    # ActiveMQ 5.17.2 TopicSubscription.dispatchMatched: an expired message waiting for a non-durable subscriber
    # is discard()ed; Topic's expiry task (doBrowse) only sees the messages stored for durable subscriptions,
    # which go to the DLQ (RegionBroker.messageExpired); no timer looks at a non-durable subscription
    clock = ManualClock(START)
    broker = classic_broker(clock=clock)
    broker.create_queue("volatile", address="prices", routing_type="multicast", durable=False)
    broker.create_queue("client-1:sub", address="prices", routing_type="multicast")
    broker.send("prices", b"p", expiration=START + 10)
    clock.advance(30_000)                       # the topic's expiry scan
    [dead] = broker.browse("ActiveMQ.DLQ")
    assert dead.properties["originalDestination"] == "topic://prices"      # the durable subscription's
    assert broker.queue("volatile").message_count == 1
    assert broker.create_consumer("volatile").receive(0) is None           # met at dispatch: discarded
    info = broker.queue("volatile")
    assert (info.message_count, info.messages_expired, info.messages_dropped) == (0, 1, 1)
