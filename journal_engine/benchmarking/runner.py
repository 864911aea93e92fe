"""`journal-engine bench`: measure the machine, then every store on every cell, in interleaved rounds.

Order of a run:
1. say where it measures (directory, file system, device; a warning on a tmpfs), which stores are
   skipped and why;
2. measure the machine's limits (machine.py) in the same run, in the same directory;
3. estimate how long the matrix takes and say so before it starts;
4. run each cell's rounds interleaved: round r runs every store once, the order rotated by r, so a
   drift of the disk or of other work on the machine hits every store alike. Each round gets a fresh
   directory and an untimed set-up (opening, pre-creating files, starting threads) and check (every
   record is there) around the timed part;
5. hand the document to report.py (terminal table, JSON) and plots.py (PNG).

A store that fails during a round is reported skipped for that cell with the error; a store whose
module does not import is reported skipped for the whole run. None is left out silently.
"""
from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import machine, peers
from .progress import Progress
from .workloads import MATRICES, SYNC_DURABLE, AppendCell, Matrix, QueueCell, RecoveryCell, body_of

SCHEMA_NAME = "journal-engine-bench"
SCHEMA_VERSION = 1
BENCH_DIR_ENV = "JOURNAL_BENCH_DIR"
SETUP_ESTIMATE_S = 0.05          # a round's untimed open, pre-creation and check, as planned


def default_directory() -> Path:
    """$JOURNAL_BENCH_DIR, else <tmp>/journal-engine-bench (on the disk /tmp is on)."""
    return Path(os.environ.get(BENCH_DIR_ENV) or Path(tempfile.gettempdir()) / "journal-engine-bench")


@dataclass
class Options:
    directory: Path
    matrix: str = "full"
    json_path: Path | None = None
    plot_dir: Path | None = None
    keep: bool = False            # keep the data directory's contents afterwards
    doc_path: Path | None = None  # a Markdown file whose bench-command section is rewritten
    progress: bool = True


def _stats(round_rates: list[float]) -> dict:
    median = statistics.median(round_rates)
    return {"round_records_per_s": [round(rate, 1) for rate in round_rates],
            "median_records_per_s": round(median, 1),
            "min_records_per_s": round(min(round_rates), 1),
            "max_records_per_s": round(max(round_rates), 1),
            "spread_percent": round(100 * (max(round_rates) - min(round_rates)) / median, 1) if median else None}


def estimate_seconds(matrix: Matrix, limits: dict, stores: int) -> float:
    """A plan, not a promise: rounds x stores x (the machine's time for the work x 1.5 + CPU + set-up)."""
    total = 0.0
    for cell in matrix.append:
        ceiling, _ = machine.limit_for_append(limits, record_bytes=cell.record_bytes,
                                              records_per_sync=cell.records_per_sync,
                                              durable=cell.sync == SYNC_DURABLE)
        per_round = cell.records / ceiling * 1.5 + cell.records * 4e-6 + SETUP_ESTIMATE_S
        total += matrix.rounds * stores * per_round
    for cell in matrix.queue:
        total += matrix.rounds * (cell.messages * 60e-6 + cell.messages_for(False) * 1.5e-3 + 3 * SETUP_ESTIMATE_S)
    for cell in matrix.recovery:
        total += (matrix.rounds + 1) * stores * (cell.records * 3e-6 + SETUP_ESTIMATE_S) + cell.records * 30e-6 * stores
    return total


