"""Qpid Broker-J's undeliverable-message rules for a queue: its maximum delivery count, where a message
goes past it (a DLQ or any alternate destination), and what happens to an expired message.

Declared with the queue (``broker.create_queue(name, arguments={...})``) as Qpid's queue-declare
arguments name them: the wire names of the seed's chapter, and the names of Broker-J's own queue
attributes (QueueArgumentsConverter.convertWireArgsToModel accepts both; a wire name outranks the
attribute it maps to):

* ``x-qpid-maximum-delivery-count`` or ``maximumDeliveryAttempts`` (an int >= 0; 0 = no maximum): a
  message rolled back (a session rollback or recover, a consumer's rollback) whose delivery count
  reached the maximum is taken off the queue (Qpid's ``isMaxDeliveryLimitReached``: count >= maximum);
* ``alternateBinding`` (``{"destination": name}``, or its JSON text) or the wire ``alternateExchange``
  (a name): such a message is routed to that destination (an address: every queue bound to it), keeping
  its id; a destination without queues loses it;
* ``x-qpid-dlq-enabled`` (a bool): without an alternate, the queue's dead-letter exchange ``<queue>_DLE``
  bound to the dead-letter queue ``<queue>_DLQ`` (both created with the queue) is the alternate (the
  seed's Broker-J 6.1 names; with an alternate given no DLQ is made, as 6.1's shouldCreateDLQ);
  without any alternate the message is discarded (logged at WARNING);
* ``expiryPolicy``: ``DELETE`` (the default) or ``ROUTE_TO_ALTERNATE`` (AbstractQueue.expireEntry: an
  expired message goes to the alternate, deleted when there is none);
* ``x-qpid-priorities`` or ``priorities`` (an int from 1 to QPID_PRIORITIES_MAX): a priority queue of
  that many levels (Broker-J's PriorityQueue; 0-9 mapped onto them as broker/priority.py says); a queue
  declared without it is FIFO, as Broker-J's standard queue.

The virtual host's defaults are Broker-J's context variables (``QpidVirtualHostContext``):
``queue.deadLetterQueueEnabled`` (6.1: every declared queue gets a DLQ unless its arguments say
otherwise), ``queue.maximumDeliveryAttempts`` and ``queue.defaultExpiryPolicy``.

A consumer that goes away (close) returns its messages uncounted and they are never dead-lettered for
it (Qpid decrements the count of messages released by a closing session). Unlike Qpid, whose clients
cannot read the delivery count (no JMSXDeliveryCount), consumers here see ``delivery_count``.
Why a module of its own: Qpid's rule is a property of the queue, checked where a failed delivery is
taken back (``redelivery``) and where a message expires (``dead_letter``), with its own names and arguments.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from ...limits import JAVA_INT_MAX, QPID_PRIORITIES_MAX
from ...errors import ConfigError

__all__ = ["QpidQueuePolicy", "QpidVirtualHostContext", "MAXIMUM_DELIVERY_COUNT_ARGUMENT", "DLQ_ENABLED_ARGUMENT",
           "MAXIMUM_DELIVERY_ATTEMPTS_ATTRIBUTE", "ALTERNATE_BINDING_ATTRIBUTE", "ALTERNATE_EXCHANGE_ARGUMENT",
           "EXPIRY_POLICY_ATTRIBUTE", "EXPIRY_POLICIES", "PRIORITIES_ARGUMENT", "PRIORITIES_ATTRIBUTE", "dead_letter_exchange_name", "dead_letter_queue_name",
           "storable_arguments", "CONTEXT_VARIABLES"]

MAXIMUM_DELIVERY_COUNT_ARGUMENT = "x-qpid-maximum-delivery-count"
DLQ_ENABLED_ARGUMENT = "x-qpid-dlq-enabled"
ALTERNATE_EXCHANGE_ARGUMENT = "alternateExchange"
MAXIMUM_DELIVERY_ATTEMPTS_ATTRIBUTE = "maximumDeliveryAttempts"
ALTERNATE_BINDING_ATTRIBUTE = "alternateBinding"
EXPIRY_POLICY_ATTRIBUTE = "expiryPolicy"
PRIORITIES_ARGUMENT = "x-qpid-priorities"
PRIORITIES_ATTRIBUTE = "priorities"
#: Queue.ExpiryPolicy, the first the default
EXPIRY_POLICIES = ("DELETE", "ROUTE_TO_ALTERNATE")
_ARGUMENTS = (MAXIMUM_DELIVERY_COUNT_ARGUMENT, DLQ_ENABLED_ARGUMENT, ALTERNATE_EXCHANGE_ARGUMENT,
              MAXIMUM_DELIVERY_ATTEMPTS_ATTRIBUTE, ALTERNATE_BINDING_ATTRIBUTE, EXPIRY_POLICY_ATTRIBUTE,
              PRIORITIES_ARGUMENT, PRIORITIES_ATTRIBUTE)
_BINDING_KEYS = ("destination", "attributes")
#: the virtual host's context variables that set its queues' defaults (QpidVirtualHostContext)
DLQ_ENABLED_VARIABLE = "queue.deadLetterQueueEnabled"
MAXIMUM_DELIVERY_ATTEMPTS_VARIABLE = "queue.maximumDeliveryAttempts"
DEFAULT_EXPIRY_POLICY_VARIABLE = "queue.defaultExpiryPolicy"
CONTEXT_VARIABLES = (DLQ_ENABLED_VARIABLE, MAXIMUM_DELIVERY_ATTEMPTS_VARIABLE, DEFAULT_EXPIRY_POLICY_VARIABLE)


def dead_letter_exchange_name(queue: str) -> str:
    """Qpid's dead-letter exchange of a queue: ``<queue>_DLE``."""
    return f"{queue}_DLE"


