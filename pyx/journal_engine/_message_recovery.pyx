# cython: language_level=3
"""Compiled recovery of the message store: its message journal's live records -> per-queue columns.

The message store (journal_engine.message_store) recovers a million messages without a Python
object per reference: ``recover_messages`` reads the journal's live records as columns (_replay's
RecordColumns), replays each message's references in C and gathers the live ones per queue;
``MessageBodies`` keeps the bodies where they lie in the journal's files until the broker reads
them (``decode_messages_fields``: the fields of many at once). Bodies are parsed by _store_body
(its .pxd), as the Spark columns parse them; reads of bodies left in mapped journal files go
through a SIGBUS guard. The twin is journal_engine._twin.message_recovery;
tests/store/test_message_columns.py keeps them equal.
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memcmp, memcpy, memmove, memset

from cpython cimport array
import array

from collections.abc import KeysView, Mapping

import journal_engine.record_format as _format
from journal_engine._livemap cimport LiveMap
from journal_engine._replay cimport RecordColumns, records_as_columns
from journal_engine._store_body cimport (
    Bytes, MessageFields, _append, _free, _message_fields, _reserve, _u32, _u64, DELIVERY_COUNT_BYTES,
    FLAG_DURABLE, PRIORITY_DEFAULT, QUEUE_ID_BYTES, ROUTING_NAME_OF_CODE, SCHEDULED_TIME_BYTES, TYPE_ACKNOWLEDGE_REF,
    TYPE_ADD_MESSAGE, TYPE_ADD_REF, TYPE_DELIVERY_COUNT, TYPE_DUPLICATE_ID, TYPE_SCHEDULED_TIME,
)
from journal_engine.errors import CorruptRecordError, FileChangedError
from journal_engine.limits import ONE_QUEUE_ID_MAX as _ONE_QUEUE_ID_MAX


cdef extern from *:
    void __builtin_prefetch(const void *addr) noexcept nogil

DEF BODY_PREFETCH_AHEAD = 4     # decode_messages_fields: bodies asked for ahead of the one read
DEF CACHE_LINE_BYTES = 64

cdef extern from "bus_guard.h":
    int JE_BUS_FAULT
    int je_bus_install()
    int je_bus_guarded_copy(void *dst, const void *src, size_t n) nogil
    int je_bus_guarded(int (*fn)(void *) noexcept nogil, void *arg) nogil

je_bus_install()    # the recovery's reads of bodies left in mapped journal files are guarded (below)

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(object op)


cdef uint64_t ONE_QUEUE_ID_MAX = _ONE_QUEUE_ID_MAX


cdef const uint8_t *_address(object buffer) except NULL:
    """The first byte of a buffer of the journal's columns: owned bytes, or a mapped file (a
    MappedFile or a Body view, whose memory stays where it is while the object lives)."""
    cdef Py_buffer view
    cdef const uint8_t *p
    if type(buffer) is bytes:
        return <const uint8_t *>PyBytes_AS_STRING(buffer)
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    p = <const uint8_t *>view.buf
    PyBuffer_Release(&view)
    return p if p != NULL else <const uint8_t *>b""


cdef object _cut_under_read(list buffers, Py_ssize_t buffer):
    """What a read from ``buffers[buffer]`` meets when the guard catches a cut: FileChangedError
    naming the file. (The reads below name their buffer by list and index, so that a read that does
    not fault takes no reference to it.)"""
    return FileChangedError("a journal file was cut short while the message store read a body from it",
                            path=getattr(buffers[buffer], "path", None),
                            hint="another process truncated the message journal; stop it, then open the "
                                 "store again")


cdef int _read_guarded(void *dst, const uint8_t *src, Py_ssize_t n, list buffers, Py_ssize_t buffer) except -1:
    """Copy ``n`` bytes of a body out of the journal's buffers under the SIGBUS guard: a mapped file
    another process cut short is a FileChangedError naming it, never a signal."""
    if n > 0 and je_bus_guarded_copy(dst, src, <size_t>n) == JE_BUS_FAULT:
        raise _cut_under_read(buffers, buffer)
    return 0


cdef struct FieldsRead:
    const uint8_t *body
    Py_ssize_t size
    MessageFields *fields
    bint ok


cdef int _read_fields(void *arg) noexcept nogil:
    cdef FieldsRead *read = <FieldsRead *>arg
    read.ok = _message_fields(read.body, read.size, read.fields)
    return 0


cdef bint _message_fields_guarded(const uint8_t *body, Py_ssize_t size, MessageFields *fields,
                                  list buffers, Py_ssize_t buffer) except -1:
    """_message_fields of a body where it lies (a mapped file too), under the SIGBUS guard: the parse
    reads the head, the address and the properties, not the payload a copy would move. The Text
    fields point into ``body``: read them under a guard too."""
    cdef FieldsRead read
    read.body = body
    read.size = size
    read.fields = fields
    read.ok = False
    if size > 0 and je_bus_guarded(_read_fields, &read) == JE_BUS_FAULT:
        raise _cut_under_read(buffers, buffer)
    return read.ok


cdef const uint8_t *_body_copy(Bytes *scratch, const uint8_t *src, Py_ssize_t n, list buffers,
                               Py_ssize_t buffer) except NULL:
    """A body copied into ``scratch`` (grown as needed, reused): what the parsers read, so that no
    parse touches a mapped page outside the guard."""
    scratch.size = 0
    _reserve(scratch, n + 1)
    _read_guarded(scratch.data, src, n, buffers, buffer)
    return <const uint8_t *>scratch.data


# ----- recovery: the message store's live records into per-queue columns ------------------------------

# a queue's recovered references while they are gathered
cdef struct QueueGather:
    Bytes message_ids           # uint64 per reference
    Bytes delivery_counts       # uint32
    Bytes scheduled_times       # uint64
    Bytes priorities            # uint8, only once some message is not of the default priority
    uint64_t last_message_id
    bint ascending
    bint timed
    bint shared
    bint prioritized


# a live reference while a message's updates are replayed
cdef struct LiveRef:
    uint64_t queue_id
    uint32_t delivery_count
    uint64_t scheduled_time


@cython.final
cdef class QueueReferences:
    """One queue's recovered references as columns, in store order: ``message_ids`` (array 'Q'),
    ``delivery_counts`` ('I', the last persisted), ``scheduled_times`` ('Q', epoch ms, 0: now).
    ``ascending``: the ids rise; ``timed``: some reference has a scheduled time or its message an
    expiration; ``shared``: some message has a live reference on another queue too. ``priorities``
    ('B', each message's priority) when some message is not of the default priority, else None."""
    cdef readonly object message_ids
    cdef readonly object delivery_counts
    cdef readonly object scheduled_times
    cdef readonly object priorities
    cdef readonly bint ascending
    cdef readonly bint timed
    cdef readonly bint shared

    def __len__(self):
        return len(self.message_ids)

    def __repr__(self):
        return f"<QueueReferences: {len(self.message_ids)} references>"


@cython.final
cdef class MessageBodies:
    """``MessageRecovery.bodies``: message id -> its ADD_MESSAGE body, a read-only mapping over the
    journal's columns (``RecordColumns``, which it keeps): a body is copied out only when it is looked
    at, and :func:`decode_messages_fields` reads many straight from the columns."""
    cdef LiveMap index          # message id -> its row in columns (a C table: no Python int per message)
    cdef object order           # array 'Q': the message ids in the order recovery found them
    cdef object columns         # RecordColumns
    cdef object bases           # array 'Q': the address of each of the columns' buffers
    cdef Bytes scratch          # a body copied out of a mapped file under the guard, then parsed
    cdef object __weakref__     # the message store's pin releaser refers to it weakly

    def __dealloc__(self):
        PyMem_Free(self.scratch.data)

    cdef Py_ssize_t _row(self, message_id) except -1:
        """The row of `message_id`; KeyError when it is none of the messages (whatever its type)."""
        cdef int64_t row = -1
        if isinstance(message_id, int) and 0 <= message_id <= 0xFFFFFFFFFFFFFFFF:
            row = self.index.get_bytes(<uint64_t>message_id)
        if row < 0:
            raise KeyError(message_id)
        return <Py_ssize_t>row

    cdef void _prefetch(self, Py_ssize_t row) noexcept:
        """Ask the CPU for a row's body ahead of its read (a prefetch never faults, even on a page a
        cut file lost)."""
        cdef object columns = self.columns
        cdef Py_ssize_t start = (<array.array>columns.body_start).data.as_longlongs[row]
        cdef Py_ssize_t end = (<array.array>columns.body_end).data.as_longlongs[row]
        cdef const uint8_t *base = <const uint8_t *><uintptr_t>(<array.array>self.bases).data.as_ulonglongs[
            (<array.array>columns.body_buffer).data.as_uints[row]]
        cdef Py_ssize_t at = start
        while at < end:
            __builtin_prefetch(base + at)
            at += CACHE_LINE_BYTES
        __builtin_prefetch(base + end - 1)

    cdef const uint8_t *_body(self, Py_ssize_t row, Py_ssize_t *size) except NULL:
        """The body of a row copied into ``scratch`` (valid until the next call)."""
        cdef object columns = self.columns
        cdef Py_ssize_t start = (<array.array>columns.body_start).data.as_longlongs[row]
        cdef unsigned int buffer = (<array.array>columns.body_buffer).data.as_uints[row]
        size[0] = (<array.array>columns.body_end).data.as_longlongs[row] - start
        return _body_copy(&self.scratch, <const uint8_t *><uintptr_t>(<array.array>self.bases).data.as_ulonglongs[buffer]
                          + start, size[0], columns.buffers, buffer)

    def __getitem__(self, message_id):
        cdef Py_ssize_t size
        cdef const uint8_t *body = self._body(self._row(message_id), &size)
        return PyBytes_FromStringAndSize(<const char *>body, size)

    def release_file(self, path):
        """Copy the bodies that lie in the mapped journal file at ``path`` into one buffer these
        columns own, and let the mapping go: a compaction that reclaims the file (message_store's
        pin releaser) may then recycle it instead of deleting it under a mapping that would hold its
        space until the broker closes. Returns how many bodies moved. Every read of a body copies it
        out in one step that lets no other thread in, so a release between two reads is safe."""
        cdef object columns = self.columns
        cdef list buffers = columns.buffers
        cdef uint32_t *body_buffer = <uint32_t *>(<array.array>columns.body_buffer).data.as_voidptr
        cdef int64_t *body_start = <int64_t *>(<array.array>columns.body_start).data.as_voidptr
        cdef int64_t *body_end = <int64_t *>(<array.array>columns.body_end).data.as_voidptr
        cdef uint32_t *update_buffer = <uint32_t *>(<array.array>columns.update_buffer).data.as_voidptr
        cdef int64_t *update_start = <int64_t *>(<array.array>columns.update_start).data.as_voidptr
        cdef int64_t *update_end = <int64_t *>(<array.array>columns.update_end).data.as_voidptr
        cdef Py_ssize_t rows = len(columns.record_id), updates = len(columns.update_type)
        cdef Py_ssize_t b, row, total, at, size, moved = 0
        cdef const uint8_t *base
        cdef bytes owned
        cdef char *out
        for b in range(len(buffers)):
            if type(buffers[b]) is bytes or getattr(buffers[b], "path", None) != path:
                continue
            base = <const uint8_t *><uintptr_t>(<array.array>self.bases).data.as_ulonglongs[b]
            total = 0
            for row in range(rows):
                if body_buffer[row] == b:
                    total += body_end[row] - body_start[row]
            owned = PyBytes_FromStringAndSize(NULL, total)
            out = PyBytes_AS_STRING(owned)
            at = 0
            for row in range(rows):     # a fault (the file cut meanwhile) leaves every row as it was
                if body_buffer[row] == b:
                    size = body_end[row] - body_start[row]
                    _read_guarded(out + at, base + body_start[row], size, buffers, b)
                    at += size
            at = 0
            for row in range(rows):
                if body_buffer[row] == b:
                    size = body_end[row] - body_start[row]
                    body_start[row] = at
                    body_end[row] = at + size
                    at += size
                    moved += 1
            for row in range(updates):  # read at load only: left empty, never pointing into the old file
                if update_buffer[row] == b:
                    update_start[row] = update_end[row] = 0
            buffers[b] = owned
            (<array.array>self.bases).data.as_ulonglongs[b] = <uintptr_t>PyBytes_AS_STRING(owned)
        return moved

    def get(self, message_id, default=None):
        return self[message_id] if message_id in self else default

    def __contains__(self, message_id):
        return isinstance(message_id, int) and message_id in self.index

    def __iter__(self):
        return iter(self.order)

    def __len__(self):
        return len(self.order)

    def keys(self):
        return KeysView(self)

    def items(self):
        return [(message_id, self[message_id]) for message_id in self.order]

    def values(self):
        return [self[message_id] for message_id in self.order]

    def __eq__(self, other):
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and all(key in other and other[key] == self[key] for key in self.order)

    def __repr__(self):
        return f"<MessageBodies: {len(self.order)} messages>"


Mapping.register(MessageBodies)


@cython.final
cdef class MessageRecovery:
    """What ``recover_messages`` found: every rule of the message store's recovery applied (the
    twin, _twin/message_columns.py, applies the same ones)."""
    cdef readonly object max_record_id
    cdef readonly object bodies             # MessageBodies: message id -> its ADD_MESSAGE body, for messages with a live reference
    cdef readonly LiveMap one_queue         # message id -> the queue id of its one live reference (message_queues.py)
    cdef readonly dict several_queues       # message id -> the tuple of queue ids of its several live references
    cdef readonly dict references           # queue id -> QueueReferences (delivery counts as the journal holds them)
    cdef readonly list unreferenced         # message ids without a live reference, in store order
    cdef readonly list anomalies            # what recovery reports of odd records, never fatal (text)
    cdef readonly list corrupt              # CorruptRecordError of each message record_format rejects (left out)
    cdef readonly list unknown_references   # (queue id, message id, journal count, count, scheduled ms) on queues not given
    cdef readonly list from_shadow          # (queue id, row in its references or -1, message id, count): the shadow's count wins
    cdef readonly list duplicate_ids        # (record id, body) of each DUPLICATE_ID record, in store order


cdef inline int _put_u64(Bytes *buf, uint64_t value) except -1:
    return _append(buf, &value, 8)


cdef array.array _column(Bytes *buf, str typecode):
    """A finished column as an array (its bytes copied once, straight in; the buffer freed)."""
    cdef array.array column = array.array(typecode)
    try:
        if buf.size:
            array.resize(column, buf.size // column.ob_descr.itemsize)
            memcpy(column.data.as_chars, buf.data, buf.size)
    finally:
        _free(buf)
    return column


cdef struct QueueTable:
    # queue id -> its index among the known queues: an open-addressing table, so that the loop over
    # every message finds a reference's queue without making a Python int (a dict lookup would)
    uint64_t *keys
    Py_ssize_t *index          # -1: an empty slot
    Py_ssize_t mask


cdef inline Py_ssize_t _queue_slot(const QueueTable *table, uint64_t queue_id) noexcept nogil:
    cdef Py_ssize_t i = <Py_ssize_t>(((queue_id * <uint64_t>0x9E3779B97F4A7C15) >> 32) & <uint64_t>table.mask)
    while table.index[i] >= 0 and table.keys[i] != queue_id:
        i = (i + 1) & table.mask
    return i


cdef int _queue_table(QueueTable *table, dict queue_index) except -1:
    """Fill `table` (its arrays allocated here, freed by the caller) from queue id -> index."""
    cdef Py_ssize_t capacity = 8, i
    cdef uint64_t queue_id
    while capacity < 2 * len(queue_index):
        capacity *= 2
    table.keys = <uint64_t *>PyMem_Malloc(capacity * sizeof(uint64_t))
    table.index = <Py_ssize_t *>PyMem_Malloc(capacity * sizeof(Py_ssize_t))
    table.mask = capacity - 1
    if table.keys == NULL or table.index == NULL:
        raise MemoryError()
    for i in range(capacity):
        table.index[i] = -1
    for queue_key, q in queue_index.items():
        queue_id = queue_key
        i = _queue_slot(table, queue_id)
        table.keys[i] = queue_id
        table.index[i] = q
    return 0


cdef object _rejection(decode, tuple args, dict keywords):
    """The CorruptRecordError record_format raises for a record the compiled checks refuse (the one
    text users see); None when record_format reads it after all."""
    try:
        decode(*args, **keywords)
    except CorruptRecordError as error:
        return error
    return None


cdef int _index_messages(MessageBodies bodies, MessageRecovery out, array.array rows, array.array queue_of) except -1:
    """The tables of the recovered messages (``bodies.order``): message id -> its row (``bodies.index``)
    and -> its one queue (``out.one_queue``; -1 in ``queue_of``: on several). Ids that rise, as a
    store's counter hands them out, stay where they lie as both tables' base: no insert, no table of
    a million slots (LiveMap.take)."""
    cdef array.array order = bodies.order
    cdef const uint64_t *ids = <const uint64_t *>order.data.as_voidptr
    cdef Py_ssize_t count = len(order)
    bodies.index.take((order, rows), ids, <int64_t *>rows.data.as_voidptr, count)
    out.one_queue.take((order, queue_of), ids, <int64_t *>queue_of.data.as_voidptr, count)
    return 0

def recover_messages(records, known_queues, long long now_ms, shadow_counts=None, path=None):
    """The message store's recovery of its message journal's live ``records`` (``LoadResult.records``
    or any mapping of record id -> RecordInfo), in one pass without a Python object per reference:
    the rules of replaying a message's references live here and in the twin, nowhere else.

    The journal's own mapping is read as its columns (``_replay.record_columns``): no RecordInfo is
    made. ``known_queues``: the queue ids of the bindings journal, in its order. For every message
    it replays the references (ADD_REF, ACKNOWLEDGE_REF, delivery counts, scheduled times: the last
    in journal order wins) and gathers the live ones per queue; a scheduled time at or before
    ``now_ms`` becomes 0. Odd records are reported in ``anomalies`` and skipped (another record type,
    a second ADD_REF, an update of a reference that is not live or of an unknown type); a message
    whose body or update record_format rejects goes to ``corrupt`` (its error, naming ``path``);
    references on a queue not given go to ``unknown_references``. ``shadow_counts``: (queue id,
    message id) -> the delivery count a killed process left in its shadow; one that differs from
    the journal's is listed in ``from_shadow`` (the references keep the journal's).
    """
    cdef _Recovery recovery = _Recovery.__new__(_Recovery)
    cdef Py_ssize_t i
    recovery.begin(records_as_columns(records), known_queues, now_ms, shadow_counts or {}, path)
    for i in range(recovery.count):
        recovery.message(i)
    return recovery.finish()


@cython.final
cdef class _Recovery:
    """One run of recover_messages, message by message: the journal's columns, what is gathered so
    far, and the C memory it is gathered in (freed with this object, however the run ends)."""
    cdef MessageRecovery out
    cdef MessageBodies bodies
    cdef object path
    cdef object shadow_counts           # (queue id, message id) -> a killed process's delivery count
    cdef bint shadowed_any              # shadow_counts holds any (most recoveries: none)
    cdef long long now_ms
    cdef dict queue_index               # queue id -> its index among the known queues
    cdef Py_ssize_t queues, count
    cdef QueueGather *gather            # per known queue
    cdef QueueTable queue_table
    cdef LiveRef *live                  # the live references of the message being replayed
    cdef Py_ssize_t live_capacity
    cdef const char **bases             # the address of each of the columns' buffers
    cdef list buffers
    cdef Bytes order, rows, queue_of    # per message in `order`: its row, its one queue (or -1)
    cdef uint64_t max_id
    # the columns (RecordColumns, which ``bodies`` keeps)
    cdef const uint64_t *ids
    cdef const uint8_t *types
    cdef const uint32_t *body_buffer
    cdef const int64_t *body_start
    cdef const int64_t *body_end
    cdef const int64_t *update_first
    cdef const uint8_t *update_type
    cdef const uint32_t *update_buffer
    cdef const int64_t *update_start
    cdef const int64_t *update_end

    def __dealloc__(self):
        cdef Py_ssize_t q
        if self.gather != NULL:
            for q in range(self.queues):
                PyMem_Free(self.gather[q].message_ids.data)
                PyMem_Free(self.gather[q].delivery_counts.data)
                PyMem_Free(self.gather[q].scheduled_times.data)
                PyMem_Free(self.gather[q].priorities.data)
        PyMem_Free(self.gather)
        PyMem_Free(self.live)
        PyMem_Free(self.bases)
        PyMem_Free(self.queue_table.keys)
        PyMem_Free(self.queue_table.index)
        PyMem_Free(self.order.data)
        PyMem_Free(self.rows.data)
        PyMem_Free(self.queue_of.data)

    cdef int begin(self, RecordColumns columns, known_queues, long long now_ms, shadow_counts, path) except -1:
        """The recovery's empty results, the columns' pointers, a gathering per known queue (in the
        bindings journal's order) and the address of each buffer of bodies."""
        cdef MessageRecovery out = MessageRecovery.__new__(MessageRecovery)
        cdef MessageBodies bodies = MessageBodies.__new__(MessageBodies)
        cdef Py_ssize_t q, b
        cdef list buffers = columns.buffers
        self.out = out
        self.bodies = out.bodies = bodies
        bodies.index = LiveMap()
        bodies.order = array.array("Q")
        bodies.columns = columns
        out.one_queue = LiveMap()
        out.several_queues = {}
        out.references = {}
        out.unreferenced = []
        out.anomalies = []
        out.corrupt = []
        out.unknown_references = []
        out.from_shadow = []
        out.duplicate_ids = []
        out.max_record_id = 0
        self.now_ms = now_ms
        self.shadow_counts = shadow_counts
        self.shadowed_any = bool(shadow_counts)
        self.path = path
        self.buffers = buffers
        self.count = len(columns)
        self.ids = <const uint64_t *>columns.record_id.data.as_voidptr
        self.types = <const uint8_t *>columns.record_type.data.as_voidptr
        self.body_buffer = <const uint32_t *>columns.body_buffer.data.as_voidptr
        self.body_start = <const int64_t *>columns.body_start.data.as_voidptr
        self.body_end = <const int64_t *>columns.body_end.data.as_voidptr
        self.update_first = <const int64_t *>columns.update_first.data.as_voidptr
        self.update_type = <const uint8_t *>columns.update_type.data.as_voidptr
        self.update_buffer = <const uint32_t *>columns.update_buffer.data.as_voidptr
        self.update_start = <const int64_t *>columns.update_start.data.as_voidptr
        self.update_end = <const int64_t *>columns.update_end.data.as_voidptr
        self.queue_index = {}
        for queue_key in known_queues:
            self.queue_index[queue_key] = len(self.queue_index)
        self.queues = len(self.queue_index)
        self.gather = <QueueGather *>PyMem_Malloc(max(self.queues, 1) * sizeof(QueueGather))
        self.bases = <const char **>PyMem_Malloc(max(len(buffers), 1) * sizeof(const char *))
        if self.gather == NULL or self.bases == NULL:
            raise MemoryError()
        memset(self.gather, 0, max(self.queues, 1) * sizeof(QueueGather))
        for q in range(self.queues):
            self.gather[q].ascending = True
        bodies.bases = array.array("Q", [0]) * len(buffers)
        for b in range(len(buffers)):
            self.bases[b] = <const char *>_address(buffers[b])
            (<array.array>bodies.bases).data.as_ulonglongs[b] = <uintptr_t>self.bases[b]
        _queue_table(&self.queue_table, self.queue_index)
        return 0

    cdef inline int message(self, Py_ssize_t i) except -1:
        """Message ``i`` of the columns: its live references gathered per queue, or why it is left
        out (another record type, a record record_format rejects, no live reference)."""
        cdef uint64_t message_id = self.ids[i]
        cdef int64_t expiration
        cdef int priority
        cdef Py_ssize_t n_live
        if i == 0 or message_id > self.max_id:
            self.max_id = message_id
        if self.types[i] != TYPE_ADD_MESSAGE:
            if self.types[i] == TYPE_DUPLICATE_ID:      # a duplicate-id cache entry: the store decodes it
                self.out.duplicate_ids.append((message_id, _copy_bytes(
                    <const uint8_t *>self.bases[self.body_buffer[i]] + self.body_start[i],
                    self.body_end[i] - self.body_start[i], self.buffers, self.body_buffer[i])))
                return 0
            self.out.anomalies.append(f"message journal record {message_id} has type {self.types[i]}, not a message "
                                      f"({TYPE_ADD_MESSAGE}); ignored")
            return 0
        if not self._head(i, message_id, &expiration, &priority):
            return 0
        n_live = self._live_references(i, message_id)
        if n_live < 0:
            return 0        # the message is left out, as record_format's reading leaves it
        if n_live == 0:
            self.out.unreferenced.append(message_id)
            return 0
        self._gather(message_id, n_live, expiration, priority)
        self._keep(i, message_id, n_live)
        return 0

    cdef inline bint _head(self, Py_ssize_t i, uint64_t message_id, int64_t *expiration, int *priority) except -1:
        """Message ``i``'s expiration and priority, parsed where its body lies (the fields recovery
        needs: no copy of the body); False when record_format rejects the body (its error goes to
        ``corrupt``)."""
        cdef MessageFields fields
        cdef Py_ssize_t body_size = self.body_end[i] - self.body_start[i]
        cdef const uint8_t *body = <const uint8_t *>self.bases[self.body_buffer[i]] + self.body_start[i]
        if _message_fields_guarded(body, body_size, &fields, self.buffers, self.body_buffer[i]):
            expiration[0] = fields.expiration
            priority[0] = fields.priority
            return True
        raw = _copy_bytes(body, body_size, self.buffers, self.body_buffer[i])
        error = _rejection(_format.decode_message, (message_id, raw), dict(path=self.path))
        if error is not None:
            self.out.corrupt.append(error)
            return False
        stored = _format.decode_message(message_id, raw, path=self.path)
        expiration[0] = stored.expiration
        priority[0] = stored.priority
        return True

    cdef inline Py_ssize_t _live_references(self, Py_ssize_t i, uint64_t message_id) except -2:
        """Message ``i``'s updates replayed into ``live`` (ADD_REF, ACKNOWLEDGE_REF, delivery counts,
        scheduled times: the last in journal order wins): how many references are live, or -1 when
        record_format rejects an update (its error goes to ``corrupt``). Odd updates are anomalies."""
        cdef Py_ssize_t n_live = 0, u, j, k, size, expected_size
        cdef int user_type
        cdef uint64_t queue_id
        cdef uint8_t update[32]         # an update's body, copied out under the guard (sizes checked first)
        cdef const uint8_t *p
        cdef LiveRef *grown
        # the columns in locals: the calls below (the guarded reads) would make C load them again
        cdef const uint8_t *update_type = self.update_type
        cdef const uint32_t *update_buffer = self.update_buffer
        cdef const int64_t *update_start = self.update_start
        cdef const int64_t *update_end = self.update_end
        cdef const char **bases = self.bases
        for u in range(self.update_first[i], self.update_first[i + 1]):
            user_type = update_type[u]
            size = update_end[u] - update_start[u]
            if user_type == TYPE_ADD_REF or user_type == TYPE_ACKNOWLEDGE_REF:
                expected_size = QUEUE_ID_BYTES
            elif user_type == TYPE_DELIVERY_COUNT:
                expected_size = DELIVERY_COUNT_BYTES
            elif user_type == TYPE_SCHEDULED_TIME:
                expected_size = SCHEDULED_TIME_BYTES
            else:
                self.out.anomalies.append(f"message {message_id}: update of unknown type {user_type}; ignored")
                continue
            if size != expected_size:
                self.out.corrupt.append(_update_rejection(user_type, _copy_bytes(
                    <const uint8_t *>bases[update_buffer[u]] + update_start[u], size,
                    self.buffers, update_buffer[u]), message_id, self.path))
                return -1
            _read_guarded(update, <const uint8_t *>bases[update_buffer[u]] + update_start[u], size,
                          self.buffers, update_buffer[u])
            p = update
            queue_id = _u64(p)
            k = -1
            for j in range(n_live):
                if self.live[j].queue_id == queue_id:
                    k = j
                    break
            if user_type == TYPE_ADD_REF:
                if k >= 0:
                    self.out.anomalies.append(f"message {message_id}: a second ADD_REF on queue {queue_id}; kept one")
                    continue
                if n_live == self.live_capacity:
                    self.live_capacity = max(8, 2 * self.live_capacity)
                    grown = <LiveRef *>PyMem_Realloc(self.live, self.live_capacity * sizeof(LiveRef))
                    if grown == NULL:
                        raise MemoryError()
                    self.live = grown
                self.live[n_live].queue_id = queue_id
                self.live[n_live].delivery_count = 0
                self.live[n_live].scheduled_time = 0
                n_live += 1
            elif user_type == TYPE_ACKNOWLEDGE_REF:
                if k < 0:
                    self.out.anomalies.append(f"message {message_id}: acknowledgement on queue {queue_id}, which holds "
                                     "no live reference of it; ignored")
                    continue
                memmove(&self.live[k], &self.live[k + 1], (n_live - k - 1) * sizeof(LiveRef))
                n_live -= 1
            elif user_type == TYPE_DELIVERY_COUNT:
                if k < 0:
                    self.out.anomalies.append(f"message {message_id}: delivery count {_u32(p + 8)} for queue {queue_id}, "
                                     "which holds no live reference of it; ignored")
                    continue
                self.live[k].delivery_count = _u32(p + 8)     # the last record in journal order wins
            else:
                if k < 0:
                    self.out.anomalies.append(f"message {message_id}: scheduled time {_u64(p + 8)} for queue {queue_id}, "
                                     "which holds no live reference of it; ignored")
                    continue
                self.live[k].scheduled_time = _u64(p + 8)
        return n_live

    cdef inline int _gather(self, uint64_t message_id, Py_ssize_t n_live, int64_t expiration,
                            int priority) except -1:
        """Each live reference of a message onto its queue's gathering (onto ``unknown_references`` when
        the bindings journal holds no such queue): a scheduled time at or before now becomes 0, a shadow
        count that differs from the journal's goes to ``from_shadow``."""
        cdef Py_ssize_t j, q
        cdef uint64_t scheduled
        cdef uint8_t level = <uint8_t>priority, default_level = <uint8_t>PRIORITY_DEFAULT
        cdef Py_ssize_t k
        cdef object shadowed = None
        cdef LiveRef *live = self.live
        cdef QueueGather *gather = self.gather
        for j in range(n_live):
            scheduled = live[j].scheduled_time
            if scheduled and self.now_ms >= 0 and scheduled <= <uint64_t>self.now_ms:
                scheduled = 0       # it fell due while the store was closed: deliver now
            q = self.queue_table.index[_queue_slot(&self.queue_table, live[j].queue_id)]
            if self.shadowed_any:
                shadowed = self.shadow_counts.get((live[j].queue_id, message_id))
                if shadowed is not None and shadowed == live[j].delivery_count:
                    shadowed = None
            if q < 0:
                self.out.anomalies.append(f"message {message_id} has a reference on queue {live[j].queue_id}, which the "
                                     "bindings journal does not hold; kept, not delivered")
                self.out.unknown_references.append((live[j].queue_id, message_id, live[j].delivery_count,
                                               live[j].delivery_count if shadowed is None else shadowed,
                                               scheduled))
                if shadowed is not None:
                    self.out.from_shadow.append((live[j].queue_id, -1, message_id, shadowed))
                continue
            if shadowed is not None:
                self.out.from_shadow.append((live[j].queue_id, gather[q].message_ids.size // 8, message_id, shadowed))
            if gather[q].message_ids.size and message_id < gather[q].last_message_id:
                gather[q].ascending = False
            gather[q].last_message_id = message_id
            if scheduled or expiration:
                gather[q].timed = True
            if n_live > 1:
                gather[q].shared = True
            if priority != PRIORITY_DEFAULT and not gather[q].prioritized:
                gather[q].prioritized = True        # the references before it: the default priority
                for k in range(gather[q].message_ids.size // 8):
                    _append(&gather[q].priorities, &default_level, 1)
            if gather[q].prioritized:
                _append(&gather[q].priorities, &level, 1)
            _put_u64(&gather[q].message_ids, message_id)
            _append(&gather[q].delivery_counts, &live[j].delivery_count, 4)
            _put_u64(&gather[q].scheduled_times, scheduled)
        return 0

    cdef inline int _keep(self, Py_ssize_t i, uint64_t message_id, Py_ssize_t n_live) except -1:
        """A message with live references, for the tables ``finish`` makes: its row, and its one queue
        (or its several). Its body stays in the journal's buffers, read at its delivery."""
        cdef Py_ssize_t j
        _put_u64(&self.order, message_id)
        _put_u64(&self.rows, <uint64_t>i)
        if n_live == 1 and self.live[0].queue_id <= ONE_QUEUE_ID_MAX:     # the common case: no Python object
            _put_u64(&self.queue_of, self.live[0].queue_id)
        else:
            _put_u64(&self.queue_of, <uint64_t>-1)
            self.out.several_queues[message_id] = tuple([self.live[j].queue_id for j in range(n_live)])
        return 0

    cdef MessageRecovery finish(self):
        """The recovery: each queue's gathering as its QueueReferences, the tables of the messages kept."""
        cdef MessageRecovery out = self.out
        cdef QueueReferences refs
        cdef Py_ssize_t q
        for queue_key, q in self.queue_index.items():
            refs = QueueReferences.__new__(QueueReferences)
            refs.message_ids = _column(&self.gather[q].message_ids, "Q")
            refs.delivery_counts = _column(&self.gather[q].delivery_counts, "I")
            refs.scheduled_times = _column(&self.gather[q].scheduled_times, "Q")
            refs.ascending = self.gather[q].ascending
            refs.timed = self.gather[q].timed
            refs.shared = self.gather[q].shared
            refs.priorities = _column(&self.gather[q].priorities, "B") if self.gather[q].prioritized else None
            out.references[queue_key] = refs
        self.bodies.order = _column(&self.order, "Q")
        _index_messages(self.bodies, out, _column(&self.rows, "q"), _column(&self.queue_of, "q"))
        out.max_record_id = self.max_id
        return out


cdef object _update_rejection(int user_type, bytes raw, uint64_t message_id, object path):
    """record_format's CorruptRecordError for a reference update of the wrong size."""
    if user_type == TYPE_DELIVERY_COUNT:
        error = _rejection(_format.decode_delivery_count, (raw,), dict(message_id=message_id, path=path))
    elif user_type == TYPE_SCHEDULED_TIME:
        error = _rejection(_format.decode_scheduled_time, (raw,), dict(message_id=message_id, path=path))
    else:
        error = _rejection(_format.decode_queue_id, (raw,), dict(message_id=message_id, record_type=user_type,
                                                             path=path))
    if error is None:
        raise AssertionError(f"record_format read a {len(raw)}-byte update of type {user_type} the compiled "
                             "check refused")
    return error


cdef bytes _copy_bytes(const uint8_t *src, Py_ssize_t size, list buffers, Py_ssize_t buffer):
    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    _read_guarded(PyBytes_AS_STRING(out), src, size, buffers, buffer)
    return out


def decode_message_fields(message_id, body, path=None):
    """(address, body, properties, durable, expiration, routing_type, priority) of one ADD_MESSAGE body, as
    record_format.decode_message reads them: in C for a message without properties (record_format
    reads the others, and gives the error of a body it rejects)."""
    cdef MessageFields fields
    cdef const uint8_t *p
    if type(body) is not bytes:
        body = bytes(body)
    p = <const uint8_t *>PyBytes_AS_STRING(body)
    if not _message_fields(p, len(body), &fields) or fields.property_count:
        stored = _format.decode_message(message_id, body, path=path)
        return (stored.address, stored.body, stored.properties, stored.durable, stored.expiration,
                stored.routing_type, stored.priority)
    return ((<const char *>fields.address.data)[:fields.address.size].decode("utf-8"),
            PyBytes_FromStringAndSize(<const char *>p + fields.body_at, fields.body_size), {},
            bool(p[1] & FLAG_DURABLE), fields.expiration, ROUTING_NAME_OF_CODE[p[2]], fields.priority)


cdef tuple _fields_kept(tuple fields, bint with_bodies):
    """A message's fields, its body None when bodies are not wanted and it has no properties."""
    if with_bodies or fields[2]:
        return fields
    return (fields[0], None) + fields[2:]


def decode_messages_fields(bodies not None, message_ids, path=None, bint with_bodies=True):
    """decode_message_fields of many messages at once: a list of the field tuples of ``message_ids``
    (in their order), each read from ``bodies`` (message id -> ADD_MESSAGE body: a dict, or the
    MessageBodies of a recovery, read straight from the journal's columns). Messages of one address
    share its str. ``with_bodies`` False: the body of a message without properties is None in its
    tuple, not copied (the broker reads it when it delivers the message)."""
    cdef list out = []
    cdef list ids
    cdef MessageBodies columns
    cdef MessageFields fields
    cdef const uint8_t *p
    cdef Py_ssize_t size, i, n
    cdef Py_ssize_t *rows = NULL
    cdef object address = ""           # the str of address_bytes
    cdef bytes address_bytes = b""
    if type(bodies) is not MessageBodies:
        return [_fields_kept(decode_message_fields(message_id, bodies[message_id], path), with_bodies)
                for message_id in message_ids]
    columns = <MessageBodies>bodies
    ids = message_ids if type(message_ids) is list else list(message_ids)
    n = len(ids)
    rows = <Py_ssize_t *>PyMem_Malloc(max(n, 1) * sizeof(Py_ssize_t))
    if rows == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            rows[i] = columns._row(ids[i])
        for i in range(n):
            if i + BODY_PREFETCH_AHEAD < n:     # a queue's messages lie apart in the files: each body is a
                columns._prefetch(rows[i + BODY_PREFETCH_AHEAD])    # miss, overlapped with this one's work
            message_id = ids[i]
            p = columns._body(rows[i], &size)
            if not _message_fields(p, size, &fields) or fields.property_count:
                out.append(_fields_kept(decode_message_fields(message_id, PyBytes_FromStringAndSize(
                    <const char *>p, size), path), with_bodies))
                continue
            if (fields.address.size != len(address_bytes)
                    or memcmp(fields.address.data, PyBytes_AS_STRING(address_bytes), fields.address.size)):
                address_bytes = PyBytes_FromStringAndSize(<const char *>fields.address.data, fields.address.size)
                address = address_bytes.decode("utf-8")
            out.append((address,
                        PyBytes_FromStringAndSize(<const char *>p + fields.body_at, fields.body_size) if with_bodies
                        else None, {}, bool(p[1] & FLAG_DURABLE), fields.expiration, ROUTING_NAME_OF_CODE[p[2]],
                        fields.priority))
    finally:
        PyMem_Free(rows)
    return out


def release_from_collector(objects):
    """Take ``objects`` out of the cycle collector's view. They are still freed by reference counting;
    the collector's passes no longer visit them, which on a broker holding a million recovered
    messages were most of the time of receiving them. Only for objects that can never be part of a
    reference cycle (a recovered message's data: text, bytes, numbers and a dict of plain
    properties): one in a cycle would never be freed."""
    for obj in objects:
        PyObject_GC_UnTrack(obj)
