"""The Journal: the public face of the storage core (CONTRACT "Storage core").

The hot path (add/update/delete/..., sync) is inherited from the compiled
JournalCore; this module opens the directory, recovers it, feeds the writer
new files, runs the group-commit flusher and starts compactions.
"""
from __future__ import annotations

import errno
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable

from ..._impl import IMPLEMENTATION, JournalCore, Segment
from ...errors import ConfigError, FileChangedError, JournalClosedError, JournalError, JournalIOError
from ...limits import (BUFFER_SIZE_DEFAULT_BYTES, BUFFER_TIMEOUT_DEFAULT_US, COMPACT_MIN_FILES_DEFAULT,
                      COMPACT_PERCENTAGE_DEFAULT, COMPACT_PERCENTAGE_MAX, COMPACT_UPDATE_FACTOR,
                      FILE_SIZE_DEFAULT_BYTES, FILE_SIZE_MAX_BYTES, FILE_SIZE_MIN_BYTES, MIN_FILES_DEFAULT,
                      MIN_FILES_MIN, SECTOR_SIZE_BYTES, SYNC_MODE_DEFAULT, max_frame_bytes)
from ..group_commit import check_durability_settings
from ..sync_mode import SyncMode
from .. import durability
from . import checkpoint as checkpoints, compactor
from .format import FORMAT_VERSION, LOCK_FILE, FileHeader
from ...record_format import RecordKind
from .recovery import analyze, cut_short
from ..protocol import LoadResult, PreparedTransaction, TransactionRecord
from .scan import pinned
from ..directory_lock import DirectoryLock
from .durable_futures import DurableFutures
from .segment_files import DataFile, FilePool
from ..lifecycle import StoreLifecycle

log = logging.getLogger("journal_engine.storage.journal")



_TX_KIND_NAMES = {RecordKind.ADD_TX: "add", RecordKind.UPDATE_TX: "update", RecordKind.DELETE_TX: "delete"}


def _transactions_of(state) -> tuple[dict, list, list]:
    """(pending, prepared, incomplete) of a replay's open transactions: the core's pending records by
    tx id, the prepared transactions with their bodies, the ids of those never prepared."""
    pending: dict = {}
    prepared: list = []
    incomplete: list = []
    for tx_id, (ops, xid, _path, _offset) in state.transactions.items():
        pending[tx_id] = [[(kind, record_id, size, user_type) for kind, record_id, user_type, _location, size in ops],
                          xid]
        if xid is None:
            incomplete.append(tx_id)
        else:
            prepared.append(_prepared_transaction(state, tx_id, ops, xid))
    return pending, prepared, incomplete


def _prepared_transaction(state, tx_id: int, ops: list, xid: bytes) -> PreparedTransaction:
    """A prepared transaction of a replay, its records' bodies read from the replay's columns."""
    return PreparedTransaction(tx_id, xid, [
        TransactionRecord(_TX_KIND_NAMES[kind], record_id, user_type, state.body(location))
        for kind, record_id, user_type, location, _size in ops])


def _check_config(file_size, min_files, sync, buffer_timeout_us, buffer_size, compact_min_files,
                  compact_percentage) -> None:
    if not isinstance(file_size, int) or not FILE_SIZE_MIN_BYTES <= file_size <= FILE_SIZE_MAX_BYTES:
        raise ConfigError("file_size", file_size,
                          f"must be an integer within {FILE_SIZE_MIN_BYTES}..{FILE_SIZE_MAX_BYTES}")
    if file_size % SECTOR_SIZE_BYTES:
        raise ConfigError("file_size", file_size, f"must be a multiple of {SECTOR_SIZE_BYTES}")
    if not isinstance(min_files, int) or min_files < MIN_FILES_MIN:
        raise ConfigError("min_files", min_files, f"must be an integer >= {MIN_FILES_MIN}")
    check_durability_settings(sync, buffer_timeout_us, buffer_size)
    if not isinstance(compact_min_files, int) or compact_min_files < 0:
        raise ConfigError("compact_min_files", compact_min_files, "must be >= 0 (0 turns automatic compaction off)")
    if not isinstance(compact_percentage, int) or not 0 <= compact_percentage <= COMPACT_PERCENTAGE_MAX:
        raise ConfigError("compact_percentage", compact_percentage, f"must be within 0..{COMPACT_PERCENTAGE_MAX}")


