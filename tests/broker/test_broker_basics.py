"""The broker's everyday behaviour: routing, filters, durable and non-durable messages, consumers,
browsing, queue counts, scheduled delivery, expiry at delivery, clocks, and the errors of bad input."""
from __future__ import annotations

import threading
import time

import pytest
from broker_time import NOW

from journal_engine import (AddressSettings, Broker, ConfigError, Consumer, JournalClosedError, MessageStateError,
                            MessageStore, QueueExistsError, RecordType, SelectorError, UnknownQueueError)

SMALL = {"file_size": 256 * 1024}


@pytest.fixture
def durable_broker(tmp_path, clock):
    b = Broker(tmp_path / "broker", clock=clock, store_options=SMALL)
    yield b
    b.close()


def drain(consumer) -> list:
    return list(iter(lambda: consumer.receive(0), None))


# ----- routing ---------------------------------------------------------------------------------------

def test_anycast_queues_of_one_address_share_the_messages_round_robin(broker):
    broker.create_queue("q1", address="orders")
    broker.create_queue("q2", address="orders")
    for index in range(4):
        broker.send("orders", b"%d" % index)
    assert broker.queue("q1").message_count == 2
    assert broker.queue("q2").message_count == 2
    assert [m.body for m in broker.browse("q1")] == [b"0", b"2"]
    assert [m.body for m in broker.browse("q2")] == [b"1", b"3"]


def test_every_multicast_queue_gets_a_copy_and_anycast_shares_one(broker):
    broker.create_queue("sub1", address="news", routing_type="multicast")
    broker.create_queue("sub2", address="news", routing_type="multicast")
    broker.create_queue("work", address="news")
    broker.send("news", b"a")
    assert [broker.queue(n).message_count for n in ("sub1", "sub2", "work")] == [1, 1, 1]
    broker.send("news", b"b", routing_type="multicast")
    assert [broker.queue(n).message_count for n in ("sub1", "sub2", "work")] == [2, 2, 1]
    broker.send("news", b"c", routing_type="anycast")
    assert [broker.queue(n).message_count for n in ("sub1", "sub2", "work")] == [2, 2, 2]


def test_multicast_copies_have_their_own_delivery_counts(broker):
    broker.create_queue("sub1", address="news", routing_type="multicast")
    broker.create_queue("sub2", address="news", routing_type="multicast")
    broker.send("news", b"a")
    c1, c2 = broker.create_consumer("sub1"), broker.create_consumer("sub2")
    first = c1.receive(0)
    c1.rollback(first)
    assert c1.receive(0).delivery_count == 2
    assert c2.receive(0).delivery_count == 1


def test_a_message_no_queue_takes_is_dropped_and_counted(broker):
    broker.create_queue("only-red", address="colors", filter="color = 'red'")
    broker.send("colors", b"x", properties={"color": "blue"})
    broker.send("nowhere", b"y")
    assert broker.queue("only-red").message_count == 0
    assert broker.stats()["unrouted"] == 2


def test_queue_filter_selects_by_properties_and_headers(broker):
    broker.create_queue("big", address="orders", filter="amount > 100 AND region IN ('eu', 'us')")
    broker.create_queue("durable-only", address="orders", routing_type="multicast",
                        filter="AMQDurable = 'DURABLE' AND AMQSize >= 3")
    broker.send("orders", b"abc", properties={"amount": 150, "region": "eu"})
    broker.send("orders", b"abcd", properties={"amount": 150, "region": "asia"}, durable=False)
    broker.send("orders", b"ab", properties={"amount": 50, "region": "us"})
    assert [m.body for m in broker.browse("big")] == [b"abc"]
    assert [m.body for m in broker.browse("durable-only")] == [b"abc"]


