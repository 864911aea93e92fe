# cython: language_level=3
"""Compiled append path: mapped segments, record appends and group commit.

Appends run entirely with the GIL held and never release it, so the GIL is
the append lock: reserving space, encoding the frame into the mapping and the
bookkeeping happen atomically with respect to other Python threads. Only the
sync (msync of the dirty range) releases the GIL. The Python twin is
journal_engine.storage.core.
"""
import threading

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.errno cimport errno
from posix.mman cimport mmap, munmap, msync, MAP_SHARED, PROT_READ, PROT_WRITE, MS_SYNC, MAP_FAILED
from posix.fcntl cimport open as c_open, O_RDWR
from posix.unistd cimport close as c_close

from journal_engine._codec cimport (
    FRAME_HEADER_SIZE, write_frame, write_pad, frame_size, store_u32,
    KIND_ADD, KIND_UPDATE, KIND_DELETE, KIND_ADD_TX, KIND_UPDATE_TX, KIND_DELETE_TX,
    KIND_PREPARE, KIND_COMMIT, KIND_ROLLBACK,
)

from journal_engine.errors import (
    JournalClosedError, JournalFailedError, UnknownRecordError, DuplicateRecordError,
    UnknownTransactionError, RecordTooLargeError,
)
from journal_engine.limits import SECTOR_SIZE_BYTES, UNSYNCED_OPEN_FILES_MAX
import os

DEF SECTOR = 4096
assert SECTOR == SECTOR_SIZE_BYTES

cdef enum SyncMode:
    MODE_NONE = 0
    MODE_GROUP = 1
    MODE_ALWAYS = 2

# the background flusher of group mode: idle (nothing unsynced), timing (syncs within
# buffer_timeout_us), urgent (more than buffer_size unsynced: sync now)
cdef enum FlusherState:
    FLUSHER_IDLE = 0
    FLUSHER_TIMING = 1
    FLUSHER_URGENT = 2

SYNC_MODES = {"none": MODE_NONE, "group": MODE_GROUP, "always": MODE_ALWAYS}


cdef class Segment:
    """One journal file, mapped shared and writable, appended at `position`."""

    def __cinit__(self, path, uint64_t file_id, uint64_t sequence, Py_ssize_t size, Py_ssize_t position):
        cdef bytes encoded = os.fsencode(path)
        self.path = path
        self.file_id = file_id
        self.sequence = sequence
        self.stamp = <uint32_t>(file_id & 0xFFFFFFFFu)
        self.size = size
        self.position = position
        self.synced = position
        self.base = NULL
        self.fd = c_open(encoded, O_RDWR)
        if self.fd < 0:
            raise OSError(errno, os.strerror(errno), path)
        cdef void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, self.fd, 0)
        if m == MAP_FAILED:
            err = errno
            c_close(self.fd)
            self.fd = -1
            raise OSError(err, os.strerror(err), path)
        self.base = <unsigned char *>m

    cdef int sync_range(self, Py_ssize_t start, Py_ssize_t end) except -1:
        """msync [start, end) with the GIL released; start is rounded down to a page."""
        cdef Py_ssize_t aligned = start - (start % SECTOR)
        cdef int rc
        if end <= start or self.base == NULL:
            return 0
        with nogil:
            rc = msync(self.base + aligned, end - aligned, MS_SYNC)
        if rc != 0:
            raise OSError(errno, os.strerror(errno), self.path)
        return 0

    @property
    def is_open(self):
        return self.base != NULL

    def view(self):
        """A read-only memoryview of the whole mapping (valid until close)."""
        if self.base == NULL:
            raise ValueError("segment closed")
        return memoryview(<unsigned char[:self.size]>self.base).toreadonly()

    def sync(self, Py_ssize_t start, Py_ssize_t end):
        self.sync_range(start, end)

    def close(self):
        if self.base != NULL:
            munmap(self.base, self.size)
            self.base = NULL
        if self.fd >= 0:
            c_close(self.fd)
            self.fd = -1

    def __dealloc__(self):
        if self.base != NULL:
            munmap(self.base, self.size)
        if self.fd >= 0:
            c_close(self.fd)


cdef inline bint _wants_wait(int mode, object sync):
    if sync is None:
        return mode == MODE_ALWAYS
    return bool(sync)


