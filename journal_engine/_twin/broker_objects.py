"""The broker's per-message objects (MessageData, Reference, Message): the twin of the compiled
_broker_objects, written as plain slotted classes (the broker makes one of each per message, so the
compiled ones spare a Python frame per object)."""
from __future__ import annotations

import types
from array import array
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from ..limits import PRIORITY_DEFAULT, READY_CHUNK
from ..record_format import MESSAGE_ID_PROPERTY

__all__ = ["MessageData", "Reference", "Message", "delivery_of", "READY", "SCHEDULED", "DELIVERING", "DONE",
           "ACKED_IN_TX"]

# a reference's states
READY = 0          # in its queue's deque
SCHEDULED = 1      # in the broker's timer heap, waiting for its delivery time
DELIVERING = 2     # handed to a consumer, not yet acknowledged or returned
DONE = 3           # acknowledged, dead-lettered, expired or dropped: gone
ACKED_IN_TX = 4    # delivered and acknowledged in a session's open transaction (still counted as delivering)

_STATE_NAMES = ("READY", "SCHEDULED", "DELIVERING", "DONE", "ACKED_IN_TX")
_EMPTY: Mapping[str, Any] = types.MappingProxyType({})


class MessageData:
    """One message's content and its bookkeeping: how many references it has, and how many of them
    the message store holds (the store deletes the message when the last of those is acknowledged)."""

    __slots__ = ("message_id", "address", "_body", "_source", "properties", "durable", "expiration",
                 "routing_type", "durable_refs", "public_id", "_view", "priority")

    def __init__(self, message_id: int, address: str, body: bytes, properties: dict | None, durable: bool,
                 expiration: int, routing_type: str | None, priority: int = PRIORITY_DEFAULT) -> None:
        self.message_id = message_id
        self.address = address
        self._body: bytes | None = body       # None: a recovered message's body, not read yet
        self._source: Any = None              # what reads it (the store's recovered messages)
        self.properties = properties          # a dict the broker owns, or None for none
        self.durable = durable
        self.expiration = expiration          # epoch ms, 0 = never
        self.routing_type = routing_type      # None, "anycast" or "multicast"
        self.priority = priority              # 0-9, higher delivered first
        self.durable_refs = 0                 # references the store holds (> 0: the store holds the message)
        self.public_id = message_id           # the id consumers see (a Classic or Qpid copy keeps its original's)
        self._view: Mapping[str, Any] | None = None

    @property
    def body(self) -> bytes:
        """The body. A recovered message's is read from the store when first asked for (its delivery,
        a dead-letter copy), not when its queue is first used: no copy of a body before."""
        if self._body is None:
            self._body = self._source.body(self.message_id)
            self._source = None
        return self._body

    @body.setter
    def body(self, value: bytes) -> None:
        self._body = value
        self._source = None

    def set_property(self, name: str, value: Any) -> None:
        """Set one property (the broker's own, such as Classic's ``redeliveryDelay``) in a new dict:
        deliveries already handed out hold the old one and must not see it change."""
        properties = self.properties
        self.properties = {**properties, name: value} if properties else {name: value}
        self._view = None

    def stored_properties(self) -> dict | None:
        """The properties as the store keeps them: with MESSAGE_ID_PROPERTY when the id consumers see is
        not the store's."""
        if self.public_id == self.message_id:
            return self.properties
        return {**(self.properties or {}), MESSAGE_ID_PROPERTY: self.public_id}

    def properties_view(self) -> Mapping[str, Any]:
        """The properties, read-only (consumers share the data; none may change it for the others)."""
        view = self._view
        if view is None:
            view = _EMPTY if not self.properties else types.MappingProxyType(self.properties)
            self._view = view
        return view

    def headers(self) -> dict:
        """The header fields a filter may use (only filters that name one of them ask)."""
        return {
            "AMQAddress": self.address,
            "AMQDurable": "DURABLE" if self.durable else "NON_DURABLE",
            "AMQExpiration": self.expiration,
            "AMQSize": len(self.body),
            "AMQMessageID": self.message_id,
        }

    def __repr__(self) -> str:
        return f"MessageData(id={self.message_id}, address={self.address!r}, durable={self.durable})"


