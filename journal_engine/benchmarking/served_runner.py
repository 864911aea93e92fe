"""`journal-engine bench --served`: our STOMP server against RabbitMQ and ActiveMQ Classic, and Celery on
it against RabbitMQ and Redis, each broker started by the run on free loopback ports and stopped after.

Order of a run:
1. say where the brokers' data goes (directory, file system; a warning on a tmpfs), which targets
   are skipped and why (a broker not installed: the apt-get command that installs it);
2. the STOMP rounds, interleaved: round r runs every workload on every target, the targets' order
   rotated by r, each workload on a fresh broker (started in a scratch directory of its own, stopped
   and its directory removed after), so that a drift of the disk or of other work on the machine
   hits every target alike. Each fresh broker first gets ``warm_up_s`` of untimed receipted work
   (8 producers, 8 consumers, every message consumed), so that none is measured cold (a JVM's JIT,
   Erlang's and our own first allocations). Workloads (served_workload.py): ``receipted N`` for
   each N of ``producers`` (N producers waiting for each RECEIPT, N consumers, ``seconds`` s),
   ``ingest`` (8 producers, ``messages`` without receipts) and ``drain`` (that backlog, 8 consumers
   with ACKs);
3. the Celery rounds, interleaved the same way (celery_workload.py: ``celery_tasks`` ``add.delay``,
   acks_late, a prefork worker of 2 processes) on our server, RabbitMQ (AMQP) and Redis;
4. the document (served_report.py): a table, JSON (served_report.schema.json), a PNG.

A target whose broker fails in a round (does not start, loses a message, times out) is reported
skipped for that workload with the error, its scratch directory kept; the run goes on. A Ctrl-C
stops the broker running at that moment (and waits for it) before the command exits.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import celery_workload, machine, served_peers, served_workload
from .progress import Progress

SCHEMA_NAME = "journal-engine-bench-served"
SCHEMA_VERSION = 1

STOMP_TARGETS = ("served", "served-lmdb", "rabbitmq", "activemq")
CELERY_TARGETS = ("served", "rabbitmq", "redis")
ALL_TARGETS = ("served", "served-lmdb", "rabbitmq", "activemq", "redis", "coilmq")
DEFAULT_TARGETS = ("served", "served-lmdb", "rabbitmq", "activemq", "redis")   # coilmq: on request
INGEST_PRODUCERS = INGEST_CONSUMERS = 8
# what a broker's failure raises in a round (the clients' RuntimeError for a lost message or an ERROR frame,
# a child's timeout, a JSON line that never came)
FAILURES = (served_peers.PeerUnavailable, served_peers.PeerStartError, RuntimeError, OSError,
            subprocess.TimeoutExpired, json.JSONDecodeError)


@dataclass(frozen=True)
class Sizes:
    rounds: int
    seconds: float
    messages: int
    producers: tuple[int, ...]
    celery: bool
    celery_tasks: int
    targets: tuple[str, ...]
    warm_up_s: float = 0.0       # untimed receipted work (8 producers, 8 consumers) on each fresh broker first


FULL = Sizes(rounds=3, seconds=3.0, messages=20000, producers=(1, 8, 32), celery=True, celery_tasks=5000,
             targets=DEFAULT_TARGETS, warm_up_s=1.0)
QUICK = Sizes(rounds=1, seconds=1.0, messages=2000, producers=(1, 8), celery=False, celery_tasks=1000,
              targets=("served",), warm_up_s=0.0)


@dataclass
class Options:
    directory: Path
    sizes: Sizes = FULL
    quick: bool = False
    celery_concurrency: int = 2
    json_path: Path | None = None
    plot_path: Path | None = None
    keep: bool = False
    progress: bool = True


@dataclass
class _Work:
    """One workload run on a fresh broker; ``run(broker)`` returns rows by workload name."""
    key: str
    part: str                                   # "stomp" or "celery"
    names: tuple[str, ...]                      # the workloads (rows) it yields
    run: Callable[[served_peers.Broker], dict[str, dict]]
    applies: Callable[[type[served_peers.Broker]], bool] = field(default=lambda broker: True)


def _row(phase: served_workload.Phase) -> dict:
    return {"per_s": phase.per_s, "p50_ms": phase.p50_ms, "p99_ms": phase.p99_ms,
            "fdatasyncs_per_message": phase.fdatasyncs_per_message, "messages": phase.messages}


def stomp_work(sizes: Sizes) -> list[_Work]:
    work = [_Work(f"receipted {n}", "stomp", (f"receipted {n}",),
                  lambda broker, n=n: {f"receipted {n}": _row(served_workload.receipted(broker.endpoint, n, n,
                                                                                        sizes.seconds))},
                  lambda broker: broker.speaks_stomp)
            for n in sizes.producers]

    def ingest_drain(broker) -> dict:
        ingest, drain = served_workload.ingest_then_drain(broker.endpoint, INGEST_PRODUCERS, INGEST_CONSUMERS,
                                                          sizes.messages)
        return {"ingest": _row(ingest), "drain": _row(drain)}

    work.append(_Work("ingest+drain", "stomp", ("ingest", "drain"), ingest_drain, lambda broker: broker.speaks_stomp))
    return work


def celery_work(sizes: Sizes, concurrency: int, scratch: Callable[[], Path]) -> _Work:
    name = f"celery {sizes.celery_tasks} add.delay"

    def run(broker) -> dict:
        url = broker.broker_url()
        reason = celery_workload.unavailable(url)
        if reason is not None:
            raise served_peers.PeerUnavailable(reason)
        result = celery_workload.tasks_per_s(url, scratch(), tasks=sizes.celery_tasks, concurrency=concurrency)
        return {name: {"per_s": result.per_s, "publish_per_s": result.publish_per_s, "p50_ms": None, "p99_ms": None,
                       "fdatasyncs_per_message": None, "messages": result.tasks}}

    return _Work(name, "celery", (name,), run, lambda broker: broker.celery)


def _summary(rows: list[dict]) -> dict:
    rates = [row["per_s"] for row in rows]
    median = statistics.median(rates)

    def median_of(key: str) -> float | None:
        values = [row[key] for row in rows if row.get(key) is not None]
        return float(f"{statistics.median(values):.4g}") if values else None

    return {"round_per_s": [round(rate, 1) for rate in rates], "median_per_s": round(median, 1),
            "min_per_s": round(min(rates), 1), "max_per_s": round(max(rates), 1),
            "spread_percent": round(100 * (max(rates) - min(rates)) / median, 1) if median else None,
            "p50_ms": median_of("p50_ms"), "p99_ms": median_of("p99_ms"),
            "fdatasyncs_per_message": median_of("fdatasyncs_per_message"),
            "publish_per_s": median_of("publish_per_s"), "messages_per_round": [row["messages"] for row in rows]}


def _rotated(items: list, round_index: int) -> list:
    shift = round_index % len(items) if items else 0
    return items[shift:] + items[:shift]


class ServedRunner:
    def __init__(self, options: Options, console) -> None:
        self.options = options
        self.sizes = options.sizes
        self.console = console
        self.root = Path(options.directory)
        self.work_dir = self.root / f"served-{os.getpid()}"
        self.skipped: list[dict] = []
        self.samples: dict[tuple[str, str, str], list[dict]] = {}   # (part, workload, target) -> rows
        self.banners: dict[str, str] = {}
        self.failed: set[tuple[str, str]] = set()                   # (work key, target)
        self._counter = 0

    def _skip(self, target: str, part: str, workload: str | None, reason: str) -> None:
        self.skipped.append({"target": target, "part": part, "workload": workload, "reason": reason})

    def _scratch(self, name: str) -> Path:
        self._counter += 1
        path = self.work_dir / f"{self._counter:03d}-{name}"
        shutil.rmtree(path, ignore_errors=True)
        return path

    def _brokers(self, wanted: tuple[str, ...], part: str, able) -> list[type[served_peers.Broker]]:
        kept = []
        for name in wanted:
            broker = served_peers.BROKERS[name]
            if not able(broker):
                continue
            reason = broker.unavailable()
            if reason is None:
                kept.append(broker)
            else:
                self._skip(name, part, None, f"not installed: {reason}")
        return kept

    def run(self) -> dict:
        console, sizes = self.console, self.sizes
        self.root.mkdir(parents=True, exist_ok=True)
        facts = machine.facts(self.root)
        disk = facts["disk"]
        console.print(f"the brokers' data goes to [bold]{disk['path']}[/bold]: {disk['fstype']} on {disk['device']}")
        if disk["tmpfs"]:
            console.print(f"[bold red]warning[/bold red]: {disk['path']} is on a {disk['fstype']} (memory): a sync "
                          "costs nothing there and no durable number says anything about a disk; pass --dir on one")
        stomp_brokers = self._brokers(sizes.targets, "stomp", lambda broker: broker.speaks_stomp)
        celery_brokers = self._brokers(sizes.targets, "celery", lambda broker: broker.celery) if sizes.celery else []
        for skip in self.skipped:
            console.print(f"[yellow]skipped[/yellow] {skip['target']} ({skip['part']}): {skip['reason']}")
        stomp = stomp_work(sizes) if stomp_brokers else []
        celery = [celery_work(sizes, self.options.celery_concurrency, lambda: self._scratch("celery-client"))] \
            if celery_brokers else []
        total = sizes.rounds * (len(stomp) * len(stomp_brokers) + len(celery) * len(celery_brokers))
        console.print(f"{sizes.rounds} interleaved round(s) of {len(stomp)} STOMP workload(s) on "
                      f"{', '.join(b.name for b in stomp_brokers) or 'no target'}"
                      + (f", Celery on {', '.join(b.name for b in celery_brokers)}" if celery else "")
                      + f": {total} broker starts")
        peers = {broker.name: broker for broker in [*stomp_brokers, *celery_brokers]}
        progress = Progress(self.options.progress, total, console)
        started = time.monotonic()
        try:
            for works, brokers in ((stomp, stomp_brokers), (celery, celery_brokers)):
                for round_index in range(sizes.rounds):
                    for work in works:
                        for broker in _rotated(list(brokers), round_index):
                            progress.step(f"round {round_index + 1}: {work.key} on {broker.name}")
                            self._one(work, broker, round_index)
        finally:
            progress.stop()
            if not self.options.keep and not any(s["reason"].startswith("failed") for s in self.skipped):
                shutil.rmtree(self.work_dir, ignore_errors=True)
        results = self._results()
        return {
            "schema": SCHEMA_NAME,
            "schema_version": SCHEMA_VERSION,
            "quick": self.options.quick,
            "rounds": sizes.rounds,
            "seconds": sizes.seconds,
            "messages": sizes.messages,
            "warm_up_s": sizes.warm_up_s,
            "producers": list(sizes.producers),
            "targets": list(sizes.targets),
            "celery": {"enabled": sizes.celery, "tasks": sizes.celery_tasks,
                       "concurrency": self.options.celery_concurrency},
            "message_bytes": len(served_workload.BODY),
            "prefetch": served_workload.PREFETCH,
            "directory": str(self.root.resolve()),
            "machine": facts,
            "peers": [{"name": name, "ours": broker.ours, "version": broker.version(),
                       "banner": self.banners.get(name, ""), "promise": broker.promise(),
                       "started": broker.how_started()} for name, broker in peers.items()],
            "duration_s": round(time.monotonic() - started, 1),
            "loadavg_at_end": list(os.getloadavg()),
            "skipped": self.skipped,
            "results": results,
        }

    def _one(self, work: _Work, broker_class: type[served_peers.Broker], round_index: int) -> None:
        if (work.key, broker_class.name) in self.failed:
            return
        scratch = self._scratch(f"{broker_class.name}-{work.key.replace(' ', '-')}")
        try:
            with broker_class(scratch) as broker:
                self.banners.setdefault(broker.name, broker.banner)
                if work.part == "stomp" and self.sizes.warm_up_s > 0:   # a JVM's JIT, Erlang's and our caches
                    served_workload.receipted(broker.endpoint, INGEST_PRODUCERS, INGEST_CONSUMERS, self.sizes.warm_up_s)
                rows = work.run(broker)
        except FAILURES as error:    # a broker that fails is reported and the run goes on; a bug is not caught
            self.failed.add((work.key, broker_class.name))
            for name in work.names:
                self._skip(broker_class.name, work.part, name, f"failed in round {round_index + 1}: "
                                                               f"{type(error).__name__}: {error} (logs in {scratch})")
            self.console.print(f"[red]{broker_class.name}: {work.key} failed[/red] in round {round_index + 1}: "
                               f"{str(error)[:300]} (logs in {scratch})")
            return
        for name, row in rows.items():
            self.samples.setdefault((work.part, name, broker_class.name), []).append(row)
        if not self.options.keep:
            shutil.rmtree(scratch, ignore_errors=True)

    def _results(self) -> list[dict]:
        results = []
        for (part, workload, target), rows in self.samples.items():
            if any(s["target"] == target and s["workload"] == workload for s in self.skipped):
                continue    # a target that failed in a later round: its earlier rounds are not a median
            broker = served_peers.BROKERS[target]
            results.append({"part": part, "workload": workload, "target": target, "ours": broker.ours,
                            **_summary(rows)})
        by_workload: dict[tuple[str, str], list[dict]] = {}
        for result in results:
            by_workload.setdefault((result["part"], result["workload"]), []).append(result)
        for group in by_workload.values():
            peer_results = [r for r in group if not r["ours"]]
            best = max(peer_results, key=lambda r: r["median_per_s"]) if peer_results else None
            for result in group:
                result["best_peer"] = best["target"] if best else None
                result["ratio_to_best_peer"] = float(f"{result['median_per_s'] / best['median_per_s']:.3g}") \
                    if best and best["median_per_s"] else None
        return results


def run(options: Options, console=None, out=None) -> dict:
    """Runs the served bench, prints the tables on ``out`` (default: stdout), writes the JSON and the PNG
    asked for; returns the document. The files are written even when printing the tables fails (a reader
    of stdout gone away); that error is raised after them."""
    from rich.console import Console

    from . import report, served_report
    console = console or Console(stderr=True)
    document = ServedRunner(options, console).run()
    report.present(document, console, out, served_report.print_tables, [
        (options.json_path, served_report.write_json, "JSON"),
        (options.plot_path, served_report.write_plot, "plot")])
    return document


def _list(text: str, kind=str) -> tuple:
    return tuple(kind(item.strip()) for item in text.split(",") if item.strip())


def options_from(args, directory: Path) -> Options:
    """The Options of `journal-engine bench --served ...` (ValueError for a bad value)."""
    base = QUICK if args.quick else FULL
    targets = _list(args.targets) if args.targets else base.targets
    unknown = [target for target in targets if target not in ALL_TARGETS]
    if unknown:
        raise ValueError(f"--targets: {', '.join(unknown)} unknown; choose among {', '.join(ALL_TARGETS)}")
    producers = _list(args.producers, int) if args.producers else base.producers
    sizes = Sizes(rounds=args.rounds or base.rounds, seconds=args.seconds or base.seconds,
                  messages=args.messages or base.messages, producers=producers,
                  celery=base.celery if args.celery is None else args.celery,
                  celery_tasks=args.celery_tasks or base.celery_tasks, targets=targets,
                  warm_up_s=base.warm_up_s if args.warm_up is None else args.warm_up)
    if sizes.rounds < 1 or sizes.seconds <= 0 or sizes.messages < INGEST_PRODUCERS or not producers \
            or min(producers) < 1 or sizes.celery_tasks < 1 or sizes.warm_up_s < 0:
        raise ValueError("--rounds, --seconds, --producers and --celery-tasks must be positive, "
                         f"--messages at least {INGEST_PRODUCERS}")
    plot = Path(args.plot) if args.plot else None
    if plot is not None and plot.suffix.lower() != ".png":
        plot = plot / "served-brokers.png"
    return Options(directory=directory, sizes=sizes, quick=args.quick, json_path=Path(args.json) if args.json else None,
                   plot_path=plot, keep=args.keep, progress=not args.no_progress)
