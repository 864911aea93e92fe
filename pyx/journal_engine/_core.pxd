from libc.stdint cimport uint8_t, uint32_t, uint64_t
from journal_engine._livemap cimport LiveMap

cdef extern from "pthread.h" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass

# a histogram filled without Python objects (the group commit's batch sizes and lags, once per sync):
# upper bounds, a count per bound and one past the last, the observations' sum; bounds and capacity
# from limits.HISTOGRAM_BOUNDS_MAX and its COMMIT_*_BUCKETS, checked when a core fills them
cdef enum:
    HISTOGRAM_BOUNDS_CAPACITY = 16

ctypedef struct Histogram:
    Py_ssize_t bound_count
    uint64_t bounds[HISTOGRAM_BOUNDS_CAPACITY]
    uint64_t counts[HISTOGRAM_BOUNDS_CAPACITY + 1]
    uint64_t total


cdef class Segment:
    cdef readonly object path
    cdef readonly uint64_t file_id
    cdef readonly uint64_t sequence
    cdef readonly uint32_t stamp
    cdef readonly Py_ssize_t size
    cdef public Py_ssize_t limit        # appends stop here: size, or the position once sealed
    cdef public Py_ssize_t position     # end of appended frames
    cdef public Py_ssize_t written      # [0, written) handed to the operating system
    cdef public Py_ssize_t synced       # [0, synced) durable
    cdef int fd

    cdef int write_at(self, const unsigned char *data, Py_ssize_t n, Py_ssize_t offset,
                      Py_ssize_t keep_gil_up_to) except -1
    cdef int datasync(self) except -1


cdef class RecordSink:
    # where a compiled record writer puts its records: the journal's core (frames straight into its
    # buffer) or another record store through the record-store protocol (_record_writer.ProtocolSink)
    cdef int _append_raw(self, uint8_t kind, uint8_t user_type, uint64_t record_id, uint64_t tx_id,
                         const unsigned char *body, Py_ssize_t n, object sync) except -1
    cdef int _begin_group(self, Py_ssize_t total) except -1
    cdef int _end_group(self, object sync) except -1
    cdef int _abort_group(self, object exc) except -1
    cdef bint _is_live(self, uint64_t record_id) except -1