class Reference:
    """A message on one queue: its own delivery count, scheduled time and state."""

    __slots__ = ("data", "queue", "delivery_count", "state", "delivery", "failures")

    def __init__(self, data: MessageData, queue: Any, delivery_count: int = 0) -> None:
        self.data = data
        self.queue = queue
        self.delivery_count = delivery_count
        self.state = READY
        self.delivery = None          # the Message of the current delivery (identity proves ownership)
        self.failures: list[tuple[int, str]] | None = None   # (time ms, reason) of each failed delivery seen

    # The state changes only through these methods, named for the transitions the broker's modules make.
    # They change the reference alone: the queue's counts of delivering and scheduled references are its
    # caller's to keep (read and written there as a slot, the cheapest way), but for leave_consumer's.
    def dispatch(self) -> None:
        """READY -> DELIVERING: handed to a consumer; the delivery count goes up by one (the first
        delivery has count 1)."""
        self.delivery_count += 1
        self.state = DELIVERING

    def undo_dispatch(self) -> None:
        """DELIVERING -> READY: a dispatch taken back before the message was handed out (the store
        refused its count); the caller puts the reference back in its queue."""
        self.delivery_count -= 1
        self.state = READY

    def leave_consumer(self) -> None:
        """The reference is no longer held by a consumer (a rollback, a close, a session rolled back): its
        queue counts one delivering reference less. Its state is the caller's next decision."""
        self.delivery = None
        self.queue.delivering -= 1

    def back_to_ready(self) -> None:
        """-> READY: back in its queue's deque at once (the caller puts it there)."""
        self.state = READY

    def schedule(self) -> None:
        """-> SCHEDULED: in the broker's timer heap until due."""
        self.state = SCHEDULED

    def fall_due(self) -> None:
        """SCHEDULED -> READY: its time came (the timers put it at the head of its queue)."""
        self.state = READY

    def acknowledge_in_transaction(self) -> None:
        """DELIVERING -> ACKED_IN_TX: acknowledged in a session's open transaction, still counted as
        delivering until the commit."""
        self.state = ACKED_IN_TX

    def back_to_delivering(self) -> None:
        """ACKED_IN_TX -> DELIVERING: the transaction's acknowledgement undone; its consumer holds it,
        undecided, again (Classic's STOMP ABORT)."""
        self.state = DELIVERING

    def undo_transacted_ack(self) -> None:
        """An acknowledgement in a transaction that rolled back: the reference was delivering when it
        was acknowledged, and leaves its consumer as a failed delivery."""
        self.back_to_delivering()
        self.leave_consumer()

    def leave_queue(self) -> None:
        """-> DONE: gone for good (acknowledged, dead-lettered, expired, dropped, its queue deleted); it
        stands for no delivery any more."""
        self.state = DONE
        self.delivery = None

    def record_failure(self, now_ms: int, reason: str) -> None:
        """Note a failed delivery, for the history a dead-letter copy carries."""
        if self.failures is None:
            self.failures = [(now_ms, reason)]
        else:
            self.failures.append((now_ms, reason))

    def __repr__(self) -> str:
        return (f"Reference(message={self.data.message_id}, queue={self.queue.name!r}, "
                f"delivery_count={self.delivery_count}, {_STATE_NAMES[self.state]})")


class Message:
    """One delivery of a message (or a browsed copy, whose delivery_count is 0).

    ``delivery_count`` is 1 on the first delivery and goes up at each dispatch; ``redelivered`` is
    ``delivery_count > 1``. ``properties`` is read-only and those of this delivery: a later change
    (a redelivery's ``redeliveryDelay``) is not seen. ``queue`` names the queue it came from.
    Acknowledge or roll it back through the consumer that received it.
    """

    __slots__ = ("_data", "_properties", "delivery_count", "queue", "_ref", "_owner")

    def __init__(self, data: MessageData, delivery_count: int, queue: str, ref=None, owner=None) -> None:
        if data._body is None:
            data.body                 # read now: a received (or browsed) message's body is bytes from here on
        self._data = data
        self._properties = data.properties    # the dict of this moment: the broker replaces, never changes it
        self.delivery_count = delivery_count
        self.queue = queue
        self._ref = ref           # the queue reference this delivery is of (None: browsed)
        self._owner = owner       # the consumer it was delivered to (None: browsed)

    @property
    def message_id(self) -> int:
        return self._data.public_id

    @property
    def address(self) -> str:
        return self._data.address

    @property
    def body(self) -> bytes:
        return self._data.body

    @property
    def properties(self) -> Mapping[str, Any]:
        data = self._data
        properties = self._properties
        if properties is data.properties:
            return data.properties_view()
        return types.MappingProxyType(properties) if properties else _EMPTY

    @property
    def durable(self) -> bool:
        return self._data.durable

    @property
    def expiration(self) -> int:
        return self._data.expiration

    @property
    def routing_type(self) -> str | None:
        return self._data.routing_type

    @property
    def priority(self) -> int:
        return self._data.priority

    @property
    def redelivered(self) -> bool:
        return self.delivery_count > 1

    def __repr__(self) -> str:
        return (f"Message(id={self._data.public_id}, address={self._data.address!r}, queue={self.queue!r}, "
                f"delivery_count={self.delivery_count}, body={self._data.body[:32]!r})")


