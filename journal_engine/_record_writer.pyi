"""Type stub of the message store's compiled record writer (pyx/journal_engine/_record_writer.pyx;
twin: _twin/record_writer.py).

The hot records of the message store, appended straight into the journal's append path without a
Python object per record (on another record store, LMDB, through its methods): a send (ADD_MESSAGE
45 + ADD_REF 32), an acknowledgement (ACKNOWLEDGE_REF 33, then DELETE of the message with its last
reference), and the capped UPDATE_DELIVERY_COUNT (34) and SET_SCHEDULED_DELIVERY_TIME (36) records,
with Artemis's rules (AbstractJournalStorageManager): a delivery-count record is skipped when the
count equals the last persisted one or exceeds ``max_redelivery_records`` (unless it is -1); a
scheduled-time record only by the cap. Queue and message ids are u64, delivery counts u32, times milliseconds since the epoch.

Thread safety: like the append path these run with the GIL held, which is the lock of the
reference table; any method may be called from several threads at once.
"""
from collections.abc import Iterable
from typing import Protocol

from _typeshed import WriteableBuffer
from typing_extensions import disjoint_base

from ._core import RecordSink

class _RecordStore(Protocol):
    """What the writer uses of a record store (storage/protocol.py's RecordStore): a Journal, whose
    core it appends into directly, or any other store (LMDB), written through these methods."""

    def add(self, record_id: int, record_type: int, body: bytes, *, sync: bool | None = None) -> None: ...
    def update(self, record_id: int, record_type: int, body: bytes, *, sync: bool | None = None) -> None: ...
    def delete(self, record_id: int, *, sync: bool | None = None) -> None: ...
    def is_live(self, record_id: int) -> bool: ...
    def sync(self) -> None: ...
    def flush(self) -> None: ...

class _Shadow(Protocol):
    """What ``attach_shadow`` reads of a ``message_store.delivery_shadow.DeliveryShadow``."""

    @property
    def mapping(self) -> WriteableBuffer:
        """The shared mapping: a header, then ``capacity`` entries."""
    @property
    def capacity(self) -> int: ...
    next: int
    """The next entry to write: read on attach, handed back on detach."""
    @property
    def epoch(self) -> int: ...
    @property
    def life(self) -> int: ...
    def roll(self) -> None: ...

@disjoint_base
class ProtocolSink(RecordSink):
    """The record writer's sink for a store other than the journal: each record through the
    record-store protocol (add / update / delete, append_group, is_live)."""

    def __init__(self, store: _RecordStore) -> None: ...

