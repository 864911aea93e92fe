"""Prometheus metrics of a broker, its journals and its STOMP server (docs/metrics.md).

Every number is read at scrape time from counts the objects already keep -- a queue's plain int
fields, the journal core's C counters and histogram buckets, the served broker's frame counts -- so
the send, receive and acknowledge paths never call into prometheus_client. Each collector is a
prometheus_client custom collector an embedder may register in a registry of their own::

    from prometheus_client import CollectorRegistry
    from journal_engine.metrics import BrokerCollector, JournalCollector

    registry = CollectorRegistry()
    registry.register(BrokerCollector(broker))
    registry.register(JournalCollector(broker))

``registry_for(broker, server)`` makes such a registry with every collector that applies, and
``render(registry)`` the exposition text the console serves at ``/metrics``.
"""
from __future__ import annotations

from .broker import BrokerCollector
from .exposition import registry_for, render
from .journal import JournalCollector
from .stomp import StompCollector

__all__ = ["BrokerCollector", "JournalCollector", "StompCollector", "registry_for", "render"]
