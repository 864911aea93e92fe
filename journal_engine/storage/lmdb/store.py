"""LmdbRecordStore: the record-store interface (storage/protocol.py) on one LMDB environment.

For users who want random reads of stored records, or who already run LMDB; the journal
stays the default (docs/backends.md says when to pick which).

The layout on disk (files, databases, keys) is format.py's; a prepared transaction's encoding,
prepared.py's.

Replaceable updates (``replaceable_types={type: key_bytes}``) are overwritten in place:
a new one deletes the update its slot points at and takes a new sequence number, so the
store holds one per (record, type, key) — the latest, at the position it was written —
and ``record_type_counts()`` counts one per reference from the start.

Writes go to an in-memory batch first (checked against the in-memory set of live ids, so
errors are raised at the call, as by the journal), and one LMDB write transaction commits
a whole batch: the group commit. Transactions (add_tx, ...) stay in memory until commit(),
which puts their records into the batch together, so one LMDB transaction holds all or
none of them; a prepared transaction is written to ``prepared`` and returned by load().

Durability, per sync mode (LMDB's own commit is the durable step; nothing else is needed):

* "group" and "always": the environment is opened with ``sync=True, metasync=True`` (the
  LMDB default): a commit writes the data pages, fdatasyncs, writes the meta page and
  fdatasyncs again, so a commit that returned is durable. "always": every call waits for
  the commit holding its record; calls from several threads at once share commits.
  "group": a call that does not wait leaves its record in the batch; a background flusher
  commits the batch within ``buffer_timeout_us`` (at once when it holds more than
  ``buffer_size`` bytes), and every caller waiting meanwhile rides on the same commit.
  ``flush()`` is a commit too (LMDB cannot hand pages to the OS without its sync here).
* "none": the environment is opened with ``sync=True, metasync=False`` (MDB_NOMETASYNC):
  a commit syncs its data pages and hands the meta page to the operating system unsynced;
  the batch is committed when it reaches ``buffer_size`` bytes, at flush(), sync() and
  close(); ``sync()`` commits and then calls ``env.sync(True)`` (an fdatasync: the meta
  page too). A power cut may lose the last commits, never more: a meta page on disk only
  ever names pages already synced. (MDB_NOSYNC, which syncs nothing, let a meta page
  reach the disk before the pages it names -- LMDB documents that a file system that
  reorders writes then corrupts the database; the crash harness's power-loss mode found
  acknowledged records lost so.) A killed process loses nothing that was committed.

``writemap=False`` (pages are written with pwrite, never dirtied in the shared map, so a
stray write through a pointer cannot reach the file) and ``meminit=False``.

The map grows by itself: a commit that hits MapFullError is retried after
``env.set_mapsize`` doubles the map (readers wait for the resize; otherwise they never
block the writer: every read is an LMDB read transaction over a snapshot). A full disk
(ENOSPC) raises StoreFullError; the batch stays pending, so nothing is lost and a later
sync() retries once there is room. Any other LMDB error during a commit leaves the store
refusing writes (JournalFailedError), as the journal does after a failed fsync.
"""
from __future__ import annotations

import asyncio
import errno
import logging
import os
import threading
import time
from typing import Any, Callable

try:
    import lmdb
except ImportError as exc:          # an optional dependency: only this backend needs it
    raise ImportError(f"the LMDB record store needs the lmdb package ({exc}); pip install lmdb") from exc

from ..._impl import RecordInfo
from ...errors import (
    ConfigError,
    DuplicateRecordError,
    IncompatibleFormatError,
    JournalClosedError,
    JournalError,
    JournalFailedError,
    JournalIOError,
    JournalLockedError,
    StoreFullError,
    UnknownRecordError,
    UnknownTransactionError,
)
from ...limits import (BUFFER_SIZE_DEFAULT_BYTES, BUFFER_TIMEOUT_DEFAULT_US, LMDB_BATCH_HARD_LIMIT_FACTOR,
                      LMDB_BODY_BYTES_MAX, LMDB_FULL_DISK_RETRY_S, LMDB_FULL_DISK_SLACK_BYTES,
                      LMDB_MAP_SIZE_DEFAULT_BYTES, LMDB_MAP_SIZE_MAX_DEFAULT_BYTES, LMDB_MAP_SIZE_MIN_BYTES,
                      RECORD_TYPE_MAX, SYNC_MODE_DEFAULT, U64_MAX, check_id)
from ...record_format import RecordKind
from ..directory_lock import DirectoryLock
from ..durability import rename_durably, unlink
from ..protocol import LoadReport, LoadResult, PreparedTransaction, TransactionRecord
from ..lifecycle import StoreLifecycle
from ..group_commit import BatchGathering, check_durability_settings
from ..sync_mode import SyncMode
from ..directory_kind import stored_backend
from .format import (DATA_FILE, DATABASES, ENTRY_OVERHEAD_BYTES, FORMAT_KEY, FORMAT_TAG, LOCK_FILE, NEW_DATA_FILE,
                     NEXT_SEQUENCE_KEY, RECORD_ID, RECORD_ID_SEQUENCE)
from .prepared import TX_ADD, TX_DELETE, TX_KIND_NAMES, TX_UPDATE, decode_prepared, encode_prepared

