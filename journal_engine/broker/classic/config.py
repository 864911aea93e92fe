"""``ClassicBrokerConfig``: what an ActiveMQ Classic activemq.xml tells the broker, as objects.

The destination policies (``<destinationPolicy>``: per queue or topic pattern, the dead-letter
strategy; a default entry), the redelivery plugin, the discarding-DLQ plugin and ``schedulerSupport``.
Build one in code or read it from activemq.xml (``config.classic``); ``Broker(config=...)`` then runs with
Classic's dead-letter rules (``classic``). Why a module of its own: the reader builds it and the
Classic dead-letter path reads it; neither imports the other.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import ConfigError
from .destinations import ClassicDestination, ClassicDestinationMap
from .plugins import DiscardingDLQPlugin, RedeliveryPlugin
from .dead_letter_strategy import DeadLetterStrategy, SharedDeadLetterStrategy

__all__ = ["ClassicBrokerConfig"]


@dataclass
class ClassicBrokerConfig:
    """Classic's dead-letter configuration.

    ``strategies``: a ClassicDestinationMap of DeadLetterStrategy (policy entries that set one);
    ``default_strategy``: the default policy entry's strategy, else a shared strategy (``ActiveMQ.DLQ``),
    as Classic uses when no entry sets one. ``redelivery_plugin`` needs ``scheduler_support``
    (ConfigError otherwise, as Classic refuses to start).
    """

    strategies: ClassicDestinationMap = field(default_factory=ClassicDestinationMap)
    default_strategy: DeadLetterStrategy = field(default_factory=SharedDeadLetterStrategy)
    redelivery_plugin: RedeliveryPlugin | None = None
    discarding_plugin: DiscardingDLQPlugin | None = None
    scheduler_support: bool = False
    source: str = "activemq.xml"

    def __post_init__(self) -> None:
        if self.redelivery_plugin is not None and not self.scheduler_support:
            raise ConfigError("schedulerSupport", self.scheduler_support,
                              "the redeliveryPlugin needs the broker's scheduler",
                              hint='set <broker schedulerSupport="true">')

    def strategy_for(self, destination: ClassicDestination) -> DeadLetterStrategy:
        """The dead-letter strategy of the policy entry that applies to ``destination``."""
        strategy = self.strategies.get(destination)
        return strategy if strategy is not None else self.default_strategy
