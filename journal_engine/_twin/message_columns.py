"""Python twin of the compiled batch decoder of message-store bodies (pyx/journal_engine/_message_columns.pyx).

Each body goes through record_format's own decoders, and the fields land in the same Arrow buffers
the compiled module fills (validity bitmaps, int64 values, string offsets, the int32 offsets
of a map<string, string>). tests/store/test_message_columns.py checks that both give the same bytes.
"""
from __future__ import annotations

import ctypes
from array import array

from ..errors import CorruptRecordError
from ..limits import ONE_QUEUE_ID_MAX
from .livemap import LiveMap
from ..record_format import (ROUTING_TYPES, RecordKind, RecordType, decode_delivery_count, decode_message, decode_queue_id,
                             decode_scheduled_time, decode_store_body)

#: routing type codes as the columns give them (record_format.ROUTING_TYPES; 0 is "none": a null)
ROUTING_NAMES = {code: name for name, code in ROUTING_TYPES.items() if name is not None}

_BODY_KINDS = frozenset((RecordKind.ADD, RecordKind.UPDATE, RecordKind.ADD_TX, RecordKind.UPDATE_TX))
_QUEUE_ID_TYPES = frozenset((RecordType.ADD_REF, RecordType.ACKNOWLEDGE_REF))


def property_text(value) -> str | None:
    """A property value as the properties map gives it: a str as it is, an int in decimal, a float
    as repr, true / false, bytes in hex, None as null."""
    if value is None:
        return None
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, float):
        return repr(value)
    return str(value)


