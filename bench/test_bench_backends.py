"""The two storage backends side by side: the journal and the LMDB record store.

Groups (numbers and the command in docs/backends.md):
  backends: append, durable          one thread, every record synced before its call returns
  backends: append, group commit     8 threads, each record synced before its call returns
  backends: append, no sync          one call per record, sync="none", one flush at the end
  backends: update delivery count    MessageStore.update_delivery_count round-robin over 10k references
                                     (the compiled writer on the journal, its Python twin on LMDB),
                                     sync="group", one sync() at the end
  backends: ack                      MessageStore.acknowledge (ack + delete) of 20k messages, one sync()
  backends: recovery                 open + load of a store: 100k messages with a reference and a count
                                     (MessageStore), and of 100k records with an update (record store)
  backends: random read (warm)       20k reads of random ids of 100k records: LmdbRecordStore.get (an LMDB
                                     read transaction each) against the journal's in-memory index after
                                     load() (LoadResult.records, a dict: the journal has no read path on disk)
  backends: random read (cold)       open + 1000 random reads: the journal must load() everything before
                                     its first read; LMDB reads at once

Records are 256 bytes (bench/workload.py). Every round checks afterwards, untimed, what it wrote.
"""
from __future__ import annotations

import random
import shutil
import threading
from pathlib import Path

import pytest
from workload import BODY, Rounds, close_and_check

from journal_engine import Journal, MessageStore
from journal_engine.storage.lmdb.store import LmdbRecordStore

BACKENDS = ["journal", "lmdb"]
USER_TYPE = 1
UPDATE_TYPE = 2
FILE_SIZE = 64 * 1024 * 1024
DURABLE_RECORDS = 1_000
GROUP_THREADS = 8
GROUP_PER_THREAD = 250
NO_SYNC_RECORDS = 200_000
REFERENCES = 10_000
UPDATES = 100_000
ACKS = 20_000
RECOVERY_MESSAGES = 100_000
READ_RECORDS = 100_000
WARM_READS = 20_000
COLD_READS = 1_000
ROUNDS = 5


def open_records(backend: str, directory: Path, *, sync: str, load: bool = True):
    """A Journal or an LmdbRecordStore with the same sync mode (loaded unless asked not to)."""
    if backend == "journal":
        store = Journal(directory, sync=sync, file_size=FILE_SIZE)
    else:
        store = LmdbRecordStore(directory, sync=sync, map_size=1 << 30)
    if load:
        store.load()
    return store


def open_message_store(backend: str, directory: Path, **options) -> MessageStore:
    return MessageStore(directory, backend=backend, file_size=FILE_SIZE, **options)


def _settings(backend: str, sync: str) -> str:
    if backend == "journal":
        return f"Journal(sync={sync!r}, file_size=64 MiB)"
    lmdb_flags = "sync=False, metasync=False" if sync == "none" else "sync=True, metasync=True"
    return f"LmdbRecordStore(sync={sync!r}): lmdb {lmdb_flags}, writemap=False"


# ----- append ---------------------------------------------------------------------------------------------

@pytest.mark.benchmark(group="backends: append, durable")
@pytest.mark.parametrize("backend", BACKENDS)
def test_append_durable(rate, case_dir, backend):
    rounds = Rounds(case_dir)

    def setup():
        directory = rounds.fresh()
        return (open_records(backend, directory, sync="always"), directory), {}

    def append(store, directory):
        add = store.add
        for record_id in range(DURABLE_RECORDS):
            add(record_id, USER_TYPE, BODY, sync=True)

    rate(append, records=DURABLE_RECORDS, case=backend, settings=_settings(backend, "always"), setup=setup,
         teardown=lambda store, directory: close_and_check(store, DURABLE_RECORDS, directory), rounds=ROUNDS)


