"""Recovery at memory speed (the core-speed issue, rows 1 and 2 of its table).

* ``load()`` of 1M 256 B records **and one pass reading every record's body**, against an LMDB
  cursor scan creating every value, in interleaved pairs (the order alternates; the ratio is the
  median of the per-pair ratios, with its quartiles); beside it each floor: ``load()`` (bodies as
  views into the mapped files) against the mapped floor (every file mapped and CRC32C'd in place),
  ``load(copy=True)`` against the owned floor (every file read into a fresh buffer and CRC32C'd);
  the anonymous memory the loaded result holds (RssAnon growth while it is alive: the mapped files'
  pages are the page cache's) against the bytes of the bodies it returns.
* The same load with no checkpoint to take (after a crash every file is decoded), and what a clean
  close spends saving the checkpoint when every file was written since the load.
* ``Broker(dir)`` recovery of 1M durable messages in 10 queues, up to the first ``receive()``, and
  then receiving every message once (lazy at load must not mean slow at first use); CPU seconds
  (``time.process_time``) beside the wall time, which other work on the machine moves more. Twice:
  every message of the default priority (the common queue), and priorities 0-9 mixed (each queue
  in ten levels, each level made a chunk at a time).

Sizes: ``JOURNAL_BENCH_RECOVERY_RECORDS`` (default 1,000,000), ``JOURNAL_BENCH_RECOVERY_PAIRS``
(default 7). Run: ``python -m pytest bench/test_bench_recovery.py --benchmark-only -s``.
"""
from __future__ import annotations

import gc
import mmap
import os
import shutil
import statistics
import time
from pathlib import Path

import lmdb
import pytest
from workload import BODY, KEY

from journal_engine import Broker, Journal
from journal_engine._impl import crc32c
from journal_engine.storage.journal import checkpoint as checkpoints
from journal_engine.storage.journal.format import CHECKPOINT_FILE
from journal_engine.storage.journal.segment_files import list_directory

RECORDS = int(os.environ.get("JOURNAL_BENCH_RECOVERY_RECORDS", 1_000_000))
PAIRS = int(os.environ.get("JOURNAL_BENCH_RECOVERY_PAIRS", 7))
QUEUES = 10


def _anon_bytes() -> int:
    """RssAnon: the process's own memory, without the pages of mapped files."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (values[0],) * 3
    return q1, median, q3


@pytest.fixture(scope="module")
def stores(bench_root):
    root = bench_root / "recovery-1M"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    with Journal(root / "journal", sync="none") as journal:
        journal.load()
        for record_id in range(RECORDS):
            journal.add(record_id, 1, BODY)
        journal.sync()
    env = lmdb.open(str(root / "lmdb"), map_size=max(1 << 30, RECORDS * 1024), sync=True)
    with env.begin(write=True) as txn:
        for record_id in range(RECORDS):
            txn.put(KEY.pack(record_id), BODY)
    env.close()
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _journal_load_and_read(directory, copy: bool = False) -> tuple[int, float]:
    """load() and one pass reading every body; (bytes read, seconds)."""
    started = time.perf_counter()
    with Journal(directory) as journal:
        result = journal.load(copy=copy)
        total = sum(len(record.body) for record in result.records.values())
    return total, time.perf_counter() - started


def _journal_decode_and_read(directory) -> tuple[int, float]:
    """load() with no checkpoint to take (as after a crash: every file decoded) and one pass reading
    every body; (bytes read, seconds). Its close saves the checkpoint again, untimed."""
    (Path(directory) / CHECKPOINT_FILE).unlink(missing_ok=True)
    return _journal_load_and_read(directory)


def _checkpoint_saved(directory) -> float:
    """What a clean close adds when every data file was written since the load: a decode and a
    checksum of every file and the checkpoint written; seconds."""
    files = list_directory(str(directory)).data
    started = time.perf_counter()
    checkpoints.save(str(directory), files, None, ())
    return time.perf_counter() - started


def _floor_mapped_and_checked(directory) -> tuple[int, float]:
    """The least a load that leaves its bodies in the files can cost: every data file mapped
    read-only (populated) and CRC32C'd in place, nothing parsed; (bytes read, seconds)."""
    started = time.perf_counter()
    held, total, crc = [], 0, 0
    for path in sorted(Path(directory).glob("*.jej")):
        with open(path, "rb", buffering=0) as handle:
            mapping = mmap.mmap(handle.fileno(), 0, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                                prot=mmap.PROT_READ)
        crc = crc32c(mapping, crc)
        total += len(mapping)
        held.append(mapping)
    seconds = time.perf_counter() - started
    for mapping in held:
        mapping.close()
    return total, seconds