def test_anycast_round_robin_skips_a_queue_whose_filter_refuses(broker):
    broker.create_queue("red", address="paint", filter="color = 'red'")
    broker.create_queue("any", address="paint")
    for color in ("red", "blue", "blue", "red"):
        broker.send("paint", color.encode(), properties={"color": color})
    # red -> "red" (its turn); blue: "any"'s turn; blue: "red"'s turn, refused, so "any"; red: "red"
    assert [m.body for m in broker.browse("red")] == [b"red", b"red"]
    assert [m.body for m in broker.browse("any")] == [b"blue", b"blue"]


# ----- durable and non-durable ------------------------------------------------------------------------

def test_non_durable_messages_never_touch_the_store(durable_broker, tmp_path):
    durable_broker.create_queue("q")
    consumer = durable_broker.create_consumer("q")
    durable_broker.send("q", b"volatile", durable=False)
    consumer.ack(consumer.receive(0))
    durable_broker.send("q", b"volatile", durable=False)
    message = consumer.receive(0)
    consumer.rollback(message)
    store = durable_broker.store
    assert store.stats()["messages"] == 0
    assert store.record_count(RecordType.ADD_MESSAGE) == 0
    assert store.record_count(RecordType.UPDATE_DELIVERY_COUNT) == 0


def test_durable_message_on_a_non_durable_queue_is_not_stored(durable_broker):
    durable_broker.create_queue("temp", durable=False)
    durable_broker.send("temp", b"x")
    assert durable_broker.store.stats()["messages"] == 0
    assert durable_broker.queue("temp").durable is False


def test_durable_send_and_ack_write_add_ref_ack_and_delete(durable_broker):
    durable_broker.create_queue("q")
    message_id = durable_broker.send("q", b"x")
    store = durable_broker.store
    assert store.reference_queues(message_id) == {durable_broker.queue("q").queue_id}
    consumer = durable_broker.create_consumer("q")
    consumer.ack(consumer.receive(0))
    assert not store.has_message(message_id)


def test_multicast_message_is_deleted_only_after_the_last_durable_reference(durable_broker):
    durable_broker.create_queue("a", address="t", routing_type="multicast")
    durable_broker.create_queue("b", address="t", routing_type="multicast")
    message_id = durable_broker.send("t", b"x")
    ca, cb = durable_broker.create_consumer("a"), durable_broker.create_consumer("b")
    ca.ack(ca.receive(0))
    assert durable_broker.store.has_message(message_id)
    cb.ack(cb.receive(0))
    assert not durable_broker.store.has_message(message_id)


def test_properties_are_read_only_and_copied_at_send(broker):
    broker.create_queue("q")
    properties = {"k": 1}
    broker.send("q", b"x", properties=properties)
    properties["k"] = 2
    message = broker.create_consumer("q").receive(0)
    assert message.properties == {"k": 1}
    with pytest.raises(TypeError):
        message.properties["k"] = 3


# ----- consumers ----------------------------------------------------------------------------------------

def test_first_delivery_has_count_one_and_redelivery_counts_up(broker):
    broker.create_queue("q")
    broker.send("q", b"x")
    consumer = broker.create_consumer("q")
    first = consumer.receive(0)
    assert (first.delivery_count, first.redelivered) == (1, False)
    consumer.rollback(first)
    second = consumer.receive(0)
    assert (second.delivery_count, second.redelivered) == (2, True)
    assert first.delivery_count == 1          # an old delivery keeps its own count


def test_close_returns_unacked_messages_without_counting_a_failed_delivery(broker):
    broker.create_queue("q")
    for body in (b"a", b"b", b"c"):
        broker.send("q", body)
    consumer = broker.create_consumer("q")
    a, b = consumer.receive(0), consumer.receive(0)
    consumer.ack(a)
    consumer.close()
    assert broker.queue("q").delivering_count == 0
    again = broker.create_consumer("q")
    returned = again.receive(0)
    assert (returned.body, returned.delivery_count, returned.redelivered) == (b"b", 1, False)
    with pytest.raises(MessageStateError, match="went back to its queue"):
        consumer.ack(b)
    with pytest.raises(JournalClosedError):
        consumer.receive(0)


