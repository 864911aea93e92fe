# cython: language_level=3
"""The broker's per-message objects, compiled: MessageData, Reference and Message (and the ready
queue of a recovered queue, ReadyQueue, whose methods its deliveries call).

Every send makes a MessageData and a Reference, every delivery a Message: made by a Python class,
each costs a Python frame for its ``__init__`` (about 250 ns); made here, a C function. They hold
Python objects only (the same values the twin holds, with the same identity), so the broker reads and
writes their attributes as it would a slotted class's. Twin: journal_engine/_twin/broker_objects.py.
"""
cimport cython
from cpython cimport array
from libc.stdint cimport uint8_t, uint32_t, uint64_t

import array as py_array
from collections import deque
from types import MappingProxyType

from journal_engine._member_slots cimport expose_as_members
from journal_engine.limits import PRIORITY_DEFAULT, READY_CHUNK
from journal_engine.record_format import MESSAGE_ID_PROPERTY

# a reference's states
READY = 0          # in its queue's deque
SCHEDULED = 1      # in the broker's timer heap, waiting for its delivery time
DELIVERING = 2     # handed to a consumer, not yet acknowledged or returned
DONE = 3           # acknowledged, dead-lettered, expired or dropped: gone
ACKED_IN_TX = 4    # delivered and acknowledged in a session's open transaction (still counted as delivering)

_STATE_NAMES = ("READY", "SCHEDULED", "DELIVERING", "DONE", "ACKED_IN_TX")
_EMPTY = MappingProxyType({})


cdef class MessageData:
    """One message's content and its bookkeeping: how many references it has, and how many of them
    the message store holds (the store deletes the message when the last of those is acknowledged)."""

    cdef public object message_id, address, properties, durable, expiration, routing_type, priority
    cdef public object durable_refs, public_id
    cdef object _body       # bytes; None for a recovered message whose body is not read yet
    cdef object _source     # what reads that body (the store's recovered messages: ``body(message_id)``)
    cdef object _view

    def __init__(self, message_id, address, body, properties, durable, expiration, routing_type,
                 priority=PRIORITY_DEFAULT):
        _fill_data(self, message_id, address, body, properties, durable, expiration, routing_type, priority)

    @property
    def body(self):
        """The body (bytes). A recovered message's is read from the store when first asked for (its
        delivery, a dead-letter copy), not when its queue is first used: no copy of a body before."""
        if self._body is None:
            self._body = self._source.body(self.message_id)
            self._source = None
        return self._body

    @body.setter
    def body(self, value):
        self._body = value
        self._source = None

    def set_property(self, name, value):
        """Set one property (the broker's own, such as Classic's ``redeliveryDelay``) in a new dict:
        deliveries already handed out hold the old one and must not see it change."""
        properties = self.properties
        self.properties = {**properties, name: value} if properties else {name: value}
        self._view = None

    def stored_properties(self):
        """The properties as the store keeps them: with MESSAGE_ID_PROPERTY when the id consumers see is
        not the store's."""
        if self.public_id == self.message_id:
            return self.properties
        return {**(self.properties or {}), MESSAGE_ID_PROPERTY: self.public_id}

    def properties_view(self):
        """The properties, read-only (consumers share the data; none may change it for the others)."""
        view = self._view
        if view is None:
            view = _EMPTY if not self.properties else MappingProxyType(self.properties)
            self._view = view
        return view

    def headers(self):
        """The header fields a filter may use (only filters that name one of them ask)."""
        return {
            "AMQAddress": self.address,
            "AMQDurable": "DURABLE" if self.durable else "NON_DURABLE",
            "AMQExpiration": self.expiration,
            "AMQSize": len(self.body),
            "AMQMessageID": self.message_id,
        }

    def __repr__(self):
        return f"MessageData(id={self.message_id}, address={self.address!r}, durable={self.durable})"


