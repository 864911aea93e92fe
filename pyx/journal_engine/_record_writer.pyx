# cython: language_level=3
"""The message store's compiled record writer: sends (45 + 32), acknowledgements (33 + DELETE), and the
delivery-count (34) and scheduled-time (36) records.

They encode the 12- and 16-byte bodies on the stack and hand them straight to
the journal's append path (JournalCore._append_raw), keeping every live
reference's last persisted count in an open-addressing table of C structs, so a
write takes no Python object but the record id the journal's bookkeeping needs.
The rules are Artemis's (AbstractJournalStorageManager.updateDeliveryCount /
updateScheduledDeliveryTime):

* a delivery-count record is skipped when the count equals the last persisted
  one, or when max_redelivery_records >= 0 and the count exceeds it;
* a scheduled-time record is skipped only by the cap.

Like the append path, these run with the GIL held: the GIL is the lock of the
reference table. The journal may release it inside an append (a file switch or
a sync wait), so no pointer into the table is kept across an append. The Python
twin is journal_engine._twin.record_writer; both write the same bytes.
"""
from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Calloc, PyMem_Free, PyMem_Malloc, PyMem_Realloc
from journal_engine._livemap cimport find_sorted, keys_rise, release_table, zeroed_table
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

cdef extern from *:
    void __builtin_prefetch(const void *addr) noexcept nogil

from journal_engine._codec cimport (KIND_ADD, KIND_DELETE, KIND_UPDATE, frame_size, je_crc32c, je_crc32c_init,
                                    store_u32, store_u64)
from journal_engine._core cimport RecordSink

import time

from journal_engine.errors import DuplicateRecordError, UnknownRecordError
from journal_engine.limits import check_max_redelivery_records, u32_array, u64_array
from journal_engine import record_format as _format
from journal_engine.storage.sync_mode import SyncMode

je_crc32c_init()

cdef extern from "bus_guard.h":
    int JE_BUS_FAULT
    int je_bus_install()
    int je_bus_guarded_copy(void *dst, const void *src, size_t n) noexcept nogil

# entries go into the shadow's mapping under the SIGBUS guard: a shadow file another process cuts short
# raises FileChangedError at the next dispatch instead of killing the interpreter
if je_bus_install() != 0:
    raise ImportError("journal_engine._record_writer: cannot install its SIGBUS handler")
# the constants below are compiled in; the record format's home must agree with them
_format.check_compiled("journal_engine._record_writer", {
    "shadow layout": ((SHADOW_ENTRY, SHADOW_HEADER), (_format.SHADOW_ENTRY_BYTES, _format.SHADOW_HEADER_BYTES)),
    "record types": ([TYPE_ADD_MESSAGE, TYPE_ADD_REF, TYPE_ACKNOWLEDGE_REF, TYPE_UPDATE_DELIVERY_COUNT,
                      TYPE_SET_SCHEDULED_DELIVERY_TIME],
                     [int(_format.RecordType[name]) for name in ("ADD_MESSAGE", "ADD_REF", "ACKNOWLEDGE_REF",
                                                                  "UPDATE_DELIVERY_COUNT", "SET_SCHEDULED_DELIVERY_TIME")]),
    "body layouts": ((QUEUE_ID_BODY, DELIVERY_COUNT_BODY, SCHEDULED_TIME_BODY),
                     (_format.QUEUE_ID_BODY.size, _format.DELIVERY_COUNT_BODY_BYTES, _format.SCHEDULED_TIME_BODY_BYTES)),
})


def _yield_gil():
    time.sleep(0)

cdef enum:
    TYPE_ADD_MESSAGE = 45
    TYPE_ADD_REF = 32
    TYPE_ACKNOWLEDGE_REF = 33
    QUEUE_ID_BODY = 8
    TYPE_UPDATE_DELIVERY_COUNT = 34
    TYPE_SET_SCHEDULED_DELIVERY_TIME = 36
    DELIVERY_COUNT_BODY = 12
    SCHEDULED_TIME_BODY = 16
    SLOT_EMPTY = 0
    SLOT_USED = 1
    SLOT_DELETED = 2
    INITIAL_CAPACITY = 1024
    PREFETCH_AHEAD = 16                 # add_references: keys between a slot's prefetch and its probe
    SHADOW_ENTRY = 32                   # record_format.SHADOW_ENTRY_BYTES (checked at import)
    SHADOW_HEADER = 64                  # record_format.SHADOW_HEADER_BYTES
    SEEN_BITS_LOG2 = 20                 # a 128 KiB bitmap: "maybe has a shadow entry in this epoch"

cdef struct RefSlot:
    uint64_t queue_id
    uint64_t message_id
    uint32_t persisted      # last persisted delivery count
    uint32_t state          # SLOT_EMPTY / SLOT_USED / SLOT_DELETED


cdef struct HeldRefs:
    # one queue's recovered references as add_references received them (message ids rising), moved
    # into the table one by one as they are first looked up
    uint64_t queue_id
    const uint64_t *message_ids     # the caller's array, kept alive by the writer (_held_owners)
    uint32_t *persisted             # owned: the persisted counts (the caller's may change after)
    uint8_t *taken                  # owned: 1 once moved into the table
    Py_ssize_t count
    Py_ssize_t left                 # not taken yet


