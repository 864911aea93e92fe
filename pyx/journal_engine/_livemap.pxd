# A record id -> bytes map with no Python objects per entry: the journal's live set.
cimport cython
from libc.stdint cimport uint64_t, int64_t

# a large table's zeroed memory: on transparent huge pages (a fault per 2 MiB, no zero-page copies)
cdef void advise_huge_pages(void *p, size_t size) noexcept nogil    # the whole 2 MiB pages inside it
cdef void *zeroed_table(size_t size) noexcept nogil                 # NULL when there is no memory
cdef void release_table(void *p, size_t size) noexcept nogil       # what zeroed_table(size) gave
cdef Py_ssize_t find_sorted(const uint64_t *keys, Py_ssize_t count, uint64_t key) noexcept nogil   # index, or -1
cdef bint keys_rise(const uint64_t *keys, Py_ssize_t count) noexcept nogil    # strictly: find_sorted's keys

@cython.final           # no subclass: its methods are called directly, not through a table
cdef class LiveMap:
    cdef uint64_t *_keys
    cdef int64_t *_values       # EMPTY or TOMBSTONE, else the bytes a live record occupies (>= 0)
    cdef Py_ssize_t _capacity   # a power of two
    cdef Py_ssize_t _count
    cdef Py_ssize_t _used       # count + tombstones
    cdef readonly int64_t total_bytes
    # the base: ids in rising order with their values (TOMBSTONE once removed), adopted where they
    # lie -- a replay's entries -- so recovery builds no table; a key is in the base or the table
    cdef const uint64_t *_base_keys
    cdef int64_t *_base_values
    cdef Py_ssize_t _base_count
    cdef Py_ssize_t _base_live
    cdef object _base_owner
    cdef Py_ssize_t _base_slot(self, uint64_t key) noexcept nogil     # the key's index in the base, or -1
    cdef void _set_base(self, Py_ssize_t i, int64_t nbytes) noexcept nogil
    cdef int take(self, object owner, const uint64_t *keys, int64_t *values, Py_ssize_t count,
                  bint rising=*) except -1   # base, or table

    cdef Py_ssize_t _slot(self, uint64_t key) noexcept nogil
    cdef Py_ssize_t _slot_with_room(self, uint64_t key) except -1
    cdef bint has_room(self) noexcept nogil     # room for one more key without growing
    cdef void _insert_at(self, Py_ssize_t slot, uint64_t key, int64_t nbytes) noexcept nogil
    cdef int _grow(self) except -1
    cdef bint contains(self, uint64_t key) noexcept nogil
    cdef int64_t get_bytes(self, uint64_t key) noexcept nogil    # -1 when absent
    cdef int put(self, uint64_t key, int64_t nbytes) except -1   # insert or replace
    cdef int add_bytes(self, uint64_t key, int64_t nbytes) except -1   # on a live key
    cdef int64_t remove(self, uint64_t key) noexcept nogil        # its bytes, or -1 when absent
    cdef int64_t put_new(self, uint64_t key, int64_t nbytes) except -2   # the key's value, or -1: inserted
    cdef int64_t put_new_in_room(self, uint64_t key, int64_t nbytes) noexcept nogil   # put_new once has_room()
    cdef int map_values(self, const int64_t *by_value, Py_ssize_t count) except -1   # each value v -> by_value[v]
