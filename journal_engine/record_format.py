"""The record format in one home: frame kinds, the message store's user record types (Artemis
numbers), the bodies they carry, the replaceable types, and the delivery-count shadow's layout.

A leaf: it imports only errors and limits, so the compiled core, the twins, both stores and the tools
take every format fact from here (the compiled modules check their own constants against it when
they are imported). File-level facts (names, the file header) are in storage/journal/format.py.

Record ids and bodies (all integers little-endian, as in the rest of the journal format):

| type | name                         | journal op | record id   | body                                   |
|------|------------------------------|------------|-------------|----------------------------------------|
| 21   | QUEUE_BINDING_RECORD         | add        | queue id    | queue encoding (bindings journal)      |
| 45   | ADD_MESSAGE (Artemis ADD_MESSAGE_PROTOCOL) | add | message id | message encoding                |
| 32   | ADD_REF                      | update     | message id  | u64 queue id (8 bytes)                 |
| 33   | ACKNOWLEDGE_REF              | update     | message id  | u64 queue id (8 bytes)                 |
| 34   | UPDATE_DELIVERY_COUNT        | update     | message id  | u64 queue id, u32 count (12 bytes)     |
| 36   | SET_SCHEDULED_DELIVERY_TIME  | update     | message id  | u64 queue id, u64 epoch ms (16 bytes)  |
| 37   | DUPLICATE_ID                 | add        | its own id  | address (u32 length + UTF-8), then the duplicate id (u32 length + bytes) |

A DUPLICATE_ID record is one entry of an address's duplicate-id cache (Artemis's DuplicateIDEncoding):
written in the same record group or transaction as the message that brought the id, deleted when
the cache's ring overwrites it. Its record id comes from the message ids' counter.

A message body (45) starts with MESSAGE_HEAD: u8 format version, u8 flags, u8 routing type, u8
priority, i64 expiration ms. Version 1 (every message of the default priority, 4) has a zero byte
where version 2 has the priority (0-9): a message of the default priority is written as version 1,
byte for byte as before priorities, so journals written before read unchanged, and a reader of
version 1 only refuses the messages it would misread.

Artemis encodes the same fields big-endian (Java); the sizes and meanings are the same.
The compiled writer (pyx/journal_engine/_record_writer.pyx) encodes 32, 33, 34, 36 and the message
head itself, byte for byte as the encoders below, from the constants it checks against this module.
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from .errors import CorruptRecordError
from .limits import FRAME_HEADER_SIZE_BYTES, I64_MAX, I64_MIN, PRIORITY_DEFAULT, PRIORITY_MAX, PRIORITY_MIN


class RecordKind(enum.IntEnum):
    """The first byte after the frame's length: what the frame does (Artemis numbers)."""

    ADD = 11
    UPDATE = 12
    ADD_TX = 13
    UPDATE_TX = 14
    DELETE_TX = 15
    DELETE = 16
    PREPARE = 17
    COMMIT = 18
    ROLLBACK = 19
    PAD = 20
    GROUP = 21    # heads a record group: its body is GROUP_BODY; the frames it covers carry GROUP_MEMBER


#: The frame header, the one statement of its layout (docs/internals/format.md): u32 CRC32C of the
#: frame from byte 4 to the end of its body, u32 body length, u8 kind, u8 user record type, u16 flags,
#: u32 stamp (the low 32 bits of the file id), u64 record id, u64 transaction id; then the body and
#: zero padding to a multiple of 8. The twins read and write it through FRAME_HEADER and FrameField;
#: the compiled codec's offsets (_codec.pxd) are checked against FrameField when it is imported.
FRAME_HEADER = struct.Struct("<IIBBHIQQ")


class FrameField(enum.IntEnum):
    """Where each field of the frame header starts (bytes from the frame's first byte)."""

    CRC = 0
    BODY_LENGTH = 4
    KIND = 8
    RECORD_TYPE = 9
    FLAGS = 10
    STAMP = 12
    RECORD_ID = 16
    TX_ID = 24


def _field_offsets(layout: struct.Struct) -> list[int]:
    """The offset of each field of a packed little-endian layout, in order."""
    codes = layout.format.lstrip("<")
    return [struct.calcsize("<" + codes[:index]) for index in range(len(codes))]


