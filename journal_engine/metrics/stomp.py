"""STOMP metrics of a served broker (``journal-engine serve-stomp``): connections open and accepted,
frames received and sent by command, ERROR frames sent. The server keeps the counts as plain ints
and dicts (served/server.py, ``ServedBroker``); this reads them at scrape time."""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from ..served.server import ServedBroker

__all__ = ["StompCollector"]


class StompCollector(Collector):
    """The STOMP metrics of a ``ServedBroker``. Its counts change on the server's event loop; a
    scrape from another thread reads ints and copies dicts that the loop only ever grows, so a
    scrape sees each count whole (a moment apart from the others, at worst)."""

    def __init__(self, server: "ServedBroker") -> None:
        self._server = server

    def collect(self) -> Iterator[Metric]:
        server = self._server
        yield GaugeMetricFamily("journal_engine_stomp_connections", "STOMP connections open now.",
                                value=len(server.connections))
        yield CounterMetricFamily("journal_engine_stomp_connections_accepted",
                                  "STOMP connections accepted (those refused past the connection limit "
                                  "included).", value=server.connections_accepted)
        for name, documentation, counts in (
                ("journal_engine_stomp_frames_received", "STOMP frames received, by command.",
                 server.frames_received),
                ("journal_engine_stomp_frames_sent", "STOMP frames sent, by command (heart-beats are not "
                 "frames).", server.frames_sent)):
            family = CounterMetricFamily(name, documentation, labels=("command",))
            for command, count in sorted(dict(counts).items()):
                family.add_metric((command,), count)
            yield family
        yield CounterMetricFamily("journal_engine_stomp_errors",
                                  "ERROR frames sent (each closes its connection).",
                                  value=server.frames_sent.get("ERROR", 0))