def test_browse_shows_messages_in_order_with_count_zero_and_does_not_consume(broker):
    broker.create_queue("q")
    for body in (b"a", b"b"):
        broker.send("q", body)
    consumer = broker.create_consumer("q")
    consumer.rollback(consumer.receive(0))
    browsed = broker.browse("q")
    assert [(m.body, m.delivery_count) for m in browsed] == [(b"a", 0), (b"b", 0)]
    assert broker.queue("q").message_count == 2
    assert consumer.receive(0).delivery_count == 2
    with pytest.raises(MessageStateError, match="browsed"):
        consumer.ack(browsed[1])


def test_queue_info_counts_scheduled_and_delivering_in_message_count(broker, clock):
    broker.create_queue("q")
    broker.send("q", b"now")
    broker.send("q", b"later", scheduled_delivery_time=NOW + 1000)
    consumer = broker.create_consumer("q")
    consumer.receive(0)
    info = broker.queue("q")
    assert (info.message_count, info.scheduled_count, info.delivering_count) == (2, 1, 1)
    assert (info.name, info.address, info.filter, info.consumer_count) == ("q", "q", None, 1)
    assert broker.queue_names() == ["q"]


def test_scheduled_delivery_is_not_receivable_before_its_time(broker, clock):
    broker.create_queue("q")
    broker.send("q", b"later", scheduled_delivery_time=NOW + 500)
    broker.send("q", b"now")
    consumer = broker.create_consumer("q")
    assert consumer.receive(0).body == b"now"
    assert consumer.receive(0) is None
    clock.advance(499)
    assert consumer.receive(0) is None
    clock.advance(1)
    assert consumer.receive(0).body == b"later"


def test_expired_message_is_not_delivered_and_is_dropped_without_expiry_address(broker, clock):
    broker.create_queue("q")
    broker.send("q", b"stale", expiration=NOW + 10)
    broker.send("q", b"fresh")
    clock.advance(10)
    consumer = broker.create_consumer("q")
    assert consumer.receive(0).body == b"fresh"
    info = broker.queue("q")
    assert (info.messages_expired, info.messages_dropped, info.message_count) == (1, 1, 1)


def test_expiry_delay_applies_to_messages_without_an_expiration(broker, clock):
    broker.address_settings.add("q", AddressSettings(expiry_delay=100))
    broker.create_queue("q")
    broker.send("q", b"x")
    broker.send("q", b"y", expiration=NOW + 1000)
    assert [m.expiration for m in broker.browse("q")] == [NOW + 100, NOW + 1000]


def test_settings_changed_after_sends_apply_to_the_next_send(broker):
    broker.create_queue("q")
    broker.send("q", b"before")
    broker.address_settings.add("#", AddressSettings(expiry_delay=10))
    broker.send("q", b"wild")
    broker.address_settings.add("q", AddressSettings(expiry_delay=20))
    broker.send("q", b"exact")
    assert [m.expiration for m in broker.browse("q")] == [0, NOW + 10, NOW + 20]


def test_manual_clock_receive_zero_returns_none_on_an_empty_queue(broker):
    """How long a receive(0) takes is bench/test_bench_waits.py's (group receive-now)."""
    broker.create_queue("q")
    consumer = broker.create_consumer("q")
    for _ in range(100):
        assert consumer.receive(0) is None


def test_receive_with_timeout_waits_for_a_send_from_another_thread():
    """It waits (lower bounds, which no slowness breaks) and a send ends the wait before its timeout; how
    soon after the send is bench/test_bench_waits.py's (group receive-wakeup)."""
    broker = Broker()
    broker.create_queue("q")
    consumer = broker.create_consumer("q")
    timer = threading.Timer(0.1, lambda: broker.send("q", b"late"))
    started = time.monotonic()
    timer.start()
    message = consumer.receive(5.0)
    elapsed = time.monotonic() - started
    assert message is not None and message.body == b"late"     # before receive(5.0) timed out
    assert elapsed > 0.05
    started = time.monotonic()
    assert consumer.receive(0.2) is None
    assert time.monotonic() - started > 0.15
    broker.close()


