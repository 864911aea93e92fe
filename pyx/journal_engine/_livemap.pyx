# cython: language_level=3
"""The journal's live set: record id -> bytes it occupies, in an open-addressing C table.

A dict would allocate two Python ints per append; this keeps the hot path free
of Python objects. Linear probing, tombstones, doubling at 70% occupancy. A
recovery hands over its records as a base instead: ids in rising order with
their bytes, kept where the replay left them (found by ``find_sorted``), so a
journal of a million records starts without a million inserts into a table.
"""
from libc.stdlib cimport calloc, free
from libc.stdint cimport uint64_t, int64_t
from posix.mman cimport mmap, munmap, madvise, PROT_READ, PROT_WRITE, MAP_PRIVATE, MAP_ANONYMOUS, MAP_FAILED

cdef extern from "<sys/mman.h>":
    enum: MADV_HUGEPAGE

from journal_engine.limits import TABLE_HUGE_PAGES_BYTES_MIN as _HUGE_PAGES_BYTES_MIN

cdef size_t HUGE_PAGES_BYTES_MIN = _HUGE_PAGES_BYTES_MIN

# a slot holds 0 (empty), 1 (tombstone) or the record's bytes + 2: an all-zero table is empty,
# so tables come zeroed by the kernel (zeroed_table), never by a memset
DEF EMPTY = 0
DEF TOMBSTONE = 1
DEF OFFSET = 2
DEF INITIAL_CAPACITY = 1024


cdef inline uint64_t _mix(uint64_t x) noexcept nogil:
    # Folding the high words into the low ones keeps consecutive ids (a counter, the common
    # case) in consecutive slots, so replaying a million records walks the table instead of
    # missing the cache on every insert; ids that differ only in high bits still spread.
    return x ^ (x >> 16) ^ (x >> 32) ^ (x >> 48)


cdef void advise_huge_pages(void *p, size_t size) noexcept nogil:
    """Advise the whole 2 MiB pages inside ``size`` bytes at ``p`` to transparent huge pages: a
    fault per 2 MiB written, not per 4 KiB (where the kernel gives none, nothing changes)."""
    cdef size_t huge = 1 << 21
    cdef size_t start = (<size_t>p + huge - 1) & ~(huge - 1)
    cdef size_t end = (<size_t>p + size) & ~(huge - 1)
    if end > start:
        madvise(<void *>start, end - start, MADV_HUGEPAGE)


cdef void *zeroed_table(size_t size) noexcept nogil:
    """``size`` zeroed bytes for one of a table's arrays (this live set's, the record writer's
    references), or NULL. A large one is mapped anonymous
    and advised to the kernel's transparent huge pages: a fault per 2 MiB the table reaches, not per
    4 KiB. A fresh page of calloc that a probe reads before a write is mapped to the zero page, then
    copied at the write: a second fault, whose TLB flush interrupts every other thread of the
    process (during recovery, the threads that scan the next files), on each of the table's pages.
    Where the kernel gives no huge pages the table works the same, with 4 KiB pages."""
    cdef void *p
    if size < HUGE_PAGES_BYTES_MIN:
        return calloc(size, 1)
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    if p == MAP_FAILED:
        return NULL
    advise_huge_pages(p, size)
    return p


cdef void release_table(void *p, size_t size) noexcept nogil:
    """Give back what ``zeroed_table(size)`` gave."""
    if p == NULL:
        return
    if size < HUGE_PAGES_BYTES_MIN:
        free(p)
    else:
        munmap(p, size)


cdef Py_ssize_t find_sorted(const uint64_t *keys, Py_ssize_t count, uint64_t key) noexcept nogil:
    """The index of ``key`` in ``keys[:count]`` (strictly rising), or -1. Ids are mostly a counter's,
    so the index the key interpolates to in the run is usually its own: one probe; else a binary
    search of the side that probe tells."""
    cdef Py_ssize_t low = 0, high = count, middle = 0
    cdef uint64_t span
    if count == 0 or key < keys[0] or key > keys[count - 1]:
        return -1
    span = keys[count - 1] - keys[0]
    if span:
        middle = <Py_ssize_t>(<double>(key - keys[0]) / <double>span * <double>(count - 1) + 0.5)
        middle = min(max(middle, 0), count - 1)
    if keys[middle] == key:
        return middle
    if keys[middle] < key:
        low = middle + 1
    else:
        high = middle
    while low < high:
        middle = (low + high) >> 1
        if keys[middle] < key:
            low = middle + 1
        else:
            high = middle
    return low if low < count and keys[low] == key else -1


cdef bint keys_rise(const uint64_t *keys, Py_ssize_t count) noexcept nogil:
    """Whether ``keys[:count]`` rise strictly: what find_sorted searches (a counter's ids do)."""
    cdef Py_ssize_t i
    for i in range(1, count):
        if keys[i] <= keys[i - 1]:
            return False
    return True