cdef class Reference:
    """A message on one queue: its own delivery count, scheduled time and state."""

    cdef public object data, queue, delivery_count, state, delivery, failures

    def __init__(self, data, queue, delivery_count=0):
        _fill_reference(self, data, queue, delivery_count)

    # The state changes only through these methods, named for the transitions the broker's modules make.
    # They change the reference alone: the queue's counts of delivering and scheduled references are its
    # caller's to keep (read and written there as a slot, the cheapest way), but for leave_consumer's.
    @cython.binding(False)      # a method descriptor: the call Python specialises
    def dispatch(self):
        """READY -> DELIVERING: handed to a consumer; the delivery count goes up by one (the first
        delivery has count 1)."""
        self.delivery_count += 1
        self.state = DELIVERING

    @cython.binding(False)      # a method descriptor: the call Python specialises
    def undo_dispatch(self):
        """DELIVERING -> READY: a dispatch taken back before the message was handed out (the store
        refused its count); the caller puts the reference back in its queue."""
        self.delivery_count -= 1
        self.state = READY

    @cython.binding(False)      # a method descriptor: the call Python specialises
    def leave_consumer(self):
        """The reference is no longer held by a consumer (a rollback, a close, a session rolled back): its
        queue counts one delivering reference less. Its state is the caller's next decision."""
        self.delivery = None
        self.queue.delivering -= 1

    @cython.binding(False)      # a method descriptor: the call Python specialises
    def back_to_ready(self):
        """-> READY: back in its queue's deque at once (the caller puts it there)."""
        self.state = READY

    @cython.binding(False)      # a method descriptor: the call Python specialises
    def schedule(self):
        """-> SCHEDULED: in the broker's timer heap until due."""
        self.state = SCHEDULED

    @cython.binding(False)      # a method descriptor: the call Python specialises
    def fall_due(self):
        """SCHEDULED -> READY: its time came (the timers put it at the head of its queue)."""
        self.state = READY

    @cython.binding(False)      # a method descriptor: the call Python specialises
    def acknowledge_in_transaction(self):
        """DELIVERING -> ACKED_IN_TX: acknowledged in a session's open transaction, still counted as
        delivering until the commit."""
        self.state = ACKED_IN_TX

    @cython.binding(False)      # a method descriptor: the call Python specialises
    def back_to_delivering(self):
        """ACKED_IN_TX -> DELIVERING: the transaction's acknowledgement undone; its consumer holds it,
        undecided, again (Classic's STOMP ABORT)."""
        self.state = DELIVERING

    @cython.binding(False)      # a method descriptor: the call Python specialises
    def undo_transacted_ack(self):
        """An acknowledgement in a transaction that rolled back: the reference was delivering when it
        was acknowledged, and leaves its consumer as a failed delivery."""
        self.back_to_delivering()
        self.leave_consumer()

    @cython.binding(False)      # a method descriptor: the call Python specialises
    def leave_queue(self):
        """-> DONE: gone for good (acknowledged, dead-lettered, expired, dropped, its queue deleted); it
        stands for no delivery any more."""
        self.state = DONE
        self.delivery = None

    @cython.binding(False)      # a method descriptor: the call Python specialises
    def record_failure(self, now_ms, reason):
        """Note a failed delivery, for the history a dead-letter copy carries."""
        if self.failures is None:
            self.failures = [(now_ms, reason)]
        else:
            self.failures.append((now_ms, reason))

    def __repr__(self):
        return (f"Reference(message={self.data.message_id}, queue={self.queue.name!r}, "
                f"delivery_count={self.delivery_count}, {_STATE_NAMES[self.state]})")


cdef class Message:
    """One delivery of a message (or a browsed copy, whose delivery_count is 0).

    ``delivery_count`` is 1 on the first delivery and goes up at each dispatch; ``redelivered`` is
    ``delivery_count > 1``. ``properties`` is read-only and those of this delivery: a later change
    (a redelivery's ``redeliveryDelay``) is not seen. ``queue`` names the queue it came from.
    Acknowledge or roll it back through the consumer that received it.
    """

    cdef MessageData _data
    cdef object _properties, _ref, _owner
    cdef public object delivery_count, queue

    def __init__(self, MessageData data not None, delivery_count, queue, ref=None, owner=None):
        if data._body is None:
            data.body                 # read now: a received (or browsed) message's body is bytes from here on
        self._data = data
        self._properties = data.properties    # the dict of this moment: the broker replaces, never changes it
        self.delivery_count = delivery_count
        self.queue = queue
        self._ref = ref           # the queue reference this delivery is of (None: browsed)
        self._owner = owner       # the consumer it was delivered to (None: browsed)

    @property
    def message_id(self):
        return self._data.public_id

    @property
    def address(self):
        return self._data.address

    @property
    def body(self):
        return self._data.body

    @property
    def properties(self):
        data = self._data
        properties = self._properties
        if properties is data.properties:
            return data.properties_view()
        return MappingProxyType(properties) if properties else _EMPTY

    @property
    def durable(self):
        return self._data.durable

    @property
    def expiration(self):
        return self._data.expiration

    @property
    def routing_type(self):
        return self._data.routing_type

    @property
    def priority(self):
        return self._data.priority

    @property
    def redelivered(self):
        return self.delivery_count > 1

    def __repr__(self):
        data = self._data
        return (f"Message(id={data.public_id}, address={data.address!r}, queue={self.queue!r}, "
                f"delivery_count={self.delivery_count}, body={data.body[:32]!r})")


def delivery_of(Message message not None):
    """(reference, consumer) of the delivery ``message`` stands for; (None, None) for a browsed copy.

    The broker's way back from a Message it handed out to its own bookkeeping; the caller checked that
    ``message`` is a Message.
    """
    return message._ref, message._owner