class Journal(JournalCore, StoreLifecycle):
    """A segmented, append-only, crash-safe journal of records in one directory.

    Open it, call ``load()`` once (it recovers what the directory holds and returns it), append,
    ``close()`` (or use it as a context manager). One Journal holds a directory at a time: a second
    one, in this process or another, raises ``JournalLockedError``.

    Arguments (keyword-only after ``directory``; each bad value raises ``ConfigError``):

    * ``directory``: created if absent.
    * ``file_size``: bytes per journal file, a multiple of 4096 within 64 KiB..2 GiB; default
      10 MiB. A record must fit one file (else ``RecordTooLargeError``).
    * ``min_files``: the fewest journal files the directory keeps, created ahead of need (a full
      file is never waited for), at least 2; default 2.
    * ``sync``: ``"always"`` (every append waits for fdatasync), ``"group"`` (default: appends
      return at once, a background flusher syncs within ``buffer_timeout_us``, ``sync=True``
      callers share one fdatasync) or ``"none"`` (nothing waits; the operating system writes back).
    * ``buffer_timeout_us``: microseconds, 0..10 s; default 500. In group mode, the least time
      between the starts of two of the flusher's syncs (Artemis's journal-buffer-timeout): an append
      after a quiet spell is synced at once, one in a steady stream waits for the flusher at most
      this long (plus the sync already on the disk); and how long a sync leader waits to gather more.
    * ``buffer_size``: bytes of the append buffer (allocated once at open), at least 4096;
      default 490 KiB. More unsynced bytes than this make the flusher sync at once.
    * ``compact_min_files``: compaction starts only past this many data files; 0 turns automatic
      compaction off; default 10.
    * ``compact_percentage``: 0..100; default 30. Compact when live bytes fall below this
      percentage of the data files' bytes.
    * ``replaceable_types``: {user record type: key bytes}; updates of such a type whose first
      key bytes of body match replace each other, and compaction drops the older ones. Default none.
    * ``pool_files``: free files kept for reuse after compaction, an integer >= 0; default
      ``min_files``. The rest are deleted.

    The record API, inherited from the compiled core (``journal_engine/_core.pyi`` types it):
    ``add(record_id, record_type, body, *, sync=None)``, ``update(...)``, ``delete(record_id, *,
    sync=None)``, ``add_tx`` / ``update_tx`` / ``delete_tx(tx_id, ...)``, ``prepare(tx_id, xid, *,
    sync=None)``, ``commit`` / ``rollback(tx_id, *, sync=None)`` return None; ``sync()`` returns
    once everything appended before it is durable, ``flush()`` once it survives a killed process;
    ``is_live(record_id)`` -> bool. Record ids and tx ids are u64, record types 0..255, bodies any
    bytes-like object. ``sync=None`` lets the mode decide; ``True`` waits for a shared fdatasync;
    transaction boundaries sync unless the mode is ``"none"``. They raise ``JournalClosedError``
    before ``load()`` or after ``close()``, ``JournalFailedError`` once a write or sync failed
    (reopen to recover what was synced), ``DuplicateRecordError`` / ``UnknownRecordError`` for an
    id that is / is not live, ``UnknownTransactionError``, ``RecordTooLargeError``,
    ``StoreFullError`` (disk full; the journal stays usable), ``ValueError`` / ``OverflowError``
    for a record type or id out of range.

    Thread safety: the record API, ``sync()``, ``flush()``, ``stats()``, ``needs_compaction()``,
    ``record_type_counts()`` and ``compact()`` may run from several threads at once (appends are
    serialised by the GIL, concurrent sync waiters share one fdatasync, compactions take a lock
    and run beside appends). ``load()`` runs once, before any append; ``close()`` once, after the
    appending threads are done (an append racing it raises ``JournalClosedError``).
    """

    # the group-mode flusher syncs without the GIL while it can (JournalCore._core_flusher_wait); False
    # makes it take the GIL for every sync, as it did before: the base of the lag benchmark
    _flusher_without_gil = True

    def __init__(self, directory, *, file_size: int = FILE_SIZE_DEFAULT_BYTES, min_files: int = MIN_FILES_DEFAULT,
                 sync: str = SYNC_MODE_DEFAULT, buffer_timeout_us: int = BUFFER_TIMEOUT_DEFAULT_US,
                 buffer_size: int = BUFFER_SIZE_DEFAULT_BYTES, compact_min_files: int = COMPACT_MIN_FILES_DEFAULT,
                 compact_percentage: int = COMPACT_PERCENTAGE_DEFAULT, read_only: bool = False,
                 replaceable_types: dict | None = None, pool_files: int | None = None) -> None:
        """Check the arguments (units and defaults: the class docstring), create the directory and
        lock it; nothing is read or written until ``load()``.

        Raises ``ConfigError`` for a bad argument, ``JournalLockedError`` when another Journal holds
        the directory, ``JournalIOError`` when it cannot be created or locked (read-only: when it
        does not exist).
        """
        super().__init__()
        if pool_files is not None and (not isinstance(pool_files, int) or pool_files < 0):
            raise ConfigError("pool_files", pool_files, "must be an integer >= 0 (None: min_files)")
        _check_config(file_size, min_files, sync, buffer_timeout_us, buffer_size, compact_min_files,
                      compact_percentage)
        self.directory = os.fspath(directory)
        self.file_size = file_size
        self.min_files = min_files
        self.sync_mode = SyncMode.named(sync)
        self.buffer_timeout_us = buffer_timeout_us
        self.buffer_size = buffer_size
        self.compact_min_files = compact_min_files
        self.compact_percentage = compact_percentage
        # free files kept for reuse after compaction (Artemis journal-pool-files); the rest are deleted
        self.pool_files = min_files if pool_files is None else pool_files
        # record type -> how many leading body bytes name what the update replaces (e.g. a queue id)
        self.replaceable_types = dict(replaceable_types or {})
        self._core_configure(self.sync_mode, buffer_size, max_frame_bytes(file_size), self.replaceable_types,
                             buffer_timeout_us)
        self._state = "new"
        self._data_files: list[DataFile] = []
        self._pool: FilePool | None = None
        self._flusher: threading.Thread | None = None
        self._flusher_start = threading.Lock()
        self._durable_futures = DurableFutures()     # the async callers' futures (the asyncio face)
        self._compaction_lock = threading.Lock()
        # data files load found damaged (or a compaction found cut, overwritten or gone): compaction
        # refuses them, so the evidence and whatever could still be read from them stay on disk
        self._damaged_paths: set[str] = set()
        self._pin_releasers: list = []          # see add_pin_releaser
        self._checkpoint = None                 # the checkpoint load() took its columns from, kept until close
        self._checkpoint_written: set[str] = set()     # files appended to since load(): their images are stale
        self._compaction_thread: threading.Thread | None = None
        self.compaction_count = 0
        self.last_compaction_error: BaseException | None = None
        self.recovery_seconds: float | None = None     # how long load() took (stats(), the metrics)
        self.read_only = bool(read_only)
        self._read_only_stats: dict = {}
        if self.read_only:
            # an inspection: nothing is created, locked, truncated, rolled back or written
            if not os.path.isdir(self.directory):
                raise JournalIOError(f"no journal directory at {self.directory}", errno=errno.ENOENT,
                                     path=self.directory, hint="check the path; read_only=True creates nothing")
            self._directory_lock = None
            return
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as exc:
            raise durability.io_error(exc, self.directory, "creating the journal directory") from exc
        self._directory_lock = DirectoryLock(self.directory, LOCK_FILE, "Journal")
        self._close_at_exit()     # a journal left open is closed, its checkpoint saved, before teardown

    # ----- recovery ---------------------------------------------------------------------------
    def load(self, *, copy: bool = False) -> LoadResult:
        """Replay every file; return the live records, prepared transactions and a report.

        Bodies (``RecordInfo.body`` and its updates', prepared transactions' records) are read-only
        ``Body`` views into the mapped data files: bytes-like, hashable, equal to the bytes they hold,
        and the caller may keep them -- each keeps its file mapped and pinned (never recycled by a
        compaction) while it lives. Nothing is copied until a body is read as bytes, so recovery
        costs the files' pages in the page cache, not a copy of every body in the process's memory.
        ``copy=True`` returns owned ``bytes`` instead: pick it when the bodies must outlive changes
        other processes make to the files (a view of a file another process truncates raises
        FileChangedError when copied, and a read through its buffer may die of SIGBUS), or when
        holding them must not pin files. A read-only journal's views are not protected from a writer
        in another process, which may recycle a file under them: an inspection beside a live writer
        that keeps its bodies past the load passes ``copy=True``. The Python twin always returns bytes.

        After a clean ``close()`` it replays each data file from the columns that close saved (the
        checkpoint, ``journal.jck``) once the file's bytes CRC32C to what they were then, instead of
        decoding every frame: the same result, at the speed of a checksum (``report.checkpointed_files``;
        docs/internals/format.md, "The checkpoint").

        Recovery acts on what it finds (docs/internals/recovery.md): it finishes an interrupted
        compaction, erases a torn tail (``report.torn_tail_truncated``), rolls back transactions that
        were never prepared or committed (``report.rolled_back``), and reports damage followed by
        valid records in ``report.corrupt`` (also logged and warned as RuntimeWarning) instead of
        failing. Appends are accepted once it returns.

        Runs once, right after opening, before any other thread uses the journal. Raises
        ``JournalError`` when called twice or after ``close()``, ``CorruptRecordError`` (or
        ``IncompatibleFormatError``) for a file that is not a journal file of this format,
        ``JournalIOError`` / ``StoreFullError`` when reading or preparing the files fails.
        """
        if self._state != "new":
            raise JournalError("load() runs once, right after opening" if self._state in ("loaded", "read-only")
                               else "the journal is closed")
        started = time.perf_counter()
        if self.read_only:
            return self._load_read_only(started, copy)
        compactor.recover(self.directory)
        # the checkpoint of the last clean close, taken (its name removed) whether or not this load uses
        # it: the appends to come make it stale, and a crash must find none (storage/journal/checkpoint.py)
        checkpoint = checkpoints.take(self.directory)
        try:
            analysis = analyze(self.directory, self.replaceable_types, remove_temporary=True, copy=copy,
                               checkpoint=checkpoint)
        except BaseException:
            if checkpoint is not None:
                checkpoint.put_back()     # a load that refuses the directory leaves it as it was
            raise
        while True:     # at most twice: the second analysis takes nothing from the checkpoint
            try:
                pending, prepared, incomplete = _transactions_of(analysis.state)   # the last columns load reads
                if checkpoint is None or not checkpoint.cut:
                    break
            except FileChangedError as cut:
                if checkpoint is None or cut.path != checkpoint.path:
                    raise
            # another holder of its inode cut it while the replay read its columns (zeros, maybe):
            # the analysis is made again from the files alone, which nothing of the first one changed
            log.warning("the checkpoint %s was cut while the load read it (a hard link or a descriptor to it): "
                        "every file is decoded", checkpoint.path)
            checkpoint = None
            analysis = analyze(self.directory, self.replaceable_types, remove_temporary=True, copy=copy)
        listing, state, ends, last, report = (analysis.listing, analysis.state, analysis.ends,
                                              analysis.last_with_data, analysis.report)
        next_id = listing.max_id + 1
        self._pool = FilePool(self.directory, self.file_size, next_id, listing.free,
                              ready_target=max(1, self.min_files - 1), pool_files=self.pool_files)
        # a file that holds no frame after the last one with data is ready for the writer as it is
        ready = listing.data[last + 1:] if last >= 0 else listing.data
        self._data_files = listing.data[:last + 1]
        for data in ready:
            if data.size == self.file_size and data.header.version == FORMAT_VERSION:
                self._pool.add_ready(Segment(data.path, data.header.file_id, data.header.sequence,
                                             data.size, data.header.data_start))
            else:
                self._pool.reclaim(data.path, data.header.file_id)
        for data in self._data_files[:-1]:
            durability.fdatasync_path(data.path)   # what load reports is durable before anything new is written
        if last >= 0:
            data = listing.data[last]
            end, _check = ends[last]
            if report.torn_tail_truncated or cut_short(data):
                full_size = data.header.file_size or max(data.size, self.file_size)
                durability.zero_fill(data.path, end, full_size)
                data.size = full_size
            durability.fdatasync_path(data.path)
            active = Segment(data.path, data.header.file_id, data.header.sequence, data.size, end)
        else:
            active = self._pool.take()
            self._data_files = [DataFile(active.path, _header_of(active), active.size)]
        files_present = len(self._data_files) + self._pool.ready_count() + self._pool.free_count()
        for _ in range(self.min_files - files_present):
            self._pool.add_free(self._pool.create_free_file())

        self._core_install(active, state.live, pending, len(state.live), state.replaceable_updates,
                           self._next_segment)
        # what the next clean close's checkpoint may copy from this one: every file but the active one,
        # which this load (a torn tail erased, transactions rolled back) and the appends to come change
        self._checkpoint = checkpoint if report.checkpointed_files else None
        self._checkpoint_written = {active.path}
        self._state = "loaded"
        self._core_seal_tail()
        for tx_id in incomplete:
            self.rollback(tx_id, sync=True)
        report.rolled_back = incomplete
        self._damaged_paths = {path for path, _offset, _reason in report.corrupt}
        if last >= 0 and listing.data[last].header.version != FORMAT_VERSION:
            # an older version's file is continued by nothing this version writes (a record group
            # there would be misread by that version's reader): appends go to a new file
            self._core_force_roll(lambda: self._next_segment(0))
        self._pool.start()
        if self.sync_mode.flushes_in_background:
            self._start_flusher()
        report.duration_s = time.perf_counter() - started
        self.recovery_seconds = report.duration_s
        for path, offset, reason in report.corrupt:
            log.error("journal damage in %s at offset %d: %s", path, offset, reason)
            warnings.warn(f"journal damage in {path} at offset {offset}: {reason}", RuntimeWarning, stacklevel=2)
        if report.torn_tail_truncated:
            log.warning("torn tail truncated in %s at offset %d", *report.torn_tail)
        return LoadResult(records=state.records, prepared=prepared, report=report)

    def _load_read_only(self, started: float, copy: bool) -> LoadResult:
        """load() of an inspection: the same records, prepared transactions and damage a writing load
        would return, with nothing changed on disk. A committed compaction is read as if finished;
        a torn tail is reported (``torn_tail``) but not erased (``torn_tail_truncated`` stays False);
        incomplete transactions are listed in ``report.incomplete_transactions``, not rolled back."""
        analysis = analyze(self.directory, self.replaceable_types, as_if_compacted=True, copy=copy)
        state, report = analysis.state, analysis.report
        report.torn_tail_truncated = False
        prepared = []
        for tx_id, (ops, xid, _path, _offset) in state.transactions.items():
            if xid is None:
                report.incomplete_transactions.append(tx_id)
            else:
                prepared.append(_prepared_transaction(state, tx_id, ops, xid))
        self._data_files = analysis.listing.data
        self._read_only_stats = {"live_records": len(state.records), "live_bytes": state.live.total_bytes,
                                 "add_count": state.adds, "replaceable_updates": state.replaceable_updates,
                                 "pending_transactions": len(state.transactions)}
        self._state = "read-only"
        report.duration_s = time.perf_counter() - started
        return LoadResult(records=state.records, prepared=prepared, report=report)

    # ----- hooks the core calls ---------------------------------------------------------------
    def _next_segment(self, needed: int) -> Segment:
        self._directory_lock.check()    # the next file is taken by path: still the directory locked?
        segment = self._pool.take()
        self._data_files.append(DataFile(segment.path, _header_of(segment), segment.size))
        self._maybe_compact()
        return segment

    def _run_flusher(self) -> None:
        """Group mode: nothing appended waits for a sync longer than buffer_timeout_us (the least time
        between two of the flusher's syncs) plus the sync on the disk. The core kicks this thread
        when an append finds it idle (state 0 -> 1) and again when more than buffer_size waits
        (state 2), which ends the wait early. In any mode it also serves the
        async callers: after each sync, every future now durable is resolved, one hand-over per
        event loop; while futures wait it syncs again at once (appends made during a sync form
        the next batch)."""
        timeout_s = self.buffer_timeout_us / 1e6
        futures = self._durable_futures
        failed = False
        while self._state == "loaded":
            if not futures:
                self._core_flusher_wait(timeout_s, self._flusher_without_gil)
                if self._state != "loaded":
                    return
            self._flusher_state = 0
            batch = futures.take() if futures else None     # the sync below covers every append they wait for
            try:
                self.sync()
            except JournalClosedError as exc:
                if batch:
                    futures.fail(batch, exc)
                return
            except JournalError as exc:
                if not failed:
                    log.error("journal flusher: the journal failed: %s", exc)
                    failed = True
                if batch:
                    futures.fail(batch, exc)    # and stay, so later async callers get the error too
                continue
            if batch:
                futures.resolve(batch)

    def _start_flusher(self) -> None:
        """The flusher thread, started by load() in group mode and by the first async caller in the
        other modes."""
        with self._flusher_start:
            if self._flusher is None and self._state == "loaded":
                self._flusher = threading.Thread(target=self._run_flusher, name="journal-flusher", daemon=True)
                self._flusher.start()

    # ----- the asyncio face ------------------------------------------------------------------------
    # Each call appends at once, as its synchronous twin with sync=False does, then waits without
    # blocking the event loop until what it appended is durable, in every sync mode: the flusher
    # thread syncs and resolves the futures (storage/journal/durable_futures.py). Call them from coroutines
    # of any number of event loops, beside threads using the synchronous API.

    async def add_async(self, record_id: int, record_type: int, body) -> None:
        """``add()``, returning once the record is durable."""
        self._flusher_state = 2         # urgent before the append: see _durable
        self.add(record_id, record_type, body, sync=False)
        await self._durable(self.appended_bytes)

    async def update_async(self, record_id: int, record_type: int, body) -> None:
        """``update()``, returning once the update is durable."""
        self._flusher_state = 2         # urgent before the append: see _durable
        self.update(record_id, record_type, body, sync=False)
        await self._durable(self.appended_bytes)

    async def delete_async(self, record_id: int) -> None:
        """``delete()``, returning once the delete is durable."""
        self._flusher_state = 2         # urgent before the append: see _durable
        self.delete(record_id, sync=False)
        await self._durable(self.appended_bytes)

    async def append_group_async(self, records) -> None:
        """``append_group()``, returning once the whole group is durable."""
        self._flusher_state = 2         # urgent before the append: see _durable
        self.append_group(records, sync=False)
        await self._durable(self.appended_bytes)

    async def commit_async(self, tx_id: int) -> None:
        """``commit()``, returning once the commit is durable."""
        self._flusher_state = 2         # urgent before the append: see _durable
        self.commit(tx_id, sync=False)
        await self._durable(self.appended_bytes)

    async def sync_async(self) -> None:
        """``sync()`` for coroutines: returns once everything appended before the call is durable."""
        if self._state != "loaded":
            raise JournalClosedError("the journal is closed or not loaded")
        await self._durable(self.appended_bytes)

    async def _durable(self, target: int) -> None:
        if self.durable_bytes >= target:
            return                      # a sync already covered it: no future, no hand-over
        future = self._durable_futures.waiter()
        if self._flusher is None:
            self._start_flusher()
        # urgent: the flusher returns to resolve the futures after the next sync, not after its window.
        # The async calls mark the state urgent before they append, too: a flusher woken by their
        # append as by any would otherwise sync it on its own, and the futures would wait for another.
        self._core_kick()
        await future

    # ----- compaction ---------------------------------------------------------------------------
    def needs_compaction(self) -> bool:
        """The Artemis trigger (``compaction_due``) on this journal's numbers now."""
        return compaction_due(len(self._data_files), self.file_size, self.live_bytes, self.add_count,
                              self.replaceable_update_count, self.compact_min_files, self.compact_percentage)

    def _maybe_compact(self) -> None:
        if self._compaction_thread is not None and self._compaction_thread.is_alive():
            return
        if not self.needs_compaction():
            return
        self._compaction_thread = threading.Thread(target=self._compact_in_background, name="journal-compactor",
                                                   daemon=True)
        self._compaction_thread.start()

    def _compact_in_background(self) -> None:
        try:
            self.compact()
        except Exception as exc:   # reported through stats(); the journal keeps working uncompacted
            if repr(exc) != repr(self.last_compaction_error):      # logged once, not at every file switch
                log.error("automatic compaction failed: %s", exc)
            self.last_compaction_error = exc

    def compact(self, *, accept_damage: bool = False) -> None:
        """Rewrite the live records of every file before the active one; crash-safe.

        Frees the space of deleted records and of replaced updates (``replaceable_types``); a crash
        at any step leaves either the old files or the new ones (the next ``load()`` finishes it).
        Runs automatically on a background thread when ``needs_compaction()``; a call may come from
        any thread while others append, and waits for a compaction already running. Returns None;
        raises ``JournalClosedError`` before ``load()`` or after ``close()``, ``JournalIOError`` /
        ``StoreFullError`` when writing the new files fails (the old ones stay in use).

        A data file that is damaged -- reported by ``load()``, or cut short, overwritten or removed by
        another process since -- makes it raise ``CorruptRecordError`` naming the file, before anything
        is written: compacting would drop the records past the damage with no trace, and the next load
        would be clean. ``accept_damage=True`` compacts anyway, keeping what can be read (a deliberate
        choice after ``journal-engine verify`` and a copy of the damaged files).
        """
        if self.read_only:
            raise JournalError("a read-only journal is never compacted", hint="open it with read_only=False")
        if self._state != "loaded":
            raise JournalClosedError("the journal is closed or not loaded")
        with self._compaction_lock:
            self._directory_lock.check()    # compaction writes its files by path
            compactor.compact(self, accept_damage=accept_damage)
            self.compaction_count += 1

    def data_files(self) -> list[DataFile]:
        """The data files in replay order (the compactor's sources)."""
        return list(self._data_files)

    def damaged_files(self) -> set[str]:
        """Paths of data files known to be damaged (compaction refuses them)."""
        return set(self._damaged_paths)

    def mark_damaged(self, path: str) -> None:
        """A compaction found `path` damaged: later compactions refuse it without reading it again."""
        self._damaged_paths.add(path)

    def replace_data_files(self, replaced_paths: list[str], outputs: list[DataFile]) -> None:
        """A compaction committed: `outputs` take the place of the files at `replaced_paths`
        (in replay order: outputs carry the sequences of files they replace). Idempotent."""
        gone = set(replaced_paths) | {data.path for data in outputs}
        self._damaged_paths -= gone
        kept = [data for data in self._data_files if data.path not in gone]
        self._data_files = sorted(list(outputs) + kept, key=lambda data: data.header.sequence)

    def add_pin_releaser(self, release: Callable[[str], object]) -> None:
        """``release(path)`` is called when a compaction reclaims a data file that body views of
        load() still map: a holder of views that can copy the bodies it still needs out of that
        file (the message store's recovered messages) lets the mapping go, and the file is recycled
        after all. It runs on the compacting thread; an exception it raises is logged, and the file
        stays pinned."""
        self._pin_releasers.append(release)

    def reclaim_file(self, data_path: str, file_id: int) -> None:
        """A data file compaction replaced goes back to the file pool (or is deleted). A file a body
        view of load() still maps -- once the pin releasers had their turn -- is deleted, never
        recycled: its name goes at once, its pages when the last view does (the mapping keeps them),
        and no view ever reads a recycled file's new life."""
        if pinned(data_path):
            for release in self._pin_releasers:
                try:
                    release(data_path)
                except Exception as exc:     # a file cut meanwhile (FileChangedError): it stays pinned
                    log.error("releasing the views into %s failed: %s", data_path, exc)
        if pinned(data_path):
            durability.unlink(data_path)
            return
        self._pool.reclaim(data_path, file_id)

    def allocate_file_id(self) -> int:
        """A file id never used in this directory (the compactor's outputs take one each)."""
        return self._pool.allocate_id()

    def roll_for_compaction(self) -> Segment:
        """Switch to a fresh file so every older data file is immutable; returns the new active."""
        return self._core_force_roll(lambda: self._next_segment(0))

    def compaction_committed(self, replaced_paths: list[str], outputs: list[DataFile], rewritten_sizes: dict,
                             replayed_sizes, replaceable_dropped: int) -> None:
        """A compaction reached its commit point: `outputs` replace the files at `replaced_paths`, each
        rewritten record's live bytes move from what the replay of the replaced files counted
        (`replayed_sizes`) to what the outputs hold (`rewritten_sizes`: record id -> bytes; a record
        deleted meanwhile stays gone), and the replaceable updates the outputs dropped leave the count
        the compaction trigger reads."""
        self.replace_data_files(replaced_paths, outputs)
        # a compaction replaces every file before the active one: the checkpoint the load took has no image
        # left that the next one could keep, and its mapping (and the disk space of its removed name) goes
        self._checkpoint = None
        live = self._core_live()
        for record_id, size in rewritten_sizes.items():
            if record_id in live:
                live[record_id] = live[record_id] + size - replayed_sizes[record_id]
        self._core_reset_replaceable(max(0, self.replaceable_update_count - replaceable_dropped))

    # ----- inspection ---------------------------------------------------------------------------
    def record_type_counts(self) -> dict[int, int]:
        """Adds and updates of each user record type that a load() would replay now (live records
        only); replaced updates count until a compaction drops them. Syncs, then reads the files:
        an inspection tool, not a hot path; exact when no other thread appends meanwhile."""
        if self._state == "read-only":
            records = analyze(self.directory, self.replaceable_types, as_if_compacted=True).state.records
            return _count_types(records)
        if self._state != "loaded":
            raise JournalClosedError("the journal is closed or not loaded")
        with self._compaction_lock:
            self.sync()
            records = analyze(self.directory, self.replaceable_types).state.records
        return _count_types(records)

    def stats(self) -> dict:
        """Counters and sizes for inspection: files (data, ready, free), live records and bytes,
        records appended, appended and durable bytes, syncs, the group commit's histograms of batch
        bytes and lag (``{"bounds", "counts", "sum"}``, see ``limits.COMMIT_BATCH_BUCKETS_BYTES``),
        pending transactions, the active file and position, compactions, the last automatic
        compaction's error and how long the load took. Any thread, any time; the numbers are read
        without a lock, so they may be a moment apart while others append."""
        if self._state == "read-only":
            return {"directory": self.directory, "read_only": True, "implementation": IMPLEMENTATION,
                    "data_files": len(self._data_files), "file_size": self.file_size, **self._read_only_stats}
        active = self._core_active()
        histograms = self._core_commit_histograms()
        return {
            "directory": self.directory,
            "sync_mode": self.sync_mode,
            "implementation": IMPLEMENTATION,
            "data_files": len(self._data_files),
            "ready_files": self._pool.ready_count() if self._pool else 0,
            "free_files": self._pool.free_count() if self._pool else 0,
            "file_size": self.file_size,
            "live_records": len(self._core_live()),
            "live_bytes": self.live_bytes,
            "add_count": self.add_count,
            "replaceable_updates": self.replaceable_update_count,
            "pending_transactions": len(self._core_pending()),
            "appended_bytes": self.appended_bytes,
            "durable_bytes": self.durable_bytes,
            "syncs": self.sync_count,
            "appends": self.append_count,
            "commit_batch_bytes": histograms["batch_bytes"],
            "commit_lag_ns": histograms["lag_ns"],
            "recovery_seconds": self.recovery_seconds,
            "active_file": active.path if active is not None else None,
            "active_position": active.position if active is not None else None,
            "compactions": self.compaction_count,
            "needs_compaction": self.needs_compaction() if self._state == "loaded" else False,
            "last_compaction_error": repr(self.last_compaction_error) if self.last_compaction_error else None,
        }

    # ----- closing --------------------------------------------------------------------------------
    def close(self) -> None:
        """Sync what was appended, stop the background threads, save the checkpoint, release the directory.

        Idempotent; returns None. A failure of the final sync is logged, not raised (what was synced
        before it is recovered by the next ``load()``). Once everything is durable it saves the
        checkpoint the next ``load()`` replays from (docs/internals/format.md): files the load took
        from the last one keep their saved columns, the files written since are decoded now (about a
        second a 1.5 GB written). A checkpoint that cannot be saved is logged, not raised: the next
        load decodes every file. Call it once the appending threads are done:
        an append racing it raises ``JournalClosedError``. A journal the program leaves open is closed
        at interpreter exit, by an ``atexit`` hook (storage/lifecycle.py), checkpoint included.
        """
        if self._state == "closed":
            return
        clean = False       # everything appended is durable: the checkpoint may be written
        try:
            if self._state == "loaded":
                if self._compaction_thread is not None:
                    self._compaction_thread.join()
                batch = self._durable_futures.take()
                try:
                    self.sync()
                    self._durable_futures.resolve(batch)
                    clean = True
                except JournalError as exc:
                    log.error("final sync failed on close: %s", exc)
                    self._durable_futures.fail(batch, exc)
        finally:
            was_loaded = self._state == "loaded"
            self._state = "closed"
            self._core_close()
            self._core_kick()
            with self._flusher_start:
                flusher = self._flusher
            if flusher is not None:
                flusher.join()
            self._durable_futures.fail(self._durable_futures.take(),
                                       JournalClosedError("the journal closed before the record was durable"))
            if clean:
                self._save_checkpoint()
            if was_loaded and self._pool is not None:
                self._pool.close()
            if self._directory_lock is not None:
                self._directory_lock.release()

    def _save_checkpoint(self) -> None:
        """A clean close saves every data file's columns for the next load (storage/journal/checkpoint.py). A
        failure only costs the next load a decode of every file: it is logged, never raised."""
        try:
            self._directory_lock.check()
            checkpoints.save(self.directory, self._data_files, self._checkpoint, self._checkpoint_written)
        except Exception as exc:    # an accelerator's failure must not fail a close that made everything durable
            log.warning("no checkpoint was saved on close (the next load decodes every file): %s", exc)
        finally:
            self._checkpoint = None


def compaction_due(data_files: int, file_size: int, live_bytes: int, adds: int, replaceable_updates: int,
                   compact_min_files: int = COMPACT_MIN_FILES_DEFAULT,
                   compact_percentage: int = COMPACT_PERCENTAGE_DEFAULT) -> bool:
    """The Artemis trigger: more than compact_min_files data files and little live data, or
    replaceable updates outnumbering adds by COMPACT_UPDATE_FACTOR (also the tools' advice)."""
    if compact_min_files == 0 or data_files <= compact_min_files:
        return False
    if live_bytes < data_files * file_size * compact_percentage / 100:
        return True
    return adds > 0 and replaceable_updates / adds > COMPACT_UPDATE_FACTOR


def _header_of(segment: Segment) -> FileHeader:
    return FileHeader(segment.file_id, segment.sequence, file_size=segment.size)


def _count_types(records: dict) -> dict[int, int]:
    """Adds and updates of each user record type among live records."""
    counts: dict[int, int] = {}
    for rec in records.values():
        counts[rec.record_type] = counts.get(rec.record_type, 0) + 1
        for user_type, _body in rec.updates:
            counts[user_type] = counts.get(user_type, 0) + 1
    return counts
