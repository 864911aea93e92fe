# A record id -> bytes map with no Python objects per entry: the journal's live set.
cimport cython
from libc.stdint cimport uint64_t, int64_t

@cython.final           # no subclass: its methods are called directly, not through a table
cdef class LiveMap:
    cdef uint64_t *_keys
    cdef int64_t *_values       # EMPTY or TOMBSTONE, else the bytes a live record occupies (>= 0)
    cdef Py_ssize_t _capacity   # a power of two
    cdef Py_ssize_t _count
    cdef Py_ssize_t _used       # count + tombstones
    cdef readonly int64_t total_bytes

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