if FRAME_HEADER.size != FRAME_HEADER_SIZE_BYTES or _field_offsets(FRAME_HEADER) != [int(f) for f in FrameField]:
    raise ImportError("record_format: FRAME_HEADER, FrameField and limits.FRAME_HEADER_SIZE_BYTES disagree")


def check_compiled(module: str, facts: dict) -> None:
    """A compiled module's import-time check that the constants compiled into it are this module's:
    `facts` maps what is checked to (the compiled value, this module's value). ImportError naming
    each mismatch (an ``if``, not an ``assert``: ``python -O`` must not skip it)."""
    wrong = [f"{what}: compiled {compiled!r}, record_format {expected!r}"
             for what, (compiled, expected) in facts.items() if compiled != expected]
    if wrong:
        raise ImportError(f"{module} was built from another record format ({'; '.join(wrong)}): rebuild it "
                          f"(pip install -e .)")


#: the frame flag (u16 at offset 10) of a frame inside a record group; no other flag exists. A reader
#: applies a member only after it checked the whole group (GROUP_BODY's count, length and CRC32C), so
#: a group a power cut tore is recovered whole or not at all (docs/internals/format.md)
GROUP_MEMBER = 1
#: the kinds a record group holds
GROUP_MEMBER_KINDS = frozenset((RecordKind.ADD, RecordKind.UPDATE, RecordKind.DELETE))
#: the body of a GROUP frame: u32 number of member frames, u32 bytes of the member frames (from the end
#: of the GROUP frame), u32 CRC32C of those bytes, u32 zero
GROUP_BODY = struct.Struct("<IIII")


class FrameCheck(enum.IntEnum):
    """What a reader finds at a frame position."""

    VALID = 0
    ZERO = 1      # never written
    FOREIGN = 2   # stamped for another file id: left over in a recycled file
    INVALID = 3   # stamped for this file, but torn or damaged


class RecordType(enum.IntEnum):
    """User record types of the message store, numbered as Artemis's JournalRecordIds (public, permanent)."""

    QUEUE_BINDING_RECORD = 21
    ID_COUNTER = 24         # bindings journal: every message id below its value may have been handed out
    ADD_REF = 32
    ACKNOWLEDGE_REF = 33
    UPDATE_DELIVERY_COUNT = 34
    SET_SCHEDULED_DELIVERY_TIME = 36
    DUPLICATE_ID = 37       # an address's duplicate-id cache entry (message journal)
    ADD_MESSAGE = 45        # Artemis ADD_MESSAGE_PROTOCOL; its legacy ADD_MESSAGE (31) is not used


#: the delivery-count and scheduled-time updates replace each other per (message, first 8 body bytes = queue id)
REPLACEABLE_TYPES = {int(RecordType.UPDATE_DELIVERY_COUNT): 8, int(RecordType.SET_SCHEDULED_DELIVERY_TIME): 8}

#: the bodies of ADD_REF / ACKNOWLEDGE_REF / ID_COUNTER, UPDATE_DELIVERY_COUNT and SET_SCHEDULED_DELIVERY_TIME
QUEUE_ID_BODY = struct.Struct("<Q")
DELIVERY_COUNT_BODY = struct.Struct("<QI")
SCHEDULED_TIME_BODY = struct.Struct("<QQ")
DELIVERY_COUNT_BODY_BYTES = DELIVERY_COUNT_BODY.size      # 12, as Artemis's DeliveryCountUpdateEncoding
SCHEDULED_TIME_BODY_BYTES = SCHEDULED_TIME_BODY.size      # 16, as Artemis's ScheduledDeliveryEncoding

ROUTING_TYPES = {None: 0, "anycast": 1, "multicast": 2}
_ROUTING_NAMES = {code: name for name, code in ROUTING_TYPES.items()}
QUEUE_ROUTING_TYPES = ("anycast", "multicast")

