"""The journal_engine Spark source against the Python reader: the same rows, fields and damage.

Journals are written by the broker with known contents (tests/helpers/spark_journals.py); every row Spark returns
is compared with what the Python reader (the scan decoder per file, record_format for bodies,
``Journal(read_only=True).load()`` for live records, ``recovery.analyze`` for damage) finds in the same
files. All Spark tests share the session fixture of conftest.py.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest
from damage import flip_byte
from spark_journals import copy, python_rows, write_broker, write_journal

from journal_engine import Journal
from journal_engine._twin.message_columns import property_text
from journal_engine.errors import CorruptRecordError
from journal_engine.record_format import RecordType, StoredMessage, StoredQueue, decode_store_body
from journal_engine.storage.journal.recovery import TORN_TAIL_REASON, analyze
from journal_engine.storage.journal.segment_files import list_directory

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def broker_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("spark") / "broker"
    write_broker(directory)
    return directory


@pytest.fixture(scope="module")
def journal_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("spark") / "journal"
    write_journal(directory)
    return directory


def spark_rows(df) -> list:
    return df.orderBy("path", "offset").collect()


@pytest.fixture(scope="module")
def broker_rows(spark, broker_dir) -> list:
    """The broker directory's rows, collected once for the tests that look at them."""
    return spark_rows(spark.read.format("journal_engine").load(str(broker_dir)))


@pytest.fixture(scope="module")
def journal_rows(spark, journal_dir) -> list:
    return spark_rows(spark.read.format("journal_engine").load(str(journal_dir)))


def signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def expected_fields(record_type: int, record_id: int, body: bytes) -> dict:
    """The message-store columns of one record, from record_format (None for other record types)."""
    fields = dict.fromkeys(("address", "queue_id", "queue_name", "delivery_count", "scheduled_time", "expiration",
                            "durable", "routing_type", "message_size", "properties"))
    decoded = decode_store_body(record_type, record_id, body)
    if isinstance(decoded, StoredMessage):
        fields.update(address=decoded.address, expiration=decoded.expiration, durable=decoded.durable,
                      routing_type=decoded.routing_type, message_size=len(decoded.body),
                      properties={key: property_text(value) for key, value in decoded.properties.items()})
    elif isinstance(decoded, StoredQueue):
        fields.update(address=decoded.address, queue_name=decoded.name, routing_type=decoded.routing_type)
    elif record_type == RecordType.UPDATE_DELIVERY_COUNT:
        fields.update(queue_id=signed(decoded[0]), delivery_count=decoded[1])
    elif record_type == RecordType.SET_SCHEDULED_DELIVERY_TIME:
        fields.update(queue_id=signed(decoded[0]), scheduled_time=signed(decoded[1]))
    elif decoded is not None:
        fields.update(queue_id=signed(decoded))
    return fields


def assert_rows_equal_python_reader(rows, journals) -> None:
    expected = sorted(row for journal in journals for row in python_rows(str(journal)))
    assert all(row.damage is None for row in rows)
    got = sorted((row.path, row.offset, row.kind, row.record_id, row.record_type, row.tx_id, row.body) for row in rows)
    assert got == [(path, offset, kind, signed(record_id), user_type, signed(tx_id), body)
                   for path, offset, kind, record_id, user_type, tx_id, body in expected]
    for row in rows:
        assert row.body_size == len(row.body)
        if row.kind in ("ADD", "UPDATE", "ADD_TX", "UPDATE_TX"):
            assert {name: row[name] for name in expected_fields(0, 0, b"")} == \
                expected_fields(row.record_type, row.record_id, row.body), row


def test_a_broker_directory_reads_as_every_record_the_python_reader_finds(broker_dir, broker_rows):
    rows = broker_rows
    assert_rows_equal_python_reader(rows, [broker_dir / "messages", broker_dir / "bindings"])
    # one row per record as written, live or not: six sends, the dead-letter copy, two transactional sends
    messages = [row for row in rows if row.record_type == RecordType.ADD_MESSAGE and "/messages/" in row.path]
    assert sorted(row.kind for row in messages) == ["ADD"] * 6 + ["ADD_TX"] * 3
    # three rollbacks of the poison message: two counts and times, then the move (its count in the copy)
    assert sum(row.record_type == RecordType.UPDATE_DELIVERY_COUNT for row in rows) == 2
    assert sum(row.record_type == RecordType.SET_SCHEDULED_DELIVERY_TIME for row in rows) == 2
    assert {row.kind for row in rows} >= {"ADD", "UPDATE", "DELETE", "ADD_TX", "UPDATE_TX", "COMMIT", "ROLLBACK", "PAD"}
    assert {row.queue_name for row in rows if row.record_type == RecordType.QUEUE_BINDING_RECORD} == {"orders", "dead"}