cdef class LiveMap:
    def __cinit__(self, Py_ssize_t expected=0):
        cdef Py_ssize_t capacity = INITIAL_CAPACITY
        while capacity * 7 < expected * 10:
            capacity *= 2
        self._alloc(capacity)

    def _alloc(self, Py_ssize_t capacity):
        self._keys = <uint64_t *>zeroed_table(capacity * sizeof(uint64_t))
        self._values = <int64_t *>zeroed_table(capacity * sizeof(int64_t))
        self._capacity = capacity
        self._count = 0
        self._used = 0
        if self._keys == NULL or self._values == NULL:
            raise MemoryError()

    def __dealloc__(self):
        release_table(self._keys, self._capacity * sizeof(uint64_t))
        release_table(self._values, self._capacity * sizeof(int64_t))

    cdef Py_ssize_t _slot(self, uint64_t key) noexcept nogil:
        """The slot holding key, or the first free (empty or tombstone) slot on its probe path."""
        cdef Py_ssize_t mask = self._capacity - 1
        cdef Py_ssize_t i = <Py_ssize_t>(_mix(key) & <uint64_t>mask)
        cdef Py_ssize_t first_free = -1
        cdef int64_t v
        while True:
            v = self._values[i]
            if v == EMPTY:
                return first_free if first_free >= 0 else i
            if v == TOMBSTONE:
                if first_free < 0:
                    first_free = i
            elif self._keys[i] == key:
                return i
            i = (i + 1) & mask

    cdef int _grow(self) except -1:
        cdef uint64_t *old_keys = self._keys
        cdef int64_t *old_values = self._values
        cdef Py_ssize_t old_capacity = self._capacity, i, slot
        cdef Py_ssize_t capacity = old_capacity * 2 if self._count * 2 >= old_capacity else old_capacity
        self._alloc(capacity)
        for i in range(old_capacity):
            if old_values[i] >= OFFSET:
                slot = self._slot(old_keys[i])
                self._keys[slot] = old_keys[i]
                self._values[slot] = old_values[i]
                self._count += 1
                self._used += 1
        release_table(old_keys, old_capacity * sizeof(uint64_t))
        release_table(old_values, old_capacity * sizeof(int64_t))
        return 0

    cdef Py_ssize_t _base_slot(self, uint64_t key) noexcept nogil:
        return find_sorted(self._base_keys, self._base_count, key) if self._base_count else -1

    cdef int take(self, object owner, const uint64_t *keys, int64_t *values, Py_ssize_t count,
                  bint rising=False) except -1:
        """Take ``keys[:count]`` (none of them in the table) with their ``values`` (bytes, or -1: not
        live). Keys that rise (a counter's: the common case) become the base, where they lie while
        ``owner`` lives: the values are rewritten in place into the table's encoding, and from then
        on are the live set's. Keys that do not rise go into the table, one by one. ``rising``: the
        caller checked that they rise (a replay does, key by key), and they are not checked again."""
        cdef Py_ssize_t i, live = 0
        cdef int64_t total = 0, value
        if self._base_owner is not None:
            raise ValueError("a live set takes one base")
        if not rising and not keys_rise(keys, count):
            for i in range(count):
                if values[i] >= 0:
                    self.put(keys[i], values[i])
            return 0
        for i in range(count):      # (sums in locals: the values' stores cannot alias them)
            value = values[i]
            if value >= 0:
                live += 1
                total += value
                values[i] = value + OFFSET
            else:
                values[i] = TOMBSTONE
        self._base_live += live
        self.total_bytes += total
        self._base_owner = owner
        self._base_keys = keys
        self._base_values = values
        self._base_count = count
        return 0

    cdef void _set_base(self, Py_ssize_t i, int64_t nbytes) noexcept nogil:
        """The base's key ``i`` live with ``nbytes`` (again, when it was removed)."""
        cdef int64_t v = self._base_values[i]
        if v >= OFFSET:
            self.total_bytes -= v - OFFSET
        else:
            self._base_live += 1
        self._base_values[i] = nbytes + OFFSET
        self.total_bytes += nbytes

    cdef bint contains(self, uint64_t key) noexcept nogil:
        return self.get_bytes(key) >= 0

    cdef int64_t get_bytes(self, uint64_t key) noexcept nogil:
        cdef Py_ssize_t i = self._base_slot(key)
        cdef int64_t v = self._base_values[i] if i >= 0 else self._values[self._slot(key)]
        return v - OFFSET if v >= OFFSET else -1

    cdef bint has_room(self) noexcept nogil:
        """Whether one more key fits under the 70% occupancy (else ``_grow`` first, with the GIL)."""
        return (self._used + 1) * 10 <= self._capacity * 7

    cdef Py_ssize_t _slot_with_room(self, uint64_t key) except -1:
        """``_slot(key)`` in a table with room for one more key (grown or cleared of tombstones first)."""
        if not self.has_room():
            self._grow()
        return self._slot(key)

    cdef void _insert_at(self, Py_ssize_t slot, uint64_t key, int64_t nbytes) noexcept nogil:
        """A new key into the free slot (empty or tombstone) its probe path found."""
        self._count += 1
        if self._values[slot] == EMPTY:
            self._used += 1
        self._keys[slot] = key
        self._values[slot] = nbytes + OFFSET
        self.total_bytes += nbytes

    cdef int put(self, uint64_t key, int64_t nbytes) except -1:
        cdef Py_ssize_t slot
        cdef int64_t v
        assert nbytes >= 0
        slot = self._base_slot(key)
        if slot >= 0:
            self._set_base(slot, nbytes)
            return 0
        slot = self._slot_with_room(key)
        v = self._values[slot]
        if v < OFFSET:
            self._insert_at(slot, key, nbytes)
            return 0
        self.total_bytes += nbytes - (v - OFFSET)
        self._values[slot] = nbytes + OFFSET
        return 0

    cdef int64_t put_new(self, uint64_t key, int64_t nbytes) except -2:
        """Insert ``key`` with ``nbytes`` unless it is there: its value then (nothing changed), else -1.
        One walk of the probe path where a lookup and an insert take two."""
        assert nbytes >= 0
        if not self.has_room():
            self._grow()
        return self.put_new_in_room(key, nbytes)

    cdef int64_t put_new_in_room(self, uint64_t key, int64_t nbytes) noexcept nogil:
        """``put_new`` in a table that ``has_room()`` (a replay's run without the GIL; ``nbytes >= 0``)."""
        cdef Py_ssize_t slot = self._base_slot(key)
        cdef int64_t v
        if slot >= 0:
            v = self._base_values[slot]
            if v >= OFFSET:
                return v - OFFSET
            self._set_base(slot, nbytes)
            return -1
        slot = self._slot(key)
        v = self._values[slot]
        if v >= OFFSET:
            return v - OFFSET
        self._insert_at(slot, key, nbytes)
        return -1

    cdef int map_values(self, const int64_t *by_value, Py_ssize_t count) except -1:
        """Replace every value ``v`` by ``by_value[v]`` (each a value below ``count``) and count the
        total again: a table of record id -> entry index becomes record id -> bytes in place."""
        cdef Py_ssize_t i
        cdef int64_t v, total = 0
        for i in range(self._capacity):
            v = self._values[i]
            if v >= OFFSET:
                if v - OFFSET >= count or by_value[v - OFFSET] < 0:
                    raise ValueError(f"value {v - OFFSET} has no replacement")
                self._values[i] = by_value[v - OFFSET] + OFFSET
                total += by_value[v - OFFSET]
        self.total_bytes = total
        return 0

    cdef int add_bytes(self, uint64_t key, int64_t nbytes) except -1:
        cdef Py_ssize_t slot = self._base_slot(key)
        cdef int64_t *values = self._base_values
        if slot < 0:
            slot = self._slot(key)
            values = self._values
        if values[slot] < OFFSET:
            raise KeyError(key)
        values[slot] += nbytes
        self.total_bytes += nbytes
        return 0

    cdef int64_t remove(self, uint64_t key) noexcept nogil:
        cdef Py_ssize_t slot = self._base_slot(key)
        cdef int64_t v
        if slot >= 0:
            v = self._base_values[slot]
            if v < OFFSET:
                return -1
            self._base_values[slot] = TOMBSTONE
            self._base_live -= 1
        else:
            slot = self._slot(key)
            v = self._values[slot]
            if v < OFFSET:
                return -1
            self._values[slot] = TOMBSTONE
            self._count -= 1
        self.total_bytes -= v - OFFSET
        return v - OFFSET

    # ----- the Python face: a small mapping of int -> int --------------------------------
    def __len__(self):
        return self._count + self._base_live

    def __contains__(self, key):
        return key >= 0 and key <= 0xFFFFFFFFFFFFFFFF and self.contains(<uint64_t>key)

    # keys arrive as objects: a typed index would make Cython fill the sequence slots,
    # which take a C ssize_t and refuse ids of 2**63 and above
    def __getitem__(self, key):
        cdef int64_t v = self.get_bytes(<uint64_t>key)
        if v < 0:
            raise KeyError(key)
        return v

    def __setitem__(self, key, nbytes):
        self.put(<uint64_t>key, <int64_t>nbytes)

    def __delitem__(self, key):
        if self.remove(<uint64_t>key) < 0:
            raise KeyError(key)

    def get(self, uint64_t key, default=None):
        cdef int64_t v = self.get_bytes(key)
        return default if v < 0 else v

    def pop(self, uint64_t key, *default):
        cdef int64_t v = self.remove(key)
        if v < 0:
            if default:
                return default[0]
            raise KeyError(key)
        return v

    def keys(self):
        cdef Py_ssize_t i
        return ([self._base_keys[i] for i in range(self._base_count) if self._base_values[i] >= OFFSET]
                + [self._keys[i] for i in range(self._capacity) if self._values[i] >= OFFSET])

    def items(self):
        cdef Py_ssize_t i
        return ([(self._base_keys[i], self._base_values[i] - OFFSET) for i in range(self._base_count)
                 if self._base_values[i] >= OFFSET]
                + [(self._keys[i], self._values[i] - OFFSET) for i in range(self._capacity)
                   if self._values[i] >= OFFSET])

    def __iter__(self):
        return iter(self.keys())