@disjoint_base
class RecordWriter:
    """The record writer of one message journal: tracks every live reference's last persisted
    delivery count in a C table, so a skipped record costs no system call and no allocation."""

    def __init__(self, store: _RecordStore, max_redelivery_records: int = 10) -> None:
        """``store``: the message journal (its frames go straight into the core's buffer) or any
        other record store (the same records through its methods). ``max_redelivery_records``: -1
        (no cap) or 0..2**32-1, else ``ConfigError``; its ``sync_mode`` "always" makes batches sync."""
    @property
    def max_redelivery_records(self) -> int: ...
    @property
    def delivery_count_records_written(self) -> int:
        """UPDATE_DELIVERY_COUNT records appended (skipped ones not counted)."""
    @property
    def scheduled_time_records_written(self) -> int:
        """SET_SCHEDULED_DELIVERY_TIME records appended."""
    @property
    def held_references(self) -> int:
        """References ``add_references`` holds where they lie (rising ids of a queue), moved into
        the table when first looked up."""
    def __len__(self) -> int:
        """References tracked (held ones too)."""

    # ----- the reference table ------------------------------------------------------------------
    def add_reference(self, queue_id: int, message_id: int, persisted_count: int = 0) -> None:
        """Track a live reference (at recovery); ``persisted_count`` is the count recovery restored.

        Raises ``UnknownRecordError`` if the message is not live, ``DuplicateRecordError`` if the
        reference is tracked already.
        """
    def reserve_references(self, count: int) -> None:
        """Room for ``count`` more references at once (one rehash; recovery knows how many it restores)."""
    def add_references(self, queue_id: int, message_ids: Iterable[int], persisted_counts: Iterable[int]) -> None:
        """``add_reference`` for many messages of one queue (recovery): uint64 ids and uint32 counts
        (arrays 'Q' and 'I'); stops at the first reference ``add_reference`` refuses, with its error.
        Rising ids of a queue that holds none are held where they lie (the ids' buffer is kept, and
        must not change), each moved into the table when first looked up."""
    def remove_reference(self, queue_id: int, message_id: int) -> bool:
        """Stop tracking a reference; False if it was not tracked."""
    def has_reference(self, queue_id: int, message_id: int) -> bool: ...
    def persisted_count(self, queue_id: int, message_id: int) -> int:
        """The reference's last persisted delivery count (0 if none); ``UnknownRecordError`` if untracked."""
    def clear(self) -> None:
        """Forget every reference (the journal's records are untouched)."""

    # ----- a send and an acknowledgement, one call each -----------------------------------------
    def store_message_reference(self, message_id: int, queue_id: int, head: bytes,
                                body: bytes | None = None) -> None:
        """Append ADD_MESSAGE and ADD_REF for a send to one queue and track the reference, without
        sync (the caller decides). The message record is ``head`` when ``body`` is None, else
        ``head`` + u32 length + ``body`` + u32 0 (a message without properties).

        Raises ``DuplicateRecordError`` if the message is live already or the reference tracked.
        """
    def acknowledge_reference(self, queue_id: int, message_id: int, delete_message: bool) -> None:
        """Append ACKNOWLEDGE_REF and stop tracking the reference; with ``delete_message`` (its last
        reference) also the message's DELETE. Without sync; ``UnknownRecordError`` if untracked."""

    # ----- the delivery-count shadow (message_store/delivery_shadow.py) ---------------------------------
    def attach_shadow(self, shadow: _Shadow) -> None:
        """From now on ``record_dispatch`` also writes each count into ``shadow``'s mapping;
        ``detach_shadow()`` before the mapping closes. ``RuntimeError`` if one is attached already,
        ``ValueError`` if the mapping's size does not match its capacity."""
    def detach_shadow(self) -> None:
        """Hand the next entry's index back to the shadow and release its mapping; idempotent."""
    def record_dispatch(self, queue_id: int, message_id: int, delivery_count: int) -> bool:
        """``update_delivery_count`` without sync, plus the count (unless above the cap) in the
        attached shadow, so it survives a killed process when this returns, without a system call.
        True if a journal record was written; ``RuntimeError`` if no shadow is attached."""

    # ----- the capped records -------------------------------------------------------------------
    def update_delivery_count(self, queue_id: int, message_id: int, delivery_count: int,
                              sync: bool | None = None) -> bool:
        """Append UPDATE_DELIVERY_COUNT unless the count is unchanged or above the cap; True if
        written. ``sync=None``: the journal's mode decides. ``UnknownRecordError`` if untracked."""
    def update_scheduled_delivery_time(self, queue_id: int, message_id: int, scheduled_ms: int,
                                       delivery_count: int, sync: bool | None = None) -> bool:
        """Append SET_SCHEDULED_DELIVERY_TIME unless ``delivery_count`` is above the cap; True if written."""
    def update_redelivery(self, queue_id: int, message_id: int, delivery_count: int, scheduled_ms: int,
                          sync: bool | None = None) -> int:
        """A rollback's two records, each under its rule (``update_delivery_count``'s and
        ``update_scheduled_delivery_time``'s), appended as one record group: a crash keeps both or
        neither. Returns how many were written (0..2)."""
    def update_delivery_counts(self, queue_ids: Iterable[int], message_ids: Iterable[int],
                               delivery_counts: Iterable[int], sync: bool | None = None) -> int:
        """The batch form of ``update_delivery_count``: one wait for durability at the end; returns
        the records written. Every reference is checked first, so an unknown one writes nothing;
        arrays of different lengths raise ``ValueError``, values out of range ``OverflowError``."""
    def update_scheduled_delivery_times(self, queue_ids: Iterable[int], message_ids: Iterable[int],
                                        scheduled_times: Iterable[int], delivery_counts: Iterable[int],
                                        sync: bool | None = None) -> int:
        """The batch form of ``update_scheduled_delivery_time``; returns the records written."""