MESSAGE_FORMAT_VERSION = 1
MESSAGE_WITH_PRIORITY_FORMAT_VERSION = 2        # version 1 with the priority where version 1 has a zero byte
MESSAGE_FORMAT_VERSIONS = (MESSAGE_FORMAT_VERSION, MESSAGE_WITH_PRIORITY_FORMAT_VERSION)
QUEUE_FORMAT_VERSION = 1
QUEUE_WITH_ARGUMENTS_FORMAT_VERSION = 2         # version 1 and a property map of queue-declare arguments
#: a queue's auto-delete rule, kept in version 2's property map under names no queue-declare argument may take
#: (Artemis's PersistentQueueBindingEncoding keeps autoCreated, autoDelete, autoDeleteDelay and
#: autoDeleteMessageCount with the binding): a property map, not a version 3, so that every reader of
#: version 2 (the compiled column decoder too) reads these records unchanged
QUEUE_AUTO_CREATED_ARGUMENT = "_JE_AUTO_CREATED"                      # True when present
QUEUE_AUTO_DELETE_DELAY_ARGUMENT = "_JE_AUTO_DELETE_DELAY"            # ms; present only on an auto-deleting queue
QUEUE_AUTO_DELETE_MESSAGE_COUNT_ARGUMENT = "_JE_AUTO_DELETE_MESSAGE_COUNT"   # messages, -1: any number
_QUEUE_OWN_ARGUMENTS = (QUEUE_AUTO_CREATED_ARGUMENT, QUEUE_AUTO_DELETE_DELAY_ARGUMENT,
                        QUEUE_AUTO_DELETE_MESSAGE_COUNT_ARGUMENT)
MESSAGE_HEAD = struct.Struct("<BBBBq")         # version, flags, routing type, priority (version 1: 0), expiration ms
QUEUE_HEAD = struct.Struct("<BBBx")            # version, routing type, has filter, pad
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
FLAG_DURABLE = 1

# the delivery-count shadow (message_store/delivery_shadow.py): a header, then fixed-size entries, each with its CRC
SHADOW_MAGIC = b"JESHADOW"
SHADOW_VERSION = 1
SHADOW_HEADER_BYTES = 64
SHADOW_ENTRY_BYTES = 32
SHADOW_HEADER = struct.Struct("<8sIII16s")    # magic, version, life, epoch, boot id; then the CRC
SHADOW_ENTRY = struct.Struct("<QQIII")        # queue id, message id, value, epoch, life; then the CRC
if not (SHADOW_HEADER.size + 4 <= SHADOW_HEADER_BYTES and SHADOW_ENTRY.size + 4 == SHADOW_ENTRY_BYTES):
    raise ImportError("record_format: the shadow's header or entry does not fit its size")



class PropertyTag(enum.IntEnum):
    """The byte before each property value of a message body: the value's type."""

    NONE = 0
    STR = 1      # u32 length, UTF-8
    INT = 2      # i64
    FLOAT = 3    # f64
    FALSE = 4
    TRUE = 5
    BYTES = 6    # u32 length, bytes


_TAG_NONE, _TAG_STR, _TAG_INT, _TAG_FLOAT, _TAG_FALSE, _TAG_TRUE, _TAG_BYTES = (int(tag) for tag in PropertyTag)
PROPERTY_KEY_BYTES_MAX = 0xFFFF

#: The stored property that keeps a message's own id on a copy that has another id in the store (an
#: ActiveMQ Classic or Qpid dead-letter copy keeps the id of the message it copies); never shown to consumers.
MESSAGE_ID_PROPERTY = "_JE_MESSAGE_ID"

@dataclass(frozen=True)
class StoredMessage:
    """A message as the store keeps it (ADD_MESSAGE, type 45)."""

    message_id: int
    address: str
    body: bytes
    properties: dict = field(default_factory=dict)
    durable: bool = True
    expiration: int = 0                 # epoch ms; 0 = never expires
    routing_type: str | None = None     # None, "anycast" or "multicast"
    priority: int = PRIORITY_DEFAULT    # 0-9, higher first


@dataclass(frozen=True)
class StoredQueue:
    """A queue binding (QUEUE_BINDING_RECORD, type 21), kept in the bindings journal."""

    queue_id: int
    name: str
    address: str
    routing_type: str = "anycast"
    filter: str | None = None
    arguments: dict | None = None   # queue-declare arguments (Qpid's), kept with the binding
    auto_created: bool = False      # made by the broker (a dead-letter or expiry resource), not declared
    auto_delete: tuple[int, int] | None = None  # (delay ms, message count) of an auto-deleting queue, else None


# ----- small bodies --------------------------------------------------------------------------------

