"""A child process for the message-store tests (SIGKILL recovery, parity), on either backend.

Usage: ``python store_worker.py [--backend journal|lmdb] COMMAND ARGS...`` (the backend defaults
to the journal). MODE is "default", "strict" (persist_delivery_count_before_delivery) or
"strict-sync" (also strict_delivery_sync); CAP is max_redelivery_records.

``deliver-once DIRECTORY MODE CAP``
    Stores queue 1, message 1 and its reference (synced) unless recovery found them, then
    delivers the message once: count = persisted + 1, ``before_delivery``, and prints
    ``delivered <count>`` once that call has returned: the broker would now hand the
    message out. Then it waits to be killed. ``--unsynced-message``: the message and its
    reference are stored with sync=False (only the queue is synced), so with ``--sync none``
    they are still in the write buffer when the delivery begins.

``churn DIRECTORY MODE CAP SEED``
    Recovers, prints ``R <json of recovered counts>``, then delivers, rolls back and
    acknowledges references at random until killed. Lines (one write each, to the pipe
    the parent reads): ``N <message id>`` after a new message and its references are
    synced; ``D <queue> <message> <count>`` after before_delivery returned for that
    delivery; ``K <queue> <message>`` BEFORE an acknowledgement is written (from then on
    the reference may be gone).

``records DIRECTORY THREADS``
    The record-store level: THREADS threads add records with sync=True (in "group" mode, so
    they share syncs) and update every third one with sync=True; ``A <id>`` after an add
    returned, ``U <id> <n>`` after the n-th update of it returned. Bodies are derived from the
    id (and n), so the parent can tell a record that was written from one that never was.

``dispatch-threads DIRECTORY THREADS SEED``
    Strict mode, sync="none" (no flusher: the counts' records stay in the write buffer until a
    write-out), a delivery-count shadow of 16 entries (it rolls over every 16 dispatches). THREADS
    threads each own a queue of 8 messages and deliver them round and round, now and then
    acknowledging one and storing a message with the same id again. ``D <queue> <message>
    <count>`` after before_delivery returned; ``A <queue> <message>`` BEFORE an acknowledgement;
    ``N <queue> <message>`` after the same ids were stored again.

``script DIRECTORY`` (journal only)
    A fixed sequence of store calls with sync="none" (no timing in the bytes): the parity
    test runs it under the compiled core and the Python twin and compares the journals.

The suites also import this module for ``open_record_store`` and the record bodies, so the
parent and the child open stores and derive bodies the same way.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import threading
import time

from journal_engine import Journal, MessageStore
from journal_engine.storage.lmdb.store import LmdbRecordStore

BACKENDS = ("journal", "lmdb")
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
    raise ValueError(f"unknown backend {backend!r}")


def open_store(backend: str, directory: str, mode: str, cap: int, **options) -> MessageStore:
    options.setdefault("file_size", FILE_SIZE)
    return MessageStore(directory, backend=backend, max_redelivery_records=cap, **MODES[mode], **options)


def deliver_once(backend: str, directory: str, mode: str, cap: int, sync: str = "group",
                 unsynced_message: bool = False) -> None:
    store = open_store(backend, directory, mode, cap, sync=sync)
    state = store.load()
    if 1 not in state.queues:
        store.store_queue(1, "orders", "orders")
        store.sync()
    if 1 not in state.messages:
        store.store_message(1, "orders", b"hello", properties={"kind": "test"}, sync=False)
        store.store_reference(1, 1, sync=not unsynced_message)
        if not unsynced_message:
            store.sync()                # the queue binding too, whatever the mode
    count = store.persisted_delivery_count(1, 1) + 1
    store.before_delivery(1, 1, count)
    say(f"delivered {count}")
    time.sleep(60)


def churn(backend: str, directory: str, mode: str, cap: int, seed: int) -> None:
    rng = random.Random(seed)
    # small files and a low compaction threshold: the update-factor compaction runs under the kills too
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


def dispatch_threads(backend: str, directory: str, threads: int, seed: int) -> None:
    from journal_engine.message_store import delivery_shadow, message_store
    small = delivery_shadow.DeliveryShadow

    def small_shadow(*args, **kwargs):
        return small(*args, **dict(kwargs, entries=16))

    message_store.DeliveryShadow = small_shadow
    store = open_store(backend, directory, "strict", -1, sync="none")
    store.load()
    for queue_id in range(threads):
        store.store_queue(queue_id, f"queue-{queue_id}", "dispatch")
        for n in range(8):
            message_id = queue_id * 1000 + n
            store.store_message(message_id, "dispatch", b"m")
            store.store_reference(queue_id, message_id)
    store.sync()
    printing = threading.Lock()
    start = threading.Barrier(threads)

    def dispatcher(queue_id: int) -> None:
        rng = random.Random(seed * 100 + queue_id)
        counts = {queue_id * 1000 + n: 0 for n in range(8)}
        start.wait()
        while True:
            message_id = rng.choice(sorted(counts))
            if rng.random() < 0.1:
                with printing:
                    say(f"A {queue_id} {message_id}")
                store.store_acknowledge(queue_id, message_id)
                store.delete_message(message_id)
                store.store_message(message_id, "dispatch", b"again")
                store.store_reference(queue_id, message_id)
                counts[message_id] = 0
                with printing:
                    say(f"N {queue_id} {message_id}")
                continue
            counts[message_id] += 1
            store.before_delivery(queue_id, message_id, counts[message_id])
            with printing:
                say(f"D {queue_id} {message_id} {counts[message_id]}")

    for queue_id in range(threads):
        threading.Thread(target=dispatcher, args=(queue_id,), daemon=True).start()
    time.sleep(600)


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


def script(directory: str) -> None:
    """Every store call the parity test compares, deterministic and without timing. Phase 1 ends
    with a copy of the store in DIRECTORY-phase1 (compared byte for byte); phase 2 reopens it,
    acknowledges, deletes and compacts (compared frame by frame: compaction's file ids depend
    on when the pool thread runs)."""
    options = {"sync": "none", "max_redelivery_records": 5, "file_size": FILE_SIZE,
               "persist_delivery_count_before_delivery": True}
    store = MessageStore(directory, **options)
    store.load()
    store.store_queue(7, "orders", "orders.eu", filter="priority > 3")
    store.store_queue(9, "audit", "orders.eu", routing_type="multicast")
    rng = random.Random(1234)
    for message_id in range(1, 301):
        store.store_message(message_id, "orders.eu", bytes(rng.randrange(256) for _ in range(rng.randrange(64))),
                            properties={"i": message_id, "f": message_id / 7, "s": "x" * (message_id % 5),
                                        "b": message_id % 2 == 0, "raw": b"\x00\x01", "none": None},
                            expiration=message_id * 1000, routing_type="anycast")
        store.store_reference(7, message_id)
        if message_id % 3 == 0:
            store.store_reference(9, message_id)
    for round_number in range(1, 9):
        for message_id in range(1, 301, 2):
            store.update_delivery_count(7, message_id, round_number)
            store.update_scheduled_delivery_time(7, message_id, 1_700_000_000_000 + round_number, round_number)
        ids = list(range(2, 301, 2))
        store.update_delivery_counts([7] * len(ids), ids, [round_number] * len(ids))
        store.update_scheduled_delivery_times([7] * len(ids), ids, [round_number * 10] * len(ids),
                                              [round_number] * len(ids))
        store.before_delivery(7, 1, round_number + 1)
        store.before_delivery_batch([9, 9], [3, 6], [round_number, round_number])
        store.update_delivery_count(9, 3, round_number, sync=True)
    store.close()
    shutil.copytree(directory, directory + "-phase1", ignore=shutil.ignore_patterns("journal.lock"))

    store = MessageStore(directory, **options)
    store.load(now_ms=0)
    for message_id in range(1, 301, 4):
        store.store_acknowledge(7, message_id)
        if message_id % 3:
            store.delete_message(message_id)
    store.update_delivery_count(7, 2, 3)
    store.compact()
    for message_id in range(2, 301, 10):
        store.update_delivery_count(7, message_id, 1)
    store.close()
    say("done")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="store_worker.py", description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=BACKENDS, default="journal")
    commands = parser.add_subparsers(dest="command", required=True)
    once = commands.add_parser("deliver-once")
    once.add_argument("directory")
    once.add_argument("mode", choices=sorted(MODES))
    once.add_argument("cap", type=int)
    once.add_argument("--sync", choices=["always", "group", "none"], default="group",
                      help='"none": the count record stays in the write buffer (no flusher)')
    once.add_argument("--unsynced-message", action="store_true",
                      help="store the message and its reference without waiting for the disk")
    churning = commands.add_parser("churn")
    churning.add_argument("directory")
    churning.add_argument("mode", choices=sorted(MODES))
    churning.add_argument("cap", type=int)
    churning.add_argument("seed", type=int)
    dispatching = commands.add_parser("dispatch-threads")
    dispatching.add_argument("directory")
    dispatching.add_argument("threads", type=int)
    dispatching.add_argument("seed", type=int)
    writing = commands.add_parser("records")
    writing.add_argument("directory")
    writing.add_argument("threads", type=int)
    scripted = commands.add_parser("script")
    scripted.add_argument("directory")
    return parser


def main(argv: list[str]) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "deliver-once":
        deliver_once(args.backend, args.directory, args.mode, args.cap, args.sync, args.unsynced_message)
    elif args.command == "churn":
        churn(args.backend, args.directory, args.mode, args.cap, args.seed)
    elif args.command == "dispatch-threads":
        dispatch_threads(args.backend, args.directory, args.threads, args.seed)
    elif args.command == "records":
        records(args.backend, args.directory, args.threads)
    elif args.backend != "journal":
        # the parity run compares journal files written by the compiled writers and the twin
        parser.error("script compares journal files: it runs on the journal backend only")
    else:
        script(args.directory)


if __name__ == "__main__":
    main(sys.argv[1:])