def _lmdb_scan(directory) -> tuple[int, float]:
    """Open the environment and scan every key/value with a cursor, a bytes object per value."""
    started = time.perf_counter()
    env = lmdb.open(str(directory), readonly=True, lock=False)
    with env.begin() as txn:
        total = sum(len(value) for _key, value in txn.cursor())
    env.close()
    return total, time.perf_counter() - started


def _floor_owned_and_checked(directory) -> tuple[int, float]:
    """The least any load that owns its bytes and checks them can cost: every data file read into a
    fresh buffer of this process and CRC32C'd once, nothing parsed, no object per record: the floor
    of ``load(copy=True)``; (bytes read, seconds)."""
    started = time.perf_counter()
    held = []           # every buffer alive at the end, as a loaded result holds its bodies
    total = 0
    crc = 0
    for path in sorted(Path(directory).glob("*.jej")):
        with open(path, "rb", buffering=0) as handle:
            buffer = bytearray(os.fstat(handle.fileno()).st_size)
            total += handle.readinto(buffer)
        crc = crc32c(buffer, crc)
        held.append(buffer)
    seconds = time.perf_counter() - started
    del held
    return total, seconds


@pytest.mark.benchmark(group="recovery")
def test_load_and_read_every_body_against_an_lmdb_scan(benchmark, stores):
    ratios, ours, theirs, floors = [], [], [], []
    copies, mapped_floors, decoded, saves = [], [], [], []

    def pairs():
        for pair in range(PAIRS):
            order = (_journal_load_and_read, _lmdb_scan) if pair % 2 == 0 else (_lmdb_scan, _journal_load_and_read)
            timed = {}
            for run in order:
                total, seconds = run(stores / ("journal" if run is _journal_load_and_read else "lmdb"))
                assert total == RECORDS * len(BODY)
                timed[run] = seconds
            ours.append(timed[_journal_load_and_read])
            theirs.append(timed[_lmdb_scan])
            ratios.append(timed[_lmdb_scan] / timed[_journal_load_and_read])
            total, seconds = _floor_owned_and_checked(stores / "journal")
            assert total >= RECORDS * len(BODY)
            floors.append(seconds)
            total, seconds = _journal_load_and_read(stores / "journal", copy=True)
            assert total == RECORDS * len(BODY)
            copies.append(seconds)
            total, seconds = _floor_mapped_and_checked(stores / "journal")
            assert total >= RECORDS * len(BODY)
            mapped_floors.append(seconds)
            total, seconds = _journal_decode_and_read(stores / "journal")
            assert total == RECORDS * len(BODY)
            decoded.append(seconds)
            saves.append(_checkpoint_saved(stores / "journal"))

    benchmark.pedantic(pairs, rounds=1, iterations=1)
    gc.collect()
    before = _anon_bytes()
    with Journal(stores / "journal") as journal:
        result = journal.load()
        held = _anon_bytes() - before
        returned = sum(len(record.body) for record in result.records.values())
    q1, median, q3 = _quartiles(ratios)
    benchmark.extra_info.update({
        "records": RECORDS, "pairs": PAIRS,
        "journal_s_median": round(statistics.median(ours), 4), "lmdb_s_median": round(statistics.median(theirs), 4),
        "speedup_median": round(median, 2), "speedup_q1": round(q1, 2), "speedup_q3": round(q3, 2),
        "journal_records_per_s": round(RECORDS / statistics.median(ours)),
        "floor_s_median": round(statistics.median(floors), 4),
        "lmdb_over_floor_median": round(statistics.median(t / f for t, f in zip(theirs, floors)), 2),
        "mapped_floor_s_median": round(statistics.median(mapped_floors), 4),
        "load_over_mapped_floor_median": round(statistics.median(o / f for o, f in zip(ours, mapped_floors)), 2),
        "decoded_s_median": round(statistics.median(decoded), 4),
        "decoded_over_mapped_floor_median": round(statistics.median(d / f for d, f in zip(decoded, mapped_floors)), 2),
        "checkpoint_save_s_median": round(statistics.median(saves), 4),
        "copy_s_median": round(statistics.median(copies), 4),
        "copy_over_owned_floor_median": round(statistics.median(c / f for c, f in zip(copies, floors)), 2),
        "loaded_anon_bytes": held, "returned_body_bytes": returned, "anon_per_returned_byte": round(held / returned, 2)})
    print(f"\nload()+read every body vs LMDB cursor scan, {RECORDS} x {len(BODY)} B, {PAIRS} pairs: "
          f"journal {statistics.median(ours):.3f} s, LMDB {statistics.median(theirs):.3f} s (medians); "
          f"speed-up {median:.2f}x (quartiles {q1:.2f}-{q3:.2f}); loaded result holds {held / 1e6:.0f} MB "
          f"RssAnon for {returned / 1e6:.0f} MB of bodies ({held / returned:.2f}x); the mapped floor (files "
          f"mapped and CRC32C'd) {statistics.median(mapped_floors):.3f} s: load()+pass / it "
          f"{statistics.median(o / f for o, f in zip(ours, mapped_floors)):.2f}x (with no checkpoint to take, "
          f"as after a crash: {statistics.median(decoded):.3f} s; a close saving one for files all written "
          f"since the load: +{statistics.median(saves):.3f} s); load(copy=True)+pass "
          f"{statistics.median(copies):.3f} s, over the owned floor (files read into owned buffers and "
          f"CRC32C'd) {statistics.median(floors):.3f} s: {statistics.median(c / f for c, f in zip(copies, floors)):.2f}x")


