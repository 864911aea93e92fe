"""A queue's auto-delete rule kept with its binding (QUEUE_BINDING_RECORD, 21), as Artemis's
PersistentQueueBindingEncoding keeps autoCreated, autoDelete, autoDeleteDelay and autoDeleteMessageCount:
in version 2's property map under the store's own names, so bindings written before read as before and
the compiled column decoder reads the new ones unchanged."""
from __future__ import annotations

from array import array

import pytest

from journal_engine import MessageStore, record_format as fmt
from journal_engine._twin import message_columns as twin
from journal_engine.errors import CorruptRecordError
from journal_engine.record_format import RecordKind, RecordType

# bindings as the store wrote them before the rule was kept (version 1; version 2 with one argument)
OLD_PLAIN = bytes.fromhex("010100000100000071010000006100000000")
OLD_WITH_ARGUMENT = bytes.fromhex("020100000100000071010000006100000000010000001d00782d717069642d6d6178696d756d2d"
                                  "64656c69766572792d636f756e74020300000000000000")


def test_bindings_written_before_read_as_before_and_are_written_the_same():
    plain = fmt.decode_queue(1, OLD_PLAIN)
    assert (plain.name, plain.address, plain.arguments, plain.auto_created, plain.auto_delete) == (
        "q", "a", None, False, None)
    argued = fmt.decode_queue(1, OLD_WITH_ARGUMENT)
    assert (argued.arguments, argued.auto_created, argued.auto_delete) == (
        {"x-qpid-maximum-delivery-count": 3}, False, None)
    assert fmt.encode_queue("q", "a") == OLD_PLAIN
    assert fmt.encode_queue("q", "a", arguments={"x-qpid-maximum-delivery-count": 3}) == OLD_WITH_ARGUMENT


@pytest.mark.parametrize("auto_created, auto_delete, arguments", [
    (True, (0, 0), None), (False, (2 ** 63 - 1, -1), None), (True, None, None), (True, (5, 7), {"k": "v"}),
])
def test_the_rule_round_trips_apart_from_the_arguments(auto_created, auto_delete, arguments):
    body = fmt.encode_queue("DLQ.orders", "DLA", routing_type="multicast", filter="x = 1", arguments=arguments,
                            auto_created=auto_created, auto_delete=auto_delete)
    assert body[0] == fmt.QUEUE_WITH_ARGUMENTS_FORMAT_VERSION
    stored = fmt.decode_queue(9, body)
    assert (stored.arguments, stored.auto_created, stored.auto_delete) == (arguments, auto_created, auto_delete)


def test_an_argument_named_as_the_rule_is_refused():
    with pytest.raises(ValueError, match=fmt.QUEUE_AUTO_CREATED_ARGUMENT):
        fmt.encode_queue("q", "a", arguments={fmt.QUEUE_AUTO_CREATED_ARGUMENT: True})


@pytest.mark.parametrize("entries", [
    {fmt.QUEUE_AUTO_CREATED_ARGUMENT: 1},
    {fmt.QUEUE_AUTO_DELETE_DELAY_ARGUMENT: 5},                                        # the count missing
    {fmt.QUEUE_AUTO_DELETE_DELAY_ARGUMENT: "5", fmt.QUEUE_AUTO_DELETE_MESSAGE_COUNT_ARGUMENT: 0},
    {fmt.QUEUE_AUTO_DELETE_DELAY_ARGUMENT: 5, fmt.QUEUE_AUTO_DELETE_MESSAGE_COUNT_ARGUMENT: -2},
])
def test_a_damaged_rule_is_a_corrupt_record_naming_the_queue(entries):
    head = fmt.encode_queue("q", "a")[1:]
    forged = bytearray([fmt.QUEUE_WITH_ARGUMENTS_FORMAT_VERSION]) + head
    fmt._put_properties(forged, entries)
    with pytest.raises(CorruptRecordError, match="auto-delete"):
        fmt.decode_queue(4, bytes(forged))


@pytest.mark.twin
def test_the_column_decoders_read_a_binding_with_its_rule():
    compiled = pytest.importorskip("journal_engine._message_columns", reason="the compiled core is not built")
    body = fmt.encode_queue("DLQ.orders", "DLA", auto_created=True, auto_delete=(0, 0))
    columns = (memoryview(bytes([RecordKind.ADD])), memoryview(bytes([RecordType.QUEUE_BINDING_RECORD])),
               memoryview(array("q", [0, len(body)])), body)
    for module in (compiled, twin):
        out = module.decode_message_columns(*columns, 0, 1)
        assert out.rejected == [] and out.queue_name_data == b"DLQ.orders" and out.address_data == b"DLA"


@pytest.mark.parametrize("backend", ["journal", "lmdb"])
def test_the_store_keeps_the_rule_across_a_reopen_and_a_change_of_arguments(tmp_path, backend):
    with MessageStore(tmp_path, backend=backend) as store:
        store.load()
        store.store_queue(1, "DLQ.orders", "DLA", routing_type="multicast", auto_created=True, auto_delete=(0, -1))
        store.store_queue(2, "orders", "orders")
        store.update_queue_arguments(1, {"x-qpid-maximum-delivery-count": 2})
        assert store.queues()[1].auto_delete == (0, -1)
    with MessageStore(tmp_path, backend=backend) as store:
        queues = store.load().queues
        assert (queues[1].auto_created, queues[1].auto_delete, queues[1].arguments) == (
            True, (0, -1), {"x-qpid-maximum-delivery-count": 2})
        assert (queues[2].auto_created, queues[2].auto_delete, queues[2].arguments) == (False, None, None)