class Runner:
    def __init__(self, options: Options, console) -> None:
        self.options = options
        self.console = console
        self.matrix = MATRICES[options.matrix]()
        self.root = Path(options.directory)
        self.work = self.root / f"rounds-{os.getpid()}"   # two runs may share the directory
        self.results: list[dict] = []
        self.skipped: list[dict] = []

    # ----- the plan ----------------------------------------------------------------------------------------------

    def _available(self, stores, scenario: str):
        kept = []
        for store in stores:
            reason = peers.unavailable(store.name)
            if reason is None:
                kept.append(store)
            else:
                self.skipped.append({"store": store.name, "scenario": scenario, "cell": None, "reason": reason})
        return kept

    def run(self) -> dict:
        console, matrix = self.console, self.matrix
        self.root.mkdir(parents=True, exist_ok=True)
        facts = machine.facts(self.root)
        disk = facts["disk"]
        console.print(f"measuring in [bold]{disk['path']}[/bold]: {disk['fstype']} on {disk['device']} "
                      f"(rotational={disk['rotational']}, {disk.get('mount_options') or 'no mount options'})")
        if disk["tmpfs"]:
            console.print(f"[bold red]warning[/bold red]: {disk['path']} is on a {disk['fstype']} (memory): fdatasync "
                          "costs nothing there and no number below says anything about a disk; pass --dir on one")
        append_stores = self._available(peers.APPEND_STORES, "append")
        queue_stores = self._available(peers.QUEUE_STORES, "queue")
        recovery_stores = self._available(peers.RECOVERY_STORES, "recovery")
        for skip in self.skipped:
            console.print(f"[yellow]skipped[/yellow] {skip['store']} ({skip['scenario']}): {skip['reason']}")

        console.print(f"measuring the machine's limits ({matrix.limit_samples} raw syncs, "
                      f"{matrix.bandwidth_bytes >> 20} MiB sequential) ...")
        limits = machine.measure_limits(self.root, sync_samples=matrix.limit_samples,
                                        bandwidth_bytes=matrix.bandwidth_bytes)
        estimate = estimate_seconds(matrix, limits, len(append_stores))
        cells = len(matrix.append) + len(matrix.queue) + len(matrix.recovery)
        console.print(f"{matrix.name} matrix: {cells} cells x {matrix.rounds} interleaved rounds x up to "
                      f"{len(append_stores)} stores; about {_duration(estimate)} on this machine")

        total = (sum(matrix.rounds * len(append_stores) for _ in matrix.append)
                 + sum(matrix.rounds * len(queue_stores) for _ in matrix.queue)
                 + sum((matrix.rounds + 2) * len(recovery_stores) for _ in matrix.recovery))
        progress = Progress(self.options.progress, total, console)
        started = time.monotonic()
        try:
            for cell in matrix.append:
                self._append_cell(cell, append_stores, limits, progress)
            for cell in matrix.queue:
                self._queue_cell(cell, queue_stores, limits, progress)
            for cell in matrix.recovery:
                self._recovery_cell(cell, recovery_stores, limits, progress)
        finally:
            progress.stop()
            if not self.options.keep:
                shutil.rmtree(self.work, ignore_errors=True)
        console.print("measuring the machine's limits again ...")
        limits_measured = [limits, machine.measure_limits(self.root, sync_samples=matrix.limit_samples,
                                                          bandwidth_bytes=matrix.bandwidth_bytes)]
        limits = machine.best_of(limits_measured)
        self._apply_limits(limits)
        self._add_ratios()
        return {
            "schema": SCHEMA_NAME,
            "schema_version": SCHEMA_VERSION,
            "matrix": matrix.name,
            "rounds": matrix.rounds,
            "waiters": list(matrix.waiters),
            "directory": str(self.root.resolve()),
            "machine": facts,
            "limits": limits,
            "limits_measured": limits_measured,
            "estimated_s": round(estimate, 1),
            "duration_s": round(time.monotonic() - started, 1),
            "loadavg_at_end": list(os.getloadavg()),
            "skipped": self.skipped,
            "results": self.results,
        }

    # ----- the rounds --------------------------------------------------------------------------------------------

    def _fresh(self, name: str) -> Path:
        return peers.fresh_directory(self.work / name)

    def _skip_cell(self, store, scenario: str, key: str, reason: str) -> None:
        self.skipped.append({"store": store.name, "scenario": scenario, "cell": key, "reason": reason})

    def _rotated(self, stores: list, round_index: int) -> list:
        shift = round_index % len(stores) if stores else 0
        return stores[shift:] + stores[:shift]

    def _append_cell(self, cell: AppendCell, stores, limits, progress) -> None:
        durable = cell.sync == SYNC_DURABLE
        running = []
        for store in stores:
            reason = store.supports(cell)
            if reason is None:
                running.append(store)
            else:
                self._skip_cell(store, "append", cell.key, reason)
                for _ in range(self.matrix.rounds):
                    progress.step(f"{cell.key} {store.name}")
        rates: dict[str, list[float]] = {store.name: [] for store in running}
        latencies: dict[str, list[float]] = {store.name: [] for store in running}
        failed: set[str] = set()
        for round_index in range(self.matrix.rounds):
            for store in self._rotated(running, round_index):
                progress.step(f"{cell.key} {store.name}")
                if store.name in failed:
                    continue
                try:
                    seconds, commit_latencies = self._append_round(store, cell)
                except Exception as exc:   # a peer that breaks is reported, the run goes on
                    failed.add(store.name)
                    self._skip_cell(store, "append", cell.key, f"failed: {type(exc).__name__}: {exc}")
                    continue
                rates[store.name].append(cell.records / seconds)
                latencies[store.name].extend(commit_latencies)
        ceiling, bound = machine.limit_for_append(limits, record_bytes=cell.record_bytes,
                                                  records_per_sync=cell.records_per_sync, durable=durable)
        for store in running:
            if store.name in failed:
                continue
            self.results.append({
                "scenario": "append", "cell": {**asdict(cell), "key": cell.key}, "store": store.name,
                "ours": store.ours, "settings": store.settings(cell), "records_per_round": cell.records,
                **_stats(rates[store.name]),
                "limit_records_per_s": round(ceiling, 1), "limit": bound,
                "sync_latency_us": machine.percentiles_us(latencies[store.name]) if durable else None,
            })

    def _append_round(self, store, cell: AppendCell) -> tuple[float, list[float]]:
        from .workloads import ThreadGang
        directory = self._fresh(store.name)
        handle = store.open(directory, cell)
        try:
            gang = ThreadGang(handle.commit, cell, record_latency=cell.sync == SYNC_DURABLE)
            started = time.perf_counter()
            gang.run()
            handle.finish()
            seconds = time.perf_counter() - started
            count = handle.count()
        finally:
            handle.close()
        shutil.rmtree(directory, ignore_errors=True)
        if count != cell.records:
            raise AssertionError(f"{count} records stored after a round of {cell.records}")
        return seconds, gang.commits().latencies_s

    def _queue_cell(self, cell: QueueCell, stores, limits, progress) -> None:
        rates: dict[str, list[float]] = {store.name: [] for store in stores}
        failed: set[str] = set()
        for round_index in range(self.matrix.rounds):
            for store in self._rotated(list(stores), round_index):
                progress.step(f"{cell.key} {store.name}")
                if store.name in failed:
                    continue
                directory = self._fresh(store.name)
                messages = cell.messages_for(store.ours)
                try:
                    handle = store.open(directory, cell, messages)
                    try:
                        started = time.perf_counter()
                        handle.run()
                        seconds = time.perf_counter() - started
                        handle.check()
                    finally:
                        handle.close()
                except Exception as exc:
                    failed.add(store.name)
                    self._skip_cell(store, "queue", cell.key, f"failed: {type(exc).__name__}: {exc}")
                    continue
                finally:
                    shutil.rmtree(directory, ignore_errors=True)
                rates[store.name].append(messages / seconds)
        ceiling, bound = machine.limit_for_queue(limits, operation=cell.operation, record_bytes=cell.record_bytes)
        for store in stores:
            if store.name not in failed:
                self.results.append({
                    "scenario": cell.operation, "cell": {**asdict(cell), "key": cell.key}, "store": store.name,
                    "ours": store.ours, "settings": store.settings(cell),
                    "records_per_round": cell.messages_for(store.ours),
                    **_stats(rates[store.name]),
                    "limit_records_per_s": round(ceiling, 1) if ceiling else None, "limit": bound,
                    "sync_latency_us": None,
                })

    def _recovery_cell(self, cell: RecoveryCell, stores, limits, progress) -> None:
        body = body_of(cell.record_bytes)
        directories: dict[str, Path] = {}
        failed: set[str] = set()
        for store in stores:   # written once, untimed, then read once untimed to warm the page cache
            progress.step(f"{cell.key}: writing {store.name}")
            try:
                directories[store.name] = self._fresh(f"recovery-{store.name}")
                store.fill(directories[store.name], cell, body)
                count = store.recover(directories[store.name])
                if count != cell.records:
                    raise AssertionError(f"{count} records recovered of {cell.records}")
            except Exception as exc:
                failed.add(store.name)
                self._skip_cell(store, "recovery", cell.key, f"failed: {type(exc).__name__}: {exc}")
            progress.step(f"{cell.key}: warming {store.name}")
        rates: dict[str, list[float]] = {store.name: [] for store in stores}
        for round_index in range(self.matrix.rounds):
            for store in self._rotated(list(stores), round_index):
                progress.step(f"{cell.key} {store.name}")
                if store.name in failed:
                    continue
                started = time.perf_counter()
                count = store.recover(directories[store.name])
                rates[store.name].append(cell.records / (time.perf_counter() - started))
                if count != cell.records:
                    raise AssertionError(f"{store.name}: {count} records recovered of {cell.records}")
        for path in directories.values():
            shutil.rmtree(path, ignore_errors=True)
        ceiling, bound = machine.limit_for_recovery(limits, record_bytes=cell.record_bytes)
        for store in stores:
            if store.name not in failed:
                self.results.append({
                    "scenario": "recovery", "cell": {**asdict(cell), "key": cell.key}, "store": store.name,
                    "ours": store.ours, "settings": store.settings, "records_per_round": cell.records,
                    **_stats(rates[store.name]),
                    "limit_records_per_s": round(ceiling, 1), "limit": bound, "sync_latency_us": None,
                })

    def _apply_limits(self, limits: dict) -> None:
        """Every result's ceiling from the limits the run keeps (measured before and after the matrix)."""
        for result in self.results:
            cell = result["cell"]
            if result["scenario"] == "append":
                ceiling, bound = machine.limit_for_append(limits, record_bytes=cell["record_bytes"],
                                                          records_per_sync=cell["records_per_sync"],
                                                          durable=cell["sync"] == SYNC_DURABLE)
            elif result["scenario"] == "recovery":
                ceiling, bound = machine.limit_for_recovery(limits, record_bytes=cell["record_bytes"])
            else:
                ceiling, bound = machine.limit_for_queue(limits, operation=cell["operation"],
                                                         record_bytes=cell["record_bytes"])
            result["limit_records_per_s"] = round(ceiling, 1) if ceiling else None
            result["limit"] = bound

    def _add_ratios(self) -> None:
        """Per cell: each store's median against the best peer's (not ours), and against the limit."""
        by_cell: dict[tuple[str, str], list[dict]] = {}
        for result in self.results:
            by_cell.setdefault((result["scenario"], result["cell"]["key"]), []).append(result)
        for results in by_cell.values():
            peer_results = [r for r in results if not r["ours"]]
            best = max(peer_results, key=lambda r: r["median_records_per_s"]) if peer_results else None
            for result in results:
                median = result["median_records_per_s"]
                result["best_peer"] = best["store"] if best else None
                # three significant digits, not three decimals: a slow store's small fraction must not read as 0
                result["ratio_to_best_peer"] = float(f"{median / best['median_records_per_s']:.3g}") \
                    if best and best["median_records_per_s"] else None
                limit = result["limit_records_per_s"]
                result["fraction_of_limit"] = float(f"{median / limit:.3g}") if limit else None


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min"


