"""journal_engine.analytics on the broker story of tests/helpers/spark_journals.py, against values worked out by
hand from that story (and, for live bytes, against the journal's own load())."""
from __future__ import annotations

import json

import pytest
from spark_journals import (FAILED_AT, MAX_DELIVERY_ATTEMPTS, NOW, POISON_BODY, POISON_SENT_AT, REDELIVERY_DELAY_MS,
                            write_broker)

from journal_engine import Journal, analytics

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def story(tmp_path_factory, spark):
    directory = tmp_path_factory.mktemp("analytics") / "broker"
    ids = write_broker(directory)
    return directory, ids, spark.read.format("journal_engine").load(str(directory)).cache()


def orders_queue_id(records) -> int:
    return records.where("queue_name = 'orders'").first().record_id


def test_dead_letters_by_original_address_and_queue(story):
    _directory, _ids, records = story
    rows = [tuple(row) for row in analytics.dead_letters(records).collect()]
    assert rows == [("orders", "orders", "DLA", "max-delivery-attempts", 1, len(POISON_BODY))]


def test_delivery_count_histogram(story):
    _directory, _ids, records = story
    # eight committed references: six sends, the copy on `dead`, the committed transactional send;
    # only the poison message's count went up: 2 persisted by its rollbacks, 3 in its dead-letter copy
    rows = [tuple(row) for row in analytics.delivery_count_histogram(records).collect()]
    assert rows == [(0, 7), (MAX_DELIVERY_ATTEMPTS, 1)]


def test_redelivery_delays(story):
    _directory, ids, records = story
    queue_id = orders_queue_id(records)
    rows = [tuple(row) for row in analytics.redelivery_delays(records).collect()]
    assert rows == [(queue_id, "orders", ids["poison"], attempt, FAILED_AT[attempt - 1],
                     FAILED_AT[attempt - 1] + REDELIVERY_DELAY_MS, REDELIVERY_DELAY_MS)
                    for attempt in (1, 2)]


def test_time_in_queue(story):
    _directory, ids, records = story
    rows = {row.message_id: row for row in analytics.time_in_queue(records, sent_time_property="sent_at").collect()}
    poison = rows[ids["poison"]]
    assert (poison.queue_name, poison.outcome, poison.sent_at, poison.left_at, poison.time_in_queue_ms) == \
        ("orders", "max-delivery-attempts", POISON_SENT_AT, FAILED_AT[-1], FAILED_AT[-1] - POISON_SENT_AT)
    outcomes = {message_id: row.outcome for message_id, row in rows.items() if row.queue_name == "orders"}
    assert outcomes == {ids["first"]: "acknowledged", ids["poison"]: "max-delivery-attempts",
                        ids["others"][0]: "acknowledged", ids["others"][1]: "acknowledged",
                        ids["others"][2]: "in queue", ids["others"][3]: "in queue", ids["committed"]: "in queue"}
    assert rows[ids["first"]].sent_at == NOW and rows[ids["first"]].time_in_queue_ms is None
    assert [row.outcome for row in rows.values() if row.queue_name == "dead"] == ["in queue"]


def test_live_and_dead_bytes_per_segment_agree_with_load(story):
    directory, _ids, records = story
    rows = analytics.segment_bytes(records).collect()
    for journal in ("messages", "bindings"):
        with Journal(str(directory / journal), read_only=True) as opened:
            opened.load()
            live_bytes = opened.stats()["live_bytes"]
        mine = [row for row in rows if f"/{journal}/" in row.path]
        assert sum(row.live_bytes for row in mine) == live_bytes
        for row in mine:
            assert row.used_bytes == row.live_bytes + row.dead_bytes
            assert row.compaction_candidate == (row.live_percent < 30)


def write_json(path, document) -> str:
    path.write_text(json.dumps(document))
    return str(path)


def test_crash_test_summary(spark, tmp_path):
    base = {"seed": 1, "size": "quick", "store": "journal", "skipped": {}, "crash_points_hit": {"append": 3},
            "calls": 100, "acknowledged": 50, "lost_unacknowledged": 2, "duration_s": 1.5, "reproduce": "x"}
    paths = [write_json(tmp_path / "a.json", {**base, "runs": {"kill": 10, "torn": 5}, "violations": []}),
             write_json(tmp_path / "b.json", {**base, "store": "lmdb", "runs": {"kill": 4},
                                               "violations": ["lost 1", "lost 2"]})]
    rows = analytics.crash_test_summary(analytics.read_reports(spark, paths)).collect()
    assert [(row.store, row.fault_modes, row.runs, row.acknowledged, row.violations) for row in rows] == \
        [("journal", 2, 15, 50, 0), ("lmdb", 1, 4, 50, 2)]


def test_bench_summary(spark, tmp_path):
    def result(store, ours, rate, ratio):
        return {"scenario": "append", "cell": {"key": "256 B x 1", "record_bytes": 256}, "store": store, "ours": ours,
                "median_records_per_s": rate, "ratio_to_best_peer": ratio, "fraction_of_limit": 0.5}
    paths = [write_json(tmp_path / f"bench{n}.json", {"schema": "journal-engine-bench", "results": [
        result("journal_engine", True, rate, 2.0), result("sqlite", False, 500.0, None)]})
        for n, rate in enumerate((1000.0, 3000.0))]
    rows = analytics.bench_summary(analytics.read_reports(spark, paths)).collect()
    assert [(row.store, row.reports, row.median_records_per_s, row.min_records_per_s, row.max_records_per_s,
             row.ratio_to_best_peer) for row in rows] == [("journal_engine", 2, 2000.0, 1000.0, 3000.0, 2.0),
                                                          ("sqlite", 2, 500.0, 500.0, 500.0, None)]


def test_live_bytes_of_an_lmdb_store_are_its_live_records_bodies(spark, tmp_path):
    """An LMDB store holds only live records (no frames): every byte is live. Before, segment_bytes summed
    the frame sizes, null there, and reported live_bytes = 0 (every record dead) and no used bytes."""
    from journal_engine.storage.lmdb.store import LmdbRecordStore
    directory = tmp_path / "broker"
    write_broker(directory, store="lmdb")
    rows = {row.path: row for row in analytics.segment_bytes(
        spark.read.format("journal_engine").load(str(directory))).collect()}
    assert sorted(rows) == [str(directory / "bindings"), str(directory / "messages")]
    for path, row in rows.items():
        with LmdbRecordStore(path, read_only=True) as store:
            records = store.load(copy=True).records.values()
        body_bytes = sum(len(record.body) + sum(len(body) for _type, body in record.updates) for record in records)
        assert body_bytes > 0
        assert (row.frames, row.used_bytes, row.live_bytes, row.dead_bytes, row.live_percent,
                row.compaction_candidate) == (sum(1 + len(record.updates) for record in records), body_bytes,
                                              body_bytes, 0, 100.0, False)
