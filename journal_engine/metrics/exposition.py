"""A registry with every collector of a broker (and of its STOMP server), and its exposition text."""
from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from .broker import BrokerCollector
from .journal import JournalCollector
from .stomp import StompCollector

if TYPE_CHECKING:
    from ..broker.broker import Broker
    from ..served.server import ServedBroker

__all__ = ["registry_for", "render"]


def registry_for(broker: "Broker", server: "ServedBroker | None" = None) -> CollectorRegistry:
    """A new registry holding every collector of ``broker`` and, when it is served over STOMP, of
    ``server`` (without one the STOMP metrics are absent, not zero: nothing serves STOMP). A registry
    of its own, not prometheus_client's global one, so that two brokers in one process (a test, a
    backup beside its live broker) never collide on metric names, and the process's own default
    collectors (CPU, memory) stay the embedder's choice."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(broker))
    registry.register(JournalCollector(broker))
    if server is not None:
        registry.register(StompCollector(server))
    return registry


def render(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The Prometheus text exposition of ``registry`` and its HTTP content type: what ``/metrics``
    answers. Collecting reads the broker under its lock, so call it off the event loop's hot turn
    when the broker is busy; it takes a few milliseconds for a few hundred queues."""
    return generate_latest(registry), CONTENT_TYPE_LATEST
