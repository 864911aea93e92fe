"""The Spark data source: a warm read of a 4M-record message journal, per core, against its peers.

The journal holds 2M messages as the message store writes them (ADD_MESSAGE 45 with a 32-byte body and
one property, then ADD_REF 32): 4M records in 10 MiB files. Every case answers a question over every
record (an aggregate, so nothing can be skipped), in rounds that take the cases in turn (so the
machine's load falls on all of them alike); the first round is a warm-up (files in the page cache,
Spark's JVM compiled, its Python workers started). Each round asks its question anew — a new
DataFrame, planned again (Spark keeps a Python source's plan with its DataFrame) — as a new question
would. The cases:

* ``spark source``: ``spark.read.format("journal_engine")``, all 22 columns (the message store's
  fields decoded, the properties map built), on local[*];
* ``spark source, 5 columns``: the same reader given five columns (PROJECTION), the only ones then
  built in the Python workers and turned into rows by the JVM;
* ``spark parquet`` and ``spark parquet, 5 columns``: Spark reading the same rows from Parquet (written
  once, untimed) for the same two questions; Parquet reads only the columns a question uses;
* ``source reader, one process``: the source's own reader (the compiled decoders, Arrow batches, all
  columns) without Spark, partition after partition in this process;
* ``python reader, one process``: the records through the Python reader (scan_frames, then
  record_format's decoder per record), what a program without the source would write.

Rates are records per second (the median round, with the fastest and slowest), per core (divided by
the cores the case used: Spark's default parallelism, or 1), and per CPU-second (the CPU this process,
Spark's JVM and its Python processes — the workers and the planning process Spark starts per query —
spent in the round, read from /proc: on a shared machine the figure that other jobs disturb least,
and the per-core rate of a machine with nothing else to do). The CPU is also given split between the
JVM and the Python processes, with the load average when the case ran. docs/benchmarks.md.
"""
from __future__ import annotations

import mmap
import os
import shutil
import statistics
import time
from pathlib import Path

import pytest

from journal_engine import Journal
from journal_engine._impl import scan_frames
from journal_engine.record_format import RecordType, decode_store_body, encode_message, encode_queue_id
from journal_engine.storage.journal.format import stamp_of
from journal_engine.storage.journal.segment_files import list_directory

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")

MESSAGES = int(os.environ.get("JOURNAL_BENCH_SPARK_MESSAGES", 2_000_000))   # fewer: the smoke run in .ci/run
RECORDS = 2 * MESSAGES
#: timed rounds, after one warm-up round (JOURNAL_BENCH_SPARK_ROUNDS: fewer on a busy machine)
ROUNDS = int(os.environ.get("JOURNAL_BENCH_SPARK_ROUNDS", "3"))
GROUP = "spark: warm read of a 4M-record journal"
AGGREGATE = ("count(*) AS records", "sum(body_size) AS body_bytes", "count(address) AS messages",
             "sum(queue_id) AS queue_ids", "sum(size(properties)) AS properties")
#: a typical question's columns: the source builds and sends only these when the reader is given them
PROJECTION = "record_id bigint, kind string, record_type int, queue_id bigint, address string"
PROJECTED_AGGREGATE = ("count(*) AS records", "sum(record_id) AS ids", "count(address) AS messages",
                       "sum(queue_id) AS queue_ids", "count(kind) AS kinds")
#: the narrow question of issue 27's anchor: three columns
NARROW = "record_id bigint, kind string, queue_id bigint"
NARROW_AGGREGATE = ("count(*) AS records", "sum(record_id) AS ids", "count_if(kind = 'ADD') AS messages",
                    "sum(queue_id) AS queue_ids")