def encode_queue_id(queue_id: int) -> bytes:
    """Body of ADD_REF (32) and ACKNOWLEDGE_REF (33)."""
    return QUEUE_ID_BODY.pack(queue_id)


def encode_delivery_count(queue_id: int, delivery_count: int) -> bytes:
    """Body of UPDATE_DELIVERY_COUNT (34): u64 queue id, u32 count."""
    return DELIVERY_COUNT_BODY.pack(queue_id, delivery_count)


def encode_scheduled_time(queue_id: int, scheduled_ms: int) -> bytes:
    """Body of SET_SCHEDULED_DELIVERY_TIME (36): u64 queue id, u64 absolute epoch ms."""
    return SCHEDULED_TIME_BODY.pack(queue_id, scheduled_ms)


def encode_id_counter(next_id: int) -> bytes:
    """Body of ID_COUNTER (24): u64, the first message id not yet reserved."""
    return QUEUE_ID_BODY.pack(next_id)


def decode_id_counter(body: bytes, *, record_id: int, path=None) -> int:
    """The u64 of an ID_COUNTER (24) body; CorruptRecordError for any other length."""
    if len(body) != QUEUE_ID_BODY.size:
        raise _corrupt(record_id, RecordType.ID_COUNTER, f"body is {len(body)} bytes, expected {QUEUE_ID_BODY.size}",
                       path, what="bindings")
    return QUEUE_ID_BODY.unpack(body)[0]


def decode_queue_id(body: bytes, *, message_id: int, record_type: int, path=None) -> int:
    """The u64 queue id that is the whole body of ADD_REF (32) and ACKNOWLEDGE_REF (33);
    CorruptRecordError (naming the message, the record type and ``path``) for any other length."""
    if len(body) != QUEUE_ID_BODY.size:
        raise _corrupt(message_id, record_type, f"body is {len(body)} bytes, expected {QUEUE_ID_BODY.size}", path)
    return QUEUE_ID_BODY.unpack(body)[0]


def decode_delivery_count(body: bytes, *, message_id: int, path=None) -> tuple[int, int]:
    """(queue id, count) of an UPDATE_DELIVERY_COUNT body."""
    if len(body) != DELIVERY_COUNT_BODY_BYTES:
        raise _corrupt(message_id, RecordType.UPDATE_DELIVERY_COUNT,
                       f"body is {len(body)} bytes, expected {DELIVERY_COUNT_BODY_BYTES}", path)
    return DELIVERY_COUNT_BODY.unpack(body)


def decode_scheduled_time(body: bytes, *, message_id: int, path=None) -> tuple[int, int]:
    """(queue id, epoch ms) of a SET_SCHEDULED_DELIVERY_TIME body."""
    if len(body) != SCHEDULED_TIME_BODY_BYTES:
        raise _corrupt(message_id, RecordType.SET_SCHEDULED_DELIVERY_TIME,
                       f"body is {len(body)} bytes, expected {SCHEDULED_TIME_BODY_BYTES}", path)
    return SCHEDULED_TIME_BODY.unpack(body)


def encode_duplicate_id(address: str, duplicate_id: bytes) -> bytes:
    """Body of DUPLICATE_ID (37): the address whose cache holds the id, then the id's bytes."""
    out = bytearray()
    _put_text(out, address, "address")
    out += _U32.pack(len(duplicate_id))
    out += duplicate_id
    return bytes(out)


def decode_duplicate_id(record_id: int, body: bytes, *, path=None) -> tuple[str, bytes]:
    """(address, duplicate id) of a DUPLICATE_ID body; CorruptRecordError for a malformed one."""
    reader = _Reader(bytes(body), record_id, RecordType.DUPLICATE_ID, path, "duplicate-id")
    address = reader.text("address")
    (size,) = reader.unpack(_U32, "duplicate id length")
    duplicate_id = reader.take(size, "duplicate id")
    reader.end()
    return address, duplicate_id


def _corrupt(record_id: int, record_type: int, why: str, path, *, what: str = "message") -> CorruptRecordError:
    try:
        type_name = f"{RecordType(record_type).name} ({int(record_type)})"
    except ValueError:
        type_name = str(record_type)
    return CorruptRecordError(f"{what} record {record_id}, type {type_name}: {why}", path=path,
                              field=type_name,
                              hint="the frame's checksum is valid, so the body was written this way: by another "
                                   "program or another format version; `journal-engine print` shows it")


