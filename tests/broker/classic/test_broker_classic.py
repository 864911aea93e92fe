"""A broker run with ActiveMQ Classic's rules: poison acks, dead-letter strategies, the audit, the
discarding-DLQ plugin, broker redelivery, a consumer's ClassicRedeliveryPolicy. What the real broker did
was observed on a real Classic 5.17.2 broker; the XML side is test_activemq_xml.py."""
from __future__ import annotations

import logging

import pytest

from journal_engine import AddressSettings, Broker, ClassicBrokerConfig, ClassicRedeliveryPolicy, ManualClock
from journal_engine.broker.classic.destinations import QUEUE, ClassicDestinationMap
from journal_engine.broker.classic.plugins import DiscardingDLQPlugin, RedeliveryPlugin, compile_drop_only
from journal_engine.broker.classic.dead_letter_strategy import (DiscardingDeadLetterStrategy, IndividualDeadLetterStrategy,
                                                        SharedDeadLetterStrategy)

START = 1_700_000_000_000
SCAN = 30_000        # the expiry scan's period (Classic's expireMessagesPeriod, Artemis's message-expiry-scan-period)
CAUSE = "dlqDeliveryFailureCause"


def classic_broker(config=None, directory=None, **options):
    clock = options.pop("clock", None) or ManualClock(START)
    return Broker(directory, clock=clock, config=config or ClassicBrokerConfig(), **options)


def fail_once(broker, queue):
    consumer = broker.create_consumer(queue)
    message = consumer.receive(0)
    assert message is not None
    consumer.rollback(message)
    consumer.close()
    return message


def strategies(**entries):
    mapping = ClassicDestinationMap()
    for key, strategy in entries.items():
        kind, pattern = key.split("__")
        mapping.put(kind, pattern.replace("_", ".").replace("ALL", ">"), strategy)
    return mapping


def test_a_rollback_without_a_policy_is_a_poison_ack_to_the_shared_dlq():
    broker = classic_broker()
    broker.create_queue("orders")
    sent = broker.send("orders", b"a", properties={"k": 1})
    fail_once(broker, "orders")
    assert broker.queue("orders").message_count == 0 and broker.queue("orders").messages_killed == 1
    [dead] = broker.browse("ActiveMQ.DLQ")
    assert dead.message_id == sent                       # the copy keeps the original message id
    classic = {k: v for k, v in dead.properties.items() if not k.startswith("_JE_")}
    assert classic == {"k": 1, "originalDestination": "queue://orders", "originalExpiration": 0}
    assert dead.durable and dead.properties["_JE_DEAD_LETTER_REASON"] == "poison-ack"
    assert dead.properties["_JE_ORIG_DELIVERY_COUNT"] == 1


def test_a_consumer_policy_redelivers_with_its_delays_then_poisons_with_the_cause():
    clock = ManualClock(START)
    broker = classic_broker(clock=clock)
    broker.create_queue("orders")
    broker.send("orders", b"a")
    policy = ClassicRedeliveryPolicy(maximum_redeliveries=2, initial_redelivery_delay=500, use_exponential_backoff=True,
                                     backoff_multiplier=2)
    consumer = broker.create_consumer("orders", redelivery_policy=policy)
    counts = []
    for wait in (500, 1000):
        message = consumer.receive(0)
        counts.append(message.delivery_count)
        consumer.rollback(message)
        clock.advance(wait - 1)
        assert consumer.receive(0) is None
        clock.advance(1)
    message = consumer.receive(0)
    counts.append(message.delivery_count)
    consumer.rollback(message)                           # redelivery counter 3 > 2: poison ack
    assert counts == [1, 2, 3]
    [dead] = broker.browse("ActiveMQ.DLQ")
    assert dead.properties[CAUSE].startswith("java.lang.Throwable: Delivery[3] exceeds redelivery policy limit:"
                                             "RedeliveryPolicy {destination = null, collisionAvoidanceFactor = 0.15, "
                                             "maximumRedeliveries = 2, maximumRedeliveryDelay = -1, "
                                             "initialRedeliveryDelay = 500,")


