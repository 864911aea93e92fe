"""Shared set-up of the storage-core benchmarks: the data directory, the machine facts, the rate helper.

Run with ``python -m pytest bench/ --benchmark-only`` (docs/benchmarks.md). Each
case runs in pytest-benchmark's pedantic mode with a fixed number of records per
round, so a round's time converts exactly into records per second; the counts go
into ``extra_info`` for bench/report.py.
"""
from __future__ import annotations

import datetime
import os
import platform
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from workload import RECORD_BYTES

import journal_engine
from journal_engine.benchmarking import machine

BENCH_DIR_ENV = "JOURNAL_BENCH_DIR"
FDATASYNC_SAMPLES = 1000

_machine: dict = {}


def pytest_configure(config) -> None:
    # with --benchmark-disable each case runs once untimed (RateRunner), which the plugin reports as unused
    config.addinivalue_line("filterwarnings", "ignore:Benchmark fixture was not used")


def pytest_sessionstart(session) -> None:
    forced = os.environ.get("JOURNAL_ENGINE_IMPLEMENTATION", "").lower() == "python"
    if not forced and journal_engine.IMPLEMENTATION != "cython":
        raise pytest.UsageError("the compiled core of journal_engine did not import; the benchmarks measure it "
                                "(set JOURNAL_ENGINE_IMPLEMENTATION=python to measure the Python twin on purpose)")
    machine_facts(_bench_root())   # now, before any case runs: the date, the load and the disk's latency


def _bench_root() -> Path:
    """Where the data goes: $JOURNAL_BENCH_DIR, else <tmp>/journal-engine-bench (on the disk /tmp is on)."""
    root = Path(os.environ.get(BENCH_DIR_ENV) or Path(tempfile.gettempdir()) / "journal-engine-bench")
    root.mkdir(parents=True, exist_ok=True)
    return root


def measure_fdatasync_latency(directory: Path, samples: int = FDATASYNC_SAMPLES) -> dict:
    """The disk's price of one durable write (journal_engine.benchmarking.machine: the command's raw sync loop)."""
    return machine.measure_fdatasync_latency(directory, samples)


def _disk_of(path: Path) -> dict:
    """Device, file system and mount options of the file system holding `path`."""
    return machine.disk_of(path)


def machine_facts(root: Path) -> dict:
    if not _machine:
        with open("/proc/meminfo") as meminfo:
            memory_kib = int(meminfo.readline().split()[1])
        _machine.update({
            "nproc": os.cpu_count(),
            "memory_gib": round(memory_kib / 2**20, 1),
            "kernel": platform.release(),
            "python": platform.python_version(),
            "journal_engine_implementation": journal_engine.IMPLEMENTATION,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "disk": _disk_of(root),
            "fdatasync_4k": measure_fdatasync_latency(root),
            "loadavg_at_start": os.getloadavg(),
        })
    return _machine


def pytest_report_header(config) -> list[str]:
    facts = machine_facts(_bench_root())
    latency = facts["fdatasync_4k"]
    return [f"journal_engine implementation: {facts['journal_engine_implementation']}",
            f"bench directory: {facts['disk']}",
            f"4 KiB pwrite+fdatasync: p50 {latency['p50_us']} us, p99 {latency['p99_us']} us"]


def pytest_benchmark_update_machine_info(config, machine_info) -> None:
    machine_info["journal_bench"] = machine_facts(_bench_root())


def pytest_benchmark_update_json(config, benchmarks, output_json) -> None:
    # other work on the machine skews every number: the load averages say how much there was
    output_json.setdefault("machine_info", {}).setdefault("journal_bench", {})["loadavg_at_end"] = os.getloadavg()


@pytest.fixture(scope="session")
def bench_root(request) -> Path:
    return _bench_root()


@pytest.fixture
def case_dir(bench_root, request) -> Path:
    """A directory for one benchmark case, removed afterwards (the data can be hundreds of MB)."""
    path = bench_root / request.node.name.replace("/", "_").replace("[", "-").rstrip("]")
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


class RateRunner:
    """Runs one case in pedantic mode and records records/s and bytes in extra_info."""

    def __init__(self, benchmark) -> None:
        self.benchmark = benchmark

    def __call__(self, target: Callable, *, records: int, case: str, settings: str,
                 setup: Callable | None = None, teardown: Callable | None = None,
                 rounds: int = 3, warmup_rounds: int = 0) -> None:
        info = self.benchmark.extra_info
        info.update({"case": case, "settings": settings, "records_per_round": records,
                     "record_bytes": RECORD_BYTES, "payload_bytes_per_round": records * RECORD_BYTES})
        if self.benchmark.disabled:
            # --benchmark-disable: one untimed pass as a smoke test (pedantic would skip the teardown)
            args, kwargs = setup() if setup is not None else ((), {})
            try:
                target(*args, **kwargs)
            finally:
                if teardown is not None:
                    teardown(*args, **kwargs)
            return
        self.benchmark.pedantic(target, setup=setup, teardown=teardown, rounds=rounds,
                                warmup_rounds=warmup_rounds, iterations=1)
        stats = self.benchmark.stats.stats
        info["records_per_s"] = round(records / stats.median)
        info["records_per_s_best"] = round(records / stats.min)
        info["payload_mb_per_s"] = round(records * RECORD_BYTES / stats.median / 1e6, 2)


@pytest.fixture
def rate(benchmark) -> RateRunner:
    return RateRunner(benchmark)