def test_a_plain_journal_over_several_files(journal_dir, journal_rows):
    assert len({row.path for row in journal_rows}) > 2
    assert_rows_equal_python_reader(journal_rows, [journal_dir])


def test_several_journals_at_once(spark, broker_dir, journal_dir, tmp_path):
    second = copy(broker_dir, tmp_path / "broker-2")
    paths = [str(broker_dir), str(journal_dir), str(second)]
    rows = spark_rows(spark.read.format("journal_engine").load(paths))
    journals = [broker_dir / "messages", broker_dir / "bindings", journal_dir, second / "messages",
                second / "bindings"]
    assert_rows_equal_python_reader(rows, journals)


def test_a_large_file_split_into_parts_gives_the_same_rows(spark, journal_dir, journal_rows):
    split = spark.read.format("journal_engine").option("split_bytes", 16 * 1024).option("batch_rows", 7)
    split = split.load(str(journal_dir))
    assert split.rdd.getNumPartitions() > len(list_directory(str(journal_dir)).data)
    assert spark_rows(split) == journal_rows


def test_live_gives_the_records_load_returns(spark, broker_dir, journal_dir):
    df = spark.read.format("journal_engine").option("live", "true").load([str(broker_dir), str(journal_dir)])
    rows = df.collect()
    for journal in (broker_dir / "messages", broker_dir / "bindings", journal_dir):
        with Journal(str(journal), read_only=True) as opened:
            records = opened.load().records
        mine = [row for row in rows if row.path == str(journal)]
        adds = {row.record_id: row for row in mine if row.kind == "ADD"}
        assert sorted(adds) == sorted(signed(record_id) for record_id in records)
        for record_id, record in records.items():
            add = adds[signed(record_id)]
            assert (add.record_type, add.body) == (record.record_type, record.body)
            updates = [(row.record_type, row.body) for row in mine
                       if row.kind == "UPDATE" and row.record_id == signed(record_id)]
            assert updates == record.updates
        assert all(row.offset is None and row.damage is None for row in mine)


def digest(directory) -> dict:
    return {path: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(directory.rglob("*"))
            if path.is_file()}


def damaged_journal(journal_dir, tmp_path, *, middle: bool, tail: bool):
    damaged = copy(journal_dir, tmp_path / "damaged")
    files = [data for data in list_directory(str(damaged)).data]
    with_data = [data for data in files if python_rows_of(data)]
    if middle:   # a byte of a frame in the middle of the first file: damage followed by valid frames
        offset = python_rows_of(with_data[0])[10][1] + 40
        flip_byte(with_data[0].path, offset)
    if tail:     # a byte of the last frame of the journal: a torn tail
        offset = python_rows_of(with_data[-1])[-1][1] + 20
        flip_byte(with_data[-1].path, offset)
    return damaged


def python_rows_of(data) -> list:
    return [row for row in python_rows(os.path.dirname(data.path)) if row[0] == data.path]


def test_damage_appears_as_the_python_reader_reports_it(spark, journal_dir, tmp_path):
    damaged = damaged_journal(journal_dir, tmp_path, middle=True, tail=True)
    before = digest(damaged)
    report = analyze(str(damaged), as_if_compacted=True).report
    assert report.corrupt and report.torn_tail
    rows = spark.read.format("journal_engine").load(str(damaged)).where("damage is not null").collect()
    expected = {(path, offset, reason) for path, offset, reason in report.corrupt}
    expected.add((*report.torn_tail, TORN_TAIL_REASON))
    assert {(row.path, row.offset, row.damage) for row in rows} == expected
    assert all(row.kind is None and row.record_id is None for row in rows)
    assert digest(damaged) == before          # the source never writes, truncates or creates anything


def test_a_file_cut_short_is_a_damage_row(spark, journal_dir, tmp_path):
    damaged = copy(journal_dir, tmp_path / "cut")
    first = list_directory(str(damaged)).data[0]
    os.truncate(first.path, first.size - 4096)
    report = analyze(str(damaged), as_if_compacted=True).report
    rows = spark.read.format("journal_engine").load(str(damaged)).where("damage is not null").collect()
    assert {(row.path, row.offset, row.damage) for row in rows} == set(report.corrupt)
    assert [row.offset for row in rows if "cut short" in row.damage] == [first.size - 4096]


def test_failfast_stops_the_job_at_the_first_damage(spark, journal_dir, tmp_path):
    damaged = damaged_journal(journal_dir, tmp_path, middle=False, tail=True)
    report = analyze(str(damaged), as_if_compacted=True).report
    with pytest.raises(Exception, match="torn tail") as caught:
        spark.read.format("journal_engine").option("mode", "failfast").load(str(damaged)).count()
    assert f"offset {report.torn_tail[1]}" in str(caught.value) or str(report.torn_tail[1]) in str(caught.value)
    assert spark.read.format("journal_engine").option("mode", "failfast").load(str(journal_dir)).count() > 0