def test_a_consumer_policy_on_an_artemis_broker_ends_at_the_dead_letter_address():
    broker = Broker(clock=ManualClock(START))
    broker.address_settings.add("#", AddressSettings(dead_letter_address="DLA"))
    broker.create_queue("DLA")
    broker.create_queue("q")
    broker.send("q", b"x")
    consumer = broker.create_consumer("q", redelivery_policy=ClassicRedeliveryPolicy(maximum_redeliveries=1,
                                                                                    initial_redelivery_delay=0))
    for _ in range(2):
        consumer.rollback(consumer.receive(0))
    assert consumer.receive(0) is None
    [dead] = broker.browse("DLA")
    assert dead.properties["dlqDeliveryFailureCause"].startswith("java.lang.Throwable: Delivery[2] exceeds")
    assert dead.properties["_JE_DEAD_LETTER_REASON"] == "poison-ack" and dead.properties["_AMQ_ORIG_QUEUE"] == "q"


def test_infinite_redeliveries_never_poison():
    broker = classic_broker()
    broker.create_queue("q")
    broker.send("q", b"x")
    consumer = broker.create_consumer("q", redelivery_policy=ClassicRedeliveryPolicy(maximum_redeliveries=-1,
                                                                                    initial_redelivery_delay=0,
                                                                                    redelivery_delay=0))
    for count in range(1, 60):
        message = consumer.receive(0)
        assert message.delivery_count == count
        consumer.rollback(message)
    assert "ActiveMQ.DLQ" not in broker.queue_names()


def test_individual_strategy_names_a_dlq_per_queue_and_per_topic():
    config = ClassicBrokerConfig(strategies=strategies(
        queue__ALL=IndividualDeadLetterStrategy(queue_prefix="DLQ.", use_queue_for_queue_messages=True),
        topic__ALL=IndividualDeadLetterStrategy()))
    broker = classic_broker(config)
    broker.create_queue("orders")
    broker.create_queue("prices-sub", address="prices", routing_type="multicast")
    broker.send("orders", b"o")
    broker.send("prices", b"p")
    fail_once(broker, "orders")
    fail_once(broker, "prices-sub")
    assert [m.body for m in broker.browse("DLQ.orders")] == [b"o"]
    [dead] = broker.browse("ActiveMQ.DLQ.Topic.prices")
    assert dead.properties["originalDestination"] == "topic://prices"


def test_a_durable_subscriber_gets_its_own_dlq():
    config = ClassicBrokerConfig(strategies=strategies(topic__ALL=IndividualDeadLetterStrategy(
        topic_prefix="DLQ.", destination_per_durable_subscriber=True, enable_audit=False)))
    broker = classic_broker(config)
    broker.create_queue("client-1:sub", address="prices", routing_type="multicast")
    broker.create_queue("volatile", address="prices", routing_type="multicast", durable=False)
    broker.send("prices", b"p")
    fail_once(broker, "client-1:sub")
    fail_once(broker, "volatile")              # not durable: TopicSubscription.acknowledge drops it
    assert [m.body for m in broker.browse("DLQ.prices.client-1:sub")] == [b"p"]
    assert "DLQ.prices" not in broker.queue_names() and broker.queue("volatile").messages_dropped == 1


def test_a_topic_failure_with_only_queue_policies_goes_to_the_shared_dlq():
    config = ClassicBrokerConfig(strategies=strategies(queue__ALL=IndividualDeadLetterStrategy(queue_prefix="DLQ.")))
    broker = classic_broker(config)
    broker.create_queue("sub", address="prices", routing_type="multicast")
    broker.send("prices", b"p")
    fail_once(broker, "sub")
    assert [m.body for m in broker.browse("ActiveMQ.DLQ")] == [b"p"]