# ----- strings and properties ------------------------------------------------------------------------

def _put_text(out: bytearray, text: str, what: str) -> None:
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str, not {type(text).__name__}")
    raw = text.encode("utf-8")
    out += _U32.pack(len(raw))
    out += raw


class _Reader:
    """Bounds-checked reads from a body; every failure is a CorruptRecordError naming the record."""

    __slots__ = ("body", "pos", "record_id", "record_type", "path", "what")

    def __init__(self, body: bytes, record_id: int, record_type: int, path, what: str) -> None:
        self.body = body
        self.pos = 0
        self.record_id = record_id
        self.record_type = record_type
        self.path = path
        self.what = what

    def fail(self, why: str) -> CorruptRecordError:
        return _corrupt(self.record_id, self.record_type, f"{why} at body offset {self.pos}", self.path,
                        what=self.what)

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.body):
            raise self.fail(f"{what} needs {n} bytes, {len(self.body) - self.pos} left")
        start = self.pos
        self.pos += n
        return self.body[start:self.pos]

    def unpack(self, st: struct.Struct, what: str):
        return st.unpack(self.take(st.size, what))

    def text(self, what: str) -> str:
        (n,) = self.unpack(_U32, f"{what} length")
        raw = self.take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"{what} is not UTF-8 ({exc.reason})") from None

    def end(self) -> None:
        if self.pos != len(self.body):
            raise self.fail(f"{len(self.body) - self.pos} unexpected bytes after the last field")


def _put_property(out: bytearray, key, value) -> None:
    if not isinstance(key, str):
        raise TypeError(f"property names must be str, not {type(key).__name__} ({key!r})")
    raw_key = key.encode("utf-8")
    if len(raw_key) > PROPERTY_KEY_BYTES_MAX:
        raise ValueError(f"property name of {len(raw_key)} bytes; at most {PROPERTY_KEY_BYTES_MAX}")
    out += _U16.pack(len(raw_key))
    out += raw_key
    if value is None:
        out.append(_TAG_NONE)
    elif value is True:
        out.append(_TAG_TRUE)
    elif value is False:
        out.append(_TAG_FALSE)
    elif isinstance(value, str):
        out.append(_TAG_STR)
        _put_text(out, value, f"property {key!r}")
    elif isinstance(value, int):
        if not I64_MIN <= value <= I64_MAX:
            raise OverflowError(f"property {key!r}={value}: integers are stored as signed 64-bit")
        out.append(_TAG_INT)
        out += _I64.pack(value)
    elif isinstance(value, float):
        out.append(_TAG_FLOAT)
        out += _F64.pack(value)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        out.append(_TAG_BYTES)
        out += _U32.pack(len(raw))
        out += raw
    else:
        raise TypeError(f"property {key!r} has a value of type {type(value).__name__}; "
                        "use str, int, float, bool, bytes or None")


def _get_property_value(reader: _Reader, key: str):
    (tag,) = reader.take(1, f"type tag of property {key!r}")
    if tag == _TAG_NONE:
        return None
    if tag == _TAG_TRUE:
        return True
    if tag == _TAG_FALSE:
        return False
    if tag == _TAG_STR:
        return reader.text(f"property {key!r}")
    if tag == _TAG_INT:
        return reader.unpack(_I64, f"property {key!r}")[0]
    if tag == _TAG_FLOAT:
        return reader.unpack(_F64, f"property {key!r}")[0]
    if tag == _TAG_BYTES:
        (n,) = reader.unpack(_U32, f"length of property {key!r}")
        return reader.take(n, f"property {key!r}")
    reader.pos -= 1
    raise reader.fail(f"unknown type tag {tag} of property {key!r}")


def _put_properties(out: bytearray, properties: dict) -> None:
    out += _U32.pack(len(properties))
    for key, value in properties.items():
        _put_property(out, key, value)


def _get_properties(reader: _Reader) -> dict:
    (count,) = reader.unpack(_U32, "property count")
    properties = {}
    for _ in range(count):
        (key_len,) = reader.unpack(_U16, "property name length")
        raw_key = reader.take(key_len, "property name")
        try:
            key = raw_key.decode("utf-8")
        except UnicodeDecodeError:
            raise reader.fail("a property name is not UTF-8") from None
        properties[key] = _get_property_value(reader, key)
    return properties