def test_a_body_the_store_cannot_decode_is_a_damage_row_with_record_formats_words(spark, tmp_path):
    directory = tmp_path / "odd"
    with Journal(str(directory), file_size=64 * 1024) as journal:
        journal.load()
        journal.add(5, int(RecordType.ADD_MESSAGE), b"\x09not a message")
        journal.add(6, int(RecordType.ADD_REF), b"\x01" * 8)
        journal.sync()
    rows = spark_rows(spark.read.format("journal_engine").load(str(directory)).where("kind = 'ADD'"))
    with pytest.raises(CorruptRecordError) as caught:
        decode_store_body(int(RecordType.ADD_MESSAGE), 5, b"\x09not a message",
                          path=list_directory(str(directory)).data[0].path)
    assert [row.damage for row in rows] == [str(caught.value), None]
    assert rows[1].queue_id == 0x0101010101010101


def test_bad_options_and_paths_are_named(spark, tmp_path):
    with pytest.raises(Exception, match="holds no record store"):
        spark.read.format("journal_engine").load(str(tmp_path)).count()
    with pytest.raises(Exception, match="mode="):
        spark.read.format("journal_engine").option("mode", "sometimes").load(str(tmp_path)).count()


def test_a_schema_given_to_the_reader_is_a_projection(spark, broker_dir, broker_rows):
    wanted = ["record_id", "kind", "queue_id", "path"]
    some = spark.read.format("journal_engine").schema("record_id bigint, kind string, queue_id bigint, path string")
    some = some.load(str(broker_dir))
    assert some.columns == wanted
    assert sorted(str(tuple(row)) for row in some.collect()) == \
        sorted(str(tuple(row[name] for name in wanted)) for row in broker_rows)
    with pytest.raises(Exception, match="not a column of the journal_engine source"):
        spark.read.format("journal_engine").schema("colour string").load(str(broker_dir)).count()


def test_a_worker_reading_the_source_does_not_import_pandas(broker_dir):
    # Spark starts a Python process per query to plan it, and workers to read: pandas would be a second
    # of each one's start (pa.array imports it); the source builds its arrays from buffers instead
    program = ("import sys\n"
               "from journal_engine.spark.source import JournalReader\n"
               "from journal_engine.spark.columns import single_row\n"
               f"reader = JournalReader({{'path': {str(broker_dir)!r}}})\n"
               "rows = sum(batch.num_rows for part in reader.partitions() for batch in reader.read(part))\n"
               "single_row(path='p', offset=1, damage='d')\n"
               "print(rows, 'pandas' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                            check=True)
    rows, pandas_imported = result.stdout.split()
    assert int(rows) == len(python_rows(str(broker_dir / "messages"))) + len(python_rows(str(broker_dir / "bindings")))
    assert pandas_imported == "False"



def test_a_dataframe_asked_a_filtered_then_an_unfiltered_question_gives_every_row(spark, broker_dir, broker_rows):
    # Spark 4.3 keeps the reader a DataFrame's filters were pushed to and reads its later queries with it;
    # the source takes no filters, so a `where` cannot leak into the next question (docs/spark.md, Filters)
    records = spark.read.format("journal_engine").load(str(broker_dir))
    assert records.where("kind = 'PAD'").count() == sum(row.kind == "PAD" for row in broker_rows)
    assert records.count() == len(broker_rows)


_FREEZE_PROBE = """
import gc, sys, types
if sys.argv[1] == "worker":      # what a Python worker of Spark runs as: a child of `python -m pyspark.daemon`
    sys.modules["__main__"].__spec__ = types.SimpleNamespace(name="pyspark.daemon")
from journal_engine.spark.source import JournalReader
reader = JournalReader({"path": sys.argv[2]})
rows = sum(batch.num_rows for partition in reader.partitions() for batch in reader.read(partition))
print(rows, gc.get_freeze_count())
"""


@pytest.mark.parametrize("where", ["worker", "driver"])
def test_a_spark_worker_leaves_its_imported_heap_out_of_the_collectors_passes(journal_dir, where):
    """pyspark's daemon runs gc.collect() after every task of a reused worker, a full pass over
    everything the worker imported: the reader freezes that heap once, in a worker only (a driver or a
    test that calls read() keeps its heap as it is)."""
    done = subprocess.run([sys.executable, "-c", _FREEZE_PROBE, where, str(journal_dir)], capture_output=True,
                          text=True, timeout=120, check=True)
    rows, frozen = map(int, done.stdout.split())
    assert rows > 0
    assert (frozen > 10_000) if where == "worker" else (frozen == 0), frozen
