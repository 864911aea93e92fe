"""Type stub of the compiled batch decoder of message-store bodies for Spark (pyx/journal_engine/_message_columns.pyx;
twin: _twin/message_columns.py).

The message store's fields of many rows at once (a scan's FrameColumns), as the buffers of Arrow
arrays: validity bitmaps, int64 values, int32 string offsets and data, and the int32 offsets, keys
and values of a map<string, string> of properties. A body record_format rejects is listed in
``rejected``, its fields null.
"""
from typing import final

from _typeshed import ReadableBuffer


@final
class MessageColumns:
    """The message store's fields of ``count`` rows (each ``*_valid`` a validity bitmap)."""

    @property
    def count(self) -> int: ...
    @property
    def property_count(self) -> int:
        """Entries of every row's properties together."""
    @property
    def queue_id(self) -> bytes: ...
    @property
    def queue_id_valid(self) -> bytes: ...
    @property
    def delivery_count(self) -> bytes: ...
    @property
    def delivery_count_valid(self) -> bytes: ...
    @property
    def scheduled_time(self) -> bytes: ...
    @property
    def scheduled_time_valid(self) -> bytes: ...
    @property
    def expiration(self) -> bytes: ...
    @property
    def expiration_valid(self) -> bytes: ...
    @property
    def durable(self) -> bytes:
        """A bitmap: bit i set when row i is a durable message."""
    @property
    def durable_valid(self) -> bytes: ...
    @property
    def message_size(self) -> bytes: ...
    @property
    def message_size_valid(self) -> bytes: ...
    @property
    def routing_type(self) -> bytes:
        """One code byte per row (ROUTING_NAMES)."""
    @property
    def routing_type_valid(self) -> bytes: ...
    @property
    def priority(self) -> bytes:
        """One byte per row: a message's priority, 0-9."""
    @property
    def priority_valid(self) -> bytes: ...
    @property
    def address_offsets(self) -> bytes: ...
    @property
    def address_data(self) -> bytes: ...
    @property
    def address_valid(self) -> bytes: ...
    @property
    def queue_name_offsets(self) -> bytes: ...
    @property
    def queue_name_data(self) -> bytes: ...
    @property
    def queue_name_valid(self) -> bytes: ...
    @property
    def property_offsets(self) -> bytes: ...
    @property
    def properties_valid(self) -> bytes: ...
    @property
    def key_offsets(self) -> bytes: ...
    @property
    def key_data(self) -> bytes: ...
    @property
    def value_offsets(self) -> bytes: ...
    @property
    def value_data(self) -> bytes: ...
    @property
    def value_valid(self) -> bytes:
        """One byte per property entry: 0 when the value is None."""
    @property
    def rejected(self) -> list[int]:
        """Rows (from 0) whose body record_format rejects; their fields are null."""

def decode_message_columns(kind: ReadableBuffer, record_type: ReadableBuffer, body_offsets: ReadableBuffer,
                           bodies: ReadableBuffer, start: int, stop: int) -> MessageColumns:
    """The message store's fields of rows ``start``..``stop``: ``kind`` and ``record_type`` one byte a
    row, ``body_offsets`` int64 (rows + 1 entries) into ``bodies``, the FrameColumns layout."""
