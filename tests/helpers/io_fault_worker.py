"""A child process for tests/faults/test_hostile_files_and_raw_io_errors.py: journal work run under libfiu's fiu-run,
with the parent turning system-call failures on between two steps (stdin handshakes).

``roll DIRECTORY``
    Opens a journal of small files (sync="always"), prints ``ready``, waits for a line on stdin,
    then appends until an append raises; prints ``error <type> <is JournalError> <is OSError> <errno>``.
``load DIRECTORY``
    Prints ``ready``, waits for a line on stdin, then opens and loads the journal; prints
    ``error ...`` as above, or ``loaded``.
"""
from __future__ import annotations

import sys

from journal_engine import Journal, JournalError

FILE_SIZE = 64 * 1024


def report(exc: BaseException) -> None:
    print(f"error {type(exc).__name__} {isinstance(exc, JournalError)} {isinstance(exc, OSError)} "
          f"{getattr(exc, 'errno', None)}", flush=True)


def wait_for_parent() -> None:
    print("ready", flush=True)
    sys.stdin.readline()


def run_roll(directory: str) -> None:
    journal = Journal(directory, file_size=FILE_SIZE, sync="always", min_files=2)
    journal.load()
    wait_for_parent()
    try:
        for record_id in range(10_000):
            journal.add(record_id, 1, bytes(2000))
        print("no error", flush=True)
    except BaseException as exc:   # the test wants to see whatever escapes
        report(exc)
    try:
        journal.close()
    except BaseException as exc:
        report(exc)


def run_load(directory: str) -> None:
    wait_for_parent()
    try:
        with Journal(directory, file_size=FILE_SIZE) as journal:
            journal.load()
        print("loaded", flush=True)
    except BaseException as exc:
        report(exc)


if __name__ == "__main__":
    {"roll": run_roll, "load": run_load}[sys.argv[1]](sys.argv[2])