def test_a_topic_dlq_without_subscribers_drops_and_logs(caplog):
    config = ClassicBrokerConfig(strategies=strategies(topic__ALL=IndividualDeadLetterStrategy(
        use_queue_for_topic_messages=False)))
    broker = classic_broker(config)
    broker.create_queue("sub", address="prices", routing_type="multicast")
    broker.send("prices", b"p")
    with caplog.at_level(logging.WARNING, logger="journal_engine.broker"):
        fail_once(broker, "sub")
    assert broker.queue("sub").messages_dropped == 1
    assert "topic://ActiveMQ.DLQ.Topic.prices has no subscription" in caplog.text and "'sub'" in caplog.text


def test_non_persistent_messages_are_dropped_unless_process_non_persistent(caplog):
    broker = classic_broker()
    broker.create_queue("q")
    broker.send("q", b"n", durable=False)
    with caplog.at_level(logging.WARNING, logger="journal_engine.broker"):
        fail_once(broker, "q")
    assert "ActiveMQ.DLQ" not in broker.queue_names() and "non-persistent" in caplog.text
    keep = classic_broker(ClassicBrokerConfig(default_strategy=SharedDeadLetterStrategy(process_non_persistent=True)))
    keep.create_queue("q")
    keep.send("q", b"n", durable=False)
    fail_once(keep, "q")
    [dead] = keep.browse("ActiveMQ.DLQ")
    assert dead.properties["originalDeliveryMode"] == "NON_PERSISTENT" and dead.durable


def test_expired_messages_go_to_the_dlq_with_the_expiry_cause_unless_process_expired_is_false(caplog):
    clock = ManualClock(START)
    broker = classic_broker(clock=clock)
    broker.create_queue("q")
    broker.send("q", b"e", expiration=START + 100)
    clock.advance(SCAN)
    [dead] = broker.browse("ActiveMQ.DLQ")
    assert dead.properties[CAUSE] == f"java.lang.Throwable: Message Expired. Expiration:{START + 100}"
    assert dead.properties["originalExpiration"] == START + 100 and dead.expiration == 0
    assert dead.properties["_JE_DEAD_LETTER_REASON"] == "expired"
    assert broker.queue("q").messages_expired == 1
    dropping = classic_broker(ClassicBrokerConfig(default_strategy=SharedDeadLetterStrategy(process_expired=False)),
                              clock=clock)
    dropping.create_queue("q")
    dropping.send("q", b"e", expiration=clock.now_ms() + 10)
    with caplog.at_level(logging.WARNING, logger="journal_engine.broker"):
        clock.advance(SCAN)
    assert "ActiveMQ.DLQ" not in dropping.queue_names() and "processExpired is false" in caplog.text


def test_dlq_entries_expire_after_the_strategy_expiration_and_the_audit_keeps_them_out():
    clock = ManualClock(START)
    broker = classic_broker(ClassicBrokerConfig(default_strategy=SharedDeadLetterStrategy(expiration=300000)),
                            clock=clock)
    broker.create_queue("q")
    broker.send("q", b"x")
    fail_once(broker, "q")
    [dead] = broker.browse("ActiveMQ.DLQ")
    assert dead.expiration == START + 300000
    clock.advance(300000 + SCAN)   # the DLQ's scan after its expiration (Message.isExpired: now > expiration):
    # expires on the DLQ: to the same DLQ again, a duplicate for the audit
    assert broker.browse("ActiveMQ.DLQ") == [] and broker.queue("ActiveMQ.DLQ").messages_dropped == 1


def test_a_dead_lettered_message_failing_on_its_dlq_is_not_re_added(caplog):
    broker = classic_broker()
    broker.create_queue("q")
    broker.send("q", b"x")
    fail_once(broker, "q")
    with caplog.at_level(logging.WARNING, logger="journal_engine.broker"):
        fail_once(broker, "ActiveMQ.DLQ")
    assert broker.browse("ActiveMQ.DLQ") == [] and broker.queue("ActiveMQ.DLQ").messages_dropped == 1
    assert "'ActiveMQ.DLQ'" in caplog.text


