"""The stores a journal_engine user would pick instead, each set up the way its own docs advise.

Every peer stores the same records: an 8-byte big-endian key (the record id) and a
256-byte body. Each class offers the operations the benchmark groups need:

* ``put(record_id, body)``: one record, one call, one commit (durable when the
  peer was opened durable);
* ``put_batch(first_id, count, body)``: `count` records in one transaction or
  batch, made durable by one sync at its end;
* ``scan() -> int``: read every key and value back as Python ``bytes``; returns the count.

Settings, and why they are fair (docs/benchmarks.md repeats them):

* ``RawFile``: ``os.write`` / ``os.pwrite`` of each record plus ``os.fdatasync``:
  what a Python program gets from the disk with no format at all. Preallocated
  (a file of real zeros, synced) is the faster variant on ext4 because
  fdatasync then has no file size to commit; both variants are measured.
* ``BufferedRawFile``: ``file.write`` into a 490 KiB user-space buffer, no sync:
  the no-sync context for the journal's "none" mode, which also buffers that much.
* ``LmdbStore``: ``lmdb.open(sync=True, metasync=True)`` (the durable default:
  one write transaction = fdatasync of the data pages, then of the meta page),
  ``writemap=True`` (fewer copies: the faster setting here, 4.2k vs 4.3k records/s
  single-threaded and better with threads), ``append=True`` in batches, where ids
  ascend. No-sync mode: ``sync=False,
  metasync=False`` (each commit still reaches the OS).
* ``SqliteStore``: stdlib ``sqlite3``, ``journal_mode=WAL``; ``synchronous=FULL``
  for durable cases (the WAL is synced at every commit), ``synchronous=OFF`` for
  the no-sync case (nothing waits for the disk, as with the journal's "none";
  each commit still reaches the OS). Autocommit per record; batches run
  ``executemany`` inside ``BEGIN``/``COMMIT``. A table ``(id INTEGER PRIMARY KEY, body BLOB)``.
  Threads share one connection behind a lock (sqlite3 releases the GIL while a
  statement runs); separate connections per thread fight over the WAL write lock
  and back off in sleeps of whole milliseconds.
* ``RocksStore``: ``rocksdict.Rdict`` in raw mode (bytes keys and values, no
  pickling), ``WriteOptions.sync = True`` for durable writes (WAL fdatasync per
  write; RocksDB groups concurrent writers' syncs itself), ``sync = False`` for
  the no-sync case (each write still reaches the OS through the WAL). Batches
  are a ``WriteBatch`` written once.
"""
from __future__ import annotations

import os
import sqlite3
import struct
import threading

import lmdb
import rocksdict

KEY = struct.Struct(">Q")


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
        with self._lock:
            position = self.position
            self.position += len(body)
        if self.preallocated:
            os.pwrite(self.fd, body, position)
        else:
            os.write(self.fd, body)
        os.fdatasync(self.fd)

    def put_batch(self, first_id: int, count: int, body: bytes) -> None:
        write = self.write
        for _ in range(count):
            write(body)
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
        self.env = lmdb.open(path, map_size=map_size, sync=sync, metasync=sync, writemap=True,
                             max_dbs=0, lock=True, readahead=True, meminit=False)

    def put(self, record_id: int, body: bytes) -> None:
        # no append=True: with several threads keys arrive out of order, and an append of a
        # smaller key is silently refused (put returns False) rather than stored
        with self.env.begin(write=True) as txn:
            if not txn.put(KEY.pack(record_id), body):
                raise RuntimeError(f"lmdb refused record {record_id}")

    put_threaded = put

    def put_batch(self, first_id: int, count: int, body: bytes) -> None:
        pack = KEY.pack
        with self.env.begin(write=True) as txn:
            put = txn.put
            for record_id in range(first_id, first_id + count):
                put(pack(record_id), body, append=True)   # ids ascend within a batch

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

    def count(self) -> int:
        return self.connection.execute("SELECT count(*) FROM records").fetchone()[0]

    def scan(self) -> int:
        count = 0
        for _row in self.connection.execute("SELECT * FROM records"):
            count += 1
        return count

    def close(self) -> None:
        self.connection.close()


class RocksStore:
    name = "rocksdb"

    def __init__(self, path: str, *, sync: bool) -> None:
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
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
        batch = rocksdict.WriteBatch(raw_mode=True)
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

    def close(self) -> None:
        self.db.close()
