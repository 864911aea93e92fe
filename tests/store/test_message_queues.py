"""The message store's MessageQueues (a C table for one-queue messages, tuples beside it) behaves as
a dict of message id -> tuple of queue ids, whatever the order of its calls."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journal_engine import _impl
from journal_engine.limits import ONE_QUEUE_ID_MAX
from journal_engine.message_store.message_queues import MessageQueues

MESSAGE_IDS = st.sampled_from([0, 1, 2, 3, 1 << 40, (1 << 64) - 1])
QUEUE_IDS = st.sampled_from([0, 1, 2, ONE_QUEUE_ID_MAX, ONE_QUEUE_ID_MAX + 1, (1 << 64) - 1])
CALLS = st.lists(st.tuples(st.sampled_from(["add_message", "add_message_on", "add", "remove", "delete"]),
                           MESSAGE_IDS, st.lists(QUEUE_IDS, max_size=3, unique=True)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(CALLS)
def test_message_queues_behave_like_a_dict_of_tuples(calls):
    table, model = MessageQueues(), {}
    for call, message_id, queue_ids in calls:
        if call == "add_message" and message_id not in model:
            table.add_message(message_id, queue_ids)
            model[message_id] = tuple(queue_ids)
        elif call == "add_message_on" and message_id not in model and queue_ids:
            table.add_message_on(message_id, queue_ids[0])
            model[message_id] = (queue_ids[0],)
        elif call == "add" and message_id in model and queue_ids and queue_ids[0] not in model[message_id]:
            table.add(message_id, queue_ids[0])
            model[message_id] += (queue_ids[0],)
        elif call == "remove" and queue_ids:
            held = model.get(message_id)
            left = None if held is None else tuple(q for q in held if q != queue_ids[0])
            expected = 0 if held is None else len(left) if queue_ids[0] in held else len(held)
            assert table.remove(message_id, queue_ids[0]) == expected
            if held is not None:
                model[message_id] = left
        elif call == "delete" and message_id in model:
            table.delete(message_id)
            del model[message_id]
        assert len(table) == len(model)
        for probe in (0, 1, 2, 3, 1 << 40, (1 << 64) - 1):
            assert (probe in table) == (probe in model)
            assert table.queues(probe) == model.get(probe)
            for queue_id in (0, 1, 2, ONE_QUEUE_ID_MAX + 1):
                assert table.holds(probe, queue_id) == (queue_id in model.get(probe, ()))
    assert dict(table.items()) == model


@pytest.mark.parametrize("probe", [-1, 1 << 64, "7", 1.5, None])
def test_what_is_no_message_id_is_not_held(probe):
    table = MessageQueues()
    table.add_message_on(7, 1)
    assert probe not in table and table.queues(probe) is None and not table.holds(probe, 1)


def test_a_recovery_holds_one_queue_messages_in_its_c_table_and_a_huge_queue_id_beside_it():
    # what recover_messages hands over: no Python object per one-queue message, both implementations
    from journal_engine import record_format as fmt
    from journal_engine.record_format import RecordType
    records = {
        1: _impl.RecordInfo(1, RecordType.ADD_MESSAGE, fmt.encode_message("a", b"x"),
                            [(RecordType.ADD_REF, fmt.encode_queue_id(5))]),
        2: _impl.RecordInfo(2, RecordType.ADD_MESSAGE, fmt.encode_message("a", b"y"),
                            [(RecordType.ADD_REF, fmt.encode_queue_id(ONE_QUEUE_ID_MAX + 1))]),
    }
    out = _impl.recover_messages(records, [5], 0)
    assert isinstance(out.one_queue, _impl.LiveMap)
    assert sorted(out.one_queue.items()) == [(1, 5)] and out.several_queues == {2: (ONE_QUEUE_ID_MAX + 1,)}
    table = MessageQueues(out.one_queue, out.several_queues)
    assert table.queues(1) == (5,) and table.queues(2) == (ONE_QUEUE_ID_MAX + 1,)
