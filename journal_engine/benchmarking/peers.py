"""The stores measured: ours (the journal, the LMDB record store, the broker on each) and the stores a
user would pick instead, each set up the way its own documentation advises.

Every store writes the same records: an 8-byte big-endian key (the record id) and a body of the
cell's size (workloads.body_of). Two layers:

* the peers themselves (``RawFile``, ``BufferedRawFile``, ``LmdbStore``, ``SqliteStore``,
  ``RocksStore``) with ``put(record_id, body)``, ``put_batch(first_id, count, body)``, ``scan()``,
  as the bench/ suite has always used them;
* the adapters the command's matrix runs (``APPEND_STORES``, ``QUEUE_STORES``, ``RECOVERY_STORES``):
  one object per store that opens it for a cell, commits, counts and closes.

Peers are imported when first opened, so that a missing one (``pip install '.[bench]'`` in the checkout)
is reported skipped with the import error instead of failing the run: ``unavailable(store)``.

Settings, and why they are fair (docs/benchmarks.md repeats them):

* ``RawFile``: ``os.write`` / ``os.pwrite`` of each record plus ``os.fdatasync``: what a Python
  program gets from the disk with no format at all. Preallocated (a file of real zeros, synced) is
  the faster variant on ext4 because fdatasync then has no file size to commit.
* ``BufferedRawFile``: ``file.write`` into a 490 KiB user-space buffer, no sync: the no-sync context
  for the journal's "none" mode, which also buffers that much.
* ``LmdbStore``: ``lmdb.open(sync=True, metasync=True)`` (one write transaction = fdatasync of the
  data pages, then of the meta page), ``writemap=True`` (fewer copies), ``append=True`` in batches
  where ids ascend (one thread). No-sync: ``sync=False, metasync=False`` (each commit still reaches
  the OS).
* ``SqliteStore``: stdlib ``sqlite3``, ``journal_mode=WAL``; ``synchronous=FULL`` for durable
  writes (the WAL is synced at every commit), ``OFF`` for no-sync. Autocommit per record; batches
  run ``executemany`` inside ``BEGIN``/``COMMIT``. Threads share one connection behind a lock
  (separate connections fight over the WAL write lock and back off in sleeps of whole milliseconds).
* ``RocksStore``: ``rocksdict.Rdict`` in raw mode (bytes keys and values), ``WriteOptions.sync``
  True for durable writes (WAL fdatasync per write), False for no-sync. Batches are a ``WriteBatch``.
* persist-queue: ``SQLiteQueue`` (WAL, SQLite's default ``synchronous=FULL``), ``auto_commit=False``
  with ``task_done()`` committing each batch; ``SQLiteAckQueue`` for the broker loops. It has no
  setting that skips the sync, so it sits out the no-sync cells (reported).
"""
from __future__ import annotations

import importlib
import math
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..limits import DATA_START_BYTES, FILE_SIZE_DEFAULT_BYTES, FRAME_HEADER_SIZE_BYTES, SECTOR_SIZE_BYTES
from .workloads import KEY, SYNC_DURABLE, SYNC_NONE, USER_TYPE, AppendCell, QueueCell, RecoveryCell

# the third-party module each store needs; PEER_MODULES is the one place the runner asks
PEER_MODULES = {"lmdb": "lmdb", "rocksdb": "rocksdict", "persist-queue": "persistqueue",
                "lmdb-store": "lmdb", "broker-lmdb": "lmdb"}
INSTALL_HINT = "pip install '.[bench]' in the journal_engine checkout"


def unavailable(store_name: str) -> str | None:
    """None when the store's module imports, else why not (the line the report prints)."""
    module = PEER_MODULES.get(store_name)
    if module is None:
        return None
    try:
        importlib.import_module(module)
    except Exception as exc:   # an ImportError, or a broken build raising anything at import
        return f"{module} does not import ({type(exc).__name__}: {exc}); {INSTALL_HINT}"
    return None


def _lmdb():
    return importlib.import_module("lmdb")


def _rocksdict():
    return importlib.import_module("rocksdict")


def _persistqueue():
    return importlib.import_module("persistqueue")


# ----- the peers ----------------------------------------------------------------------------------------------

