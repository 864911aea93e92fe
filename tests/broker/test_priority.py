"""Message priority (Artemis's rule): a queue delivers its highest priority first and FIFO within a
priority, for new sends, references coming back from a rollback, scheduled ones falling due, and after
a restart; in memory and on each store."""
from __future__ import annotations

import pytest
from broker_queues import drain

from journal_engine import Broker, ConfigError, ManualClock
from journal_engine.broker.priority import PriorityLevels, qpid_levels

NOW = 1_700_000_000_000
SMALL = {"file_size": 1 << 20}
STORES = ["memory", "journal", "lmdb"]


def open_broker(tmp_path, store: str, now_ms: int = NOW) -> Broker:
    if store == "memory":
        return Broker(clock=ManualClock(now_ms))
    if store == "lmdb":
        pytest.importorskip("lmdb")
        return Broker(tmp_path / "b", store="lmdb", clock=ManualClock(now_ms))
    return Broker(tmp_path / "b", clock=ManualClock(now_ms), store_options=SMALL)


@pytest.mark.parametrize("store", STORES)
def test_highest_priority_first_fifo_within_one(tmp_path, store):
    broker = open_broker(tmp_path, store)
    broker.create_queue("q")
    for body, priority in [(b"a4", 4), (b"b1", 1), (b"c9", 9), (b"d4", 4), (b"e9", 9), (b"f0", 0), (b"g1", 1)]:
        broker.send("q", body, priority=priority)
    assert [m.body for m in broker.browse("q")] == [b"c9", b"e9", b"a4", b"d4", b"b1", b"g1", b"f0"]
    assert drain(broker) == [b"c9", b"e9", b"a4", b"d4", b"b1", b"g1", b"f0"]
    broker.close()


@pytest.mark.parametrize("store", STORES)
def test_the_message_carries_its_priority(tmp_path, store):
    broker = open_broker(tmp_path, store)
    broker.create_queue("q")
    broker.send("q", b"x", priority=7)
    broker.send("q", b"y")
    consumer = broker.create_consumer("q")
    assert [(m.body, m.priority) for m in (consumer.receive(0), consumer.receive(0))] == [(b"x", 7), (b"y", 4)]
    broker.close()


@pytest.mark.parametrize("priority", [-1, 10, True, 4.0, "4", None])
def test_a_priority_outside_0_to_9_is_a_config_error_naming_it(priority):
    broker = Broker()
    broker.create_queue("q")
    with pytest.raises(ConfigError, match="priority"):
        broker.send("q", b"x", priority=priority)
    with pytest.raises(ConfigError, match="priority"):
        broker.create_session().send("q", b"x", priority=priority)
    assert broker.queue("q").message_count == 0
    broker.close()


def test_a_queue_of_one_priority_keeps_its_plain_deque():
    broker = Broker()
    broker.create_queue("q")
    for index in range(3):
        broker.send("q", b"%d" % index)
    queue = broker._post_office.queues["q"]
    assert type(queue.ready) is not PriorityLevels
    broker.send("q", b"high", priority=5)
    assert type(queue.ready) is PriorityLevels
    assert drain(broker) == [b"high", b"0", b"1", b"2"]
    broker.close()


@pytest.mark.parametrize("store", STORES)
def test_a_rolled_back_reference_goes_to_the_head_of_its_own_level(tmp_path, store):
    broker = open_broker(tmp_path, store)
    broker.create_queue("q")
    for body, priority in [(b"low1", 1), (b"low2", 1), (b"high", 8)]:
        broker.send("q", body, priority=priority)
    consumer = broker.create_consumer("q")
    high, low1 = consumer.receive(0), consumer.receive(0)
    assert (high.body, low1.body) == (b"high", b"low1")
    consumer.rollback(low1)
    broker.send("q", b"mid", priority=4)
    consumer.rollback(high)
    got = [consumer.receive(0) for _ in range(4)]
    assert [(m.body, m.redelivered) for m in got] == [(b"high", True), (b"mid", False), (b"low1", True),
                                                       (b"low2", False)]
    broker.close()


