# cython: language_level=3
"""Compiled append path: record appends, write-out and group commit.

Frames are encoded into one buffer allocated at open (the bytes of the active
file not yet handed to the operating system) and written with pwrite; a sync
pads to a sector boundary, writes out and fdatasyncs. Positioned writes, not a
shared mapping: on ext4 every first store into a clean mapped page starts a
journal transaction, which made each msync cost ~1 ms against ~0.14 ms for
pwrite + fdatasync on the same disk (docs/internals/format.md).

Appends run entirely with the GIL held and never release it, so the GIL is the
append lock. Write-out and sync release the GIL; one thread at a time holds the
I/O baton, and every thread waiting for durability is served by the holder's
single fdatasync (group commit). The Python twin is journal_engine._twin.core.
"""
import os

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.errno cimport errno, EINTR
from libc.string cimport memcpy, memmove, memset
from posix.fcntl cimport open as c_open, O_RDWR
from posix.unistd cimport close as c_close, pwrite, fdatasync, usleep
from posix.time cimport clock_gettime, timespec, CLOCK_REALTIME, CLOCK_MONOTONIC
from posix.types cimport time_t
from libc.errno cimport ETIMEDOUT

from journal_engine._livemap cimport LiveMap
from journal_engine._core cimport pthread_mutex_t, pthread_cond_t

cdef extern from "fcntl.h" nogil:
    int sync_file_range(int fd, long long offset, long long nbytes, unsigned int flags)
    unsigned int SYNC_FILE_RANGE_WRITE

cdef extern from "pthread.h" nogil:
    int pthread_mutex_init(pthread_mutex_t *, void *)
    int pthread_mutex_destroy(pthread_mutex_t *)
    int pthread_mutex_lock(pthread_mutex_t *)
    int pthread_mutex_unlock(pthread_mutex_t *)
    int pthread_cond_init(pthread_cond_t *, void *)
    int pthread_cond_destroy(pthread_cond_t *)
    int pthread_cond_wait(pthread_cond_t *, pthread_mutex_t *)
    int pthread_cond_broadcast(pthread_cond_t *)
    int pthread_cond_signal(pthread_cond_t *)
    int pthread_cond_timedwait(pthread_cond_t *, pthread_mutex_t *, const timespec *)
    ctypedef struct pthread_condattr_t:
        pass
    int pthread_condattr_init(pthread_condattr_t *)
    int pthread_condattr_setclock(pthread_condattr_t *, int)
    int pthread_condattr_destroy(pthread_condattr_t *)

# which waiters a hand-over wakes: write-baton waiters and durability waiters sleep on
# separate condition variables, so a flush does not wake every thread waiting for a sync
cdef enum Wake:
    WAKE_WRITERS = 1
    WAKE_SYNCERS = 2
    WAKE_ALL = 3

# what a thread sleeps for (each wait re-checks its own condition after waking)
cdef enum WaitFor:
    WAIT_WRITE_BATON = 0  # the write baton is free
    WAIT_SYNC_BATON = 1   # the sync baton is free
    WAIT_WRITTEN = 2      # written_bytes >= target, or the writer is done
    WAIT_DURABLE = 3      # durable_bytes >= target, or no leader covers target any more
    WAIT_IDLE = 4         # no write-out, no sync, no leader between the two
from journal_engine._codec cimport (
    FRAME_HEADER_SIZE, write_frame, write_flagged_frame, write_group_head, write_pad, frame_size, store_u32,
    GROUP_MEMBER, GROUP_BODY_SIZE,
    KIND_ADD, KIND_UPDATE, KIND_DELETE, KIND_ADD_TX, KIND_UPDATE_TX, KIND_DELETE_TX,
    KIND_PREPARE, KIND_COMMIT, KIND_ROLLBACK,
)

from journal_engine.errors import (
    JournalClosedError, JournalFailedError, JournalIOError, UnknownRecordError, DuplicateRecordError,
    UnknownTransactionError, RecordTooLargeError, StoreFullError,
)
from journal_engine.limits import (BUFFER_SIZE_DEFAULT_BYTES, COMMIT_BATCH_BUCKETS_BYTES, COMMIT_LAG_BUCKETS_NS,
                                   HISTOGRAM_BOUNDS_MAX, SECTOR_SIZE_BYTES, UNSYNCED_OPEN_FILES_MAX)
from journal_engine._core cimport Histogram, HISTOGRAM_BOUNDS_CAPACITY

DEF SECTOR = 4096
DEF TRACE_FIELDS = 6                # a traced sync: durable_bytes, due_ns, woken_ns, batch_ns, sync_ns, end_ns
DEF FLUSH_KEEPS_GIL_UP_TO = 65536   # a flush's caller waits for its write anyway
DEF LEADER_KEEPS_GIL_UP_TO = 1 << 20   # a sync leader's batch (at most ~buffer_size): taking the GIL
                                        # back after the write could wait a whole switch interval
if SECTOR != SECTOR_SIZE_BYTES:       # an if, not an assert: python -O must not skip it
    raise ImportError(f"journal_engine._core was built for {SECTOR}-byte sectors, limits says "
                      f"{SECTOR_SIZE_BYTES}: rebuild it (pip install -e .)")
if HISTOGRAM_BOUNDS_CAPACITY != HISTOGRAM_BOUNDS_MAX:
    raise ImportError(f"journal_engine._core was built for histograms of {HISTOGRAM_BOUNDS_CAPACITY} bounds, "
                      f"limits says {HISTOGRAM_BOUNDS_MAX}: rebuild it (pip install -e .)")


cdef void _histogram_fill(Histogram *histogram, bounds) except *:
    """Empty counts and ``bounds`` (rising, at most HISTOGRAM_BOUNDS_CAPACITY: limits checks both)."""
    cdef Py_ssize_t i
    memset(histogram, 0, sizeof(Histogram))
    histogram.bound_count = len(bounds)
    for i in range(histogram.bound_count):
        histogram.bounds[i] = bounds[i]


cdef inline void _histogram_observe(Histogram *histogram, uint64_t value) noexcept nogil:
    """Count ``value`` in the first bucket whose bound it does not exceed (Prometheus's ``le``)."""
    cdef Py_ssize_t i = 0
    while i < histogram.bound_count and value > histogram.bounds[i]:
        i += 1
    histogram.counts[i] += 1
    histogram.total += value


cdef dict _histogram_snapshot(const Histogram *histogram):
    return {"bounds": tuple([histogram.bounds[i] for i in range(histogram.bound_count)]),
            "counts": tuple([histogram.counts[i] for i in range(histogram.bound_count + 1)]),
            "sum": histogram.total}

# the background flusher of group mode: idle (nothing unsynced), timing (syncs within
# buffer_timeout_us), urgent (more than buffer_size unsynced: sync now)
cdef enum FlusherState:
    FLUSHER_IDLE = 0
    FLUSHER_TIMING = 1
    FLUSHER_URGENT = 2



