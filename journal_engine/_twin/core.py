"""Python twin of the compiled append path (pyx/journal_engine/_core.pyx).

Same frames, same bookkeeping, same write-out and group commit; an explicit
lock stands in for the GIL that serialises the compiled appends.
"""
from __future__ import annotations

import os
import threading
import time
from bisect import bisect_left

from ..errors import (DuplicateRecordError, JournalClosedError, JournalFailedError, JournalIOError, RecordTooLargeError,
                      StoreFullError, UnknownRecordError, UnknownTransactionError)
from ..limits import (BUFFER_SIZE_DEFAULT_BYTES, BUFFER_TIMEOUT_DEFAULT_US, COMMIT_BATCH_BUCKETS_BYTES,
                      COMMIT_LAG_BUCKETS_NS, FRAME_HEADER_SIZE_BYTES, SECTOR_SIZE_BYTES, UNSYNCED_OPEN_FILES_MAX,
                      check_id)
from .codec import encode_frame, encode_group_head, frame_size, pad_frame
from ..storage.group_commit import BatchGathering
from ..storage.sync_mode import SyncMode
from ..record_format import GROUP_BODY, GROUP_MEMBER, RecordKind
from .livemap import LiveMap

FLUSHER_IDLE, FLUSHER_TIMING, FLUSHER_URGENT = 0, 1, 2
_TX_KINDS = (RecordKind.ADD_TX, RecordKind.UPDATE_TX, RecordKind.DELETE_TX)