# ----- messages ----------------------------------------------------------------------------------------

def _message_head(durable, routing_code: int, expiration: int, priority: int) -> bytes:
    """MESSAGE_HEAD's bytes: version 1 for the default priority (the bytes written before priorities),
    else version 2 carrying it."""
    if priority == PRIORITY_DEFAULT:
        return MESSAGE_HEAD.pack(MESSAGE_FORMAT_VERSION, FLAG_DURABLE if durable else 0, routing_code, 0, expiration)
    return MESSAGE_HEAD.pack(MESSAGE_WITH_PRIORITY_FORMAT_VERSION, FLAG_DURABLE if durable else 0, routing_code,
                             priority, expiration)


def encode_message(address: str, body, *, properties: dict | None = None, durable: bool = True,
                   expiration: int = 0, routing_type: str | None = None, priority: int = PRIORITY_DEFAULT) -> bytes:
    """Body of ADD_MESSAGE (45): version, flags, routing type, priority, expiration, address, body, properties."""
    if routing_type not in ROUTING_TYPES:
        raise ValueError(f"routing_type={routing_type!r}: use None, 'anycast' or 'multicast'")
    if not isinstance(expiration, int) or isinstance(expiration, bool) or not 0 <= expiration <= I64_MAX:
        raise ValueError(f"expiration={expiration!r}: an epoch time in ms >= 0 (0 = never)")
    if type(priority) is not int or not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ValueError(f"priority={priority!r}: an int from {PRIORITY_MIN} to {PRIORITY_MAX}")
    out = bytearray(_message_head(durable, ROUTING_TYPES[routing_type], expiration, priority))
    _put_text(out, address, "address")
    raw_body = bytes(body)
    out += _U32.pack(len(raw_body))
    out += raw_body
    _put_properties(out, properties or {})
    return bytes(out)


def decode_message(message_id: int, data: bytes, *, path=None) -> StoredMessage:
    """The inverse of encode_message; a malformed body raises CorruptRecordError naming the record."""
    reader = _Reader(bytes(data), message_id, RecordType.ADD_MESSAGE, path, "message")
    version, flags, routing, priority, expiration = reader.unpack(MESSAGE_HEAD, "message header")
    if version not in MESSAGE_FORMAT_VERSIONS:
        reader.pos = 0
        raise reader.fail(f"message format version {version}; this version reads {MESSAGE_FORMAT_VERSION} and "
                          f"{MESSAGE_WITH_PRIORITY_FORMAT_VERSION}")
    if version == MESSAGE_FORMAT_VERSION:
        priority = PRIORITY_DEFAULT     # the byte is padding
    elif priority > PRIORITY_MAX:
        reader.pos = 3
        raise reader.fail(f"priority {priority}; at most {PRIORITY_MAX}")
    if routing not in _ROUTING_NAMES:
        reader.pos = 2
        raise reader.fail(f"unknown routing type code {routing}")
    if flags & ~FLAG_DURABLE:
        reader.pos = 1
        raise reader.fail(f"unknown flag bits {flags:#x}")
    if expiration < 0:
        reader.pos = 4
        raise reader.fail(f"negative expiration {expiration}")
    address = reader.text("address")
    (body_len,) = reader.unpack(_U32, "body length")
    body = reader.take(body_len, "body")
    properties = _get_properties(reader)
    reader.end()
    return StoredMessage(message_id, address, body, properties, bool(flags & FLAG_DURABLE), expiration,
                         _ROUTING_NAMES[routing], priority)


# ----- queues --------------------------------------------------------------------------------------------