cdef unsigned char _ZERO_HEADER[FRAME_HEADER_SIZE]    # zero-initialised: what a file switch writes after the last frame


cdef int _pwrite_all(int fd, const unsigned char *data, Py_ssize_t n, Py_ssize_t offset) noexcept nogil:
    """pwrite every byte, retrying short writes and EINTR; 0 or the errno of the failure."""
    cdef Py_ssize_t done = 0, rc
    while done < n:
        rc = pwrite(fd, data + done, n - done, offset + done)
        if rc < 0:
            if errno == EINTR:
                continue
            return errno
        done += rc
    return 0


cdef class Segment:
    """One journal file open for appending at `position`."""

    def __cinit__(self, path, uint64_t file_id, uint64_t sequence, Py_ssize_t size, Py_ssize_t position):
        cdef bytes encoded = os.fsencode(path)
        self.path = path
        self.file_id = file_id
        self.sequence = sequence
        self.stamp = <uint32_t>(file_id & 0xFFFFFFFFu)
        self.size = size
        self.limit = size
        self.position = position
        self.written = position
        self.synced = position
        self.fd = c_open(encoded, O_RDWR)
        if self.fd < 0:
            raise JournalIOError(f"cannot open journal file {path}: {os.strerror(errno)}", errno=errno, path=path,
                                 hint="check the device and the permissions")

    cdef int write_at(self, const unsigned char *data, Py_ssize_t n, Py_ssize_t offset,
                      Py_ssize_t keep_gil_up_to) except -1:
        """pwrite all n bytes at offset. A write of at most keep_gil_up_to bytes (frames into the
        page cache: microseconds) keeps the GIL: with other threads running Python, handing the GIL
        over and waiting to get it back costs more than the copy. A larger one releases it."""
        cdef int err
        if self.fd < 0:
            raise OSError(9, "segment closed", self.path)
        if n <= keep_gil_up_to:
            err = _pwrite_all(self.fd, data, n, offset)
        else:
            with nogil:
                err = _pwrite_all(self.fd, data, n, offset)
        if err:
            raise OSError(err, os.strerror(err), self.path)
        return 0

    cdef int datasync(self) except -1:
        cdef int rc
        if self.fd < 0:
            raise OSError(9, "segment closed", self.path)
        with nogil:
            rc = fdatasync(self.fd)
        if rc != 0:
            raise OSError(errno, os.strerror(errno), self.path)
        return 0

    @property
    def is_open(self):
        return self.fd >= 0

    def close(self):
        if self.fd >= 0:
            c_close(self.fd)
            self.fd = -1

    def __dealloc__(self):
        if self.fd >= 0:
            c_close(self.fd)


cdef inline uint64_t _monotonic_ns() noexcept nogil:
    cdef timespec now
    clock_gettime(CLOCK_MONOTONIC, &now)
    return <uint64_t>now.tv_sec * 1000000000 + now.tv_nsec


