"""The machine a benchmark runs on: its facts, and its own limits measured in the same run.

The limits are what no store can beat on this disk, measured with no format at all:

* ``raw sync loop``: a 4 KiB ``pwrite`` into a preallocated, synced file + ``fdatasync``, repeated:
  the latency of one durable write and so the most serial commits per second;
* ``sequential write bandwidth``, synced: 1 MiB writes of a new file, then one ``fdatasync``;
* ``page-cache write bandwidth``: up to 64 MiB of the same writes without the sync, best of two (what a
  no-sync store can reach);
* ``page-cache read bandwidth``: the synced file read back warm (what a recovery from a warm cache
  can reach).

They are measured before the matrix and again after it; ``best_of`` keeps the better of the two.
``limit_for_*`` turn them into a records-per-second ceiling for a cell, so that every result is also
reported as a fraction of what the machine allows.
"""
from __future__ import annotations

import datetime
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

TMPFS_TYPES = ("tmpfs", "ramfs", "devtmpfs")
SYNC_PROBE_BYTES = 4096
BANDWIDTH_CHUNK_BYTES = 1 << 20
CACHED_PROBE_BYTES = 64 << 20


def percentiles_us(latencies_s: list[float]) -> dict:
    """p50, p90, p99, p99.9, max and mean of latencies given in seconds, in microseconds."""
    ordered = sorted(latencies_s)
    if not ordered:
        return {}
    count = len(ordered)

    def at(fraction: float) -> float:
        return round(ordered[min(count - 1, int(count * fraction))] * 1e6, 1)

    return {"samples": count, "p50_us": at(0.5), "p90_us": at(0.9), "p99_us": at(0.99), "p999_us": at(0.999),
            "max_us": round(ordered[-1] * 1e6, 1), "mean_us": round(statistics.fmean(ordered) * 1e6, 1)}


def measure_fdatasync_latency(directory: Path, samples: int = 1000) -> dict:
    """The disk's price of one durable write: a 4 KiB pwrite into a preallocated file + fdatasync."""
    path = Path(directory) / f"fdatasync-probe-{os.getpid()}"   # the bench/ suite may share the directory
    page = bytes(SYNC_PROBE_BYTES)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, bytes(samples * SYNC_PROBE_BYTES))
        os.fsync(fd)
        latencies = []
        clock = time.perf_counter
        for index in range(samples):
            started = clock()
            os.pwrite(fd, page, index * SYNC_PROBE_BYTES)
            os.fdatasync(fd)
            latencies.append(clock() - started)
    finally:
        os.close(fd)
        path.unlink()
    result = percentiles_us(latencies)
    result["syncs_per_s"] = round(samples / sum(latencies))
    return result