def dead_letter_queue_name(queue: str) -> str:
    """Qpid's dead-letter queue of a queue: ``<queue>_DLQ``."""
    return f"{queue}_DLQ"


@dataclass(frozen=True)
class QpidVirtualHostContext:
    """The virtual host's defaults for the queues declared on it, as Broker-J's context variables name
    them (values may be strings, as context variables are): ``queue.deadLetterQueueEnabled`` (default
    false), ``queue.maximumDeliveryAttempts`` (0), ``queue.defaultExpiryPolicy`` (``DELETE``)."""

    dead_letter_queue_enabled: bool = False
    maximum_delivery_attempts: int = 0
    expiry_policy: str = EXPIRY_POLICIES[0]

    @classmethod
    def from_variables(cls, variables: Mapping) -> "QpidVirtualHostContext":
        """The context of ``variables``; ConfigError names an unknown variable or a bad value."""
        if not isinstance(variables, Mapping):
            raise TypeError(f"qpid_context must be a mapping, not {type(variables).__name__}")
        dlq, maximum, expiry = False, 0, EXPIRY_POLICIES[0]
        for key, value in variables.items():
            if key == DLQ_ENABLED_VARIABLE:
                dlq = _bool_argument(key, value)
            elif key == MAXIMUM_DELIVERY_ATTEMPTS_VARIABLE:
                maximum = _int_argument(key, value)
            elif key == DEFAULT_EXPIRY_POLICY_VARIABLE:
                expiry = _expiry_policy(key, value)
            else:
                raise ConfigError("qpid_context", key, "is not a context variable journal_engine implements",
                                  hint="use " + ", ".join(CONTEXT_VARIABLES))
        return cls(dlq, maximum, expiry)


