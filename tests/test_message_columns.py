"""The batch decoder of message-store bodies: the compiled module and its twin fill the same buffers,
and both accept exactly the bodies record_format's decoders accept.

Property-based: real bodies from record_format's encoders (every property type, a name given twice),
then the same bodies cut short, grown, or with a byte changed — each compared buffer by buffer.
"""
from __future__ import annotations

import struct
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal_engine import record_format as fmt
from journal_engine._twin import message_columns as twin
from journal_engine.errors import CorruptRecordError
from journal_engine.record_format import RecordKind, RecordType

compiled = pytest.importorskip("journal_engine._message_columns", reason="the compiled core is not built")

pytestmark = pytest.mark.twin

BUFFERS = [name for name in dir(compiled.MessageColumns) if not name.startswith("_")]

texts = st.text(max_size=12)
values = st.one_of(st.none(), st.booleans(), texts, st.integers(fmt.I64_MIN, fmt.I64_MAX),
                   st.floats(allow_nan=True), st.binary(max_size=8))
messages = st.builds(lambda address, body, props, durable, expiration, routing: fmt.encode_message(
    address, body, properties=props, durable=durable, expiration=expiration, routing_type=routing),
    texts, st.binary(max_size=16), st.dictionaries(texts, values, max_size=4), st.booleans(),
    st.integers(0, fmt.I64_MAX), st.sampled_from(list(fmt.ROUTING_TYPES)))
queues = st.builds(lambda name, address, routing, text, arguments: fmt.encode_queue(
    name, address, routing_type=routing, filter=text, arguments=arguments),
    texts, texts, st.sampled_from(fmt.QUEUE_ROUTING_TYPES), st.none() | texts,
    st.none() | st.dictionaries(texts, values, max_size=3))
u64 = st.integers(0, fmt.U64_MAX)
records = st.one_of(
    st.tuples(st.just(RecordType.ADD_MESSAGE), messages),
    st.tuples(st.just(RecordType.QUEUE_BINDING_RECORD), queues),
    st.tuples(st.sampled_from([RecordType.ADD_REF, RecordType.ACKNOWLEDGE_REF]), u64.map(fmt.encode_queue_id)),
    st.tuples(st.just(RecordType.UPDATE_DELIVERY_COUNT),
              st.builds(fmt.encode_delivery_count, u64, st.integers(0, fmt.U32_MAX))),
    st.tuples(st.just(RecordType.SET_SCHEDULED_DELIVERY_TIME), st.builds(fmt.encode_scheduled_time, u64, u64)),
    st.tuples(st.integers(0, 255), st.binary(max_size=24)),
)


@st.composite
def damaged(draw, record):
    """A record as written, or cut short, grown, or with one byte changed."""
    record_type, body = draw(record)
    how = draw(st.sampled_from(["as written", "cut", "grown", "byte"]))
    if how == "cut" and body:
        body = body[:draw(st.integers(0, len(body) - 1))]
    elif how == "grown":
        body += draw(st.binary(min_size=1, max_size=4))
    elif how == "byte" and body:
        at = draw(st.integers(0, len(body) - 1))
        body = body[:at] + bytes([draw(st.integers(0, 255))]) + body[at + 1:]
    return record_type, body


def columns_of(rows, kinds=None):
    kinds = kinds or [RecordKind.ADD] * len(rows)
    offsets = array("q", [0])
    bodies = b""
    for _record_type, body in rows:
        bodies += body
        offsets.append(len(bodies))
    return (memoryview(bytes(kinds)), memoryview(bytes(int(t) for t, _ in rows)), memoryview(offsets), bodies)


def assert_same(columns, start=0, stop=None):
    stop = len(columns[0]) if stop is None else stop
    fast = compiled.decode_message_columns(*columns, start, stop)
    slow = twin.decode_message_columns(*columns, start, stop)
    for name in BUFFERS:
        assert getattr(fast, name) == getattr(slow, name), name
    return fast


def accepted(record_type, body) -> bool:
    try:
        fmt.decode_store_body(record_type, 1, body)
    except CorruptRecordError:
        return False
    return True


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(damaged(records), max_size=8))
def test_compiled_equals_twin_and_rejects_what_record_format_rejects(rows):
    decoded = assert_same(columns_of(rows))
    assert decoded.rejected == [i for i, (record_type, body) in enumerate(rows) if not accepted(record_type, body)]


