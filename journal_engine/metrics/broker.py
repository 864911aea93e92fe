"""Per-queue metrics: depth, sends, deliveries, acknowledgements, rollbacks, redeliveries, dead letters
by reason and expiries, from the ``QueueInfo`` snapshots of ``Broker.queue_infos()``."""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from ..broker.broker import Broker

__all__ = ["BrokerCollector", "QUEUE_LABELS"]

#: the labels of every per-queue metric: a queue's name is unique, its address says what feeds it
QUEUE_LABELS = ("queue", "address")

# (metric name, help, QueueInfo field): gauges of a queue's depth, read as they are now
_GAUGES = (
    ("journal_engine_queue_messages", "Messages on the queue: ready, scheduled and delivering (Artemis's "
     "message count).", "message_count"),
    ("journal_engine_queue_scheduled_messages", "Messages waiting for their scheduled delivery time or "
     "redelivery delay.", "scheduled_count"),
    ("journal_engine_queue_delivering_messages", "Messages handed to consumers and not yet acknowledged or "
     "rolled back.", "delivering_count"),
    ("journal_engine_queue_consumers", "Open consumers of the queue.", "consumer_count"),
)

# counters since the queue was made (or the broker started, for a recovered queue)
_COUNTERS = (
    ("journal_engine_queue_messages_added", "Messages added to the queue (sends routed to it, dead-letter "
     "and expiry copies, redriven messages).", "messages_added"),
    ("journal_engine_queue_messages_delivered", "Deliveries to consumers, redeliveries included.",
     "messages_delivered"),
    ("journal_engine_queue_messages_redelivered", "Deliveries of a message delivered before (delivery count "
     "above 1).", "messages_redelivered"),
    ("journal_engine_queue_messages_acknowledged", "Messages acknowledged by consumers.",
     "messages_acknowledged"),
    ("journal_engine_queue_messages_rolled_back", "Failed deliveries: rollbacks, sessions rolled back, "
     "served connections lost holding the message.", "messages_rolled_back"),
    ("journal_engine_queue_messages_expired", "Messages that expired on the queue (moved to an expiry "
     "address or dropped).", "messages_expired"),
    ("journal_engine_queue_messages_dropped", "Messages dead-lettered or expired with nowhere to go, "
     "dropped.", "messages_dropped"),
)


class BrokerCollector(Collector):
    """The per-queue metrics of a ``Broker`` (labels ``queue`` and ``address``), and the broker's
    own counts of messages no queue took. Reads one snapshot of every queue per scrape, under one
    hold of the broker's lock, so the numbers of one scrape are of one moment."""

    def __init__(self, broker: "Broker") -> None:
        self._broker = broker

    def collect(self) -> Iterator[Metric]:
        infos = self._broker.queue_infos()
        stats = self._broker.stats()
        for name, documentation, field in _GAUGES:
            gauge = GaugeMetricFamily(name, documentation, labels=QUEUE_LABELS)
            for info in infos:
                gauge.add_metric((info.name, info.address), getattr(info, field))
            yield gauge
        for name, documentation, field in _COUNTERS:
            counter = CounterMetricFamily(name, documentation, labels=QUEUE_LABELS)
            for info in infos:
                counter.add_metric((info.name, info.address), getattr(info, field))
            yield counter
        dead = CounterMetricFamily("journal_engine_queue_messages_dead_lettered",
                                   "Messages dead-lettered from the queue (moved to a dead-letter address or "
                                   "dropped), by the reason a dead-letter copy carries (_JE_DEAD_LETTER_REASON).",
                                   labels=QUEUE_LABELS + ("reason",))
        for info in infos:
            for reason, count in sorted(info.dead_letters.items()):
                dead.add_metric((info.name, info.address, reason), count)
        yield dead
        yield GaugeMetricFamily("journal_engine_broker_queues", "Queues the broker holds.", value=len(infos))
        yield CounterMetricFamily("journal_engine_broker_messages_unrouted",
                                  "Messages sent to an address no queue took, and dropped.", value=stats["unrouted"])
        yield CounterMetricFamily("journal_engine_broker_messages_duplicate",
                                  "Messages refused as duplicates (their duplicate id was seen on the address).",
                                  value=stats["duplicates"])
        if stats["recovery_seconds"] is not None:
            yield GaugeMetricFamily("journal_engine_broker_recovery_seconds",
                                    "How long the broker's start took to recover its store and rebuild its queues "
                                    "(the journals' loads included).", value=stats["recovery_seconds"])
