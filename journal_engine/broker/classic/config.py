"""``ClassicBrokerConfig``: what an ActiveMQ Classic activemq.xml tells the broker, as objects.

The destination policies (``<destinationPolicy>``: per queue or topic pattern, the dead-letter
strategy, the expiry scan's period and whether messages are delivered by priority; a default entry), the redelivery plugin, the discarding-DLQ plugin and ``schedulerSupport``.
Build one in code or read it from activemq.xml (``config.classic``); ``Broker(config=...)`` then runs with
Classic's dead-letter rules (``classic``). Why a module of its own: the reader builds it and the
Classic dead-letter path reads it; neither imports the other.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import ConfigError
from ...limits import JAVA_LONG_MAX, JAVA_LONG_MIN
from ..timers import SCAN_PERIOD_MS_DEFAULT
from .destinations import ClassicDestination, ClassicDestinationMap
from .plugins import DiscardingDLQPlugin, RedeliveryPlugin
from .producer_audit import AuditPolicy
from .dead_letter_strategy import DeadLetterStrategy, SharedDeadLetterStrategy

__all__ = ["ClassicBrokerConfig", "EXPIRE_MESSAGES_PERIOD_MS_DEFAULT"]

#: BaseDestination.EXPIRE_MESSAGE_PERIOD: a policy entry's expireMessagesPeriod when it sets none (ms), the
#: 30 s of Artemis's scans
EXPIRE_MESSAGES_PERIOD_MS_DEFAULT = SCAN_PERIOD_MS_DEFAULT


@dataclass
class ClassicBrokerConfig:
    """Classic's dead-letter configuration.

    ``strategies``: a ClassicDestinationMap of DeadLetterStrategy (policy entries that set one);
    ``default_strategy``: the default policy entry's strategy, else a shared strategy (``ActiveMQ.DLQ``),
    as Classic uses when no entry sets one. ``expire_messages_periods``: a ClassicDestinationMap of every
    policy entry's ``expireMessagesPeriod`` (ms; its default when the entry sets none), and
    ``default_expire_messages_period`` the default entry's: how often a destination is scanned for
    expired messages (<= 0: never). ``prioritized_messages`` (a ClassicDestinationMap of each policy
    entry's ``prioritizedMessages``) and ``default_prioritized_messages``: whether a destination delivers
    its highest priority first (else FIFO, Classic's default). ``audits`` (a ClassicDestinationMap of
    every policy entry's AuditPolicy: ``enableAudit``, ``maxAuditDepth``, ``maxQueueAuditDepth``,
    ``maxProducersToAudit``) and ``default_audit`` (the default entry's; None without a default entry): the
    producer audit (producer_audit.py). ``redelivery_plugin`` needs ``scheduler_support`` (ConfigError
    otherwise, as Classic refuses to start).
    """

    strategies: ClassicDestinationMap = field(default_factory=ClassicDestinationMap)
    default_strategy: DeadLetterStrategy = field(default_factory=SharedDeadLetterStrategy)
    redelivery_plugin: RedeliveryPlugin | None = None
    discarding_plugin: DiscardingDLQPlugin | None = None
    scheduler_support: bool = False
    source: str = "activemq.xml"
    expire_messages_periods: ClassicDestinationMap = field(default_factory=ClassicDestinationMap)
    default_expire_messages_period: int = EXPIRE_MESSAGES_PERIOD_MS_DEFAULT
    prioritized_messages: ClassicDestinationMap = field(default_factory=ClassicDestinationMap)
    default_prioritized_messages: bool = False
    audits: ClassicDestinationMap = field(default_factory=ClassicDestinationMap)
    default_audit: AuditPolicy | None = None

    def __post_init__(self) -> None:
        for period in (self.default_expire_messages_period, *self.expire_messages_periods.values()):
            if isinstance(period, bool) or not isinstance(period, int) or not JAVA_LONG_MIN <= period <= JAVA_LONG_MAX:
                raise ConfigError("expireMessagesPeriod", period, "must be an integer (ms; 0 or less: never scanned)")
        if self.redelivery_plugin is not None and not self.scheduler_support:
            raise ConfigError("schedulerSupport", self.scheduler_support,
                              "the redeliveryPlugin needs the broker's scheduler",
                              hint='set <broker schedulerSupport="true">')

    def expire_messages_period_for(self, destination: ClassicDestination) -> int:
        """How often ``destination`` is scanned for expired messages (ms; <= 0: never): its policy entry's
        ``expireMessagesPeriod``, as PolicyMap.getEntryFor picks the entry (the default entry when none
        matches)."""
        period = self.expire_messages_periods.get(destination)
        return period if period is not None else self.default_expire_messages_period

    def prioritized_messages_for(self, destination: ClassicDestination) -> bool:
        """Whether ``destination`` orders its messages by priority: its policy entry's
        ``prioritizedMessages`` (PolicyEntry's default false), the entry picked as PolicyMap.getEntryFor does."""
        prioritized = self.prioritized_messages.get(destination)
        return prioritized if prioritized is not None else self.default_prioritized_messages

    def audit_entry_for(self, destination: ClassicDestination) -> AuditPolicy | None:
        """The audit attributes of the policy entry that applies to ``destination`` (the default entry when
        none matches), or None when no entry applies (the destination keeps its own defaults)."""
        entry = self.audits.get(destination)
        return entry if entry is not None else self.default_audit

    def strategy_for(self, destination: ClassicDestination) -> DeadLetterStrategy:
        """The dead-letter strategy of the policy entry that applies to ``destination``."""
        strategy = self.strategies.get(destination)
        return strategy if strategy is not None else self.default_strategy