#: a master to run on instead of local[*] (a standalone cluster: spark://host:7077)
MASTER = os.environ.get("JOURNAL_BENCH_SPARK_MASTER") or None
#: the targets of issue 27: the source's rate as a fraction of Spark's on the same rows from Parquet
TARGET_RATIO = {"full row": 0.8, "3 columns": 0.5}
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="module")
def message_journal(tmp_path_factory) -> Path:
    root = Path(os.environ.get("JOURNAL_BENCH_DIR") or tmp_path_factory.getbasetemp().parent / "journal-engine-bench")
    directory = root / f"spark-journal-{MESSAGES}"
    if not (directory / "complete").exists():
        shutil.rmtree(directory, ignore_errors=True)
        body = encode_message("orders", b"m" * 32, properties={"n": 1})
        reference = encode_queue_id(1)
        with Journal(str(directory), sync="none") as journal:
            journal.load()
            for message_id in range(1, MESSAGES + 1):
                journal.add(message_id, int(RecordType.ADD_MESSAGE), body)
                journal.update(message_id, int(RecordType.ADD_REF), reference)
            journal.sync()
        (directory / "complete").write_text("")
    return directory


@pytest.fixture(scope="module")
def spark():
    from journal_engine.spark import session
    from journal_engine.spark.environment import ARROW_UNCHECKED_JAVA_OPTIONS
    started = session(MASTER, app_name="journal-engine-bench", java_options=ARROW_UNCHECKED_JAVA_OPTIONS)
    yield started
    started.stop()