cdef inline void _fill_data(MessageData data, message_id, address, body, properties, durable, expiration,
                            routing_type, priority) noexcept:
    data.message_id = message_id
    data.address = address
    data._body = body
    data._source = None
    data.properties = properties          # a dict the broker owns, or None for none
    data.durable = durable
    data.expiration = expiration          # epoch ms, 0 = never
    data.routing_type = routing_type      # None, "anycast" or "multicast"
    data.priority = priority              # 0-9, higher delivered first
    data.durable_refs = 0                 # references the store holds (> 0: the store holds the message)
    data.public_id = message_id           # the id consumers see (a Classic or Qpid copy keeps its original's)
    data._view = None


cdef inline void _fill_reference(Reference ref, data, queue, delivery_count) noexcept:
    ref.data = data
    ref.queue = queue
    ref.delivery_count = delivery_count
    ref.state = READY
    ref.delivery = None          # the Message of the current delivery (identity proves ownership)
    ref.failures = None          # [(time ms, reason)] of each failed delivery seen, or None


def recovered_datas(message_ids, fields, durable_refs, source=None):
    """The MessageData of recovered messages, from their ids and stored ``fields`` (address, body,
    properties, durable, expiration, routing type), each with ``durable_refs`` set: the one place a
    stored message becomes the broker's (the id consumers see comes out of its properties). A body
    None in ``fields`` is read from ``source`` (``source.body(message_id)``) when first asked for."""
    cdef list out = []
    cdef MessageData data
    for message_id, stored in zip(message_ids, fields):
        address, body, properties, durable, expiration, routing_type, priority = stored
        if body is None and source is None:
            raise ValueError(f"message {message_id}: a body left unread needs the source that reads it")
        public_id = properties.pop(MESSAGE_ID_PROPERTY, None) if properties else None
        data = MessageData.__new__(MessageData)       # as MessageData(...), without parsing the arguments
        _fill_data(data, message_id, address, body, properties or None, durable, expiration, routing_type, priority)
        if body is None:
            data._source = source
        data.durable_refs = durable_refs
        if public_id is not None:
            data.public_id = public_id
        out.append(data)
    return out


def ready_references(datas, queue, delivery_counts):
    """A READY Reference on ``queue`` of each MessageData, with its recovered delivery count."""
    cdef list out = []
    cdef Reference ref
    for data, count in zip(datas, delivery_counts):
        ref = Reference.__new__(Reference)             # as Reference(...), without parsing the arguments
        _fill_reference(ref, data, queue, count)
        out.append(ref)
    return out


def split_by_level(const uint64_t[::1] message_ids not None, const uint32_t[::1] counts not None,
                   const uint8_t[::1] priorities not None, const uint8_t[::1] level_of not None, dict rows not None):
    """A recovered queue's columns split by level, in one pass: {level: (message ids, delivery counts)}
    (arrays "Q" and "I", row order kept). ``level_of``: 256 bytes, each priority's level (255: none);
    ``rows``: how many rows each level has (counted before), which sizes its arrays."""
    cdef Py_ssize_t n = message_ids.shape[0], i
    cdef uint64_t *ids[256]
    cdef uint32_t *delivery_counts[256]
    cdef Py_ssize_t filled[256]
    cdef Py_ssize_t capacity[256]
    cdef array.array id_column, count_column
    cdef uint8_t level
    cdef dict out = {}
    if counts.shape[0] != n or priorities.shape[0] != n or level_of.shape[0] != 256:
        raise ValueError(f"split_by_level: {n} ids, {counts.shape[0]} counts, {priorities.shape[0]} priorities "
                         f"and a table of {level_of.shape[0]} levels (256)")
    for i in range(256):
        capacity[i] = 0
    for each, count in rows.items():
        if not 0 <= each < 255:
            raise ValueError(f"split_by_level: level {each} (0..254)")
        id_column = array.clone(_IDS, count, zero=False)
        count_column = array.clone(_COUNTS, count, zero=False)
        out[each] = (id_column, count_column)
        ids[each] = id_column.data.as_ulonglongs
        delivery_counts[each] = count_column.data.as_uints
        filled[each] = 0
        capacity[each] = count
    for i in range(n):
        level = level_of[priorities[i]]
        if level == 255:
            continue
        if filled[level] == capacity[level]:
            raise ValueError(f"split_by_level: level {level} has more rows than the {capacity[level]} counted")
        ids[level][filled[level]] = message_ids[i]
        delivery_counts[level][filled[level]] = counts[i]
        filled[level] += 1
    for each in rows:
        if filled[each] != capacity[each]:
            raise ValueError(f"split_by_level: level {each} has {filled[each]} rows, not the {capacity[each]} counted")
    return out


