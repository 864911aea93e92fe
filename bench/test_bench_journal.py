"""The storage core against its peers, 256-byte records, one benchmark group per operation.

Groups (docs/benchmarks.md gives the targets and the results):
  a. one sync per record, one thread;
  b. 16 threads, each record synced before its call returns;
  c. one sync per 1000 records;
  d. no sync, one call per record;
  e. load (recovery / full scan) of 1M records.
Every round writes or reads a fixed number of records, so records/s is exact.
Each round checks afterwards (untimed) that every record really landed.
"""
from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from peers import BufferedRawFile, LmdbStore, RawFile, RocksStore, SqliteStore
from workload import BODY, RECORD_BYTES, Rounds, close_and_check

from journal_engine import Journal
from journal_engine.benchmarking import workloads
from journal_engine.benchmarking.peers import files_for, open_journal
from journal_engine.benchmarking.peers import wait_for as _wait_for
from journal_engine.benchmarking.workloads import SYNC_DURABLE, AppendCell
from journal_engine.limits import FRAME_HEADER_SIZE_BYTES, SECTOR_SIZE_BYTES

FRAME_BYTES = FRAME_HEADER_SIZE_BYTES + RECORD_BYTES   # 288: 8-aligned already
THREADS = 16
USER_TYPE = 1

SYNC_PER_RECORD = 2_000          # (a) records per round
THREADED_PER_THREAD = 1_000      # (b) journal and raw file: 16 x 1000 records per round
THREADED_PER_THREAD_PEER = 250   # (b) LMDB, SQLite, RocksDB: 16 x 250 (each commit syncs alone: slow)
BATCH = 1_000                    # (c) records per sync
BATCHES = 100                    # (c) 100k records per round
NO_SYNC_JOURNAL = 1_000_000      # (d) journal and raw file
NO_SYNC_PEER = 200_000           # (d) LMDB, SQLite, RocksDB (slower: 200k keeps a round near a second)
LOAD_RECORDS = 1_000_000         # (e)
ROUNDS = 5                       # rounds of the fast cases; the slow peers run 3
ROUNDS_SYNC_PER_RECORD = 10      # (a) short rounds at the mercy of the disk's latency spikes: more of them

GROUP_A = "a: one sync per record"
GROUP_B = "b: 16 threads, sync per record"
GROUP_C = "c: one sync per 1000 records"
GROUP_D = "d: no sync, one call per record"
GROUP_E = "e: load 1M records"


# ----- the journal ----------------------------------------------------------------------------------
def append_each(journal: Journal, records: int) -> None:
    add = journal.add
    body = BODY
    for record_id in range(records):
        add(record_id, USER_TYPE, body)


# ----- peers --------------------------------------------------------------------------------------
Peers = dict[str, tuple[Callable[[Path], object], str]]     # name -> (its store in a directory, its settings)


def database_peers(sync: bool) -> Peers:
    """LMDB, SQLite and RocksDB, each write synced (``sync``) or none."""
    synchronous = "FULL" if sync else "OFF"
    return {
        "lmdb": (lambda d: LmdbStore(str(d), sync=sync),
                 f"lmdb sync={sync} metasync={sync} writemap=True; one write txn per record"),
        "sqlite": (lambda d: SqliteStore(str(d / "sqlite.db"), synchronous=synchronous),
                   f"sqlite3 journal_mode=WAL synchronous={synchronous}; autocommit per record"),
        "rocksdb": (lambda d: RocksStore(str(d / "rocks"), sync=sync),
                    f"rocksdict raw mode, WriteOptions.sync={sync}{'' if sync else ' (WAL on)'}; one put per record"),
    }


PEERS_DURABLE: Peers = {
    "raw-append": (lambda d: RawFile(str(d / "raw.log")),
                   "os.write(O_APPEND) + os.fdatasync; the file grows"),
    "raw-prealloc": (lambda d: RawFile(str(d / "raw.log"), preallocate_bytes=64 << 20),
                     "os.pwrite into a preallocated (zero-filled, synced) file + os.fdatasync"),
    **database_peers(sync=True),
}

