"""What ``load(copy=True)`` costs against ``load()``: wall and CPU time, and the memory the result holds.

    python bench/load_copy_cost.py [--rounds 7] [--records 200000] [--body-bytes 256]

``load()`` returns bodies as views into the mapped data files (the files' pages in the page cache,
shared and reclaimable, no copy); ``load(copy=True)`` returns owned ``bytes``, which no other
process's cut of a file can reach (README, docs/body-views.md). A journal of RECORDS bodies is
written once (closed cleanly, so each load replays from the checkpoint, as a restart after a clean
stop does); each round runs both loads in fresh subprocesses, alternating which goes first, with the
page cache warm. A run measures ``load()`` alone (the clock stops when it returns, before the
close), and the anonymous memory (RssAnon, /proc/self/status) the process grew by while loading:
what holding the result costs beyond the page cache (and again after a pass that asks every record
for its body, in case bodies are made when first asked for). A third measure, ``load()`` then ``bytes()``
of every body, is what a caller pays who copies each view itself. Medians and quartiles are printed;
quote them with the load of the machine (docs/benchmarks.md, "What load(copy=True) costs").
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

from ab_recovery import _anon_bytes     # (bench/ is this script's sys.path[0])

HERE = Path(__file__).resolve().parent.parent
MEASURES = ("views", "copy", "views_then_bytes")


def one_run(directory: str, what: str) -> dict:
    """One measure in this process: seconds (wall, CPU), RssAnon grown, records and body bytes seen."""
    sys.path.insert(0, str(HERE))
    from journal_engine import IMPLEMENTATION, Journal
    with Journal(directory) as journal:
        before = _anon_bytes()
        started, cpu_started = time.perf_counter(), time.process_time()
        result = journal.load(copy=(what == "copy"))
        if what == "views_then_bytes":
            owned = [bytes(record.body) for record in result.records.values()]
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        grown = _anon_bytes() - before
        body_bytes = sum(len(record.body) for record in result.records.values())
        kinds = {type(record.body).__name__ for record in result.records.values()}
        grown_after_pass = _anon_bytes() - before      # every body asked for once (made now if made lazily)
        checkpointed = result.report.checkpointed_files
        if what == "views_then_bytes":
            del owned
    return {"s": wall, "cpu": cpu, "anon": grown, "anon_after_pass": grown_after_pass, "records": len(result.records), "body_bytes": body_bytes,
            "body_types": sorted(kinds), "checkpointed_files": checkpointed, "implementation": IMPLEMENTATION}


def write_journal(directory: Path, records: int, body_bytes: int) -> None:
    sys.path.insert(0, str(HERE))
    from journal_engine import Journal
    body = b"b" * body_bytes
    with Journal(directory, sync="none") as journal:
        journal.load()
        for record_id in range(1, records + 1):
            journal.add(record_id, 1, body)


def _spread(values: list[float], scale: float = 1.0, digits: int = 3) -> str:
    q1, median, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (values[0],) * 3
    return f"{median * scale:.{digits}f} ({q1 * scale:.{digits}f}-{q3 * scale:.{digits}f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--body-bytes", type=int, default=256)
    parser.add_argument("--one", nargs=2, metavar=("DIRECTORY", "WHAT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(*args.one)))
        return 0
    root = Path(tempfile.mkdtemp(prefix="load-copy-cost-"))
    try:
        directory = root / "journal"
        write_journal(directory, args.records, args.body_bytes)
        runs: dict = {what: [] for what in MEASURES}
        for round_number in range(args.rounds):
            order = MEASURES if round_number % 2 == 0 else tuple(reversed(MEASURES))
            for what in order:
                out = subprocess.run([sys.executable, __file__, "--one", str(directory), what],
                                     capture_output=True, text=True, check=True).stdout
                runs[what].append(json.loads(out))
        first = runs["views"][0]
        print(f"{args.records} x {args.body_bytes} B ({first['body_bytes'] / 1e6:.1f} MB of bodies), "
              f"{args.rounds} interleaved rounds, {first['implementation']} core, checkpointed files "
              f"{first['checkpointed_files']}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
              "median (quartiles)")
        for what in MEASURES:
            values = runs[what]
            print(f"  {what:17} bodies {'/'.join(values[0]['body_types']):5} wall s "
                  f"{_spread([run['s'] for run in values])}  CPU s {_spread([run['cpu'] for run in values])}  "
                  f"RssAnon grown MB {_spread([run['anon'] for run in values], 1e-6, 1)}, after a pass "
                  f"{_spread([run['anon_after_pass'] for run in values], 1e-6, 1)}")
        paired = [copy["s"] / views["s"] for copy, views in zip(runs["copy"], runs["views"])]
        extra = [(copy["anon"] - views["anon"]) / copy["body_bytes"] for copy, views in zip(runs["copy"], runs["views"])]
        print(f"load(copy=True) / load(), wall, paired by round: {_spread(paired, digits=2)}x; "
              f"extra RssAnon per body byte: {_spread(extra, digits=2)}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
