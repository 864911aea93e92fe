"""ActiveMQ Classic's dead-letter strategies: which messages go to a DLQ, and which DLQ.

Read from Classic's source (AbstractDeadLetterStrategy, SharedDeadLetterStrategy,
IndividualDeadLetterStrategy, DiscardingDeadLetterStrategy, ActiveMQMessageAudit) and checked
against what a real Classic 5.17.2 broker did:

* every strategy decides first whether a message goes to a DLQ at all (``accepts``): not when its
  audit has seen the message before (``enable_audit``, default on: a message already dead-lettered
  that fails again on its DLQ is discarded), not when it is non-persistent unless
  ``process_non_persistent`` (default off), not when it expired unless ``process_expired`` (default on);
* shared (the default): one queue, ``ActiveMQ.DLQ``;
* individual: ``queue_prefix`` (default ``ActiveMQ.DLQ.Queue.``) or ``topic_prefix`` (default
  ``ActiveMQ.DLQ.Topic.``) + the destination's name + the suffix; a queue unless
  ``use_queue_for_queue_messages`` / ``use_queue_for_topic_messages`` say otherwise (then a topic); with
  ``destination_per_durable_subscriber`` a durable topic subscription gets its own,
  ``<prefix><topic>.<subscription><suffix>`` (Classic's key is ``clientId:subscriptionName``; here the
  subscription is its queue's name); its audit is kept per original destination;
* discarding: no message goes to a DLQ;
* ``expiration`` (ms, default 0 = never): the dead-letter copy expires that long after it was made.

The audit is Classic's ActiveMQMessageAudit, the producer audit's own (producer_audit.DestinationAudit:
per producer a BitArrayBin window of ``max_audit_depth`` sequence numbers in whole 64-bit words, an older
one not remembered; at most ``max_producers_to_audit`` producers, the least recently seen forgotten
first). A message is keyed by its Classic MessageId when it carries one (``JMSMessageID``: its producer
and sequence, which a dead-letter copy keeps); otherwise its producer is its original destination and
its sequence its message id (a dead-letter copy keeps both: its ``originalDestination`` names the
producer's destination). Why a module of its own: the strategies are configuration (activemq.xml's
``<deadLetterStrategy>``) with a little state (the audits), used by the Classic dead-letter path.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable
from dataclasses import dataclass, field

from ...limits import JAVA_INT_MAX
from ...errors import ConfigError
from .destinations import QUEUE, TOPIC, ClassicDestination
from .producer_audit import DestinationAudit

__all__ = ["DeadLetterStrategy", "SharedDeadLetterStrategy", "IndividualDeadLetterStrategy",
           "DiscardingDeadLetterStrategy", "SHARED_DLQ_NAME", "AUDIT_DEPTH_DEFAULT", "AUDIT_PRODUCERS_DEFAULT"]

#: SharedDeadLetterStrategy.DEFAULT_DEAD_LETTER_QUEUE_NAME
SHARED_DLQ_NAME = "ActiveMQ.DLQ"
#: ActiveMQMessageAudit.DEFAULT_WINDOW_SIZE and MAXIMUM_PRODUCER_COUNT
AUDIT_DEPTH_DEFAULT = 2048
AUDIT_PRODUCERS_DEFAULT = 64


@dataclass
class DeadLetterStrategy(ABC):
    """What every Classic strategy shares (AbstractDeadLetterStrategy); see the module docstring."""

    process_expired: bool = True
    process_non_persistent: bool = False
    expiration: int = 0
    enable_audit: bool = True
    max_audit_depth: int = AUDIT_DEPTH_DEFAULT
    max_producers_to_audit: int = AUDIT_PRODUCERS_DEFAULT
    _audits: dict[str, DestinationAudit] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("process_expired", "process_non_persistent", "enable_audit"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, getattr(self, name), "must be True or False")
        if isinstance(self.expiration, bool) or not isinstance(self.expiration, int) or self.expiration < 0:
            raise ConfigError("expiration", self.expiration, "must be milliseconds, an int >= 0 (0: never)")
        for name in ("max_audit_depth", "max_producers_to_audit"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= JAVA_INT_MAX:
                raise ConfigError(name, value, f"must be an int in [1, {JAVA_INT_MAX}]")

    def accepts(self, origin: ClassicDestination, producer: Hashable, message_id: int, *, persistent: bool,
                expired: bool) -> str | None:
        """None when a message failing on ``origin`` goes to a DLQ, else why not (isSendToDeadLetterQueue).
        The audit remembers (``producer``, ``message_id``: its sequence) either way, as Classic's does."""
        reason = None
        if self.enable_audit and self._audit_for(origin).is_duplicate(producer, message_id):
            reason = "a duplicate the dead-letter audit has seen (already dead-lettered)"
        if not persistent and not self.process_non_persistent:
            reason = "non-persistent (processNonPersistent is false)"
        if expired and not self.process_expired:
            reason = "expired (processExpired is false)"
        return reason

    @abstractmethod
    def dead_letter_queue_for(self, origin: ClassicDestination,
                              subscription: str | None = None) -> ClassicDestination | None:
        """The DLQ of a message that failed on ``origin`` (``subscription``: the durable topic subscription
        it failed on, if any); None: discard."""

    def _audit_for(self, origin: ClassicDestination) -> DestinationAudit:
        """The strategy's one audit (the individual strategy keeps one per destination)."""
        audit = self._audits.get("")
        if audit is None:
            audit = self._audits[""] = DestinationAudit(self.max_audit_depth, self.max_producers_to_audit)
        return audit