PEERS_NO_SYNC: Peers = {
    "raw-append": (lambda d: RawFile(str(d / "raw.log"), sync=False), "os.write(O_APPEND) per record, no sync"),
    "raw-buffered": (lambda d: BufferedRawFile(str(d / "raw.log")),
                     "open(buffering=490 KiB).write per record, no sync (buffers as the journal's none mode does)"),
    **database_peers(sync=False),
}


def stored_count(store) -> int:
    if isinstance(store, (RawFile, BufferedRawFile)):
        return store.position // RECORD_BYTES
    return store.count()


def close_peer_and_check(store, records: int, directory: Path) -> None:
    try:
        count = stored_count(store)
    finally:
        store.close()
    shutil.rmtree(directory, ignore_errors=True)
    assert count == records, f"{type(store).__name__}: {count} records stored after a round of {records}"


def put_each(store, records: int) -> None:
    put = store.put
    body = BODY
    for record_id in range(records):
        put(record_id, body)


def fresh_store(rounds: Rounds, factory: Callable[[Path], object]):
    """A round's set-up: a fresh directory and the peer's store opened in it."""
    def setup():
        directory = rounds.fresh()
        return (factory(directory), directory), {}
    return setup


def rate_put_each(rate, case_dir, peer: str, factory: Callable[[Path], object], settings: str, records: int,
                  rounds: int) -> None:
    """A peer's case of one put per record (groups a and d); each round checks its count afterwards."""
    rate(lambda store, directory: put_each(store, records), setup=fresh_store(Rounds(case_dir), factory),
         teardown=lambda store, directory: close_peer_and_check(store, records, directory),
         records=records, case=peer, settings=settings, rounds=rounds)


def ThreadGang(put: Callable[[int, bytes], object], per_thread: int) -> workloads.ThreadGang:
    """THREADS threads of per-record puts, started in the untimed set-up, released together by run():
    the command's runner (journal_engine.benchmarking.workloads), one record per commit."""
    cell = AppendCell(RECORD_BYTES, 1, SYNC_DURABLE, THREADS, THREADS * per_thread)
    return workloads.ThreadGang(lambda first_id, count, body: put(first_id, body), cell, record_latency=False)


# ----- a. one sync per record ----------------------------------------------------------------------
@pytest.mark.benchmark(group=GROUP_A)
def test_a_journal_sync_always(rate, case_dir):
    rounds = Rounds(case_dir)
    records = SYNC_PER_RECORD
    # every sync pads to a 4 KiB sector, so each record takes a sector of file space
    files = files_for(records, SECTOR_SIZE_BYTES)

    def setup():
        directory = rounds.fresh()
        return (open_journal(directory, sync="always", precreate_files=files), directory), {}

    rate(lambda journal, directory: append_each(journal, records), setup=setup,
         teardown=lambda journal, directory: close_and_check(journal, records, directory),
         records=records, case="journal", rounds=ROUNDS_SYNC_PER_RECORD,
         settings=f'Journal(sync="always"), {files} files pre-created; add() per record')


@pytest.mark.benchmark(group=GROUP_A)
@pytest.mark.parametrize("peer", list(PEERS_DURABLE))
def test_a_peer_sync_per_record(rate, case_dir, peer):
    rate_put_each(rate, case_dir, peer, *PEERS_DURABLE[peer], records=SYNC_PER_RECORD, rounds=ROUNDS_SYNC_PER_RECORD)


# ----- b. 16 threads, each record synced -----------------------------------------------------------
@pytest.mark.benchmark(group=GROUP_B)
@pytest.mark.parametrize("files", ["precreated", "default"])
def test_b_journal_group_commit_16_threads(rate, case_dir, files):
    rounds = Rounds(case_dir)
    records = THREADS * THREADED_PER_THREAD
    # a synced batch ends on a sector boundary: a sector per record is the worst case (batches of one)
    needed = files_for(records, SECTOR_SIZE_BYTES)

    def setup():
        directory = rounds.fresh()
        journal = open_journal(directory, sync="group", precreate_files=needed if files == "precreated" else 0)
        add = journal.add

        def put(record_id: int, body: bytes) -> None:
            add(record_id, USER_TYPE, body, sync=True)

        return (ThreadGang(put, THREADED_PER_THREAD), journal, directory), {}

    how = (f"{needed} files pre-created as in (a)" if files == "precreated"
           else "default min_files=2: the pool creates the next file during the round")
    rate(lambda gang, journal, directory: gang.run(), setup=setup,
         teardown=lambda gang, journal, directory: close_and_check(journal, records, directory),
         records=records, case="journal" if files == "precreated" else "journal-default-files", rounds=ROUNDS,
         settings=f'Journal(sync="group"), {how}; 16 threads, add(..., sync=True)')