@pytest.mark.parametrize("enable_audit, entries", [(True, 1), (False, 2)])
def test_the_audit_keeps_a_duplicate_out_of_the_dlq(enable_audit, entries, caplog):
    # one topic message failing on two subscriptions: the same message twice on its way to the DLQ
    broker = classic_broker(ClassicBrokerConfig(default_strategy=SharedDeadLetterStrategy(enable_audit=enable_audit)))
    broker.create_queue("sub-1", address="prices", routing_type="multicast")
    broker.create_queue("sub-2", address="prices", routing_type="multicast")
    broker.send("prices", b"p")
    with caplog.at_level(logging.WARNING, logger="journal_engine.broker"):
        fail_once(broker, "sub-1")
        fail_once(broker, "sub-2")
    assert len(broker.browse("ActiveMQ.DLQ")) == entries
    assert ("duplicate the dead-letter audit has seen" in caplog.text) == enable_audit


def test_the_discarding_strategy_drops():
    broker = classic_broker(ClassicBrokerConfig(strategies=strategies(queue__ALL=DiscardingDeadLetterStrategy())))
    broker.create_queue("q")
    broker.send("q", b"x")
    fail_once(broker, "q")
    assert "ActiveMQ.DLQ" not in broker.queue_names() and broker.queue("q").messages_dropped == 1


def test_the_discarding_plugin_drops_by_regex_and_reports_every_interval(caplog):
    plugin = DiscardingDLQPlugin(drop_all=False, drop_only=compile_drop_only(r"orders\..*"), report_interval=2)
    broker = classic_broker(ClassicBrokerConfig(discarding_plugin=plugin))
    for name in ("orders", "orders.eu", "orders.us"):
        broker.create_queue(name)
        broker.send(name, name.encode())
    with caplog.at_level(logging.DEBUG, logger="journal_engine.broker"):
        for name in ("orders", "orders.eu", "orders.us"):
            fail_once(broker, name)
    assert [m.body for m in broker.browse("ActiveMQ.DLQ")] == [b"orders"]       # the whole name must match
    assert plugin.dropped == 2
    reports = [r for r in caplog.records if r.levelno == logging.INFO]
    assert [r.getMessage() for r in reports] == [
        "Total of 2 messages were discarded, since their destination was the dead letter queue"]


def test_the_discarding_plugin_drops_all_by_default_expired_messages_too():
    clock = ManualClock(START)
    broker = classic_broker(ClassicBrokerConfig(discarding_plugin=DiscardingDLQPlugin()), clock=clock)
    broker.create_queue("q")
    broker.send("q", b"x")
    broker.send("q", b"y", expiration=START + 5)
    fail_once(broker, "q")
    clock.advance(SCAN)
    assert "ActiveMQ.DLQ" not in broker.queue_names() and broker.queue("q").message_count == 0


def redelivery_config(entries=None, default=None, **options):
    policies = ClassicDestinationMap()
    for pattern, policy in (entries or {}).items():
        policies.put(QUEUE, pattern, policy)
    return ClassicBrokerConfig(redelivery_plugin=RedeliveryPlugin(policies, default, **options), scheduler_support=True)


def test_broker_redelivery_with_a_matching_entry_lets_another_consumer_take_it_then_dead_letters():
    clock = ManualClock(START)
    config = redelivery_config({"SpecialQueue": ClassicRedeliveryPolicy(maximum_redeliveries=2, redelivery_delay=3000)},
                               ClassicRedeliveryPolicy(maximum_redeliveries=4, initial_redelivery_delay=5000,
                                                       redelivery_delay=10000))
    broker = classic_broker(config, clock=clock)
    broker.create_queue("SpecialQueue")
    broker.send("SpecialQueue", b"s")
    first, second = broker.create_consumer("SpecialQueue"), broker.create_consumer("SpecialQueue")
    message = first.receive(0)
    first.rollback(message)
    clock.advance(999)          # the entry sets no initialRedeliveryDelay: Classic's 1000 applies first
    assert second.receive(0) is None
    clock.advance(1)
    message = second.receive(0)                 # another consumer takes it
    assert message.delivery_count == 2 and message.properties["redeliveryDelay"] == 1000
    second.rollback(message)
    clock.advance(3000)
    message = first.receive(0)
    assert message.delivery_count == 3 and message.properties["redeliveryDelay"] == 3000
    first.rollback(message)                     # delivered 1 + maximumRedeliveries times: dead-lettered
    [dead] = broker.browse("ActiveMQ.DLQ")
    assert dead.properties["redeliveryDelay"] == 3000


