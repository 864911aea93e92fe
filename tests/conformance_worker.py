"""A child process for the store conformance suite's SIGKILL tests, on either backend.

Commands (BACKEND is "journal" or "lmdb"; MODE is "default", "strict"
(persist_delivery_count_before_delivery) or "strict-sync" (also strict_delivery_sync);
CAP is max_redelivery_records):

``deliver-once BACKEND DIRECTORY MODE CAP``
    Stores queue 1, message 1 and its reference (synced) unless recovery found them, then
    delivers the message once (count = persisted + 1, ``before_delivery``) and prints
    ``delivered <count>`` once that call returned. Then waits to be killed.

``churn BACKEND DIRECTORY MODE CAP SEED``
    Recovers, prints ``R <json of recovered counts>``, then delivers, rolls back and
    acknowledges at random until killed. ``N <message id>`` after a new message and its
    references are synced; ``D <queue> <message> <count>`` after before_delivery returned;
    ``K <queue> <message>`` before an acknowledgement is written.

``records BACKEND DIRECTORY THREADS``
    The record-store level: THREADS threads add records with sync=True (in "group" mode, so
    they share syncs) and update every third one with sync=True; ``A <id>`` after an add
    returned, ``U <id> <n>`` after the n-th update of it returned. Bodies are derived from the
    id (and n), so the parent can tell a record that was written from one that never was.
"""
from __future__ import annotations

import json
import os
import random
import sys
import threading
import time

from journal_engine import Journal, MessageStore
from journal_engine.store.lmdb_store import LmdbRecordStore

FILE_SIZE = 256 * 1024
MODES = {
    "default": {},
    "strict": {"persist_delivery_count_before_delivery": True},
    "strict-sync": {"persist_delivery_count_before_delivery": True, "strict_delivery_sync": True},
}
QUEUES = (1, 2)
LIVE_MESSAGES = 12
RECORD_TYPE = 7
UPDATE_TYPE = 8
IDS_PER_THREAD = 1_000_000


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def record_body(record_id: int) -> bytes:
    return record_id.to_bytes(8, "little") * (1 + record_id % 5)


def update_body(record_id: int, n: int) -> bytes:
    return record_id.to_bytes(8, "little") + n.to_bytes(4, "little")


def open_record_store(backend: str, directory: str, **options):
    """A Journal or an LmdbRecordStore, opened alike (small journal files)."""
    if backend == "journal":
        return Journal(directory, file_size=FILE_SIZE, **options)
    if backend == "lmdb":
        return LmdbRecordStore(directory, **options)
    raise SystemExit(f"unknown backend {backend!r}")


def open_store(backend: str, directory: str, mode: str, cap: int, **options) -> MessageStore:
    options.setdefault("file_size", FILE_SIZE)
    return MessageStore(directory, backend=backend, max_redelivery_records=cap, **MODES[mode], **options)


def deliver_once(backend: str, directory: str, mode: str, cap: int) -> None:
    store = open_store(backend, directory, mode, cap)
    state = store.load()
    if 1 not in state.queues:
        store.store_queue(1, "orders", "orders")
    if 1 not in state.messages:
        store.store_message(1, "orders", b"hello", properties={"kind": "test"})
        store.store_reference(1, 1, sync=True)
    count = store.persisted_delivery_count(1, 1) + 1
    store.before_delivery(1, 1, count)
    say(f"delivered {count}")
    time.sleep(60)


def churn(backend: str, directory: str, mode: str, cap: int, seed: int) -> None:
    rng = random.Random(seed)
    store = open_store(backend, directory, mode, cap, compact_min_files=2)
    state = store.load()
    counts = {}
    for queue_id, refs in state.references.items():
        for ref in refs:
            counts[(queue_id, ref.message_id)] = ref.delivery_count
    say("R " + json.dumps({f"{q}:{m}": c for (q, m), c in counts.items()}))
    for queue_id in QUEUES:
        if queue_id not in state.queues:
            store.store_queue(queue_id, f"queue-{queue_id}", "churn")
    next_id = state.max_message_id + 1

    def new_message() -> None:
        nonlocal next_id
        message_id = next_id
        next_id += 1
        store.store_message(message_id, "churn", b"x" * rng.randrange(0, 200), properties={"n": message_id})
        for queue_id in QUEUES:
            store.store_reference(queue_id, message_id)
            counts[(queue_id, message_id)] = 0
        store.sync()
        say(f"N {message_id}")

    while len({m for _q, m in counts}) < LIVE_MESSAGES:
        new_message()
    while True:
        queue_id, message_id = rng.choice(sorted(counts))
        roll = rng.random()
        if roll < 0.7:
            count = counts[(queue_id, message_id)] + 1
            counts[(queue_id, message_id)] = count
            store.before_delivery(queue_id, message_id, count)
            say(f"D {queue_id} {message_id} {count}")
        elif roll < 0.95:
            count = counts[(queue_id, message_id)]
            if count:
                store.update_delivery_count(queue_id, message_id, count)
                store.update_scheduled_delivery_time(queue_id, message_id, 4_000_000_000_000, count)
        else:
            say(f"K {queue_id} {message_id}")
            store.store_acknowledge(queue_id, message_id)
            del counts[(queue_id, message_id)]
            if not store.reference_queues(message_id):
                store.delete_message(message_id)
                new_message()


def records(backend: str, directory: str, threads: int) -> None:
    store = open_record_store(backend, directory, sync="group")
    loaded = store.load()
    say(f"R {len(loaded.records)}")
    first = (max(loaded.records) // IDS_PER_THREAD + 1) * IDS_PER_THREAD if loaded.records else 0

    def writer(index: int) -> None:
        base = first + index * IDS_PER_THREAD * 10
        for k in range(IDS_PER_THREAD):
            record_id = base + k
            store.add(record_id, RECORD_TYPE, record_body(record_id), sync=True)
            say(f"A {record_id}")
            if k % 3 == 0:
                for n in (1, 2):
                    store.update(record_id, UPDATE_TYPE, update_body(record_id, n), sync=True)
                    say(f"U {record_id} {n}")

    workers = [threading.Thread(target=writer, args=(index,), daemon=True) for index in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def main(argv: list[str]) -> None:
    command = argv[0]
    if command == "deliver-once":
        deliver_once(argv[1], argv[2], argv[3], int(argv[4]))
    elif command == "churn":
        churn(argv[1], argv[2], argv[3], int(argv[4]), int(argv[5]))
    elif command == "records":
        records(argv[1], argv[2], int(argv[3]))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