cdef inline void _deadline_in(timespec *deadline, long long nanoseconds) noexcept nogil:
    """deadline = now + nanoseconds, on the clock pthread_cond_timedwait uses."""
    clock_gettime(CLOCK_REALTIME, deadline)
    nanoseconds += deadline.tv_nsec
    deadline.tv_sec += <time_t>(nanoseconds // 1000000000)
    deadline.tv_nsec = <long>(nanoseconds % 1000000000)


cdef inline bint _wants_wait(bint by_default, object sync):
    """SyncMode.record_waits and boundary_waits (storage/sync_mode.py) with the mode's answer cached in C."""
    if sync is None:
        return by_default
    return sync is True or bool(sync)


cdef class RecordSink:
    """Where a compiled record writer puts its records (the record writer's one path): JournalCore puts
    the frames straight into its buffer; _record_writer.ProtocolSink hands them to another record store
    through the record-store protocol. The methods here are what every sink implements."""

    cdef int _append_raw(self, uint8_t kind, uint8_t user_type, uint64_t record_id, uint64_t tx_id,
                         const unsigned char *body, Py_ssize_t n, object sync) except -1:
        raise NotImplementedError(f"{type(self).__name__} does not take records")

    cdef int _begin_group(self, Py_ssize_t total) except -1:
        raise NotImplementedError(f"{type(self).__name__} does not take record groups")

    cdef int _end_group(self, object sync) except -1:
        raise NotImplementedError(f"{type(self).__name__} does not take record groups")

    cdef int _abort_group(self, object exc) except -1:
        raise NotImplementedError(f"{type(self).__name__} does not take record groups")

    cdef bint _is_live(self, uint64_t record_id) except -1:
        raise NotImplementedError(f"{type(self).__name__} does not say which records are live")


cdef class JournalCore(RecordSink):
    """Appends frames to the active file and makes them durable in groups."""

    def __cinit__(self, *args, **kwargs):
        cdef pthread_condattr_t on_monotonic
        self._sealed = []
        self._sealed_paths = []
        pthread_mutex_init(&self._mutex, NULL)
        pthread_cond_init(&self._write_free, NULL)
        pthread_cond_init(&self._sync_done, NULL)
        pthread_cond_init(&self._gathered, NULL)
        # the flusher's window is counted from its last sync's start on CLOCK_MONOTONIC
        pthread_condattr_init(&on_monotonic)
        pthread_condattr_setclock(&on_monotonic, CLOCK_MONOTONIC)
        pthread_cond_init(&self._kicked, &on_monotonic)
        pthread_condattr_destroy(&on_monotonic)
        self._live = LiveMap()
        self._pending_tx = {}
        self._replaceable = frozenset()
        self._ready = False
        self._flusher_state = FLUSHER_IDLE
        self._records_wait = False               # "group" until _core_configure
        self._boundaries_wait = True
        self._flushes_in_background = True
        self._syncs = True
        self._buffer_size = BUFFER_SIZE_DEFAULT_BYTES
        self._buf = NULL
        self._sync_trace = NULL
        _histogram_fill(&self._batch_bytes, COMMIT_BATCH_BUCKETS_BYTES)
        _histogram_fill(&self._lag_ns, COMMIT_LAG_BUCKETS_NS)

    def __dealloc__(self):
        if self._buf != NULL:
            PyMem_Free(self._buf)
        if self._sync_trace != NULL:
            PyMem_Free(self._sync_trace)
        pthread_cond_destroy(&self._write_free)
        pthread_cond_destroy(&self._sync_done)
        pthread_cond_destroy(&self._gathered)
        pthread_cond_destroy(&self._kicked)
        pthread_mutex_destroy(&self._mutex)

    # ----- set-up by the Python layer -------------------------------------------------
    def _core_configure(self, mode, Py_ssize_t buffer_size, Py_ssize_t max_frame, replaceable,
                        Py_ssize_t gather_us=500):
        # the mode's four answers, kept in C fields for the paths that run without the GIL
        self._records_wait, self._boundaries_wait = mode.records_wait, mode.boundaries_wait
        self._flushes_in_background, self._syncs = mode.flushes_in_background, mode.syncs
        self._gather_us = gather_us
        self._buffer_size = buffer_size
        self._max_frame = max_frame
        self._replaceable = frozenset(replaceable)
        memset(self._is_replaceable, 0, sizeof(self._is_replaceable))
        for record_type in self._replaceable:
            if not 0 <= record_type <= 255:
                raise ValueError(f"replaceable record type {record_type}: must be within 0..255")
            self._is_replaceable[record_type] = 1
        # room for a full buffer, the largest frame and a sector of padding: allocated once
        self._buf_capacity = buffer_size + max_frame + 2 * SECTOR
        if self._buf != NULL:
            PyMem_Free(self._buf)
        self._buf = <unsigned char *>PyMem_Malloc(self._buf_capacity)
        if self._buf == NULL:
            raise MemoryError()

    def _core_install(self, Segment active, LiveMap live, dict pending_tx,
                      Py_ssize_t add_count, Py_ssize_t replaceable_updates, next_segment):
        """Start appending to `active`. `next_segment(needed_bytes)` supplies the file after a full one
        (the journal's file pool): the core calls what it is handed, never a method of a subclass."""
        assert active.position == active.written, "a file is installed with nothing buffered"
        self._segment_source = next_segment
        self._active = active
        self._buf_start = active.position
        self._live = live
        self._pending_tx = pending_tx
        self.add_count = add_count
        self.replaceable_update_count = replaceable_updates
        self._ready = True

    def _core_force_roll(self, factory):
        """Write out and seal the active file, continue in factory()'s; returns the new one."""
        self._roll(self._active, 0, factory)
        return self._active

    def _core_seal_tail(self):
        """After recovery: pad to a sector boundary and sync, so appends never touch recovered sectors."""
        self._check_writable()
        self._pad_to_sector()
        self._wait_for(self.appended_bytes, True)

    def _core_fail(self, exc):
        if self._failure is None:
            self._failure = exc
        self._failed = True
        self._leader_open = False
        self._notify(WAKE_ALL)

    def _failed_at(self, what, exc):
        """Stop the journal after ``what`` ("write", "sync") failed with ``exc``; the error to raise."""
        self._core_fail(exc)
        return JournalFailedError.after(what, exc)

    def _sync_failed(self, exc):
        """A sync failed: the journal stops, then its baton is given back (the waiters wake to the
        failure, never to a free baton first); the error to raise."""
        error = self._failed_at("sync", exc)
        self._syncing = False
        self._notify(WAKE_SYNCERS)
        return error

    def _core_close(self):
        self._ready = False
        self._sleep(0, WAIT_IDLE)   # no write-out or sync may be using a file while files close
        for seg in self._sealed:
            seg.close()
        self._sealed = []
        self._count_sealed()
        if self._active is not None:
            self._active.close()

    def _core_live(self):
        return self._live

    def is_live(self, record_id):
        """Whether a record with this id is live (added, not deleted) as of the last append."""
        return self._live.contains(record_id)

    def _core_pending(self):
        return self._pending_tx

    def _core_active(self):
        return self._active

    @property
    def live_bytes(self):
        """Bytes of frames that live records occupy (adds and their updates)."""
        return self._live.total_bytes

    def _core_reset_replaceable(self, Py_ssize_t count):
        self.replaceable_update_count = count

    # ----- public record API ------------------------------------------------------------
    def add(self, record_id, int record_type, body, *, sync=None):
        self._check_writable()
        if self._live.contains(record_id):
            raise DuplicateRecordError(f"record {record_id} is already live; update or delete it first")
        self._append(KIND_ADD, record_type, record_id, 0, body, sync)

    def update(self, record_id, int record_type, body, *, sync=None):
        self._check_writable()
        if not self._live.contains(record_id):
            raise UnknownRecordError(f"cannot update record {record_id}: no live record has that id")
        self._append(KIND_UPDATE, record_type, record_id, 0, body, sync)

    def delete(self, record_id, *, sync=None):
        self._check_writable()
        if not self._live.contains(record_id):
            raise UnknownRecordError(f"cannot delete record {record_id}: no live record has that id")
        self._append(KIND_DELETE, 0, record_id, 0, b"", sync)

    def add_tx(self, unsigned long long tx_id, record_id, int record_type, body):
        self._check_writable()
        self._append(KIND_ADD_TX, record_type, record_id, tx_id, body, False)

    def update_tx(self, unsigned long long tx_id, record_id, int record_type, body):
        self._check_writable()
        self._check_tx_target(tx_id, record_id, "update")
        self._append(KIND_UPDATE_TX, record_type, record_id, tx_id, body, False)

    def delete_tx(self, unsigned long long tx_id, record_id):
        self._check_writable()
        self._check_tx_target(tx_id, record_id, "delete")
        self._append(KIND_DELETE_TX, 0, record_id, tx_id, b"", False)

    def prepare(self, unsigned long long tx_id, xid, *, sync=None):
        self._check_writable()
        tx = self._pending_tx.get(tx_id)
        if tx is None:
            raise UnknownTransactionError(f"cannot prepare transaction {tx_id}: it has no records")
        if tx[1] is not None:
            raise UnknownTransactionError(f"transaction {tx_id} is already prepared")
        cdef bytes xid_bytes = bytes(xid)
        cdef bytes body = (<uint32_t>len(tx[0])).to_bytes(4, "little") + xid_bytes
        self._append(KIND_PREPARE, 0, 0, tx_id, body, self._tx_sync(sync))
        tx[1] = xid_bytes

    def commit(self, unsigned long long tx_id, *, sync=None):
        self._check_writable()
        tx = self._pending_tx.get(tx_id)
        if tx is None:
            raise UnknownTransactionError(f"cannot commit transaction {tx_id}: it has no records")
        cdef unsigned char count[4]
        store_u32(count, <uint32_t>len(tx[0]))
        self._append_raw(KIND_COMMIT, 0, 0, tx_id, count, 4, self._tx_sync(sync))

    def rollback(self, unsigned long long tx_id, *, sync=None):
        self._check_writable()
        if tx_id not in self._pending_tx:
            raise UnknownTransactionError(f"cannot roll back transaction {tx_id}: it has no records")
        self._append_raw(KIND_ROLLBACK, 0, 0, tx_id, NULL, 0, self._tx_sync(sync))

    def append_group(self, records, *, sync=None):
        """Append `records`, each ``(kind, record_id, record_type, body)`` with kind ADD, UPDATE or
        DELETE (record_format.RecordKind; a DELETE's type and body are ignored), as one unit: no
        write-out, sync or crash can separate them. Every record is checked first (ids live or not as
        the records before it in the group leave them), so an error writes nothing."""
        cdef list checked = []
        cdef dict changed = {}          # record id -> live after the group's records so far
        cdef Py_ssize_t total = 0
        cdef int kind, user_type
        cdef uint64_t rid
        self._check_writable()
        for record in records:
            kind, record_id, user_type, body = record
            rid = record_id
            live = changed.get(rid)
            if live is None:
                live = self._live.contains(rid)
            if kind == KIND_ADD:
                if live:
                    raise DuplicateRecordError(f"record {rid} is already live; update or delete it first")
                changed[rid] = True
            elif kind == KIND_UPDATE:
                if not live:
                    raise UnknownRecordError(f"cannot update record {rid}: no live record has that id")
            elif kind == KIND_DELETE:
                if not live:
                    raise UnknownRecordError(f"cannot delete record {rid}: no live record has that id")
                changed[rid] = False
                user_type, body = 0, b""
            else:
                raise ValueError(f"kind={kind}: a record group holds ADD, UPDATE and DELETE records only")
            if user_type < 0 or user_type > 255:
                raise ValueError(f"record_type={user_type}: must be within 0..255")
            body = body if type(body) is bytes else bytes(body)
            total += frame_size(PyBytes_GET_SIZE(body))
            checked.append((kind, rid, user_type, body))
        if not checked:
            return
        self._begin_group(total)
        try:
            for kind, rid, user_type, body in checked:
                self._append_raw(<uint8_t>kind, <uint8_t>user_type, rid, 0,
                                 <const unsigned char *>PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body), None)
        except BaseException as exc:
            self._abort_group(exc)
            raise
        self._end_group(sync)

    def sync(self):
        """Return once everything appended before this call is durable."""
        self._check_writable()
        self._wait_for(self.appended_bytes, True)

    def flush(self):
        """Return once everything appended before this call is with the operating system:
        it survives a killed process, not a power cut."""
        self._check_writable()
        self._wait_for(self.appended_bytes, False)

    # ----- internals ------------------------------------------------------------------------
    def _tx_sync(self, sync):
        return _wants_wait(self._boundaries_wait, sync)

    def _check_tx_target(self, uint64_t tx_id, uint64_t record_id, str action):
        if self._live.contains(record_id):
            return
        tx = self._pending_tx.get(tx_id)
        if tx is not None:
            for op in tx[0]:
                if op[1] == record_id and op[0] == KIND_ADD_TX:
                    return
        raise UnknownRecordError(
            f"cannot {action} record {record_id} in transaction {tx_id}: no live record has that id")

    cdef int _check_writable(self) except -1:
        if not self._ready:
            raise JournalClosedError("the journal is closed, read-only, or not loaded; call load() after opening (read_only=True never appends)")
        if self._failure is not None:
            raise JournalFailedError(
                f"the journal stopped accepting writes after an I/O failure: {self._failure}",
                hint="reopen the journal; everything synced before the failure is recovered")
        return 0

    cdef int _append(self, uint8_t kind, int user_type, object record_id, uint64_t tx_id,
                     object body, object sync) except -1:
        cdef Py_buffer view
        cdef int rc
        cdef uint64_t rid = record_id
        if user_type < 0 or user_type > 255:
            raise ValueError(f"record_type={user_type}: must be within 0..255")
        if type(body) is bytes:
            return self._append_raw(kind, <uint8_t>user_type, rid, tx_id,
                                    <const unsigned char *>PyBytes_AS_STRING(body),
                                    PyBytes_GET_SIZE(body), sync)
        PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
        try:
            rc = self._append_raw(kind, <uint8_t>user_type, rid, tx_id,
                                  <const unsigned char *>view.buf, view.len, sync)
        finally:
            PyBuffer_Release(&view)
        return rc

    cdef int _append_raw(self, uint8_t kind, uint8_t user_type, uint64_t record_id, uint64_t tx_id,
                         const unsigned char *body, Py_ssize_t n, object sync) except -1:
        cdef Segment seg
        cdef Py_ssize_t size = frame_size(n)
        cdef object tx = None
        self._check_writable()
        if size > self._max_frame:
            raise RecordTooLargeError(
                f"a record of {n} bytes needs a {size}-byte frame; one journal file holds at most "
                f"{self._max_frame}", hint="raise file_size or split the record")
        if kind >= KIND_ADD_TX and kind <= KIND_ROLLBACK and kind != KIND_DELETE:
            tx = self._pending_tx.get(tx_id)
            if tx is None and (kind == KIND_COMMIT or kind == KIND_ROLLBACK or kind == KIND_PREPARE):
                raise UnknownTransactionError(f"transaction {tx_id} has no records")
        self._make_room(size)           # returns holding the mutex: the flusher may not pad meanwhile
        seg = self._active
        if self._grouped:
            write_flagged_frame(self._buf + (seg.position - self._buf_start), kind, GROUP_MEMBER, user_type,
                                seg.stamp, record_id, tx_id, body, n)
            self._group_count += 1
        else:
            write_frame(self._buf + (seg.position - self._buf_start), kind, user_type, seg.stamp,
                        record_id, tx_id, body, n)
        seg.position += size
        self.appended_bytes += size
        self.append_count += 1
        pthread_mutex_unlock(&self._mutex)
        # bookkeeping, still under the GIL: the frame is in place
        if kind == KIND_ADD:
            self._live.put(record_id, size)
            self.add_count += 1
        elif kind == KIND_UPDATE:
            self._live.add_bytes(record_id, size)
            if self._is_replaceable[user_type]:
                self.replaceable_update_count += 1
        elif kind == KIND_DELETE:
            self._live.remove(record_id)
        elif kind == KIND_ADD_TX or kind == KIND_UPDATE_TX or kind == KIND_DELETE_TX:
            if tx is None:
                tx = [[], None]
                self._pending_tx[tx_id] = tx
            tx[0].append((kind, record_id, size, user_type))
        elif kind == KIND_COMMIT:
            self._apply_commit(self._pending_tx.pop(tx_id))
        elif kind == KIND_ROLLBACK:
            del self._pending_tx[tx_id]
        if self._grouped:
            return 0                    # the group's end decides about write-out and waiting
        return self._after_append(sync)

    cdef int _make_room(self, Py_ssize_t size) except -1:
        """Room for `size` bytes of frames: a fresh file when this one is full, a write-out when the
        buffer is. Both may let other threads in; inside a group the room was reserved at its start.

        Returns holding the mutex (the caller appends, then unlocks): the flusher, which pads and
        writes out without the GIL, takes the mutex too, so the room found is the room appended to."""
        cdef Segment seg
        cdef bint file_full
        while True:
            seg = self._active
            pthread_mutex_lock(&self._mutex)
            file_full = seg.position + size > seg.limit
            if not file_full and seg.position + size - self._buf_start <= self._buf_capacity:
                return 0
            pthread_mutex_unlock(&self._mutex)
            if self._grouped:
                raise AssertionError("a record group outgrew the room reserved for it")
            if file_full:
                self._roll(seg, size, None)
            else:
                self._wait_for(self.appended_bytes, False)
            self._check_writable()

    cdef int _begin_group(self, Py_ssize_t total) except -1:
        """Reserve room for `total` bytes of member frames and their GROUP frame (file and buffer),
        then append the group's records with _append_raw and end with _end_group. In between nothing
        releases the GIL (no file switch, no write-out, no wait), so no writer can hand part of the
        group to the OS: a killed process recovers all of it or none. Against a power cut, which
        may keep any sector of the group's write and lose another, the GROUP frame _end_group
        writes (count, length, CRC32C of the members) lets every reader apply all or none."""
        cdef Py_ssize_t head = frame_size(GROUP_BODY_SIZE)
        cdef Segment seg
        self._check_writable()
        if self._grouped:
            raise AssertionError("record groups do not nest")
        if total + head > self._max_frame:
            raise RecordTooLargeError(
                f"a record group of {total + head} bytes of frames must fit one journal file, which holds at "
                f"most {self._max_frame}", hint="raise file_size or write fewer records together")
        self._make_room(total + head)
        self._grouped = True            # set under the mutex: the flusher leaves a group's buffer alone
        seg = self._active
        self._group_head = seg.position     # the GROUP frame's place, written once the members are in
        self._group_count = 0
        seg.position += head
        self.appended_bytes += head
        pthread_mutex_unlock(&self._mutex)
        return 0

    cdef int _end_group(self, object sync) except -1:
        """The members are in the buffer: the GROUP frame goes in front of them (or, for a group
        left empty, its room is given back), then write-out and waiting as after any append."""
        cdef Py_ssize_t head = frame_size(GROUP_BODY_SIZE)
        cdef Segment seg = self._active
        pthread_mutex_lock(&self._mutex)
        if self._group_count == 0:
            seg.position -= head
            self.appended_bytes -= head
        else:
            write_group_head(self._buf + (self._group_head - self._buf_start), seg.stamp, self._group_count,
                             seg.position - self._group_head - head)
        self._grouped = False
        pthread_mutex_unlock(&self._mutex)
        return self._after_append(sync)

    cdef int _abort_group(self, object exc) except -1:
        """A group failed after its first record went into the buffer (a bug: its records are
        checked before): the journal stops, so the part in the buffer is never written."""
        self._grouped = False
        self._core_fail(exc)
        return 0

    cdef bint _is_live(self, uint64_t record_id) except -1:
        return self._live.contains(record_id)

    def _apply_commit(self, tx):
        cdef uint64_t rid
        for kind, record_id, size, user_type in tx[0]:
            rid = record_id
            if kind == KIND_ADD_TX:
                self._live.put(rid, size)
                self.add_count += 1
            elif kind == KIND_UPDATE_TX:
                if self._live.contains(rid):
                    self._live.add_bytes(rid, size)
                    if self._is_replaceable[<uint8_t>user_type]:
                        self.replaceable_update_count += 1
            else:
                self._live.remove(rid)

    cdef int _after_append(self, object sync) except -1:
        cdef Py_ssize_t buffered = self._active.position - self._buf_start
        if _wants_wait(self._records_wait, sync):
            self._sync_requests += 1
            if self._gathering and self._sync_requests >= self._last_batch:
                pthread_mutex_lock(&self._mutex)       # see _notify: no GIL round trip
                pthread_cond_signal(&self._gathered)
                pthread_mutex_unlock(&self._mutex)
            return self._wait_for(self.appended_bytes, True)
        if self._flushes_in_background:
            if self._flusher_state == FLUSHER_IDLE:
                self._flusher_state = FLUSHER_TIMING
                self._kick(False)
            elif (self._flusher_state == FLUSHER_TIMING and
                  <Py_ssize_t>(self.appended_bytes - self.durable_bytes) > self._buffer_size):
                self._flusher_state = FLUSHER_URGENT
                self._kick(True)
        elif buffered >= self._buffer_size and not self._writing:
            self._wait_for(self.appended_bytes, False)   # mode "none": hand full buffers to the OS
        return 0

    cdef int _kick(self, bint urgent) except -1:
        """Tell the flusher thread (Journal._run_flusher, in _core_flusher_wait) that data waits. A
        flusher inside its window looks at the kick when the window ends: only an urgent kick (or
        a flusher waiting for one) is worth waking it, and a futex wake-up, for. An urgent kick
        sets the state under the mutex, where the flusher reads it and sets it idle: never lost."""
        pthread_mutex_lock(&self._mutex)        # see _notify: no GIL round trip
        self._kick_pending = True
        if urgent:
            self._flusher_state = FLUSHER_URGENT
        if urgent or not self._flusher_in_window:
            self._kick_ns = _monotonic_ns()     # when a flusher waiting for it was due to run (the trace)
            pthread_cond_signal(&self._kicked)
        pthread_mutex_unlock(&self._mutex)
        return 0

    def _core_kick(self):
        """Wake the flusher now: async callers wait (the state is urgent), or the journal closes."""
        self._kick(True)

    def _core_flusher_wait(self, double timeout_s, bint without_gil=True):
        """The group-mode flusher thread's loop, in one stretch without the GIL: wait for the window,
        then for a kick (data appended), then pad, write out and fdatasync it (_flush_without_gil),
        and again.

        The window is the least time between the starts of two of its syncs (Artemis's timed
        buffer): data appended after a quiet spell is synced at once, a steady stream once every
        timeout_s at most, and an append never waits for the flusher longer than timeout_s plus the
        sync already on the disk. Each wait costs a wake-up, and on a busy machine a wake-up waits
        for a CPU, so a sync costs at most one: appends during the window do not wake the flusher
        (_kick), the window's end finds them; a sync that outlasts the window is followed by the
        next at once, without sleeping. It returns to the caller, taking the GIL back, only when
        the flusher needs it: an urgent kick (a full buffer, or async callers waiting), a file
        switch or sealed files to sync, a record group or another sync in progress, a failure, or
        closing. A thread busy in Python lets the GIL go only every switch interval; this loop
        never waits for it. With without_gil False it returns after the wait, and the caller syncs
        (the flusher before it learned to sync without the GIL: a benchmark's base)."""
        cdef timespec deadline
        cdef int err = 0
        cdef Segment seg = self._active
        cdef uint64_t rolls = self._roll_count
        cdef uint64_t window_ns = <uint64_t>(timeout_s * 1e9) if timeout_s > 0 else 0
        cdef uint64_t opens_ns, due_ns
        if seg is None:
            return
        with nogil:
            pthread_mutex_lock(&self._mutex)
            while True:
                opens_ns = self._flusher_sync_ns + window_ns
                deadline.tv_sec = <time_t>(opens_ns // 1000000000)
                deadline.tv_nsec = <long>(opens_ns % 1000000000)
                due_ns = 0
                self._flusher_in_window = True
                while self._ready and self._flusher_state != FLUSHER_URGENT and _monotonic_ns() < opens_ns:
                    due_ns = opens_ns
                    if pthread_cond_timedwait(&self._kicked, &self._mutex, &deadline) == ETIMEDOUT:
                        break
                self._flusher_in_window = False
                while not self._kick_pending and self._ready:
                    pthread_cond_wait(&self._kicked, &self._mutex)
                    due_ns = self._kick_ns
                self._kick_pending = False
                if not self._ready or self._flusher_state == FLUSHER_URGENT:
                    break
                self._flusher_sync_ns = _monotonic_ns()   # the next window runs from this sync's start
                # the trace's wake-up: when the flusher was due (its window's end, or the kick it
                # slept for) and when it ran
                self._flusher_due_ns = due_ns if due_ns and due_ns < self._flusher_sync_ns else self._flusher_sync_ns
                if not without_gil:
                    break
                self._flusher_state = FLUSHER_IDLE    # appends from now on kick again
                pthread_mutex_unlock(&self._mutex)
                err = self._flush_without_gil(seg, rolls)
                if err != 0:
                    pthread_mutex_lock(&self._mutex)
                    break
                pthread_mutex_lock(&self._mutex)
            pthread_mutex_unlock(&self._mutex)
        if err > 0:
            exc = OSError(err, os.strerror(err), seg.path)
            self._core_fail(exc)

    cdef bint _try_take(self, bint write, bint sync) noexcept:
        """Take the write and/or the sync baton if free (both at once, or neither). Under the mutex:
        the flusher takes them without the GIL."""
        cdef bint free
        pthread_mutex_lock(&self._mutex)
        free = not (write and self._writing) and not (sync and self._syncing)
        if free:
            if write:
                self._writing = True
            if sync:
                self._syncing = True
        pthread_mutex_unlock(&self._mutex)
        return free

    cdef int _count_sealed(self) except -1:
        """Files sealed and not yet synced, where the flusher can see them without the GIL."""
        pthread_mutex_lock(&self._mutex)
        self._sealed_pending = len(self._sealed) + len(self._sealed_paths)
        pthread_mutex_unlock(&self._mutex)
        return 0

    cdef int _flush_without_gil(self, Segment seg, uint64_t rolls) noexcept nogil:
        """The flusher's sync of the active file `seg`, without the GIL: both batons taken at once,
        a pad to the sector boundary, pwrite, fdatasync, published as any sync. 0 when done (or
        nothing was appended), -1 when the GIL path must do it (the cases of _core_flusher_wait),
        else the errno of a failed write or sync. Appends go on meanwhile: they take the mutex to
        place a frame; a record group (_grouped, set under the mutex) is never written in part."""
        cdef uint64_t target
        cdef uint64_t times[4]          # due, woken, batch, sync: the trace's
        cdef Py_ssize_t start, end
        cdef int err = 0
        pthread_mutex_lock(&self._mutex)
        if (self._writing or self._syncing or self._leader_open or self._grouped or self._failed
                or not self._ready or self._sealed_pending or self._roll_count != rolls or seg.fd < 0):
            pthread_mutex_unlock(&self._mutex)
            return -1
        if self.durable_bytes >= self.appended_bytes:
            pthread_mutex_unlock(&self._mutex)
            return 0
        self._writing = True
        self._syncing = True
        self._pad_locked(seg)
        times[0] = self._flusher_due_ns
        times[1] = self._flusher_sync_ns
        times[2] = _monotonic_ns()
        target = self.appended_bytes
        if target > self._sync_inflight:
            self._sync_inflight = target
        start = seg.written
        end = seg.position
        pthread_mutex_unlock(&self._mutex)
        # [start, end) stays put: appends go after `end`, and only the write baton's holder moves the buffer
        if end > start:
            err = _pwrite_all(seg.fd, self._buf + (start - self._buf_start), end - start, start)
        pthread_mutex_lock(&self._mutex)
        if err == 0:
            if end > start:
                self.write_count += 1
            self._written_out(seg, end, target)
        self._writing = False
        pthread_cond_broadcast(&self._write_free)
        pthread_mutex_unlock(&self._mutex)
        times[3] = _monotonic_ns()
        if err == 0 and fdatasync(seg.fd) != 0:
            err = errno
        if err != 0:
            pthread_mutex_lock(&self._mutex)
            self._syncing = False
            pthread_cond_broadcast(&self._sync_done)
            pthread_mutex_unlock(&self._mutex)
            return err
        self._publish_sync(seg, end, target, self._last_batch, times)
        return 0

    def _core_trace_syncs(self, Py_ssize_t capacity):
        """Record each of the next `capacity` syncs (_core_sync_trace), as the durable lag is measured
        (bench/); 0 stops and frees the record."""
        cdef uint64_t *trace = NULL
        cdef uint64_t *old
        if capacity > 0:
            trace = <uint64_t *>PyMem_Malloc(TRACE_FIELDS * capacity * sizeof(uint64_t))
            if trace == NULL:
                raise MemoryError()
        pthread_mutex_lock(&self._mutex)
        old = self._sync_trace
        self._sync_trace = trace
        self._sync_trace_capacity = capacity
        self._sync_trace_count = 0
        pthread_mutex_unlock(&self._mutex)
        if old != NULL:
            PyMem_Free(old)

    def _core_commit_histograms(self):
        """The group commit's histograms, read together under the mutex: ``{"batch_bytes": h,
        "lag_ns": h}``, each ``{"bounds": upper bounds, "counts": a count per bound and one past the
        last, "sum": the observations' total}`` (journal_engine/metrics reads them at a scrape)."""
        cdef Histogram batch_bytes, lag_ns
        pthread_mutex_lock(&self._mutex)
        batch_bytes = self._batch_bytes
        lag_ns = self._lag_ns
        pthread_mutex_unlock(&self._mutex)
        return {"batch_bytes": _histogram_snapshot(&batch_bytes), "lag_ns": _histogram_snapshot(&lag_ns)}

    def _core_sync_trace(self):
        """The syncs recorded since _core_trace_syncs, in order: (durable_bytes, due_ns, woken_ns,
        batch_ns, sync_ns, end_ns) on CLOCK_MONOTONIC: when its syncer was due to run (the flusher:
        its window's end or the kick it slept for), when it ran, padded the batch (closed it), began
        the fdatasync, published the sync. A leader's sync is due and runs at its batch."""
        cdef Py_ssize_t i, count
        cdef uint64_t *entry
        pthread_mutex_lock(&self._mutex)
        count = self._sync_trace_count      # entries below it are written once and never change
        pthread_mutex_unlock(&self._mutex)
        result = []
        for i in range(count):
            entry = self._sync_trace + TRACE_FIELDS * i
            result.append((entry[0], entry[1], entry[2], entry[3], entry[4], entry[5]))
        return result

    cdef int _notify(self, int which) except -1:
        """Wake the sleepers of a baton just released or a counter just advanced.

        The GIL is kept: the mutex is only ever held for a few instructions by threads that do
        not want the GIL, so taking it cannot deadlock, and dropping the GIL here would let
        another thread take it and keep this one (often the group-commit leader) waiting. With
        nobody asleep there is nothing to signal: a sleeper registers under the GIL before it
        looks at the state under the mutex, so it cannot miss a change made after that.
        """
        cdef bint writers = (which & WAKE_WRITERS) and self._write_sleepers > 0
        cdef bint syncers = (which & WAKE_SYNCERS) and self._sync_sleepers > 0
        if not (writers or syncers):
            return 0
        pthread_mutex_lock(&self._mutex)
        if writers:
            pthread_cond_broadcast(&self._write_free)
        if syncers:
            pthread_cond_broadcast(&self._sync_done)
        pthread_mutex_unlock(&self._mutex)
        return 0

    cdef int _sleep(self, uint64_t target, int what) except -1:
        """Sleep without the GIL until `what` no longer holds (or the journal failed)."""
        cdef bint on_write_free = what == WAIT_WRITE_BATON or what == WAIT_WRITTEN
        if on_write_free:
            self._write_sleepers += 1
        else:
            self._sync_sleepers += 1
        try:
            self._sleep_nogil(target, what)
        finally:
            if on_write_free:
                self._write_sleepers -= 1
            else:
                self._sync_sleepers -= 1
        return 0

    cdef int _sleep_nogil(self, uint64_t target, int what) except -1:
        with nogil:
            pthread_mutex_lock(&self._mutex)
            while not self._failed:
                if what == WAIT_WRITE_BATON:
                    if not self._writing:
                        break
                elif what == WAIT_SYNC_BATON:
                    if not self._syncing:
                        break
                elif what == WAIT_WRITTEN:
                    if not self._writing or self.written_bytes >= target:
                        break
                elif what == WAIT_DURABLE:
                    if self.durable_bytes >= target or not (self._leader_open or self._sync_inflight >= target):
                        break
                else:
                    if not (self._writing or self._syncing or self._leader_open
                            or self._sync_inflight > self.durable_bytes):
                        break
                if what == WAIT_WRITE_BATON or what == WAIT_WRITTEN:
                    pthread_cond_wait(&self._write_free, &self._mutex)
                elif what == WAIT_IDLE:
                    # closing is rare: poll, so neither hand-over has to wake it
                    pthread_mutex_unlock(&self._mutex)
                    usleep(1000)
                    pthread_mutex_lock(&self._mutex)
                else:
                    pthread_cond_wait(&self._sync_done, &self._mutex)
            pthread_mutex_unlock(&self._mutex)
        return 0

    def _roll(self, Segment seen, Py_ssize_t needed, factory):
        """Seal `seen` (written out in full) and continue in the next file."""
        while not self._try_take(True, False):
            self._sleep(0, WAIT_WRITE_BATON)
            self._check_writable()
        try:
            if self._active is not seen:
                return
            seen.limit = seen.position     # appenders that still see it find it full and wait here
            self._write_active()
            if seen.written + FRAME_HEADER_SIZE <= seen.size:
                # a zero header ends the data for every reader: past it, a recycled file keeps its
                # earlier life, whose bytes could read as a damaged frame of this file
                seen.write_at(_ZERO_HEADER, FRAME_HEADER_SIZE, seen.written, FRAME_HEADER_SIZE)
            # durable before the next file takes a byte: a power cut could otherwise keep the next
            # file's writes and lose this one's tail, which ends in zeros like a file sealed early
            seen.datasync()
            seen.synced = seen.written
            new_segment = factory() if factory is not None else self._segment_source(needed)
            if seen.position > seen.written:   # appended while the new file was being fetched: impossible
                raise AssertionError("frames appended to a sealed file")
            self._active = new_segment
            self._buf_start = new_segment.position
            self._roll_count += 1
            self._sealed.append(seen)          # a sync closes it once it is durable
            if (len(self._sealed) > UNSYNCED_OPEN_FILES_MAX and not self._syncing
                    and self._sync_inflight <= self.durable_bytes):
                oldest = self._sealed.pop(0)   # no sync holds it: close, remember the path for the next sync
                self._sealed_paths.append(oldest.path)
                oldest.close()
            self._count_sealed()
        except StoreFullError:
            seen.limit = seen.size          # no next file: the journal stays usable, the append fails
            raise
        except BaseException as exc:
            self._core_fail(exc)            # a failed write-out: stop rather than retry
            if isinstance(exc, OSError) and not isinstance(exc, JournalIOError):
                raise JournalFailedError.after("write", exc) from exc
            raise
        finally:
            self._writing = False
            self._notify(WAKE_WRITERS)

    cdef int _pad_to_sector(self) except -1:
        """The caller holds the write baton (and the GIL: no append runs meanwhile)."""
        self._pad_locked(self._active)
        return 0

    cdef void _pad_locked(self, Segment seg) noexcept nogil:
        """Pad the active file `seg` to a sector boundary; no append or other write-out may run meanwhile."""
        cdef Py_ssize_t gap = (SECTOR - seg.position % SECTOR) % SECTOR
        if gap == 0:
            return
        if gap < FRAME_HEADER_SIZE:
            gap += SECTOR
        if seg.position + gap > seg.limit:
            # too little room for a pad frame: the rest of the file stays unused
            self.appended_bytes += seg.limit - seg.position
            seg.position = seg.limit
            return
        write_pad(self._buf + (seg.position - self._buf_start), seg.stamp, gap)
        seg.position += gap
        self.appended_bytes += gap

    cdef int _wait_for(self, uint64_t target, bint durable) except -1:
        """Return once everything up to `target` is written out (and synced, if durable).

        Writing out and syncing are separate batons, so one thread's write-out (a flush, a
        file switch, the next leader's batch) proceeds while another thread's fdatasync runs.
        """
        while (self.durable_bytes if durable else self.written_bytes) < target:
            self._check_writable()
            if durable and (self._leader_open or self._sync_inflight >= target):
                self._sleep(target, WAIT_DURABLE)          # a leader's batch holds this target
                continue
            if durable:
                self._lead_sync()
                continue
            if not self._try_take(True, False):
                self._sleep(target, WAIT_WRITTEN)
                continue
            try:
                self._write_active(FLUSH_KEEPS_GIL_UP_TO)
            except BaseException as exc:
                raise self._failed_at("write", exc) from exc
            finally:
                self._writing = False
                self._notify(WAKE_WRITERS)
        return 0

    cdef int _lead_sync(self) except -1:
        """Gather a batch, pad it to a sector, write it out, then fdatasync it (group commit).

        Called with no baton held and no other leader open.
        """
        cdef Segment seg, old
        cdef uint64_t target
        cdef Py_ssize_t batch
        cdef list synced
        cdef bint took_write = False
        cdef uint64_t times[4]          # due, woken, batch, sync: the trace's (a leader is due at its batch)
        self._leader_open = True    # durable waiters now wait for this batch; flushes still write out
        try:
            self._gather()          # without the write baton: a flush during the gather is not held up
            while self._syncing:    # the batch keeps growing while the previous sync is on the disk
                self._sleep(0, WAIT_SYNC_BATON)
                self._check_writable()
            self._check_writable()
            while not self._try_take(True, False):
                self._sleep(0, WAIT_WRITE_BATON)
                self._check_writable()
            took_write = True
            self._pad_to_sector()
            times[0] = times[1] = times[2] = _monotonic_ns()
            batch = self._sync_requests
            self._sync_requests = 0
            target = self.appended_bytes
            if target > self._sync_inflight:
                self._sync_inflight = target
            self._leader_open = False
            seg = self._active
            self._write_active(LEADER_KEEPS_GIL_UP_TO)
        except BaseException as exc:
            raise self._failed_at("write", exc) from exc
        finally:
            self._leader_open = False
            if took_write:
                self._writing = False       # durability waiters stay asleep: this batch covers them
                self._notify(WAKE_WRITERS)
            else:
                self._notify(WAKE_ALL)      # the gather ended without a batch: they must look again
        while True:
            if self.durable_bytes >= target:
                return 0                    # a later leader's (or the flusher's) sync already covered this batch
            if self._try_take(False, True):
                break
            self._sleep(0, WAIT_SYNC_BATON)
            self._check_writable()
        if not self._sealed and not self._sealed_paths and seg.fd >= 0:
            return self._sync_one_file(seg, target, batch, times)
        times[3] = _monotonic_ns()
        try:
            synced = list(self._sealed)
            paths = self._sealed_paths
            self._sealed_paths = []
            for path in paths:
                _fdatasync_path(path)
            for old in synced:
                if old is not seg and old.synced < old.written:    # a file switch syncs it: left only to close
                    old.datasync()
            # `seg` may have been sealed after this batch was written and then closed by an
            # earlier leader's sync: a sync closes only files it made durable in full
            if seg.fd >= 0:
                seg.datasync()
            for old in synced:
                old.synced = old.written
                old.close()
            self._sealed = [old for old in self._sealed if old not in synced]
            self._count_sealed()
        except BaseException as exc:
            raise self._sync_failed(exc) from exc
        self._publish_sync(seg, seg.written, target, batch, times)
        return 0

    cdef int _sync_one_file(self, Segment seg, uint64_t target, Py_ssize_t batch,
                            uint64_t *times) except -1:
        """The common sync (one file, none sealed), the caller holding the sync baton: fdatasync,
        then publish what became durable and release the baton, all without the GIL, so waiters
        go on even while other threads keep the GIL busy; only the caller itself waits for it."""
        cdef int fd = seg.fd
        cdef Py_ssize_t written = seg.written      # what the fdatasync is sure to cover
        cdef int rc, err = 0
        with nogil:
            times[3] = _monotonic_ns()
            rc = fdatasync(fd)
            if rc != 0:
                err = errno
            else:
                self._publish_sync(seg, written, target, batch, times)
        if rc != 0:
            exc = OSError(err, os.strerror(err), seg.path)
            raise self._sync_failed(exc) from exc
        return 0

    cdef void _publish_sync(self, Segment seg, Py_ssize_t written, uint64_t target,
                            Py_ssize_t batch, const uint64_t *times) noexcept nogil:
        """A sync's end: `target` durable (and `seg` up to `written`), the sync baton released, its
        waiters woken. Under the mutex, with or without the GIL: waiters look at these under it.
        `times` (CLOCK_MONOTONIC ns: when its syncer was due to run, ran, padded the batch, began
        the fdatasync) go to the trace."""
        cdef uint64_t *entry
        cdef uint64_t end_ns = _monotonic_ns()
        pthread_mutex_lock(&self._mutex)
        self.sync_count += 1
        self._last_batch = batch
        if self._sync_trace != NULL and self._sync_trace_count < self._sync_trace_capacity:
            entry = self._sync_trace + TRACE_FIELDS * self._sync_trace_count
            entry[0] = target
            memcpy(entry + 1, times, 4 * sizeof(uint64_t))
            entry[5] = end_ns
            self._sync_trace_count += 1
        if seg.synced < written:
            seg.synced = written
        if target > self.durable_bytes:
            # a sync that made bytes durable: one observation each (a sync a later one already
            # covered made none), so the batches' sum is durable_bytes
            _histogram_observe(&self._batch_bytes, target - self.durable_bytes)
            _histogram_observe(&self._lag_ns, end_ns - times[0] if end_ns > times[0] else 0)
            self.durable_bytes = target
        self._syncing = False
        pthread_cond_broadcast(&self._sync_done)
        pthread_mutex_unlock(&self._mutex)

    cdef int _gather(self) except -1:
        """Group commit: when the last sync served several waiters, give as many a chance to
        append before this one starts, for at most gather_us (the baton is held meanwhile)."""
        cdef timespec deadline
        cdef int rc = 0
        if self._last_batch <= 1 or self._gather_us <= 0 or self._sync_requests >= self._last_batch:
            return 0
        _deadline_in(&deadline, <long long>self._gather_us * 1000)
        self._gathering = True
        with nogil:
            pthread_mutex_lock(&self._mutex)
            while self._sync_requests < self._last_batch and rc != ETIMEDOUT:
                rc = pthread_cond_timedwait(&self._gathered, &self._mutex, &deadline)
            pthread_mutex_unlock(&self._mutex)
        self._gathering = False
        return 0

    cdef int _write_active(self, Py_ssize_t keep_gil_up_to=0) except -1:
        """Hand the active file's buffered frames to the OS; the caller holds the write baton."""
        cdef Segment seg = self._active
        cdef uint64_t target = self.appended_bytes
        cdef Py_ssize_t start = seg.written, end = seg.position
        if end > start:
            seg.write_at(self._buf + (start - self._buf_start), end - start, start, keep_gil_up_to)
            self.write_count += 1
            if not self._syncs:
                # nothing syncs as it goes: start the write-back now, so that the sync of a file
                # switch (which makes the full file durable) finds most of it on the disk already
                with nogil:
                    sync_file_range(seg.fd, start, end - start, SYNC_FILE_RANGE_WRITE)
        self._written_out(seg, end, target)
        return 0

    cdef void _written_out(self, Segment seg, Py_ssize_t end, uint64_t target) noexcept nogil:
        """`seg` is with the OS up to `end` (and the journal up to `target` bytes): keep what was
        appended during the write at the front of the buffer. The caller holds the write baton."""
        cdef Py_ssize_t rest = seg.position - end
        seg.written = end
        if rest:
            memmove(self._buf, self._buf + (end - self._buf_start), rest)
        self._buf_start = end
        if target > self.written_bytes:
            self.written_bytes = target


def _fdatasync_path(path):
    """fdatasync a sealed file closed before a sync reached it (the core syncs its own files)."""
    cdef bytes encoded = os.fsencode(path)
    cdef const char *c_path = encoded
    cdef int fd, rc, err = 0
    with nogil:
        fd = c_open(c_path, O_RDWR)
        if fd < 0:
            err = errno
        else:
            rc = fdatasync(fd)
            if rc != 0:
                err = errno
            c_close(fd)
    if err:
        raise OSError(err, os.strerror(err), path)
