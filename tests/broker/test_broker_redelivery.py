"""The rollback path through the broker, with a ManualClock: the manual's worked examples, Artemis's
MultipliedDelayedMessageTest, collision avoidance with a scripted random source, the head-of-queue
rule, the settings precedence examples, and the records the path writes."""
from __future__ import annotations

import random

import pytest
from broker_time import NOW

from journal_engine import AddressSettings, Broker, ManualClock, RecordType
from scripted_random import ScriptedRandom


def make_broker(clock, directory=None, **options):
    options.setdefault("store_options", {"file_size": 256 * 1024} if directory is not None else None)
    return Broker(directory, clock=clock, **options)


def consumer_on_q(clock, *bodies, **settings):
    """A broker whose queue "q" (with AddressSettings(**settings), when any are given) holds ``bodies``;
    returns it and a consumer on "q"."""
    broker = make_broker(clock)
    if settings:
        broker.address_settings.add("q", AddressSettings(**settings))
    broker.create_queue("q")
    for body in bodies:
        broker.send("q", body)
    return broker, broker.create_consumer("q")


def wait_times(broker, clock, consumer, rollbacks, *, step=1, keep=False):
    """Roll the message back ``rollbacks`` times; after each, find how long until it is receivable
    again (advancing the clock by ``step`` ms at a time). Returns the waits (and with keep=True
    the last delivery, still unacknowledged)."""
    waits = []
    message = consumer.receive(0)
    for _ in range(rollbacks):
        consumer.rollback(message)
        waited = 0
        while (message := consumer.receive(0)) is None:
            clock.advance(step)
            waited += step
        waits.append(waited)
    return (waits, message) if keep else waits


def test_manual_example_5000_10000_15000(clock):
    """undelivered-messages.adoc: delay 5000, multiplier 2, max 15000 -> waits 5000, 10000, 15000;
    the message is not receivable a millisecond before each delay and is at it."""
    broker = make_broker(clock)
    broker.address_settings.add("exampleQueue", AddressSettings(
        redelivery_delay=5000, redelivery_delay_multiplier=2.0, max_redelivery_delay=15000,
        redelivery_collision_avoidance_factor=0.0, max_delivery_attempts=-1))
    broker.create_queue("exampleQueue")
    broker.send("exampleQueue", b"m")
    consumer = broker.create_consumer("exampleQueue")
    message = consumer.receive(0)
    for attempt, expected in enumerate((5000, 10000, 15000, 15000), start=1):
        consumer.rollback(message)
        assert broker.queue("exampleQueue").scheduled_count == 1
        clock.advance(expected - 1)
        assert consumer.receive(0) is None, f"receivable before {expected} ms after attempt {attempt}"
        clock.advance(1)
        message = consumer.receive(0)
        assert message is not None and message.delivery_count == attempt + 1


def test_multiplied_delayed_message_test_100_to_1000(clock):
    """MultipliedDelayedMessageTest: 100 / 2.0 / max 1000 -> 100, 200, 400, 800, 1000, 1000."""
    broker, consumer = consumer_on_q(clock, b"m", redelivery_delay=100, redelivery_delay_multiplier=2.0,
                                     max_redelivery_delay=1000, max_delivery_attempts=-1)
    assert wait_times(broker, clock, consumer, 6) == [100, 200, 400, 800, 1000, 1000]


def test_default_max_redelivery_delay_is_ten_times_the_delay(clock):
    broker, consumer = consumer_on_q(clock, b"m", redelivery_delay=10, redelivery_delay_multiplier=3.0,
                                     max_delivery_attempts=-1)
    assert wait_times(broker, clock, consumer, 4) == [10, 30, 90, 100]


def test_manual_collision_avoidance_example_875_1375_975(clock):
    """delay 1000, factor 0.5: (sign -1, 0.25) -> 875; (+1, 0.75) -> 1375; (-1, 0.05) -> 975.
    The first draw picks the sign (< 0.5 = +), the second the magnitude."""
    rng = ScriptedRandom([0.9, 0.25, 0.1, 0.75, 0.9, 0.05])
    broker = make_broker(clock, rng=rng)
    broker.address_settings.add("q", AddressSettings(redelivery_delay=1000, redelivery_delay_multiplier=1.0,
                                                     max_redelivery_delay=15000,
                                                     redelivery_collision_avoidance_factor=0.5,
                                                     max_delivery_attempts=-1))
    broker.create_queue("q")
    broker.send("q", b"m")
    assert wait_times(broker, clock, broker.create_consumer("q"), 3) == [875, 1375, 975]