cdef inline uint64_t _hash(uint64_t queue_id, uint64_t message_id) noexcept nogil:
    # splitmix64 finaliser over both ids: consecutive message ids spread over the table
    cdef uint64_t x = (queue_id * <uint64_t>0x9E3779B97F4A7C15) ^ message_id
    x ^= x >> 30
    x *= <uint64_t>0xBF58476D1CE4E5B9
    x ^= x >> 27
    x *= <uint64_t>0x94D049BB133111EB
    x ^= x >> 31
    return x


cdef class ProtocolSink(RecordSink):
    """The record writer's sink for a store other than the journal (LMDB, a user's): each record
    through the record-store protocol's add / update / delete, a group gathered and handed to its
    append_group, liveness from its is_live."""

    cdef object _store
    cdef list _group_records        # the records of the group being written, else None

    def __init__(self, store not None):
        self._store = store
        self._group_records = None

    cdef int _append_raw(self, uint8_t kind, uint8_t user_type, uint64_t record_id, uint64_t tx_id,
                         const unsigned char *body, Py_ssize_t n, object sync) except -1:
        if self._group_records is not None:
            self._group_records.append((kind, record_id, user_type, PyBytes_FromStringAndSize(<const char *>body, n)))
            return 0
        if kind == KIND_ADD:
            self._store.add(record_id, user_type, PyBytes_FromStringAndSize(<const char *>body, n), sync=sync)
        elif kind == KIND_UPDATE:
            self._store.update(record_id, user_type, PyBytes_FromStringAndSize(<const char *>body, n), sync=sync)
        elif kind == KIND_DELETE:
            self._store.delete(record_id, sync=sync)
        else:
            raise AssertionError(f"the record writer writes no frames of kind {kind}")
        return 0

    cdef int _begin_group(self, Py_ssize_t total) except -1:
        self._group_records = []
        return 0

    cdef int _end_group(self, object sync) except -1:
        cdef list records
        records, self._group_records = self._group_records, None
        if records:
            self._store.append_group(records, sync=sync)
        return 0

    cdef int _abort_group(self, object exc) except -1:
        self._group_records = None      # nothing of it reached the store
        return 0

    cdef bint _is_live(self, uint64_t record_id) except -1:
        return bool(self._store.is_live(record_id))