@pytest.mark.benchmark(group="backends: append, group commit")
@pytest.mark.parametrize("backend", BACKENDS)
def test_append_group_commit(rate, case_dir, backend):
    rounds = Rounds(case_dir)
    records = GROUP_THREADS * GROUP_PER_THREAD

    def setup():
        directory = rounds.fresh()
        return (open_records(backend, directory, sync="group"), directory), {}

    def append(store, directory):
        start = threading.Barrier(GROUP_THREADS)

        def appender(index: int) -> None:
            add = store.add
            start.wait()
            for record_id in range(index * GROUP_PER_THREAD, (index + 1) * GROUP_PER_THREAD):
                add(record_id, USER_TYPE, BODY, sync=True)

        threads = [threading.Thread(target=appender, args=(index,)) for index in range(GROUP_THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    rate(append, records=records, case=backend, settings=_settings(backend, "group") + f", {GROUP_THREADS} threads",
         setup=setup, teardown=lambda store, directory: close_and_check(store, records, directory), rounds=ROUNDS)


@pytest.mark.benchmark(group="backends: append, no sync")
@pytest.mark.parametrize("backend", BACKENDS)
def test_append_no_sync(rate, case_dir, backend):
    rounds = Rounds(case_dir)

    def setup():
        directory = rounds.fresh()
        return (open_records(backend, directory, sync="none"), directory), {}

    def append(store, directory):
        add = store.add
        for record_id in range(NO_SYNC_RECORDS):
            add(record_id, USER_TYPE, BODY)
        store.flush()

    rate(append, records=NO_SYNC_RECORDS, case=backend, settings=_settings(backend, "none") + ", flush() at the end",
         setup=setup, teardown=lambda store, directory: close_and_check(store, NO_SYNC_RECORDS, directory),
         rounds=ROUNDS)


# ----- message store: delivery counts and acknowledgements ---------------------------------------------------

def _filled_message_store(backend: str, directory: Path, messages: int, **options) -> MessageStore:
    store = open_message_store(backend, directory, max_redelivery_records=-1, **options)
    store.load()
    store.store_queue(1, "bench", "bench")
    for message_id in range(1, messages + 1):
        store.store_message_references(message_id, "bench", BODY, [1], sync=False)
    store.sync()
    return store


@pytest.mark.benchmark(group="backends: update delivery count")
@pytest.mark.parametrize("backend", BACKENDS)
def test_update_delivery_count(rate, case_dir, backend):
    rounds = Rounds(case_dir)

    def setup():
        directory = rounds.fresh()
        return (_filled_message_store(backend, directory, REFERENCES, sync="group"), directory), {}

    def update(store, directory):
        write = store.update_delivery_count
        for index in range(UPDATES):
            write(1, index % REFERENCES + 1, index // REFERENCES + 1)
        store.sync()

    def teardown(store, directory):
        try:
            assert store.persisted_delivery_count(1, REFERENCES) == UPDATES // REFERENCES
            # what the store holds afterwards: every record until a compaction (journal), or one per
            # reference (LMDB overwrites in place)
            rate.benchmark.extra_info["delivery_count_records_held"] = store.record_count(34)
        finally:
            store.close()
            shutil.rmtree(directory, ignore_errors=True)

    rate(update, records=UPDATES, case=backend,
         settings=_settings(backend, "group") + f", MessageStore, {REFERENCES} references round-robin, one sync()",
         setup=setup, teardown=teardown, rounds=ROUNDS)


@pytest.mark.benchmark(group="backends: ack")
@pytest.mark.parametrize("backend", BACKENDS)
def test_acknowledge(rate, case_dir, backend):
    rounds = Rounds(case_dir)

    def setup():
        directory = rounds.fresh()
        return (_filled_message_store(backend, directory, ACKS, sync="group"), directory), {}

    def acknowledge(store, directory):
        ack = store.acknowledge
        for message_id in range(1, ACKS + 1):
            ack(1, message_id)
        store.sync()

    def teardown(store, directory):
        try:
            assert store.stats()["messages"] == 0
        finally:
            store.close()
            shutil.rmtree(directory, ignore_errors=True)

    rate(acknowledge, records=ACKS, case=backend,
         settings=_settings(backend, "group") + ", MessageStore.acknowledge (33 + delete), one sync()",
         setup=setup, teardown=teardown, rounds=ROUNDS)


# ----- recovery -----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def recovery_stores(bench_root):
    """Per backend: a message store of RECOVERY_MESSAGES messages, each with a reference and a delivery
    count, and a record store of READ_RECORDS records with one update each (built once, untimed)."""
    root = bench_root / "backends-recovery"
    shutil.rmtree(root, ignore_errors=True)
    built = {}
    for backend in BACKENDS:
        message_dir = root / backend / "messages"
        store = _filled_message_store(backend, message_dir, RECOVERY_MESSAGES, sync="none")
        store.update_delivery_counts([1] * RECOVERY_MESSAGES, range(1, RECOVERY_MESSAGES + 1), [1] * RECOVERY_MESSAGES)
        store.close()
        record_dir = root / backend / "records"
        record_store = open_records(backend, record_dir, sync="none")
        for record_id in range(READ_RECORDS):
            record_store.add(record_id, USER_TYPE, BODY)
            record_store.update(record_id, UPDATE_TYPE, record_id.to_bytes(8, "little"))
        record_store.close()
        built[backend] = (message_dir, record_dir)
    yield built
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.benchmark(group="backends: recovery")
@pytest.mark.parametrize("level", ["message-store", "record-store"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_recovery(rate, recovery_stores, backend, level):
    message_dir, record_dir = recovery_stores[backend]
    opened = []

    def recover():
        if level == "message-store":
            store = open_message_store(backend, message_dir)
            opened.append(store)
            state = store.load()
            assert len(state.references[1]) == RECOVERY_MESSAGES
        else:
            store = open_records(backend, record_dir, sync="group", load=False)
            opened.append(store)
            assert len(store.load().records) == READ_RECORDS

    def teardown():
        while opened:
            opened.pop().close()

    records = RECOVERY_MESSAGES if level == "message-store" else READ_RECORDS
    settings = (f"{level}: open + load(), {records} " +
                ("messages (45 + 32 + 34 each)" if level == "message-store" else "records (add + update each)"))
    rate(recover, records=records, case=f"{backend} {level}", settings=settings, teardown=teardown, rounds=ROUNDS)


# ----- random reads --------------------------------------------------------------------------------------------

@pytest.mark.benchmark(group="backends: random read (warm)")
@pytest.mark.parametrize("backend", BACKENDS)
def test_random_read_warm(rate, recovery_stores, backend):
    _message_dir, record_dir = recovery_stores[backend]
    store = open_records(backend, record_dir, sync="group", load=False)
    index = store.load().records                     # the journal's only read path: its recovery result
    ids = random.Random(7).choices(range(READ_RECORDS), k=WARM_READS)
    if backend == "journal":
        def read():
            for record_id in ids:
                assert index[record_id].body is not None
        settings = "Journal: LoadResult.records[id] after load() (every record in memory)"
    else:
        get = store.get

        def read():
            for record_id in ids:
                assert get(record_id) is not None
        settings = "LmdbRecordStore.get(id): one LMDB read transaction + cursor over its updates"
    try:
        rate(read, records=WARM_READS, case=backend, settings=settings, rounds=ROUNDS)
    finally:
        store.close()


@pytest.mark.benchmark(group="backends: random read (cold)")
@pytest.mark.parametrize("backend", BACKENDS)
def test_random_read_cold(rate, recovery_stores, backend):
    _message_dir, record_dir = recovery_stores[backend]
    ids = random.Random(8).choices(range(READ_RECORDS), k=COLD_READS)
    opened = []

    def read():
        store = open_records(backend, record_dir, sync="group", load=False)
        opened.append(store)
        if backend == "journal":
            index = store.load().records
            for record_id in ids:
                assert index[record_id].body is not None
        else:
            for record_id in ids:
                assert store.get(record_id) is not None

    def teardown():
        while opened:
            opened.pop().close()

    settings = ("open + load() of 100k records, then dict reads" if backend == "journal"
                else "open, then LmdbRecordStore.get(id) without load()")
    rate(read, records=COLD_READS, case=backend, settings=settings, teardown=teardown, rounds=ROUNDS)
