"""A second process for tests/faults/test_directory_lock.py: it opens a store on a directory as a user's
program would, says on stdout what happened, and waits on stdin.

    hold KIND BACKEND DIR     KIND: record (Journal / LmdbRecordStore), store (MessageStore) or broker.
                              Prints "waiting", reads a line (the start signal, so two holders open
                              at once), opens; prints "refused PID" (JournalLockedError) and exits, or
                              writes one record naming BACKEND, prints "opened", reads a line, closes.
    write-lmdb KIND DIR       KIND: store (an LMDB MessageStore) or record (an LmdbRecordStore with a
                              1 MiB map, which grows as it is written): writes, acknowledges and syncs in
                              a loop until killed; prints "ready" after the first sync.
"""
from __future__ import annotations

import os
import sys

from journal_engine import Broker, Journal, JournalLockedError, MessageStore
from journal_engine.storage.lmdb.store import LmdbRecordStore

RECORD_TYPE = 7
QUEUE = "q"


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def open_and_write(kind: str, backend: str, directory: str):
    """The opened store (or broker), with one record that names `backend` made durable."""
    body = f"written by the {backend} {kind}".encode()
    if kind == "record":
        store = Journal(directory) if backend == "journal" else LmdbRecordStore(directory)
        store.load()
        store.add(1, RECORD_TYPE, body, sync=True)
        return store
    if kind == "store":
        store = MessageStore(directory, backend=backend)
        store.load()
        store.store_queue(1, QUEUE, QUEUE)
        store.store_message_references(1, QUEUE, body, [1], sync=True)
        return store
    broker = Broker(directory, store=backend)
    broker.create_queue(QUEUE)
    broker.send(QUEUE, body)
    return broker


def hold(kind: str, backend: str, directory: str) -> None:
    say("waiting")
    sys.stdin.readline()
    try:
        opened = open_and_write(kind, backend, directory)
    except JournalLockedError as exc:
        say(f"refused {exc.holder_pid}")
        return
    say("opened")
    sys.stdin.readline()
    opened.close()
    say("closed")


def write_lmdb(kind: str, directory: str) -> None:
    if kind == "store":
        store = MessageStore(directory, backend="lmdb")
        store.load()
        store.store_queue(1, QUEUE, QUEUE)
        live, sync = 2000, store.sync
        write = lambda n: store.store_message_references(n, QUEUE, b"m" * (500 + n % 3000), [1])   # noqa: E731
        drop = lambda n: store.acknowledge(1, n)                                                   # noqa: E731
    else:
        store = LmdbRecordStore(directory, map_size=1024 * 1024)
        store.load()
        live, sync = 4000, store.sync
        write = lambda n: store.add(n, RECORD_TYPE, b"r" * (500 + n % 3000))                     # noqa: E731
        drop = store.delete
    n = 0
    while True:
        n += 1
        write(n)
        if n > live:
            drop(n - live)
        if n % 16 == 0:
            sync()
            if n == 16:
                say("ready")


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    {"hold": hold, "write-lmdb": write_lmdb}[command](*arguments)
