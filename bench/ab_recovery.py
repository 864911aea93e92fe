"""A/B of recovery at memory speed (issue 26's table), two checkouts, each measure with its floor.

    python bench/ab_recovery.py BASE_CHECKOUT [--rounds 5] [--records 1000000]

BASE_CHECKOUT is another checkout of journal_engine with its compiled core built in place; this
checkout is the other side. The data (a journal and an LMDB environment of RECORDS x 256 B, and a
broker directory of RECORDS durable messages in 10 queues) is written once by this checkout (the
format is the same on both sides). Each round runs every measure of both sides in fresh
subprocesses, alternately, with the page cache warm: ``load()`` + one pass over every body,
``load(copy=True)`` + one pass (a base without ``copy`` runs its ``load()``), ``load()`` + one pass with
no checkpoint to take (this side: a load after a crash decodes every file), an LMDB cursor scan,
the mapped floor (every data file mapped read-only and CRC32C'd in place, nothing parsed), the owned
floor (every file read into a fresh buffer and CRC32C'd), ``Broker(dir)`` to the first receive, and
the anonymous memory (RssAnon) the loaded result holds. The clocks stop when a measure is done,
before the journal, broker or LMDB environment is closed. Medians and quartiles of the rounds are
printed; quote them with the load of the machine (docs/benchmarks.md).
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
QUEUES = 10
MEASURES = ("views", "copy", "broker")              # on both sides
# on this side only: the peers do not depend on the checkout; "decoded" is "views" with the checkpoint of the
# last clean close removed first (a load after a crash decodes every file)
PEERS = ("lmdb", "floor_mapped", "floor_owned", "decoded")


def _anon_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def one_run(checkout: str, root: str, what: str, side: str = "this") -> dict:
    """One measure in this process (`checkout` first on sys.path): seconds, bytes read, RssAnon grown.
    Each side loads its own copy of the journal (``journal-SIDE``), whose checkpoint its own close
    saved: the two sides may write checkpoints of different versions."""
    sys.path.insert(0, checkout)
    import journal_engine
    from journal_engine import Broker, Journal
    from journal_engine._impl import crc32c
    if not journal_engine.__file__.startswith(checkout) or journal_engine.IMPLEMENTATION != "cython":
        raise SystemExit(f"{checkout}: imported {journal_engine.__file__} ({journal_engine.IMPLEMENTATION}); "
                         "build its compiled core in place first")
    journal_dir, total, grown = Path(root) / f"journal-{side}", 0, 0
    if what == "decoded":
        (journal_dir / "journal.jck").unlink(missing_ok=True)      # before the clocks start
    started, cpu_started, before = time.perf_counter(), time.process_time(), _anon_bytes()

    def elapsed() -> tuple[float, float]:
        return time.perf_counter() - started, time.process_time() - cpu_started
    # the clocks stop when the measure is done, before anything is closed (a close is not recovery)
    if what in ("views", "copy", "decoded"):
        with Journal(journal_dir) as journal:
            has_copy = "copy" in Journal.load.__code__.co_varnames
            result = journal.load(copy=True) if what == "copy" and has_copy else journal.load()
            grown = _anon_bytes() - before
            total = sum(len(record.body) for record in result.records.values())
            done = elapsed()
    elif what == "broker":
        broker = Broker(Path(root) / "broker")
        message = broker.create_consumer("q3").receive()
        done = elapsed()
        total = len(message.body) if type(message.body) is bytes else -1
        grown = _anon_bytes() - before
        broker.close()
    elif what == "lmdb":
        import lmdb
        env = lmdb.open(str(Path(root) / "lmdb"), readonly=True, lock=False)
        with env.begin() as txn:
            total = sum(len(value) for _key, value in txn.cursor())
        done = elapsed()
        env.close()
    else:
        held: list = []
        crc = 0
        for path in sorted(journal_dir.glob("*.jej")):
            with open(path, "rb", buffering=0) as handle:
                if what == "floor_mapped":
                    buffer = mmap.mmap(handle.fileno(), 0, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                                       prot=mmap.PROT_READ)
                    total += len(buffer)
                else:
                    buffer = bytearray(os.fstat(handle.fileno()).st_size)
                    total += handle.readinto(buffer)
            crc = crc32c(buffer, crc)
            held.append(buffer)
        done = elapsed()
    return {"s": done[0], "cpu": done[1], "bytes": total, "anon": grown}


def write_data(root: Path, records: int) -> None:
    import lmdb
    sys.path.insert(0, str(HERE))
    from journal_engine import Broker, Journal
    from journal_engine.benchmarking.workloads import BODY, KEY
    with Journal(root / "journal-this", sync="none") as journal:
        journal.load()
        for record_id in range(records):
            journal.add(record_id, 1, BODY)
    env = lmdb.open(str(root / "lmdb"), map_size=max(1 << 30, records * 1024))
    with env.begin(write=True) as txn:
        for record_id in range(records):
            txn.put(KEY.pack(record_id), BODY)
    env.close()
    broker = Broker(root / "broker", sync="none")
    for queue in range(QUEUES):
        broker.create_queue(f"q{queue}")
    for sent in range(records):
        broker.send(f"q{sent % QUEUES}", BODY)
    broker.close()


def _spread(values: list[float]) -> str:
    q1, median, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (values[0],) * 3
    return f"{median:.3f} ({q1:.3f}-{q3:.3f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", nargs="?", help="the other checkout (built)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--one", nargs=4, metavar=("CHECKOUT", "ROOT", "WHAT", "SIDE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(*args.one)))
        return 0
    if not args.base:
        parser.error("name the other checkout")
    root = Path(tempfile.mkdtemp(prefix="ab-recovery-"))
    try:
        write_data(root, args.records)
        shutil.copytree(root / "journal-this", root / "journal-base")
        sides = {"this": str(HERE), "base": os.path.abspath(args.base)}
        for side in sides:      # each side's close saves its own checkpoint before the rounds
            subprocess.run([sys.executable, __file__, "--one", sides[side], str(root), "views", side], check=True,
                           capture_output=True)
        runs: dict = {}
        for round_number in range(args.rounds):
            order = list(sides) if round_number % 2 == 0 else list(reversed(sides))
            jobs = [(side, what) for what in MEASURES for side in order] + [("this", what) for what in PEERS]
            for side, what in jobs:
                out = subprocess.run([sys.executable, __file__, "--one", sides[side], str(root), what, side],
                                     capture_output=True, text=True, check=True).stdout
                runs.setdefault((side, what), []).append(json.loads(out))
        print(f"{args.records} x 256 B, {args.rounds} interleaved rounds, load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} cores; seconds, median (quartiles)")
        for (side, what), values in sorted(runs.items()):
            anon = statistics.median(run["anon"] for run in values)
            print(f"  {side:5} {what:13} wall {_spread([run['s'] for run in values])}  CPU "
                  f"{_spread([run['cpu'] for run in values])}  RssAnon grown {anon / 1e6:.0f} MB")
        body_bytes = args.records * 256
        _paired(runs, sides)
        for clock in ("s", "cpu"):
            seconds = {key: [run[clock] for run in value] for key, value in runs.items()}
            _ratios(seconds, runs, sides, args.records, body_bytes, "wall" if clock == "s" else "CPU")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def _paired(runs: dict, sides: dict) -> None:
    """The ratios of each round's own measures (wall), median and quartiles: the machine's load
    shifts between rounds more than between two measures of one round, and this is how far a ratio
    of the medians moves with it."""
    for side in sides:
        views = [run["s"] for run in runs[(side, "views")]]
        lmdb = [run["s"] for run in runs[("this", "lmdb")]]
        mapped = [run["s"] for run in runs[("this", "floor_mapped")]]
        print(f"{side} (wall, paired by round): LMDB / (load+pass) "
              f"{_spread([peer / own for peer, own in zip(lmdb, views)])}x; (load+pass) / mapped floor "
              f"{_spread([own / floor for own, floor in zip(views, mapped)])}x")


def _ratios(seconds: dict, runs: dict, sides: dict, records: int, body_bytes: int, clock: str) -> None:
    """The issue's table of each side on one clock, from the medians."""
    lmdb_s = statistics.median(seconds[("this", "lmdb")])
    mapped, owned = (statistics.median(seconds[("this", name)]) for name in ("floor_mapped", "floor_owned"))
    for side in sides:
        views, copy = statistics.median(seconds[(side, "views")]), statistics.median(seconds[(side, "copy")])
        broker = statistics.median(seconds[(side, "broker")])
        anon = statistics.median(run["anon"] for run in runs[(side, "views")])
        print(f"{side} ({clock}): LMDB / (load+pass) {lmdb_s / views:.2f}x; (load+pass) / mapped floor "
              f"{views / mapped:.2f}x; (load(copy=True)+pass) / owned floor {copy / owned:.2f}x; Broker(dir) to "
              f"the first receive {records / broker / 1e6:.2f}M msg/s; RssAnon after load() / body bytes "
              f"{anon / body_bytes:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