def encode_queue(name: str, address: str, *, routing_type: str = "anycast", filter: str | None = None,
                 arguments: dict | None = None, auto_created: bool = False,
                 auto_delete: tuple[int, int] | None = None) -> bytes:
    """Body of QUEUE_BINDING_RECORD (21): version, routing type, filter flag, name, address, filter;
    with queue-declare ``arguments`` or an auto-delete rule, version 2 and a property map after them:
    the arguments and the rule's own entries (``_QUEUE_OWN_ARGUMENTS``; an argument of those names is
    refused, ValueError). A queue with neither is written as version 1, byte for byte as before."""
    if routing_type not in QUEUE_ROUTING_TYPES:
        raise ValueError(f"routing_type={routing_type!r}: use 'anycast' or 'multicast'")
    stored = dict(arguments) if arguments else {}
    for key in _QUEUE_OWN_ARGUMENTS:
        if key in stored:
            raise ValueError(f"queue argument {key!r}: the name is the store's own (a queue's auto-delete rule)")
    if auto_created:
        stored[QUEUE_AUTO_CREATED_ARGUMENT] = True
    if auto_delete is not None:
        stored[QUEUE_AUTO_DELETE_DELAY_ARGUMENT], stored[QUEUE_AUTO_DELETE_MESSAGE_COUNT_ARGUMENT] = auto_delete
    version = QUEUE_WITH_ARGUMENTS_FORMAT_VERSION if stored else QUEUE_FORMAT_VERSION
    out = bytearray(QUEUE_HEAD.pack(version, ROUTING_TYPES[routing_type], filter is not None))
    _put_text(out, name, "queue name")
    _put_text(out, address, "address")
    _put_text(out, filter if filter is not None else "", "filter")
    if stored:
        _put_properties(out, stored)
    return bytes(out)


def decode_queue(queue_id: int, data: bytes, *, path=None) -> StoredQueue:
    """The StoredQueue of a QUEUE_BINDING_RECORD body (the inverse of ``encode_queue``);
    CorruptRecordError for another format version, a bad routing type, a truncated field or an
    auto-delete entry of the wrong type."""
    reader = _Reader(bytes(data), queue_id, RecordType.QUEUE_BINDING_RECORD, path, "queue")
    version, routing, has_filter = reader.unpack(QUEUE_HEAD, "queue header")
    if version not in (QUEUE_FORMAT_VERSION, QUEUE_WITH_ARGUMENTS_FORMAT_VERSION):
        reader.pos = 0
        raise reader.fail(f"queue format version {version}; this version reads {QUEUE_FORMAT_VERSION} and "
                          f"{QUEUE_WITH_ARGUMENTS_FORMAT_VERSION}")
    if routing not in (1, 2):
        reader.pos = 1
        raise reader.fail(f"unknown routing type code {routing}")
    if has_filter not in (0, 1):
        reader.pos = 2
        raise reader.fail(f"filter flag {has_filter}")
    name = reader.text("queue name")
    address = reader.text("address")
    text = reader.text("filter")
    arguments = _get_properties(reader) if version == QUEUE_WITH_ARGUMENTS_FORMAT_VERSION else {}
    reader.end()
    auto_created = arguments.pop(QUEUE_AUTO_CREATED_ARGUMENT, False)
    delay = arguments.pop(QUEUE_AUTO_DELETE_DELAY_ARGUMENT, None)
    count = arguments.pop(QUEUE_AUTO_DELETE_MESSAGE_COUNT_ARGUMENT, None)
    if (auto_created is not True and auto_created is not False) or (delay is None) != (count is None) or not all(
            value is None or (type(value) is int and value >= -1) for value in (delay, count)):
        raise reader.fail(f"auto-delete entries {auto_created!r}, {delay!r}, {count!r}: expected True, "
                          "and two integers or none")
    return StoredQueue(queue_id, name, address, _ROUTING_NAMES[routing], text if has_filter else None,
                       arguments or None, auto_created, (delay, count) if delay is not None else None)


# ----- the common message, fast ----------------------------------------------------------------------

_U32_PACK = _U32.pack
_NO_PROPERTIES = _U32_PACK(0)
_PREFIXES: dict = {}            # (address, durable, routing type) -> encoded head (expiration 0) + address
_PREFIXES_MAX = 4096
_TEXT_PROPERTIES: dict = {}     # tuple of (name, str value) -> their encoded property map
_TEXT_PROPERTIES_MAX = 1024


def cached_message_head(address, durable, routing_type) -> bytes | None:
    """The bytes of a message record before its body (head, address) for a message with no properties
    and no expiration, once encode_plain_message has encoded one such; None before that. The compiled
    record writer appends the body length, the body and the empty property count after it."""
    return _PREFIXES.get((address, durable, routing_type))