def run(options: Options, console=None, out=None) -> dict:
    """Runs the matrix, prints the table on ``out`` (default: stdout), writes the JSON and the plots asked
    for; returns the document. The files are written even when printing the table fails (a reader of
    stdout gone away: ``journal-engine bench | head``); that error is raised after them."""
    from rich.console import Console

    from . import report
    console = console or Console(stderr=True)
    document = Runner(options, console).run()

    def write_plots(document: dict, directory) -> list:
        from . import plots
        return plots.write_plots(document, directory)

    report.present(document, console, out, report.print_tables, [
        (options.json_path, report.write_json, "JSON"),
        (options.doc_path, report.update_doc, "tables"),
        (options.plot_dir, write_plots, "plot")])
    return document


SERVED_ONLY = ("targets", "rounds", "seconds", "messages", "producers", "warm_up", "celery", "celery_tasks")


def main(args, out=None) -> int:
    """The `journal-engine bench` subcommand (cli.py builds the parser with add_arguments); ``out``: the
    console of the tables (cli's, whose closed pipe ends the command quietly)."""
    import sys
    directory = Path(args.dir) if args.dir else default_directory()
    if args.served:
        from . import served_runner
        try:
            options = served_runner.options_from(args, directory)
        except ValueError as error:
            print(f"journal-engine bench: error: {error}", file=sys.stderr)
            return 2
        try:
            served_runner.run(options, out=out)
        except KeyboardInterrupt:
            print("journal-engine bench: interrupted; the broker running then was stopped", file=sys.stderr)
            return 130
        return 0
    given = [name for name in SERVED_ONLY if getattr(args, name) is not None]
    if given:
        print(f"journal-engine bench: error: --{given[0].replace('_', '-')} needs --served", file=sys.stderr)
        return 2
    matrix = "tiny" if args.tiny else "quick" if args.quick else "full"
    options = Options(directory=directory, matrix=matrix,
                      json_path=Path(args.json) if args.json else None,
                      plot_dir=Path(args.plot) if args.plot else None,
                      keep=args.keep, progress=not args.no_progress,
                      doc_path=Path(args.doc) if args.doc else None)
    run(options, out=out)
    return 0