log = logging.getLogger("journal_engine.message_store.lmdb")

# batch operations
_ADD, _UPDATE, _DELETE, _PREPARE, _FORGET_PREPARED = 1, 2, 3, 4, 5
def _check_type(record_type: int) -> None:
    if not 0 <= record_type <= RECORD_TYPE_MAX:
        raise ValueError(f"record_type={record_type}: must be within 0..{RECORD_TYPE_MAX}")


def _as_body(body) -> bytes:
    data = body if type(body) is bytes else bytes(body)
    if len(data) > LMDB_BODY_BYTES_MAX:
        from ...errors import RecordTooLargeError
        raise RecordTooLargeError(f"a record body of {len(data)} bytes is larger than {LMDB_BODY_BYTES_MAX}")
    return data


def _create_environment(directory: str, map_size: int) -> None:
    """Make a new, empty environment durably: built as ``data.mdb.new`` (with its databases), synced,
    then renamed to ``data.mdb`` and the directory synced. LMDB writes a new file's meta pages
    unsynced, so a power cut before its first commit could leave a torn data.mdb that no open
    accepts (the crash harness's power-loss mode found it); a torn ``data.mdb.new`` is simply
    made again. (LMDB itself never syncs the directory: without the rename's directory sync a power
    cut could lose data.mdb's name with every commit in it.)"""
    new_path = os.path.join(directory, NEW_DATA_FILE)
    for leftover in (new_path, new_path + "-lock"):
        unlink(leftover, missing_ok=True)
    try:
        env = lmdb.open(new_path, map_size=map_size, subdir=False, max_dbs=len(DATABASES), sync=True,
                        metasync=True, writemap=False, meminit=False, lock=False)
        try:
            for name in DATABASES:
                env.open_db(name)
            env.sync(True)
        finally:
            env.close()
    except lmdb.Error as exc:
        raise JournalIOError(f"could not create the LMDB environment: {exc}", path=new_path,
                             hint="check the device and the permissions") from None
    rename_durably(new_path, os.path.join(directory, DATA_FILE), directory)

class _Transaction:
    __slots__ = ("ops", "xid")

    def __init__(self) -> None:
        self.ops: list = []          # (kind, record id, record type, body)
        self.xid: bytes | None = None


