"""The journal metrics (journal_engine/metrics/journal.py): the core's counts of appends, fdatasyncs and
bytes, its group-commit histograms (batch bytes, lag) and the load's time, read from a real broker's
message store, checked against the records a send and an acknowledgement write and against the
journals' own stats(). Runs on the compiled core and on the twin (.ci/run's twin lane), whose
histograms are each their own."""
from __future__ import annotations

import pytest
from metrics_text import sample, samples_named, samples_of

from journal_engine import Broker, Journal
from journal_engine.limits import COMMIT_BATCH_BUCKETS_BYTES, COMMIT_LAG_BUCKETS_NS, SECTOR_SIZE_BYTES
from journal_engine.metrics import JournalCollector, registry_for, render
from journal_engine.metrics.journal import histogram_buckets

MESSAGES = 25
JOURNALS = ("messages", "bindings")


def scrape(broker: Broker) -> list:
    return samples_of(render(registry_for(broker))[0])


def test_journal_metrics_are_the_store_counts(tmp_path):
    with Broker(tmp_path / "broker") as broker:
        broker.create_queue("jobs")
        before = broker.stats()["store"]["messages_journal"]["appends"]
        consumer = broker.create_consumer("jobs")
        for number in range(MESSAGES):
            broker.send("jobs", b"job %d" % number)
            consumer.ack(consumer.receive())
        broker.sync()
        samples = scrape(broker)
        broker_stats = broker.stats()
    store = broker_stats["store"]
    broker_recovery_seconds = broker_stats["recovery_seconds"]
    assert sample(samples, "journal_engine_broker_recovery_seconds", {}) == broker_recovery_seconds > 0
    messages = store["messages_journal"]
    # a send appends the message (45) and its reference (32), an acknowledgement the ACK (33) and the
    # DELETE of the message after its last reference: four records a message
    assert messages["appends"] - before == 4 * MESSAGES
    for label in JOURNALS:
        stats = store[f"{label}_journal"]
        labels = {"journal": label}
        assert sample(samples, "journal_engine_journal_appends_total", labels) == stats["appends"]
        assert sample(samples, "journal_engine_journal_fdatasyncs_total", labels) == stats["syncs"]
        assert sample(samples, "journal_engine_journal_appended_bytes_total", labels) == stats["appended_bytes"]
        assert sample(samples, "journal_engine_journal_durable_bytes_total", labels) == stats["durable_bytes"]
        assert sample(samples, "journal_engine_journal_live_records", labels) == stats["live_records"]
        assert sample(samples, "journal_engine_journal_compactions_total", labels) == stats["compactions"]
        assert sample(samples, "journal_engine_journal_recovery_seconds", labels) == stats["recovery_seconds"] > 0
        assert stats["recovery_seconds"] < broker_recovery_seconds      # the broker's includes its journals'
        # every sync that made bytes durable is one observation of both histograms, so the batches add
        # up to the durable bytes, and there are no more of them than fdatasyncs
        batches = sample(samples, "journal_engine_journal_commit_batch_bytes_count", labels)
        assert 0 < batches <= stats["syncs"]
        assert sample(samples, "journal_engine_journal_commit_lag_seconds_count", labels) == batches
        assert sample(samples, "journal_engine_journal_commit_batch_bytes_sum", labels) == stats["durable_bytes"]
        assert sample(samples, "journal_engine_journal_commit_lag_seconds_sum", labels) > 0
        for name, bounds, factor in (("journal_engine_journal_commit_batch_bytes", COMMIT_BATCH_BUCKETS_BYTES, 1),
                                     ("journal_engine_journal_commit_lag_seconds", COMMIT_LAG_BUCKETS_NS, 1e-9)):
            buckets = [found for found in samples_named(samples, name + "_bucket") if found.labels["journal"] == label]
            assert [float(found.labels["le"]) for found in buckets] == pytest.approx([b * factor for b in bounds]
                                                                                     + [float("inf")])
            counts = [found.value for found in buckets]
            assert counts == sorted(counts) and counts[-1] == batches


def test_a_batch_of_one_sector_counts_in_the_first_bucket(tmp_path):
    """sync="always": each small record is one sync of one padded sector, exactly the first bound, which
    Prometheus's le (less or equal) counts in the first bucket."""
    with Journal(tmp_path / "journal", sync="always") as journal:
        journal.load()
        for record_id in range(1, 11):
            journal.add(record_id, 45, b"x" * 100)
        stats = journal.stats()
    batch = stats["commit_batch_bytes"]
    assert COMMIT_BATCH_BUCKETS_BYTES[0] == SECTOR_SIZE_BYTES
    assert batch["counts"][0] == 10 and sum(batch["counts"]) == 10
    assert batch["sum"] == 10 * SECTOR_SIZE_BYTES == stats["durable_bytes"] - stats["durable_bytes"] % SECTOR_SIZE_BYTES
    assert stats["appends"] == 10
    assert sum(stats["commit_lag_ns"]["counts"]) == 10


def test_an_lmdb_store_reports_what_it_counts_and_leaves_out_the_rest(tmp_path):
    """LMDB keeps syncs, bytes and live records, but no appends, files, compactions or histograms: those
    are absent, not zeros it never counted."""
    with Broker(tmp_path / "broker", store="lmdb") as broker:
        broker.create_queue("jobs")
        broker.send("jobs", b"job")
        broker.sync()
        samples = scrape(broker)
        stats = broker.stats()["store"]["messages_journal"]
    labels = {"journal": "messages"}
    assert sample(samples, "journal_engine_journal_fdatasyncs_total", labels) == stats["syncs"] > 0
    assert sample(samples, "journal_engine_journal_durable_bytes_total", labels) == stats["durable_bytes"] > 0
    assert sample(samples, "journal_engine_journal_live_records", labels) == stats["live_records"] > 0
    names = {found.name for found in samples}
    assert not names & {"journal_engine_journal_appends_total", "journal_engine_journal_compactions_total",
                        "journal_engine_journal_commit_batch_bytes_count", "journal_engine_journal_data_files"}


def test_a_broker_without_a_store_has_no_journal_metrics():
    with Broker() as broker:
        assert list(JournalCollector(broker).collect()) == []


def test_histogram_buckets_are_cumulative_and_refuse_a_count_too_few():
    histogram = {"bounds": (10, 20), "counts": (1, 2, 3), "sum": 100}
    assert histogram_buckets(histogram, 0.5) == ([("5.0", 1), ("10.0", 3), ("+Inf", 6)], 50.0)
    with pytest.raises(ValueError, match="2 bounds has 2 counts"):
        histogram_buckets({"bounds": (10, 20), "counts": (1, 2), "sum": 0}, 1.0)
