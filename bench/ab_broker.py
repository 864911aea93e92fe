"""A/B of the broker's hot path: send + receive + ack, CPU microseconds per message, two checkouts.

    python bench/ab_broker.py BASE_CHECKOUT [--rounds 9] [--messages 100000]

BASE_CHECKOUT is another checkout of journal_engine with its compiled core built in place
(`python setup.py build_ext --inplace`); this checkout is the other side. Each round runs both sides
in fresh subprocesses, alternately, on an in-memory broker, on one with a journal (sync "none", so
that the CPU work is measured, not the disk) and on one in sync "group" (the flusher's fdatasyncs
and the group commit's bookkeeping, whose CPU time counts too: process time covers every thread);
the medians and the spread of the rounds are printed.
A shared machine is noisy: quote medians of interleaved rounds, never one run (docs/benchmarks.md).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
WHERE = ("memory", "journal", "group")


def one_run(checkout: str, messages: int, where: str) -> float:
    """CPU microseconds per message of one run, in this process (`checkout` first on sys.path)."""
    sys.path.insert(0, checkout)
    import journal_engine
    from journal_engine import Broker
    if not journal_engine.__file__.startswith(checkout) or journal_engine.IMPLEMENTATION != "cython":
        raise SystemExit(f"{checkout}: imported {journal_engine.__file__} ({journal_engine.IMPLEMENTATION}); "
                         "build its compiled core in place first")
    scratch = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        if where == "memory":
            broker = Broker()
        else:
            broker = Broker(os.path.join(scratch, "broker"), sync="none" if where == "journal" else "group")
        broker.create_queue("q")
        consumer = broker.create_consumer("q")
        body = b"x" * 256
        send, receive, ack = broker.send, consumer.receive, consumer.ack
        started = time.process_time()
        for _ in range(messages):
            send("q", body)
            ack(receive())
        cpu = time.process_time() - started
        broker.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return cpu / messages * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", nargs="?", help="the other checkout (built)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--one", nargs=2, metavar=("CHECKOUT", "WHERE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(str(Path(args.one[0]).resolve()), args.messages, args.one[1])))
        return 0
    if not args.base:
        parser.error("name the base checkout")
    sides = {"base": str(Path(args.base).resolve()), "this": str(HERE)}
    results: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for side, checkout in sides.items():
            for where in WHERE:
                done = subprocess.run([sys.executable, __file__, "--one", checkout, where, "--messages",
                                       str(args.messages)], capture_output=True, text=True, check=True,
                                      cwd=tempfile.gettempdir(), env={**os.environ, "PYTHONPATH": ""})
                results.setdefault((where, side), []).append(json.loads(done.stdout))
    print(f"{'broker':8} {'side':5} {'median us/msg':>14} {'min':>7} {'max':>7}   this / base (median)")
    for where in WHERE:
        base = statistics.median(results[(where, "base")])
        for side in sides:
            values = results[(where, side)]
            median = statistics.median(values)
            print(f"{where:8} {side:5} {median:14.3f} {min(values):7.3f} {max(values):7.3f}   {median / base:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
