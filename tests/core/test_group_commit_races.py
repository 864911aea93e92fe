"""Group commit under contention: leaders, flushes and file switches interleaving.

Small files make the writer switch files while leaders are between their write-out and their
fdatasync, the case where a file sealed and closed by one leader's sync is the file another
leader wrote its batch to.
"""
import threading

import pytest

from journal_engine import Journal

FILE_SIZE = 64 * 1024
THREADS = 12
PER_THREAD = 250


def _body(thread: int, index: int) -> bytes:
    return f"{thread}:{index}:".encode() * 6


@pytest.mark.parametrize("round_", range(3))
def test_syncing_threads_with_flushes_and_file_switches_never_fail_and_lose_nothing(journal_dir, round_):
    journal = Journal(journal_dir, file_size=FILE_SIZE, sync="group", min_files=2)
    journal.load()
    errors: list[BaseException] = []
    done = threading.Event()

    def syncer(thread: int) -> None:
        try:
            for index in range(PER_THREAD):
                journal.add(thread * 1_000_000 + index, 1, _body(thread, index), sync=True)
        except BaseException as exc:   # reported below: any failure fails the test
            errors.append(exc)

    def flusher() -> None:
        try:
            while not done.is_set():
                journal.flush()
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=syncer, args=(t,)) for t in range(THREADS)]
    background = threading.Thread(target=flusher)
    background.start()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    done.set()
    background.join()
    assert errors == []
    stats = journal.stats()
    assert stats["durable_bytes"] >= stats["appended_bytes"] - 4096 * 2
    journal.close()

    with Journal(journal_dir, file_size=FILE_SIZE) as reopened:
        result = reopened.load()
    assert result.report.corrupt == [] and not result.report.torn_tail_truncated
    assert len(result.records) == THREADS * PER_THREAD
    assert all(result.records[t * 1_000_000 + i].body == _body(t, i)
               for t in range(THREADS) for i in range(PER_THREAD))