def recovered_datas(message_ids, fields, durable_refs: int, source: Any = None) -> list[MessageData]:
    """The MessageData of recovered messages, from their ids and stored ``fields`` (address, body,
    properties, durable, expiration, routing type), each with ``durable_refs`` set: the one place a
    stored message becomes the broker's (the id consumers see comes out of its properties). A body
    None in ``fields`` is read from ``source`` (``source.body(message_id)``) when first asked for."""
    datas = []
    for message_id, (address, body, properties, durable, expiration, routing_type, priority) in zip(message_ids,
                                                                                                    fields):
        if body is None and source is None:
            raise ValueError(f"message {message_id}: a body left unread needs the source that reads it")
        public_id = properties.pop(MESSAGE_ID_PROPERTY, None) if properties else None
        data = MessageData(message_id, address, body, properties or None, durable, expiration, routing_type, priority)
        if body is None:
            data._source = source
        if public_id is not None:
            data.public_id = public_id
        data.durable_refs = durable_refs
        datas.append(data)
    return datas


def split_by_level(message_ids, counts, priorities, level_of: bytes, rows: dict[int, int]) -> dict[int, tuple]:
    """A recovered queue's columns split by level, in one pass: {level: (message ids, delivery counts)}
    (arrays "Q" and "I", row order kept). ``level_of``: 256 bytes, each priority's level (255: none);
    ``rows``: how many rows each level has (counted before)."""
    if not len(counts) == len(priorities) == len(message_ids) or len(level_of) != 256:
        raise ValueError(f"split_by_level: {len(message_ids)} ids, {len(counts)} counts, {len(priorities)} "
                         f"priorities and a table of {len(level_of)} levels (256)")
    out = {level: (array("Q"), array("I")) for level in rows}
    for message_id, count, priority in zip(message_ids, counts, priorities):
        level = level_of[priority]
        if level != 255:
            ids, delivery_counts = out[level]
            ids.append(message_id)
            delivery_counts.append(count)
    for level, count in rows.items():
        if len(out[level][0]) != count:
            raise ValueError(f"split_by_level: level {level} has {len(out[level][0])} rows, not the {count} counted")
    return out


def ready_references(datas, queue, delivery_counts) -> list[Reference]:
    """A READY Reference on ``queue`` of each MessageData, with its recovered delivery count."""
    return [Reference(data, queue, count) for data, count in zip(datas, delivery_counts)]


class ReadyQueue:
    """A recovered queue's ready references, made a chunk at a time as its head reaches them (twin of
    the compiled ReadyQueue: the same rules, read there). ``make(start, stop)`` makes the References
    of rows ``start`` to ``stop``; what is appended while rows wait comes after all of them; what
    needs the whole queue (iteration, an index past the made head, ``insert``) makes the rest first."""

    __slots__ = ("_made", "_later", "_make", "_next", "_end", "_chunk")

    def __init__(self, make: Callable[[int, int], list], rows: int, chunk: int = READY_CHUNK) -> None:
        if rows < 0 or chunk < 1:
            raise ValueError(f"ReadyQueue: rows {rows} and chunk {chunk} (rows >= 0, chunk >= 1)")
        self._made: deque = deque()
        self._later: deque | None = deque() if rows else None
        self._make = make if rows else None
        self._next = 0
        self._end = rows
        self._chunk = chunk

    @property
    def unmade(self) -> int:
        """Recovered rows whose References are not made yet."""
        return self._end - self._next

    def _more(self) -> None:
        start, stop = self._next, min(self._next + self._chunk, self._end)
        refs = self._make(start, stop)
        if len(refs) != stop - start:
            raise RuntimeError(f"ReadyQueue: make({start}, {stop}) gave {len(refs)} references")
        self._next = stop
        self._made.extend(refs)
        if stop == self._end:
            self._made.extend(self._later)
            self._later = None
            self._make = None

    def _all(self) -> None:
        while self._make is not None:
            self._more()

    def __len__(self) -> int:
        return len(self._made) + (self._end - self._next) + (len(self._later) if self._later is not None else 0)

    def __bool__(self) -> bool:
        return bool(self._made) or self._make is not None

    def popleft(self):
        if not self._made and self._make is not None:
            self._more()
        return self._made.popleft()

    def append(self, ref) -> None:
        if self._later is not None:
            self._later.append(ref)
        else:
            self._made.append(ref)

    def appendleft(self, ref) -> None:
        self._made.appendleft(ref)

    def extendleft(self, refs) -> None:
        self._made.extendleft(refs)

    def clear(self) -> None:
        self._made.clear()
        self._later = None
        self._make = None
        self._next = self._end

    def insert(self, index: int, ref) -> None:
        self._all()
        self._made.insert(index, ref)

    def __getitem__(self, index: int):
        if index == 0 and not self._made and self._make is not None:
            self._more()
        elif index == -1 and self._later:
            return self._later[-1]
        elif not 0 <= index < len(self._made):
            self._all()
        return self._made[index]

    def __iter__(self):
        self._all()
        return iter(self._made)

    def __repr__(self) -> str:
        return f"ReadyQueue({len(self)} references, {self._end - self._next} not made yet)"


def delivery_of(message: Message) -> tuple[Any, Any]:
    """(reference, consumer) of the delivery ``message`` stands for; (None, None) for a browsed copy.

    The broker's way back from a Message it handed out to its own bookkeeping; the caller checked that
    ``message`` is a Message.
    """
    return message._ref, message._owner