@pytest.fixture(scope="module", params=["one priority", "mixed priorities"])
def broker_directory(request, bench_root):
    directory = bench_root / "broker-recovery"
    shutil.rmtree(directory, ignore_errors=True)
    mixed = request.param == "mixed priorities"
    broker = Broker(directory)
    for queue in range(QUEUES):
        broker.create_queue(f"q{queue}")
    for sent in range(RECORDS):
        # mixed: the priorities cycle through 0-9 on each queue (QUEUES is 10: sent // QUEUES steps them)
        broker.send(f"q{sent % QUEUES}", BODY, priority=(sent // QUEUES) % 10 if mixed else 4)
    broker.close()
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def _receive_every_message(broker) -> int:
    """Receive every message of every queue once (not acknowledged: no journal write is timed)."""
    received = 0
    for queue in range(QUEUES):
        consumer = broker.create_consumer(f"q{queue}")
        while (message := consumer.receive(timeout=0)) is not None:
            received += len(message.body) > 0
    return received


@pytest.mark.benchmark(group="recovery")
def test_broker_recovery_to_the_first_receive(benchmark, broker_directory, request):
    seconds, cpu_seconds, every_seconds, every_cpu_seconds = [], [], [], []

    def recover():
        started, cpu_started = time.perf_counter(), time.process_time()
        broker = Broker(broker_directory)
        try:
            message = broker.create_consumer("q3").receive()
            seconds.append(time.perf_counter() - started)
            cpu_seconds.append(time.process_time() - cpu_started)
            assert message is not None and broker.queue("q3").message_count == RECORDS // QUEUES
            started, cpu_started = time.perf_counter(), time.process_time()
            assert _receive_every_message(broker) == RECORDS - 1
            every_seconds.append(time.perf_counter() - started)
            every_cpu_seconds.append(time.process_time() - cpu_started)
        finally:
            broker.close()

    benchmark.pedantic(recover, rounds=3, iterations=1)
    median, cpu = statistics.median(seconds), statistics.median(cpu_seconds)
    every, every_cpu = statistics.median(every_seconds), statistics.median(every_cpu_seconds)
    benchmark.extra_info.update({"messages": RECORDS, "queues": QUEUES, "priorities": request.node.callspec.id,
                                 "seconds_median": round(median, 3),
                                 "cpu_seconds_median": round(cpu, 3), "messages_per_s": round(RECORDS / median),
                                 "messages_per_cpu_s": round(RECORDS / cpu),
                                 "receive_every_message_seconds_median": round(every, 3),
                                 "receive_every_message_cpu_seconds_median": round(every_cpu, 3)})
    print(f"\nBroker(dir) recovery of {RECORDS} messages ({request.node.callspec.id}) in {QUEUES} queues to the "
          f"first receive(): "
          f"{median:.3f} s ({cpu:.3f} s CPU) median of 3, {RECORDS / median:,.0f} msg/s "
          f"({RECORDS / cpu:,.0f} per CPU second); then receiving every message once: {every:.3f} s "
          f"({every_cpu:.3f} s CPU)")