cdef class JournalCore(RecordSink):
    cdef Segment _active
    # the sync mode's answers (storage/sync_mode.py), asked once by _core_configure
    cdef bint _records_wait             # a record with sync=None waits for the disk
    cdef bint _boundaries_wait          # a transaction boundary with sync=None waits
    cdef bint _flushes_in_background    # "group": the flusher syncs what did not wait
    cdef bint _syncs                    # anything syncs on its own (not "none")
    cdef readonly uint64_t appended_bytes
    cdef readonly uint64_t written_bytes
    cdef readonly uint64_t durable_bytes
    cdef unsigned char *_buf            # bytes [_buf_start, active.position) of the active file
    cdef Py_ssize_t _buf_capacity
    cdef Py_ssize_t _buf_start
    cdef list _sealed                   # earlier files written out but not yet synced
    cdef pthread_mutex_t _mutex        # guards the baton hand-over, waited on without the GIL
    cdef pthread_cond_t _write_free     # write baton released, written_bytes advanced
    cdef pthread_cond_t _sync_done      # sync baton released, durable_bytes advanced
    cdef pthread_cond_t _gathered       # signalled when a gathering sync has its batch
    cdef pthread_cond_t _kicked         # the flusher thread's wake-up (_kick_pending set)
    cdef bint _kick_pending
    cdef bint _flusher_in_window       # the flusher sleeps out its window: a non-urgent kick waits for its end
    cdef bint _gathering
    cdef bint _writing                  # the write baton: one thread pads and writes out at a time
    cdef bint _syncing                  # the sync baton: one thread fdatasyncs at a time
    cdef bint _leader_open              # a sync leader holds the write baton and has not padded yet:
                                        # every append before its pad is in its batch
    cdef uint64_t _sync_inflight        # the highest target a leader padded for and has not made durable
    cdef bint _failed                   # mirrors _failure for threads waiting without the GIL
    cdef Py_ssize_t _write_sleepers     # threads asleep on _write_free (counted under the GIL)
    cdef Py_ssize_t _sync_sleepers      # threads asleep on _sync_done or polling for idle
    cdef list _sealed_paths             # sealed files closed before a sync reached them
    cdef object _failure
    cdef object _segment_source         # next_segment(needed_bytes): the file after a full one (the file pool)
    cdef bint _ready
    cdef LiveMap _live
    cdef dict _pending_tx
    cdef object _replaceable
    cdef unsigned char _is_replaceable[256]    # the same, by user record type, for the append path
    cdef readonly Py_ssize_t add_count
    cdef readonly Py_ssize_t replaceable_update_count
    cdef readonly Py_ssize_t sync_count
    cdef readonly uint64_t append_count         # frames of records appended (not GROUP heads, not pads)
    cdef Histogram _batch_bytes                 # bytes each sync made durable
    cdef Histogram _lag_ns                      # each sync's lag: due (times[0]) to published
    cdef readonly Py_ssize_t write_count
    cdef Py_ssize_t _buffer_size
    cdef Py_ssize_t _max_frame
    cdef public int _flusher_state
    cdef Py_ssize_t _sync_requests      # appends waiting for durability since the last sync began
    cdef Py_ssize_t _last_batch         # how many the last sync served: the next one waits for as many
    cdef Py_ssize_t _gather_us          # ... but no longer than this (buffer_timeout_us)
    cdef bint _grouped                  # a record group is being appended: its room is reserved, and
                                        # nothing may write out or wait until _end_group
    cdef Py_ssize_t _group_head         # where the open group's GROUP frame lies in the active file
    cdef uint32_t _group_count          # member frames appended to the open group so far
    cdef Py_ssize_t _sealed_pending     # len(_sealed) + len(_sealed_paths), for the flusher without the GIL
    cdef uint64_t _roll_count           # file switches: the flusher's active file is still the active one
    cdef uint64_t _flusher_sync_ns      # CLOCK_MONOTONIC start of the flusher's last sync: its window's start
    cdef uint64_t _flusher_due_ns       # ... and when it was due to run (the trace's wake-up)
    cdef uint64_t _kick_ns              # when the last kick that woke the flusher was signalled
    cdef uint64_t *_sync_trace          # (durable_bytes, due_ns, woken_ns, batch_ns, sync_ns, end_ns) per sync
    cdef Py_ssize_t _sync_trace_capacity
    cdef Py_ssize_t _sync_trace_count

    cdef int _check_writable(self) except -1
    cdef bint _try_take(self, bint write, bint sync) noexcept
    cdef int _count_sealed(self) except -1
    cdef int _flush_without_gil(self, Segment seg, uint64_t rolls) noexcept nogil
    cdef void _pad_locked(self, Segment seg) noexcept nogil
    cdef int _append(self, uint8_t kind, int user_type, object record_id, uint64_t tx_id,
                     object body, object sync) except -1
    cdef int _after_append(self, object sync) except -1
    cdef int _make_room(self, Py_ssize_t size) except -1
    cdef int _notify(self, int which) except -1
    cdef int _kick(self, bint urgent) except -1
    cdef int _sleep(self, uint64_t target, int what) except -1
    cdef int _sleep_nogil(self, uint64_t target, int what) except -1
    cdef int _wait_for(self, uint64_t target, bint durable) except -1
    cdef int _lead_sync(self) except -1
    cdef int _gather(self) except -1
    cdef int _sync_one_file(self, Segment seg, uint64_t target, Py_ssize_t batch,
                            uint64_t *times) except -1
    cdef void _publish_sync(self, Segment seg, Py_ssize_t written, uint64_t target,
                            Py_ssize_t batch, const uint64_t *times) noexcept nogil
    cdef int _write_active(self, Py_ssize_t keep_gil_up_to=*) except -1
    cdef void _written_out(self, Segment seg, Py_ssize_t end, uint64_t target) noexcept nogil
    cdef int _pad_to_sector(self) except -1