def add_arguments(parser) -> None:
    import argparse
    parser.add_argument("--quick", action="store_true", help="a small matrix, about a minute (with --served: one "
                                                                 "round of short workloads on our server alone)")
    parser.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)   # the test suite's run
    parser.add_argument("--dir", help=f"where the data goes (default ${BENCH_DIR_ENV}, else <tmp>/journal-engine-bench);"
                                      " it must be on the disk you mean to measure")
    parser.add_argument("--json", metavar="FILE", help=f"write every result as JSON ({SCHEMA_NAME}, "
                                                         f"schema version {SCHEMA_VERSION})")
    parser.add_argument("--plot", metavar="DIR", help="write PNG plots (matplotlib) into DIR (with --served: "
                                                      "a FILE.png, or DIR/served-brokers.png)")
    parser.add_argument("--doc", metavar="FILE", help="rewrite the tables between the bench-command markers of "
                                                      "a Markdown file (docs/benchmarks.md)")
    parser.add_argument("--keep", action="store_true", help="keep the rounds' data afterwards")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    served = parser.add_argument_group(
        "served brokers", "--served: journal-engine serve-stomp against RabbitMQ and ActiveMQ Classic over STOMP, and "
                          "Celery on it against RabbitMQ and Redis; each broker installed here is started by the run "
                          "on free loopback ports, in --dir, and stopped after (docs/benchmarks.md)")
    served.add_argument("--served", action="store_true", help="measure the served brokers instead of the stores")
    served.add_argument("--targets", metavar="LIST", help="comma-separated among served, served-lmdb, rabbitmq, "
                                                          "activemq, redis (Celery only), coilmq (default: all but "
                                                          "coilmq; --quick: served)")
    served.add_argument("--rounds", type=int, metavar="N", help="interleaved rounds (default 3; --quick 1)")
    served.add_argument("--seconds", type=float, metavar="S", help="each receipted workload's length (default 3)")
    served.add_argument("--messages", type=int, metavar="N",
                        help="the ingest's messages, drained after (default 20000)")
    served.add_argument("--producers", metavar="LIST", help="the receipted workloads' producers (and as many "
                                                            "consumers), e.g. 1,8,32 (the default)")
    served.add_argument("--warm-up", type=float, metavar="S", help="untimed receipted work on each fresh broker "
                                                                   "before its workload (default 1; --quick 0)")
    served.add_argument("--celery", action=argparse.BooleanOptionalAction, default=None,
                        help="Celery tasks/s on served, rabbitmq and redis (default: on; off with --quick)")
    served.add_argument("--celery-tasks", type=int, metavar="N", help="add.delay calls per Celery round (default 5000)")
