from libc.stdint cimport uint8_t, uint32_t, uint64_t

cdef class Segment:
    cdef readonly object path
    cdef readonly uint64_t file_id
    cdef readonly uint64_t sequence
    cdef readonly uint32_t stamp
    cdef readonly Py_ssize_t size
    cdef public Py_ssize_t position
    cdef public Py_ssize_t synced
    cdef int fd
    cdef unsigned char *base

    cdef int sync_range(self, Py_ssize_t start, Py_ssize_t end) except -1


cdef class JournalCore:
    cdef Segment _active
    cdef int _mode
    cdef readonly uint64_t appended_bytes
    cdef readonly uint64_t durable_bytes
    cdef list _sealed
    cdef list _sealed_paths
    cdef object _cond
    cdef bint _sync_running
    cdef object _failure
    cdef bint _ready
    cdef dict _live
    cdef dict _pending_tx
    cdef object _replaceable
    cdef readonly Py_ssize_t live_bytes
    cdef readonly Py_ssize_t add_count
    cdef readonly Py_ssize_t replaceable_update_count
    cdef readonly Py_ssize_t sync_count
    cdef Py_ssize_t _buffer_size
    cdef Py_ssize_t _max_frame
    cdef public int _flusher_state
    cdef object _roll_lock

    cdef int _check_writable(self) except -1
    cdef int _append(self, uint8_t kind, int user_type, uint64_t record_id, uint64_t tx_id,
                     object body, object sync) except -1
    cdef int _append_raw(self, uint8_t kind, uint8_t user_type, uint64_t record_id, uint64_t tx_id,
                         const unsigned char *body, Py_ssize_t n, object sync) except -1
    cdef int _after_append(self, object sync) except -1
    cdef int _wait_durable(self, uint64_t target) except -1
    cdef int _run_sync(self) except -1
    cdef int _pad_to_sector(self) except -1