class RawFile:
    """Records written straight to one file, optionally preallocated, synced with fdatasync."""

    name = "raw"

    def __init__(self, path: str, *, preallocate_bytes: int = 0, sync: bool = True) -> None:
        self.path = path
        self.sync = sync
        self.preallocated = preallocate_bytes > 0
        if self.preallocated:
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            zeros = bytes(1 << 20)
            written = 0
            while written < preallocate_bytes:
                written += os.write(self.fd, zeros[: min(len(zeros), preallocate_bytes - written)])
            os.fsync(self.fd)
            self.capacity = preallocate_bytes
        else:
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
            self.capacity = 0
        self.position = 0
        self._lock = threading.Lock()

    def write(self, body: bytes) -> None:
        """Hand one record to the OS (no sync)."""
        if self.preallocated:
            if self.position + len(body) > self.capacity:
                raise RuntimeError(f"{self.path}: preallocated {self.capacity} bytes are used up")
            os.pwrite(self.fd, body, self.position)
        else:
            os.write(self.fd, body)
        self.position += len(body)

    def put(self, record_id: int, body: bytes) -> None:
        """One record, then (when opened with sync) fdatasync: the raw write + sync loop."""
        self.write(body)
        if self.sync:
            os.fdatasync(self.fd)

    def put_threaded(self, record_id: int, body: bytes) -> None:
        """Thread-safe put: the offset is taken under a lock, the sync runs outside it."""
        self.put_batch_threaded(record_id, 1, body)

    def put_batch_threaded(self, first_id: int, count: int, body: bytes) -> None:
        """`count` records written under the lock (each at its own offset), one fdatasync outside it."""
        with self._lock:
            position = self.position
            self.position += count * len(body)
            if self.preallocated and self.position > self.capacity:
                raise RuntimeError(f"{self.path}: preallocated {self.capacity} bytes are used up")
            for index in range(count):
                if self.preallocated:
                    os.pwrite(self.fd, body, position + index * len(body))
                else:
                    os.write(self.fd, body)
        if self.sync:
            os.fdatasync(self.fd)

    def put_batch(self, first_id: int, count: int, body: bytes) -> None:
        write = self.write
        for _ in range(count):
            write(body)
        if self.sync:
            os.fdatasync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class BufferedRawFile:
    """Records written through a user-space buffer of the journal's buffer_size: Python's own
    ``open(..., buffering=n).write``. Like the journal's sync="none" mode, a record reaches the OS
    only when the buffer fills (or at flush/close)."""

    name = "raw-buffered"

    def __init__(self, path: str, *, buffer_bytes: int = 490 * 1024) -> None:
        self.file = open(path, "ab", buffering=buffer_bytes)
        self.position = 0

    def put(self, record_id: int, body: bytes) -> None:
        self.position += self.file.write(body)

    def close(self) -> None:
        self.file.close()


class LmdbStore:
    name = "lmdb"

    def __init__(self, path: str, *, sync: bool, map_size: int = 4 << 30) -> None:
        self.env = _lmdb().open(path, map_size=map_size, sync=sync, metasync=sync, writemap=True,
                                max_dbs=0, lock=True, readahead=True, meminit=False)

    def put(self, record_id: int, body: bytes) -> None:
        # no append=True: with several threads keys arrive out of order, and an append of a
        # smaller key is silently refused (put returns False) rather than stored
        with self.env.begin(write=True) as txn:
            if not txn.put(KEY.pack(record_id), body):
                raise RuntimeError(f"lmdb refused record {record_id}")

    put_threaded = put

    def put_batch(self, first_id: int, count: int, body: bytes, *, append: bool = True) -> None:
        """One write transaction of `count` records; `append` only where ids ascend across commits."""
        pack = KEY.pack
        with self.env.begin(write=True) as txn:
            put = txn.put
            for record_id in range(first_id, first_id + count):
                put(pack(record_id), body, append=append)

    def count(self) -> int:
        return self.env.stat()["entries"]

    def scan(self) -> int:
        """Cursor iteration over every key/value, as bytes (buffers=False copies them out)."""
        count = 0
        with self.env.begin(buffers=False) as txn:
            for _key, _value in txn.cursor():
                count += 1
        return count

    def scan_to_dict(self) -> int:
        """The same scan keeping every record (a load that returns the data holds it all at once)."""
        with self.env.begin(buffers=False) as txn:
            records = dict(txn.cursor())
        return len(records)

    def close(self) -> None:
        self.env.close()


