"""A/B of a broker's recovery with message priorities (the priority issue's bar), two checkouts.

    python bench/ab_priority_recovery.py BASE_CHECKOUT [--rounds 7] [--messages 1000000]

BASE_CHECKOUT is another checkout of journal_engine with its compiled core built in place, from
before priorities (or any other); this checkout is the other side. Two stores of MESSAGES messages of
64 bytes in one queue are written once by this checkout, as a SIGKILL leaves them (synced, never
closed: no checkpoint, every file decoded): every message of the default priority, and priorities 0-9
in turn (a store of the default priority is in the format both sides read). Each round copies a store
into a scratch directory (on /dev/shm when there is one) and times, in a fresh subprocess,
``Broker(dir)``, ``create_consumer`` and one ``receive()``: both sides on the one-priority store, this
side on the mixed one, alternately. Medians and min-max of the rounds are printed, CPU
(``time.process_time``, every thread) and wall; quote them with the load of the machine
(docs/benchmarks.md, "Recovery with message priorities").
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
QUEUE = "waiting"
BODY = b"w" * 64


def write_store(directory: Path, messages: int, mixed: bool) -> None:
    """A broker directory left as a SIGKILL leaves it: synced, never closed (in a subprocess)."""
    sys.path.insert(0, str(HERE))
    from journal_engine import Broker
    broker = Broker(directory, sync="none")
    broker.create_queue(QUEUE)
    for sent in range(messages):
        broker.send(QUEUE, BODY, priority=sent % 10 if mixed else 4)
    broker.sync()
    os._exit(0)


def one_run(checkout: str, directory: str) -> dict:
    """Broker(dir) to the first receive in this process, `checkout` first on sys.path."""
    sys.path.insert(0, checkout)
    import journal_engine
    from journal_engine import Broker
    if not journal_engine.__file__.startswith(checkout) or journal_engine.IMPLEMENTATION != "cython":
        raise SystemExit(f"{checkout}: imported {journal_engine.__file__} ({journal_engine.IMPLEMENTATION}); "
                         "build its compiled core in place first")
    started, cpu_started = time.perf_counter(), time.process_time()
    broker = Broker(directory, sync="none")
    message = broker.create_consumer(QUEUE).receive(timeout=0)
    result = {"s": time.perf_counter() - started, "cpu": time.process_time() - cpu_started}
    if message is None:
        raise SystemExit(f"{directory}: no message received")
    os._exit(print(json.dumps(result), flush=True) or 0)    # no close: a close is not recovery


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", nargs="?", help="the other checkout (built)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--write", nargs=3, metavar=("DIR", "MESSAGES", "MIXED"), help=argparse.SUPPRESS)
    parser.add_argument("--one", nargs=2, metavar=("CHECKOUT", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write:
        write_store(Path(args.write[0]), int(args.write[1]), args.write[2] == "mixed")
    if args.one:
        one_run(*args.one)
    if not args.base:
        parser.error("name the other checkout")
    memory = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="ab-priority-", dir=memory) as scratch:
        root = Path(scratch)
        for kind in ("one", "mixed"):
            subprocess.run([sys.executable, __file__, "--write", str(root / kind), str(args.messages), kind],
                           check=True)
        sides = {"base": os.path.abspath(args.base), "this": str(HERE)}
        jobs = [("base", "one"), ("this", "one"), ("this", "mixed")]
        runs: dict = {}
        for round_number in range(args.rounds):
            for side, kind in jobs if round_number % 2 == 0 else list(reversed(jobs)):
                copy = root / "copy"
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(root / kind, copy)
                out = subprocess.run([sys.executable, __file__, "--one", sides[side], str(copy)],
                                     capture_output=True, text=True, check=True).stdout
                runs.setdefault((side, kind), []).append(json.loads(out))
        print(f"{args.messages} messages of {len(BODY)} B in one queue, {args.rounds} interleaved rounds, load "
              f"average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; seconds, median (min-max)")
        for (side, kind), values in runs.items():
            print(f"  {side:5} {kind:6} CPU {_spread([run['cpu'] for run in values])}  "
                  f"wall {_spread([run['s'] for run in values])}")
        for clock in ("cpu", "s"):
            median = {key: statistics.median(run[clock] for run in values) for key, values in runs.items()}
            print(f"{'CPU' if clock == 'cpu' else 'wall'}: this/base (one priority) "
                  f"{median[('this', 'one')] / median[('base', 'one')]:.3f}; mixed/one (this) "
                  f"{median[('this', 'mixed')] / median[('this', 'one')]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
