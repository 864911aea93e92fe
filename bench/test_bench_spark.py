"""The Spark data source: a warm read of a 4M-record message journal, per core, against its peers.

The journal holds 2M messages as the message store writes them (ADD_MESSAGE 45 with a 32-byte body, then
ADD_REF 32): 4M records in ~40 files of 10 MiB. Each case reads every record with every column of the
source's schema (the message store's fields decoded) and aggregates over them, so nothing can be skipped:

* ``spark source``: ``spark.read.format("journal_engine")`` on local[*] (Python workers, Arrow batches);
* ``spark source projection``: the same with the reader given five columns (PROJECTION), which are
  then the only ones built and sent;
* ``source reader, one process``: the source's own reader (the compiled decoders, Arrow batches)
  without Spark, partition after partition in this process — what one core does;
* ``python reader, one process``: the same records through the Python reader (scan_frames, then
  record_format's decoder per record), what a program without the source would write;
* ``spark parquet``: Spark reading the same rows from Parquet (written once, untimed); the same
  five-column question on it is in ``extra_info["projection_s"]``.

Rates are records per second, and per core (divided by the cores the case used). The journal is kept
under the bench directory between runs; the first round of each case is a warm-up. docs/benchmarks.md.
"""
from __future__ import annotations

import mmap
import os
import shutil
import time
from pathlib import Path

import pytest

from journal_engine import Journal
from journal_engine._impl import scan_frames
from journal_engine.record_format import RecordType, decode_store_body, encode_message, encode_queue_id
from journal_engine.storage.format import stamp_of
from journal_engine.storage.segment_files import list_directory

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")

MESSAGES = 2_000_000
RECORDS = 2 * MESSAGES
ROUNDS = 3
GROUP = "spark: warm read of a 4M-record journal"
AGGREGATE = ("count(*) AS records", "sum(body_size) AS body_bytes", "count(address) AS messages",
             "sum(queue_id) AS queue_ids", "sum(size(properties)) AS properties")
#: a typical question's columns: the source builds and sends only these when the reader is given them
PROJECTION = "record_id bigint, kind string, record_type int, queue_id bigint, address string"
PROJECTED_AGGREGATE = ("count(*) AS records", "sum(record_id) AS ids", "count(address) AS messages",
                       "sum(queue_id) AS queue_ids", "count(kind) AS kinds")


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
    started = session()
    yield started
    started.stop()


def cores(spark) -> int:
    return spark.sparkContext.defaultParallelism


def record(benchmark, records: int, cores_used: int) -> None:
    benchmark.extra_info.update(records=records, cores=cores_used)
    benchmark.extra_info["records_per_s"] = records / benchmark.stats.stats.median
    benchmark.extra_info["records_per_s_per_core"] = records / benchmark.stats.stats.median / cores_used


def aggregate(frame, expressions=AGGREGATE) -> tuple:
    row = frame.selectExpr(*expressions).collect()[0]
    assert (row.records, row.messages) == (RECORDS + pad_rows(frame), MESSAGES)
    return tuple(row)


_pads: dict = {}


def pad_rows(frame) -> int:
    key = id(frame)
    if key not in _pads:
        _pads[key] = frame.where("kind = 'PAD'").count()
    return _pads[key]


@pytest.mark.benchmark(group=GROUP)
def test_spark_source(benchmark, spark, message_journal):
    frame = spark.read.format("journal_engine").load(str(message_journal))
    benchmark.pedantic(aggregate, args=(frame,), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    record(benchmark, RECORDS, cores(spark))


@pytest.mark.benchmark(group=GROUP)
def test_spark_source_projection(benchmark, spark, message_journal):
    frame = spark.read.format("journal_engine").schema(PROJECTION).load(str(message_journal))
    benchmark.pedantic(aggregate, args=(frame, PROJECTED_AGGREGATE), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    record(benchmark, RECORDS, cores(spark))


@pytest.mark.benchmark(group=GROUP)
def test_source_reader_one_process(benchmark, message_journal):
    from journal_engine.spark.source import JournalReader

    def read_all() -> int:
        reader = JournalReader({"path": str(message_journal)})
        rows = messages = 0
        for partition in reader.partitions():
            for batch in reader.read(partition):
                rows += batch.num_rows
                messages += len(batch.column("address")) - batch.column("address").null_count
        assert messages == MESSAGES
        return rows

    benchmark.pedantic(read_all, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    record(benchmark, RECORDS, 1)


@pytest.mark.benchmark(group=GROUP)
def test_python_reader_one_process(benchmark, message_journal):
    def read_all() -> int:
        messages = 0
        for data in list_directory(str(message_journal), as_if_compacted=True).data:
            with open(data.path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
                frames = scan_frames(view, stamp_of(data.header.file_id), data.header.data_start)
            for _offset, check, _kind, user_type, record_id, _tx_id, body in frames:
                if check == 0:
                    decoded = decode_store_body(user_type, record_id, body)
                    messages += user_type == RecordType.ADD_MESSAGE and decoded is not None
        assert messages == MESSAGES
        return messages

    benchmark.pedantic(read_all, rounds=1, iterations=1, warmup_rounds=0)
    record(benchmark, RECORDS, 1)


@pytest.mark.benchmark(group=GROUP)
def test_spark_parquet(benchmark, spark, message_journal, tmp_path):
    parquet = tmp_path / "records.parquet"
    spark.read.format("journal_engine").load(str(message_journal)).write.parquet(str(parquet))
    frame = spark.read.parquet(str(parquet))
    benchmark.pedantic(aggregate, args=(frame,), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    record(benchmark, RECORDS, cores(spark))
    benchmark.extra_info["projection_s"] = min(_timed(lambda: aggregate(frame.selectExpr(*[
        column.split()[0] for column in PROJECTION.split(", ")]), PROJECTED_AGGREGATE)) for _ in range(ROUNDS))


def _timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started