def test_receive_with_the_wall_clock_wakes_when_a_redelivery_falls_due():
    """Not before the delay, and before receive(3.0) times out; how late after the due time is
    bench/test_bench_waits.py's (group receive-wakeup)."""
    broker = Broker()
    broker.address_settings.add("q", AddressSettings(redelivery_delay=150))
    broker.create_queue("q")
    broker.send("q", b"x")
    consumer = broker.create_consumer("q")
    consumer.rollback(consumer.receive(0))
    started = time.monotonic()
    message = consumer.receive(3.0)
    elapsed = time.monotonic() - started
    assert message is not None and message.delivery_count == 2
    assert elapsed > 0.1
    broker.close()


def test_manual_clock_advance_wakes_a_receiver_waiting_on_another_thread(broker, clock):
    broker.address_settings.add("q", AddressSettings(redelivery_delay=1000))
    broker.create_queue("q")
    broker.send("q", b"x")
    consumer = broker.create_consumer("q")
    consumer.rollback(consumer.receive(0))
    got = []
    waiter = threading.Thread(target=lambda: got.append(consumer.receive(5.0)))
    waiter.start()
    time.sleep(0.05)
    clock.advance(1000)
    waiter.join(5)
    assert got and got[0].delivery_count == 2


def _waiting_receive(broker: Broker) -> tuple[Consumer, threading.Thread, list]:
    """A consumer of a new empty queue "q", a thread waiting in its receive(None) for good, and the list
    that gets the JournalClosedError which ends that wait."""
    broker.create_queue("q")
    consumer = broker.create_consumer("q")
    errors = []

    def wait():
        try:
            consumer.receive(None)
        except JournalClosedError as exc:
            errors.append(exc)
    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.05)
    return consumer, waiter, errors


def test_closing_a_consumer_wakes_its_waiting_receive():
    broker = Broker()
    consumer, waiter, errors = _waiting_receive(broker)
    consumer.close()
    waiter.join(5)
    assert errors and not waiter.is_alive()
    broker.close()


def test_closing_the_broker_wakes_a_waiting_receiver():
    broker = Broker()
    _consumer, waiter, errors = _waiting_receive(broker)
    broker.close()
    waiter.join(5)
    assert errors


# ----- errors ---------------------------------------------------------------------------------------------

def test_unknown_queue_is_a_clear_value_error(broker):
    with pytest.raises(UnknownQueueError, match="no such queue") as info:
        broker.create_consumer("missing")
    assert isinstance(info.value, ValueError) and isinstance(info.value, ConfigError)
    with pytest.raises(UnknownQueueError):
        broker.queue("missing")
    with pytest.raises(UnknownQueueError):
        broker.browse("missing")


def test_creating_a_queue_twice_is_refused(broker):
    broker.create_queue("q")
    with pytest.raises(QueueExistsError):
        broker.create_queue("q")


def test_a_filter_that_does_not_parse_names_column_and_token(broker):
    with pytest.raises(SelectorError) as info:
        broker.create_queue("q", filter="color = 'red' AND")
    assert info.value.column == 18 and info.value.token is None
    with pytest.raises(SelectorError) as info:
        broker.create_queue("q", filter="a = = 1")
    assert info.value.column == 5 and info.value.token == "="
    assert broker.queue_names() == []


def test_bad_arguments_raise_value_errors(broker):
    broker.create_queue("q")
    with pytest.raises(ConfigError):
        broker.create_queue("r", routing_type="broadcast")
    with pytest.raises(ValueError):
        broker.send("q", b"x", expiration=-1)
    with pytest.raises(ValueError):
        broker.send("q", b"x", scheduled_delivery_time=-5)
    with pytest.raises(ValueError):
        broker.send("q", b"x", expiration=0.0)
    with pytest.raises(ValueError):
        broker.send("q", b"x", scheduled_delivery_time=False)
    with pytest.raises(TypeError):
        broker.send("q", "not bytes")
    with pytest.raises(TypeError):
        broker.send("q", b"x", properties={"k": object()})
    consumer = broker.create_consumer("q")
    broker.send("q", b"x")
    message = consumer.receive(0)
    with pytest.raises(ValueError):
        consumer.rollback(message, delay_ms=-1)
    with pytest.raises(ValueError):
        consumer.receive(-1)
    consumer.ack(message)
    with pytest.raises(ConfigError):
        Broker(dialect="rabbitmq")
    with pytest.raises(ConfigError):
        Broker(max_redelivery_records=-2)


