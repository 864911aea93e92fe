"""LmdbRecordStore: the record-store interface (storage/protocol.py) on one LMDB environment.

For users who want random reads of stored records, or who already run LMDB; the journal
stays the default (docs/backends.md says when to pick which).

The store is the protocol's face and its in-memory tables; each of its parts has a module:

* format.py: the layout on disk (the files, the five databases, their keys);
* environment.py: the LMDB environment, made durably and opened per sync mode, its map that grows
  by itself, and the read gate (every read is an LMDB read transaction over a snapshot);
* batch.py: the in-memory batch and the group commit (GroupCommitter), which writes a batch in one
  LMDB write transaction and says what each sync mode makes durable;
* prepared.py: a prepared transaction as the ``prepared`` database holds it.

Replaceable updates (``replaceable_types={type: key_bytes}``) are overwritten in place:
a new one deletes the update its slot points at and takes a new sequence number, so the
store holds one per (record, type, key) — the latest, at the position it was written —
and ``record_type_counts()`` counts one per reference from the start.

Writes go to the in-memory batch first (checked against the in-memory set of live ids, so
errors are raised at the call, as by the journal), and one LMDB write transaction commits
a whole batch: the group commit. Transactions (add_tx, ...) stay in memory until commit(),
which puts their records into the batch together, so one LMDB transaction holds all or
none of them; a prepared transaction is written to ``prepared`` and returned by load().
"""
from __future__ import annotations

import asyncio
import errno
import os
import threading
import time
from operator import attrgetter

from ..._impl import RecordInfo
from ...errors import (
    ConfigError,
    DuplicateRecordError,
    IncompatibleFormatError,
    JournalClosedError,
    JournalError,
    JournalIOError,
    JournalLockedError,
    UnknownRecordError,
    UnknownTransactionError,
)
from ...limits import (BUFFER_SIZE_DEFAULT_BYTES, BUFFER_TIMEOUT_DEFAULT_US, LMDB_BODY_BYTES_MAX,
                      LMDB_MAP_SIZE_DEFAULT_BYTES, LMDB_MAP_SIZE_MAX_DEFAULT_BYTES, LMDB_MAP_SIZE_MIN_BYTES,
                      RECORD_TYPE_MAX, SYNC_MODE_DEFAULT, U64_MAX, check_id)
from ...record_format import RecordKind
from ..directory_lock import DirectoryLock
from ..protocol import LoadReport, LoadResult, PreparedTransaction, TransactionRecord
from ..lifecycle import StoreLifecycle
from ..group_commit import check_durability_settings
from ..sync_mode import SyncMode
from ..directory_kind import stored_backend
from .environment import Environment, log          # first: it names the lmdb package when it is missing
from .batch import OP_ADD, OP_DELETE, OP_FORGET_PREPARED, OP_PREPARE, OP_UPDATE, GroupCommitter
from .format import DATA_FILE, FORMAT_KEY, FORMAT_TAG, LOCK_FILE, NEXT_SEQUENCE_KEY, RECORD_ID
from .prepared import TX_ADD, TX_DELETE, TX_KIND_NAMES, TX_UPDATE, decode_prepared, encode_prepared


def _check_type(record_type: int) -> None:
    if not 0 <= record_type <= RECORD_TYPE_MAX:
        raise ValueError(f"record_type={record_type}: must be within 0..{RECORD_TYPE_MAX}")


