"""Dead-letter and expiry copies: the property names of each dialect, the copy, the auto-created queues.

Artemis (QueueImpl.makeCopy + Message.referenceOriginalMessage) copies an undeliverable message with a
new id to the dead-letter (or expiry) address and records where it came from:

* ``_AMQ_ORIG_QUEUE``: the queue it failed on;
* ``_AMQ_ORIG_ADDRESS``: the original message's address;
* ``_AMQ_ORIG_MESSAGE_ID``: the original id, an integer (Artemis stores a Long);
* ``_AMQ_ORIG_ROUTING_TYPE``: the original routing type as Artemis's byte (MULTICAST 0, ANYCAST 1),
  only when the original had one;
* ``_AMQ_ACTUAL_EXPIRY``: on expiry copies, the time it expired (epoch ms).

The copy's expiration is reset to 0. Its routing type is the one recorded in the ORIGINAL's
``_AMQ_ORIG_ROUTING_TYPE`` when the original was itself such a copy (Artemis's move()), else none.
HornetQ, Artemis's ancestor, names the same properties ``_HQ_ORIG_ADDRESS``, ``_HQ_ORIG_QUEUE``,
``_HQ_ORIG_MESSAGE_ID`` and ``_HQ_ACTUAL_EXPIRY`` and has no routing types.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from .message import MessageData

__all__ = ["Dialect", "DIALECTS", "ROUTING_TYPE_CODES", "make_copy", "resource_queue_name", "origin_filter",
           "KILLED", "EXPIRED", "NORMAL"]

# why a reference left its queue (Artemis AckReason)
NORMAL = "normal"
KILLED = "killed"          # dead-lettered: moved to the dead-letter address, or dropped
EXPIRED = "expired"

#: Artemis's RoutingType.getType() bytes
ROUTING_TYPE_CODES = {"multicast": 0, "anycast": 1}
_ROUTING_TYPE_NAMES = {code: name for name, code in ROUTING_TYPE_CODES.items()}


@dataclass(frozen=True)
class Dialect:
    """The property names a broker family gives dead-letter and expiry copies."""

    name: str
    orig_address: str
    orig_queue: str
    orig_message_id: str
    orig_routing_type: str | None      # None: the family has no routing types
    actual_expiry: str
    jms_queue_prefix: str = "jms.queue."


DIALECTS = {
    "artemis": Dialect("artemis", "_AMQ_ORIG_ADDRESS", "_AMQ_ORIG_QUEUE", "_AMQ_ORIG_MESSAGE_ID",
                       "_AMQ_ORIG_ROUTING_TYPE", "_AMQ_ACTUAL_EXPIRY"),
    "hornetq": Dialect("hornetq", "_HQ_ORIG_ADDRESS", "_HQ_ORIG_QUEUE", "_HQ_ORIG_MESSAGE_ID", None,
                       "_HQ_ACTUAL_EXPIRY"),
}


def dialect_named(name: str) -> Dialect:
    try:
        return DIALECTS[name]
    except (KeyError, TypeError):
        raise ConfigError("dialect", name, f"use one of {', '.join(sorted(DIALECTS))}") from None


def make_copy(original: MessageData, new_id: int, to_address: str, queue_name: str, dialect: Dialect, *,
              actual_expiry_ms: int | None = None) -> MessageData:
    """The copy Artemis routes to a dead-letter or expiry address (see the module docstring)."""
    properties = dict(original.properties) if original.properties else {}
    routing_type = None
    if dialect.orig_routing_type is not None:
        # move(): a copy of a copy keeps the routing type its original recorded
        recorded = properties.get(dialect.orig_routing_type)
        if isinstance(recorded, int) and not isinstance(recorded, bool):
            routing_type = _ROUTING_TYPE_NAMES.get(recorded)
    properties[dialect.orig_queue] = queue_name
    properties[dialect.orig_address] = original.address
    properties[dialect.orig_message_id] = original.message_id
    if dialect.orig_routing_type is not None and original.routing_type is not None:
        properties[dialect.orig_routing_type] = ROUTING_TYPE_CODES[original.routing_type]
    if actual_expiry_ms is not None:
        properties[dialect.actual_expiry] = actual_expiry_ms
    return MessageData(new_id, to_address, original.body, properties, original.durable, 0, routing_type)


def resource_queue_name(prefix: str, address: str, suffix: str) -> str:
    """The auto-created dead-letter (or expiry) queue of an address: prefix + address + suffix."""
    return f"{prefix}{address}{suffix}"


def origin_filter(dialect: Dialect, address: str) -> str:
    """The filter of an auto-created queue: only copies of messages first sent to ``address``."""
    quoted = address.replace("'", "''")
    return f"{dialect.orig_address} = '{quoted}'"