cdef class RecordWriter:
    """The message store's record writer for one message journal: sends, acknowledgements, and the
    capped delivery-count and scheduled-time records."""

    cdef RecordSink _sink           # where the records go: the journal's core, or a ProtocolSink
    cdef object _store              # the record store (the record-store protocol): the journal, or LMDB
    cdef readonly long long max_redelivery_records
    cdef readonly unsigned long long delivery_count_records_written
    cdef readonly unsigned long long scheduled_time_records_written
    cdef object _sync_mode           # the store's SyncMode: does a batch's sync=None wait?
    cdef RefSlot *_slots
    cdef Py_ssize_t _capacity       # a power of two
    cdef Py_ssize_t _used
    cdef Py_ssize_t _deleted
    cdef uint64_t _generation       # bumped whenever the slots move (a new allocation)
    # recovered references not in the table yet (add_references): per queue, sorted by queue id
    cdef HeldRefs *_held
    cdef Py_ssize_t _held_queues
    cdef Py_ssize_t _held_left      # references held and not taken, over every queue
    cdef list _held_owners          # the message-id arrays the held references point into
    # the delivery-count shadow (message_store/delivery_shadow.py), when attached: entries go straight into its mapping
    cdef object _shadow
    cdef Py_buffer _shadow_view
    cdef bint _shadow_attached
    cdef bint _shadow_rolling       # a thread is writing the journal out for a new epoch
    cdef unsigned char *_shadow_entries
    cdef Py_ssize_t _shadow_capacity
    cdef Py_ssize_t _shadow_next
    cdef uint32_t _shadow_epoch
    cdef uint32_t _shadow_life
    cdef uint64_t *_shadow_seen     # a bit per hash of the ids: false positives only cost a write-out

    def __cinit__(self):
        self._slots = NULL
        self._capacity = 0

    def __init__(self, store not None, max_redelivery_records=10):
        """`store`: a record store (storage/protocol.py). The journal's frames are appended straight
        into its core's buffer; any other store (LMDB) gets the same records through the protocol's
        add / update / delete / is_live, so both backends share this writer and its rules."""
        check_max_redelivery_records(max_redelivery_records)
        self._store = store
        self._sink = store if isinstance(store, RecordSink) else ProtocolSink(store)
        self.max_redelivery_records = max_redelivery_records
        self._sync_mode = SyncMode.named(getattr(store, "sync_mode", "group"))
        self._allocate(INITIAL_CAPACITY)

    def __dealloc__(self):
        if self._shadow_attached:
            PyBuffer_Release(&self._shadow_view)
        PyMem_Free(self._shadow_seen)
        self._drop_held()
        release_table(self._slots, self._capacity * sizeof(RefSlot))

    # ----- the reference table ------------------------------------------------------------------
    cdef int _allocate(self, Py_ssize_t capacity) except -1:
        """A new, empty table of ``capacity`` slots, zeroed on huge pages when large (a recovery of a
        million references fills 48 MiB of it at random: see _livemap.zeroed_table), in place of
        the old one."""
        cdef RefSlot *slots = <RefSlot *>zeroed_table(capacity * sizeof(RefSlot))
        if slots == NULL:
            raise MemoryError()
        release_table(self._slots, self._capacity * sizeof(RefSlot))
        self._slots = slots
        self._generation += 1
        self._capacity = capacity
        self._used = 0
        self._deleted = 0
        return 0

    cdef RefSlot *_find(self, uint64_t queue_id, uint64_t message_id) except? NULL:
        """The reference's slot, NULL when it is not tracked. A held reference (add_references) is
        moved into the table first, which may grow it (MemoryError)."""
        cdef RefSlot *slot = self._probe(queue_id, message_id)
        if slot == NULL and self._held_left:
            return self._take_held(queue_id, message_id)
        return slot

    cdef RefSlot *_probe(self, uint64_t queue_id, uint64_t message_id) noexcept:
        """The reference's slot in the table (held references are not looked at), or NULL."""
        cdef Py_ssize_t mask = self._capacity - 1
        cdef Py_ssize_t i = <Py_ssize_t>(_hash(queue_id, message_id) & <uint64_t>mask)
        cdef RefSlot *slot
        while True:
            slot = &self._slots[i]
            if slot.state == SLOT_EMPTY:
                return NULL
            if slot.state == SLOT_USED and slot.queue_id == queue_id and slot.message_id == message_id:
                return slot
            i = (i + 1) & mask

    # ----- recovered references held as columns ------------------------------------------------------
    cdef HeldRefs *_held_of(self, uint64_t queue_id) noexcept:
        """The held references of a queue, or NULL (a binary search of the queues)."""
        cdef Py_ssize_t low = 0, high = self._held_queues, middle
        while low < high:
            middle = (low + high) >> 1
            if self._held[middle].queue_id < queue_id:
                low = middle + 1
            else:
                high = middle
        if low < self._held_queues and self._held[low].queue_id == queue_id:
            return &self._held[low]
        return NULL

    cdef RefSlot *_take_held(self, uint64_t queue_id, uint64_t message_id) except? NULL:
        """Move a held reference into the table and give its slot; NULL when none is held."""
        cdef HeldRefs *held = self._held_of(queue_id)
        cdef Py_ssize_t at
        cdef uint32_t persisted
        if held == NULL or held.left == 0:
            return NULL
        at = find_sorted(held.message_ids, held.count, message_id)    # -1 at once for a new message's id
        if at < 0 or held.taken[at]:
            return NULL
        if 2 * (self._used + self._deleted + 1) > self._capacity:
            self._grow()        # before anything changes: a MemoryError leaves the reference held
        persisted = held.persisted[at]
        held.taken[at] = 1
        held.left -= 1
        self._held_left -= 1
        if self._held_left == 0:
            self._drop_held()   # every recovered reference is in the table: the columns go
        return self._place(queue_id, message_id, persisted)

    cdef int _hold(self, uint64_t queue_id, object owner, const uint64_t *message_ids,
                   const uint32_t *persisted, Py_ssize_t count) except -1:
        """Hold ``count`` references of a queue that holds none (ids rising, none in the table)."""
        cdef Py_ssize_t at
        cdef HeldRefs *grown
        cdef uint32_t *counts = <uint32_t *>PyMem_Malloc(max(count, 1) * sizeof(uint32_t))
        cdef uint8_t *taken = <uint8_t *>PyMem_Calloc(max(count, 1), 1)
        grown = <HeldRefs *>PyMem_Realloc(self._held, (self._held_queues + 1) * sizeof(HeldRefs))
        if counts == NULL or taken == NULL or grown == NULL:
            PyMem_Free(counts)
            PyMem_Free(taken)
            if grown != NULL:
                self._held = grown
            raise MemoryError()
        self._held = grown
        memcpy(counts, persisted, count * sizeof(uint32_t))
        at = self._held_queues
        while at > 0 and self._held[at - 1].queue_id > queue_id:
            self._held[at] = self._held[at - 1]
            at -= 1
        self._held[at].queue_id = queue_id
        self._held[at].message_ids = message_ids
        self._held[at].persisted = counts
        self._held[at].taken = taken
        self._held[at].count = count
        self._held[at].left = count
        self._held_queues += 1
        self._held_left += count
        if self._held_owners is None:
            self._held_owners = []
        self._held_owners.append(owner)
        return 0

    cdef void _drop_held(self) noexcept:
        cdef Py_ssize_t q
        for q in range(self._held_queues):
            PyMem_Free(self._held[q].persisted)
            PyMem_Free(self._held[q].taken)
        PyMem_Free(self._held)
        self._held = NULL
        self._held_queues = 0
        self._held_left = 0
        self._held_owners = None

    cdef int _grow(self, Py_ssize_t room=0) except -1:
        """Rehash into a table that keeps the load (used + deleted) at or below one half, with
        `room` more references inside that half (add_references makes room for all of its own)."""
        cdef RefSlot *old = self._slots
        cdef Py_ssize_t old_capacity = self._capacity
        cdef Py_ssize_t capacity = INITIAL_CAPACITY
        cdef Py_ssize_t i
        while capacity < 4 * (self._used + 1) or capacity < 2 * (self._used + room + 1):
            capacity *= 2
        self._slots = NULL
        try:
            self._allocate(capacity)
        except BaseException:
            self._slots = old
            raise
        for i in range(old_capacity):
            if i + PREFETCH_AHEAD < old_capacity and old[i + PREFETCH_AHEAD].state == SLOT_USED:
                __builtin_prefetch(&self._slots[_hash(old[i + PREFETCH_AHEAD].queue_id,
                                                      old[i + PREFETCH_AHEAD].message_id)
                                                & <uint64_t>(self._capacity - 1)])
            if old[i].state == SLOT_USED:
                self._place(old[i].queue_id, old[i].message_id, old[i].persisted)
        release_table(old, old_capacity * sizeof(RefSlot))
        return 0

    cdef void _fill(self, RefSlot *slot, uint64_t queue_id, uint64_t message_id, uint32_t persisted) noexcept:
        """Put a reference into a free (empty or deleted) slot."""
        if slot.state == SLOT_DELETED:
            self._deleted -= 1
        slot.queue_id = queue_id
        slot.message_id = message_id
        slot.persisted = persisted
        slot.state = SLOT_USED
        self._used += 1

    cdef RefSlot *_place(self, uint64_t queue_id, uint64_t message_id, uint32_t persisted) noexcept:
        """Insert a key known to be absent into a table with room; its slot."""
        cdef Py_ssize_t mask = self._capacity - 1
        cdef Py_ssize_t i = <Py_ssize_t>(_hash(queue_id, message_id) & <uint64_t>mask)
        while self._slots[i].state == SLOT_USED:
            i = (i + 1) & mask
        self._fill(&self._slots[i], queue_id, message_id, persisted)
        return &self._slots[i]

    cdef bint _insert(self, uint64_t queue_id, uint64_t message_id, uint32_t persisted) noexcept:
        """Insert a key into a table with room, in one walk of its probe path; False (nothing
        changed) when the key is there already."""
        cdef Py_ssize_t mask = self._capacity - 1
        cdef Py_ssize_t i = <Py_ssize_t>(_hash(queue_id, message_id) & <uint64_t>mask)
        cdef RefSlot *slot
        cdef RefSlot *free_slot = NULL
        while True:
            slot = &self._slots[i]
            if slot.state == SLOT_EMPTY:
                break
            if slot.state == SLOT_DELETED:
                if free_slot == NULL:
                    free_slot = slot
            elif slot.queue_id == queue_id and slot.message_id == message_id:
                return False
            i = (i + 1) & mask
        self._fill(free_slot if free_slot != NULL else slot, queue_id, message_id, persisted)
        return True

    def add_reference(self, unsigned long long queue_id, unsigned long long message_id,
                      unsigned int persisted_count=0):
        """Start tracking a live reference; persisted_count is what recovery restored (0 if none).
        The message must be live in the journal, and stay live until the reference is removed."""
        if not self._sink._is_live(message_id):
            raise UnknownRecordError.of_message(message_id)
        if self._find(queue_id, message_id) != NULL:
            raise DuplicateRecordError(f"message {message_id} already has a live reference on queue {queue_id}")
        self._track(queue_id, message_id, persisted_count)

    def reserve_references(self, Py_ssize_t count):
        """Make room for `count` more references at once (recovery knows how many it restores): one
        rehash instead of one per doubling."""
        if count > 0 and 2 * (self._used + self._deleted + count) > self._capacity:
            self._grow(count)

    def add_references(self, unsigned long long queue_id, message_ids, persisted_counts):
        """add_reference for many messages of one queue (recovery): ``message_ids`` and
        ``persisted_counts`` are buffers of uint64 and uint32 (arrays 'Q' and 'I'). Stops at the
        first reference add_reference would refuse, with its error; the ones before it are tracked."""
        cdef const uint64_t[::1] messages = u64_array(message_ids, "message_ids")
        cdef const uint32_t[::1] counts = u32_array(persisted_counts, "persisted_counts")
        cdef Py_ssize_t i, n = messages.shape[0]
        if counts.shape[0] != n:
            raise ValueError(f"{n} message ids and {counts.shape[0]} persisted counts")
        if n and not self._shadow_attached and self._held_of(queue_id) == NULL and keys_rise(&messages[0], n):
            self._add_held(queue_id, messages, counts)
            return
        self.reserve_references(n)
        for i in range(n):
            if i + PREFETCH_AHEAD < n:  # the slot a later key probes first: its cache miss overlaps this one's work
                __builtin_prefetch(&self._slots[_hash(queue_id, messages[i + PREFETCH_AHEAD])
                                                & <uint64_t>(self._capacity - 1)])
            if not self._sink._is_live(messages[i]):
                raise UnknownRecordError.of_message(messages[i])
            if self._shadow_attached:   # refused before it voids any shadow entry, as add_reference is
                if self._find(queue_id, messages[i]) != NULL:
                    raise DuplicateRecordError(f"message {messages[i]} already has a live reference on queue {queue_id}")
                self._shadow_reused(queue_id, messages[i])     # may let other threads in: before the room check
            if 2 * (self._used + self._deleted + 1) > self._capacity:
                self._grow()
            if (self._held_left and self._take_held(queue_id, messages[i]) != NULL
                    or not self._insert(queue_id, messages[i], counts[i])):
                raise DuplicateRecordError(f"message {messages[i]} already has a live reference on queue {queue_id}")

    cdef int _add_held(self, uint64_t queue_id, const uint64_t[::1] messages, const uint32_t[::1] counts) except -1:
        """add_references of rising ids on a queue that holds none: each checked as add_reference
        checks it, then held where they lie, not put into the table. A recovery's million references
        filled 48 MiB of table at random (its zeroing and a cache miss each); a held reference goes
        into the table when first looked up (a delivery's count, an acknowledgement). Refused at
        the first bad one, with its error; the ones before it are held."""
        cdef Py_ssize_t i, n = messages.shape[0]
        cdef object error = None
        for i in range(n):
            if not self._sink._is_live(messages[i]):
                error = UnknownRecordError.of_message(messages[i])
            elif self._probe(queue_id, messages[i]) != NULL:
                error = DuplicateRecordError(f"message {messages[i]} already has a live reference on queue {queue_id}")
            if error is not None:
                n = i
                break
        if n:
            # the view holds the ids' buffer (exported: an array cannot be resized under it)
            self._hold(queue_id, <object>messages, &messages[0], &counts[0], n)
        if error is not None:
            raise error
        return 0

    cdef int _track(self, uint64_t queue_id, uint64_t message_id, uint32_t persisted) except -1:
        """Add a reference to the table (the caller checked that it is not there)."""
        self._shadow_reused(queue_id, message_id)       # may let other threads in: before the room check
        if 2 * (self._used + self._deleted + 1) > self._capacity:
            self._grow()
        self._place(queue_id, message_id, persisted)
        return 0

    cdef int _untrack(self, uint64_t queue_id, uint64_t message_id) except -1:
        """Drop a reference from the table; 0 (False) if it was not there."""
        cdef RefSlot *slot = self._find(queue_id, message_id)
        if slot == NULL:
            return False
        slot.state = SLOT_DELETED
        self._used -= 1
        self._deleted += 1
        return True

    def remove_reference(self, unsigned long long queue_id, unsigned long long message_id):
        """Stop tracking a reference (acknowledged or its message deleted); False if it was unknown."""
        return self._untrack(queue_id, message_id) == 1

    def has_reference(self, unsigned long long queue_id, unsigned long long message_id):
        return self._find(queue_id, message_id) != NULL

    def persisted_count(self, unsigned long long queue_id, unsigned long long message_id):
        """The reference's last persisted delivery count (0 when none was ever written)."""
        cdef RefSlot *slot = self._find(queue_id, message_id)
        if slot == NULL:
            raise UnknownRecordError.of_reference(queue_id, message_id)
        return slot.persisted

    @property
    def held_references(self):
        """References add_references holds as they lie, not yet moved into the table."""
        return self._held_left

    def __len__(self):
        return self._used + self._held_left

    def clear(self):
        self._allocate(INITIAL_CAPACITY)
        self._drop_held()

    # ----- the broker's send and acknowledgement, one call each -----------------------------------------
    def store_message_reference(self, unsigned long long message_id, unsigned long long queue_id,
                                bytes head, bytes body=None):
        """ADD_MESSAGE (45), ADD_REF (32) on one queue, and the reference tracked: the records of a
        send to one queue, without sync (the caller decides). The message record is `head` when
        body is None, else head + u32 len(body) + body + u32 0, the layout of a message without
        properties (records.encode_message), assembled here without a Python object."""
        cdef unsigned char ref_body[QUEUE_ID_BODY]
        cdef Py_ssize_t head_n = PyBytes_GET_SIZE(head), body_n, n
        cdef unsigned char *record
        if self._sink._is_live(message_id):
            raise DuplicateRecordError(f"record {message_id} is already live; update or delete it first")
        if self._find(queue_id, message_id) != NULL:
            raise DuplicateRecordError(f"message {message_id} already has a live reference on queue {queue_id}")
        store_u64(ref_body, queue_id)
        if body is None:
            self._sink._begin_group(frame_size(head_n) + frame_size(QUEUE_ID_BODY))
            try:
                self._sink._append_raw(KIND_ADD, TYPE_ADD_MESSAGE, message_id, 0,
                             <const unsigned char *>PyBytes_AS_STRING(head), head_n, False)
                self._sink._append_raw(KIND_UPDATE, TYPE_ADD_REF, message_id, 0, ref_body, QUEUE_ID_BODY, False)
            except BaseException as exc:
                self._sink._abort_group(exc)
                raise
        else:
            body_n = PyBytes_GET_SIZE(body)
            if body_n > <Py_ssize_t>0xFFFFFFFF:
                raise OverflowError(f"a message body of {body_n} bytes does not fit its u32 length")
            n = head_n + 4 + body_n + 4
            record = <unsigned char *>PyMem_Malloc(n)
            if record == NULL:
                raise MemoryError()
            try:
                memcpy(record, PyBytes_AS_STRING(head), head_n)
                store_u32(record + head_n, <uint32_t>body_n)
                memcpy(record + head_n + 4, PyBytes_AS_STRING(body), body_n)
                store_u32(record + head_n + 4 + body_n, 0)
                self._sink._begin_group(frame_size(n) + frame_size(QUEUE_ID_BODY))
                try:
                    self._sink._append_raw(KIND_ADD, TYPE_ADD_MESSAGE, message_id, 0, record, n, False)
                    self._sink._append_raw(KIND_UPDATE, TYPE_ADD_REF, message_id, 0, ref_body, QUEUE_ID_BODY, False)
                except BaseException as exc:
                    self._sink._abort_group(exc)
                    raise
            finally:
                PyMem_Free(record)
        self._sink._end_group(False)
        self._track(queue_id, message_id, 0)

    def acknowledge_reference(self, unsigned long long queue_id, unsigned long long message_id,
                              bint delete_message):
        """ACKNOWLEDGE_REF (33), the reference no longer tracked, and with delete_message the
        message's DELETE: an acknowledgement (of its last reference), without sync."""
        cdef unsigned char body[QUEUE_ID_BODY]
        cdef RefSlot *slot = self._find(queue_id, message_id)
        if slot == NULL:
            raise UnknownRecordError.of_reference(queue_id, message_id)
        store_u64(body, queue_id)
        self._sink._append_raw(KIND_UPDATE, TYPE_ACKNOWLEDGE_REF, message_id, 0, body, QUEUE_ID_BODY, False)
        self._untrack(queue_id, message_id)        # looked up again: the append may have let another thread in
        if delete_message:
            self._sink._append_raw(KIND_DELETE, 0, message_id, 0, body, 0, False)

    # ----- the delivery-count shadow ------------------------------------------------------------------
    def attach_shadow(self, shadow):
        """From now on record_dispatch() puts each dispatch's count into `shadow` (a DeliveryShadow)
        as well, written into its mapping here; detach_shadow() before the mapping closes."""
        if self._shadow_attached:
            raise RuntimeError("a shadow is attached already")
        seen = <uint64_t *>PyMem_Calloc((1 << SEEN_BITS_LOG2) // 64, sizeof(uint64_t))
        if seen == NULL:
            raise MemoryError()
        try:
            PyObject_GetBuffer(shadow.mapping, &self._shadow_view, PyBUF_WRITABLE)
        except BaseException:
            PyMem_Free(seen)
            raise
        if self._shadow_view.len != SHADOW_HEADER + shadow.capacity * SHADOW_ENTRY:
            PyBuffer_Release(&self._shadow_view)
            PyMem_Free(seen)
            raise ValueError(f"the shadow mapping holds {self._shadow_view.len} bytes, not a header and "
                             f"{shadow.capacity} entries")
        PyMem_Free(self._shadow_seen)
        self._shadow_seen = seen
        self._shadow_entries = <unsigned char *>self._shadow_view.buf + SHADOW_HEADER
        self._shadow_capacity = shadow.capacity
        self._shadow_next = shadow.next
        self._shadow_epoch = shadow.epoch
        self._shadow_life = shadow.life
        self._shadow = shadow
        self._shadow_attached = True

    def detach_shadow(self):
        if not self._shadow_attached:
            return
        self._shadow.next = self._shadow_next
        self._shadow_attached = False
        self._shadow_entries = NULL
        PyBuffer_Release(&self._shadow_view)
        self._shadow = None

    def record_dispatch(self, unsigned long long queue_id, unsigned long long message_id,
                        unsigned int delivery_count):
        """update_delivery_count without sync, and the count (unless above the cap) in the attached
        shadow: it survives a killed process when this returns, without a system call."""
        cdef RefSlot *slot = self._find(queue_id, message_id)
        cdef int written
        if slot == NULL:
            raise UnknownRecordError.of_reference(queue_id, message_id)
        if not self._shadow_attached:
            raise RuntimeError("no shadow is attached")
        written = self._write_count(slot, delivery_count, False)
        if self.max_redelivery_records < 0 or delivery_count <= self.max_redelivery_records:
            self._shadow_write(queue_id, message_id, delivery_count)
        return written == 1

    cdef int _shadow_write(self, uint64_t queue_id, uint64_t message_id, uint32_t count) except -1:
        cdef unsigned char entry[SHADOW_ENTRY]
        cdef uint64_t h
        while self._shadow_rolling:
            # another thread is writing the journal out for a new epoch: this entry goes into the new
            # one. Returning after a write-out of its own instead would leave this reference's earlier
            # entry the latest of the old epoch, which a kill before the new header is written keeps,
            # and which load prefers to the journal's newer count (as the twin, whose lock waits)
            _yield_gil()
        if self._shadow_next == self._shadow_capacity:
            self._shadow_roll()
        store_u64(entry, queue_id)
        store_u64(entry + 8, message_id)
        store_u32(entry + 16, count)
        store_u32(entry + 20, self._shadow_epoch)
        store_u32(entry + 24, self._shadow_life)
        store_u32(entry + 28, je_crc32c(0, entry, SHADOW_ENTRY - 4))
        if je_bus_guarded_copy(self._shadow_entries + self._shadow_next * SHADOW_ENTRY, entry,
                               SHADOW_ENTRY) == JE_BUS_FAULT:
            raise self._shadow.cut_error(SHADOW_HEADER + self._shadow_next * SHADOW_ENTRY)
        self._shadow_next += 1
        h = _hash(queue_id, message_id)
        self._shadow_seen[(h >> 6) & ((1 << (SEEN_BITS_LOG2 - 6)) - 1)] |= (<uint64_t>1) << (h & 63)
        return 0

    cdef int _shadow_roll(self) except -1:
        """DeliveryShadow.roll(): the journal written out (another thread may run meanwhile), then a
        new epoch that voids every entry."""
        self._shadow_rolling = True
        try:
            self._shadow.roll()
        finally:
            self._shadow_rolling = False
        self._shadow_epoch = self._shadow.epoch
        self._shadow_next = 0
        memset(self._shadow_seen, 0, ((1 << SEEN_BITS_LOG2) // 64) * sizeof(uint64_t))
        return 0

    cdef int _shadow_reused(self, uint64_t queue_id, uint64_t message_id) except -1:
        """A reference with the ids of one that may have a shadow entry in this epoch: void them."""
        if not self._shadow_attached:
            return 0
        while self._shadow_rolling:       # another thread's roll: wait for its end, it may be enough
            _yield_gil()
        if self._may_have_entry(queue_id, message_id):
            self._shadow_roll()
        return 0

    cdef int _shadow_follow(self, uint64_t queue_id, uint64_t message_id, uint32_t count) except -1:
        """A count record written by other than a dispatch: if the reference may have an entry in this
        epoch, the count is its latest entry too (load prefers an entry to the journal's count)."""
        if self._shadow_attached and self._may_have_entry(queue_id, message_id):
            self._shadow_write(queue_id, message_id, count)
        return 0

    cdef inline bint _may_have_entry(self, uint64_t queue_id, uint64_t message_id) noexcept:
        """Whether the reference may have an entry in this epoch (the seen bitmap: no false negatives)."""
        cdef uint64_t h = _hash(queue_id, message_id)
        return (self._shadow_seen[(h >> 6) & ((1 << (SEEN_BITS_LOG2 - 6)) - 1)] & ((<uint64_t>1) << (h & 63))) != 0

    # ----- the writers ------------------------------------------------------------------------------
    cdef int _write_count(self, RefSlot *slot, uint32_t count, object sync) except -1:
        """1 if written, 0 if skipped (unchanged or above the cap)."""
        cdef unsigned char body[DELIVERY_COUNT_BODY]
        cdef uint64_t queue_id = slot.queue_id
        cdef uint64_t message_id = slot.message_id
        cdef uint32_t previous = slot.persisted
        if count == previous:
            return 0
        if self.max_redelivery_records >= 0 and count > self.max_redelivery_records:
            return 0
        store_u64(body, queue_id)
        store_u32(body + 8, count)
        slot.persisted = count
        # the append may release the GIL (file switch, sync wait): `slot` is not used after it
        try:
            self._sink._append_raw(KIND_UPDATE, TYPE_UPDATE_DELIVERY_COUNT, message_id, 0, body,
                                      DELIVERY_COUNT_BODY, sync)
        except BaseException:
            slot = self._find(queue_id, message_id)
            if slot != NULL and slot.persisted == count:
                slot.persisted = previous
            raise
        self.delivery_count_records_written += 1
        return 1

    cdef int _write_time(self, uint64_t queue_id, uint64_t message_id, uint64_t scheduled_ms, uint32_t count,
                         object sync) except -1:
        cdef unsigned char body[SCHEDULED_TIME_BODY]
        if self.max_redelivery_records >= 0 and count > self.max_redelivery_records:
            return 0
        store_u64(body, queue_id)
        store_u64(body + 8, scheduled_ms)
        self._sink._append_raw(KIND_UPDATE, TYPE_SET_SCHEDULED_DELIVERY_TIME, message_id, 0, body,
                                  SCHEDULED_TIME_BODY, sync)
        self.scheduled_time_records_written += 1
        return 1

    def update_delivery_count(self, unsigned long long queue_id, unsigned long long message_id,
                              unsigned int delivery_count, sync=None):
        """Append an UPDATE_DELIVERY_COUNT unless unchanged or above the cap; True if written."""
        cdef RefSlot *slot = self._find(queue_id, message_id)
        if slot == NULL:
            raise UnknownRecordError.of_reference(queue_id, message_id)
        if self._write_count(slot, delivery_count, sync) == 0:
            return False
        self._shadow_follow(queue_id, message_id, delivery_count)
        return True

    def update_scheduled_delivery_time(self, unsigned long long queue_id, unsigned long long message_id,
                                       unsigned long long scheduled_ms, unsigned int delivery_count,
                                       sync=None):
        """Append a SET_SCHEDULED_DELIVERY_TIME unless the count is above the cap; True if written."""
        if self._find(queue_id, message_id) == NULL:
            raise UnknownRecordError.of_reference(queue_id, message_id)
        return self._write_time(queue_id, message_id, scheduled_ms, delivery_count, sync) == 1

    def update_redelivery(self, unsigned long long queue_id, unsigned long long message_id,
                          unsigned int delivery_count, unsigned long long scheduled_ms, sync=None):
        """A rollback's records as one group: update_delivery_count's UPDATE_DELIVERY_COUNT and
        update_scheduled_delivery_time's SET_SCHEDULED_DELIVERY_TIME, each under its own rule, so a
        crash keeps both or neither. Returns how many were written (0..2)."""
        cdef RefSlot *slot = self._find(queue_id, message_id)
        cdef int written, count_written
        cdef bint count_changed
        cdef bint capped = self.max_redelivery_records >= 0 and delivery_count > self.max_redelivery_records
        if slot == NULL:
            raise UnknownRecordError.of_reference(queue_id, message_id)
        if capped:
            return 0                    # neither record is written above the cap
        while True:
            count_changed = delivery_count != slot.persisted
            self._sink._begin_group((frame_size(DELIVERY_COUNT_BODY) if count_changed else 0)
                              + frame_size(SCHEDULED_TIME_BODY))
            # the reservation may have let another thread in: the slot may have moved or changed
            slot = self._find(queue_id, message_id)
            if slot != NULL and count_changed == (delivery_count != slot.persisted):
                break
            self._sink._end_group(False)      # nothing appended yet: look again
            if slot == NULL:
                raise UnknownRecordError.of_reference(queue_id, message_id)
        try:
            count_written = self._write_count(slot, delivery_count, False)
            written = count_written + self._write_time(queue_id, message_id, scheduled_ms, delivery_count, False)
        except BaseException as exc:
            self._sink._abort_group(exc)
            raise
        self._sink._end_group(sync)
        if count_written:
            self._shadow_follow(queue_id, message_id, delivery_count)
        return written

    def update_delivery_counts(self, queue_ids, message_ids, delivery_counts, sync=None):
        """The batch form of update_delivery_count: one wait for durability at the end; returns records written.

        Every reference is checked before anything is written, so an unknown one writes nothing.
        """
        cdef const uint64_t[::1] queues = u64_array(queue_ids, "queue_ids")
        cdef const uint64_t[::1] messages = u64_array(message_ids, "message_ids")
        cdef const uint32_t[::1] counts = u32_array(delivery_counts, "delivery_counts")
        cdef Py_ssize_t i, n = counts.shape[0]
        cdef Py_ssize_t written = 0
        cdef Py_ssize_t *where = self._check_batch(queues, messages, n)
        cdef uint64_t generation = self._generation
        try:
            for i in range(n):
                if self._write_count(self._slot_at(where[i], generation, queues[i], messages[i]), counts[i], False):
                    written += 1
                    self._shadow_follow(queues[i], messages[i], counts[i])
        finally:
            PyMem_Free(where)
        self._finish_batch(written, sync)
        return written

    def update_scheduled_delivery_times(self, queue_ids, message_ids, scheduled_times, delivery_counts,
                                        sync=None):
        """The batch form of update_scheduled_delivery_time; returns records written."""
        cdef const uint64_t[::1] queues = u64_array(queue_ids, "queue_ids")
        cdef const uint64_t[::1] messages = u64_array(message_ids, "message_ids")
        cdef const uint64_t[::1] times = u64_array(scheduled_times, "scheduled_times")
        cdef const uint32_t[::1] counts = u32_array(delivery_counts, "delivery_counts")
        cdef Py_ssize_t i, n = counts.shape[0]
        cdef Py_ssize_t written = 0
        cdef Py_ssize_t *where
        cdef uint64_t generation
        if times.shape[0] != n:
            raise ValueError(f"scheduled_times has {times.shape[0]} entries, delivery_counts {n}")
        where = self._check_batch(queues, messages, n)
        generation = self._generation
        try:
            for i in range(n):
                self._slot_at(where[i], generation, queues[i], messages[i])
                written += self._write_time(queues[i], messages[i], times[i], counts[i], False)
        finally:
            PyMem_Free(where)
        self._finish_batch(written, sync)
        return written

    cdef Py_ssize_t *_check_batch(self, const uint64_t[::1] queues, const uint64_t[::1] messages,
                                  Py_ssize_t n) except NULL:
        """Check every reference of a batch; returns their slot indexes (the caller frees them)."""
        cdef Py_ssize_t i
        cdef RefSlot *slot
        cdef Py_ssize_t *where
        if queues.shape[0] != messages.shape[0] or queues.shape[0] != n:
            raise ValueError(f"batch arrays differ in length: {queues.shape[0]} queue ids, "
                             f"{messages.shape[0]} message ids, {n} values")
        where = <Py_ssize_t *>PyMem_Malloc((n if n > 0 else 1) * sizeof(Py_ssize_t))
        if where == NULL:
            raise MemoryError()
        try:
            for i in range(n):
                # (a held reference moved into the table may grow it: the slots found before then
                # moved, which _slot_at sees by their keys)
                slot = self._find(queues[i], messages[i])
                if slot == NULL:
                    raise UnknownRecordError.of_reference(queues[i], messages[i])
                where[i] = slot - self._slots
        except BaseException:
            PyMem_Free(where)
            raise
        return where

    cdef RefSlot *_slot_at(self, Py_ssize_t index, uint64_t generation, uint64_t queue_id,
                           uint64_t message_id) except NULL:
        """The slot _check_batch found, unless the table changed since (an append released the GIL)."""
        cdef RefSlot *slot = &self._slots[index]
        if (generation != self._generation or slot.state != SLOT_USED or slot.queue_id != queue_id
                or slot.message_id != message_id):
            slot = self._find(queue_id, message_id)
            if slot == NULL:     # removed by another thread meanwhile
                raise UnknownRecordError.of_reference(queue_id, message_id)
        return slot

    cdef int _finish_batch(self, Py_ssize_t written, object sync) except -1:
        if written and self._sync_mode.record_waits(sync):
            self._store.sync()
        return 0
