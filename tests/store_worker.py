"""A child process for the message-store crash and parity tests.

Commands (MODE is "default", "strict" (persist_delivery_count_before_delivery) or
"strict-sync" (also strict_delivery_sync); CAP is max_redelivery_records):

``deliver-once DIRECTORY MODE CAP``
    Stores queue 1, message 1 and its reference (synced) unless recovery found them, then
    delivers the message once: count = persisted + 1, ``before_delivery``, and prints
    ``delivered <count>`` once that call has returned: the broker would now hand the
    message out. Then it waits to be killed.

``churn DIRECTORY MODE CAP SEED``
    Recovers, prints ``R <json of recovered counts>``, then delivers, rolls back and
    acknowledges references at random until killed. Lines (one write each, to the pipe
    the parent reads): ``N <message id>`` after a new message and its references are
    synced; ``D <queue> <message> <count>`` after before_delivery returned for that
    delivery; ``K <queue> <message>`` BEFORE an acknowledgement is written (from then on
    the reference may be gone).

``script DIRECTORY``
    A fixed sequence of store calls with sync="none" (no timing in the bytes): the
    parity test runs it under both implementations and compares the journals.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time

from journal_engine import MessageStore

FILE_SIZE = 256 * 1024
MODES = {
    "default": {},
    "strict": {"persist_delivery_count_before_delivery": True},
    "strict-sync": {"persist_delivery_count_before_delivery": True, "strict_delivery_sync": True},
}
QUEUES = (1, 2)
LIVE_MESSAGES = 12


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def open_store(directory: str, mode: str, cap: int, **options) -> MessageStore:
    options.setdefault("file_size", FILE_SIZE)
    return MessageStore(directory, max_redelivery_records=cap, **MODES[mode], **options)


def deliver_once(directory: str, mode: str, cap: int) -> None:
    store = open_store(directory, mode, cap)
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


def churn(directory: str, mode: str, cap: int, seed: int) -> None:
    rng = random.Random(seed)
    # small files and a low compaction threshold: the update-factor compaction runs under the kills too
    store = open_store(directory, mode, cap, compact_min_files=2)
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


def script(directory: str) -> None:
    """Every store call the parity test compares, deterministic and without timing. Phase 1 ends
    with a copy of the store in DIRECTORY-phase1 (compared byte for byte); phase 2 reopens it,
    acknowledges, deletes and compacts (compared frame by frame: compaction's file ids depend
    on when the pool thread runs)."""
    options = dict(sync="none", max_redelivery_records=5, file_size=FILE_SIZE,
                   persist_delivery_count_before_delivery=True)
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


def main(argv: list[str]) -> None:
    command = argv[0]
    if command == "deliver-once":
        deliver_once(argv[1], argv[2], int(argv[3]))
    elif command == "churn":
        churn(argv[1], argv[2], int(argv[3]), int(argv[4]))
    elif command == "script":
        script(argv[1])
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