def test_broker_redelivery_default_entry_and_maximum_zero():
    clock = ManualClock(START)
    broker = classic_broker(redelivery_config(default=ClassicRedeliveryPolicy(maximum_redeliveries=0)), clock=clock)
    broker.create_queue("q")
    broker.send("q", b"x")
    fail_once(broker, "q")
    assert len(broker.browse("ActiveMQ.DLQ")) == 1


@pytest.mark.parametrize("fallback, dead_lettered", [(True, 1), (False, 0)])
def test_broker_redelivery_without_a_matching_entry_follows_fallback_to_dead_letter(fallback, dead_lettered, caplog):
    broker = classic_broker(redelivery_config({"other": ClassicRedeliveryPolicy()}, fallback_to_dead_letter=fallback))
    broker.create_queue("q")
    broker.send("q", b"x")
    with caplog.at_level(logging.WARNING, logger="journal_engine.broker"):
        fail_once(broker, "q")
    assert len(broker.browse("ActiveMQ.DLQ")) if dead_lettered else "ActiveMQ.DLQ" not in broker.queue_names()
    assert broker.queue("q").message_count == 0
    assert ("fallbackToDeadLetter is false" in caplog.text) == (not fallback)


def test_broker_redelivery_past_the_maximum_drops_when_send_to_dlq_is_false(caplog):
    clock = ManualClock(START)
    broker = classic_broker(redelivery_config(default=ClassicRedeliveryPolicy(maximum_redeliveries=1),
                                              send_to_dlq_if_max_retries_exceeded=False), clock=clock)
    broker.create_queue("q")
    broker.send("q", b"x")
    fail_once(broker, "q")
    clock.advance(1000)
    with caplog.at_level(logging.WARNING, logger="journal_engine.broker"):
        fail_once(broker, "q")
    assert broker.queue("q").message_count == 0 and "ActiveMQ.DLQ" not in broker.queue_names()
    assert "sendToDlqIfMaxRetriesExceeded is false" in caplog.text


def test_disconnects_count_toward_the_plugins_maximum():
    clock = ManualClock(START)
    broker = classic_broker(redelivery_config(default=ClassicRedeliveryPolicy(maximum_redeliveries=2)), clock=clock)
    broker.create_queue("q")
    broker.send("q", b"x")
    for _ in range(2):                      # received and the consumer goes away: redelivered, counted
        consumer = broker.create_consumer("q")
        assert consumer.receive(0) is not None
        consumer.close()
    consumer = broker.create_consumer("q")
    message = consumer.receive(0)
    assert message.delivery_count == 3 and message.redelivered
    consumer.rollback(message)               # 2 redeliveries already: the maximum
    assert len(broker.browse("ActiveMQ.DLQ")) == 1


@pytest.mark.parametrize("backend", ["journal", "lmdb"])
def test_a_dlq_copy_survives_a_restart_with_its_id_and_properties(tmp_path, backend):
    clock = ManualClock(START)
    broker = classic_broker(directory=tmp_path / "b", store=backend, clock=clock)
    broker.create_queue("orders")
    sent = broker.send("orders", b"a", properties={"k": "v"})
    consumer = broker.create_consumer("orders", redelivery_policy=ClassicRedeliveryPolicy(maximum_redeliveries=0))
    consumer.rollback(consumer.receive(0))
    broker.close()
    again = classic_broker(directory=tmp_path / "b", store=backend, clock=clock)
    try:
        [dead] = again.browse("ActiveMQ.DLQ")
        assert dead.message_id == sent and dead.body == b"a"
        assert dead.properties["k"] == "v" and "Delivery[1]" in dead.properties[CAUSE]
        assert "_JE_MESSAGE_ID" not in dead.properties
        assert again.queue("orders").message_count == 0
    finally:
        again.close()


