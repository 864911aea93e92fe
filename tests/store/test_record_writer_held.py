"""A recovery's references go to the record writer as one batch per queue (add_references). The
compiled writer holds a batch of rising ids where it lies and moves each reference into its table
when first looked up; these tests hold both writers to the same answers on batches large enough
that the moves grow the table in the middle of a call, and check a restarted broker holds its
references that way."""
from __future__ import annotations

from array import array

import pytest

import journal_engine
from journal_engine import Broker, DuplicateRecordError, Journal, UnknownRecordError
from journal_engine._twin import record_writer as twin

COUNT = 5000
QUEUES = (3, 7)


def writers():
    found = [twin.RecordWriter]
    if journal_engine.IMPLEMENTATION == "cython":
        from journal_engine._record_writer import RecordWriter
        found.append(RecordWriter)
    return found


@pytest.fixture
def journal(tmp_path):
    with Journal(tmp_path / "j", sync="none", file_size=1 << 20, replaceable_types={34: 8, 36: 8}) as journal:
        journal.load()
        for message_id in range(1, COUNT + 1):
            journal.add(message_id, 45, b"m")
        yield journal


def _recovered(writer_class, journal):
    writer = writer_class(journal, -1)
    for queue_id in QUEUES:
        ids = array("Q", range(1, COUNT + 1))
        writer.add_references(queue_id, ids, array("I", (message_id % 5 for message_id in ids)))
    return writer


@pytest.mark.parametrize("writer_class", writers(), ids=lambda cls: cls.__module__)
def test_held_references_answer_as_tracked_ones_and_move_into_the_table_once(writer_class, journal):
    writer = _recovered(writer_class, journal)
    held = writer.held_references
    assert held == (2 * COUNT if writer_class is not twin.RecordWriter else 0)
    assert len(writer) == 2 * COUNT
    assert writer.persisted_count(3, 17) == 2 and writer.has_reference(7, COUNT)
    assert not writer.has_reference(3, COUNT + 1) and not writer.has_reference(4, 1)
    with pytest.raises(DuplicateRecordError):
        writer.add_reference(3, 18)
    with pytest.raises(DuplicateRecordError):       # a second batch on a queue that holds one
        writer.add_references(7, array("Q", [19, 20]), array("I", [0, 0]))
    assert writer.remove_reference(3, 19) and not writer.remove_reference(3, 19)
    assert len(writer) == 2 * COUNT - 1
    if held:
        assert writer.held_references == held - 5       # 3/17, 7/COUNT, 3/18, 7/19 and 3/19 moved
    # one batch over every reference of a queue: each moved into the table in the middle of the
    # call, which grows the table many times; every count lands on its own reference
    ids = [message_id for message_id in range(1, COUNT + 1) if message_id != 19]
    written = writer.update_delivery_counts([3] * len(ids), ids, [message_id % 5 + 1 for message_id in ids])
    assert written == len(ids)
    assert [writer.persisted_count(3, message_id) for message_id in ids] == [message_id % 5 + 1 for message_id in ids]
    assert writer.update_scheduled_delivery_times([7] * COUNT, range(1, COUNT + 1), [9] * COUNT, [1] * COUNT) == COUNT
    assert writer.held_references == 0 and len(writer) == 2 * COUNT - 1
    for message_id in range(1, COUNT + 1):
        writer.acknowledge_reference(7, message_id, False)
    assert len(writer) == COUNT - 1


@pytest.mark.parametrize("writer_class", writers(), ids=lambda cls: cls.__module__)
def test_a_batch_stops_at_its_first_bad_reference_and_keeps_the_ones_before(writer_class, journal):
    writer = writer_class(journal, -1)
    with pytest.raises(UnknownRecordError):
        writer.add_references(1, array("Q", [1, 2, COUNT + 5, 6]), array("I", [4, 0, 0, 0]))
    assert [writer.has_reference(1, message_id) for message_id in (1, 2, COUNT + 5, 6)] == [True, True, False, False]
    assert writer.persisted_count(1, 1) == 4
    writer.add_reference(2, 10)
    with pytest.raises(DuplicateRecordError):      # already in the table: a rising batch checks it too
        writer.add_references(2, array("Q", [8, 9, 10, 11]), array("I", [0, 0, 0, 0]))
    assert [writer.has_reference(2, message_id) for message_id in (8, 9, 10, 11)] == [True, True, True, False]
    writer.clear()
    assert len(writer) == 0 and not writer.has_reference(1, 1) and writer.held_references == 0


def test_a_restarted_broker_holds_its_references_until_each_is_used(tmp_path):
    holds = journal_engine.IMPLEMENTATION == "cython"       # the twin's writer keeps a dict entry each
    broker = Broker(tmp_path / "b")
    for name in ("a", "b"):
        broker.create_queue(name)
    for index in range(2000):
        broker.send("a" if index % 2 else "b", b"%d" % index)
    broker.close()
    broker = Broker(tmp_path / "b")
    try:
        writer = broker._store._writer
        assert writer.held_references == (2000 if holds else 0) and len(writer) == 2000
        consumer = broker.create_consumer("a")
        for _ in range(10):
            consumer.ack(consumer.receive(0))
        assert writer.held_references == (1990 if holds else 0) and len(writer) == 1990
    finally:
        broker.close()
    broker = Broker(tmp_path / "b")
    try:
        assert (broker.queue("a").message_count, broker.queue("b").message_count) == (990, 1000)
    finally:
        broker.close()