def _text_properties(properties: dict) -> bytes | None:
    """The encoded property map of ``properties`` when every value is a str (a STOMP SEND's headers
    kept as properties), from a cache of the maps seen lately: a producer's headers repeat. None for
    any other map. Keys are checked as encode_message checks them, on the first encoding."""
    items = tuple(properties.items())
    try:
        block = _TEXT_PROPERTIES.get(items)     # only maps of str values are kept: a hit is one
    except TypeError:                           # an unhashable value (a bytearray): not a text map
        return None
    if block is None:
        for _, value in items:
            if type(value) is not str:
                return None
        out = bytearray()
        _put_properties(out, properties)
        block = bytes(out)
        if len(_TEXT_PROPERTIES) >= _TEXT_PROPERTIES_MAX:
            _TEXT_PROPERTIES.clear()
        _TEXT_PROPERTIES[items] = block
    return block


def encode_plain_message(address, body, properties, durable, expiration, routing_type,
                         priority=PRIORITY_DEFAULT) -> bytes:
    """encode_message's bytes for the common message (no properties, or text properties), in a
    fraction of its time: the head and the address of messages without an expiration are encoded
    once per address, a map of text properties once while it is in a small cache. Anything else (or
    anything invalid) goes through encode_message itself. Byte-identical output is checked in
    tests/broker/test_broker_store.py. Only messages of the default priority take the fast path."""
    if type(priority) is not int or priority != PRIORITY_DEFAULT:
        return encode_message(address, body, properties=properties, durable=durable, expiration=expiration,
                              routing_type=routing_type, priority=priority)
    if type(body) is bytes and type(expiration) is int and expiration == 0:
        prefix = _PREFIXES.get((address, durable, routing_type))
        if prefix is not None:
            if not properties:
                return b"".join((prefix, _U32_PACK(len(body)), body, _NO_PROPERTIES))
            if type(properties) is dict and (block := _text_properties(properties)) is not None:
                return b"".join((prefix, _U32_PACK(len(body)), body, block))
    if (type(address) is not str or type(body) is not bytes or type(expiration) is not int
            or not 0 <= expiration <= I64_MAX or routing_type not in ROUTING_TYPES
            or (durable is not True and durable is not False)
            or (properties and (type(properties) is not dict or (block := _text_properties(properties)) is None))):
        return encode_message(address, body, properties=properties, durable=durable, expiration=expiration,
                              routing_type=routing_type)
    raw = address.encode("utf-8")
    head = _message_head(durable, ROUTING_TYPES[routing_type], expiration, PRIORITY_DEFAULT)
    prefix = head + _U32_PACK(len(raw)) + raw
    if expiration == 0:
        if len(_PREFIXES) >= _PREFIXES_MAX:
            _PREFIXES.clear()
        _PREFIXES[(address, durable, routing_type)] = prefix
    return b"".join((prefix, _U32_PACK(len(body)), body, block if properties else _NO_PROPERTIES))


# ----- any message-store body ----------------------------------------------------------------------------

def decode_store_body(record_type: int, record_id: int, body: bytes, *, path=None):
    """The body of a message-store record decoded by its user record type: a StoredMessage (45), a
    StoredQueue (21), the queue id (32, 33), (queue id, count) (34), (queue id, epoch ms) (36),
    (address, duplicate id) (37); None
    for a type the message store does not write. CorruptRecordError for a malformed body."""
    if record_type == RecordType.ADD_MESSAGE:
        return decode_message(record_id, body, path=path)
    if record_type in (RecordType.ADD_REF, RecordType.ACKNOWLEDGE_REF):
        return decode_queue_id(body, message_id=record_id, record_type=record_type, path=path)
    if record_type == RecordType.UPDATE_DELIVERY_COUNT:
        return decode_delivery_count(body, message_id=record_id, path=path)
    if record_type == RecordType.SET_SCHEDULED_DELIVERY_TIME:
        return decode_scheduled_time(body, message_id=record_id, path=path)
    if record_type == RecordType.QUEUE_BINDING_RECORD:
        return decode_queue(record_id, body, path=path)
    if record_type == RecordType.DUPLICATE_ID:
        return decode_duplicate_id(record_id, body, path=path)
    return None
