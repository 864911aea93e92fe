"""A recovered queue's ready references are made a chunk at a time (ReadyQueue): every deque operation
the broker uses gives what a deque holding all of them would, compiled and twin; and a broker restart
makes one chunk for the first receive, whatever a queue holds, while sends, rollbacks, scheduled
redeliveries, browsing, redrive and deletion keep their order."""
from __future__ import annotations

import threading
import tracemalloc
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import journal_engine
from journal_engine import Broker
from journal_engine.broker.artemis.address_settings import AddressSettings
from journal_engine.broker.clock import ManualClock
from journal_engine import _impl
from journal_engine import record_format as fmt
from journal_engine._twin import broker_objects as twin
from journal_engine.broker.post_office import PostOffice
from journal_engine.broker.queue import QueueState
from journal_engine.limits import READY_CHUNK
from journal_engine.message_store.message_store import RecoveredMessages

SMALL = {"file_size": 64 * 1024, "min_files": 2}
NOW = 1_700_000_000_000


def implementations():
    found = [twin.ReadyQueue]
    if journal_engine.IMPLEMENTATION == "cython":
        from journal_engine import _broker_objects
        found.append(_broker_objects.ReadyQueue)
    return found


class _Maker:
    """make(start, stop) of a queue whose rows are the ints 0 .. rows-1; remembers what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, start: int, stop: int) -> list[int]:
        self.calls.append((start, stop))
        return list(range(start, stop))


_OPERATION = st.one_of(
    st.tuples(st.just("popleft")),
    st.tuples(st.just("append"), st.integers(1000, 2000)),
    st.tuples(st.just("appendleft"), st.integers(-2000, -1000)),
    st.tuples(st.just("extendleft"), st.lists(st.integers(-3000, -2001), max_size=3)),
    st.tuples(st.just("getitem"), st.sampled_from([0, -1, 1, 5, -3])),
    st.tuples(st.just("insert"), st.integers(0, 10), st.integers(5000, 6000)),
    st.tuples(st.just("len")),
    st.tuples(st.just("bool")),
    st.tuples(st.just("iterate")),
    st.tuples(st.just("clear")),
)


def _apply(queue, operation):
    name, *args = operation
    try:
        if name == "popleft":
            return queue.popleft()
        if name == "getitem":
            return queue[args[0]]
        if name == "len":
            return len(queue)
        if name == "bool":
            return bool(queue)
        if name == "iterate":
            return list(queue)
        if name == "insert":
            return queue.insert(*args)
        return getattr(queue, name)(*args)
    except IndexError:
        return "IndexError"


@pytest.mark.parametrize("ready_queue", implementations(), ids=lambda cls: cls.__module__)
@settings(max_examples=300, deadline=None)
@given(rows=st.integers(0, 12), chunk=st.integers(1, 5), operations=st.lists(_OPERATION, max_size=30))
def test_a_ready_queue_behaves_as_a_deque_of_every_reference(ready_queue, rows, chunk, operations):
    maker = _Maker()
    queue = ready_queue(maker, rows, chunk)
    model = deque(range(rows))
    cleared = False                                 # clear() drops the rows not made, unmade
    for operation in operations:
        assert _apply(queue, operation) == _apply(model, operation), operation
        cleared = cleared or operation[0] == "clear"
        assert queue.unmade == (0 if cleared else rows - sum(stop - start for start, stop in maker.calls))
    assert list(queue) == list(model)
    made = [row for start, stop in maker.calls for row in range(start, stop)]
    assert made == list(range(len(made)))          # each row made once, in order


@pytest.mark.parametrize("ready_queue", implementations(), ids=lambda cls: cls.__module__)
def test_a_ready_queue_makes_rows_only_as_its_head_reaches_them(ready_queue):
    maker = _Maker()
    queue = ready_queue(maker, 10, 4)
    assert (len(queue), bool(queue), queue.unmade, maker.calls) == (10, True, 10, [])
    queue.append("sent")                        # comes after every recovered row, and makes none
    assert (queue.unmade, maker.calls, queue[-1]) == (10, [], "sent")
    assert [queue.popleft() for _ in range(5)] == [0, 1, 2, 3, 4]
    assert maker.calls == [(0, 4), (4, 8)]
    queue.appendleft(4)                         # a rollback of the last one taken
    assert (queue[0], queue.unmade) == (4, 2)
    assert list(queue) == [4, 5, 6, 7, 8, 9, "sent"] and queue.unmade == 0


@pytest.mark.parametrize("ready_queue", implementations(), ids=lambda cls: cls.__module__)
def test_a_ready_queue_refuses_a_maker_that_gives_the_wrong_count_and_bad_sizes(ready_queue):
    queue = ready_queue(lambda start, stop: [start], 5, 3)
    with pytest.raises(RuntimeError, match=r"make\(0, 3\) gave 1 references"):
        queue.popleft()
    with pytest.raises(ValueError, match="rows -1"):
        ready_queue(_Maker(), -1)
    with pytest.raises(ValueError, match="chunk 0"):
        ready_queue(_Maker(), 3, 0)
    assert not ready_queue(_Maker(), 0) and len(ready_queue(_Maker(), 0)) == 0


# ----- through the broker ---------------------------------------------------------------------------------

def _recovered(directory, count: int, **options) -> Broker:
    broker = Broker(directory, store_options=SMALL, **options)
    broker.create_queue("q")
    for index in range(count):
        broker.send("q", b"m%d" % index, properties={"i": index} if index % 3 == 0 else None)
    broker.close()
    return Broker(directory, store_options=SMALL, **options)


def _bodies(broker, name="q"):
    return [message.body for message in broker.browse(name)]


def test_the_first_receive_after_a_restart_makes_one_chunk_of_a_large_queue(tmp_path):
    count = 8 * READY_CHUNK + 17
    broker = _recovered(tmp_path / "b", count)
    try:
        ready = broker._post_office.queues["q"].ready
        assert ready.unmade == count
        consumer = broker.create_consumer("q")
        tracemalloc.start()
        first = consumer.receive(0)
        allocated = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert first.body == b"m0" and dict(first.properties) == {"i": 0}
        assert ready.unmade == count - READY_CHUNK
        # the objects of one chunk (about 420 B a message), not of the queue's 8 chunks
        assert allocated < 600 * READY_CHUNK, allocated
        received = [first] + list(iter(lambda: consumer.receive(0), None))
        assert [message.body for message in received] == [b"m%d" % index for index in range(count)]
        assert [dict(message.properties) for message in received] == [
            {"i": index} if index % 3 == 0 else {} for index in range(count)]
        assert ready.unmade == 0 and broker.queue("q").message_count == count
    finally:
        broker.close()


def test_sends_rollbacks_and_due_redeliveries_keep_their_places_around_rows_not_made(tmp_path):
    count = READY_CHUNK + 5
    broker = _recovered(tmp_path / "b", count, clock=ManualClock(NOW))
    try:
        broker.address_settings.add("q", AddressSettings(redelivery_delay=1000))
        broker.send("q", b"new 1")                  # after every recovered message
        consumer = broker.create_consumer("q")
        first, second = consumer.receive(0), consumer.receive(0)
        broker.send("q", b"new 2")
        consumer.rollback(first)                    # back at the head once their redelivery delay is over
        consumer.rollback(second)
        ready = broker._post_office.queues["q"].ready
        assert ready.unmade == count - READY_CHUNK
        broker.clock.advance(1000)
        received = [message.body for message in iter(lambda: consumer.receive(0), None)]
        assert received == [b"m0", b"m1"] + [b"m%d" % index for index in range(2, count)] + [b"new 1", b"new 2"]
    finally:
        broker.close()


def test_a_rollback_past_the_made_head_keeps_message_order(tmp_path):
    count = READY_CHUNK + 5
    broker = _recovered(tmp_path / "b", count)
    try:
        consumer = broker.create_consumer("q")
        taken = [consumer.receive(0) for _ in range(3)]
        consumer.rollback(taken[1])                 # goes back before m2, still held, and after m0
        consumer.rollback(taken[0])
        consumer.rollback(taken[2])
        received = [message.body for message in iter(lambda: consumer.receive(0), None)]
        assert received == [b"m%d" % index for index in range(count)]
    finally:
        broker.close()


def test_browse_and_delete_see_every_recovered_message(tmp_path):
    count = 2 * READY_CHUNK + 3
    broker = _recovered(tmp_path / "b", count)
    try:
        broker.send("q", b"new")
        assert _bodies(broker) == [b"m%d" % index for index in range(count)] + [b"new"]
        broker.create_queue("other")
        assert broker.delete_queue("q") == count + 1
    finally:
        broker.close()
    broker = Broker(tmp_path / "b", store_options=SMALL)
    try:
        assert broker.queue_names() == ["other"]
    finally:
        broker.close()


def test_a_recovered_queue_closed_unused_leaves_its_messages_in_the_store(tmp_path):
    count = READY_CHUNK + 1
    broker = _recovered(tmp_path / "b", count)
    consumer = broker.create_consumer("q")
    consumer.ack(consumer.receive(0))
    broker.close()
    broker = Broker(tmp_path / "b", store_options=SMALL)
    try:
        assert broker.queue("q").message_count == count - 1
        assert _bodies(broker) == [b"m%d" % index for index in range(1, count)]
    finally:
        broker.close()


def test_a_redrive_from_a_recovered_dead_letter_queue_moves_every_dead_letter(tmp_path):
    count = READY_CHUNK + 2
    broker = Broker(tmp_path / "b", store_options=SMALL)
    broker.address_settings.add("orders", AddressSettings(max_delivery_attempts=1, dead_letter_address="DLA"))
    broker.create_queue("orders")
    broker.create_queue("DLQ", address="DLA")
    for index in range(count):
        broker.send("orders", b"d%d" % index)
    consumer = broker.create_consumer("orders")
    for _ in range(count):
        consumer.rollback(consumer.receive(0))
    broker.close()
    broker = Broker(tmp_path / "b", store_options=SMALL)
    try:
        assert broker._post_office.queues["DLQ"].ready.unmade == count
        result = broker.redrive("DLQ")
        assert (len(result.moved), result.refused) == (count, [])
        assert _bodies(broker, "orders") == [b"d%d" % index for index in range(count)]
        assert broker.queue("DLQ").message_count == 0
    finally:
        broker.close()


def test_a_queue_recovered_out_of_message_order_is_made_in_message_order_a_chunk_at_a_time():
    """References recovered with falling ids (the journal's order) are delivered in message order,
    sorted when the first chunk is made, not at load."""
    ids = list(range(3 * 5, 0, -1))         # 15 .. 1
    records = {message_id: _impl.RecordInfo(message_id, fmt.RecordType.ADD_MESSAGE,
                                            fmt.encode_message("q", b"m%d" % message_id),
                                            [(fmt.RecordType.ADD_REF, fmt.encode_queue_id(1))]
                                            + [(fmt.RecordType.UPDATE_DELIVERY_COUNT, fmt.encode_delivery_count(1, 2))]
                                            * (message_id % 2))
               for message_id in ids}
    recovery = _impl.recover_messages(records, [1], 0)
    columns = recovery.references[1]
    assert not columns.ascending and list(columns.message_ids) == ids
    queue = QueueState("q", 1, "q", "anycast", None, True, threading.Lock())
    queue.ready = ready = _impl.ReadyQueue(PostOffice._recovered_references(
        queue, columns.message_ids, columns.delivery_counts, columns.ascending,
        RecoveredMessages(recovery.bodies, None)), len(columns), 4)
    first = ready.popleft()
    assert (first.data.message_id, first.data.body, first.delivery_count, ready.unmade) == (1, b"m1", 2, 11)
    rest = [(ref.data.message_id, ref.delivery_count) for ref in ready]
    assert rest == [(message_id, 2 if message_id % 2 else 0) for message_id in range(2, 16)]