class ProcessTreeCpu:
    """CPU seconds (user + system) of this process and its descendants — Spark's JVM and its Python
    processes — from /proc; a process seen once keeps its last reading (Linux only). Calling it gives
    (all, the JVM's): the JVM is the process named java."""

    def __init__(self) -> None:
        self.last: dict[int, tuple[str, float]] = {}

    def __call__(self) -> tuple[float, float]:
        parents, spent = {}, {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as handle:
                        stat = handle.read()
                except OSError:
                    continue
                fields = stat.rsplit(")", 1)[1].split()
                parents[int(name)] = int(fields[1])
                spent[int(name)] = (stat[stat.find("(") + 1:stat.rfind(")")],
                                    (int(fields[11]) + int(fields[12])) / _TICKS_PER_S)
        children: dict[int, list[int]] = {}
        for pid, parent in parents.items():
            children.setdefault(parent, []).append(pid)
        stack = [os.getpid()]
        while stack:
            pid = stack.pop()
            if pid in spent:
                self.last[pid] = spent[pid]
            stack += children.get(pid, [])
        return (sum(seconds for _name, seconds in self.last.values()),
                sum(seconds for name, seconds in self.last.values() if name == "java"))


def aggregate(frame, expressions=AGGREGATE, pads: int = 0) -> None:
    row = frame.selectExpr(*expressions).collect()[0]
    assert (row.records, row.messages) == (RECORDS + pads, MESSAGES)


def read_with_source_reader(journal: Path) -> None:
    from journal_engine.spark.source import JournalReader

    reader = JournalReader({"path": str(journal)})
    rows = messages = 0
    for partition in reader.partitions():
        for batch in reader.read(partition):
            rows += batch.num_rows
            messages += len(batch.column("address")) - batch.column("address").null_count
    assert messages == MESSAGES and rows >= RECORDS


def read_with_python_reader(journal: Path) -> None:
    messages = 0
    for data in list_directory(str(journal), as_if_compacted=True).data:
        with open(data.path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            frames = scan_frames(view, stamp_of(data.header.file_id), data.header.data_start)
        for _offset, check, _kind, user_type, record_id, _tx_id, body in frames:
            if check == 0:
                decoded = decode_store_body(user_type, record_id, body)
                messages += user_type == RecordType.ADD_MESSAGE and decoded is not None
    assert messages == MESSAGES


@pytest.mark.benchmark(group=GROUP)
def test_warm_read_interleaved(benchmark, spark, message_journal, tmp_path):
    source = spark.read.format("journal_engine").load(str(message_journal))
    pads = source.where("kind = 'PAD'").count()
    parquet = tmp_path / "records.parquet"
    source.write.parquet(str(parquet))
    cores = spark.sparkContext.defaultParallelism
    narrow = [field.split()[0] for field in PROJECTION.split(", ")]
    three = [field.split()[0] for field in NARROW.split(", ")]
    cases = {   # name: (action, cores it uses)
        "spark source": (lambda: aggregate(spark.read.format("journal_engine").load(str(message_journal)),
                                           pads=pads), cores),
        "spark source, 5 columns": (lambda: aggregate(
            spark.read.format("journal_engine").schema(PROJECTION).load(str(message_journal)),
            PROJECTED_AGGREGATE, pads), cores),
        "spark source, 3 columns": (lambda: aggregate(
            spark.read.format("journal_engine").schema(NARROW).load(str(message_journal)), NARROW_AGGREGATE, pads),
            cores),
        "spark parquet": (lambda: aggregate(spark.read.parquet(str(parquet)), pads=pads), cores),
        "spark parquet, 3 columns": (lambda: aggregate(spark.read.parquet(str(parquet)).select(*three),
                                                       NARROW_AGGREGATE, pads), cores),
        "spark parquet, 5 columns": (lambda: aggregate(spark.read.parquet(str(parquet)).select(*narrow),
                                                       PROJECTED_AGGREGATE, pads), cores),
        "source reader, one process": (lambda: read_with_source_reader(message_journal), 1),
        "python reader, one process": (lambda: read_with_python_reader(message_journal), 1),
    }
    cpu = ProcessTreeCpu()
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    cpu_seconds: dict[str, list[float]] = {name: [] for name in cases}
    jvm_seconds: dict[str, list[float]] = {name: [] for name in cases}
    loads: dict[str, list[float]] = {name: [] for name in cases}

    warmed = []

    def one_round() -> None:
        for name, (action, _cores) in cases.items():
            if name == "python reader, one process" and not warmed and not benchmark.disabled:
                continue     # it has nothing to warm up, and it takes longest (the untimed pass runs it once)
            (cpu_before, jvm_before), started = cpu(), time.perf_counter()
            action()
            seconds[name].append(time.perf_counter() - started)
            cpu_after, jvm_after = cpu()
            cpu_seconds[name].append(cpu_after - cpu_before)
            jvm_seconds[name].append(jvm_after - jvm_before)
            loads[name].append(os.getloadavg()[0])
            print(f"round {len(warmed)} {name}: {seconds[name][-1]:.2f} s, cpu {cpu_seconds[name][-1]:.2f} s "
                  f"(jvm {jvm_seconds[name][-1]:.2f}), load {loads[name][-1]:.1f}", flush=True)
        warmed.append(True)

    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    if benchmark.disabled:   # --benchmark-disable: one untimed pass of every case, nothing to measure
        return
    results = {}
    for name, (_action, cores_used) in cases.items():
        timed, spent = seconds[name][-ROUNDS:], cpu_seconds[name][-ROUNDS:]   # the warm-up round left out
        median = statistics.median(timed)
        results[name] = {
            "cores": cores_used, "median_s": median, "min_s": min(timed), "max_s": max(timed),
            "records_per_s": RECORDS / median, "records_per_s_per_core": RECORDS / median / cores_used,
            "cpu_s": statistics.median(spent), "records_per_cpu_s": RECORDS / statistics.median(spent),
            "jvm_cpu_s": statistics.median(jvm_seconds[name][-ROUNDS:]),
            "load_average": [round(load, 2) for load in loads[name][-ROUNDS:]],
        }
    ratios = {"full row": results["spark source"]["records_per_s"] / results["spark parquet"]["records_per_s"],
              "3 columns": (results["spark source, 3 columns"]["records_per_s"]
                            / results["spark parquet, 3 columns"]["records_per_s"])}
    benchmark.extra_info.update(records=RECORDS, rounds=ROUNDS, cores=cores, cases=results, master=MASTER or "local",
                                ratio_to_parquet=ratios)
    print(f"\n{GROUP} ({RECORDS:,} records, {ROUNDS} rounds after a warm-up, Spark on {cores} cores)")
    for name, result in results.items():
        print(f"{name:32s} median {result['median_s']:7.2f} s (min {result['min_s']:.2f}, max {result['max_s']:.2f})"
              f"  {result['records_per_s']:>11,.0f}/s  {result['records_per_s_per_core']:>11,.0f}/s/core"
              f"  cpu {result['cpu_s']:6.2f} s (jvm {result['jvm_cpu_s']:5.2f})  {result['records_per_cpu_s']:>11,.0f}/cpu-s"
              f"  load {'/'.join(f'{load:.1f}' for load in result['load_average'])}")
    for question, ratio in ratios.items():
        print(f"source / parquet, {question}: {ratio:.2f} (target {TARGET_RATIO[question]})")