class LmdbRecordStore(StoreLifecycle):
    """A record store (storage/protocol.py) in one LMDB environment, with group commit."""

    def __init__(self, directory, *, sync: str = SYNC_MODE_DEFAULT, replaceable_types: dict | None = None,
                 map_size: int = LMDB_MAP_SIZE_DEFAULT_BYTES, map_size_max: int = LMDB_MAP_SIZE_MAX_DEFAULT_BYTES,
                 buffer_timeout_us: int = BUFFER_TIMEOUT_DEFAULT_US, buffer_size: int = BUFFER_SIZE_DEFAULT_BYTES,
                 max_readers: int = 126, read_only: bool = False) -> None:
        """``read_only``: an inspection (the tools): nothing is created or written (beside a running
        writer: a reader slot in LMDB's lock.mdb); load() reads a snapshot and every write raises
        JournalClosedError. JournalIOError when the directory is absent; JournalLockedError when a
        writer holds the store and its reader table cannot be joined."""
        check_durability_settings(sync, buffer_timeout_us, buffer_size)
        if not isinstance(map_size, int) or map_size < LMDB_MAP_SIZE_MIN_BYTES:
            raise ConfigError("map_size", map_size, f"must be an integer >= {LMDB_MAP_SIZE_MIN_BYTES}")
        if not isinstance(map_size_max, int) or map_size_max < map_size:
            raise ConfigError("map_size_max", map_size_max, f"must be an integer >= map_size ({map_size})")
        replaceable = dict(replaceable_types or {})
        for record_type, key_bytes in replaceable.items():
            if not isinstance(record_type, int) or not 0 <= record_type <= RECORD_TYPE_MAX \
                    or not isinstance(key_bytes, int) or key_bytes < 0:
                raise ConfigError("replaceable_types", replaceable_types,
                                  "must map record types (0..255) to key lengths (>= 0)")
        self.directory = os.fspath(directory)
        self.sync_mode = SyncMode.named(sync)
        self.replaceable_types = replaceable
        self.map_size_max = map_size_max
        self.buffer_timeout_us = buffer_timeout_us
        self.buffer_size = buffer_size
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)        # commits finished, the write baton released
        self._wake_flusher = threading.Condition(self._lock)
        self._batch: list = []
        self._batch_bytes = 0
        self._live: set[int] = set()
        self._pending_tx: dict[int, _Transaction] = {}
        self._next_sequence = 0
        self._committing = False
        self._gathering = BatchGathering(self._lock, buffer_timeout_us)   # the group-commit leader's rule
        self._taken_bytes = 0           # appended_bytes when the last batch was taken for a commit
        self._failure: BaseException | None = None
        self._full_since = 0.0          # the flusher's last full-disk failure (monotonic s), 0 when none
        self._state = "new"
        self._flusher: threading.Thread | None = None
        self._urgent = False
        # byte counters, as the journal's: appended >= written (committed) >= durable
        self.appended_bytes = 0
        self.written_bytes = 0
        self.durable_bytes = 0
        self.commit_count = 0
        self.sync_count = 0
        self.map_resize_count = 0
        self._readers = 0
        self._resizing = False
        self._gate_lock = threading.Lock()                  # readers against a map resize
        # the batch size at which an appender commits it itself (see _make_room)
        self._batch_limit = buffer_size * LMDB_BATCH_HARD_LIMIT_FACTOR if self.sync_mode.syncs else buffer_size
        self._gate = threading.Condition(self._gate_lock)

        self.read_only = bool(read_only)
        if self.read_only:
            if not os.path.isdir(self.directory):
                raise JournalIOError(f"no LMDB store directory at {self.directory}", errno=errno.ENOENT,
                                     path=self.directory, hint="check the path; read_only=True creates nothing")
        else:
            os.makedirs(self.directory, exist_ok=True)
        # the one lock of the directory (storage/directory_lock.py), before anything is read or created.
        # An inspection takes it shared: while it holds it no writer starts, and LMDB is read without
        # its lock file (lock.mdb, which every locking reader writes); when a writer holds it, LMDB is
        # read through its reader table (a slot in lock.mdb, nothing else written): a consistent
        # snapshot that the writer's commits leave alone, where a reader unknown to the writer would
        # see pages it reuses (garbage, a crash, an LMDB assertion).
        self._writer_present: JournalLockedError | None = None
        try:
            self._directory_lock = (DirectoryLock(self.directory, None, "LmdbRecordStore", exclusive=False)
                                    if self.read_only else DirectoryLock(self.directory, LOCK_FILE, "LmdbRecordStore"))
        except JournalLockedError as exc:
            if not self.read_only:
                raise
            if exc.holder_pid == os.getpid():
                # LMDB forbids an environment open twice in one process: closing the second would drop
                # the POSIX locks of the first on lock.mdb
                raise JournalLockedError(f"{self.directory} is open for writing in this process",
                                         hint="read it through the store already open, or close that first") from None
            self._directory_lock, self._writer_present = None, exc
        if stored_backend(self.directory) == "journal":
            self._release_lock_file()
            raise IncompatibleFormatError(
                "the directory holds journal files, not an LMDB store", path=self.directory,
                hint='open it with backend="journal" (or Journal), or give the LMDB store an empty directory')
        durable = self.sync_mode.syncs     # "none": data pages synced at each commit, the meta page at sync()
        reader_table = not self.read_only or self._writer_present is not None
        try:
            if not self.read_only and not os.path.exists(os.path.join(self.directory, DATA_FILE)):
                _create_environment(self.directory, map_size)
            self._env = lmdb.open(self.directory, map_size=map_size, subdir=True, max_dbs=len(DATABASES),
                                  sync=True, metasync=durable, writemap=False, meminit=False,
                                  max_readers=max_readers, lock=reader_table, readonly=self.read_only,
                                  create=not self.read_only)
        except JournalError:
            self._release_lock_file()
            raise
        except lmdb.Error as exc:
            self._release_lock_file()
            if self._writer_present is not None:
                raise self._refused_beside_writer(exc) from None
            raise IncompatibleFormatError(f"not an LMDB environment this store can open: {exc}",
                                          path=os.path.join(self.directory, DATA_FILE),
                                          hint="the LMDB store needs its own directory") from None
        try:
            if self._writer_present is not None:
                self._env.reader_check()        # slots left by killed inspections pin pages the writer would reuse
            with self._read() as txn:           # the main database holds only the names of ours
                strangers = [key for key, _value in txn.cursor() if key not in DATABASES]
            if strangers:
                raise lmdb.IncompatibleError(f"keys of another program in the main database: {strangers[:3]}")
            (self._records, self._updates, self._slots, self._prepared, self._meta) = (
                self._env.open_db(name) for name in DATABASES)
        except lmdb.Error as exc:
            self._env.close()
            self._release_lock_file()
            raise IncompatibleFormatError(f"the LMDB environment does not hold this store's databases: {exc}",
                                          path=os.path.join(self.directory, DATA_FILE),
                                          hint="the LMDB store needs its own directory") from None

    def _refused_beside_writer(self, cause: BaseException) -> JournalLockedError:
        """An inspection that cannot join the reader table of the writer holding the store (lock.mdb
        not writable by this user, the table full): refused, naming the writer."""
        pid = self._writer_present.holder_pid
        writer = f"its writer (process {pid})" if pid is not None else "its writer"
        error = JournalLockedError(f"{self.directory} is held by {writer}; reading it beside the writer failed: "
                                   f"{cause}", hint="inspect it as a user who may write lock.mdb, or once the "
                                                    "writer stops")
        error.holder_pid = pid
        return error

    def _release_lock_file(self) -> None:
        if self._directory_lock is not None:
            self._directory_lock.release()

    def close(self) -> None:
        """Commit and sync what was appended, stop the flusher, close the environment."""
        if self._state == "closed":
            return
        try:
            if self._state == "loaded" and self._failure is None:
                try:
                    self._commit_to(self.appended_bytes, durable=True)
                except JournalError as exc:
                    log.error("final commit failed on close of %s: %s", self.directory, exc)
        finally:
            with self._lock:
                self._state = "closed"
                self._wake_flusher.notify_all()
                self._done.notify_all()
            if self._flusher is not None:
                self._flusher.join()
            self._env.close()
            self._release_lock_file()

    # ----- recovery ---------------------------------------------------------------------------------
    def load(self, *, copy: bool = False) -> LoadResult:
        """Read every live record with its updates, and the prepared transactions. Once, after opening.
        The bodies are always owned bytes (read out of a read transaction): ``copy`` changes nothing."""
        if self._state != "new":
            raise JournalError("load() runs once, right after opening" if self._state == "loaded"
                               else "the store is closed")
        started = time.perf_counter()
        report = LoadReport(files_read=1)
        data_path = os.path.join(self.directory, DATA_FILE)
        records: dict[int, RecordInfo] = {}
        prepared = []
        with self._read() as txn:
            tag = txn.get(FORMAT_KEY, db=self._meta)
            if tag is not None and tag != FORMAT_TAG:
                raise IncompatibleFormatError(f"the LMDB store was written as {tag!r}, this version reads "
                                              f"{FORMAT_TAG!r}", path=data_path, field="meta/format",
                                              hint="open it with the version of journal_engine that wrote it")
            if tag is None and (txn.stat(self._records)["entries"] or txn.stat(self._updates)["entries"]):
                raise IncompatibleFormatError("the LMDB environment holds records but no format tag",
                                              path=data_path, field="meta/format",
                                              hint="the LMDB store needs its own directory")
            next_sequence = txn.get(NEXT_SEQUENCE_KEY, db=self._meta)
            self._next_sequence = RECORD_ID.unpack(next_sequence)[0] if next_sequence is not None else 0
            from_bytes = int.from_bytes
            heads = {}
            for key, value in txn.cursor(db=self._records).iternext():
                heads[from_bytes(key, "big")] = (value[0], value[1:], [])
            orphans: dict[int, int] = {}
            for key, value in txn.cursor(db=self._updates).iternext():
                record_id = from_bytes(key[:8], "big")
                head = heads.get(record_id)
                if head is None:
                    orphans[record_id] = orphans.get(record_id, 0) + 1
                    continue
                head[2].append((value[0], value[1:]))
            for record_id, (record_type, body, updates) in heads.items():
                records[record_id] = RecordInfo(record_id, record_type, body, updates)
                report.records_read += 1 + len(updates)
            for record_id, count in orphans.items():
                report.anomalies.append((data_path, record_id,
                                         f"{count} updates of record {record_id}, which is not live; ignored"))
            for key, value in txn.cursor(db=self._prepared).iternext():
                tx_id = from_bytes(key, "big")
                xid, ops = decode_prepared(tx_id, value, data_path)
                transaction = _Transaction()
                transaction.ops = ops
                transaction.xid = xid
                self._pending_tx[tx_id] = transaction
                prepared.append(PreparedTransaction(tx_id, xid, [
                    TransactionRecord(TX_KIND_NAMES[kind], record_id, record_type, body)
                    for kind, record_id, record_type, body in ops]))
        self._live = set(records)
        if self.read_only:
            self._state = "read-only"
            report.duration_s = time.perf_counter() - started
            return LoadResult(records=records, prepared=prepared, report=report)
        if tag is None:
            self._write_batch([], initialize=True)
        self._state = "loaded"
        if self.sync_mode.flushes_in_background:
            self._flusher = threading.Thread(target=self._run_flusher, name="lmdb-store-flusher", daemon=True)
            self._flusher.start()
        report.duration_s = time.perf_counter() - started
        return LoadResult(records=records, prepared=prepared, report=report)

    # ----- the record API --------------------------------------------------------------------------------
    def _checked_body(self, record_id: int, record_type: int, body) -> bytes:
        """An add's or update's arguments checked, its body as bytes, room made in the batch."""
        if not 0 <= record_id <= U64_MAX:
            check_id(record_id)
        if not 0 <= record_type <= RECORD_TYPE_MAX:
            _check_type(record_type)
        data = body if type(body) is bytes and len(body) <= LMDB_BODY_BYTES_MAX else _as_body(body)
        if self._batch_bytes >= self._batch_limit:
            self._make_room()
        return data

    def add(self, record_id: int, record_type: int, body, *, sync: bool | None = None) -> None:
        """Make a new record live (DuplicateRecordError if the id is live)."""
        data = self._checked_body(record_id, record_type, body)
        with self._lock:
            if self._state != "loaded" or self._failure is not None:
                self._check_writable()
            if record_id in self._live:
                raise DuplicateRecordError(f"record {record_id} is already live; update or delete it first")
            self._live.add(record_id)
            target = self._append_locked((_ADD, record_id, record_type, data), len(data))
        if sync is not None or self.sync_mode.records_wait or self._batch_bytes > self.buffer_size:
            self._after_append(target, sync)

    def update(self, record_id: int, record_type: int, body, *, sync: bool | None = None) -> None:
        """Append an update to a live record; a replaceable type replaces the previous one of its key."""
        data = self._checked_body(record_id, record_type, body)
        with self._lock:
            if self._state != "loaded" or self._failure is not None:
                self._check_writable()
            if record_id not in self._live:
                raise UnknownRecordError(f"cannot update record {record_id}: no live record has that id")
            sequence = self._next_sequence
            self._next_sequence = sequence + 1
            target = self._append_locked((_UPDATE, record_id, record_type, data, sequence), len(data))
        if sync is not None or self.sync_mode.records_wait or self._batch_bytes > self.buffer_size:
            self._after_append(target, sync)

    def delete(self, record_id: int, *, sync: bool | None = None) -> None:
        """Remove a live record and all its updates."""
        check_id(record_id)
        self._make_room()
        with self._lock:
            self._check_writable()
            if record_id not in self._live:
                raise UnknownRecordError(f"cannot delete record {record_id}: no live record has that id")
            self._live.discard(record_id)
            target = self._append_locked((_DELETE, record_id), 0)
        self._after_append(target, sync)

    def append_group(self, records, *, sync: bool | None = None) -> None:
        """Append `records`, each ``(kind, record_id, record_type, body)`` with kind ADD, UPDATE or
        DELETE (a DELETE's type and body are ignored), as one unit: they join the batch together, so
        one LMDB write transaction commits all of them or none. Every record is checked first."""
        records = list(records)
        prepared = []
        for kind, record_id, record_type, body in records:
            if kind == RecordKind.DELETE:
                check_id(record_id)
                prepared.append((kind, record_id, 0, b""))
            elif kind in (RecordKind.ADD, RecordKind.UPDATE):
                prepared.append((kind, record_id, record_type, self._checked_body(record_id, record_type, body)))
            else:
                raise ValueError(f"kind={kind}: a record group holds ADD, UPDATE and DELETE records only")
        if not prepared:
            return
        with self._lock:
            self._check_writable()
            changed: dict[int, bool] = {}       # record id -> live after the group's records so far
            for kind, record_id, _type, _data in prepared:
                live = changed.get(record_id)
                if live is None:
                    live = record_id in self._live
                if kind == RecordKind.ADD and live:
                    raise DuplicateRecordError(f"record {record_id} is already live; update or delete it first")
                if kind != RecordKind.ADD and not live:
                    raise UnknownRecordError(f"cannot {'update' if kind == RecordKind.UPDATE else 'delete'} "
                                             f"record {record_id}: no live record has that id")
                changed[record_id] = kind != RecordKind.DELETE
            ops = []
            body_bytes = 0
            for kind, record_id, record_type, data in prepared:
                if kind == RecordKind.ADD:
                    ops.append((_ADD, record_id, record_type, data))
                elif kind == RecordKind.UPDATE:
                    ops.append((_UPDATE, record_id, record_type, data, self._next_sequence))
                    self._next_sequence += 1
                else:
                    ops.append((_DELETE, record_id))
                body_bytes += len(data)
            for record_id, live in changed.items():
                if live:
                    self._live.add(record_id)
                else:
                    self._live.discard(record_id)
            target = self._append_many_locked(ops, body_bytes)
        self._after_append(target, sync)

    def add_tx(self, tx_id: int, record_id: int, record_type: int, body) -> None:
        """Add a record when the transaction commits (kept in memory until then)."""
        self._tx_record(tx_id, TX_ADD, record_id, record_type, body)

    def update_tx(self, tx_id: int, record_id: int, record_type: int, body) -> None:
        """Update a live record (or one this transaction adds) when the transaction commits."""
        self._tx_record(tx_id, TX_UPDATE, record_id, record_type, body)

    def delete_tx(self, tx_id: int, record_id: int) -> None:
        """Delete a live record (or one this transaction adds) when the transaction commits."""
        self._tx_record(tx_id, TX_DELETE, record_id, 0, b"")

    def _tx_record(self, tx_id: int, kind: int, record_id: int, record_type: int, body) -> None:
        check_id(tx_id)
        check_id(record_id)
        _check_type(record_type)
        data = _as_body(body)
        with self._lock:
            self._check_writable()
            transaction = self._pending_tx.get(tx_id)
            if transaction is not None and transaction.xid is not None:
                raise UnknownTransactionError(f"transaction {tx_id} is prepared; commit or roll it back")
            if kind != TX_ADD and record_id not in self._live and not (
                    transaction is not None and any(op[0] == TX_ADD and op[1] == record_id
                                                    for op in transaction.ops)):
                action = "update" if kind == TX_UPDATE else "delete"
                raise UnknownRecordError(
                    f"cannot {action} record {record_id} in transaction {tx_id}: no live record has that id")
            if transaction is None:
                transaction = self._pending_tx[tx_id] = _Transaction()
            transaction.ops.append((kind, record_id, record_type, data))

    def prepare(self, tx_id: int, xid, *, sync: bool | None = None) -> None:
        """Write the transaction's records with its xid (two-phase commit): load() returns it."""
        check_id(tx_id)
        xid_bytes = bytes(xid)
        self._make_room()
        with self._lock:
            self._check_writable()
            transaction = self._pending_tx.get(tx_id)
            if transaction is None:
                raise UnknownTransactionError(f"cannot prepare transaction {tx_id}: it has no records")
            if transaction.xid is not None:
                raise UnknownTransactionError(f"transaction {tx_id} is already prepared")
            encoded = encode_prepared(xid_bytes, transaction.ops)
            transaction.xid = xid_bytes
            target = self._append_locked((_PREPARE, tx_id, encoded), len(encoded))
        self._after_append(target, self._tx_sync(sync))

    def commit(self, tx_id: int, *, sync: bool | None = None) -> None:
        """Apply the transaction's records; one LMDB write transaction holds all of them."""
        check_id(tx_id)
        self._make_room()
        with self._lock:
            self._check_writable()
            transaction = self._pending_tx.pop(tx_id, None)
            if transaction is None:
                raise UnknownTransactionError(f"cannot commit transaction {tx_id}: it has no records")
            live = self._live
            ops = []
            size = 0
            for kind, record_id, record_type, body in transaction.ops:
                if kind == TX_ADD:
                    if record_id in live:          # an add over a live id replaces it, as a replay would
                        ops.append((_DELETE, record_id))
                    live.add(record_id)
                    ops.append((_ADD, record_id, record_type, body))
                elif record_id not in live:
                    continue                       # deleted meanwhile: nothing to update or delete
                elif kind == TX_UPDATE:
                    ops.append((_UPDATE, record_id, record_type, body, self._next_sequence))
                    self._next_sequence += 1
                else:
                    live.discard(record_id)
                    ops.append((_DELETE, record_id))
                size += len(body)
            if transaction.xid is not None:
                ops.append((_FORGET_PREPARED, tx_id))
            target = self._append_many_locked(ops, size)
        self._after_append(target, self._tx_sync(sync))

    def rollback(self, tx_id: int, *, sync: bool | None = None) -> None:
        """Drop the transaction's records (nothing of an unprepared transaction was written)."""
        check_id(tx_id)
        with self._lock:
            self._check_writable()
            transaction = self._pending_tx.pop(tx_id, None)
            if transaction is None:
                raise UnknownTransactionError(f"cannot roll back transaction {tx_id}: it has no records")
            target = self.appended_bytes
            if transaction.xid is not None:
                target = self._append_locked((_FORGET_PREPARED, tx_id), 0)
        self._after_append(target, self._tx_sync(sync))

    def sync(self) -> None:
        """Return once everything appended before the call is durable."""
        with self._lock:
            self._check_writable()
            target = self.appended_bytes
        self._commit_to(target, durable=True)

    async def sync_async(self) -> None:
        """``sync()`` for coroutines: runs it on the running loop's default executor (a thread of its
        pool while LMDB commits), so the loop goes on meanwhile."""
        await asyncio.get_running_loop().run_in_executor(None, self.sync)

    def flush(self) -> None:
        """Return once everything appended before the call is committed to LMDB (survives a killed
        process). In "group" and "always" modes a commit is durable, so this is a sync."""
        with self._lock:
            self._check_writable()
            target = self.appended_bytes
        self._commit_to(target, durable=False)

    # ----- reads ------------------------------------------------------------------------------------------
    def get(self, record_id: int, *, committed_only: bool = False) -> RecordInfo | None:
        """The live record with its updates, or None: a random read through an LMDB read transaction.

        What was appended before the call is committed first, so a caller reads its own writes; while
        writes are pending that costs a commit (a durable one in "group" and "always" modes).
        committed_only=True reads the last committed state and never waits for the writer. Works
        before load() too: a reader that wants a few records need not read them all."""
        check_id(record_id)
        if self._state == "closed":
            raise JournalClosedError("the store is closed")
        if not committed_only and self.written_bytes < self.appended_bytes:
            self._commit_to(self.appended_bytes, durable=False)
        key = RECORD_ID.pack(record_id)
        with self._read() as txn:
            head = txn.get(key, db=self._records)
            if head is None:
                return None
            updates = []
            cursor = txn.cursor(db=self._updates)
            if cursor.set_range(key):
                for update_key, value in cursor.iternext():
                    if update_key[:8] != key:
                        break
                    updates.append((value[0], value[1:]))
        return RecordInfo(record_id, head[0], head[1:], updates)

    def is_live(self, record_id: int) -> bool:
        """Whether the id is live (added or committed, and not deleted), from the in-memory table."""
        return record_id in self._live

    def record_type_counts(self) -> dict[int, int]:
        """Adds and updates of each record type a load() would return now (one per replaceable key)."""
        self.flush()
        counts: dict[int, int] = {}
        with self._read() as txn:
            for db in (self._records, self._updates):
                for value in txn.cursor(db=db).iternext(keys=False, values=True):
                    counts[value[0]] = counts.get(value[0], 0) + 1
        return counts

    def compact(self) -> None:
        """Nothing to rewrite: replaceable updates are overwritten in place, and LMDB reuses the pages
        of deleted records inside its file (the file never shrinks; `env.copy(compact=True)` would)."""
        self.flush()

    def needs_compaction(self) -> bool:
        return False

    def add_pin_releaser(self, release) -> None:
        """Nothing to release: every read of LMDB's pages is a copy, so no view holds a file."""

    def stats(self) -> dict:
        if self._state == "closed":
            info, page_bytes = {"map_size": 0, "last_pgno": -1, "last_txnid": 0}, 0
        else:
            info, page_bytes = self._env.info(), self._env.stat()["psize"]
        with self._lock:
            return {
                "directory": self.directory,
                "backend": "lmdb",
                "sync_mode": self.sync_mode,
                "live_records": len(self._live),
                "pending_transactions": len(self._pending_tx),
                "batched_records": len(self._batch),
                "appended_bytes": self.appended_bytes,
                "written_bytes": self.written_bytes,
                "durable_bytes": self.durable_bytes,
                "commits": self.commit_count,
                "syncs": self.sync_count,
                "map_size": info["map_size"],
                "map_resizes": self.map_resize_count,
                "used_bytes": (info["last_pgno"] + 1) * page_bytes,
                "last_txnid": info["last_txnid"],
            }

    # ----- the batch and the write baton -------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self._state == "read-only":
            raise JournalClosedError("the store was opened read-only (an inspection); it takes no writes")
        if self._state != "loaded":
            raise JournalClosedError("the store is closed or not loaded; call load() after opening")
        if self._failure is not None:
            raise JournalFailedError(f"the store stopped accepting writes after an LMDB failure: {self._failure}",
                                     hint="reopen the store; every commit before the failure is recovered")

    def _tx_sync(self, sync):
        return self.sync_mode.boundary_waits(sync)

    def _append_locked(self, op: tuple, body_bytes: int) -> int:
        size = body_bytes + ENTRY_OVERHEAD_BYTES
        if not self._batch:
            self._wake_flusher.notify()
        self._batch.append(op)
        self._batch_bytes += size
        self.appended_bytes += size
        return self.appended_bytes

    def _append_many_locked(self, ops: list, body_bytes: int) -> int:
        size = body_bytes + ENTRY_OVERHEAD_BYTES * len(ops)
        if ops and not self._batch:
            self._wake_flusher.notify()
        self._batch.extend(ops)
        self._batch_bytes += size
        self.appended_bytes += size
        return self.appended_bytes

    def _make_room(self) -> None:
        """Back-pressure before an append: a batch past its limit is committed by the appender, so
        memory stays bounded and a full disk is reported at the call whose record was not taken."""
        if self._batch_bytes >= self._batch_limit:
            self._commit_to(self.appended_bytes, durable=False)

    def _after_append(self, target: int, sync) -> None:
        if self.sync_mode.record_waits(sync):
            self._commit_to(target, durable=True)
        elif self.sync_mode.flushes_in_background and self._batch_bytes > self.buffer_size and not self._urgent:
            with self._lock:
                self._urgent = True
                self._wake_flusher.notify()

    def _commit_to(self, target: int, *, durable: bool, gather: bool = True) -> None:
        """Return once every record appended up to `target` (a byte count) is committed, and durable
        if asked. One thread at a time holds the write baton and commits the whole batch; the others
        wait for it and find their records committed, or take the baton for what came since.

        Gathering (group mode, as the journal's leader does): a leader first waits, at most
        buffer_timeout_us, until as many waiters have records in the batch as the last commit
        served, so concurrent callers share one commit instead of trickling into the next."""
        env_syncs = self.sync_mode.syncs
        gathering = gather and durable and self.sync_mode.flushes_in_background
        counted = False
        while True:
            with self._lock:
                while True:
                    if self._failure is not None:
                        self._check_writable()
                    reached = self.durable_bytes if durable else self.written_bytes
                    if reached >= target:
                        return
                    if self._state == "closed":
                        raise JournalClosedError("the store is closed")
                    if gathering and not counted and target > self._taken_bytes:
                        counted = True          # a waiter with records in the batch not yet taken
                        self._gathering.join()
                    if not self._committing:
                        break
                    self._done.wait()
                self._committing = True
                if gathering:
                    self._gathering.wait(lambda: self._batch_bytes < self.buffer_size and self._state == "loaded")
                    self._gathering.served(self._gathering.take())
                ops = self._batch
                self._batch = []
                self._batch_bytes = 0
                end = self._taken_bytes = self.appended_bytes
                need_env_sync = durable and not env_syncs
            committed = synced = False
            try:
                if ops:
                    self._write_batch(ops)
                committed = True
                if need_env_sync:
                    self._env.sync(True)
                    synced = True
            except StoreFullError:
                with self._lock:            # nothing was committed: the records wait for room
                    self._batch[:0] = ops
                    self._batch_bytes += sum(ENTRY_OVERHEAD_BYTES + self._op_body_bytes(op) for op in ops)
                raise
            except lmdb.Error as exc:
                failure = JournalFailedError(f"LMDB failed in {self.directory}: {exc}",
                                             hint="reopen the store; every commit before the failure is recovered")
                with self._lock:
                    self._failure = failure
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

    @staticmethod
    def _op_body_bytes(op: tuple) -> int:
        if op[0] in (_ADD, _UPDATE):
            return len(op[3])
        if op[0] == _PREPARE:
            return len(op[2])
        return 0

    def _write_batch(self, ops: list, *, initialize: bool = False) -> None:
        """One LMDB write transaction for the batch; the map doubles and the batch is retried on MapFullError."""
        while True:
            try:
                with self._env.begin(write=True) as txn:
                    if initialize:
                        txn.put(FORMAT_KEY, FORMAT_TAG, db=self._meta)
                    next_sequence = self._apply(txn, ops)
                    if next_sequence is not None:
                        txn.put(NEXT_SEQUENCE_KEY, RECORD_ID.pack(next_sequence), db=self._meta)
                self.commit_count += 1
                return
            except lmdb.MapFullError:
                self._grow_map()
            except lmdb.Error as exc:
                if self._is_full_disk(exc, ops):
                    raise StoreFullError(f"the disk holding {self.directory} is full: {exc}",
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
            stats = os.statvfs(self.directory)
        except OSError:
            return False
        needed = 2 * sum(ENTRY_OVERHEAD_BYTES + self._op_body_bytes(op) for op in ops) + LMDB_FULL_DISK_SLACK_BYTES
        return stats.f_bavail * stats.f_frsize < needed

    def _apply(self, txn, ops: list) -> int | None:
        """Write the batch's operations into an open write transaction; returns the next sequence number."""
        records, updates, slots, prepared = self._records, self._updates, self._slots, self._prepared
        replaceable = self.replaceable_types
        pack_id = RECORD_ID.pack
        pack_id_seq = RECORD_ID_SEQUENCE.pack
        put = txn.put
        last_sequence = None
        for op in ops:
            kind = op[0]
            if kind == _UPDATE:
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
            elif kind == _ADD:
                put(pack_id(op[1]), bytes((op[2],)) + op[3], db=records)
            elif kind == _DELETE:
                key = pack_id(op[1])
                txn.delete(key, db=records)
                for db in (updates, slots):
                    cursor = txn.cursor(db=db)
                    if cursor.set_range(key):
                        while cursor.key()[:8] == key:
                            if not cursor.delete():
                                break
            elif kind == _PREPARE:
                put(pack_id(op[1]), op[2], db=prepared)
            elif kind == _FORGET_PREPARED:
                txn.delete(pack_id(op[1]), db=prepared)
            else:
                raise AssertionError(f"unknown batch operation {op!r}")
        return None if last_sequence is None else last_sequence + 1

    def _grow_map(self) -> None:
        """Double the map (readers of this process wait for the resize; none is in a read transaction)."""
        current = self._env.info()["map_size"]
        if current >= self.map_size_max:
            raise StoreFullError(f"the LMDB map of {self.directory} is full at {current} bytes (map_size_max)",
                                 hint="raise map_size_max, or delete records")
        new_size = min(current * 2, self.map_size_max)
        self._set_map_size(new_size)
        self.map_resize_count += 1
        log.info("LMDB map of %s grown to %d bytes", self.directory, new_size)

    def _set_map_size(self, size: int) -> None:
        """env.set_mapsize once no reader of this process is in a read transaction (they wait meanwhile);
        0 adopts the size another process's writer grew the map to."""
        with self._gate:
            self._resizing = True
            while self._readers:
                self._gate.wait()
        try:
            self._env.set_mapsize(size)
        finally:
            with self._gate:
                self._resizing = False
                self._gate.notify_all()

    def _begin_read(self):
        """A read transaction, this reader counted in (``_leave_read`` after it ends). An inspection
        beside another process's writer finds the map grown by that writer (MDB_MAP_RESIZED): it
        adopts the new size and begins again."""
        while True:
            self._enter_read()
            try:
                return self._env.begin(write=False, buffers=False)
            except lmdb.MapResizedError:
                self._leave_read()
                self._set_map_size(0)
            except BaseException:
                self._leave_read()
                raise

    def _read(self):
        return _ReadTransaction(self._begin_read, self._leave_read)

    def _enter_read(self) -> None:
        """Count a reader in (waiting while the map is being resized)."""
        with self._gate_lock:
            if not self._resizing:
                self._readers += 1
                return
        with self._gate:
            while self._resizing:
                self._gate.wait()
            self._readers += 1

    def _leave_read(self) -> None:
        with self._gate_lock:
            self._readers -= 1
            if self._resizing and not self._readers:
                self._gate.notify_all()

    # ----- the group-commit flusher --------------------------------------------------------------------
    def _run_flusher(self) -> None:
        """Commits the batch within buffer_timeout_us of its first record (at once when urgent)."""
        timeout_s = self.buffer_timeout_us / 1e6
        while True:
            with self._lock:
                while self._state == "loaded" and not self._batch and self._failure is None:
                    self._wake_flusher.wait()
                if self._state != "loaded" or self._failure is not None:
                    return
                if not self._urgent:
                    self._wake_flusher.wait(LMDB_FULL_DISK_RETRY_S if self._full_since else timeout_s)
                self._urgent = False
                if self._state != "loaded":
                    return
                target = self.appended_bytes
            try:
                self._commit_to(target, durable=True, gather=False)
                self._full_since = 0.0
            except StoreFullError as exc:
                if not self._full_since:
                    log.error("%s", exc)
                self._full_since = time.monotonic()
            except JournalError as exc:
                log.error("group commit of %s failed: %s", self.directory, exc)
                return


class _ReadTransaction:
    """An LMDB read transaction that holds off a map resize while it is open (and waits for one): the
    store hands over how it begins one and how it lets a reader go (``_begin_read``, ``_leave_read``)."""

    __slots__ = ("begin", "leave", "txn")

    def __init__(self, begin: Callable[[], Any], leave: Callable[[], None]) -> None:
        self.begin = begin
        self.leave = leave
        self.txn = None

    def __enter__(self):
        self.txn = self.begin()
        return self.txn

    def __exit__(self, *exc) -> None:
        try:
            self.txn.abort()
        finally:
            self.leave()