cdef array.array _IDS = py_array.array("Q")
cdef array.array _COUNTS = py_array.array("I")


@cython.final
cdef class ReadyQueue:
    """A recovered queue's ready references, made a chunk at a time as its head reaches them.

    A recovery finds a queue's references as columns; ``make(start, stop)`` makes the References of
    rows ``start`` to ``stop`` (in delivery order). Making all of them at the queue's first use made a
    first receive after a restart cost the whole queue (100k messages: 0.08 s); here it costs one
    chunk (``chunk`` rows, limits.READY_CHUNK). The deque operations the broker uses behave as on a
    deque holding every reference: what is appended while rows wait comes after all of them, and
    what needs the whole queue (iteration, an index past the made head, ``insert``) makes the rest
    first. Under the broker's lock, as a queue's deque is."""
    cdef object _made           # deque: the references made and not taken, head first
    cdef object _later          # deque: appended while rows wait (after every recovered one); None after
    cdef object _make           # make(start, stop) -> list of References; None once every row is made
    cdef Py_ssize_t _next, _end, _chunk

    def __init__(self, make, Py_ssize_t rows, Py_ssize_t chunk=READY_CHUNK):
        if rows < 0 or chunk < 1:
            raise ValueError(f"ReadyQueue: rows {rows} and chunk {chunk} (rows >= 0, chunk >= 1)")
        self._made = deque()
        self._later = deque() if rows else None
        self._make = make if rows else None
        self._next = 0
        self._end = rows
        self._chunk = chunk

    @property
    def unmade(self):
        """Recovered rows whose References are not made yet."""
        return self._end - self._next

    cdef int _more(self) except -1:
        """Make the next chunk of rows at the tail of the made references; after the last row, the
        references appended meanwhile follow them."""
        cdef Py_ssize_t start = self._next, stop = min(self._next + self._chunk, self._end)
        refs = self._make(start, stop)
        if len(refs) != stop - start:
            raise RuntimeError(f"ReadyQueue: make({start}, {stop}) gave {len(refs)} references")
        self._next = stop
        self._made.extend(refs)
        if stop == self._end:
            self._made.extend(self._later)
            self._later = None
            self._make = None
        return 0

    cdef int _all(self) except -1:
        while self._make is not None:
            self._more()
        return 0

    def __len__(self):
        return len(self._made) + (self._end - self._next) + (len(self._later) if self._later is not None else 0)

    def __bool__(self):
        return bool(self._made) or self._make is not None

    def popleft(self):
        if not self._made and self._make is not None:
            self._more()
        return self._made.popleft()

    def append(self, ref):
        if self._later is not None:
            self._later.append(ref)
        else:
            self._made.append(ref)

    def appendleft(self, ref):
        self._made.appendleft(ref)

    def extendleft(self, refs):
        self._made.extendleft(refs)

    def clear(self):
        self._made.clear()
        self._later = None
        self._make = None
        self._next = self._end

    def insert(self, Py_ssize_t index, ref):
        self._all()
        self._made.insert(index, ref)

    @cython.wraparound(True)        # ready[-1] is the last reference, as a deque's
    def __getitem__(self, Py_ssize_t index):
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

    def __repr__(self):
        return f"ReadyQueue({len(self)} references, {self._end - self._next} not made yet)"


# --------------------------------------------------------------------------- attribute access
# The broker reads and writes MessageData's and Reference's fields a dozen times per message: each is a
# member descriptor, as ``__slots__`` would make (_member_slots.pxd). These two classes stay inside the
# broker: nothing deletes their fields, which would leave a NULL that the methods above do not expect.

cdef list _member_names = []     # the descriptors point at these names: kept for the module's life


cdef _probe(object instance, tuple fields):
    """``instance`` with each of ``fields`` set to a distinct marker, and the markers."""
    markers = tuple(object() for _ in fields)
    for name, marker in zip(fields, markers):
        setattr(instance, name, marker)
    return instance, markers


_MESSAGE_DATA_FIELDS = ("message_id", "address", "properties", "durable", "expiration", "routing_type",
                        "durable_refs", "public_id", "priority")     # and ``body``, a property (read when first asked for)
_REFERENCE_FIELDS = ("data", "queue", "delivery_count", "state", "delivery", "failures")
_instance, _markers = _probe(MessageData(0, "", b"", None, False, 0, None), _MESSAGE_DATA_FIELDS)
expose_as_members(MessageData, _MESSAGE_DATA_FIELDS, _instance, _markers, False, _member_names)
_instance, _markers = _probe(Reference(None, None), _REFERENCE_FIELDS)
expose_as_members(Reference, _REFERENCE_FIELDS, _instance, _markers, False, _member_names)
del _instance, _markers