def test_collision_avoidance_with_a_seeded_rng_is_repeatable_and_within_bounds(clock):
    settings = AddressSettings(redelivery_delay=1000, redelivery_collision_avoidance_factor=0.5,
                               max_delivery_attempts=-1)
    runs = []
    for _ in range(2):
        broker = make_broker(ManualClock(NOW), rng=random.Random(42))
        broker.address_settings.add("q", settings)
        broker.create_queue("q")
        broker.send("q", b"m")
        runs.append(wait_times(broker, broker.clock, broker.create_consumer("q"), 5, step=5))
    assert runs[0] == runs[1]
    assert all(500 <= wait <= 1500 for wait in runs[0])
    expected_rng = random.Random(42)
    assert runs[0] == [-(-settings.redelivery_delay_for(n, expected_rng) // 5) * 5 for n in range(1, 6)]


def test_other_messages_keep_flowing_while_one_waits(clock):
    broker, consumer = consumer_on_q(clock, b"a", b"b", b"c", redelivery_delay=1000)
    consumer.rollback(consumer.receive(0))          # "a" waits 1000 ms
    assert [consumer.receive(0).body for _ in range(2)] == [b"b", b"c"]
    assert consumer.receive(0) is None
    clock.advance(1000)
    assert consumer.receive(0).body == b"a"


def test_a_due_redelivery_goes_to_the_head_of_its_queue(clock):
    broker, consumer = consumer_on_q(clock, b"a", redelivery_delay=100)
    consumer.rollback(consumer.receive(0))
    broker.send("q", b"b")
    broker.send("q", b"c")
    clock.advance(100)
    assert [m.body for m in broker.browse("q")] == [b"a", b"b", b"c"]
    assert consumer.receive(0).body == b"a"


def test_due_redeliveries_reach_the_head_earliest_first(clock):
    broker, consumer = consumer_on_q(clock, b"a", b"b", redelivery_delay=100, redelivery_delay_multiplier=3.0)
    consumer.rollback(consumer.receive(0))        # a: count 1, due +100
    clock.advance(100)
    a = consumer.receive(0)
    assert (a.body, a.delivery_count) == (b"a", 2)
    consumer.rollback(a)                          # a: due +300
    consumer.rollback(consumer.receive(0))        # b: count 1, due +100
    broker.send("q", b"c")
    clock.advance(300)                            # both due: b (earlier) ahead of a, both ahead of c
    assert [m.body for m in broker.browse("q")] == [b"b", b"a", b"c"]


def test_no_delay_puts_the_message_back_in_message_order(clock):
    """delay 0: re-added sorted (Artemis addSorted), so a rolled-back message is next again."""
    broker, consumer = consumer_on_q(clock, b"a", b"b", b"c")
    a, b = consumer.receive(0), consumer.receive(0)
    consumer.rollback(b)
    consumer.rollback(a)
    assert [m.body for m in broker.browse("q")] == [b"a", b"b", b"c"]
    assert [(m.body, m.delivery_count) for m in (consumer.receive(0), consumer.receive(0))] == [(b"a", 2), (b"b", 2)]


def test_rollback_delay_override_replaces_the_address_delay(clock):
    broker, consumer = consumer_on_q(clock, b"a", redelivery_delay=5000)
    consumer.rollback(consumer.receive(0), delay_ms=0)
    message = consumer.receive(0)
    assert message.delivery_count == 2
    consumer.rollback(message, delay_ms=50)
    clock.advance(49)
    assert consumer.receive(0) is None
    clock.advance(1)
    assert consumer.receive(0).delivery_count == 3


def test_max_delivery_attempts_zero_or_negative_means_forever(clock):
    for attempts in (0, -1):
        broker = make_broker(ManualClock(NOW))
        broker.address_settings.add("q", AddressSettings(max_delivery_attempts=attempts))
        broker.create_queue("q")
        broker.send("q", b"m")
        consumer = broker.create_consumer("q")
        for _ in range(25):
            consumer.rollback(consumer.receive(0))
        assert consumer.receive(0).delivery_count == 26


def test_default_max_delivery_attempts_is_ten(clock):
    broker, consumer = consumer_on_q(clock, b"m")
    for count in range(1, 11):
        message = consumer.receive(0)
        assert message.delivery_count == count
        consumer.rollback(message)
    assert consumer.receive(0) is None
    info = broker.queue("q")
    assert (info.message_count, info.messages_killed, info.messages_dropped) == (0, 1, 1)


# ----- settings precedence through the broker --------------------------------------------------------

def test_settings_precedence_merge_through_the_broker(clock):
    """RepositoryTest#testRepositoryMerge: for a.b.c.d the winner is a.b.c.*, then a.b.*.d, a.b.c.#,
    a.b.#, a.#, #; each field comes from the most specific match that sets it."""
    broker = make_broker(clock)
    add = broker.address_settings.add
    add("#", AddressSettings(max_delivery_attempts=3, dead_letter_address="DLA-any"))
    add("a.#", AddressSettings(redelivery_delay=999))
    add("a.b.#", AddressSettings(redelivery_delay_multiplier=2.0))
    add("a.b.c.#", AddressSettings(max_redelivery_delay=150))
    add("a.b.*.d", AddressSettings(redelivery_delay=100))
    add("a.b.c.*", AddressSettings(dead_letter_address="DLA-abc"))
    broker.create_queue("work", address="a.b.c.d")
    broker.create_queue("dead", address="DLA-abc")
    broker.create_queue("dead-any", address="DLA-any")
    broker.send("a.b.c.d", b"m")
    consumer = broker.create_consumer("work")
    # delay 100 (a.b.*.d) x 2 (a.b.#), capped at 150 (a.b.c.#)
    waits, message = wait_times(broker, clock, consumer, 2, keep=True)
    assert waits == [100, 150]
    assert message.delivery_count == 3
    consumer.rollback(message)                  # 3 = max_delivery_attempts (#): to the DLA of a.b.c.*
    assert broker.queue("dead").message_count == 1
    assert broker.queue("dead-any").message_count == 0


def test_derived_max_delay_uses_the_merged_delay_and_an_explicit_less_specific_max_wins(clock):
    broker = make_broker(clock)
    broker.address_settings.add("orders.#", AddressSettings(max_redelivery_delay=150))
    broker.address_settings.add("orders.eu", AddressSettings(redelivery_delay=100, redelivery_delay_multiplier=2.0,
                                                             max_delivery_attempts=-1))
    broker.address_settings.add("other", AddressSettings(redelivery_delay=100, redelivery_delay_multiplier=2.0,
                                                         max_delivery_attempts=-1))
    broker.create_queue("eu", address="orders.eu")
    broker.create_queue("other")
    broker.send("orders.eu", b"m")
    broker.send("other", b"m")
    assert wait_times(broker, clock, broker.create_consumer("eu"), 3) == [100, 150, 150]
    assert wait_times(broker, clock, broker.create_consumer("other"), 4) == [100, 200, 400, 800]


def test_a_queue_looks_its_settings_up_by_its_address_not_its_name(clock):
    broker = make_broker(clock)
    broker.address_settings.add("by-address", AddressSettings(redelivery_delay=300))
    broker.address_settings.add("by-name", AddressSettings(redelivery_delay=5))
    broker.create_queue("by-name", address="by-address")
    broker.send("by-address", b"m")
    assert wait_times(broker, clock, broker.create_consumer("by-name"), 1, step=5) == [300]


def test_literal_match_markers_through_the_broker(clock):
    from journal_engine import AddressSettingsRepository
    broker = make_broker(clock)
    repository = AddressSettingsRepository(literal_markers="()")
    repository.add("(orders.#)", AddressSettings(redelivery_delay=40))
    repository.add("orders.#", AddressSettings(redelivery_delay=70))
    broker.address_settings = repository
    broker.create_queue("literal", address="orders.#")
    broker.create_queue("plain", address="orders.x")
    broker.send("orders.#", b"m")
    broker.send("orders.x", b"m")
    assert wait_times(broker, clock, broker.create_consumer("literal"), 1, step=10) == [40]
    assert wait_times(broker, clock, broker.create_consumer("plain"), 1, step=10) == [70]


# ----- records ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cap, records", [(0, 0), (1, 2), (-1, 200)])
def test_hundred_rollbacks_write_as_many_records_as_artemis(tmp_path, clock, cap, records):
    """RescheduleJDBCDeliveryTest through the broker: delay 1, 100 rollbacks -> 0 / 2 / 200 records of
    34+36; after a restart the message is still delivered."""
    broker = make_broker(clock, tmp_path / "b", max_redelivery_records=cap)
    broker.address_settings.add("q", AddressSettings(redelivery_delay=1, max_delivery_attempts=-1))
    broker.create_queue("q")
    broker.send("q", b"m")
    consumer = broker.create_consumer("q")
    for _ in range(100):
        message = consumer.receive(0)
        while message is None:
            clock.advance(1)
            message = consumer.receive(0)
        consumer.rollback(message)
    store = broker.store
    assert store.record_count(RecordType.UPDATE_DELIVERY_COUNT) + store.record_count(
        RecordType.SET_SCHEDULED_DELIVERY_TIME) == records
    broker.close()
    clock.advance(10)
    broker = make_broker(clock, tmp_path / "b", max_redelivery_records=cap)
    message = broker.create_consumer("q").receive(0)
    assert message.delivery_count == {0: 0, 1: 1, -1: 100}[cap] + 1
    broker.close()


def test_the_delivery_count_is_persisted_before_the_dead_letter_decision(tmp_path, clock):
    broker = make_broker(clock, tmp_path / "b")
    broker.address_settings.add("q", AddressSettings(max_delivery_attempts=3))
    broker.create_queue("q")
    message_id = broker.send("q", b"m")
    consumer = broker.create_consumer("q")
    store = broker.store
    queue_id = broker.queue("q").queue_id
    for count in (1, 2):
        consumer.rollback(consumer.receive(0))
        assert store.persisted_delivery_count(queue_id, message_id) == count
    assert store.record_count(RecordType.SET_SCHEDULED_DELIVERY_TIME) == 0     # no delay: no 36
    consumer.rollback(consumer.receive(0))
    assert not store.has_message(message_id)
    broker.close()
