"""The batch decoder of message-store bodies: the compiled module and its twin fill the same buffers,
and both accept exactly the bodies record_format's decoders accept.

Property-based: real bodies from record_format's encoders (every property type, a name given twice),
then the same bodies cut short, grown, or with a byte changed — each compared buffer by buffer.
"""
from __future__ import annotations

import gc
import struct
import weakref
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal_engine import limits, record_format as fmt
from journal_engine._twin import message_columns as twin
from journal_engine.errors import CorruptRecordError
from journal_engine.record_format import RecordKind, RecordType

compiled = pytest.importorskip("journal_engine._message_columns", reason="the compiled core is not built")

pytestmark = pytest.mark.twin

BUFFERS = [name for name in dir(compiled.MessageColumns) if not name.startswith("_")]

texts = st.text(max_size=12)
values = st.one_of(st.none(), st.booleans(), texts, st.integers(limits.I64_MIN, limits.I64_MAX),
                   st.floats(allow_nan=True), st.binary(max_size=8))
messages = st.builds(lambda address, body, props, durable, expiration, routing, priority: fmt.encode_message(
    address, body, properties=props, durable=durable, expiration=expiration, routing_type=routing, priority=priority),
    texts, st.binary(max_size=16), st.dictionaries(texts, values, max_size=4), st.booleans(),
    st.integers(0, limits.I64_MAX), st.sampled_from(list(fmt.ROUTING_TYPES)),
    st.integers(limits.PRIORITY_MIN, limits.PRIORITY_MAX))
queues = st.builds(lambda name, address, routing, text, arguments: fmt.encode_queue(
    name, address, routing_type=routing, filter=text, arguments=arguments),
    texts, texts, st.sampled_from(fmt.QUEUE_ROUTING_TYPES), st.none() | texts,
    st.none() | st.dictionaries(texts, values, max_size=3))
