"""ActiveMQ Classic's RedeliveryPolicy arithmetic, its text in a poison ack's cause, the destination map
and the dead-letter strategies on their own (the broker's use of them: test_broker_classic.py)."""
from __future__ import annotations

import random

import pytest

from journal_engine import ClassicRedeliveryPolicy, ConfigError
from journal_engine.broker.classic.destinations import QUEUE, TOPIC, ClassicDestination, ClassicDestinationMap
from journal_engine.broker.classic.plugins import DiscardingDLQPlugin, RedeliveryPlugin, compile_drop_only
from journal_engine.broker.classic.policy import expired_cause, java_double, poison_cause
from journal_engine.broker.classic.dead_letter_strategy import (DiscardingDeadLetterStrategy, IndividualDeadLetterStrategy,
                                                                SharedDeadLetterStrategy)
from journal_engine.broker.classic.producer_audit import DestinationAudit
from scripted_random import ScriptedRandom     # random() returns the given draws (nextBoolean, nextDouble)

pytestmark = pytest.mark.same_on_both   # Classic's policy arithmetic in Python, no core object


def test_classic_defaults():
    policy = ClassicRedeliveryPolicy()
    assert (policy.maximum_redeliveries, policy.initial_redelivery_delay, policy.redelivery_delay,
            policy.use_exponential_backoff, policy.backoff_multiplier, policy.maximum_redelivery_delay,
            policy.use_collision_avoidance, policy.collision_avoidance_factor) == (6, 1000, 1000, False, 5.0, -1,
                                                                                   False, 0.15)


def test_the_seed_example_500_doubling():
    # the seed's setInitialRedeliveryDelay(500), setBackOffMultiplier(2), setUseExponentialBackOff(true):
    # redeliveryDelay stays 1000 but only the first delay and the doubling matter
    policy = ClassicRedeliveryPolicy(initial_redelivery_delay=500, backoff_multiplier=2, use_exponential_backoff=True,
                                     maximum_redeliveries=2)
    assert [policy.redelivery_delay_for(n) for n in range(1, 6)] == [500, 1000, 2000, 4000, 8000]
    assert not policy.exceeded(2) and policy.exceeded(3)


def test_without_back_off_every_later_delay_is_the_redelivery_delay():
    policy = ClassicRedeliveryPolicy(initial_redelivery_delay=5000, redelivery_delay=10000)
    assert [policy.redelivery_delay_for(n) for n in range(1, 5)] == [5000, 10000, 10000, 10000]


def test_back_off_multiplies_only_a_positive_previous_delay_and_a_multiplier_above_one():
    policy = ClassicRedeliveryPolicy(initial_redelivery_delay=0, redelivery_delay=300, use_exponential_backoff=True,
                                     backoff_multiplier=3)
    # previous 0: the redelivery delay, then multiplied
    assert [policy.redelivery_delay_for(n) for n in range(1, 5)] == [0, 300, 900, 2700]
    flat = ClassicRedeliveryPolicy(redelivery_delay=300, use_exponential_backoff=True, backoff_multiplier=1.0)
    assert flat.next_redelivery_delay(1000) == 300


def test_the_cap_is_the_larger_of_the_maximum_and_the_redelivery_delay():
    policy = ClassicRedeliveryPolicy(initial_redelivery_delay=100, redelivery_delay=100, use_exponential_backoff=True,
                                     backoff_multiplier=2, maximum_redelivery_delay=1000)
    assert [policy.redelivery_delay_for(n) for n in range(1, 8)] == [100, 200, 400, 800, 1000, 1000, 1000]
    low_cap = ClassicRedeliveryPolicy(initial_redelivery_delay=100, redelivery_delay=700, use_exponential_backoff=True,
                                      backoff_multiplier=10, maximum_redelivery_delay=50)
    assert low_cap.next_redelivery_delay(100) == 700


def test_collision_avoidance_comes_after_the_cap_and_stays_in_its_bounds():
    policy = ClassicRedeliveryPolicy(initial_redelivery_delay=1000, redelivery_delay=1000, use_exponential_backoff=True,
                                     backoff_multiplier=2, maximum_redelivery_delay=4000, use_collision_avoidance=True,
                                     collision_avoidance_factor=0.15)
    # capped at 4000, then +15% * 1.0: above the cap, as in Classic
    assert policy.next_redelivery_delay(4000, ScriptedRandom([0.1, 1.0])) == 4600
    assert policy.next_redelivery_delay(4000, ScriptedRandom([0.9, 0.5])) == 3700     # -15% * 0.5
    rng = random.Random(7)
    for _ in range(500):
        delay = policy.next_redelivery_delay(1000, rng)
        assert 1700 <= delay <= 2300