def measure_bandwidth(directory: Path, total_bytes: int) -> dict:
    """Sequential write bandwidth (page cache, and to the disk with one fdatasync) and warm read bandwidth."""
    chunk = os.urandom(BANDWIDTH_CHUNK_BYTES)
    chunks = max(1, total_bytes // BANDWIDTH_CHUNK_BYTES)
    written = chunks * BANDWIDTH_CHUNK_BYTES
    result = {"bytes": written}
    cached_path = Path(directory) / f"bandwidth-cached-probe-{os.getpid()}"
    synced_path = Path(directory) / f"bandwidth-synced-probe-{os.getpid()}"
    try:
        # into the page cache: at most CACHED_PROBE_BYTES, below the kernel's dirty-page throttling, best
        # of two passes (the first also pays for growing the page cache)
        cached_chunks = min(chunks, CACHED_PROBE_BYTES // BANDWIDTH_CHUNK_BYTES)
        best = 0.0
        for _ in range(2):
            fd = os.open(cached_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                started = time.perf_counter()
                for _ in range(cached_chunks):
                    os.write(fd, chunk)
                elapsed = time.perf_counter() - started
                os.fdatasync(fd)   # untimed: its dirty pages must not drain into the next measurement
            finally:
                os.close(fd)
            best = max(best, cached_chunks * BANDWIDTH_CHUNK_BYTES / elapsed / 1e6)
            cached_path.unlink()
        result["write_cached_mb_per_s"] = round(best, 1)

        fd = os.open(synced_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            started = time.perf_counter()
            for _ in range(chunks):
                os.write(fd, chunk)
            os.fdatasync(fd)
            elapsed = time.perf_counter() - started
        finally:
            os.close(fd)
        result["write_synced_mb_per_s"] = round(written / elapsed / 1e6, 1)

        with open(synced_path, "rb", buffering=0) as handle:   # warm: just written
            buffer = bytearray(BANDWIDTH_CHUNK_BYTES)
            started = time.perf_counter()
            while handle.readinto(buffer):
                pass
            elapsed = time.perf_counter() - started
        result["read_cached_mb_per_s"] = round(written / elapsed / 1e6, 1)
    finally:
        for path in (cached_path, synced_path):
            if path.exists():
                path.unlink()
    return result


def disk_of(path: Path) -> dict:
    """Device, file system and mount options of the file system holding `path`; tmpfs flagged."""
    path = Path(path)
    facts: dict = {"path": str(path.resolve())}
    try:
        out = subprocess.run(["df", "--output=source,fstype,size", str(path)], capture_output=True, text=True,
                             check=True).stdout.split("\n")[1].split()
        facts.update({"device": out[0], "fstype": out[1], "size_1k_blocks": out[2]})
    except (OSError, subprocess.CalledProcessError, IndexError):
        facts.update({"device": "?", "fstype": "?"})
    options = ""
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                if fields[0] == facts["device"] and fields[2] == facts["fstype"]:
                    options = fields[3]
    except OSError:
        pass
    facts["mount_options"] = options
    rotational = Path(f"/sys/block/{os.path.basename(facts['device'])}/queue/rotational")
    facts["rotational"] = rotational.read_text().strip() if rotational.exists() else "?"
    facts["tmpfs"] = facts["fstype"] in TMPFS_TYPES
    return facts


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as meminfo:
            return round(int(meminfo.readline().split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        return None


def facts(directory: Path) -> dict:
    """What the report says about the machine before any number (no measurement)."""
    from .. import IMPLEMENTATION, __version__
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "nproc": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "journal_engine_version": __version__,
        "journal_engine_implementation": IMPLEMENTATION,
        "disk": disk_of(directory),
        "loadavg_at_start": list(os.getloadavg()),
    }


def measure_limits(directory: Path, *, sync_samples: int, bandwidth_bytes: int) -> dict:
    return {"raw_sync_loop": measure_fdatasync_latency(directory, sync_samples),
            "bandwidth": measure_bandwidth(directory, bandwidth_bytes)}


def limit_for_append(limits: dict, *, record_bytes: int, records_per_sync: int, durable: bool) -> tuple[float, str]:
    """The records/s the machine allows for a cell, and what bounds it.

    Durable: one commit of `records_per_sync` records per raw sync, or the synced bandwidth, whichever
    is lower. A store that shares one sync among several threads' commits can go above it.
    No sync: the page-cache write bandwidth.
    """
    bandwidth = limits["bandwidth"]
    if not durable:
        return bandwidth["write_cached_mb_per_s"] * 1e6 / record_bytes, "page-cache write bandwidth"
    by_syncs = limits["raw_sync_loop"]["syncs_per_s"] * records_per_sync
    by_bandwidth = bandwidth["write_synced_mb_per_s"] * 1e6 / record_bytes
    if by_syncs <= by_bandwidth:
        return by_syncs, f"raw sync loop x {records_per_sync} records"
    return by_bandwidth, "synced write bandwidth"


def limit_for_queue(limits: dict, *, operation: str, record_bytes: int) -> tuple[float | None, str]:
    if operation == "send-receive-ack":
        return (limits["bandwidth"]["write_synced_mb_per_s"] * 1e6 / record_bytes,
                "synced write bandwidth / message body")
    return None, "none: a rollback writes at most one small unsynced record (CPU-bound)"


def limit_for_recovery(limits: dict, *, record_bytes: int) -> tuple[float, str]:
    return limits["bandwidth"]["read_cached_mb_per_s"] * 1e6 / record_bytes, "page-cache read bandwidth"


def best_of(measured: list[dict]) -> dict:
    """The ceiling a run uses: of the limits measured before and after its matrix, the faster raw sync
    loop and each bandwidth's best. A moment of noise (another process writing) during one
    measurement would otherwise lower every ceiling and flatter every store measured against it."""
    best = {"raw_sync_loop": max((m["raw_sync_loop"] for m in measured), key=lambda loop: loop["syncs_per_s"]),
            "bandwidth": dict(measured[0]["bandwidth"])}
    for m in measured[1:]:
        for key, value in m["bandwidth"].items():
            if key.endswith("_mb_per_s"):
                best["bandwidth"][key] = max(best["bandwidth"][key], value)
    return best