class SqliteStore:
    name = "sqlite"

    def __init__(self, path: str, *, synchronous: str) -> None:
        if synchronous not in ("FULL", "NORMAL", "OFF"):
            raise ValueError(f"synchronous={synchronous!r}")
        self.synchronous = synchronous
        self.connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.connection.execute("PRAGMA journal_mode=WAL")
        self.connection.execute(f"PRAGMA synchronous={synchronous}")
        self.connection.execute("CREATE TABLE IF NOT EXISTS records (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
        self._insert = "INSERT INTO records (id, body) VALUES (?, ?)"
        self._lock = threading.Lock()

    def put(self, record_id: int, body: bytes) -> None:
        self.connection.execute(self._insert, (record_id, body))

    def put_threaded(self, record_id: int, body: bytes) -> None:
        with self._lock:
            self.connection.execute(self._insert, (record_id, body))

    def put_batch(self, first_id: int, count: int, body: bytes) -> None:
        connection = self.connection
        connection.execute("BEGIN")
        connection.executemany(self._insert, ((record_id, body) for record_id in range(first_id, first_id + count)))
        connection.execute("COMMIT")

    def put_batch_threaded(self, first_id: int, count: int, body: bytes) -> None:
        with self._lock:
            if count == 1:
                self.connection.execute(self._insert, (first_id, body))
            else:
                self.put_batch(first_id, count, body)

    def count(self) -> int:
        return self.connection.execute("SELECT count(*) FROM records").fetchone()[0]

    def scan(self) -> int:
        count = 0
        for _row in self.connection.execute("SELECT * FROM records"):
            count += 1
        return count

    def scan_to_dict(self) -> int:
        return len(dict(self.connection.execute("SELECT id, body FROM records")))

    def close(self) -> None:
        self.connection.close()


class RocksStore:
    name = "rocksdb"

    def __init__(self, path: str, *, sync: bool) -> None:
        rocksdict = _rocksdict()
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        self._rocksdict = rocksdict
        self.db = rocksdict.Rdict(path, options)
        self.write_options = rocksdict.WriteOptions()
        self.write_options.sync = sync
        self.db.set_write_options(self.write_options)

    def put(self, record_id: int, body: bytes) -> None:
        self.db.put(KEY.pack(record_id), body)

    put_threaded = put

    def count(self) -> int:
        """Exact, by iteration over keys only (used to check a round, never timed)."""
        count = 0
        for _key in self.db.keys():
            count += 1
        return count

    def put_batch(self, first_id: int, count: int, body: bytes) -> None:
        pack = KEY.pack
        batch = self._rocksdict.WriteBatch(raw_mode=True)
        put = batch.put
        for record_id in range(first_id, first_id + count):
            put(pack(record_id), body)
        self.db.write(batch)

    def flush(self) -> None:
        """Move the memtable into table files, as a long-running store would have."""
        self.db.flush(True)

    def scan(self) -> int:
        count = 0
        for _key, _value in self.db.items():
            count += 1
        return count

    def scan_to_dict(self) -> int:
        return len(dict(self.db.items()))

    def close(self) -> None:
        self.db.close()


# ----- the journal, opened with its files made before the clock starts -------------------------------------

def files_for(records: int, bytes_per_record: int, file_size: int = FILE_SIZE_DEFAULT_BYTES) -> int:
    """Data files a round of `records` frames of `bytes_per_record` bytes fills, plus one."""
    return math.ceil(records * bytes_per_record / (file_size - DATA_START_BYTES)) + 1


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(0.01)


def open_journal(directory: Path, *, sync: str, precreate_files: int = 0, min_files: int = 2):
    """A loaded journal; with precreate_files, that many empty data files are made and activated first.

    Pre-creation opens the journal once with min_files=precreate_files+1 and waits until its
    file pool has activated them all, then reopens it with `min_files`: the activated files are
    the writer's ready files, so the timed region neither creates nor activates a file. (Kept
    open with a large min_files, the pool would replace every file the writer takes, creating
    a new one in the background during the timed region.)
    """
    from .. import Journal
    if precreate_files:
        journal = Journal(directory, sync=sync, min_files=precreate_files + 1)
        try:
            journal.load()
            wait_for(lambda: journal.stats()["ready_files"] >= precreate_files, "the file pool")
        finally:
            journal.close()
    journal = Journal(directory, sync=sync, min_files=min_files)
    journal.load()
    if precreate_files:
        wait_for(lambda: journal.stats()["ready_files"] >= 1, "the file pool")
    return journal


def journal_frame_bytes(record_bytes: int) -> int:
    return FRAME_HEADER_SIZE_BYTES + (record_bytes + 7) // 8 * 8


# ----- the append matrix's adapters -----------------------------------------------------------------------------

class AppendStore:
    """One store in the append matrix. `open` returns a handle with commit(first_id, count, body),
    finish() (end of the timed round), count() and close()."""

    name = ""
    ours = False

    def supports(self, cell: AppendCell) -> str | None:
        """None, or why this store sits out the cell (printed in the report)."""
        return None

    def settings(self, cell: AppendCell) -> str:
        raise NotImplementedError

    def open(self, directory: Path, cell: AppendCell) -> Any:
        raise NotImplementedError


class _Handle:
    """An open store in the append matrix."""

    def __init__(self, commit, count, close, finish=None) -> None:
        self.commit = commit
        self.count = count
        self.close = close
        self.finish = finish or (lambda: None)


class _QueueHandle:
    """An open store in a broker loop: run() is the timed loop, check() the untimed check after it."""

    def __init__(self, run, check, close) -> None:
        self.run = run
        self.check = check
        self.close = close


class JournalAppend(AppendStore):
    name = "journal"
    ours = True

    def settings(self, cell):
        if cell.sync == SYNC_NONE:
            return 'Journal(sync="none"), add() per record, flush() at the end of the round'
        return (f'Journal(sync="group"), add() x {cell.records_per_sync - 1} then add(..., sync=True) per commit'
                if cell.records_per_sync > 1 else 'Journal(sync="group"), add(..., sync=True) per record')

    def open(self, directory, cell):
        # a synced commit ends on a sector boundary: at worst a sector per commit on top of the frames
        commits = cell.records // cell.records_per_sync
        needed = files_for(cell.records, journal_frame_bytes(cell.record_bytes)) + \
            (files_for(commits, SECTOR_SIZE_BYTES) if cell.sync == SYNC_DURABLE else 0)
        journal = open_journal(directory, sync="group" if cell.sync == SYNC_DURABLE else "none",
                               precreate_files=needed)
        commit = _adds_then_sync(journal.add, cell.sync == SYNC_DURABLE)
        return _Handle(commit, lambda: journal.stats()["live_records"], journal.close, journal.flush)


def _adds_then_sync(add, durable: bool):
    """One commit of our record stores: add() per record, sync=True on the last one when durable."""
    def commit(first_id: int, count: int, body: bytes) -> None:
        last = first_id + count - 1
        for record_id in range(first_id, last):
            add(record_id, USER_TYPE, body)
        add(last, USER_TYPE, body, sync=durable)

    return commit


class LmdbRecordStoreAppend(AppendStore):
    name = "lmdb-store"
    ours = True

    def settings(self, cell):
        mode = "group" if cell.sync == SYNC_DURABLE else "none"
        return f'LmdbRecordStore(sync="{mode}"), add() per record, sync=True on the last of each commit'

    def open(self, directory, cell):
        from ..storage.lmdb.store import LmdbRecordStore
        store = LmdbRecordStore(directory, sync="group" if cell.sync == SYNC_DURABLE else "none",
                                map_size=max(1 << 30, cell.records * cell.record_bytes * 4))
        store.load()
        commit = _adds_then_sync(store.add, cell.sync == SYNC_DURABLE)
        return _Handle(commit, lambda: store.stats()["live_records"], store.close, store.flush)


class RawFileAppend(AppendStore):
    name = "raw-file"

    def settings(self, cell):
        if cell.sync == SYNC_NONE:
            return "os.write(O_APPEND) per record, no sync"
        threads = "; threads write under a lock, fdatasync outside it" if cell.threads > 1 else ""
        return f"os.write(O_APPEND) x {cell.records_per_sync} + os.fdatasync per commit; the file grows{threads}"

    def open(self, directory, cell):
        raw = RawFile(str(directory / "raw.log"), sync=cell.sync == SYNC_DURABLE)
        commit = raw.put_batch_threaded if cell.threads > 1 else raw.put_batch
        return _Handle(commit, lambda: raw.position // cell.record_bytes, raw.close)


class SqliteAppend(AppendStore):
    name = "sqlite"

    def settings(self, cell):
        mode = "FULL" if cell.sync == SYNC_DURABLE else "OFF"
        how = "autocommit per record" if cell.records_per_sync == 1 else \
            f"BEGIN; executemany of {cell.records_per_sync}; COMMIT"
        threads = "; one connection shared behind a lock" if cell.threads > 1 else ""
        return f"sqlite3 journal_mode=WAL synchronous={mode}; {how}{threads}"

    def open(self, directory, cell):
        store = SqliteStore(str(directory / "sqlite.db"),
                            synchronous="FULL" if cell.sync == SYNC_DURABLE else "OFF")
        commit = store.put_batch_threaded if cell.threads > 1 else _commit_of(store, cell)
        return _Handle(commit, store.count, store.close)


def _commit_of(store, cell):
    """A key-value peer's commit of one cell's write: a put per record, or one batch of them."""
    if cell.records_per_sync == 1:
        def commit(first_id, count, body, put=store.put):
            put(first_id, body)
        return commit
    return store.put_batch


class RocksAppend(AppendStore):
    name = "rocksdb"

    def settings(self, cell):
        how = "one put per record" if cell.records_per_sync == 1 else \
            f"one WriteBatch of {cell.records_per_sync} per write"
        return f"rocksdict raw mode, WriteOptions.sync={cell.sync == SYNC_DURABLE} (WAL on); {how}"

    def open(self, directory, cell):
        store = RocksStore(str(directory / "rocks"), sync=cell.sync == SYNC_DURABLE)
        return _Handle(_commit_of(store, cell), store.count, store.close)


class LmdbAppend(AppendStore):
    name = "lmdb"

    def settings(self, cell):
        flags = "sync=True metasync=True" if cell.sync == SYNC_DURABLE else "sync=False metasync=False"
        return f"lmdb {flags} writemap=True; one write txn of {cell.records_per_sync} per commit"

    def open(self, directory, cell):
        store = LmdbStore(str(directory), sync=cell.sync == SYNC_DURABLE,
                          map_size=max(1 << 30, cell.records * cell.record_bytes * 4))
        append = cell.threads == 1   # ids ascend only within one thread

        def commit(first_id, count, body, put_batch=store.put_batch):
            put_batch(first_id, count, body, append=append)

        return _Handle(commit, store.count, store.close)


class PersistQueueAppend(AppendStore):
    name = "persist-queue"

    def supports(self, cell):
        if cell.sync == SYNC_NONE:
            return "persist-queue has no setting that skips the sync (SQLite synchronous=FULL)"
        if cell.records_per_sync > 1:
            # SQLiteQueue.put runs in `with connection:`, which commits, whatever auto_commit says
            # (auto_commit only defers the deletes of get()); ~1k records/s would take minutes here
            return "persist-queue commits and syncs every put(); it has no batch of several records per sync"
        return None

    def settings(self, cell):
        threads = "; one queue shared behind a lock" if cell.threads > 1 else ""
        return f"persistqueue.SQLiteQueue, put() per record (each put is a SQLite commit, synced){threads}"

    def open(self, directory, cell):
        # multithreading=True: the commits run in the round's writer threads, not the opening one
        queue = _persistqueue().SQLiteQueue(str(directory / "queue"), multithreading=True)
        lock = threading.Lock()
        put = queue.put

        def commit(first_id, count, body):
            with lock:
                put(body)

        # persist-queue has no close(): its connections close when the queue is collected
        return _Handle(commit, queue.qsize, lambda: None)


APPEND_STORES: tuple[AppendStore, ...] = (JournalAppend(), LmdbRecordStoreAppend(), RawFileAppend(), SqliteAppend(),
                                          RocksAppend(), LmdbAppend(), PersistQueueAppend())


# ----- the broker loops ------------------------------------------------------------------------------------------

class QueueStore:
    name = ""
    ours = False

    def settings(self, cell: QueueCell) -> str:
        raise NotImplementedError

    def open(self, directory: Path, cell: QueueCell, messages: int) -> Any:
        """A handle with run() (the timed loop of `messages` messages), check() and close()."""
        raise NotImplementedError


class BrokerQueue(QueueStore):
    ours = True

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.name = f"broker-{backend}"

    def settings(self, cell):
        if cell.operation == "send-receive-ack":
            return (f'Broker(store="{self.backend}", sync="group"): send, receive(0), ack per message, '
                    "durable; broker.sync() at the end")
        return (f'Broker(store="{self.backend}"): {cell.in_flight} durable messages in flight, each rolled back '
                "and redelivered (delay 0, max_delivery_attempts -1, max_redelivery_records 10)")

    def open(self, directory, cell, messages):
        from .. import AddressSettings, Broker
        broker = Broker(directory, store=self.backend)
        broker.create_queue("bench")
        consumer = broker.create_consumer("bench")
        from .workloads import body_of
        body = body_of(cell.record_bytes)
        if cell.operation == "send-receive-ack":
            send, receive, ack = broker.send, consumer.receive, consumer.ack

            def run():
                for _ in range(messages):
                    send("bench", body)
                    ack(receive(0))
                broker.sync()

            def check():
                info = broker.queue("bench")
                assert info.message_count == 0, f"{info.message_count} messages left"
        else:
            broker.address_settings.add("bench", AddressSettings(max_delivery_attempts=-1))
            for _ in range(cell.in_flight):
                broker.send("bench", body)
            broker.sync()
            receive, rollback = consumer.receive, consumer.rollback

            def run():
                for _ in range(messages // cell.in_flight):
                    delivered = [receive(0) for _ in range(cell.in_flight)]
                    for message in delivered:
                        rollback(message)
                broker.sync()

            def check():
                info = broker.queue("bench")
                assert (info.message_count, info.delivering_count) == (cell.in_flight, 0), info

        return _QueueHandle(run, check, broker.close)


class PersistQueueQueue(QueueStore):
    name = "persist-queue"

    def settings(self, cell):
        if cell.operation == "send-receive-ack":
            return "persistqueue.SQLiteAckQueue defaults (auto_commit: a commit per call): put, get, ack"
        return f"persistqueue.SQLiteAckQueue: {cell.in_flight} items in flight, get then nack each"

    def open(self, directory, cell, messages):
        from .workloads import body_of
        queue = _persistqueue().SQLiteAckQueue(str(directory / "queue"), multithreading=False)
        body = body_of(cell.record_bytes)
        if cell.operation == "send-receive-ack":
            put, get, ack = queue.put, queue.get, queue.ack

            def run():
                for _ in range(messages):
                    put(body)
                    ack(get(block=False))

            def check():
                assert queue.qsize() == 0
        else:
            for _ in range(cell.in_flight):
                queue.put(body)
            get, nack = queue.get, queue.nack

            def run():
                for _ in range(messages // cell.in_flight):
                    delivered = [get(block=False) for _ in range(cell.in_flight)]
                    for item in delivered:
                        nack(item)

            def check():
                assert queue.qsize() == cell.in_flight

        return _QueueHandle(run, check, lambda: None)


QUEUE_STORES: tuple[QueueStore, ...] = (BrokerQueue("journal"), BrokerQueue("lmdb"), PersistQueueQueue())


# ----- recovery -------------------------------------------------------------------------------------------------

class RecoveryStore:
    """fill(directory, cell) writes the records and closes (untimed); recover(directory) opens the store
    and reads every record back into memory (timed), returning how many it holds."""

    name = ""
    ours = False
    settings = ""

    def fill(self, directory: Path, cell: RecoveryCell, body: bytes) -> None:
        raise NotImplementedError

    def recover(self, directory: Path) -> int:
        raise NotImplementedError


class JournalRecovery(RecoveryStore):
    name = "journal"
    ours = True
    settings = "Journal(directory).load(): replays every file, returns every live record with its body"

    def fill(self, directory, cell, body):
        from .. import Journal
        with Journal(directory, sync="none") as journal:
            journal.load()
            add = journal.add
            for record_id in range(cell.records):
                add(record_id, USER_TYPE, body)

    def recover(self, directory):
        from .. import Journal
        with Journal(directory, read_only=True) as journal:
            return len(journal.load().records)


class LmdbRecordStoreRecovery(RecoveryStore):
    name = "lmdb-store"
    ours = True
    settings = "LmdbRecordStore(directory).load(): every live record with its body"

    def fill(self, directory, cell, body):
        from ..storage.lmdb.store import LmdbRecordStore
        store = LmdbRecordStore(directory, sync="none", map_size=max(1 << 30, cell.records * cell.record_bytes * 4))
        try:
            store.load()
            for record_id in range(cell.records):
                store.add(record_id, USER_TYPE, body)
            store.sync()
        finally:
            store.close()

    def recover(self, directory):
        from ..storage.lmdb.store import LmdbRecordStore
        store = LmdbRecordStore(directory, sync="none")
        try:
            return len(store.load().records)
        finally:
            store.close()


class RawFileRecovery(RecoveryStore):
    name = "raw-file"
    settings = "read the whole file and cut it into records (no format, no check)"

    def fill(self, directory, cell, body):
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / "raw.log", "wb") as handle:
            handle.write(body * cell.records)
        (directory / "record_bytes").write_text(str(len(body)))

    def recover(self, directory):
        size = int((directory / "record_bytes").read_text())
        data = (directory / "raw.log").read_bytes()
        return len([data[offset:offset + size] for offset in range(0, len(data), size)])


class _PeerRecovery(RecoveryStore):
    def _open(self, directory):
        raise NotImplementedError

    def fill(self, directory, cell, body):
        directory.mkdir(parents=True, exist_ok=True)
        store = self._open(directory)
        try:
            for first in range(0, cell.records, 10_000):
                store.put_batch(first, min(10_000, cell.records - first), body)
            if isinstance(store, RocksStore):
                store.flush()
        finally:
            store.close()

    def recover(self, directory):
        store = self._open(directory)
        try:
            return store.scan_to_dict()
        finally:
            store.close()


class SqliteRecovery(_PeerRecovery):
    name = "sqlite"
    settings = "dict(SELECT id, body FROM records), WAL checkpointed at close"

    def _open(self, directory):
        return SqliteStore(str(directory / "sqlite.db"), synchronous="FULL")


class RocksRecovery(_PeerRecovery):
    name = "rocksdb"
    settings = "Rdict open + dict(items()) after a flush to table files"

    def _open(self, directory):
        return RocksStore(str(directory / "rocks"), sync=False)


class LmdbRecovery(_PeerRecovery):
    name = "lmdb"
    settings = "lmdb open + dict(cursor) in a read txn"

    def _open(self, directory):
        return LmdbStore(str(directory), sync=False, map_size=1 << 30)


class PersistQueueRecovery(RecoveryStore):
    name = "persist-queue"
    settings = "persistqueue.SQLiteQueue open + queue(): every item, unpickled"

    def fill(self, directory, cell, body):
        queue = _persistqueue().SQLiteQueue(str(directory / "queue"))
        # every put() commits and syncs (~1 ms here): the untimed fill turns the sync off on the queue's
        # writing connection (no public setting), then checkpoints; recover() opens the queue afresh
        putter = getattr(queue, "_putter", None)
        if putter is not None:
            putter.execute("PRAGMA synchronous=OFF")
        put = queue.put
        for _ in range(cell.records):
            put(body)
        if putter is not None:
            putter.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def recover(self, directory):
        return len(_persistqueue().SQLiteQueue(str(directory / "queue"), auto_commit=False).queue())


RECOVERY_STORES: tuple[RecoveryStore, ...] = (JournalRecovery(), LmdbRecordStoreRecovery(), RawFileRecovery(),
                                              SqliteRecovery(), RocksRecovery(), LmdbRecovery(),
                                              PersistQueueRecovery())


def fresh_directory(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path