def test_infinite_redeliveries_never_exceed():
    policy = ClassicRedeliveryPolicy(maximum_redeliveries=-1)
    assert not any(policy.exceeded(n) for n in (1, 10, 10**6))
    assert ClassicRedeliveryPolicy(maximum_redeliveries=0).exceeded(1)


@pytest.mark.parametrize("field, value", [("maximum_redeliveries", -2), ("initial_redelivery_delay", -1),
                                          ("maximum_redelivery_delay", -5), ("collision_avoidance_factor", 1.5),
                                          ("use_exponential_backoff", "yes"), ("backoff_multiplier", float("nan"))])
def test_bad_policy_values_name_the_field(field, value):
    with pytest.raises(ConfigError) as caught:
        ClassicRedeliveryPolicy(**{field: value})
    assert caught.value.field == field


def test_poison_cause_is_the_text_classic_records():
    assert poison_cause(7, ClassicRedeliveryPolicy()) == (
        "java.lang.Throwable: Delivery[7] exceeds redelivery policy limit:RedeliveryPolicy {destination = null, "
        "collisionAvoidanceFactor = 0.15, maximumRedeliveries = 6, maximumRedeliveryDelay = -1, "
        "initialRedeliveryDelay = 1000, useCollisionAvoidance = false, useExponentialBackOff = false, "
        "backOffMultiplier = 5.0, redeliveryDelay = 1000, preDispatchCheck = true}, cause:null")
    assert expired_cause(1234) == "java.lang.Throwable: Message Expired. Expiration:1234"
    assert [java_double(v) for v in (5.0, 0.15, 2.0, 1e10, 0.0)] == ["5.0", "0.15", "2.0", "1.0E10", "0.0"]


def test_destination_map_wildcards_and_choice():
    entries = ClassicDestinationMap()
    entries.put(QUEUE, "orders.>", "orders-tree")
    entries.put(QUEUE, "orders", "exact")
    entries.put(QUEUE, "*.eu", "any-eu")
    entries.put(TOPIC, "prices.*", "prices")
    assert entries.get(ClassicDestination(QUEUE, "orders")) == "exact"
    assert entries.get(ClassicDestination(QUEUE, "orders.us.east")) == "orders-tree"
    # both "*.eu" and "orders.>" match: Classic takes the name that sorts first ('*' < 'o')
    assert entries.get(ClassicDestination(QUEUE, "orders.eu")) == "any-eu"
    assert entries.get(ClassicDestination(QUEUE, "billing")) is None
    assert entries.get(ClassicDestination(TOPIC, "prices.ibm")) == "prices"
    assert entries.get(ClassicDestination(TOPIC, "prices")) is None             # '*' is exactly one word
    assert entries.get(ClassicDestination(TOPIC, "orders")) is None             # queue entries: queues only
    with pytest.raises(ConfigError):
        entries.put(QUEUE, "a.>.b", "x")


def test_message_audit_window_and_producers():
    # the strategy's audit is ActiveMQMessageAudit (the producer audit's DestinationAudit): a window of
    # depth 4 is BitArrayBin's one 64-bit word, ids 0..63 once 1 is seen; LRUCache of 2 producers
    audit = DestinationAudit(4, 2)
    assert not audit.is_duplicate("p", 1) and audit.is_duplicate("p", 1)
    for sequence in range(2, 64):
        audit.is_duplicate("p", sequence)
    assert audit.is_duplicate("p", 1)              # still in the word
    assert not audit.is_duplicate("p", 64)         # slides one word: 64..127
    assert not audit.is_duplicate("p", 1)          # fell out of the window: not remembered
    assert audit.is_duplicate("p", 64)
    audit.is_duplicate("q", 1)
    audit.is_duplicate("r", 1)                     # a third producer: the least recent ("p") is forgotten
    assert not audit.is_duplicate("p", 64)


