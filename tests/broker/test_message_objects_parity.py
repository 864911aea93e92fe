"""The broker's per-message objects, compiled (_broker_objects) and twin (_twin/broker_objects.py),
behave alike: the same states, fields, methods, snapshots and reprs; and the compiled fields the broker
reads per message are member descriptors (the attribute access Python specialises, as for slots)."""
from __future__ import annotations

import pickle
import types

import pytest

import journal_engine
from journal_engine._twin import broker_objects as twin

compiled_only = pytest.mark.skipif(journal_engine.IMPLEMENTATION != "cython", reason="needs the compiled core")


def implementations():
    found = [twin]
    if journal_engine.IMPLEMENTATION == "cython":
        from journal_engine import _broker_objects
        found.append(_broker_objects)
    return found


class _Queue:
    name = "orders"
    delivering = 1


def _behaviour(impl) -> list:
    """Everything a broker does with the objects, as plain values to compare."""
    seen = []
    data = impl.MessageData(7, "orders", b"body", {"colour": "red"}, True, 1234, "anycast")
    seen.append((data.message_id, data.public_id, data.address, data.body, data.properties, data.durable,
                 data.expiration, data.routing_type, data.durable_refs, repr(data)))
    view = data.properties_view()
    seen.append((dict(view), isinstance(view, types.MappingProxyType), data.properties_view() is view))
    seen.append((data.stored_properties(), data.headers()))
    data.public_id = 3                  # a dead-letter copy keeps its original's id
    seen.append(data.stored_properties())
    empty = impl.MessageData(8, "a", b"", None, False, 0, None)
    seen.append((dict(empty.properties_view()), empty.stored_properties()))

    queue = _Queue()
    ref = impl.Reference(data, queue)
    seen.append((ref.delivery_count, ref.state, ref.delivery, ref.failures, repr(ref)))
    ref.delivery_count += 1
    ref.state = impl.DELIVERING
    message = impl.Message(data, ref.delivery_count, queue.name, ref, "consumer")
    ref.delivery = message
    seen.append((message.message_id, message.address, message.body, dict(message.properties), message.durable,
                 message.expiration, message.routing_type, message.redelivered, message.queue, repr(message)))
    seen.append(impl.delivery_of(message) == (ref, "consumer"))
    data.set_property("redeliveryDelay", 500)     # after the delivery: the held message does not see it
    seen.append((dict(message.properties), dict(data.properties_view())))
    later = impl.Message(data, 2, queue.name, ref, "consumer")
    seen.append((dict(later.properties), later.redelivered))
    browsed = impl.Message(data, 0, queue.name)
    seen.append(impl.delivery_of(browsed))
    ref.record_failure(10, "rollback")
    ref.record_failure(20, "rollback")
    seen.append(ref.failures)
    ref.undo_transacted_ack()
    seen.append((ref.state, ref.delivery, queue.delivering, repr(ref)))
    seen.append((impl.READY, impl.SCHEDULED, impl.DELIVERING, impl.DONE, impl.ACKED_IN_TX))
    with pytest.raises(AttributeError):
        message.colour = "blue"         # no other attributes, as with slots
    seen.append(pickle.loads(pickle.dumps(impl.MessageData(1, "a", b"x", None, True, 0, None))).body)
    prioritized = impl.MessageData(2, "a", b"x", None, True, 0, None, 9)
    seen.append((message.priority, prioritized.priority, impl.Message(prioritized, 1, "q").priority,
                 pickle.loads(pickle.dumps(prioritized)).priority))
    # recovery: stored fields become MessageData (the public id out of its property), then READY references
    fields = [("orders", b"a", {}, True, 0, "anycast", 4),
              ("orders", b"b", {"_JE_MESSAGE_ID": 40, "k": 1}, False, 9, None, 7)]
    datas = impl.recovered_datas([11, 12], fields, 1)
    seen.append([(d.message_id, d.public_id, d.address, d.body, d.properties, d.durable, d.expiration,
                  d.routing_type, d.priority, d.durable_refs, d.stored_properties(), repr(d)) for d in datas])
    refs = impl.ready_references(datas, queue, [0, 3])
    seen.append([(r.data is d, r.queue is queue, r.delivery_count, r.state, r.delivery, r.failures, repr(r))
                 for r, d in zip(refs, datas)])
    return seen


@compiled_only
def test_compiled_objects_behave_as_their_twin():
    compiled_behaviour, twin_behaviour = (_behaviour(impl) for impl in reversed(implementations()))
    assert compiled_behaviour == twin_behaviour


