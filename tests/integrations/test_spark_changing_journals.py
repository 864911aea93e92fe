"""Reads that never crash the job: a journal a writer compacts while it is read, a file whose header does
not decode. The writer is a second real process; the source's partitions are pickled as Spark sends them."""
from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
from spark_journals import python_rows, write_broker, write_journal

from journal_engine.spark.source import JournalReader

pytestmark = pytest.mark.spark

_COMPACT = """
import sys
from journal_engine import Journal
with Journal(sys.argv[1], file_size=64 * 1024) as journal:
    journal.load()
    for record_id in range(1, 401):
        if record_id % 7:
            journal.delete(record_id)
    journal.compact()
"""


def read_rows(reader: JournalReader, partitions) -> list[tuple]:
    rows = []
    for partition in partitions:
        for batch in reader.read(pickle.loads(pickle.dumps(partition))):
            rows += zip(*(batch.column(name).to_pylist() for name in ("path", "offset", "kind", "damage")))
    return rows


def test_a_file_compacted_away_between_the_plan_and_the_read_is_read_as_its_successor(tmp_path):
    journal = tmp_path / "journal"
    write_journal(journal)
    reader = JournalReader({"path": str(journal)})
    partitions = reader.partitions()
    planned = {partition.data.path for partition in partitions}
    subprocess.run([sys.executable, "-c", _COMPACT, str(journal)], check=True, timeout=120)
    rows = read_rows(reader, partitions)
    now = python_rows(str(journal))
    assert not planned <= {path for path, *_ in now}         # the compaction replaced files the plan listed
    assert all(damage is None for *_, damage in rows)       # a compacted file is not damage
    # the journal as the compaction left it, slot by slot (the writer's new file after the plan is not read)
    assert sorted(row[:3] for row in rows) == sorted((path, offset, kind) for path, offset, kind, *_ in now)


def foreign_file(journal) -> str:
    """A file with a journal file's name and no journal header (bad magic)."""
    stray = journal / "journal-00000000000000ff.jej"
    stray.write_bytes(b"not a journal" * 1000)
    return str(stray)


def test_a_file_with_a_bad_header_is_a_damage_row_and_the_other_files_are_read(spark, tmp_path):
    journal = tmp_path / "journal"
    write_journal(journal)
    expected = {(path, offset) for path, offset, *_ in python_rows(str(journal))}
    stray = foreign_file(journal)
    rows = spark.read.format("journal_engine").load(str(journal)).select("path", "offset", "damage").collect()
    assert {(row.path, row.offset) for row in rows if row.damage is None} == expected
    damaged = [row for row in rows if row.damage is not None]
    assert [(row.path, row.offset) for row in damaged] == [(stray, 0)]
    assert "not a journal_engine file (bad magic)" in damaged[0].damage
    with pytest.raises(Exception, match="bad magic"):
        spark.read.format("journal_engine").option("mode", "failfast").load(str(journal)).count()


def test_a_live_read_of_a_journal_with_a_bad_header_is_a_damage_row(spark, tmp_path):
    other = tmp_path / "other"
    write_journal(other, records=20)
    journal = tmp_path / "journal"
    write_journal(journal)
    stray = foreign_file(journal)
    rows = spark.read.format("journal_engine").option("live", "true").load([str(journal), str(other)]).collect()
    damaged = [row for row in rows if row.damage is not None]
    assert [(row.path, row.offset) for row in damaged] == [(stray, 0)]
    assert "bad magic" in damaged[0].damage
    assert {row.path for row in rows if row.damage is None} == {str(other)}    # the other journal is read


def test_an_lmdb_store_reads_as_its_live_records_with_the_message_store_columns(spark, tmp_path):
    from journal_engine.storage.lmdb.store import LmdbRecordStore
    lmdb_broker, journal_broker = tmp_path / "lmdb", tmp_path / "journal"
    write_broker(lmdb_broker, store="lmdb")
    write_broker(journal_broker)
    columns = "kind, record_id, record_type, body, address, queue_id, queue_name, delivery_count, properties, damage"
    for part in ("messages", "bindings"):
        with LmdbRecordStore(str(lmdb_broker / part), read_only=True) as store:
            stored = store.load().records
        rows = spark.read.format("journal_engine").load(str(lmdb_broker / part)).collect()
        assert {row.path for row in rows} == {str(lmdb_broker / part)}
        signed = {record_id: record_id - (1 << 64) if record_id >= 1 << 63 else record_id for record_id in stored}
        expected = [("ADD", signed[record_id], record.record_type, record.body) for record_id, record in stored.items()]
        expected += [("UPDATE", signed[record_id], *update) for record_id, record in stored.items()
                     for update in record.updates]
        assert sorted((row.kind, row.record_id, row.record_type, bytes(row.body)) for row in rows) == sorted(expected)
        # the same store columns as the journal broker's live records (same story, same ids)
        live = spark.read.format("journal_engine").option("live", "true").load(str(journal_broker / part))
        assert sorted(map(repr, spark.read.format("journal_engine").load(str(lmdb_broker / part))
                          .selectExpr(*columns.split(", ")).collect())) == \
            sorted(map(repr, live.selectExpr(*columns.split(", ")).collect()))