def test_strategies_name_their_dead_letter_queues():
    orders = ClassicDestination(QUEUE, "orders")
    prices = ClassicDestination(TOPIC, "prices")
    assert SharedDeadLetterStrategy().dead_letter_queue_for(orders) == ClassicDestination(QUEUE, "ActiveMQ.DLQ")
    individual = IndividualDeadLetterStrategy()
    assert individual.dead_letter_queue_for(orders) == ClassicDestination(QUEUE, "ActiveMQ.DLQ.Queue.orders")
    assert individual.dead_letter_queue_for(prices) == ClassicDestination(QUEUE, "ActiveMQ.DLQ.Topic.prices")
    custom = IndividualDeadLetterStrategy(queue_prefix="DLQ.", queue_suffix=".dead", topic_prefix="T.",
                                          topic_suffix=".x", use_queue_for_queue_messages=False,
                                          use_queue_for_topic_messages=False)
    assert custom.dead_letter_queue_for(orders) == ClassicDestination(TOPIC, "DLQ.orders.dead")
    assert custom.dead_letter_queue_for(prices) == ClassicDestination(TOPIC, "T.prices.x")
    assert DiscardingDeadLetterStrategy().dead_letter_queue_for(orders) is None


def test_strategy_acceptance_rules():
    orders = ClassicDestination(QUEUE, "orders")
    shared = SharedDeadLetterStrategy()
    assert shared.accepts(orders, "p", 1, persistent=True, expired=False) is None
    assert "duplicate" in shared.accepts(orders, "p", 1, persistent=True, expired=False)
    assert "non-persistent" in shared.accepts(orders, "p", 2, persistent=False, expired=False)
    assert shared.accepts(orders, "p", 3, persistent=True, expired=True) is None
    assert "expired" in SharedDeadLetterStrategy(process_expired=False).accepts(orders, "p", 4, persistent=True,
                                                                                 expired=True)
    no_audit = SharedDeadLetterStrategy(enable_audit=False, process_non_persistent=True)
    assert no_audit.accepts(orders, "p", 5, persistent=False, expired=False) is None
    assert no_audit.accepts(orders, "p", 5, persistent=False, expired=False) is None
    assert DiscardingDeadLetterStrategy().accepts(orders, "p", 6, persistent=True, expired=False) is not None


def test_discarding_plugin_rules():
    assert DiscardingDLQPlugin().drop_reason(ClassicDestination(QUEUE, "orders")) == "dropAll"
    plugin = DiscardingDLQPlugin(drop_all=False, drop_only=compile_drop_only(
        "MY.EXAMPLE.TOPIC.[0-9]{3} MY.EXAMPLE.QUEUE.[0-9]{3}"))
    assert plugin.drop_reason(ClassicDestination(QUEUE, "MY.EXAMPLE.QUEUE.087")) == "dropOnly"
    assert plugin.drop_reason(ClassicDestination(QUEUE, "MY.EXAMPLE.QUEUE.87")) is None     # the whole name
    assert plugin.drop_reason(ClassicDestination(TOPIC, "MY.EXAMPLE.TOPIC.290")) == "dropOnly"
    assert plugin.drop_reason(ClassicDestination(QUEUE, "ID:host-1:1:1")) == "dropTemporaryQueues"
    assert plugin.drop_reason(ClassicDestination(TOPIC, "ID:host-1:1:2")) == "dropTemporaryTopics"
    with pytest.raises(ConfigError) as caught:
        compile_drop_only("ok [unclosed")
    assert caught.value.value == "[unclosed"


def test_redelivery_plugin_delays():
    plugin = RedeliveryPlugin(default_entry=ClassicRedeliveryPolicy(maximum_redeliveries=3, initial_redelivery_delay=5000,
                                                                    redelivery_delay=10000))
    policy = plugin.policy_for(ClassicDestination(QUEUE, "anything"))
    assert [plugin.delay_for(policy, n, None) for n in range(4)] == [5000, 10000, 10000, None]


def test_the_redelivery_delays_extension_lists_the_first_delays_then_the_arithmetic_goes_on():
    policy = ClassicRedeliveryPolicy(redelivery_delays=(10, 20), use_exponential_backoff=True, backoff_multiplier=2)
    assert [policy.redelivery_delay_for(n) for n in range(1, 6)] == [10, 20, 40, 80, 160]
    flat = ClassicRedeliveryPolicy(redelivery_delays=[10], redelivery_delay=300)
    assert [flat.redelivery_delay_for(n) for n in range(1, 4)] == [10, 300, 300]
    plugin = RedeliveryPlugin(default_entry=ClassicRedeliveryPolicy(maximum_redeliveries=4, redelivery_delays=(7, 9),
                                                                    redelivery_delay=500))
    policy = plugin.default_entry
    assert [plugin.delay_for(policy, n, None) for n in range(5)] == [7, 9, 500, 500, None]
    with pytest.raises(ConfigError) as caught:
        ClassicRedeliveryPolicy(redelivery_delays=(1, -1))
    assert caught.value.field == "redelivery_delays"