def test_the_broker_uses_the_objects_of_the_running_implementation():
    from journal_engine.broker import message, queue
    expected = implementations()[-1]
    assert message.MessageData is expected.MessageData and message.Message is expected.Message
    assert queue.Reference is expected.Reference and queue.READY == expected.READY


@compiled_only
def test_compiled_fields_are_member_descriptors_as_slots_are():
    from journal_engine import _broker_objects
    member = type(twin.Reference.__dict__["state"])        # what __slots__ makes
    for cls, fields in ((_broker_objects.Reference, ("data", "queue", "delivery_count", "state", "delivery",
                                                     "failures")),
                        (_broker_objects.MessageData, ("message_id", "address", "properties", "durable",
                                                       "expiration", "routing_type", "durable_refs", "public_id"))):
        for field in fields:
            assert type(cls.__dict__[field]) is member, (cls.__name__, field)
    ref = _broker_objects.Reference("data", "queue", 5)
    ref.state, ref.delivery = _broker_objects.DONE, "message"
    assert (ref.data, ref.queue, ref.delivery_count, ref.state, ref.delivery, ref.failures) == \
        ("data", "queue", 5, _broker_objects.DONE, "message", None)


def _transitions(impl) -> list:
    """A Reference's state changes, through its own methods (leave_consumer keeps its queue's count)."""
    queue = _Queue()
    queue.delivering, queue.scheduled = 0, 0
    ref = impl.Reference(impl.MessageData(1, "orders", b"", None, True, 0, None), queue)
    seen = []

    def note():
        seen.append((ref.state, ref.delivery_count, ref.delivery, queue.delivering, queue.scheduled))
    ref.dispatch(); note()
    ref.undo_dispatch(); note()
    ref.dispatch(); ref.delivery = "message"; ref.acknowledge_in_transaction(); note()
    ref.back_to_delivering(); note()
    ref.leave_consumer(); ref.back_to_ready(); note()
    ref.schedule(); note()
    ref.fall_due(); note()
    ref.dispatch(); ref.delivery = "message"; ref.leave_queue(); note()
    return seen


def test_a_reference_moves_through_its_states_by_its_methods():
    for impl in implementations():
        assert _transitions(impl) == [
            (impl.DELIVERING, 1, None, 0, 0), (impl.READY, 0, None, 0, 0), (impl.ACKED_IN_TX, 1, "message", 0, 0),
            (impl.DELIVERING, 1, "message", 0, 0), (impl.READY, 1, None, -1, 0), (impl.SCHEDULED, 1, None, -1, 0),
            (impl.READY, 1, None, -1, 0), (impl.DONE, 2, None, -1, 0)]


def _level_table(level_of):
    return bytes(level_of[priority] if priority < len(level_of) else 255 for priority in range(256))


@pytest.mark.parametrize("impl", implementations(), ids=lambda impl: impl.__name__.rsplit(".", 1)[-1])
def test_split_by_level_keeps_each_levels_rows_in_order(impl):
    """A recovered queue's columns split by level in one pass: each level's ids and delivery counts in
    row order; a priority no level takes (255) is left out; the rows must match the counts given."""
    from array import array
    ids = array("Q", range(100, 130))
    counts = array("I", range(30))
    priorities = array("B", [(i * 7) % 12 for i in range(30)])      # 10 and 11: past the ten levels
    level_of = tuple(priority // 5 for priority in range(10))        # Qpid's two levels: 0-4, 5-9
    rows = {0: sum(p < 5 for p in priorities), 1: sum(5 <= p < 10 for p in priorities)}
    out = impl.split_by_level(ids, counts, priorities, _level_table(level_of), rows)
    assert set(out) == {0, 1}
    for level in (0, 1):
        picked = [i for i in range(30) if priorities[i] < 10 and priorities[i] // 5 == level]
        assert (out[level][0].typecode, out[level][1].typecode) == ("Q", "I")
        assert list(out[level][0]) == [ids[i] for i in picked]
        assert list(out[level][1]) == [counts[i] for i in picked]
    with pytest.raises(ValueError, match="level 0 has"):
        impl.split_by_level(ids, counts, priorities, _level_table(level_of), {0: rows[0] - 1, 1: rows[1]})
    with pytest.raises(ValueError, match="table of 10 levels"):
        impl.split_by_level(ids, counts, priorities, bytes(10), rows)