cdef class JournalCore:
    """Appends frames to the active segment and makes them durable in groups."""

    def __cinit__(self, *args, **kwargs):
        self._sealed = []
        self._sealed_paths = []
        self._cond = threading.Condition(threading.Lock())
        self._roll_lock = threading.Lock()
        self._live = {}
        self._pending_tx = {}
        self._replaceable = frozenset()
        self._ready = False
        self._flusher_state = FLUSHER_IDLE
        self._mode = MODE_GROUP
        self._buffer_size = 490 * 1024

    # ----- set-up by the Python layer -------------------------------------------------
    def _core_configure(self, str mode, Py_ssize_t buffer_size, Py_ssize_t max_frame, replaceable):
        self._mode = SYNC_MODES[mode]
        self._buffer_size = buffer_size
        self._max_frame = max_frame
        self._replaceable = frozenset(replaceable)

    def _core_install(self, Segment active, dict live, dict pending_tx, Py_ssize_t live_bytes,
                      Py_ssize_t add_count, Py_ssize_t replaceable_updates):
        self._active = active
        self._live = live
        self._pending_tx = pending_tx
        self.live_bytes = live_bytes
        self.add_count = add_count
        self.replaceable_update_count = replaceable_updates
        self._ready = True

    def _core_switch(self, Segment new_active):
        """Seal the active segment and append to `new_active` from now on."""
        cdef Segment old = self._active
        self._active = new_active
        if old is not None:
            if old.synced >= old.position and not self._sync_running:
                old.close()
            else:
                self._sealed.append(old)
                if len(self._sealed) > UNSYNCED_OPEN_FILES_MAX and not self._sync_running:
                    oldest = self._sealed.pop(0)
                    self._sealed_paths.append(oldest.path)
                    oldest.close()

    def _core_force_roll(self, factory):
        """Switch to factory()'s segment now, under the roll lock; returns it."""
        with self._roll_lock:
            self._core_switch(factory())
            return self._active

    def _core_seal_tail(self):
        """After recovery: pad to a sector boundary and sync, so appends never touch recovered sectors."""
        self._check_writable()
        self._pad_to_sector()
        self._wait_durable(self.appended_bytes)

    def _core_fail(self, exc):
        if self._failure is None:
            self._failure = exc

    def _core_close(self):
        self._ready = False
        with self._cond:
            while self._sync_running:
                self._cond.wait()
        for seg in self._sealed:
            seg.close()
        self._sealed = []
        if self._active is not None:
            self._active.close()

    def _core_live(self):
        return self._live

    def _core_pending(self):
        return self._pending_tx

    def _core_active(self):
        return self._active

    def _core_adjust_live_bytes(self, Py_ssize_t delta):
        self.live_bytes += delta

    def _core_reset_replaceable(self, Py_ssize_t count):
        self.replaceable_update_count = count

    # ----- public record API ------------------------------------------------------------
    def add(self, unsigned long long record_id, int record_type, body, *, sync=None):
        if record_id in self._live:
            raise DuplicateRecordError(f"record {record_id} is already live; update or delete it first")
        self._append(KIND_ADD, record_type, record_id, 0, body, sync)

    def update(self, unsigned long long record_id, int record_type, body, *, sync=None):
        if record_id not in self._live:
            raise UnknownRecordError(f"cannot update record {record_id}: no live record has that id")
        self._append(KIND_UPDATE, record_type, record_id, 0, body, sync)

    def delete(self, unsigned long long record_id, *, sync=None):
        if record_id not in self._live:
            raise UnknownRecordError(f"cannot delete record {record_id}: no live record has that id")
        self._append_raw(KIND_DELETE, 0, record_id, 0, NULL, 0, sync)

    def add_tx(self, unsigned long long tx_id, unsigned long long record_id, int record_type, body):
        self._append(KIND_ADD_TX, record_type, record_id, tx_id, body, False)

    def update_tx(self, unsigned long long tx_id, unsigned long long record_id, int record_type, body):
        self._check_tx_target(tx_id, record_id, "update")
        self._append(KIND_UPDATE_TX, record_type, record_id, tx_id, body, False)

    def delete_tx(self, unsigned long long tx_id, unsigned long long record_id):
        self._check_tx_target(tx_id, record_id, "delete")
        self._append_raw(KIND_DELETE_TX, 0, record_id, tx_id, NULL, 0, False)

    def prepare(self, unsigned long long tx_id, xid, *, sync=None):
        tx = self._pending_tx.get(tx_id)
        if tx is None:
            raise UnknownTransactionError(f"cannot prepare transaction {tx_id}: it has no records")
        if tx[1] is not None:
            raise UnknownTransactionError(f"transaction {tx_id} is already prepared")
        cdef bytes xid_bytes = bytes(xid)
        cdef bytearray body = bytearray(4 + len(xid_bytes))
        store_u32(<unsigned char *>body, <uint32_t>len(tx[0]))
        body[4:] = xid_bytes
        self._append(KIND_PREPARE, 0, 0, tx_id, bytes(body), True if sync is None and self._mode != MODE_NONE else sync)
        tx[1] = xid_bytes

    def commit(self, unsigned long long tx_id, *, sync=None):
        tx = self._pending_tx.get(tx_id)
        if tx is None:
            raise UnknownTransactionError(f"cannot commit transaction {tx_id}: it has no records")
        cdef unsigned char count[4]
        store_u32(count, <uint32_t>len(tx[0]))
        self._append_raw(KIND_COMMIT, 0, 0, tx_id, count, 4,
                         True if sync is None and self._mode != MODE_NONE else sync)

    def rollback(self, unsigned long long tx_id, *, sync=None):
        if tx_id not in self._pending_tx:
            raise UnknownTransactionError(f"cannot roll back transaction {tx_id}: it has no records")
        self._append_raw(KIND_ROLLBACK, 0, 0, tx_id, NULL, 0,
                         True if sync is None and self._mode != MODE_NONE else sync)

    def sync(self):
        """Return once everything appended before this call is durable."""
        self._check_writable()
        self._wait_durable(self.appended_bytes)

    # ----- internals ------------------------------------------------------------------------
    def _check_tx_target(self, uint64_t tx_id, uint64_t record_id, str action):
        if record_id in self._live:
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
            raise JournalClosedError("the journal is closed or not loaded; call load() after opening")
        if self._failure is not None:
            raise JournalFailedError(
                f"the journal stopped accepting writes after an I/O failure: {self._failure}",
                hint="reopen the journal; everything synced before the failure is recovered")
        return 0

    cdef int _append(self, uint8_t kind, int user_type, uint64_t record_id, uint64_t tx_id,
                     object body, object sync) except -1:
        cdef Py_buffer view
        cdef int rc
        if user_type < 0 or user_type > 255:
            raise ValueError(f"record_type={user_type}: must be within 0..255")
        if type(body) is bytes:
            return self._append_raw(kind, <uint8_t>user_type, record_id, tx_id,
                                    <const unsigned char *>PyBytes_AS_STRING(body),
                                    PyBytes_GET_SIZE(body), sync)
        PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
        try:
            rc = self._append_raw(kind, <uint8_t>user_type, record_id, tx_id,
                                  <const unsigned char *>view.buf, view.len, sync)
        finally:
            PyBuffer_Release(&view)
        return rc

    cdef int _append_raw(self, uint8_t kind, uint8_t user_type, uint64_t record_id, uint64_t tx_id,
                         const unsigned char *body, Py_ssize_t n, object sync) except -1:
        cdef Segment seg
        cdef Py_ssize_t size = frame_size(n)
        cdef object tx
        self._check_writable()
        if size > self._max_frame:
            raise RecordTooLargeError(
                f"a record of {n} bytes needs a {size}-byte frame; one journal file holds at most "
                f"{self._max_frame}", hint="raise file_size or split the record")
        if kind >= KIND_ADD_TX and kind <= KIND_ROLLBACK:
            tx = self._pending_tx.get(tx_id)
            if tx is None:
                if kind == KIND_COMMIT or kind == KIND_ROLLBACK or kind == KIND_PREPARE:
                    raise UnknownTransactionError(f"transaction {tx_id} has no records")
        seg = self._active
        while seg.position + size > seg.size:
            self._roll(seg, size)
            self._check_writable()
            seg = self._active
        write_frame(seg.base + seg.position, kind, user_type, seg.stamp, record_id, tx_id, body, n)
        seg.position += size
        self.appended_bytes += size
        # bookkeeping, still under the GIL: the frame is in place
        if kind == KIND_ADD:
            self._live[record_id] = size
            self.live_bytes += size
            self.add_count += 1
        elif kind == KIND_UPDATE:
            self._live[record_id] = self._live[record_id] + size
            self.live_bytes += size
            if user_type in self._replaceable:
                self.replaceable_update_count += 1
        elif kind == KIND_DELETE:
            self.live_bytes -= self._live.pop(record_id)
        elif kind == KIND_ADD_TX or kind == KIND_UPDATE_TX or kind == KIND_DELETE_TX:
            if tx is None:
                tx = [[], None]
                self._pending_tx[tx_id] = tx
            tx[0].append((kind, record_id, size, user_type))
        elif kind == KIND_COMMIT:
            self._apply_commit(self._pending_tx.pop(tx_id))
        elif kind == KIND_ROLLBACK:
            del self._pending_tx[tx_id]
        return self._after_append(sync)

    def _apply_commit(self, tx):
        for kind, record_id, size, user_type in tx[0]:
            if kind == KIND_ADD_TX:
                self._live[record_id] = self._live.get(record_id, 0) + size
                self.live_bytes += size
                self.add_count += 1
            elif kind == KIND_UPDATE_TX:
                if record_id in self._live:
                    self._live[record_id] += size
                    self.live_bytes += size
                    if user_type in self._replaceable:
                        self.replaceable_update_count += 1
            else:
                if record_id in self._live:
                    self.live_bytes -= self._live.pop(record_id)

    cdef int _after_append(self, object sync) except -1:
        if _wants_wait(self._mode, sync):
            return self._wait_durable(self.appended_bytes)
        if self._mode == MODE_GROUP:
            if self._flusher_state == FLUSHER_IDLE:
                self._flusher_state = FLUSHER_TIMING
                self._kick_flusher()
            elif (self._flusher_state == FLUSHER_TIMING and
                  <Py_ssize_t>(self.appended_bytes - self.durable_bytes) > self._buffer_size):
                self._flusher_state = FLUSHER_URGENT
                self._kick_flusher()
        return 0

    def _roll(self, Segment seen, Py_ssize_t needed):
        with self._roll_lock:
            if self._active is not seen:
                return
            self._core_switch(self._next_segment(needed))

    cdef int _pad_to_sector(self) except -1:
        cdef Segment seg = self._active
        cdef Py_ssize_t gap = (SECTOR - seg.position % SECTOR) % SECTOR
        if gap == 0:
            return 0
        if gap < FRAME_HEADER_SIZE:
            gap += SECTOR
        if seg.position + gap > seg.size:
            # too little room for a pad frame: the rest of the file stays unused
            self.appended_bytes += seg.size - seg.position
            seg.position = seg.size
            return 0
        write_pad(seg.base + seg.position, seg.stamp, gap)
        seg.position += gap
        self.appended_bytes += gap
        return 0

    cdef int _wait_durable(self, uint64_t target) except -1:
        while self.durable_bytes < target:
            self._check_writable()
            if self._sync_running:
                with self._cond:
                    while self._sync_running and self.durable_bytes < target:
                        self._cond.wait()
                continue
            self._sync_running = True
            try:
                self._run_sync()
            except BaseException as exc:
                self._core_fail(exc)
                raise JournalFailedError(f"sync failed: {exc}",
                                         hint="the journal accepts no more writes; reopen it") from exc
            finally:
                with self._cond:
                    self._sync_running = False
                    self._cond.notify_all()
        return 0

    cdef int _run_sync(self) except -1:
        """Make everything appended so far durable; the caller holds the sync baton."""
        cdef Segment seg
        cdef uint64_t target
        cdef list regions = []
        cdef Py_ssize_t start, end
        self._pad_to_sector()
        target = self.appended_bytes
        for seg in self._sealed:
            if seg.synced < seg.position:
                regions.append((seg, seg.synced, seg.position))
        seg = self._active
        if seg.synced < seg.position:
            regions.append((seg, seg.synced, seg.position))
        paths = self._sealed_paths
        self._sealed_paths = []
        for path in paths:
            _fdatasync_path(path)
        for seg, start, end in regions:
            seg.sync_range(start, end)
            if end > seg.synced:
                seg.synced = end
        self.sync_count += 1
        still = []
        for seg in self._sealed:
            if seg.synced >= seg.position:
                seg.close()
            else:
                still.append(seg)
        self._sealed = still
        if target > self.durable_bytes:
            self.durable_bytes = target
        return 0


def _fdatasync_path(path):
    from journal_engine.storage import durability
    durability.fdatasync_path(path)
