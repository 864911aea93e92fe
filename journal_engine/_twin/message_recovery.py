"""Python twin of the compiled recovery of the message store (pyx/journal_engine/_message_recovery.pyx).

The same rules, one message at a time through record_format's decoders; tests/store/test_message_columns.py
checks that both recover the same.
"""
from __future__ import annotations

import ctypes
from array import array

from ..errors import CorruptRecordError
from ..limits import ONE_QUEUE_ID_MAX, PRIORITY_DEFAULT
from .livemap import LiveMap
from ..record_format import RecordType, decode_delivery_count, decode_message, decode_queue_id, decode_scheduled_time

_QUEUE_ID_TYPES = frozenset((RecordType.ADD_REF, RecordType.ACKNOWLEDGE_REF))
#: a reference's own updates: their decoder, their slot in a live reference's [count, scheduled ms], their name
_REFERENCE_UPDATES = {RecordType.UPDATE_DELIVERY_COUNT: (decode_delivery_count, 0, "delivery count"),
                      RecordType.SET_SCHEDULED_DELIVERY_TIME: (decode_scheduled_time, 1, "scheduled time")}


class QueueReferences:
    """One queue's recovered references as columns, in store order (see the compiled module)."""

    __slots__ = ("message_ids", "delivery_counts", "scheduled_times", "ascending", "timed", "shared", "priorities")

    def __init__(self) -> None:
        self.message_ids, self.delivery_counts, self.scheduled_times = array("Q"), array("I"), array("Q")
        self.ascending, self.timed, self.shared = True, False, False
        self.priorities: array | None = None    # array 'B' once some message is not of the default priority

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
                 "anomalies", "corrupt", "unknown_references", "from_shadow", "duplicate_ids")

    def __init__(self) -> None:
        self.max_record_id = 0
        self.bodies, self.references, self.unreferenced = _Bodies(), {}, []
        self.one_queue, self.several_queues = LiveMap(), {}
        self.anomalies, self.corrupt, self.unknown_references, self.from_shadow = [], [], [], []
        self.duplicate_ids: list[tuple[int, bytes]] = []


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
        elif user_type in _REFERENCE_UPDATES:
            decode, slot, what = _REFERENCE_UPDATES[user_type]
            queue_id, value = decode(bytes(body), message_id=message_id, path=path)
            if queue_id not in live:
                anomalies.append(f"message {message_id}: {what} {value} for queue {queue_id}, "
                                 "which holds no live reference of it; ignored")
                continue
            live[queue_id][slot] = value    # the last record in journal order wins
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
            if rec.record_type == RecordType.DUPLICATE_ID:     # a duplicate-id cache entry: the store decodes it
                out.duplicate_ids.append((message_id, bytes(rec.body)))
                continue
            out.anomalies.append(f"message journal record {message_id} has type {rec.record_type}, not a message "
                                 f"({int(RecordType.ADD_MESSAGE)}); ignored")
            continue
        try:
            stored = decode_message(message_id, bytes(rec.body), path=path)
            live = _live_references(message_id, rec.updates, out.anomalies, path)
        except CorruptRecordError as error:
            out.corrupt.append(error)       # the message is left out
            continue
        if not live:
            out.unreferenced.append(message_id)
            continue
        _gather(out, gathered, message_id, live, stored.expiration, stored.priority, now_ms, shadow_counts)
        _keep(out, message_id, rec.body, live)
    out.references, out.max_record_id = gathered, max_id
    return out


def _gather(out: MessageRecovery, gathered: dict, message_id: int, live: dict, expiration: int, priority: int,
            now_ms: int, shadow_counts) -> None:
    """Each live reference of a message onto its queue's references (onto ``unknown_references`` when the
    bindings journal holds no such queue): a scheduled time at or before now becomes 0, a shadow count
    that differs from the journal's goes to ``from_shadow``."""
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
        if priority != PRIORITY_DEFAULT and refs.priorities is None:
            refs.priorities = array("B", [PRIORITY_DEFAULT]) * len(refs.message_ids)
        if refs.priorities is not None:
            refs.priorities.append(priority)
        refs.message_ids.append(message_id)
        refs.delivery_counts.append(count)
        refs.scheduled_times.append(scheduled_ms)


def _keep(out: MessageRecovery, message_id: int, body, live: dict) -> None:
    """A message with live references: its body, and its one queue (or its several)."""
    out.bodies[message_id] = body
    queue_ids = tuple(live)
    if len(queue_ids) == 1 and queue_ids[0] <= ONE_QUEUE_ID_MAX:
        out.one_queue[message_id] = queue_ids[0]
    else:
        out.several_queues[message_id] = queue_ids


def decode_message_fields(message_id: int, body, path=None) -> tuple:
    """(address, body, properties, durable, expiration, routing_type, priority) of one ADD_MESSAGE body."""
    stored = decode_message(message_id, bytes(body), path=path)
    return (stored.address, stored.body, stored.properties, stored.durable, stored.expiration, stored.routing_type,
            stored.priority)


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
