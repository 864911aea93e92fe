"""Python twin of the compiled batch decoder of message-store bodies for Spark (pyx/journal_engine/_message_columns.pyx).

Each body goes through record_format's own decoders, and the fields land in the same Arrow buffers
the compiled module fills (validity bitmaps, int64 values, string offsets, the int32 offsets
of a map<string, string>). tests/store/test_message_columns.py checks that both give the same bytes.
"""
from __future__ import annotations

from array import array

from ..errors import CorruptRecordError
from ..record_format import ROUTING_TYPES, RecordKind, RecordType, decode_store_body

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
        self._priority = bytearray(rows)
        self._priority_valid = _Bitmap(rows)
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
        self._priority[row] = message.priority
        self._priority_valid.set(row)
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
    priority = property(lambda self: bytes(self._priority))
    priority_valid = property(lambda self: bytes(self._priority_valid.bits))
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
