"""Reproduce the profiles of docs/benchmarks.md ("What limits each number").

    python bench/profile_core.py nosync [--records 3000000] [--perf perf-nosync.data]
    python bench/profile_core.py load   [--records 1000000] [--perf perf-load.data]
    python bench/profile_core.py threads                     # group-commit scaling table

With --perf, ``perf record -g`` is attached to this process only around the timed
region (set-up excluded); read it with ``perf report -i FILE --no-children --sort dso,symbol``.
Data goes where the benchmarks put theirs ($JOURNAL_BENCH_DIR or <tmp>/journal-engine-bench).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_bench_journal import FRAME_BYTES, append_each, files_for, open_journal  # noqa: E402
from workload import BODY  # noqa: E402

from journal_engine import Journal  # noqa: E402
from journal_engine.limits import SECTOR_SIZE_BYTES  # noqa: E402


def bench_root() -> Path:
    root = Path(os.environ.get("JOURNAL_BENCH_DIR") or Path(tempfile.gettempdir()) / "journal-engine-bench")
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def perf_region(output: str | None, frequency_hz: int = 4000):
    """perf record -g on this process while the block runs (nothing when output is None)."""
    if output is None:
        yield
        return
    recorder = subprocess.Popen(["perf", "record", "-F", str(frequency_hz), "-g", "-p", str(os.getpid()),
                                 "-o", output], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)   # perf needs a moment to attach
    try:
        yield
    finally:
        recorder.send_signal(signal.SIGINT)
        recorder.wait()


def fresh(name: str) -> Path:
    path = bench_root() / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def profile_nosync(records: int, perf: str | None) -> None:
    directory = fresh("profile-nosync")
    journal = open_journal(directory, sync="none", precreate_files=files_for(records, FRAME_BYTES))
    with perf_region(perf):
        started = time.perf_counter()
        append_each(journal, records)
        elapsed = time.perf_counter() - started
    journal.close()
    shutil.rmtree(directory)
    print(f"sync=none, {records:,} records, files pre-created: {records / elapsed / 1e6:.2f}M records/s "
          f"({elapsed / records * 1e9:.0f} ns per record)")


def profile_load(records: int, perf: str | None) -> None:
    directory = fresh("profile-load")
    with Journal(directory, sync="none") as journal:
        journal.load()
        append_each(journal, records)
    for _ in range(2):   # warm the page cache
        with Journal(directory) as journal:
            journal.load()
    journal = Journal(directory)
    with perf_region(perf):
        started = time.perf_counter()
        result = journal.load()
        elapsed = time.perf_counter() - started
    assert len(result.records) == records
    journal.close()
    shutil.rmtree(directory)
    print(f"load of {records:,} records: {records / elapsed / 1e6:.2f}M records/s "
          f"({elapsed / records * 1e9:.0f} ns per record)")


def _group_commit_run(threads: int, per_thread: int) -> tuple[float, float, float]:
    directory = fresh("profile-threads")
    journal = open_journal(directory, sync="group", precreate_files=files_for(threads * per_thread,
                                                                              SECTOR_SIZE_BYTES))
    add = journal.add
    go = threading.Event()

    def work(index: int) -> None:
        go.wait()
        for record_id in range(index * per_thread, (index + 1) * per_thread):
            add(record_id, 1, BODY, sync=True)

    workers = [threading.Thread(target=work, args=(index,)) for index in range(threads)]
    for worker in workers:
        worker.start()
    syncs_before = journal.stats()["syncs"]
    started = time.perf_counter()
    go.set()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    syncs = journal.stats()["syncs"] - syncs_before
    journal.close()
    shutil.rmtree(directory)
    records = threads * per_thread
    return records / elapsed, records / syncs, elapsed / syncs * 1e6


def profile_threads() -> None:
    print("threads  records/s  records/sync  us/sync   (median of 3 runs)")
    for threads in (1, 2, 4, 8, 16, 32):
        per_thread = max(2000 // threads, 250) if threads < 16 else 1000
        runs = [_group_commit_run(threads, per_thread) for _ in range(3)]
        rate = statistics.median(r[0] for r in runs)
        median_run = min(runs, key=lambda r: abs(r[0] - rate))
        print(f"{threads:7d}  {rate:9.0f}  {median_run[1]:12.1f}  {median_run[2]:7.0f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["nosync", "load", "threads"])
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--perf", default=None, help="write a perf profile of the timed region to this file")
    args = parser.parse_args(argv)
    if args.what == "nosync":
        profile_nosync(args.records or 3_000_000, args.perf)
    elif args.what == "load":
        profile_load(args.records or 1_000_000, args.perf)
    else:
        profile_threads()
    return 0


if __name__ == "__main__":
    sys.exit(main())
