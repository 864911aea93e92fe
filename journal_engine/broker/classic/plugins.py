"""ActiveMQ Classic's two broker plugins of the dead-letter path: the discarding-DLQ plugin and the
broker-side redelivery plugin (their configuration and their decisions; the Classic dead-letter path in
``classic`` acts on them).

Discarding-DLQ plugin (DiscardingDLQBroker): a message on its way to a DLQ is dropped when ``drop_all``
(the default: true, so ``drop_only`` counts only with ``drop_all=False``), when its destination is a
temporary topic or queue and ``drop_temporary_topics`` / ``drop_temporary_queues`` (defaults true), or
when one of the ``drop_only`` regular expressions matches the destination's whole name. Every
``report_interval`` drops (default 1000, 0 = never) an INFO line says how many so far.

Redelivery plugin (RedeliveryPlugin): a poison ack does not dead-letter the message at once; the policy
of its destination (a ``ClassicDestinationMap`` of ClassicRedeliveryPolicy, else ``default_entry``)
schedules it again, through the scheduler, so any consumer can take it: while the message's redelivery
counter (its previous redeliveries) is below ``maximum_redeliveries`` (or that is -1) the delay is
``initial_redelivery_delay`` followed by ``next_redelivery_delay`` once per earlier redelivery (the
counter, not the delay recorded last: they differ when disconnects raised the counter), the delay
recorded on the message as ``redeliveryDelay`` (a policy's ``redelivery_delays``, the
journal_engine extension, gives the first delays explicitly). Past the maximum the message is dead-lettered
(``send_to_dlq_if_max_retries_exceeded``, default true) or dropped. A destination without a policy is
dead-lettered (``fallback_to_dead_letter``, default true) or dropped. An expired message goes the usual
dead-letter way.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from ...limits import JAVA_INT_MAX
from ...errors import ConfigError
from .destinations import ClassicDestination, ClassicDestinationMap
from .policy import ClassicRedeliveryPolicy

__all__ = ["DiscardingDLQPlugin", "RedeliveryPlugin", "REDELIVERY_DELAY_PROPERTY", "compile_drop_only"]

#: the property the redelivery plugin records its delay in (RedeliveryPlugin.REDELIVERY_DELAY)
REDELIVERY_DELAY_PROPERTY = "redeliveryDelay"


def compile_drop_only(text: str, label: str = "dropOnly") -> tuple[re.Pattern, ...]:
    """``dropOnly``: regular expressions separated by spaces. ConfigError names one that does not compile."""
    patterns = []
    for word in text.split(" "):
        if not word:
            continue
        try:
            patterns.append(re.compile(word))
        except re.error as exc:
            raise ConfigError(label, word, f"is not a regular expression: {exc}") from None
    return tuple(patterns)


@dataclass
class DiscardingDLQPlugin:
    """The discarding-DLQ plugin (see the module docstring); counts its drops."""

    drop_all: bool = True
    drop_temporary_topics: bool = True
    drop_temporary_queues: bool = True
    drop_only: tuple[re.Pattern, ...] = ()
    report_interval: int = 1000
    dropped: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        for name in ("drop_all", "drop_temporary_topics", "drop_temporary_queues"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, getattr(self, name), "must be True or False")
        if isinstance(self.drop_only, str):
            self.drop_only = compile_drop_only(self.drop_only, "drop_only")
        if isinstance(self.report_interval, bool) or not isinstance(self.report_interval, int) or \
                not 0 <= self.report_interval <= JAVA_INT_MAX:
            raise ConfigError("report_interval", self.report_interval, "must be an int >= 0 (0: never report)")

    def drop_reason(self, destination: ClassicDestination) -> str | None:
        """Why a message of ``destination`` on its way to a DLQ is dropped, or None to let it go on."""
        if self.drop_all:
            return "dropAll"
        if destination.is_temporary:
            if self.drop_temporary_topics and not destination.is_queue:
                return "dropTemporaryTopics"
            if self.drop_temporary_queues and destination.is_queue:
                return "dropTemporaryQueues"
        if any(pattern.fullmatch(destination.name) for pattern in self.drop_only):
            return "dropOnly"
        return None

    def count_drop(self, logger: logging.Logger) -> None:
        """One more drop; every ``report_interval`` drops an INFO line with the total."""
        self.dropped += 1
        if self.report_interval > 0 and self.dropped % self.report_interval == 0:
            logger.info("Total of %d messages were discarded, since their destination was the dead letter queue",
                        self.dropped)


@dataclass
class RedeliveryPlugin:
    """The broker redelivery plugin (see the module docstring)."""

    policies: ClassicDestinationMap = field(default_factory=ClassicDestinationMap)
    default_entry: ClassicRedeliveryPolicy | None = None
    fallback_to_dead_letter: bool = True
    send_to_dlq_if_max_retries_exceeded: bool = True

    def __post_init__(self) -> None:
        for name in ("fallback_to_dead_letter", "send_to_dlq_if_max_retries_exceeded"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, getattr(self, name), "must be True or False")

    def policy_for(self, destination: ClassicDestination) -> ClassicRedeliveryPolicy | None:
        """The matching entry's policy, else the default entry, else None."""
        policy = self.policies.get(destination)
        return policy if policy is not None else self.default_entry

    def delay_for(self, policy: ClassicRedeliveryPolicy, redelivery_counter: int, rng) -> int | None:
        """The delay of the next redelivery of a message redelivered ``redelivery_counter`` times so far
        (disconnects included), or None when the maximum is reached. As RedeliveryPlugin computes it,
        from the counter alone: ``initial_redelivery_delay``, then ``next_redelivery_delay`` once per
        earlier redelivery (no delay recorded on the message is read)."""
        maximum = policy.maximum_redeliveries
        if maximum != -1 and redelivery_counter >= maximum:
            return None
        return policy.redelivery_delay_for(redelivery_counter + 1, rng)
