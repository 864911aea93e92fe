"""Records as an operator reads them: names for kinds and record types, message-store bodies decoded
into fields (as ``artemis data print`` shows them), and the filters of ``print``.

The decoding is record_format's (decode_message, decode_queue, ...); this module only names and
arranges what it returns, so there is no second reading of the format here.
"""
from __future__ import annotations

import base64
import enum
from dataclasses import dataclass

from ..errors import CorruptRecordError
from ..record_format import (RecordKind, RecordType, decode_delivery_count, decode_message, decode_queue,
                             decode_queue_id, decode_scheduled_time)

__all__ = ["kind_name", "type_name", "decode_fields", "json_value", "RecordFilter", "parse_kind", "parse_type"]

#: record kinds that carry a user record type and a body
BODY_KINDS = frozenset({RecordKind.ADD, RecordKind.UPDATE, RecordKind.ADD_TX, RecordKind.UPDATE_TX})


def kind_name(kind: int) -> str:
    try:
        return RecordKind(kind).name
    except ValueError:
        return f"KIND_{kind}"


def type_name(record_type: int) -> str:
    try:
        return RecordType(record_type).name
    except ValueError:
        return str(record_type)


def json_value(value):
    """A property or field value as JSON can carry it (bytes: {"base64": ...})."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dict):
        return {key: json_value(item) for key, item in value.items()}
    return value


def decode_fields(record_id: int, record_type: int, body: bytes, *, path=None) -> dict:
    """The fields of a message-store record body by its type ({} for another type). A body that
    does not decode gives {"error": why} (the record is printed anyway)."""
    try:
        if record_type == RecordType.ADD_MESSAGE:
            message = decode_message(record_id, body, path=path)
            return {"address": message.address, "durable": message.durable, "expiration": message.expiration,
                    "routing_type": message.routing_type, "properties": dict(message.properties),
                    "body_size": len(message.body)}
        if record_type == RecordType.QUEUE_BINDING_RECORD:
            queue = decode_queue(record_id, body, path=path)
            return {"name": queue.name, "address": queue.address, "routing_type": queue.routing_type,
                    "filter": queue.filter}
        if record_type in (RecordType.ADD_REF, RecordType.ACKNOWLEDGE_REF):
            return {"queue_id": decode_queue_id(body, message_id=record_id, record_type=record_type, path=path)}
        if record_type == RecordType.UPDATE_DELIVERY_COUNT:
            queue_id, count = decode_delivery_count(body, message_id=record_id, path=path)
            return {"queue_id": queue_id, "delivery_count": count}
        if record_type == RecordType.SET_SCHEDULED_DELIVERY_TIME:
            queue_id, scheduled = decode_scheduled_time(body, message_id=record_id, path=path)
            return {"queue_id": queue_id, "scheduled_delivery_time": scheduled}
    except CorruptRecordError as exc:
        return {"error": str(exc)}
    return {}


def _parse_named(text: str, names: type[enum.IntEnum], what: str) -> int:
    """A member of ``names`` by name (any case) or any number; ValueError naming the choices."""
    if text.isdigit():
        return int(text)
    try:
        return int(names[text.upper()])
    except KeyError:
        raise ValueError(f"unknown {what} {text!r}; use a number or one of "
                         f"{', '.join(member.name for member in names)}") from None


def parse_kind(text: str) -> int:
    """A record kind by name (ADD, update, ...) or number."""
    return _parse_named(text, RecordKind, "record kind")


def parse_type(text: str) -> int:
    """A user record type by name (ADD_MESSAGE, add_ref, ...) or number."""
    return _parse_named(text, RecordType, "record type")


@dataclass(frozen=True)
class RecordFilter:
    """Which records ``print`` and ``export`` show: kinds, user record types, an id range, a message address."""

    kinds: frozenset = frozenset()
    types: frozenset = frozenset()
    id_min: int | None = None
    id_max: int | None = None
    address: str | None = None

    def accepts(self, kind: int, record_type: int, record_id: int, address: str | None) -> bool:
        """``address``: the address of the message the record belongs to (None when unknown)."""
        if self.kinds and kind not in self.kinds:
            return False
        if self.types and record_type not in self.types:
            return False
        if self.id_min is not None and record_id < self.id_min:
            return False
        if self.id_max is not None and record_id > self.id_max:
            return False
        return self.address is None or address == self.address