@pytest.mark.benchmark(group=GROUP_B)
@pytest.mark.parametrize("peer", ["raw-prealloc", "lmdb", "sqlite", "rocksdb"])
def test_b_peer_16_threads(rate, case_dir, peer):
    rounds = Rounds(case_dir)
    per_thread = THREADED_PER_THREAD if peer.startswith("raw") else THREADED_PER_THREAD_PEER
    records = THREADS * per_thread
    factory, settings = PEERS_DURABLE[peer]
    extra = {"raw-prealloc": "; each thread pwrite at its own offset + fdatasync",
             "sqlite": "; one connection shared behind a lock"}.get(peer, "")

    def setup():
        directory = rounds.fresh()
        store = factory(directory)
        return (ThreadGang(store.put_threaded, per_thread), store, directory), {}

    rate(lambda gang, store, directory: gang.run(), setup=setup,
         teardown=lambda gang, store, directory: close_peer_and_check(store, records, directory),
         records=records, case=peer, settings=f"16 threads; {settings}{extra}",
         rounds=ROUNDS if peer.startswith("raw") else 3)


# ----- c. one sync per 1000 records -----------------------------------------------------------------
@pytest.mark.benchmark(group=GROUP_C)
def test_c_journal_sync_per_1000(rate, case_dir):
    rounds = Rounds(case_dir)
    records = BATCH * BATCHES

    def setup():
        directory = rounds.fresh()
        return (open_journal(directory, sync="none"), directory), {}

    def batches(journal: Journal, directory: Path) -> None:
        add = journal.add
        sync = journal.sync
        body = BODY
        for first in range(0, records, BATCH):
            for record_id in range(first, first + BATCH):
                add(record_id, USER_TYPE, body)
            sync()

    rate(batches, setup=setup,
         teardown=lambda journal, directory: close_and_check(journal, records, directory),
         records=records, case="journal", rounds=ROUNDS,
         settings='Journal(sync="none") default min_files; add() x 1000, then sync()')


@pytest.mark.benchmark(group=GROUP_C)
@pytest.mark.parametrize("peer", ["raw-append", "lmdb", "sqlite", "rocksdb"])
def test_c_peer_sync_per_1000(rate, case_dir, peer):
    records = BATCH * BATCHES
    factory, settings = PEERS_DURABLE[peer]
    how = {"raw-append": "os.write x 1000, then os.fdatasync",
           "lmdb": "one write txn of 1000 append puts per commit",
           "sqlite": "BEGIN; executemany of 1000 rows; COMMIT",
           "rocksdb": "one WriteBatch of 1000 puts, written with sync"}[peer]

    def batches(store, directory: Path) -> None:
        put_batch = store.put_batch
        body = BODY
        for first in range(0, records, BATCH):
            put_batch(first, BATCH, body)

    rate(batches, setup=fresh_store(Rounds(case_dir), factory),
         teardown=lambda store, directory: close_peer_and_check(store, records, directory),
         records=records, case=peer, settings=f"{settings.split(';')[0]}; {how}", rounds=ROUNDS)


# ----- d. no sync, one call per record --------------------------------------------------------------
@pytest.mark.benchmark(group=GROUP_D)
@pytest.mark.parametrize("files", ["precreated", "min-files-kept", "default"])
def test_d_journal_no_sync(rate, case_dir, files):
    rounds = Rounds(case_dir)
    records = NO_SYNC_JOURNAL
    needed = files_for(records, FRAME_BYTES)
    settings = {
        "precreated": f"{needed} files pre-created and activated before the round; pool keeps 1 ready",
        "min-files-kept": f"min_files={needed + 1}: the pool keeps {needed} files ready and replaces each one "
                          "the writer takes (file creation in the background during the round)",
        "default": "default min_files=2: files created as the writer needs them",
    }[files]

    def setup():
        directory = rounds.fresh()
        if files == "precreated":
            journal = open_journal(directory, sync="none", precreate_files=needed)
        elif files == "min-files-kept":
            journal = open_journal(directory, sync="none", min_files=needed + 1)
            _wait_for(lambda: journal.stats()["ready_files"] >= needed, "the file pool")
        else:
            journal = open_journal(directory, sync="none")
        return (journal, directory), {}

    rate(lambda journal, directory: append_each(journal, records), setup=setup,
         teardown=lambda journal, directory: close_and_check(journal, records, directory),
         records=records, case=f"journal-{files}", rounds=ROUNDS,
         settings=f'Journal(sync="none"); add() per record; {settings}')