@dataclass(frozen=True)
class QpidQueuePolicy:
    """A queue's maximum delivery count (0: none), whether it has a DLQ (``<queue>_DLE``/``_DLQ``), its
    alternate destination (None: none given), its expiry policy and its priority levels (0: FIFO)."""

    maximum_delivery_count: int = 0
    dlq_enabled: bool = False
    alternate: str | None = None
    expiry_policy: str = EXPIRY_POLICIES[0]
    priorities: int = 0

    @classmethod
    def from_arguments(cls, arguments: Mapping,
                       context: QpidVirtualHostContext | None = None) -> "QpidQueuePolicy":
        """The policy of queue-declare ``arguments``, the virtual host's ``context`` filling in what they
        do not say. ConfigError names an unknown argument or a bad value (ints and bools may also come
        as strings, as AMQP clients often send them; a binding as its JSON text)."""
        context = context or QpidVirtualHostContext()
        unknown = [key for key in arguments if key not in _ARGUMENTS]
        if unknown:
            raise ConfigError("arguments", unknown[0], "is not a queue argument journal_engine implements",
                              hint="use " + ", ".join(_ARGUMENTS))
        maximum = context.maximum_delivery_attempts
        if MAXIMUM_DELIVERY_ATTEMPTS_ATTRIBUTE in arguments:
            maximum = _int_argument(MAXIMUM_DELIVERY_ATTEMPTS_ATTRIBUTE, arguments[MAXIMUM_DELIVERY_ATTEMPTS_ATTRIBUTE])
        if MAXIMUM_DELIVERY_COUNT_ARGUMENT in arguments:    # the wire name outranks the attribute
            maximum = _int_argument(MAXIMUM_DELIVERY_COUNT_ARGUMENT, arguments[MAXIMUM_DELIVERY_COUNT_ARGUMENT])
        alternate = None
        if ALTERNATE_BINDING_ATTRIBUTE in arguments:
            alternate = _binding_destination(arguments[ALTERNATE_BINDING_ATTRIBUTE])
        if ALTERNATE_EXCHANGE_ARGUMENT in arguments:
            alternate = _name_argument(ALTERNATE_EXCHANGE_ARGUMENT, arguments[ALTERNATE_EXCHANGE_ARGUMENT])
        dlq = context.dead_letter_queue_enabled
        if DLQ_ENABLED_ARGUMENT in arguments:
            dlq = _bool_argument(DLQ_ENABLED_ARGUMENT, arguments[DLQ_ENABLED_ARGUMENT])
        expiry = context.expiry_policy
        if EXPIRY_POLICY_ATTRIBUTE in arguments:
            expiry = _expiry_policy(EXPIRY_POLICY_ATTRIBUTE, arguments[EXPIRY_POLICY_ATTRIBUTE])
        priorities = 0
        if PRIORITIES_ATTRIBUTE in arguments:
            priorities = _priorities(PRIORITIES_ATTRIBUTE, arguments[PRIORITIES_ATTRIBUTE])
        if PRIORITIES_ARGUMENT in arguments:        # the wire name outranks the attribute
            priorities = _priorities(PRIORITIES_ARGUMENT, arguments[PRIORITIES_ARGUMENT])
        return cls(maximum, dlq and alternate is None, alternate, expiry, priorities)

    def reached(self, delivery_count: int) -> bool:
        """Has a message delivered ``delivery_count`` times reached the maximum?"""
        return self.maximum_delivery_count > 0 and delivery_count >= self.maximum_delivery_count

    def alternate_of(self, queue: str) -> str | None:
        """Where a message that leaves ``queue`` undelivered goes: the alternate given, else its DLE when
        the DLQ is enabled, else None (discarded)."""
        if self.alternate is not None:
            return self.alternate
        return dead_letter_exchange_name(queue) if self.dlq_enabled else None

    @property
    def routes_expired_to_alternate(self) -> bool:
        return self.expiry_policy == "ROUTE_TO_ALTERNATE"


def storable_arguments(arguments: Mapping) -> dict:
    """``arguments`` as the store keeps them (plain values: a binding map as its JSON text)."""
    return {key: json.dumps(dict(value), sort_keys=True) if isinstance(value, Mapping) else value
            for key, value in arguments.items()}


def _binding_destination(value: object) -> str:
    """An AlternateBinding's destination, from its map or the map's JSON text."""
    key = ALTERNATE_BINDING_ATTRIBUTE
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ConfigError(key, value, f"is not a JSON object: {exc}") from None
    if not isinstance(value, Mapping):
        raise ConfigError(key, value, 'must be a map {"destination": name} (or its JSON text)')
    extra = [k for k in value if k not in _BINDING_KEYS]
    if extra:
        raise ConfigError(key, value, f"has {extra[0]!r}; an alternate binding has only 'destination' and 'attributes'")
    if value.get("attributes"):
        raise ConfigError(key, value, "binding attributes are not implemented by journal_engine")
    destination = value.get("destination")
    if not isinstance(destination, str) or not destination:
        raise ConfigError(key, value, "needs a non-empty 'destination' (a queue or an exchange)")
    return destination


def _name_argument(key: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(key, value, "must be a non-empty name (a queue or an exchange)")
    return value


def _expiry_policy(key: str, value: object) -> str:
    if value not in EXPIRY_POLICIES:
        raise ConfigError(key, value, f"must be one of {', '.join(EXPIRY_POLICIES)}")
    return value


def _priorities(key: str, value: object) -> int:
    priorities = _int_argument(key, value)
    if not 1 <= priorities <= QPID_PRIORITIES_MAX:
        raise ConfigError(key, value, f"must be from 1 to {QPID_PRIORITIES_MAX} priority levels")
    return priorities


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