def _as_body(body) -> bytes:
    data = body if type(body) is bytes else bytes(body)
    if len(data) > LMDB_BODY_BYTES_MAX:
        from ...errors import RecordTooLargeError
        raise RecordTooLargeError(f"a record body of {len(data)} bytes is larger than {LMDB_BODY_BYTES_MAX}")
    return data


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
        self._lock = threading.Lock()       # the live ids, the transactions and the batch (GroupCommitter)
        self._live: set[int] = set()
        self._pending_tx: dict[int, _Transaction] = {}
        self._next_sequence = 0
        self._state = "new"

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
        try:
            self._env = Environment(self.directory, map_size=map_size, map_size_max=map_size_max,
                                    max_readers=max_readers, sync_mode=self.sync_mode, read_only=self.read_only,
                                    writer_present=self._writer_present)
        except JournalError:
            self._release_lock_file()
            raise
        self._commits = GroupCommitter(self._lock, self._env, sync_mode=self.sync_mode,
                                       replaceable_types=replaceable, buffer_size=buffer_size,
                                       buffer_timeout_us=buffer_timeout_us)

    def _release_lock_file(self) -> None:
        if self._directory_lock is not None:
            self._directory_lock.release()

    def close(self) -> None:
        """Commit and sync what was appended, stop the flusher, close the environment."""
        if self._state == "closed":
            return
        try:
            commits = self._commits
            if self._state == "loaded" and commits.failure is None:
                try:
                    commits.commit_to(commits.appended_bytes, durable=True)
                except JournalError as exc:
                    log.error("final commit failed on close of %s: %s", self.directory, exc)
        finally:
            with self._lock:
                self._state = "closed"
                self._commits.stop_locked()
            self._commits.join()
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
        env = self._env
        records: dict[int, RecordInfo] = {}
        prepared = []
        with env.read() as txn:
            tag = txn.get(FORMAT_KEY, db=env.meta)
            if tag is not None and tag != FORMAT_TAG:
                raise IncompatibleFormatError(f"the LMDB store was written as {tag!r}, this version reads "
                                              f"{FORMAT_TAG!r}", path=data_path, field="meta/format",
                                              hint="open it with the version of journal_engine that wrote it")
            if tag is None and (txn.stat(env.records)["entries"] or txn.stat(env.updates)["entries"]):
                raise IncompatibleFormatError("the LMDB environment holds records but no format tag",
                                              path=data_path, field="meta/format",
                                              hint="the LMDB store needs its own directory")
            next_sequence = txn.get(NEXT_SEQUENCE_KEY, db=env.meta)
            self._next_sequence = RECORD_ID.unpack(next_sequence)[0] if next_sequence is not None else 0
            from_bytes = int.from_bytes
            heads = {}
            for key, value in txn.cursor(db=env.records).iternext():
                heads[from_bytes(key, "big")] = (value[0], value[1:], [])
            orphans: dict[int, int] = {}
            for key, value in txn.cursor(db=env.updates).iternext():
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
            for key, value in txn.cursor(db=env.prepared).iternext():
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
            self._commits.write_format()
        self._state = "loaded"
        self._commits.start()
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
        commits = self._commits
        if commits.pending_bytes >= commits.limit_bytes:
            commits.make_room()
        return data

    def add(self, record_id: int, record_type: int, body, *, sync: bool | None = None) -> None:
        """Make a new record live (DuplicateRecordError if the id is live)."""
        data = self._checked_body(record_id, record_type, body)
        commits = self._commits
        with self._lock:
            if self._state != "loaded" or commits.failure is not None:
                self._check_writable()
            if record_id in self._live:
                raise DuplicateRecordError(f"record {record_id} is already live; update or delete it first")
            self._live.add(record_id)
            target = commits.append_locked((OP_ADD, record_id, record_type, data), len(data))
        if sync is not None or self.sync_mode.records_wait or commits.pending_bytes > self.buffer_size:
            commits.after_append(target, sync)

    def update(self, record_id: int, record_type: int, body, *, sync: bool | None = None) -> None:
        """Append an update to a live record; a replaceable type replaces the previous one of its key."""
        data = self._checked_body(record_id, record_type, body)
        commits = self._commits
        with self._lock:
            if self._state != "loaded" or commits.failure is not None:
                self._check_writable()
            if record_id not in self._live:
                raise UnknownRecordError(f"cannot update record {record_id}: no live record has that id")
            sequence = self._next_sequence
            self._next_sequence = sequence + 1
            target = commits.append_locked((OP_UPDATE, record_id, record_type, data, sequence), len(data))
        if sync is not None or self.sync_mode.records_wait or commits.pending_bytes > self.buffer_size:
            commits.after_append(target, sync)

    def delete(self, record_id: int, *, sync: bool | None = None) -> None:
        """Remove a live record and all its updates."""
        check_id(record_id)
        commits = self._commits
        commits.make_room()
        with self._lock:
            self._check_writable()
            if record_id not in self._live:
                raise UnknownRecordError(f"cannot delete record {record_id}: no live record has that id")
            self._live.discard(record_id)
            target = commits.append_locked((OP_DELETE, record_id), 0)
        commits.after_append(target, sync)

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
                    ops.append((OP_ADD, record_id, record_type, data))
                elif kind == RecordKind.UPDATE:
                    ops.append((OP_UPDATE, record_id, record_type, data, self._next_sequence))
                    self._next_sequence += 1
                else:
                    ops.append((OP_DELETE, record_id))
                body_bytes += len(data)
            for record_id, live in changed.items():
                if live:
                    self._live.add(record_id)
                else:
                    self._live.discard(record_id)
            target = self._commits.append_many_locked(ops, body_bytes)
        self._commits.after_append(target, sync)

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
        commits = self._commits
        commits.make_room()
        with self._lock:
            self._check_writable()
            transaction = self._pending_tx.get(tx_id)
            if transaction is None:
                raise UnknownTransactionError(f"cannot prepare transaction {tx_id}: it has no records")
            if transaction.xid is not None:
                raise UnknownTransactionError(f"transaction {tx_id} is already prepared")
            encoded = encode_prepared(xid_bytes, transaction.ops)
            transaction.xid = xid_bytes
            target = commits.append_locked((OP_PREPARE, tx_id, encoded), len(encoded))
        commits.after_append(target, self._tx_sync(sync))

    def commit(self, tx_id: int, *, sync: bool | None = None) -> None:
        """Apply the transaction's records; one LMDB write transaction holds all of them."""
        check_id(tx_id)
        commits = self._commits
        commits.make_room()
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
                        ops.append((OP_DELETE, record_id))
                    live.add(record_id)
                    ops.append((OP_ADD, record_id, record_type, body))
                elif record_id not in live:
                    continue                       # deleted meanwhile: nothing to update or delete
                elif kind == TX_UPDATE:
                    ops.append((OP_UPDATE, record_id, record_type, body, self._next_sequence))
                    self._next_sequence += 1
                else:
                    live.discard(record_id)
                    ops.append((OP_DELETE, record_id))
                size += len(body)
            if transaction.xid is not None:
                ops.append((OP_FORGET_PREPARED, tx_id))
            target = commits.append_many_locked(ops, size)
        commits.after_append(target, self._tx_sync(sync))

    def rollback(self, tx_id: int, *, sync: bool | None = None) -> None:
        """Drop the transaction's records (nothing of an unprepared transaction was written)."""
        check_id(tx_id)
        with self._lock:
            self._check_writable()
            transaction = self._pending_tx.pop(tx_id, None)
            if transaction is None:
                raise UnknownTransactionError(f"cannot roll back transaction {tx_id}: it has no records")
            target = self._commits.appended_bytes
            if transaction.xid is not None:
                target = self._commits.append_locked((OP_FORGET_PREPARED, tx_id), 0)
        self._commits.after_append(target, self._tx_sync(sync))

    def sync(self) -> None:
        """Return once everything appended before the call is durable."""
        with self._lock:
            self._check_writable()
            target = self._commits.appended_bytes
        self._commits.commit_to(target, durable=True)

    async def sync_async(self) -> None:
        """``sync()`` for coroutines: runs it on the running loop's default executor (a thread of its
        pool while LMDB commits), so the loop goes on meanwhile."""
        await asyncio.get_running_loop().run_in_executor(None, self.sync)

    def flush(self) -> None:
        """Return once everything appended before the call is committed to LMDB (survives a killed
        process). In "group" and "always" modes a commit is durable, so this is a sync."""
        with self._lock:
            self._check_writable()
            target = self._commits.appended_bytes
        self._commits.commit_to(target, durable=False)

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
        commits = self._commits
        if not committed_only and commits.written_bytes < commits.appended_bytes:
            commits.commit_to(commits.appended_bytes, durable=False)
        key = RECORD_ID.pack(record_id)
        env = self._env
        with env.read() as txn:
            head = txn.get(key, db=env.records)
            if head is None:
                return None
            updates = []
            cursor = txn.cursor(db=env.updates)
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
        if self._state != "read-only":      # an inspection has nothing of its own to commit first
            self.flush()
        counts: dict[int, int] = {}
        env = self._env
        with env.read() as txn:
            for db in (env.records, env.updates):
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
            info, page_bytes = self._env.info(), self._env.page_bytes()
        with self._lock:
            return {
                "directory": self.directory,
                "backend": "lmdb",
                "sync_mode": self.sync_mode,
                "live_records": len(self._live),
                "pending_transactions": len(self._pending_tx),
                "batched_records": self._commits.batched_records,
                "appended_bytes": self._commits.appended_bytes,
                "written_bytes": self._commits.written_bytes,
                "durable_bytes": self._commits.durable_bytes,
                "commits": self._commits.commit_count,
                "syncs": self._commits.sync_count,
                "map_size": info["map_size"],
                "map_resizes": self._env.map_resize_count,
                "used_bytes": (info["last_pgno"] + 1) * page_bytes,
                "last_txnid": info["last_txnid"],
            }

    # ----- the counters: the group commit's (appended >= written, committed, >= durable) and the map's -------
    appended_bytes = property(attrgetter("_commits.appended_bytes"))
    written_bytes = property(attrgetter("_commits.written_bytes"))
    durable_bytes = property(attrgetter("_commits.durable_bytes"))
    commit_count = property(attrgetter("_commits.commit_count"))
    sync_count = property(attrgetter("_commits.sync_count"))
    map_resize_count = property(attrgetter("_env.map_resize_count"))

    # ----- writability ---------------------------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self._state == "read-only":
            raise JournalClosedError("the store was opened read-only (an inspection); it takes no writes")
        self._commits.check_writable()

    def _tx_sync(self, sync: bool | None) -> bool:
        return self.sync_mode.boundary_waits(sync)