@pytest.mark.benchmark(group=GROUP_D)
@pytest.mark.parametrize("peer", list(PEERS_NO_SYNC))
def test_d_peer_no_sync(rate, case_dir, peer):
    raw = peer.startswith("raw")
    rate_put_each(rate, case_dir, peer, *PEERS_NO_SYNC[peer], records=NO_SYNC_JOURNAL if raw else NO_SYNC_PEER,
                  rounds=ROUNDS if raw else 3)


# ----- e. load 1M records ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def loaded_stores(bench_root):
    """1M records in each store, written once per run (untimed) and closed cleanly."""
    root = bench_root / "load-1M"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    journal_dir = root / "journal"
    with Journal(journal_dir, sync="none") as journal:
        journal.load()
        append_each(journal, LOAD_RECORDS)
    chunk = 100_000
    lmdb_dir = root / "lmdb"
    lmdb_dir.mkdir()
    lmdb_store = LmdbStore(str(lmdb_dir), sync=True)
    sqlite_store = SqliteStore(str(root / "sqlite.db"), synchronous="FULL")
    rocks_store = RocksStore(str(root / "rocks"), sync=False)
    for first in range(0, LOAD_RECORDS, chunk):
        lmdb_store.put_batch(first, chunk, BODY)
        sqlite_store.put_batch(first, chunk, BODY)
        rocks_store.put_batch(first, chunk, BODY)
    rocks_store.flush()
    sqlite_store.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    stores = {"journal": journal_dir, "lmdb": lmdb_store, "sqlite": sqlite_store, "rocksdb": rocks_store}
    yield stores
    for store in (lmdb_store, sqlite_store, rocks_store):
        store.close()
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.benchmark(group=GROUP_E)
def test_e_journal_load(rate, loaded_stores):
    directory = loaded_stores["journal"]
    results = []

    def setup():
        return (Journal(directory),), {}

    def teardown(journal: Journal) -> None:
        journal.close()
        result = results.pop()
        assert len(result.records) == LOAD_RECORDS
        assert not result.report.corrupt and not result.report.torn_tail_truncated

    rate(lambda journal: results.append(journal.load()), setup=setup, teardown=teardown,
         records=LOAD_RECORDS, case="journal", warmup_rounds=1, rounds=ROUNDS,
         settings="Journal(directory).load(): replay of 1M ADD records (10 MiB files), warm page cache; "
                  "returns every record with its body")


@pytest.mark.benchmark(group=GROUP_E)
@pytest.mark.parametrize("peer", ["lmdb", "lmdb-to-dict", "sqlite", "rocksdb"])
def test_e_peer_scan(rate, loaded_stores, peer):
    store = loaded_stores[peer.split("-")[0]]
    settings = {"lmdb": "cursor iteration over all key/values (bytes), read txn, warm page cache",
                "lmdb-to-dict": "dict(cursor): the same scan keeping every key/value in memory, as load() does "
                                "(context, not a target)",
                "sqlite": "SELECT * FROM records, iterating the rows, warm page cache",
                "rocksdb": "Rdict.items() iteration after a flush to table files, warm page cache"}[peer]
    scan = store.scan_to_dict if peer == "lmdb-to-dict" else store.scan
    counts = []

    def teardown() -> None:
        assert counts.pop() == LOAD_RECORDS

    rate(lambda: counts.append(scan()), teardown=teardown, records=LOAD_RECORDS, case=peer,
         warmup_rounds=1, rounds=ROUNDS if peer.startswith("lmdb") else 3, settings=settings)