@settings(max_examples=100)
@given(st.lists(records, min_size=1, max_size=8), st.data())
def test_a_slice_of_rows_is_decoded_as_the_same_rows_alone(rows, data):
    start = data.draw(st.integers(0, len(rows)))
    stop = data.draw(st.integers(start, len(rows)))
    part = assert_same(columns_of(rows), start, stop)
    alone = assert_same(columns_of(rows[start:stop]))
    for name in BUFFERS:
        if not name.endswith("offsets"):    # offsets point into the same bytes, from another start
            assert getattr(part, name) == getattr(alone, name), name


def test_the_fields_of_each_record_type():
    rows = [(RecordType.ADD_MESSAGE, fmt.encode_message("orders", b"12345", durable=False, expiration=77,
                                                        routing_type="multicast",
                                                        properties={"n": -3, "f": 0.1, "b": b"\x00\xab", "t": True,
                                                                    "x": None, "s": "é"})),
            (RecordType.ADD_REF, fmt.encode_queue_id(5)),
            (RecordType.UPDATE_DELIVERY_COUNT, fmt.encode_delivery_count(5, 4)),
            (RecordType.SET_SCHEDULED_DELIVERY_TIME, fmt.encode_scheduled_time(5, 2 ** 40)),
            (RecordType.QUEUE_BINDING_RECORD, fmt.encode_queue("q", "orders", routing_type="multicast"))]
    out = assert_same(columns_of(rows))
    assert out.rejected == []
    assert struct.unpack("<5q", out.queue_id) == (0, 5, 5, 5, 0)
    assert out.queue_id_valid == bytes([0b01110])
    assert struct.unpack("<5q", out.delivery_count)[2] == 4
    assert struct.unpack("<5q", out.scheduled_time)[3] == 2 ** 40
    assert struct.unpack("<5q", out.expiration)[0] == 77 and struct.unpack("<5q", out.message_size)[0] == 5
    assert out.durable == b"\x00" and out.durable_valid == b"\x01"
    assert out.routing_type == bytes([2, 0, 0, 0, 2])
    assert out.address_data == b"ordersorders" and struct.unpack("<6i", out.address_offsets) == (0, 6, 6, 6, 6, 12)
    assert out.queue_name_data == b"q"
    assert out.key_data == b"nfbtxs" and out.value_data == "-30.100abtrueé".encode()
    assert out.value_valid == bytes([1, 1, 1, 1, 0, 1])


def test_a_property_named_twice_keeps_its_first_place_and_last_value():
    plain = fmt.encode_message("a", b"", properties={"k": 1, "z": 2})
    count_at = len(plain) - (2 + 1 + 1 + 8) * 2 - 4
    entry = struct.pack("<H", 1) + b"k" + bytes([fmt.PropertyTag.STR]) + struct.pack("<I", 2) + b"hi"
    twice = plain[:count_at] + struct.pack("<I", 3) + plain[count_at + 4:] + entry
    assert fmt.decode_message(1, twice).properties == {"k": "hi", "z": 2}
    out = assert_same(columns_of([(RecordType.ADD_MESSAGE, twice)]))
    assert (out.key_data, out.value_data, out.property_count) == (b"kz", b"hi2", 2)


def test_only_adds_and_updates_carry_a_store_body():
    body = fmt.encode_queue_id(9)
    rows = [(RecordType.ADD_REF, body)] * 5
    kinds = [RecordKind.UPDATE, RecordKind.UPDATE_TX, RecordKind.DELETE, RecordKind.COMMIT, RecordKind.PAD]
    out = assert_same(columns_of(rows, kinds))
    assert out.queue_id_valid == bytes([0b00011])


def test_inconsistent_columns_are_refused():
    kinds, types, offsets, bodies = columns_of([(RecordType.ADD_REF, fmt.encode_queue_id(1))])
    for decode in (compiled.decode_message_columns, twin.decode_message_columns):
        with pytest.raises(ValueError, match="same rows"):
            decode(kinds, types[:0], offsets, bodies, 0, 1)
        with pytest.raises(ValueError, match="rows 0..2"):
            decode(kinds, types, offsets, bodies, 0, 2)
        with pytest.raises(ValueError, match="outside"):
            decode(kinds, types, offsets, bodies[:3], 0, 1)
