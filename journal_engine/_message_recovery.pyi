"""Type stub of the compiled recovery of the message store (pyx/journal_engine/_message_recovery.pyx;
twin: _twin/message_recovery.py).

The message journal's live records, recovered in one pass into each queue's references as columns,
the bodies left where they lie until the broker reads their fields.
"""
from array import array
from collections.abc import Iterable, Iterator, KeysView, Mapping
from journal_engine._livemap import LiveMap
from journal_engine.errors import CorruptRecordError
from typing import Any, final


@final
class QueueReferences:
    """One queue's recovered references as columns, in store order."""

    @property
    def message_ids(self) -> array[int]:
        """array 'Q'."""
    @property
    def delivery_counts(self) -> array[int]:
        """array 'I': the last persisted count of each reference."""
    @property
    def scheduled_times(self) -> array[int]:
        """array 'Q': epoch ms, 0 for "deliver now"."""
    @property
    def ascending(self) -> bool:
        """The message ids rise."""
    @property
    def timed(self) -> bool:
        """Some reference has a scheduled time or its message an expiration."""
    @property
    def shared(self) -> bool:
        """Some message has a live reference on another queue too."""
    @property
    def priorities(self) -> array[int] | None:
        """array 'B': each reference's message priority; None when all are of the default priority."""
    def __len__(self) -> int: ...

@final
class MessageBodies:
    """Message id -> ADD_MESSAGE body of a recovery: a read-only mapping over the journal's columns,
    a body copied out only when it is looked at."""

    def __getitem__(self, message_id: int, /) -> bytes: ...
    def get(self, message_id: int, default: bytes | None = None) -> bytes | None: ...
    def __contains__(self, message_id: object, /) -> bool: ...
    def __iter__(self) -> Iterator[int]: ...
    def __len__(self) -> int: ...
    def keys(self) -> KeysView[int]: ...
    def items(self) -> list[tuple[int, bytes]]: ...
    def values(self) -> list[bytes]: ...
    def __eq__(self, other: object, /) -> bool: ...
    def release_file(self, path: str) -> int:
        """Copy the bodies in the mapped journal file at ``path`` into a buffer the columns own and let
        the mapping go; how many bodies moved."""

@final
class MessageRecovery:
    """What ``recover_messages`` found: every rule of the message store's recovery applied."""

    @property
    def max_record_id(self) -> int: ...
    @property
    def bodies(self) -> MessageBodies:
        """Message id -> its ADD_MESSAGE body, for the messages with a live reference."""
    @property
    def one_queue(self) -> LiveMap:
        """Message id -> the queue id of its one live reference (up to limits.ONE_QUEUE_ID_MAX): a
        C table, no Python object per message (the message store's MessageQueues keeps it)."""
    @property
    def several_queues(self) -> dict[int, tuple[int, ...]]:
        """Message id -> the queue ids of its live references, for the messages with several (or
        one on a queue id above limits.ONE_QUEUE_ID_MAX)."""
    @property
    def references(self) -> dict[int, QueueReferences]:
        """Queue id -> its recovered references (every queue given, in their order), with the
        journal's delivery counts."""
    @property
    def unreferenced(self) -> list[int]:
        """Message ids without a live reference, in store order."""
    @property
    def anomalies(self) -> list[str]:
        """What recovery reports of odd records (never fatal), in record order."""
    @property
    def corrupt(self) -> list[CorruptRecordError]:
        """record_format's error for each message whose body or update it rejects (left out)."""
    @property
    def unknown_references(self) -> list[tuple[int, int, int, int, int]]:
        """``(queue id, message id, journal count, count, scheduled ms)`` of live references on a
        queue not given (``count``: the shadow's when it differs)."""
    @property
    def from_shadow(self) -> list[tuple[int, int, int, int]]:
        """``(queue id, row, message id, count)``: a shadow count that differs from the journal's
        (``row``: its index in ``references[queue id]``, -1 on a queue not given)."""
    @property
    def duplicate_ids(self) -> list[tuple[int, bytes]]:
        """``(record id, body)`` of each DUPLICATE_ID record (an address's duplicate-id cache entry), in
        store order."""

def recover_messages(records: Mapping[int, Any], known_queues: Iterable[int], now_ms: int,
                     shadow_counts: Mapping[tuple[int, int], int] | None = None, path: Any = None) -> MessageRecovery:
    """The message store's recovery of its message journal's live records (id -> RecordInfo) in one
    pass: the live references per queue as columns, and what recovery reports (anomalies, records
    record_format rejects, references on queues not given, counts from a delivery-count shadow).
    The rules of replaying references live here and in the twin only."""

def decode_message_fields(message_id: int, body: bytes, path: Any = None
                          ) -> tuple[str, bytes, dict[str, Any], bool, int, str | None, int]:
    """(address, body, properties, durable, expiration, routing_type, priority) of one ADD_MESSAGE body, as
    record_format.decode_message reads them (its CorruptRecordError for a body it rejects)."""

def decode_messages_fields(bodies: Mapping[int, bytes], message_ids: Iterable[int], path: Any = None,
                           with_bodies: bool = True
                           ) -> list[tuple[str, bytes | None, dict[str, Any], bool, int, str | None, int]]:
    """``decode_message_fields`` of many messages (each body from ``bodies``), in the order of
    ``message_ids``; a recovery's MessageBodies is read straight from the journal's columns.
    ``with_bodies`` False: the body of a message without properties is None (not copied)."""

def release_from_collector(objects: Iterable[object]) -> None:
    """Take objects that can never be part of a reference cycle out of the cycle collector's view
    (still freed by reference counting)."""
