"""The LMDB store's in-memory batch and its group commit: one LMDB write transaction a batch.

Writes go to the batch first (the store checks them against its live ids at the call), and one
LMDB write transaction commits a whole batch. One thread at a time holds the write baton and
commits everything batched; the others wait for it and find their records committed, or take the
baton for what came since. Per sync mode (SyncMode, storage/sync_mode.py):

* "always": every record waits for the commit holding it; calls from several threads at once
  share commits.
* "group": a call that does not wait leaves its record in the batch; a background flusher commits
  the batch within ``buffer_timeout_us`` (at once when it holds more than ``buffer_size`` bytes),
  and every caller waiting meanwhile rides on the same commit. ``flush()`` is a commit too (LMDB
  cannot hand pages to the OS without its sync here).
* "none": the batch is committed when it reaches ``buffer_size`` bytes, at flush(), sync() and
  close(); a durable commit (sync()) then syncs the environment: its meta page (environment.py).

A full disk (ENOSPC) raises StoreFullError; the batch stays pending, so nothing is lost and a later
sync() retries once there is room. Any other LMDB error during a commit leaves the committer
refusing writes (JournalFailedError), as the journal does after a failed fsync.
"""
from __future__ import annotations

import errno
import os
import threading
import time

import lmdb

from ...errors import JournalClosedError, JournalError, JournalFailedError, StoreFullError
from ...limits import LMDB_BATCH_HARD_LIMIT_FACTOR, LMDB_FULL_DISK_RETRY_S, LMDB_FULL_DISK_SLACK_BYTES
from ..group_commit import BatchGathering
from ..sync_mode import SyncMode
from .environment import Environment, log
from .format import ENTRY_OVERHEAD_BYTES, FORMAT_KEY, FORMAT_TAG, NEXT_SEQUENCE_KEY, RECORD_ID, RECORD_ID_SEQUENCE

# the batch's operations, each a tuple starting with its kind:
OP_ADD = 1              # (OP_ADD, record id, record type, body)
OP_UPDATE = 2           # (OP_UPDATE, record id, record type, body, sequence)
OP_DELETE = 3           # (OP_DELETE, record id)
OP_PREPARE = 4          # (OP_PREPARE, tx id, encoded transaction: prepared.py)
OP_FORGET_PREPARED = 5  # (OP_FORGET_PREPARED, tx id)