def test_bad_address_settings_are_refused_before_they_reach_the_broker(broker):
    with pytest.raises(ConfigError, match="redelivery_collision_avoidance_factor"):
        broker.address_settings.add("q", AddressSettings(redelivery_collision_avoidance_factor=1.5))
    with pytest.raises(ConfigError, match="redelivery_delay"):
        broker.address_settings.add("q", AddressSettings(redelivery_delay=-1))
    with pytest.raises(ConfigError):
        broker.address_settings.add("a.#.b", AddressSettings(redelivery_delay=1))
    with pytest.raises(TypeError):
        broker.address_settings = {"q": AddressSettings()}
    assert len(broker.address_settings) == 0


def assert_settling_refused(broker, consumer, message, reason: str) -> None:
    """Both ack and rollback of ``message`` through ``consumer`` raise MessageStateError saying
    ``reason``, and the queue is as it was."""
    before = broker.queue("q")
    for settle in (consumer.ack, consumer.rollback):
        with pytest.raises(MessageStateError, match=reason):
            settle(message)
    assert broker.queue("q") == before


def test_acking_twice_is_an_error_and_changes_nothing(broker):
    broker.create_queue("q")
    broker.send("q", b"x")
    broker.send("q", b"y")
    consumer = broker.create_consumer("q")
    message = consumer.receive(0)
    consumer.ack(message)
    assert_settling_refused(broker, consumer, message, "already acknowledged")


def test_acking_from_another_consumer_is_an_error_and_changes_nothing(broker):
    broker.create_queue("q")
    broker.send("q", b"x")
    mine, other = broker.create_consumer("q"), broker.create_consumer("q")
    message = mine.receive(0)
    assert_settling_refused(broker, other, message, "another consumer")
    mine.ack(message)
    assert broker.queue("q").message_count == 0


def test_a_closed_broker_refuses_work(tmp_path):
    broker = Broker(tmp_path / "b", store_options=SMALL)
    broker.create_queue("q")
    broker.close()
    broker.close()
    with pytest.raises(JournalClosedError):
        broker.send("q", b"x")
    with pytest.raises(JournalClosedError):
        broker.create_queue("r")


def test_delete_queue_removes_its_messages_from_the_store(durable_broker):
    durable_broker.create_queue("q")
    durable_broker.create_queue("keep")
    message_id = durable_broker.send("q", b"x")
    consumer = durable_broker.create_consumer("q")
    with pytest.raises(MessageStateError):
        durable_broker.delete_queue("q")
    consumer.close()
    assert durable_broker.delete_queue("q") == 1
    assert durable_broker.queue_names() == ["keep"]
    assert not durable_broker.store.has_message(message_id)
    assert durable_broker.send("q", b"nowhere") > message_id


def test_a_closed_brokers_directory_is_readable_by_message_store(tmp_path, clock):
    broker = Broker(tmp_path / "b", clock=clock, store_options=SMALL)
    broker.create_queue("q", filter="kind = 'a'")
    message_id = broker.send("q", b"x", properties={"kind": "a"})
    broker.close()
    store = MessageStore(tmp_path / "b", file_size=SMALL["file_size"])
    state = store.load()
    (queue,) = state.queues.values()
    assert (queue.name, queue.filter) == ("q", "kind = 'a'")
    assert state.messages[message_id].body == b"x"
    assert [r.message_id for r in state.references[queue.queue_id]] == [message_id]
    store.close()