@dataclass
class SharedDeadLetterStrategy(DeadLetterStrategy):
    """Every failure to one queue, ``ActiveMQ.DLQ`` unless ``dead_letter_queue`` names another."""

    dead_letter_queue: str = SHARED_DLQ_NAME

    def dead_letter_queue_for(self, origin: ClassicDestination,
                              subscription: str | None = None) -> ClassicDestination:
        return ClassicDestination(QUEUE, self.dead_letter_queue)


@dataclass
class IndividualDeadLetterStrategy(DeadLetterStrategy):
    """A DLQ per destination: prefix + name + suffix, a queue or a topic (see the module docstring)."""

    queue_prefix: str = "ActiveMQ.DLQ.Queue."
    topic_prefix: str = "ActiveMQ.DLQ.Topic."
    queue_suffix: str = ""
    topic_suffix: str = ""
    use_queue_for_queue_messages: bool = True
    use_queue_for_topic_messages: bool = True
    destination_per_durable_subscriber: bool = False

    def dead_letter_queue_for(self, origin: ClassicDestination,
                              subscription: str | None = None) -> ClassicDestination:
        if origin.is_queue:
            name = self.queue_prefix + origin.name + self.queue_suffix
            return ClassicDestination(QUEUE if self.use_queue_for_queue_messages else TOPIC, name)
        name = self.topic_prefix + origin.name
        if self.destination_per_durable_subscriber and subscription is not None:
            name += "." + subscription
        return ClassicDestination(QUEUE if self.use_queue_for_topic_messages else TOPIC, name + self.topic_suffix)

    def _audit_for(self, origin: ClassicDestination) -> DestinationAudit:
        audit = self._audits.get(origin.qualified_name)
        if audit is None:
            audit = self._audits[origin.qualified_name] = DestinationAudit(self.max_audit_depth,
                                                                            self.max_producers_to_audit)
        return audit


@dataclass
class DiscardingDeadLetterStrategy(DeadLetterStrategy):
    """No DLQ: every message that would go to one is discarded."""

    def accepts(self, origin: ClassicDestination, producer: Hashable, message_id: int, *, persistent: bool,
                expired: bool) -> str | None:
        return "the discarding dead-letter strategy"

    def dead_letter_queue_for(self, origin: ClassicDestination, subscription: str | None = None) -> None:
        return None