@pytest.mark.parametrize("backend", ["journal", "lmdb"])
def test_a_broker_redelivery_schedule_survives_a_restart(tmp_path, backend):
    clock = ManualClock(START)
    config = redelivery_config(default=ClassicRedeliveryPolicy(maximum_redeliveries=3, initial_redelivery_delay=4000))
    broker = classic_broker(config, directory=tmp_path / "b", store=backend, clock=clock)
    broker.create_queue("q")
    broker.send("q", b"x")
    fail_once(broker, "q")
    broker.close()
    again = classic_broker(config, directory=tmp_path / "b", store=backend, clock=clock)
    try:
        consumer = again.create_consumer("q")
        assert consumer.receive(0) is None and again.queue("q").scheduled_count == 1
        clock.advance(4000)
        message = consumer.receive(0)
        assert message.delivery_count == 2
    finally:
        again.close()


CHILD = """
import os, sys, time
from journal_engine import Broker, ClassicBrokerConfig, ClassicRedeliveryPolicy, ManualClock
from journal_engine.broker.classic.plugins import RedeliveryPlugin
directory, backend, mode, start = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
policy = ClassicRedeliveryPolicy(maximum_redeliveries=5, redelivery_delays=(7000, 9000))
plugin = RedeliveryPlugin(default_entry=policy) if mode == "plugin" else None
broker = Broker(directory, store=backend, clock=ManualClock(start),
                config=ClassicBrokerConfig(redelivery_plugin=plugin, scheduler_support=plugin is not None))
broker.create_queue("q")
broker.send("q", b"x")
consumer = broker.create_consumer("q", redelivery_policy=None if plugin else policy)
consumer.rollback(consumer.receive(0))
broker.sync()
os.write(1, b"ready\\n")
time.sleep(600)
"""


@pytest.mark.parametrize("backend", ["journal", "lmdb"])
@pytest.mark.parametrize("mode", ["consumer", "plugin"])
def test_a_redelivery_from_the_delays_extension_survives_sigkill_with_its_time(tmp_path, backend, mode):
    import subprocess
    import sys
    directory = tmp_path / "b"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(directory), backend, mode, str(START)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = child.stdout.readline()
        assert line == b"ready\n", child.stderr.read().decode()
    finally:
        child.kill()
        child.wait(10)
        child.stdout.close()
        child.stderr.close()
    clock = ManualClock(START)
    again = Broker(directory, store=backend, clock=clock, config=ClassicBrokerConfig())
    try:
        consumer = again.create_consumer("q")
        assert again.queue("q").scheduled_count == 1
        clock.advance(6999)
        assert consumer.receive(0) is None
        clock.advance(1)
        message = consumer.receive(0)
        assert message.delivery_count == 2 and message.body == b"x"
    finally:
        again.close()


@pytest.mark.parametrize("backend", ["journal", "lmdb"])
def test_a_consumer_that_goes_away_returns_the_message_redelivered_without_limit(tmp_path, backend):
    broker = classic_broker(directory=tmp_path / "b", store=backend)
    try:
        broker.create_queue("q")
        broker.send("q", b"x")
        for count in range(1, 12):
            consumer = broker.create_consumer("q", redelivery_policy=ClassicRedeliveryPolicy(maximum_redeliveries=2))
            message = consumer.receive(0)
            assert message.delivery_count == count and message.redelivered == (count > 1)
            consumer.close()
        assert "ActiveMQ.DLQ" not in broker.queue_names() and broker.queue("q").message_count == 1
    finally:
        broker.close()