@pytest.mark.parametrize("store", STORES)
def test_scheduled_messages_falling_due_take_their_priority_place(tmp_path, store):
    broker = open_broker(tmp_path, store)
    broker.create_queue("q")
    broker.send("q", b"plain")
    broker.send("q", b"low-later", priority=0, scheduled_delivery_time=NOW + 100)
    broker.send("q", b"high-later", priority=9, scheduled_delivery_time=NOW + 100)
    broker.send("q", b"low", priority=0)
    broker.clock.advance(100)
    assert drain(broker) == [b"high-later", b"plain", b"low-later", b"low"]
    broker.close()


@pytest.mark.parametrize("store", ["journal", "lmdb"])
def test_the_order_survives_a_restart(tmp_path, store):
    broker = open_broker(tmp_path, store)
    broker.create_queue("q")
    broker.create_queue("plain")
    sent = [(b"a4", 4), (b"b2", 2), (b"c9", 9), (b"d4", 4), (b"e2", 2), (b"f9", 9)]
    for body, priority in sent:
        broker.send("q", body, priority=priority)
    for index in range(3):
        broker.send("plain", b"p%d" % index)
    consumer = broker.create_consumer("q")
    consumer.rollback(consumer.receive(0))       # c9 back at the head of level 9 (count 1)
    broker.close()

    broker = open_broker(tmp_path, store)
    assert type(broker._post_office.queues["plain"].ready) is not PriorityLevels
    broker.send("q", b"g9", priority=9)
    broker.send("q", b"h4")
    consumer = broker.create_consumer("q")
    got = [consumer.receive(0) for _ in range(8)]
    assert [(m.body, m.priority) for m in got] == [(b"c9", 9), (b"f9", 9), (b"g9", 9), (b"a4", 4), (b"d4", 4),
                                                    (b"h4", 4), (b"b2", 2), (b"e2", 2)]
    assert got[0].redelivered
    assert drain(broker, "plain") == [b"p0", b"p1", b"p2"]
    broker.close()


def test_many_recovered_messages_of_mixed_priorities_are_made_a_chunk_at_a_time(tmp_path):
    broker = open_broker(tmp_path, "journal")
    broker.create_queue("q")
    for index in range(3000):
        broker.send("q", b"%d" % index, priority=index % 3 * 3)     # priorities 0, 3, 6
    broker.close()
    broker = open_broker(tmp_path, "journal")
    ready = broker._post_office.queues["q"].ready
    assert type(ready) is PriorityLevels
    assert sum(level.unmade for level in ready.levels if hasattr(level, "unmade")) == 3000
    consumer = broker.create_consumer("q")
    first = [consumer.receive(0) for _ in range(3)]
    assert [(m.body, m.priority) for m in first] == [(b"2", 6), (b"5", 6), (b"8", 6)]
    assert sum(level.unmade for level in ready.levels if hasattr(level, "unmade")) > 1000
    broker.close()


def test_a_transacted_send_keeps_its_priority(tmp_path):
    broker = open_broker(tmp_path, "journal")
    broker.create_queue("q")
    session = broker.create_session(transacted=True)
    session.send("q", b"low", priority=1)
    session.send("q", b"high", priority=6)
    session.commit()
    broker.close()
    broker = open_broker(tmp_path, "journal")
    assert drain(broker) == [b"high", b"low"]
    broker.close()


def test_qpid_levels_map_as_broker_j_maps_them():
    assert qpid_levels(10) == tuple(range(10))
    assert qpid_levels(2) == (0, 0, 0, 0, 0, 1, 1, 1, 1, 1)
    assert qpid_levels(3) == (0, 0, 0, 0, 1, 2, 2, 2, 2, 2)
    assert qpid_levels(1) == (0,) * 10