u64 = st.integers(0, limits.U64_MAX)
records = st.one_of(
    st.tuples(st.just(RecordType.ADD_MESSAGE), messages),
    st.tuples(st.just(RecordType.QUEUE_BINDING_RECORD), queues),
    st.tuples(st.sampled_from([RecordType.ADD_REF, RecordType.ACKNOWLEDGE_REF]), u64.map(fmt.encode_queue_id)),
    st.tuples(st.just(RecordType.UPDATE_DELIVERY_COUNT),
              st.builds(fmt.encode_delivery_count, u64, st.integers(0, limits.U32_MAX))),
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


def _texts_near_every_utf8_boundary():
    """Every lead byte from 0x80 with second bytes at each edge of the ranges the Unicode table allows
    (overlong forms, surrogates, past U+10FFFF), later bytes in and out of the continuation range, and
    each sequence also cut short; between ASCII, so that the bytes around it are plain."""
    edges = (0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0)
    later = (0x7F, 0x80, 0xBF, 0xC0)
    for lead in range(0x80, 0x100):
        for second in edges:
            for third in later:
                for fourth in later:
                    whole = bytes([lead, second, third, fourth])
                    for size in (1, 2, 3, 4):
                        yield b"a" + whole[:size] + (b"z" if size < 4 else b"")


def test_addresses_are_checked_as_strict_utf8_at_every_boundary():
    """A message whose address is not UTF-8 as Python's decoder takes it is rejected, and only such one."""
    texts = sorted(set(_texts_near_every_utf8_boundary()))
    rows = []
    for text in texts:
        placeholder = "Q" * len(text)
        body = fmt.encode_message(placeholder, b"")
        rows.append((RecordType.ADD_MESSAGE, body.replace(placeholder.encode(), text, 1)))
    expected = []
    for i, text in enumerate(texts):
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            expected.append(i)
    assert 0 < len(expected) < len(texts)
    assert assert_same(columns_of(rows)).rejected == expected


def test_the_fields_of_each_record_type():
    rows = [(RecordType.ADD_MESSAGE, fmt.encode_message("orders", b"12345", durable=False, expiration=77,
                                                        routing_type="multicast",
                                                        properties={"n": -3, "f": 0.1, "b": b"\x00\xab", "t": True,
                                                                    "x": None, "s": "é"}, priority=7)),
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
    assert out.priority == bytes([7, 0, 0, 0, 0]) and out.priority_valid == b"\x01"
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


# ----- recovery: recover_messages and decode_message_fields ---------------------------------------------

from journal_engine._twin.replay import RecordInfo  # noqa: E402  (the records load() gives, as the twin makes them)
from journal_engine._twin import message_recovery as twin_recovery  # noqa: E402

compiled_recovery = pytest.importorskip("journal_engine._message_recovery", reason="the compiled core is not built")

QUEUE_IDS = st.integers(1, 4)
updates = st.one_of(
    st.tuples(st.just(RecordType.ADD_REF), QUEUE_IDS.map(fmt.encode_queue_id)),
    st.tuples(st.just(RecordType.ACKNOWLEDGE_REF), QUEUE_IDS.map(fmt.encode_queue_id)),
    st.tuples(st.just(RecordType.UPDATE_DELIVERY_COUNT), st.builds(fmt.encode_delivery_count, QUEUE_IDS,
                                                                   st.integers(0, limits.U32_MAX))),
    st.tuples(st.just(RecordType.SET_SCHEDULED_DELIVERY_TIME), st.builds(fmt.encode_scheduled_time, QUEUE_IDS,
                                                                         st.integers(0, 2_000))),
)
plain_messages = st.builds(lambda address, body, expiration, routing: fmt.encode_message(
    address, body, expiration=expiration, routing_type=routing), texts, st.binary(max_size=16),
    st.sampled_from([0, 0, 0, 5]), st.sampled_from(list(fmt.ROUTING_TYPES)))


@st.composite
def message_records(draw):
    """A message journal's live records: mostly well-formed messages whose references come and go;
    now and then an odd one (another record type, a damaged body or update)."""
    out = {}
    for message_id in draw(st.lists(st.integers(0, 60), unique=True, max_size=8)):
        record_type, body = RecordType.ADD_MESSAGE, draw(plain_messages | messages)
        rows = draw(st.lists(updates, max_size=6))
        odd = draw(st.sampled_from(["none"] * 8 + ["type", "body", "update"]))
        if odd == "type":
            record_type = RecordType.QUEUE_BINDING_RECORD
        elif odd == "body":
            record_type, body = draw(damaged(st.just((record_type, body))))
        elif odd == "update" and rows:
            rows[0] = draw(damaged(st.just(rows[0])))
        out[message_id] = RecordInfo(message_id, record_type, body, rows)
    return out


def recovery_of(recovery) -> dict:
    return {"max": recovery.max_record_id, "bodies": recovery.bodies,
            "queues": (sorted(recovery.one_queue.items()), recovery.several_queues),
            "unreferenced": recovery.unreferenced,
            "references": {queue_id: (list(refs.message_ids), list(refs.delivery_counts), list(refs.scheduled_times),
                                      refs.ascending, refs.timed, refs.shared)
                           for queue_id, refs in recovery.references.items()},
            "anomalies": recovery.anomalies, "unknown": recovery.unknown_references,
            "from_shadow": recovery.from_shadow,
            "corrupt": [(type(error).__name__, str(error), error.path) for error in recovery.corrupt]}


shadows = st.dictionaries(st.tuples(QUEUE_IDS, st.integers(0, 60)), st.integers(0, 5), max_size=6)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(message_records(), st.lists(QUEUE_IDS, unique=True), st.integers(0, 2_000), shadows)
def test_recover_messages_compiled_equals_twin(records, known, now_ms, shadow_counts):
    """Odd records included (another type, a damaged body or update, a reference to a queue not
    known, counts a shadow holds): the rules of the store's recovery live in this pair alone."""
    fast = recovery_of(compiled_recovery.recover_messages(records, known, now_ms, shadow_counts, "here"))
    assert fast == recovery_of(twin_recovery.recover_messages(records, known, now_ms, shadow_counts, "here"))
    if True:
        assert list(fast["references"]) == known
        for message_id in fast["bodies"]:
            assert fmt.decode_message(message_id, records[message_id].body)   # every message kept decodes
        # the first use of the recovered messages: decoded straight from the columns the recovery keeps
        ids = list(fast["bodies"])[::-1]
        assert repr(compiled_recovery.decode_messages_fields(fast["bodies"], ids)) \
            == repr(twin_recovery.decode_messages_fields({message_id: records[message_id].body for message_id in ids}, ids)) \
            == repr(compiled_recovery.decode_messages_fields(dict(fast["bodies"].items()), ids))


def test_recover_messages_gathers_each_queues_live_references():
    records = {
        7: RecordInfo(7, RecordType.ADD_MESSAGE, fmt.encode_message("a", b"x"), [
            (RecordType.ADD_REF, fmt.encode_queue_id(1)), (RecordType.ADD_REF, fmt.encode_queue_id(2)),
            (RecordType.UPDATE_DELIVERY_COUNT, fmt.encode_delivery_count(2, 3)),
            (RecordType.SET_SCHEDULED_DELIVERY_TIME, fmt.encode_scheduled_time(1, 500))]),
        3: RecordInfo(3, RecordType.ADD_MESSAGE, fmt.encode_message("a", b"y", expiration=9), [
            (RecordType.ADD_REF, fmt.encode_queue_id(2))]),
        9: RecordInfo(9, RecordType.ADD_MESSAGE, fmt.encode_message("a", b"z"), [
            (RecordType.ADD_REF, fmt.encode_queue_id(1)), (RecordType.ACKNOWLEDGE_REF, fmt.encode_queue_id(1))]),
        4: RecordInfo(4, RecordType.ADD_MESSAGE, fmt.encode_message("a", b"w"), [
            (RecordType.ADD_REF, fmt.encode_queue_id(3))]),
    }
    for module in (compiled_recovery, twin_recovery):
        out = module.recover_messages(records, [1, 2, 3], 400)
        assert out.max_record_id == 9 and out.unreferenced == [9] and not out.anomalies
        assert sorted(out.one_queue.items()) == [(3, 2), (4, 3)] and out.several_queues == {7: (1, 2)}
        one, two, three = (out.references[q] for q in (1, 2, 3))
        assert (list(one.message_ids), list(one.scheduled_times), one.timed, one.shared) == ([7], [500], True, True)
        assert (list(two.message_ids), list(two.delivery_counts), two.ascending) == ([7, 3], [3, 0], False)
        assert (two.timed, two.shared) == (True, True)      # message 3 expires; message 7 is on queue 1 too
        assert (three.timed, three.shared, three.ascending) == (False, False, True)
        assert module.recover_messages(records, [1, 2, 3], 500).references[1].scheduled_times[0] == 0   # fell due
        unknown = module.recover_messages(records, [1, 2], 400, {(3, 4): 2, (2, 7): 3, (1, 7): 5})
        assert unknown.unknown_references == [(3, 4, 0, 2, 0)]                  # queue 3 is not known
        assert unknown.anomalies == ["message 4 has a reference on queue 3, which the bindings journal does not "
                                     "hold; kept, not delivered"]
        assert unknown.from_shadow == [(1, 0, 7, 5), (3, -1, 4, 2)]             # (2, 7) holds 3 already


def test_recover_messages_reports_each_odd_record_as_the_store_did():
    """The texts of the message store's anomalies, and the errors of what record_format rejects, from
    the compiled pass and its twin alike (before, the compiled pass gave up on them and the store read
    every record again through record_format)."""
    records = {
        1: RecordInfo(1, RecordType.QUEUE_BINDING_RECORD, b"not a message"),
        2: RecordInfo(2, RecordType.ADD_MESSAGE, fmt.encode_message("a", b"x"), [
            (RecordType.ADD_REF, fmt.encode_queue_id(1)), (RecordType.ADD_REF, fmt.encode_queue_id(1)),
            (RecordType.ACKNOWLEDGE_REF, fmt.encode_queue_id(2)),
            (RecordType.UPDATE_DELIVERY_COUNT, fmt.encode_delivery_count(2, 4)),
            (RecordType.SET_SCHEDULED_DELIVERY_TIME, fmt.encode_scheduled_time(2, 77)), (99, b"?")]),
        3: RecordInfo(3, RecordType.ADD_MESSAGE, b"\x09damaged", [(RecordType.ADD_REF, fmt.encode_queue_id(1))]),
        4: RecordInfo(4, RecordType.ADD_MESSAGE, fmt.encode_message("a", b"y"), [
            (RecordType.UPDATE_DELIVERY_COUNT, fmt.encode_delivery_count(1, 1)),
            (RecordType.ADD_REF, fmt.encode_queue_id(1) + b"!")]),
    }
    for module in (compiled_recovery, twin_recovery):
        out = module.recover_messages(records, [1], 0, None, "the-path")
        assert out.anomalies == [
            f"message journal record 1 has type {int(RecordType.QUEUE_BINDING_RECORD)}, not a message "
            f"({int(RecordType.ADD_MESSAGE)}); ignored",
            "message 2: a second ADD_REF on queue 1; kept one",
            "message 2: acknowledgement on queue 2, which holds no live reference of it; ignored",
            "message 2: delivery count 4 for queue 2, which holds no live reference of it; ignored",
            "message 2: scheduled time 77 for queue 2, which holds no live reference of it; ignored",
            "message 2: update of unknown type 99; ignored",
            "message 4: delivery count 1 for queue 1, which holds no live reference of it; ignored"], module
        assert [error.path for error in out.corrupt] == ["the-path", "the-path"]
        assert "record 3" in str(out.corrupt[0]) or "message 3" in str(out.corrupt[0]), out.corrupt[0]
        assert "9 bytes, expected 8" in str(out.corrupt[1]), out.corrupt[1]
        assert list(out.bodies) == [2] and out.max_record_id == 4 and list(out.references[1].message_ids) == [2]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(damaged(st.tuples(st.just(RecordType.ADD_MESSAGE), messages)))
def test_decode_message_fields_reads_what_record_format_reads(record):
    _record_type, body = record
    try:
        stored = fmt.decode_message(5, body, path="here")
    except CorruptRecordError as exc:
        for module in (compiled_recovery, twin_recovery):
            with pytest.raises(CorruptRecordError) as raised:
                module.decode_message_fields(5, body, "here")
            assert str(raised.value) == str(exc)
        return
    fields = (stored.address, stored.body, stored.properties, stored.durable, stored.expiration, stored.routing_type,
              stored.priority)
    # repr: a NaN property equals nothing, not even itself
    assert repr(compiled_recovery.decode_message_fields(5, body)) == repr(fields) == repr(twin_recovery.decode_message_fields(5, body))


class _Plain:
    __slots__ = ("value", "__weakref__")

    def __init__(self, value) -> None:
        self.value = value


@pytest.mark.parametrize("module", [compiled_recovery, twin_recovery], ids=["compiled", "twin"])
def test_objects_released_from_the_collector_are_untracked_and_still_freed(module):
    objects = [_Plain(b"body %d" % n) for n in range(3)]
    assert all(gc.is_tracked(obj) for obj in objects)
    module.release_from_collector(objects)
    assert not any(gc.is_tracked(obj) for obj in objects)
    watched = weakref.ref(objects[1])
    del objects[1]
    assert watched() is None, "an object out of the collector's view must still be freed by reference counting"


def test_a_recovered_queues_message_data_is_out_of_the_collectors_view(tmp_path):
    from journal_engine import Broker
    with Broker(tmp_path / "broker") as broker:
        broker.create_queue("q")
        for n in range(5):
            broker.send("q", b"m%d" % n, properties={"n": n})
    with Broker(tmp_path / "broker") as broker:
        message = broker.create_consumer("q").receive(0)
        references = list(broker._post_office.queues["q"].ready)
        assert message is not None and len(references) == 4
        assert not any(gc.is_tracked(reference.data) for reference in references)
        assert all(gc.is_tracked(reference) for reference in references)   # a reference can be in a cycle: kept
