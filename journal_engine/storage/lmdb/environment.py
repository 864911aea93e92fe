"""The LMDB store's environment: made durably, opened per sync mode, a map that grows, a read gate.

Opening, per sync mode (LMDB's own commit is the durable step; nothing else is needed): "group"
and "always" open it with ``sync=True, metasync=True`` (the LMDB default: a commit writes the data
pages, fdatasyncs, writes the meta page and fdatasyncs again, so a commit that returned is
durable); "none" with ``sync=True, metasync=False`` (MDB_NOMETASYNC: a commit syncs its data pages
and hands the meta page to the operating system unsynced; ``sync()`` syncs it: a power cut may
lose the last commits, never more, a meta page on disk only ever naming pages already synced).
(MDB_NOSYNC, which syncs nothing, let a meta page reach the disk before the pages it names -- LMDB
documents that a file system that reorders writes then corrupts the database; the crash harness's
power-loss mode found acknowledged records lost so.) A killed process loses nothing that was
committed. Always ``writemap=False`` (pages are written with pwrite, never dirtied in the shared
map, so a stray write through a pointer cannot reach the file) and ``meminit=False``.

An inspection (read-only) opens it without LMDB's lock file when no writer runs, and through the
writer's reader table (a slot in lock.mdb) when one does: a snapshot the writer's commits leave alone.

The map grows by itself: ``grow_map()`` doubles it with ``env.set_mapsize`` up to ``map_size_max``.
Readers of this process wait for a resize (the read gate: ``read()``); otherwise they never block
the writer, every read being an LMDB read transaction over a snapshot.
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

try:
    import lmdb
except ImportError as exc:          # an optional dependency: only this backend needs it
    raise ImportError(f"the LMDB record store needs the lmdb package ({exc}); pip install lmdb") from exc

from ...errors import IncompatibleFormatError, JournalIOError, JournalLockedError, StoreFullError
from ..durability import rename_durably, unlink
from ..sync_mode import SyncMode
from .format import DATA_FILE, DATABASES, NEW_DATA_FILE

#: the LMDB store's log (the environment's map growth, the group commit's failures)
log = logging.getLogger("journal_engine.message_store.lmdb")


def create_environment(directory: str, map_size: int) -> None:
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


class Environment:
    """The store's open LMDB environment and the handles of its databases (format.py)."""

    def __init__(self, directory: str, *, map_size: int, map_size_max: int, max_readers: int,
                 sync_mode: SyncMode, read_only: bool, writer_present: JournalLockedError | None) -> None:
        """Open the environment in `directory`, a writer creating it first (create_environment).
        ``writer_present``: an inspection found a writer holding the store (its refusal), so LMDB is
        read through that writer's reader table. JournalIOError when it cannot be created;
        IncompatibleFormatError when it is not this store's; JournalLockedError when an inspection
        cannot join the writer's reader table."""
        self.directory = directory
        self.map_size_max = map_size_max
        self.map_resize_count = 0
        self._readers = 0
        self._resizing = False
        self._gate_lock = threading.Lock()                  # readers against a map resize
        self._gate = threading.Condition(self._gate_lock)
        data_path = os.path.join(directory, DATA_FILE)
        durable = sync_mode.syncs     # "none": data pages synced at each commit, the meta page at sync()
        reader_table = not read_only or writer_present is not None
        try:
            if not read_only and not os.path.exists(data_path):
                create_environment(directory, map_size)
            self._env = lmdb.open(directory, map_size=map_size, subdir=True, max_dbs=len(DATABASES),
                                  sync=True, metasync=durable, writemap=False, meminit=False,
                                  max_readers=max_readers, lock=reader_table, readonly=read_only,
                                  create=not read_only)
        except lmdb.Error as exc:
            if writer_present is not None:
                raise self._refused_beside_writer(writer_present, exc) from None
            raise IncompatibleFormatError(f"not an LMDB environment this store can open: {exc}",
                                          path=data_path, hint="the LMDB store needs its own directory") from None
        try:
            if writer_present is not None:
                self._env.reader_check()        # slots left by killed inspections pin pages the writer would reuse
            with self.read() as txn:            # the main database holds only the names of ours
                strangers = [key for key, _value in txn.cursor() if key not in DATABASES]
            if strangers:
                raise lmdb.IncompatibleError(f"keys of another program in the main database: {strangers[:3]}")
            (self.records, self.updates, self.slots, self.prepared, self.meta) = (
                self._env.open_db(name) for name in DATABASES)
        except lmdb.Error as exc:
            self._env.close()
            raise IncompatibleFormatError(f"the LMDB environment does not hold this store's databases: {exc}",
                                          path=data_path, hint="the LMDB store needs its own directory") from None

    def _refused_beside_writer(self, writer_present: JournalLockedError, cause: BaseException) -> JournalLockedError:
        """An inspection that cannot join the reader table of the writer holding the store (lock.mdb
        not writable by this user, the table full): refused, naming the writer."""
        pid = writer_present.holder_pid
        writer = f"its writer (process {pid})" if pid is not None else "its writer"
        error = JournalLockedError(f"{self.directory} is held by {writer}; reading it beside the writer failed: "
                                   f"{cause}", hint="inspect it as a user who may write lock.mdb, or once the "
                                                    "writer stops")
        error.holder_pid = pid
        return error

    def close(self) -> None:
        self._env.close()

    # ----- writes ------------------------------------------------------------------------------------
    def begin_write(self) -> Any:
        """An LMDB write transaction (a context manager that commits, or aborts on an exception)."""
        return self._env.begin(write=True)

    def sync(self) -> None:
        """fdatasync the environment: in "none" mode, the meta pages its commits left to the OS."""
        self._env.sync(True)

    def info(self) -> dict:
        """LMDB's ``env.info()``: map_size, last_pgno, last_txnid, ..."""
        return self._env.info()

    def page_bytes(self) -> int:
        return self._env.stat()["psize"]

    # ----- the map -----------------------------------------------------------------------------------
    def grow_map(self) -> None:
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

    # ----- the read gate -----------------------------------------------------------------------------
    def read(self) -> _ReadTransaction:
        """``with environment.read() as txn:`` an LMDB read transaction that holds off a map resize."""
        return _ReadTransaction(self._begin_read, self._leave_read)

    def _begin_read(self) -> Any:
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


class _ReadTransaction:
    """An LMDB read transaction that holds off a map resize while it is open (and waits for one): the
    environment hands over how it begins one and how it lets a reader go (``_begin_read``, ``_leave_read``)."""

    __slots__ = ("begin", "leave", "txn")

    def __init__(self, begin: Callable[[], Any], leave: Callable[[], None]) -> None:
        self.begin = begin
        self.leave = leave
        self.txn = None

    def __enter__(self) -> Any:
        self.txn = self.begin()
        return self.txn

    def __exit__(self, *exc: object) -> None:
        try:
            self.txn.abort()
        finally:
            self.leave()
