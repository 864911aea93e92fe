"""The main job on an embedded default: write, get killed, recover, and say what survived.

A child process appends records to a journal in a temporary folder with
group commit, reporting every record whose sync returned; the parent kills it
with SIGKILL mid-flight, recovers the journal, checks every acknowledged record
byte for byte, and prints what was recovered and how fast.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from . import IMPLEMENTATION, Journal

RECORD_TYPE = 7


def body_for(record_id: int, size: int) -> bytes:
    """A body that names its record and checks itself, so garbage cannot pass as data."""
    seed = hashlib.blake2b(record_id.to_bytes(8, "little"), digest_size=16).digest()
    return (seed * (size // 16 + 1))[:size]


def _child(directory: str, size: int, threads: int) -> None:
    """Append forever from several threads; print 'ack <id>' after each durable append."""
    journal = Journal(directory, sync="group")
    journal.load()
    out = sys.stdout
    lock = threading.Lock()
    counter = iter(range(1, 1 << 62))

    def worker() -> None:
        while True:
            with lock:
                record_id = next(counter)
            journal.add(record_id, RECORD_TYPE, body_for(record_id, size), sync=True)
            with lock:
                out.write(f"ack {record_id}\n")
                out.flush()

    for _ in range(threads):
        threading.Thread(target=worker, daemon=True).start()
    threading.Event().wait()


def run(seconds: float, size: int, threads: int, keep: str | None, seed: int | None) -> int:
    rng = random.Random(seed)
    directory = keep or tempfile.mkdtemp(prefix="journal-engine-demo-")
    print(f"journal_engine demo ({IMPLEMENTATION} core): journal in {directory}")
    print(f"  child process: {threads} threads appending {size}-byte records with sync=True (group commit)")
    # the child starts in the journal's folder: `python -m` puts the working directory first on
    # sys.path, and a source checkout there would shadow the installed (compiled) package
    child = subprocess.Popen([sys.executable, "-m", "journal_engine.demo", "--child", os.path.abspath(directory),
                              "--size", str(size), "--threads", str(threads)],
                             stdout=subprocess.PIPE, text=True, bufsize=1, cwd=directory)
    acked: set[int] = set()
    reader = threading.Thread(target=lambda: [acked.add(int(line.split()[1])) for line in child.stdout
                                              if line.startswith("ack ")], daemon=True)
    reader.start()
    kill_after = seconds * rng.uniform(0.7, 1.0)
    time.sleep(kill_after)
    child.send_signal(signal.SIGKILL)
    child.wait()
    reader.join(timeout=5)
    print(f"  killed with SIGKILL after {kill_after:.2f}s; {len(acked)} appends had been acknowledged durable")

    started = time.perf_counter()
    with Journal(directory) as journal:
        result = journal.load()
        elapsed = time.perf_counter() - started
        records = result.records
        missing = [rid for rid in acked if rid not in records]
        wrong = [rid for rid, rec in records.items() if rec.body != body_for(rid, size)]
        extra = len(records) - len(acked) + len(missing)
        report = result.report
        print(f"  recovered {len(records)} records from {report.files_read} files in {elapsed * 1000:.1f} ms "
              f"({len(records) / max(elapsed, 1e-9):,.0f} records/s)")
        print(f"  acknowledged and recovered byte-exact: {len(acked) - len(missing)} of {len(acked)}")
        print(f"  written but never acknowledged (recovered as well): {extra}")
        print(f"  torn tail truncated: {report.torn_tail_truncated}"
              + (f" at {os.path.basename(report.torn_tail[0])}:{report.torn_tail[1]}" if report.torn_tail else ""))
        print(f"  damage reported: {len(report.corrupt)}; transactions rolled back: {len(report.rolled_back)}")
    ok = not missing and not wrong and not report.corrupt
    print("verdict: " + ("every acknowledged record survived the crash intact" if ok else
                         f"FAILED: {len(missing)} acknowledged records missing, {len(wrong)} damaged"))
    if keep is None:
        shutil.rmtree(directory)
    return 0 if ok else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="journal-engine demo", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="how long the child writes before the kill")
    parser.add_argument("--size", type=int, default=256, help="record body size in bytes")
    parser.add_argument("--threads", type=int, default=8, help="appending threads in the child")
    parser.add_argument("--keep", metavar="DIR", help="use and keep this directory instead of a temporary one")
    parser.add_argument("--seed", type=int, help="seed for the kill time")
    parser.add_argument("--child", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.size, args.threads)
        return 0
    return run(args.seconds, args.size, args.threads, args.keep, args.seed)


if __name__ == "__main__":
    sys.exit(main())
