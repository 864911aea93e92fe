"""Journal metrics: appends, fdatasyncs, bytes, the group commit's batch size and lag histograms,
compactions and recovery time, for each of the message store's journals (label ``journal``:
``messages``, ``bindings``), from ``Broker.stats()["store"]``: the record stores' own ``stats()``,
which read the counters and histogram buckets the journal core keeps in C."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

if TYPE_CHECKING:
    from ..broker.broker import Broker

__all__ = ["JournalCollector", "JOURNAL_LABELS", "STORE_JOURNALS"]

JOURNAL_LABELS = ("journal",)

#: the message store's record stores, by their key in MessageStore.stats() and their label
STORE_JOURNALS = (("messages_journal", "messages"), ("bindings_journal", "bindings"))

# (metric name, help, stats key, counter?): a record store that does not keep a count (the LMDB
# backend has no files to compact) leaves its metric out rather than reporting a zero it never counted
_VALUES = (
    ("journal_engine_journal_appends", "Records appended (frames: adds, updates, deletes, transaction "
     "records).", "appends", True),
    ("journal_engine_journal_fdatasyncs", "fdatasync calls (LMDB: durable commits) that made appended "
     "records durable.", "syncs", True),
    ("journal_engine_journal_appended_bytes", "Bytes appended, frames and sector padding.", "appended_bytes",
     True),
    ("journal_engine_journal_durable_bytes", "Bytes made durable by the syncs.", "durable_bytes", True),
    ("journal_engine_journal_compactions", "Compactions run (automatic and asked for).", "compactions", True),
    ("journal_engine_journal_live_records", "Records live in the journal (not deleted).", "live_records", False),
    ("journal_engine_journal_live_bytes", "Bytes of the live records' frames.", "live_bytes", False),
    ("journal_engine_journal_data_files", "Data files holding records.", "data_files", False),
    ("journal_engine_journal_recovery_seconds", "How long the load at opening took (recovery).",
     "recovery_seconds", False),
)

# (metric name, help, stats key, factor to the base unit): the group commit's histograms, whose
# buckets the core fills once per sync (limits.COMMIT_BATCH_BUCKETS_BYTES, COMMIT_LAG_BUCKETS_NS)
_HISTOGRAMS = (
    ("journal_engine_journal_commit_batch_bytes", "Bytes each group commit's fdatasync made durable.",
     "commit_batch_bytes", 1.0),
    ("journal_engine_journal_commit_lag_seconds", "Time from when a group commit was due (a leader closed "
     "its batch, the flusher's window ended or an append woke it) until its bytes were durable.",
     "commit_lag_ns", 1e-9),
)


class JournalCollector(Collector):
    """The journal metrics of a ``Broker``'s message store; nothing for a broker without one (the
    in-memory broker, ``Broker()``)."""

    def __init__(self, broker: "Broker") -> None:
        self._broker = broker

    def collect(self) -> Iterator[Metric]:
        store = self._broker.stats().get("store")
        if store is None:
            return
        journals = [(label, store[key]) for key, label in STORE_JOURNALS if key in store]
        for name, documentation, key, counter in _VALUES:
            kind = CounterMetricFamily if counter else GaugeMetricFamily
            family = kind(name, documentation, labels=JOURNAL_LABELS)
            for label, stats in journals:
                if stats.get(key) is not None:
                    family.add_metric((label,), stats[key])
            if family.samples:
                yield family
        for name, documentation, key, factor in _HISTOGRAMS:
            histogram = HistogramMetricFamily(name, documentation, labels=JOURNAL_LABELS)
            for label, stats in journals:
                if key in stats:
                    buckets, total = histogram_buckets(stats[key], factor)
                    histogram.add_metric((label,), buckets, total)
            if histogram.samples:
                yield histogram


def histogram_buckets(histogram: Mapping[str, Any], factor: float) -> tuple[list[tuple[str, float]], float]:
    """Prometheus's cumulative buckets and sum of a core histogram: ``{"bounds": upper bounds,
    "counts": one count per bound and one past the last, "sum": the observations' total}``, each
    bound and the sum multiplied by ``factor`` into the metric's base unit."""
    bounds, counts = histogram["bounds"], histogram["counts"]
    if len(counts) != len(bounds) + 1:
        raise ValueError(f"a histogram of {len(bounds)} bounds has {len(counts)} counts, not {len(bounds) + 1}")
    buckets = []
    running = 0
    for bound, count in zip(bounds, counts):
        running += count
        buckets.append((floatToGoString(bound * factor), running))   # type: ignore[no-untyped-call]
    buckets.append(("+Inf", running + counts[-1]))
    return buckets, histogram["sum"] * factor
