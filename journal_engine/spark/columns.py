"""The rows of the Spark source: the documented schema, and Arrow batches built from the decoders' columns.

A file's frames come from the scan decoder as columns (``FrameColumns``: offsets, kinds, ids, bodies
concatenated), the message store's fields from the batch decoder of store bodies (``MessageColumns``);
both are C buffers that Arrow wraps without copying. What is computed here runs once per column, in
Arrow or numpy, never once per row in Python — except for the rare damage rows.

Spark takes a batch only when its Arrow schema is exactly the declared one, so strings and binaries
use int32 offsets (a file's bodies are at most ``limits.FILE_SIZE_MAX_BYTES``, 2 GiB) and the map of
properties has non-null keys.

Every array is made from its buffers (``pa.Array.from_buffers``), never with ``pa.array``: given Python
objects or a numpy array, ``pa.array`` imports pandas, which is most of the start of each Python
process Spark forks for the source (a planning process per query, the workers) — a second of CPU
each on a busy machine, for a library the source does not use.
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._impl import ROUTING_NAMES, decode_message_columns
from ..errors import ConfigError, CorruptRecordError
from ..record_format import RecordKind, decode_store_body

PROPERTIES_TYPE = pa.map_(pa.field("key", pa.string(), nullable=False), pa.string())


# Spark SQL's name of each Arrow type the columns use
_SPARK_TYPES = {pa.string(): "string", pa.int64(): "bigint", pa.int32(): "int", pa.bool_(): "boolean",
                pa.binary(): "binary", PROPERTIES_TYPE: "map<string,string>"}


@dataclass(frozen=True)
class Column:
    name: str
    arrow_type: pa.DataType
    meaning: str

    @property
    def spark_type(self) -> str:
        """The column's type in Spark SQL (the source's declared schema)."""
        return _SPARK_TYPES[self.arrow_type]


#: the schema, in order (docs/spark.md prints this table)
COLUMNS = (
    Column("path", pa.string(), "the journal file the record is in (live=true: the journal's directory)"),
    Column("file_id", pa.int64(), "the file's id (its frames carry its low 32 bits)"),
    Column("sequence", pa.int64(), "the file's place in replay order"),
    Column("offset", pa.int64(), "where the frame (or the damaged region) starts in the file"),
    Column("frame_size", pa.int64(), "bytes of the frame with its padding (a damaged region: its bytes)"),
    Column("kind", pa.string(), "ADD, UPDATE, ADD_TX, UPDATE_TX, DELETE_TX, DELETE, PREPARE, COMMIT, "
                                "ROLLBACK, PAD or GROUP (heads a record group checked whole); null on "
                                "a damage row"),
    Column("record_id", pa.int64(), "the record id (the message id in the message journal, the queue id "
                                    "in the bindings journal); ids past 2^63 - 1 read negative"),
    Column("record_type", pa.int32(), "the user record type: 45 message, 32 reference, 33 acknowledgement, "
                                      "34 delivery count, 36 scheduled time, 21 queue, ..."),
    Column("tx_id", pa.int64(), "the transaction id (0 outside transactions)"),
    Column("body_size", pa.int64(), "bytes of the record's body"),
    Column("body", pa.binary(), "the record's body as written"),
    Column("damage", pa.string(), "null for a record; on a damage row, what the reader reports there "
                                  "(a damaged region, a torn tail, a file cut short, a store body that "
                                  "does not decode)"),
    Column("address", pa.string(), "a message's address (45) or a queue's address (21)"),
    Column("queue_id", pa.int64(), "the queue of a reference record (32, 33, 34, 36); a queue's id (21)"),
    Column("queue_name", pa.string(), "a queue's name (21)"),
    Column("delivery_count", pa.int64(), "the persisted delivery count (34)"),
    Column("scheduled_time", pa.int64(), "the scheduled delivery time, epoch ms (36)"),
    Column("expiration", pa.int64(), "a message's expiration, epoch ms, 0 = never (45)"),
    Column("durable", pa.bool_(), "whether a message is durable (45)"),
    Column("routing_type", pa.string(), "anycast or multicast (45: null when none; 21)"),
    Column("priority", pa.int32(), "a message's priority, 0-9, higher first (45)"),
    Column("message_size", pa.int64(), "bytes of a message's body (45)"),
    Column("properties", PROPERTIES_TYPE,
           "a message's properties (45): str values as they are, int in decimal, float as Python's repr, "
           "true/false, bytes in hex, None as null"),
)
SPARK_SCHEMA = ", ".join(f"`{column.name}` {column.spark_type}" for column in COLUMNS)
_BY_NAME = {column.name: column for column in COLUMNS}
_MESSAGE_COLUMNS = frozenset(("address", "queue_id", "queue_name", "delivery_count", "scheduled_time", "expiration",
                              "durable", "routing_type", "priority", "message_size", "properties"))


def projection(fields) -> tuple[Column, ...]:
    """The columns a user-given schema asks for, in its order: ``(name, Spark type)`` pairs, each one of
    COLUMNS with the same type (``spark.read.format(...).schema("record_id bigint, kind string")``:
    only those columns are built and sent to Spark). ConfigError naming a column it does not have."""
    chosen = []
    for name, spark_type in fields:
        column = _BY_NAME.get(name)
        if column is None or column.spark_type != spark_type.replace(" ", ""):
            raise ConfigError("schema", f"{name} {spark_type}",
                              "not a column of the journal_engine source" if column is None
                              else f"the column {name} is {column.spark_type}",
                              hint="give a subset of the documented schema (docs/spark.md), or no schema")
        chosen.append(column)
    return tuple(chosen)


def needs_store_fields(columns) -> bool:
    """Whether the message store's bodies must be decoded for these columns (``damage`` reports bodies
    that do not decode)."""
    return any(column.name in _MESSAGE_COLUMNS or column.name == "damage" for column in columns)


def text_array(values) -> pa.Array:
    """An Arrow string array of ``values`` (str, or None for null), made from its buffers."""
    encoded = [b"" if value is None else value.encode("utf-8") for value in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(text) for text in encoded], out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise OverflowError(f"{offsets[-1]} bytes of text pass Arrow's 2 GiB string limit")
    valid = np.packbits(np.array([value is not None for value in values], dtype=bool), bitorder="little")
    return _strings(len(encoded), offsets.astype(np.int32), b"".join(encoded), valid.tobytes())


_FRAME_COLUMNS = ("path", "file_id", "sequence", "offset", "frame_size", "kind", "record_id", "record_type",
                  "tx_id", "body_size", "body")


class LiveRecords:
    """The records load() returns in the FrameColumns layout: each record's add, then its updates (the
    place in the files, the frame size and the transaction are not part of a loaded record: null)."""

    offset = size = tx_id = None

    def __init__(self, records) -> None:
        kinds, types, ids, body_offsets, bodies = bytearray(), bytearray(), array("Q"), array("q", [0]), []
        end = 0
        for record in records:
            for kind, record_type, body in ((RecordKind.ADD, record.record_type, record.body),
                                            *((RecordKind.UPDATE, *update) for update in record.updates)):
                kinds.append(kind)
                types.append(record_type)
                ids.append(record.record_id)
                bodies.append(body)
                end += len(body)
                body_offsets.append(end)
        self.count = len(kinds)
        self.check = bytes(self.count)
        self.kind, self.record_type = memoryview(bytes(kinds)), memoryview(bytes(types))
        self.record_id, self.body_offsets = memoryview(ids), memoryview(body_offsets)
        self.bodies = b"".join(bodies)


def _wrap(arrow_type: pa.DataType, rows: int, values, validity=None) -> pa.Array:
    return pa.Array.from_buffers(arrow_type, rows, [validity, pa.py_buffer(values)])


def _bitmap(bits: bytes, rows: int):
    """A validity buffer, or None when every row is valid (Arrow's cheaper form)."""
    return None if _all_set(bits, rows) else pa.py_buffer(bits)


def _all_set(bits: bytes, rows: int) -> bool:
    full, rest = divmod(rows, 8)
    return bits[:full] == b"\xff" * full and (not rest or bits[full] & ((1 << rest) - 1) == (1 << rest) - 1)


def _strings(rows: int, offsets: bytes, data: bytes, valid: bytes) -> pa.Array:
    return pa.Array.from_buffers(pa.string(), rows, [_bitmap(valid, rows), pa.py_buffer(offsets),
                                                      pa.py_buffer(data)])


def constant_strings(text: str, rows: int) -> pa.Array:
    """``rows`` copies of ``text``, built in two vectorised steps."""
    raw = text.encode("utf-8")
    offsets = np.arange(rows + 1, dtype=np.int64) * len(raw)
    if offsets[-1] > np.iinfo(np.int32).max:
        raise OverflowError(f"{rows} copies of a {len(raw)}-byte string pass Arrow's 2 GiB string limit")
    return pa.Array.from_buffers(pa.string(), rows, [None, pa.py_buffer(offsets.astype(np.int32)),
                                                      pa.py_buffer(raw * rows)])


def frame_arrays(columns, path: str | None, file_id: int | None, sequence: int | None,
                 wanted=None) -> dict[str, pa.Array]:
    """The frame part of the schema for every row of a FrameColumns (damage rows: nulls but the place);
    ``wanted``: the names to build (None: all)."""
    rows = columns.count
    damaged = np.frombuffer(columns.check, dtype=np.uint8)[:rows] != 0
    valid = pa.py_buffer(np.packbits(~damaged, bitorder="little").tobytes()) if damaged.any() else None
    body_offsets = np.frombuffer(columns.body_offsets, dtype=np.int64)
    if body_offsets[-1] > np.iinfo(np.int32).max:
        raise OverflowError(f"{path}: {body_offsets[-1]} bytes of bodies in one file pass Arrow's 2 GiB limit")
    kind = pa.Array.from_buffers(pa.uint8(), rows, [None, pa.py_buffer(columns.kind)])
    builders = {
        "path": lambda: constant_strings(path, rows) if path is not None else pa.nulls(rows, pa.string()),
        "file_id": lambda: (_wrap(pa.int64(), rows, np.full(rows, file_id, dtype=np.int64)) if file_id is not None
                            else pa.nulls(rows, pa.int64())),
        "sequence": lambda: (_wrap(pa.int64(), rows, np.full(rows, sequence, dtype=np.int64))
                             if sequence is not None else pa.nulls(rows, pa.int64())),
        "offset": lambda: (_wrap(pa.int64(), rows, columns.offset) if columns.offset is not None
                           else pa.nulls(rows, pa.int64())),
        "frame_size": lambda: (_wrap(pa.int64(), rows, columns.size) if columns.size is not None
                               else pa.nulls(rows, pa.int64())),
        "kind": lambda: pc.take(_KIND_NAMES, kind),
        "record_id": lambda: _wrap(pa.int64(), rows, columns.record_id, valid),
        "record_type": lambda: _wrap(pa.int32(), rows, pc.cast(pa.Array.from_buffers(
            pa.uint8(), rows, [None, pa.py_buffer(columns.record_type)]), pa.int32()).buffers()[1], valid),
        "tx_id": lambda: (_wrap(pa.int64(), rows, columns.tx_id, valid) if columns.tx_id is not None
                          else pa.nulls(rows, pa.int64())),
        "body_size": lambda: pa.Array.from_buffers(pa.int64(), rows, [valid, pa.py_buffer(np.diff(body_offsets))]),
        "body": lambda: pa.Array.from_buffers(pa.binary(), rows, [valid, pa.py_buffer(body_offsets.astype(np.int32)),
                                                                  pa.py_buffer(columns.bodies)]),
    }
    return {name: build() for name, build in builders.items() if wanted is None or name in wanted}


def message_arrays(columns, start: int, stop: int) -> tuple[dict[str, pa.Array], list[int]]:
    """The message store's part of the schema for rows ``start``..``stop`` (compiled batch decoder), and
    the rows (from ``start``) whose body record_format rejects."""
    decoded = decode_message_columns(columns.kind, columns.record_type, columns.body_offsets, columns.bodies,
                                     start, stop)
    rows = stop - start

    def numbers(name):
        return _wrap(pa.int64(), rows, getattr(decoded, name), _bitmap(getattr(decoded, f"{name}_valid"), rows))

    routing = pa.Array.from_buffers(pa.uint8(), rows, [_bitmap(decoded.routing_type_valid, rows),
                                                       pa.py_buffer(decoded.routing_type)])
    entries = decoded.property_count
    keys = pa.Array.from_buffers(pa.string(), entries, [None, pa.py_buffer(decoded.key_offsets),
                                                         pa.py_buffer(decoded.key_data)])
    values = pa.Array.from_buffers(pa.string(), entries, [_bitmap(np.packbits(
        np.frombuffer(decoded.value_valid, dtype=np.uint8), bitorder="little").tobytes(), entries),
        pa.py_buffer(decoded.value_offsets), pa.py_buffer(decoded.value_data)])
    entry_structs = pa.StructArray.from_arrays([keys, values],
                                               fields=[PROPERTIES_TYPE.key_field, PROPERTIES_TYPE.item_field])
    properties = pa.Array.from_buffers(PROPERTIES_TYPE, rows, [_bitmap(decoded.properties_valid, rows),
                                                               pa.py_buffer(decoded.property_offsets)],
                                       children=[entry_structs])
    return {
        "address": _strings(rows, decoded.address_offsets, decoded.address_data, decoded.address_valid),
        "queue_id": numbers("queue_id"),
        "queue_name": _strings(rows, decoded.queue_name_offsets, decoded.queue_name_data, decoded.queue_name_valid),
        "delivery_count": numbers("delivery_count"),
        "scheduled_time": numbers("scheduled_time"),
        "expiration": numbers("expiration"),
        "durable": pa.Array.from_buffers(pa.bool_(), rows, [_bitmap(decoded.durable_valid, rows),
                                                            pa.py_buffer(decoded.durable)]),
        "routing_type": pc.take(_ROUTING, routing),
        "priority": pa.Array.from_buffers(pa.uint8(), rows, [_bitmap(decoded.priority_valid, rows),
                                                             pa.py_buffer(decoded.priority)]).cast(pa.int32()),
        "message_size": numbers("message_size"),
        "properties": properties,
    }, decoded.rejected


def body_error(columns, row: int, path: str | None) -> str:
    """What record_format says of the body of ``row`` that the batch decoder rejected."""
    begin, end = columns.body_offsets[row], columns.body_offsets[row + 1]
    try:
        decode_store_body(columns.record_type[row], columns.record_id[row], bytes(columns.bodies[begin:end]),
                          path=path)
    except CorruptRecordError as exc:
        return str(exc)
    raise AssertionError(f"row {row}: the batch decoder rejected a body record_format accepts")


def batches(frames: dict[str, pa.Array], messages: dict[str, pa.Array], damage: dict[int, str], rows: int,
            batch_rows: int, columns=COLUMNS):
    """RecordBatches of ``columns`` of at most ``batch_rows`` rows over the same rows of ``frames`` and
    ``messages``; ``damage`` maps a row to its damage text (every other row: null)."""
    schema = pa.schema([pa.field(column.name, column.arrow_type) for column in columns])
    for start in range(0, rows, batch_rows):
        length = min(batch_rows, rows - start)
        if damage:
            texts = text_array([damage.get(row) for row in range(start, start + length)])
        else:
            texts = pa.nulls(length, pa.string())
        arrays = []
        for column in columns:
            if column.name == "damage":
                arrays.append(texts)
            else:
                source = frames if column.name in _FRAME_COLUMNS else messages
                arrays.append(source[column.name].slice(start, length))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def single_row(columns=COLUMNS, **values) -> pa.RecordBatch:
    """One row of ``columns`` (a damage row the columns do not hold, such as a file cut short): the
    values given are strings or 64-bit numbers, every other column is null."""
    def one(column: Column) -> pa.Array:
        value = values.get(column.name)
        if value is None:
            return pa.nulls(1, column.arrow_type)
        if column.arrow_type == pa.string():
            return text_array([value])
        return _wrap(column.arrow_type, 1, np.array([value], dtype=np.int64))

    return pa.RecordBatch.from_arrays([one(column) for column in columns],
                                      schema=pa.schema([pa.field(column.name, column.arrow_type) for column in columns]))


_KIND_NAME_OF = {int(kind): kind.name for kind in RecordKind}
_KIND_NAMES = text_array([_KIND_NAME_OF.get(code) for code in range(256)])
_ROUTING = text_array([ROUTING_NAMES.get(code) for code in range(256)])
