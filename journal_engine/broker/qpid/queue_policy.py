"""Qpid Broker-J's undeliverable-message rules for a queue: its maximum delivery count and its DLQ.

Declared with the queue (``broker.create_queue(name, arguments={...})``), as Qpid's queue-declare
arguments name them:

* ``x-qpid-maximum-delivery-count`` (an int >= 0; 0 = no maximum): a message rolled back (a session
  rollback or recover, a consumer's rollback) whose delivery count reached the maximum is taken off the
  queue (Qpid's ``isMaxDeliveryLimitReached``: count >= maximum);
* ``x-qpid-dlq-enabled`` (a bool): such a message goes to the queue's dead-letter exchange
  ``<queue>_DLE``, bound to the dead-letter queue ``<queue>_DLQ`` (both created with the queue); without
  a DLQ it is discarded (logged at WARNING).

A consumer that goes away (close) returns its messages uncounted and they are never dead-lettered for
it (Qpid decrements the count of messages released by a closing session). Unlike Qpid, whose clients
cannot read the delivery count (no JMSXDeliveryCount), consumers here see ``delivery_count``.
Why a module of its own: Qpid's rule is a property of the queue, checked where a failed delivery is
taken back (``redelivery``), with its own names and arguments.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ...limits import JAVA_INT_MAX
from ...errors import ConfigError

__all__ = ["QpidQueuePolicy", "MAXIMUM_DELIVERY_COUNT_ARGUMENT", "DLQ_ENABLED_ARGUMENT", "dead_letter_exchange_name",
           "dead_letter_queue_name"]

MAXIMUM_DELIVERY_COUNT_ARGUMENT = "x-qpid-maximum-delivery-count"
DLQ_ENABLED_ARGUMENT = "x-qpid-dlq-enabled"


def dead_letter_exchange_name(queue: str) -> str:
    """Qpid's dead-letter exchange of a queue: ``<queue>_DLE``."""
    return f"{queue}_DLE"


def dead_letter_queue_name(queue: str) -> str:
    """Qpid's dead-letter queue of a queue: ``<queue>_DLQ``."""
    return f"{queue}_DLQ"


@dataclass(frozen=True)
class QpidQueuePolicy:
    """A queue's maximum delivery count (0: none) and whether it has a DLQ."""

    maximum_delivery_count: int = 0
    dlq_enabled: bool = False

    @classmethod
    def from_arguments(cls, arguments: Mapping) -> "QpidQueuePolicy":
        """The policy of queue-declare ``arguments``. ConfigError names an unknown argument or a bad value
        (ints and bools may also come as strings, as AMQP clients often send them)."""
        maximum = 0
        dlq = False
        for key, value in arguments.items():
            if key == MAXIMUM_DELIVERY_COUNT_ARGUMENT:
                maximum = _int_argument(key, value)
            elif key == DLQ_ENABLED_ARGUMENT:
                dlq = _bool_argument(key, value)
            else:
                raise ConfigError("arguments", key, "is not a queue argument journal_engine implements",
                                  hint=f"use {MAXIMUM_DELIVERY_COUNT_ARGUMENT} and {DLQ_ENABLED_ARGUMENT}")
        return cls(maximum, dlq)

    def reached(self, delivery_count: int) -> bool:
        """Has a message delivered ``delivery_count`` times reached the maximum?"""
        return self.maximum_delivery_count > 0 and delivery_count >= self.maximum_delivery_count


def _int_argument(key: str, value: object) -> int:
    if isinstance(value, str) and value.strip().lstrip("+").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= JAVA_INT_MAX:
        raise ConfigError(key, value, f"must be an int in [0, {JAVA_INT_MAX}] (0: no maximum)")
    return value


def _bool_argument(key: str, value: object) -> bool:
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise ConfigError(key, value, "must be True or False")
    return value