class _Bitmap:
    def __init__(self, rows: int) -> None:
        self.bits = bytearray((rows + 7) // 8)

    def set(self, row: int) -> None:
        self.bits[row >> 3] |= 1 << (row & 7)


class _Strings:
    def __init__(self, rows: int) -> None:
        self.offsets = array("i", [0]) * (rows + 1)
        self.data = bytearray()
        self.valid = _Bitmap(rows)

    def put(self, row: int, text: str) -> None:
        self.data += text.encode("utf-8")
        self.valid.set(row)

    def close(self, row: int) -> None:
        self.offsets[row + 1] = len(self.data)


class _Numbers:
    def __init__(self, rows: int) -> None:
        self.values = array("q", [0]) * rows
        self.valid = _Bitmap(rows)

    def put(self, row: int, value: int) -> None:
        self.values[row] = value - (1 << 64) if value >= 1 << 63 else value
        self.valid.set(row)


class MessageColumns:
    """The message store's fields of ``count`` rows as Arrow buffers (attributes as the compiled class)."""

    def __init__(self, rows: int) -> None:
        self.count = rows
        self.rejected: list[int] = []
        self._queue_id = _Numbers(rows)
        self._delivery_count = _Numbers(rows)
        self._scheduled_time = _Numbers(rows)
        self._expiration = _Numbers(rows)
        self._message_size = _Numbers(rows)
        self._durable = _Bitmap(rows)
        self._durable_valid = _Bitmap(rows)
        self._routing_type = bytearray(rows)
        self._routing_type_valid = _Bitmap(rows)
        self._address = _Strings(rows)
        self._queue_name = _Strings(rows)
        self._property_offsets = array("i", [0]) * (rows + 1)
        self._properties_valid = _Bitmap(rows)
        self._keys = bytearray()
        self._values = bytearray()
        self._key_offsets = array("i", [0])
        self._value_offsets = array("i", [0])
        self._value_valid = bytearray()

    def decode(self, row: int, record_type: int, record_id: int, body: bytes) -> None:
        """Row ``row``'s fields from one body; a body record_format rejects leaves them null."""
        try:
            decoded = decode_store_body(record_type, record_id, body)
        except CorruptRecordError:
            self.rejected.append(row)
            return
        if record_type in _QUEUE_ID_TYPES:
            self._queue_id.put(row, decoded)
        elif record_type == RecordType.UPDATE_DELIVERY_COUNT:
            self._queue_id.put(row, decoded[0])
            self._delivery_count.put(row, decoded[1])
        elif record_type == RecordType.SET_SCHEDULED_DELIVERY_TIME:
            self._queue_id.put(row, decoded[0])
            self._scheduled_time.put(row, decoded[1])
        elif record_type == RecordType.ADD_MESSAGE:
            self._message(row, decoded)
        elif record_type == RecordType.QUEUE_BINDING_RECORD:
            self._queue_name.put(row, decoded.name)
            self._address.put(row, decoded.address)
            self._routing(row, decoded.routing_type)

    def _routing(self, row: int, routing_type: str | None) -> None:
        if routing_type is not None:
            self._routing_type[row] = ROUTING_TYPES[routing_type]
            self._routing_type_valid.set(row)

    def _message(self, row: int, message) -> None:
        self._expiration.put(row, message.expiration)
        if message.durable:
            self._durable.set(row)
        self._durable_valid.set(row)
        self._routing(row, message.routing_type)
        self._message_size.put(row, len(message.body))
        self._address.put(row, message.address)
        self._properties_valid.set(row)
        for key, value in message.properties.items():
            self._keys += key.encode("utf-8")
            text = property_text(value)
            if text is not None:
                self._values += text.encode("utf-8")
            self._key_offsets.append(len(self._keys))
            self._value_offsets.append(len(self._values))
            self._value_valid.append(text is not None)

    def close(self, row: int) -> None:
        self._address.close(row)
        self._queue_name.close(row)
        self._property_offsets[row + 1] = len(self._value_valid)

    @property
    def property_count(self) -> int:
        return len(self._value_valid)

    queue_id = property(lambda self: self._queue_id.values.tobytes())
    queue_id_valid = property(lambda self: bytes(self._queue_id.valid.bits))
    delivery_count = property(lambda self: self._delivery_count.values.tobytes())
    delivery_count_valid = property(lambda self: bytes(self._delivery_count.valid.bits))
    scheduled_time = property(lambda self: self._scheduled_time.values.tobytes())
    scheduled_time_valid = property(lambda self: bytes(self._scheduled_time.valid.bits))
    expiration = property(lambda self: self._expiration.values.tobytes())
    expiration_valid = property(lambda self: bytes(self._expiration.valid.bits))
    message_size = property(lambda self: self._message_size.values.tobytes())
    message_size_valid = property(lambda self: bytes(self._message_size.valid.bits))
    durable = property(lambda self: bytes(self._durable.bits))
    durable_valid = property(lambda self: bytes(self._durable_valid.bits))
    routing_type = property(lambda self: bytes(self._routing_type))
    routing_type_valid = property(lambda self: bytes(self._routing_type_valid.bits))
    address_offsets = property(lambda self: self._address.offsets.tobytes())
    address_data = property(lambda self: bytes(self._address.data))
    address_valid = property(lambda self: bytes(self._address.valid.bits))
    queue_name_offsets = property(lambda self: self._queue_name.offsets.tobytes())
    queue_name_data = property(lambda self: bytes(self._queue_name.data))
    queue_name_valid = property(lambda self: bytes(self._queue_name.valid.bits))
    property_offsets = property(lambda self: self._property_offsets.tobytes())
    properties_valid = property(lambda self: bytes(self._properties_valid.bits))
    key_offsets = property(lambda self: self._key_offsets.tobytes())
    key_data = property(lambda self: bytes(self._keys))
    value_offsets = property(lambda self: self._value_offsets.tobytes())
    value_data = property(lambda self: bytes(self._values))
    value_valid = property(lambda self: bytes(self._value_valid))


def decode_message_columns(kind, record_type, body_offsets, bodies, start: int, stop: int) -> MessageColumns:
    """The message store's fields of rows ``start``..``stop`` of a scan's columns (see the compiled module)."""
    kind, record_type, body_offsets = memoryview(kind), memoryview(record_type), memoryview(body_offsets)
    bodies = memoryview(bodies).cast("B")
    rows = len(kind)
    if len(record_type) != rows or len(body_offsets) != rows + 1:
        raise ValueError(f"columns of {rows} kinds, {len(record_type)} record types and "
                         f"{len(body_offsets)} body offsets do not describe the same rows")
    if not 0 <= start <= stop <= rows:
        raise ValueError(f"rows {start}..{stop} of {rows}")
    out = MessageColumns(stop - start)
    for row in range(start, stop):
        if kind[row] in _BODY_KINDS:
            begin, end = body_offsets[row], body_offsets[row + 1]
            if not 0 <= begin <= end <= len(bodies):
                raise ValueError(f"row {row}: body offsets {begin}..{end} outside the {len(bodies)} bytes of bodies")
            out.decode(row - start, record_type[row], row, bytes(bodies[begin:end]))
        out.close(row - start)
    return out


# ----- recovery: the message store's live records into per-queue columns ------------------------------

class QueueReferences:
    """One queue's recovered references as columns, in store order (see the compiled module)."""

    __slots__ = ("message_ids", "delivery_counts", "scheduled_times", "ascending", "timed", "shared")

    def __init__(self) -> None:
        self.message_ids, self.delivery_counts, self.scheduled_times = array("Q"), array("I"), array("Q")
        self.ascending, self.timed, self.shared = True, False, False

    def __len__(self) -> int:
        return len(self.message_ids)

    def __repr__(self) -> str:
        return f"<QueueReferences: {len(self.message_ids)} references>"


class _Bodies(dict):
    """Message id -> ADD_MESSAGE body (bytes): a dict the message store's pin releaser can refer to
    weakly, as it does to the compiled MessageBodies."""

    __slots__ = ("__weakref__",)

    def release_file(self, path) -> int:
        """The compiled bodies can point into a mapped journal file, which this releases; the twin's
        are bytes (its loads always copy) and hold no file: nothing to move."""
        return 0


class MessageRecovery:
    """What recover_messages found (see the compiled module): every rule of the store's recovery applied."""

    __slots__ = ("max_record_id", "bodies", "one_queue", "several_queues", "references", "unreferenced",
                 "anomalies", "corrupt", "unknown_references", "from_shadow")

    def __init__(self) -> None:
        self.max_record_id = 0
        self.bodies, self.references, self.unreferenced = _Bodies(), {}, []
        self.one_queue, self.several_queues = LiveMap(), {}
        self.anomalies, self.corrupt, self.unknown_references, self.from_shadow = [], [], [], []


def _live_references(message_id: int, updates, anomalies: list, path) -> dict:
    """queue id -> [count, scheduled ms] of the message's live references, in journal order (the
    last count and time win); odd updates go to ``anomalies``; CorruptRecordError for an update
    record_format rejects."""
    live: dict[int, list] = {}
    for user_type, body in updates:
        if user_type in _QUEUE_ID_TYPES:
            queue_id = decode_queue_id(bytes(body), message_id=message_id, record_type=user_type, path=path)
            if user_type == RecordType.ADD_REF:
                if queue_id in live:
                    anomalies.append(f"message {message_id}: a second ADD_REF on queue {queue_id}; kept one")
                    continue
                live[queue_id] = [0, 0]
            elif live.pop(queue_id, None) is None:
                anomalies.append(f"message {message_id}: acknowledgement on queue {queue_id}, which holds "
                                 "no live reference of it; ignored")
        elif user_type == RecordType.UPDATE_DELIVERY_COUNT:
            queue_id, count = decode_delivery_count(bytes(body), message_id=message_id, path=path)
            if queue_id not in live:
                anomalies.append(f"message {message_id}: delivery count {count} for queue {queue_id}, "
                                 "which holds no live reference of it; ignored")
                continue
            live[queue_id][0] = count
        elif user_type == RecordType.SET_SCHEDULED_DELIVERY_TIME:
            queue_id, scheduled_ms = decode_scheduled_time(bytes(body), message_id=message_id, path=path)
            if queue_id not in live:
                anomalies.append(f"message {message_id}: scheduled time {scheduled_ms} for queue {queue_id}, "
                                 "which holds no live reference of it; ignored")
                continue
            live[queue_id][1] = scheduled_ms
        else:
            anomalies.append(f"message {message_id}: update of unknown type {user_type}; ignored")
    return live


def recover_messages(records, known_queues, now_ms: int, shadow_counts=None, path=None) -> MessageRecovery:
    """The message store's recovery of its message journal's live records (see the compiled module)."""
    out = MessageRecovery()
    gathered = {queue_id: QueueReferences() for queue_id in known_queues}
    shadow_counts = shadow_counts or {}
    max_id = 0
    for index, rec in enumerate(records.values()):
        message_id = rec.record_id
        max_id = message_id if index == 0 else max(max_id, message_id)
        if rec.record_type != RecordType.ADD_MESSAGE:
            out.anomalies.append(f"message journal record {message_id} has type {rec.record_type}, not a message "
                                 f"({int(RecordType.ADD_MESSAGE)}); ignored")
            continue
        try:
            expiration = decode_message(message_id, bytes(rec.body), path=path).expiration
            live = _live_references(message_id, rec.updates, out.anomalies, path)
        except CorruptRecordError as error:
            out.corrupt.append(error)       # the message is left out
            continue
        if not live:
            out.unreferenced.append(message_id)
            continue
        for queue_id, (count, scheduled_ms) in live.items():
            if scheduled_ms and now_ms >= 0 and scheduled_ms <= now_ms:
                scheduled_ms = 0        # it fell due while the store was closed: deliver now
            shadowed = shadow_counts.get((queue_id, message_id))
            if shadowed == count:
                shadowed = None
            refs = gathered.get(queue_id)
            if refs is None:
                out.anomalies.append(f"message {message_id} has a reference on queue {queue_id}, which the "
                                     "bindings journal does not hold; kept, not delivered")
                out.unknown_references.append((queue_id, message_id, count, count if shadowed is None else shadowed,
                                               scheduled_ms))
                if shadowed is not None:
                    out.from_shadow.append((queue_id, -1, message_id, shadowed))
                continue
            if shadowed is not None:
                out.from_shadow.append((queue_id, len(refs.message_ids), message_id, shadowed))
            if refs.message_ids and message_id < refs.message_ids[-1]:
                refs.ascending = False
            refs.timed = refs.timed or bool(scheduled_ms or expiration)
            refs.shared = refs.shared or len(live) > 1
            refs.message_ids.append(message_id)
            refs.delivery_counts.append(count)
            refs.scheduled_times.append(scheduled_ms)
        out.bodies[message_id] = rec.body
        queue_ids = tuple(live)
        if len(queue_ids) == 1 and queue_ids[0] <= ONE_QUEUE_ID_MAX:
            out.one_queue[message_id] = queue_ids[0]
        else:
            out.several_queues[message_id] = queue_ids
    out.references, out.max_record_id = gathered, max_id
    return out


def decode_message_fields(message_id: int, body, path=None) -> tuple:
    """(address, body, properties, durable, expiration, routing_type) of one ADD_MESSAGE body."""
    stored = decode_message(message_id, bytes(body), path=path)
    return stored.address, stored.body, stored.properties, stored.durable, stored.expiration, stored.routing_type


def decode_messages_fields(bodies: dict, message_ids, path=None, with_bodies: bool = True) -> list[tuple]:
    """decode_message_fields of many messages at once, in the order of ``message_ids``; ``with_bodies``
    False: the body of a message without properties is None (see the compiled module)."""
    out = []
    for message_id in message_ids:
        fields = decode_message_fields(message_id, bodies[message_id], path)
        out.append(fields if with_bodies or fields[2] else (fields[0], None) + fields[2:])
    return out


_untrack = ctypes.pythonapi.PyObject_GC_UnTrack
_untrack.argtypes = [ctypes.py_object]
_untrack.restype = None


def release_from_collector(objects) -> None:
    """Take ``objects`` out of the cycle collector's view. They are still freed by reference counting;
    the collector's passes no longer visit them, which on a broker holding a million recovered
    messages were most of the time of receiving them. Only for objects that can never be part of a
    reference cycle (a recovered message's data: text, bytes, numbers and a dict of plain
    properties): one in a cycle would never be freed."""
    for obj in objects:
        _untrack(obj)