class GroupCommitter:
    """The batch of operations not yet committed, the byte counters, the write baton and the flusher.

    Every ``*_locked`` method is called with `lock` held: the store's lock, under which it also
    checks its live ids, so a record's check and its place in the batch are one step.
    Byte counters, as the journal's: appended >= written (committed) >= durable."""

    def __init__(self, lock: threading.Lock, environment: Environment, *, sync_mode: SyncMode,
                 replaceable_types: dict[int, int], buffer_size: int, buffer_timeout_us: int) -> None:
        self._lock = lock
        self._done = threading.Condition(lock)         # commits finished, the write baton released
        self._wake_flusher = threading.Condition(lock)
        self._env = environment
        self._sync_mode = sync_mode
        self._replaceable_types = replaceable_types
        self._buffer_size = buffer_size
        self._flush_timeout_s = buffer_timeout_us / 1e6     # the flusher's window after a batch's first record
        self._ops: list = []
        #: bytes of the operations batched, not yet taken by a commit
        self.pending_bytes = 0
        #: the batch size at which an appender commits it itself (make_room)
        self.limit_bytes = buffer_size * LMDB_BATCH_HARD_LIMIT_FACTOR if sync_mode.syncs else buffer_size
        self.appended_bytes = 0
        self.written_bytes = 0
        self.durable_bytes = 0
        self.commit_count = 0
        self.sync_count = 0
        #: the LMDB failure that stopped the writes, None while there is none
        self.failure: BaseException | None = None
        self._running = False           # between start() and stop_locked(): commits and the flusher run
        self._committing = False
        self._gathering = BatchGathering(lock, buffer_timeout_us)   # the group-commit leader's rule
        self._taken_bytes = 0           # appended_bytes when the last batch was taken for a commit
        self._full_since = 0.0          # the flusher's last full-disk failure (monotonic s), 0 when none
        self._flusher: threading.Thread | None = None
        self._urgent = False

    @property
    def batched_records(self) -> int:
        return len(self._ops)

    # ----- its life ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Take writes: once the store is loaded (and, in "group" mode, start the flusher)."""
        self._running = True
        if self._sync_mode.flushes_in_background:
            self._flusher = threading.Thread(target=self._run_flusher, name="lmdb-store-flusher", daemon=True)
            self._flusher.start()

    def stop_locked(self) -> None:
        """Take no more writes; waiters and the flusher wake to find it stopped (then ``join()``)."""
        self._running = False
        self._wake_flusher.notify_all()
        self._done.notify_all()

    def join(self) -> None:
        """Wait for the flusher to end, after stop_locked()."""
        if self._flusher is not None:
            self._flusher.join()

    def check_writable(self) -> None:
        """JournalClosedError unless started and not stopped; JournalFailedError after an LMDB failure."""
        if not self._running:
            raise JournalClosedError("the store is closed or not loaded; call load() after opening")
        if self.failure is not None:
            raise JournalFailedError(f"the store stopped accepting writes after an LMDB failure: {self.failure}",
                                     hint="reopen the store; every commit before the failure is recovered")

    # ----- appends ----------------------------------------------------------------------------------
    def append_locked(self, op: tuple, body_bytes: int) -> int:
        """Batch one operation; returns appended_bytes after it (the target its caller may wait for)."""
        size = body_bytes + ENTRY_OVERHEAD_BYTES
        if not self._ops:
            self._wake_flusher.notify()
        self._ops.append(op)
        self.pending_bytes += size
        self.appended_bytes += size
        return self.appended_bytes

    def append_many_locked(self, ops: list, body_bytes: int) -> int:
        """Batch operations together (one commit holds all or none of them); returns appended_bytes."""
        size = body_bytes + ENTRY_OVERHEAD_BYTES * len(ops)
        if ops and not self._ops:
            self._wake_flusher.notify()
        self._ops.extend(ops)
        self.pending_bytes += size
        self.appended_bytes += size
        return self.appended_bytes

    def make_room(self) -> None:
        """Back-pressure before an append: a batch past its limit is committed by the appender, so
        memory stays bounded and a full disk is reported at the call whose record was not taken."""
        if self.pending_bytes >= self.limit_bytes:
            self.commit_to(self.appended_bytes, durable=False)

    def after_append(self, target: int, sync: bool | None) -> None:
        """Wait for the commit of `target` if this call waits (SyncMode.record_waits), else hurry the
        flusher when the batch outgrew buffer_size."""
        if self._sync_mode.record_waits(sync):
            self.commit_to(target, durable=True)
        elif self._sync_mode.flushes_in_background and self.pending_bytes > self._buffer_size and not self._urgent:
            with self._lock:
                self._urgent = True
                self._wake_flusher.notify()

    # ----- commits ----------------------------------------------------------------------------------
    def commit_to(self, target: int, *, durable: bool, gather: bool = True) -> None:
        """Return once every record appended up to `target` (a byte count) is committed, and durable
        if asked. One thread at a time holds the write baton and commits the whole batch; the others
        wait for it and find their records committed, or take the baton for what came since.

        Gathering (group mode, as the journal's leader does): a leader first waits, at most
        buffer_timeout_us, until as many waiters have records in the batch as the last commit
        served, so concurrent callers share one commit instead of trickling into the next."""
        env_syncs = self._sync_mode.syncs
        gathering = gather and durable and self._sync_mode.flushes_in_background
        counted = False
        while True:
            with self._lock:
                while True:
                    if self.failure is not None:
                        self.check_writable()
                    reached = self.durable_bytes if durable else self.written_bytes
                    if reached >= target:
                        return
                    if not self._running:
                        raise JournalClosedError("the store is closed")
                    if gathering and not counted and target > self._taken_bytes:
                        counted = True          # a waiter with records in the batch not yet taken
                        self._gathering.join()
                    if not self._committing:
                        break
                    self._done.wait()
                self._committing = True
                if gathering:
                    self._gathering.wait(lambda: self.pending_bytes < self._buffer_size and self._running)
                    self._gathering.served(self._gathering.take())
                ops = self._ops
                self._ops = []
                self.pending_bytes = 0
                end = self._taken_bytes = self.appended_bytes
                need_env_sync = durable and not env_syncs
            committed = synced = False
            try:
                if ops:
                    self._write_batch(ops)
                committed = True
                if need_env_sync:
                    self._env.sync()
                    synced = True
            except StoreFullError:
                with self._lock:            # nothing was committed: the records wait for room
                    self._ops[:0] = ops
                    self.pending_bytes += sum(ENTRY_OVERHEAD_BYTES + self._op_body_bytes(op) for op in ops)
                raise
            except lmdb.Error as exc:
                failure = JournalFailedError(f"LMDB failed in {self._env.directory}: {exc}",
                                             hint="reopen the store; every commit before the failure is recovered")
                with self._lock:
                    self.failure = failure
                raise failure from exc
            finally:
                with self._lock:
                    self._committing = False
                    if committed:
                        self.written_bytes = max(self.written_bytes, end)
                        if env_syncs:
                            self.durable_bytes = self.written_bytes
                            if ops:
                                self.sync_count += 1
                        elif synced:
                            self.durable_bytes = max(self.durable_bytes, end)
                            self.sync_count += 1
                    self._done.notify_all()

    def write_format(self) -> None:
        """The first commit of a new store: its format tag (format.py), before any record."""
        self._write_batch([], initialize=True)

    @staticmethod
    def _op_body_bytes(op: tuple) -> int:
        if op[0] in (OP_ADD, OP_UPDATE):
            return len(op[3])
        if op[0] == OP_PREPARE:
            return len(op[2])
        return 0

    def _write_batch(self, ops: list, *, initialize: bool = False) -> None:
        """One LMDB write transaction for the batch; the map doubles and the batch is retried on MapFullError."""
        meta = self._env.meta
        while True:
            try:
                with self._env.begin_write() as txn:
                    if initialize:
                        txn.put(FORMAT_KEY, FORMAT_TAG, db=meta)
                    next_sequence = self._apply(txn, ops)
                    if next_sequence is not None:
                        txn.put(NEXT_SEQUENCE_KEY, RECORD_ID.pack(next_sequence), db=meta)
                self.commit_count += 1
                return
            except lmdb.MapFullError:
                self._env.grow_map()
            except lmdb.Error as exc:
                if self._is_full_disk(exc, ops):
                    raise StoreFullError(f"the disk holding {self._env.directory} is full: {exc}",
                                         hint="free space on the disk; the records not yet committed are kept "
                                              "and the next sync() retries") from None
                raise

    def _is_full_disk(self, exc: lmdb.Error, ops: list) -> bool:
        """ENOSPC, or EIO on a disk without room for the batch: LMDB reports a short write (the disk
        filled up in the middle of its pwrite) as EIO. Either way the transaction was aborted and the
        last committed state is intact, so the batch can wait for room."""
        code = getattr(exc, "code", None)
        if code == errno.ENOSPC:
            return True
        if code != errno.EIO:
            return False
        try:
            stats = os.statvfs(self._env.directory)
        except OSError:
            return False
        needed = 2 * sum(ENTRY_OVERHEAD_BYTES + self._op_body_bytes(op) for op in ops) + LMDB_FULL_DISK_SLACK_BYTES
        return stats.f_bavail * stats.f_frsize < needed

    def _apply(self, txn, ops: list) -> int | None:
        """Write the batch's operations into an open write transaction; returns the next sequence number."""
        env = self._env
        records, updates, slots, prepared = env.records, env.updates, env.slots, env.prepared
        replaceable = self._replaceable_types
        pack_id = RECORD_ID.pack
        pack_id_seq = RECORD_ID_SEQUENCE.pack
        put = txn.put
        last_sequence = None
        for op in ops:
            kind = op[0]
            if kind == OP_UPDATE:
                _kind, record_id, record_type, body, sequence = op
                key_bytes = replaceable.get(record_type)
                if key_bytes is not None:
                    slot = pack_id(record_id) + bytes((record_type,)) + body[:key_bytes]
                    previous = txn.get(slot, db=slots)
                    if previous is not None:
                        txn.delete(pack_id(record_id) + previous, db=updates)
                    put(slot, pack_id(sequence), db=slots)
                put(pack_id_seq(record_id, sequence), bytes((record_type,)) + body, db=updates)
                last_sequence = sequence
            elif kind == OP_ADD:
                put(pack_id(op[1]), bytes((op[2],)) + op[3], db=records)
            elif kind == OP_DELETE:
                key = pack_id(op[1])
                txn.delete(key, db=records)
                for db in (updates, slots):
                    cursor = txn.cursor(db=db)
                    if cursor.set_range(key):
                        while cursor.key()[:8] == key:
                            if not cursor.delete():
                                break
            elif kind == OP_PREPARE:
                put(pack_id(op[1]), op[2], db=prepared)
            elif kind == OP_FORGET_PREPARED:
                txn.delete(pack_id(op[1]), db=prepared)
            else:
                raise AssertionError(f"unknown batch operation {op!r}")
        return None if last_sequence is None else last_sequence + 1

    # ----- the group-commit flusher --------------------------------------------------------------------
    def _run_flusher(self) -> None:
        """Commits the batch within buffer_timeout_us of its first record (at once when urgent)."""
        timeout_s = self._flush_timeout_s
        while True:
            with self._lock:
                while self._running and not self._ops and self.failure is None:
                    self._wake_flusher.wait()
                if not self._running or self.failure is not None:
                    return
                if not self._urgent:
                    self._wake_flusher.wait(LMDB_FULL_DISK_RETRY_S if self._full_since else timeout_s)
                self._urgent = False
                if not self._running:
                    return
                target = self.appended_bytes
            try:
                self.commit_to(target, durable=True, gather=False)
                self._full_since = 0.0
            except StoreFullError as exc:
                if not self._full_since:
                    log.error("%s", exc)
                self._full_since = time.monotonic()
            except JournalError as exc:
                log.error("group commit of %s failed: %s", self._env.directory, exc)
                return