class Segment:
    """One journal file open for appending at `position`."""

    def __init__(self, path, file_id: int, sequence: int, size: int, position: int) -> None:
        self.path = path
        self.file_id = file_id
        self.sequence = sequence
        self.stamp = file_id & 0xFFFFFFFF
        self.size = size
        self.limit = size
        self.position = position
        self.written = position
        self.synced = position
        try:
            self._fd = os.open(path, os.O_RDWR)
        except OSError as exc:
            raise JournalIOError(f"cannot open journal file {path}: {exc.strerror}", errno=exc.errno, path=path,
                                 hint="check the device and the permissions") from exc

    @property
    def is_open(self) -> bool:
        return self._fd >= 0

    def write_at(self, data, offset: int) -> None:
        view = memoryview(data)
        while view:
            done = os.pwrite(self._fd, view, offset)
            view = view[done:]
            offset += done

    def datasync(self) -> None:
        os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class Histogram:
    """The compiled core's Histogram (_core.pxd): upper bounds, a count per bound and one past the
    last, the observations' sum; a value counts in the first bucket whose bound it does not exceed."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[int, ...]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0

    def observe(self, value: int) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def snapshot(self) -> dict:
        return {"bounds": self.bounds, "counts": tuple(self.counts), "sum": self.total}


class JournalCore:
    """Appends frames to the active file and makes them durable in groups."""

    def __init__(self) -> None:
        self._active: Segment | None = None
        self._sync_mode = SyncMode.named("group")     # until _core_configure
        self.appended_bytes = 0
        self.written_bytes = 0
        self.durable_bytes = 0
        self._buf = bytearray()
        self._buf_start = 0
        self._sealed: list[Segment] = []
        self._lock = threading.RLock()      # what the GIL is to the compiled appends
        self._cond = threading.Condition(threading.Lock())
        self._writing = False        # the write baton: one thread pads and writes out at a time
        self._syncing = False        # the sync baton: one thread fdatasyncs at a time
        self._leader_open = False    # a sync leader holds the write baton and has not padded yet
        self._sync_inflight = 0      # the highest target a leader padded for and has not made durable
        self._sealed_paths: list[str] = []
        self._failure = None
        self._ready = False
        self._live = LiveMap()
        self._pending_tx: dict[int, list] = {}
        self._replaceable = frozenset()
        self.add_count = 0
        self.replaceable_update_count = 0
        self.sync_count = 0
        self.append_count = 0        # frames of records appended (not GROUP heads, not pads)
        self._batch_bytes = Histogram(COMMIT_BATCH_BUCKETS_BYTES)   # bytes each sync made durable
        self._lag_ns = Histogram(COMMIT_LAG_BUCKETS_NS)             # each sync's lag: its batch to durable
        self.write_count = 0
        self._buffer_size = BUFFER_SIZE_DEFAULT_BYTES
        self._max_frame = 0
        self._flusher_state = FLUSHER_IDLE
        self._kicked = threading.Condition(threading.Lock())
        self._kick_pending = False
        self._gathering = BatchGathering(self._lock, BUFFER_TIMEOUT_DEFAULT_US)
        self._grouped = None         # the thread appending a record group, holding the append lock
        self._group_head = 0         # where the open group's GROUP frame lies in the active file
        self._group_count = 0        # member frames appended to the open group so far
        self._flusher_sync_s = 0.0   # time.monotonic() at the flusher's last sync start: its window's start
        self._sync_trace: list | None = None     # _core_sync_trace's tuples, when traced
        self._sync_trace_capacity = 0

    # ----- set-up by the Python layer -------------------------------------------------
    def _core_configure(self, mode: SyncMode, buffer_size: int, max_frame: int, replaceable,
                        gather_us: int = BUFFER_TIMEOUT_DEFAULT_US) -> None:
        self._sync_mode = mode
        self._gathering.window_us = gather_us
        self._buffer_size = buffer_size
        self._max_frame = max_frame
        self._replaceable = frozenset(replaceable)

    def _core_install(self, active, live, pending_tx, add_count, replaceable_updates, next_segment) -> None:
        """Start appending to `active`; `next_segment(needed_bytes)` supplies the file after a full one."""
        assert active.position == active.written, "a file is installed with nothing buffered"
        self._segment_source = next_segment
        self._active = active
        self._buf = bytearray()
        self._buf_start = active.position
        self._live = live
        self._pending_tx = pending_tx
        self.add_count = add_count
        self.replaceable_update_count = replaceable_updates
        self._ready = True

    def _core_force_roll(self, factory):
        self._roll(self._active, 0, factory)
        return self._active

    def _core_seal_tail(self) -> None:
        self._check_writable()
        with self._lock:
            self._pad_to_sector()
            target = self.appended_bytes
        self._wait_for(target, True)

    def _core_fail(self, exc) -> None:
        if self._failure is None:
            self._failure = exc
        with self._cond:
            self._leader_open = False
            self._cond.notify_all()

    def _core_close(self) -> None:
        self._ready = False
        with self._cond:
            while (self._failure is None and (self._writing or self._syncing or self._leader_open
                                              or self._sync_inflight > self.durable_bytes)):
                self._cond.wait()
        for seg in self._sealed:
            seg.close()
        self._sealed = []
        if self._active is not None:
            self._active.close()

    def _core_live(self):
        return self._live

    def is_live(self, record_id: int) -> bool:
        """Whether a record with this id is live (added, not deleted) as of the last append."""
        return self._live.contains(record_id)

    def _core_pending(self):
        return self._pending_tx

    def _core_active(self):
        return self._active

    @property
    def live_bytes(self) -> int:
        return self._live.total_bytes

    def _core_reset_replaceable(self, count: int) -> None:
        self.replaceable_update_count = count

    # ----- public record API ------------------------------------------------------------
    def add(self, record_id: int, record_type: int, body, *, sync=None) -> None:
        self._check_writable()
        check_id(record_id)
        if record_id in self._live:
            raise DuplicateRecordError(f"record {record_id} is already live; update or delete it first")
        self._append(RecordKind.ADD, record_type, record_id, 0, body, sync)

    def update(self, record_id: int, record_type: int, body, *, sync=None) -> None:
        self._check_writable()
        check_id(record_id)
        if record_id not in self._live:
            raise UnknownRecordError(f"cannot update record {record_id}: no live record has that id")
        self._append(RecordKind.UPDATE, record_type, record_id, 0, body, sync)

    def delete(self, record_id: int, *, sync=None) -> None:
        self._check_writable()
        check_id(record_id)
        if record_id not in self._live:
            raise UnknownRecordError(f"cannot delete record {record_id}: no live record has that id")
        self._append(RecordKind.DELETE, 0, record_id, 0, b"", sync)

    def add_tx(self, tx_id: int, record_id: int, record_type: int, body) -> None:
        self._check_writable()
        check_id(tx_id)
        check_id(record_id)
        self._append(RecordKind.ADD_TX, record_type, record_id, tx_id, body, False)

    def update_tx(self, tx_id: int, record_id: int, record_type: int, body) -> None:
        self._check_writable()
        check_id(tx_id)
        self._check_tx_target(tx_id, record_id, "update")
        self._append(RecordKind.UPDATE_TX, record_type, record_id, tx_id, body, False)

    def delete_tx(self, tx_id: int, record_id: int) -> None:
        self._check_writable()
        check_id(tx_id)
        self._check_tx_target(tx_id, record_id, "delete")
        self._append(RecordKind.DELETE_TX, 0, record_id, tx_id, b"", False)

    def prepare(self, tx_id: int, xid, *, sync=None) -> None:
        self._check_writable()
        check_id(tx_id)
        tx = self._pending_tx.get(tx_id)
        if tx is None:
            raise UnknownTransactionError(f"cannot prepare transaction {tx_id}: it has no records")
        if tx[1] is not None:
            raise UnknownTransactionError(f"transaction {tx_id} is already prepared")
        xid_bytes = bytes(xid)
        body = len(tx[0]).to_bytes(4, "little") + xid_bytes
        self._append(RecordKind.PREPARE, 0, 0, tx_id, body, self._tx_sync(sync))
        tx[1] = xid_bytes

    def commit(self, tx_id: int, *, sync=None) -> None:
        self._check_writable()
        check_id(tx_id)
        tx = self._pending_tx.get(tx_id)
        if tx is None:
            raise UnknownTransactionError(f"cannot commit transaction {tx_id}: it has no records")
        self._append(RecordKind.COMMIT, 0, 0, tx_id, len(tx[0]).to_bytes(4, "little"), self._tx_sync(sync))

    def rollback(self, tx_id: int, *, sync=None) -> None:
        self._check_writable()
        check_id(tx_id)
        if tx_id not in self._pending_tx:
            raise UnknownTransactionError(f"cannot roll back transaction {tx_id}: it has no records")
        self._append(RecordKind.ROLLBACK, 0, 0, tx_id, b"", self._tx_sync(sync))

    def sync(self) -> None:
        self._check_writable()
        self._wait_for(self.appended_bytes, True)

    def flush(self) -> None:
        self._check_writable()
        self._wait_for(self.appended_bytes, False)

    # ----- internals ------------------------------------------------------------------------
    def _tx_sync(self, sync):
        return self._sync_mode.boundary_waits(sync)

    def _check_tx_target(self, tx_id: int, record_id: int, action: str) -> None:
        if record_id in self._live:
            return
        tx = self._pending_tx.get(tx_id)
        if tx is not None and any(op[1] == record_id and op[0] == RecordKind.ADD_TX for op in tx[0]):
            return
        raise UnknownRecordError(
            f"cannot {action} record {record_id} in transaction {tx_id}: no live record has that id")

    def _check_writable(self) -> None:
        if not self._ready:
            raise JournalClosedError("the journal is closed, read-only, or not loaded; call load() after opening (read_only=True never appends)")
        if self._failure is not None:
            raise JournalFailedError(
                f"the journal stopped accepting writes after an I/O failure: {self._failure}",
                hint="reopen the journal; everything synced before the failure is recovered")

    def _append(self, kind, user_type, record_id, tx_id, body, sync) -> None:
        if not 0 <= user_type <= 255:
            raise ValueError(f"record_type={user_type}: must be within 0..255")
        body = bytes(body)
        size = frame_size(len(body))
        self._lock.acquire()
        try:
            while True:
                self._check_writable()
                if size > self._max_frame:
                    raise RecordTooLargeError(
                        f"a record of {len(body)} bytes needs a {size}-byte frame; one journal file holds at most "
                        f"{self._max_frame}", hint="raise file_size or split the record")
                tx = self._pending_tx.get(tx_id) if kind in _TX_KINDS or kind >= RecordKind.PREPARE else None
                if tx is None and kind in (RecordKind.COMMIT, RecordKind.ROLLBACK, RecordKind.PREPARE):
                    raise UnknownTransactionError(f"transaction {tx_id} has no records")
                if self._has_room(size):
                    break
            seg = self._active
            if self._grouped == threading.get_ident():
                self._buf += encode_frame(kind, user_type, seg.stamp, record_id, tx_id, body, GROUP_MEMBER)
                self._group_count += 1
            else:
                self._buf += encode_frame(kind, user_type, seg.stamp, record_id, tx_id, body)
            seg.position += size
            self.appended_bytes += size
            self.append_count += 1
            if kind == RecordKind.ADD:
                self._live.put(record_id, size)
                self.add_count += 1
            elif kind == RecordKind.UPDATE:
                self._live.add_bytes(record_id, size)
                if user_type in self._replaceable:
                    self.replaceable_update_count += 1
            elif kind == RecordKind.DELETE:
                self._live.remove(record_id)
            elif kind in _TX_KINDS:
                if tx is None:
                    tx = [[], None]
                    self._pending_tx[tx_id] = tx
                tx[0].append((int(kind), record_id, size, user_type))
            elif kind == RecordKind.COMMIT:
                self._apply_commit(self._pending_tx.pop(tx_id))
            elif kind == RecordKind.ROLLBACK:
                del self._pending_tx[tx_id]
            buffered = seg.position - self._buf_start
        finally:
            self._lock.release()
        if self._grouped != threading.get_ident():     # a group's end decides about write-out and waiting
            self._after_append(sync, buffered)

    def _has_room(self, size: int) -> bool:
        """Called with self._lock held once: True if `size` bytes fit the active file, else the file is
        switched (which lets other threads in) and False: look again. A group reserved its room."""
        full = self._active
        if full.position + size <= full.limit:
            return True
        if self._grouped is not None:
            raise AssertionError("a record group outgrew the room reserved for it")
        # the roll waits for the I/O baton, whose holder takes this lock to write out: wait
        # without it (the compiled core releases the GIL, its append lock, while it waits)
        self._lock.release()
        try:
            self._roll(full, size, None)
        finally:
            self._lock.acquire()
        return False

    # ----- record groups: no write-out between their records ----------------------------------------
    def _begin_group(self, total: int) -> None:
        """Reserve room for `total` bytes of member frames and their GROUP frame, and keep the append
        lock until _end_group (or _abort_group): the group's records go in with no writer between
        them, and the GROUP frame _end_group writes lets a reader take all of them or none."""
        head = frame_size(GROUP_BODY.size)
        self._check_writable()
        if self._grouped == threading.get_ident():
            raise AssertionError("record groups do not nest")
        if total + head > self._max_frame:
            raise RecordTooLargeError(
                f"a record group of {total + head} bytes of frames must fit one journal file, which holds at "
                f"most {self._max_frame}", hint="raise file_size or write fewer records together")
        self._lock.acquire()
        try:
            while True:
                self._check_writable()
                if self._has_room(total + head):
                    break
        except BaseException:
            self._lock.release()
            raise
        self._grouped = threading.get_ident()
        seg = self._active
        self._group_head = seg.position     # the GROUP frame's place, written once the members are in
        self._group_count = 0
        self._buf += bytes(head)
        seg.position += head
        self.appended_bytes += head

    def _end_group(self, sync) -> None:
        """The members are in the buffer: the GROUP frame goes in front of them (or, for a group
        left empty, its room is given back)."""
        head = frame_size(GROUP_BODY.size)
        seg = self._active
        at = self._group_head - self._buf_start
        if self._group_count == 0:
            del self._buf[at:at + head]
            seg.position -= head
            self.appended_bytes -= head
        else:
            self._buf[at:at + head] = encode_group_head(seg.stamp, self._group_count, bytes(self._buf[at + head:]))
        self._grouped = None
        buffered = seg.position - self._buf_start
        self._lock.release()
        self._after_append(sync, buffered)

    def _abort_group(self, exc) -> None:
        """A group failed after its first record went into the buffer (a bug: its records are
        checked before): the journal stops, so the part in the buffer is never written."""
        self._grouped = None
        self._lock.release()
        self._core_fail(exc)

    def append_group(self, records, *, sync=None) -> None:
        """Append `records`, each ``(kind, record_id, record_type, body)`` with kind ADD, UPDATE or
        DELETE (a DELETE's type and body are ignored), as one unit: no write-out, sync or crash can
        separate them. Every record is checked first, so an error writes nothing."""
        self._check_writable()
        checked = []
        changed: dict[int, bool] = {}       # record id -> live after the group's records so far
        total = 0
        for kind, record_id, user_type, body in records:
            check_id(record_id)
            live = changed.get(record_id)
            if live is None:
                live = record_id in self._live
            if kind == RecordKind.ADD:
                if live:
                    raise DuplicateRecordError(f"record {record_id} is already live; update or delete it first")
                changed[record_id] = True
            elif kind == RecordKind.UPDATE:
                if not live:
                    raise UnknownRecordError(f"cannot update record {record_id}: no live record has that id")
            elif kind == RecordKind.DELETE:
                if not live:
                    raise UnknownRecordError(f"cannot delete record {record_id}: no live record has that id")
                changed[record_id] = False
                user_type, body = 0, b""
            else:
                raise ValueError(f"kind={kind}: a record group holds ADD, UPDATE and DELETE records only")
            if not 0 <= user_type <= 255:
                raise ValueError(f"record_type={user_type}: must be within 0..255")
            body = bytes(body)
            total += frame_size(len(body))
            checked.append((RecordKind(kind), record_id, user_type, body))
        if not checked:
            return
        self._begin_group(total)
        try:
            for kind, record_id, user_type, body in checked:
                self._append(kind, user_type, record_id, 0, body, None)
        except BaseException as exc:
            self._abort_group(exc)
            raise
        self._end_group(sync)

    def _apply_commit(self, tx) -> None:
        for kind, record_id, size, user_type in tx[0]:
            if kind == RecordKind.ADD_TX:
                self._live.put(record_id, size)
                self.add_count += 1
            elif kind == RecordKind.UPDATE_TX:
                if record_id in self._live:
                    self._live.add_bytes(record_id, size)
                    if user_type in self._replaceable:
                        self.replaceable_update_count += 1
            else:
                self._live.remove(record_id)

    def _after_append(self, sync, buffered: int) -> None:
        if self._sync_mode.record_waits(sync):
            with self._lock:
                self._gathering.join()
                target = self.appended_bytes
            self._wait_for(target, True)
            return
        if self._sync_mode.flushes_in_background:
            if self._flusher_state == FLUSHER_IDLE:
                self._flusher_state = FLUSHER_TIMING
                self._kick(False)
            elif (self._flusher_state == FLUSHER_TIMING
                  and self.appended_bytes - self.durable_bytes > self._buffer_size):
                self._kick(True)
        elif buffered >= self._buffer_size and not self._writing:
            self._wait_for(self.appended_bytes, False)

    def _kick(self, urgent: bool) -> None:
        """Tell the flusher thread (Journal._run_flusher, in _core_flusher_wait) that data waits; an
        urgent kick sets the state under the flusher's lock, so the flusher never loses it."""
        with self._kicked:
            self._kick_pending = True
            if urgent:
                self._flusher_state = FLUSHER_URGENT
            self._kicked.notify()

    def _core_kick(self) -> None:
        """Wake the flusher now: async callers wait (the state is urgent), or the journal closes."""
        self._kick(True)

    def _core_flusher_wait(self, timeout_s: float, without_gil: bool = True) -> None:
        """The flusher thread's wait, in the compiled core's order: for the rest of its window (the
        least time between the starts of two of its syncs; only an urgent kick or closing ends it
        early), then for a kick. The caller syncs: Python code cannot leave the GIL, so the twin has
        no equivalent of the compiled flusher's sync without it (`without_gil`)."""
        with self._kicked:
            opens = self._flusher_sync_s + max(timeout_s, 0.0)
            while self._ready and self._flusher_state != FLUSHER_URGENT:
                left = opens - time.monotonic()
                if left <= 0:
                    break
                self._kicked.wait(left)
            while not self._kick_pending and self._ready:
                self._kicked.wait()
            self._kick_pending = False
            if self._ready and self._flusher_state != FLUSHER_URGENT:
                self._flusher_sync_s = time.monotonic()     # the next window runs from this sync's start

    def _core_trace_syncs(self, capacity: int) -> None:
        """Record each of the next `capacity` syncs (_core_sync_trace); 0 stops."""
        self._sync_trace = [] if capacity > 0 else None
        self._sync_trace_capacity = capacity

    def _core_commit_histograms(self) -> dict:
        """The group commit's histograms, read together: ``{"batch_bytes": h, "lag_ns": h}``, each
        ``{"bounds": upper bounds, "counts": a count per bound and one past the last, "sum": the
        observations' total}``, as the compiled core's."""
        with self._lock:
            return {"batch_bytes": self._batch_bytes.snapshot(), "lag_ns": self._lag_ns.snapshot()}

    def _core_sync_trace(self) -> list:
        """The syncs recorded since _core_trace_syncs, in order: (durable_bytes, due_ns, woken_ns,
        batch_ns, sync_ns, end_ns) on the monotonic clock, as the compiled core's; every sync here is
        a leader's, due and running at its batch."""
        return list(self._sync_trace or [])

    def _take_write(self) -> None:
        with self._cond:
            while self._writing and self._failure is None:
                self._cond.wait()
            self._check_writable()
            self._writing = True

    def _release_write(self) -> None:
        with self._cond:
            self._writing = False
            self._leader_open = False
            self._cond.notify_all()

    def _roll(self, seen: Segment, needed: int, factory) -> None:
        self._take_write()
        try:
            with self._lock:
                if self._active is not seen:
                    return
                seen.limit = seen.position
                self._write_active()
                if seen.written + FRAME_HEADER_SIZE_BYTES <= seen.size:
                    # a zero header ends the data (the compiled core says why)
                    seen.write_at(bytes(FRAME_HEADER_SIZE_BYTES), seen.written)
                # durable before the next file takes a byte (the compiled core says why)
                seen.datasync()
                seen.synced = seen.written
                new_segment = factory() if factory is not None else self._segment_source(needed)
                assert seen.position == seen.written, "frames appended to a sealed file"
                self._active = new_segment
                self._buf = bytearray()
                self._buf_start = new_segment.position
                self._sealed.append(seen)
                if (len(self._sealed) > UNSYNCED_OPEN_FILES_MAX and not self._syncing
                        and self._sync_inflight <= self.durable_bytes):
                    oldest = self._sealed.pop(0)
                    self._sealed_paths.append(oldest.path)
                    oldest.close()
        except StoreFullError:
            seen.limit = seen.size
            raise
        except BaseException as exc:
            self._core_fail(exc)            # a failed write-out: stop rather than retry
            if isinstance(exc, OSError) and not isinstance(exc, JournalIOError):
                raise JournalFailedError.after("write", exc) from exc
            raise
        finally:
            self._release_write()

    def _pad_to_sector(self) -> None:
        seg = self._active
        gap = (-seg.position) % SECTOR_SIZE_BYTES
        if gap == 0:
            return
        if gap < FRAME_HEADER_SIZE_BYTES:
            gap += SECTOR_SIZE_BYTES
        if seg.position + gap > seg.limit:
            self.appended_bytes += seg.limit - seg.position
            seg.position = seg.limit
            return
        self._buf += pad_frame(seg.stamp, gap)
        seg.position += gap
        self.appended_bytes += gap

    def _wait_for(self, target: int, durable: bool) -> None:
        """Writing out and syncing are separate batons, as in the compiled core."""
        while (self.durable_bytes if durable else self.written_bytes) < target:
            self._check_writable()
            with self._cond:
                if durable and (self._leader_open or self._sync_inflight >= target):
                    while (self._failure is None and self.durable_bytes < target
                           and (self._leader_open or self._sync_inflight >= target)):
                        self._cond.wait()
                    continue
                if durable:
                    self._leader_open = True     # durable waiters wait for this batch; flushes go on
                elif self._writing:
                    while self._failure is None and self._writing and self.written_bytes < target:
                        self._cond.wait()
                    continue
                else:
                    self._writing = True
            if durable:
                self._lead_sync()
                continue
            try:
                with self._lock:
                    self._write_active()
            except BaseException as exc:
                self._core_fail(exc)
                raise JournalFailedError.after("write", exc) from exc
            finally:
                self._release_write()

    def _lead_sync(self) -> None:
        """Gather, pad, write out (write baton), then fdatasync (sync baton)."""
        took_write = False
        try:
            with self._lock:            # without the write baton: a flush during the gather is not held up
                self._gathering.wait()
            with self._cond:            # the batch keeps growing while the previous sync is on the disk
                while self._syncing and self._failure is None:
                    self._cond.wait()
            self._take_write()
            took_write = True
            with self._lock:
                self._pad_to_sector()
                batch_ns = time.monotonic_ns()
                batch = self._gathering.take()
                target = self.appended_bytes
                with self._cond:
                    self._sync_inflight = max(self._sync_inflight, target)
                    self._leader_open = False
                seg = self._active
                self._write_active()
        except BaseException as exc:
            self._core_fail(exc)
            raise JournalFailedError.after("write", exc) from exc
        finally:
            if took_write:
                self._release_write()
            else:
                with self._cond:
                    self._leader_open = False
                    self._cond.notify_all()
        with self._cond:
            while self._syncing and self._failure is None:
                self._cond.wait()
            self._check_writable()
            if self.durable_bytes >= target:
                return
            self._syncing = True
        sync_ns = time.monotonic_ns()
        try:
            with self._lock:
                synced = list(self._sealed)
                paths, self._sealed_paths = self._sealed_paths, []
            for path in paths:
                _fdatasync_path(path)
            for old in synced:
                if old is not seg and old.synced < old.written:    # a file switch syncs it: left only to close
                    old.datasync()
            # `seg` may have been sealed after this batch was written and then closed by an
            # earlier leader's sync: a sync closes only files it made durable in full
            if seg.is_open:
                seg.datasync()
            with self._lock:
                self.sync_count += 1
                if self._sync_trace is not None and len(self._sync_trace) < self._sync_trace_capacity:
                    self._sync_trace.append((max(self.durable_bytes, target), batch_ns, batch_ns, batch_ns,
                                             sync_ns, time.monotonic_ns()))
                self._gathering.served(batch)
                for old in synced:
                    old.synced = old.written
                    old.close()
                self._sealed = [old for old in self._sealed if old not in synced]
                seg.synced = max(seg.synced, seg.written)
                if target > self.durable_bytes:     # a sync that made bytes durable: one observation each
                    self._batch_bytes.observe(target - self.durable_bytes)
                    self._lag_ns.observe(max(time.monotonic_ns() - batch_ns, 0))
                    self.durable_bytes = target
        except BaseException as exc:
            self._core_fail(exc)
            raise JournalFailedError.after("sync", exc) from exc
        finally:
            with self._cond:
                self._syncing = False
                self._cond.notify_all()

    def _write_active(self) -> None:
        """Caller holds the write baton and self._lock (the twin writes out under the lock)."""
        seg = self._active
        target = self.appended_bytes
        start, end = seg.written, seg.position
        if end > start:
            seg.write_at(self._buf[start - self._buf_start:end - self._buf_start], start)
            self.write_count += 1
        seg.written = end
        del self._buf[:end - self._buf_start]
        self._buf_start = end
        self.written_bytes = max(self.written_bytes, target)


def _fdatasync_path(path) -> None:
    """fdatasync a sealed file closed before a sync reached it (the core syncs its own files)."""
    fd = os.open(path, os.O_RDWR)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)
