"""Messages as the broker holds them (MessageData) and as consumers receive them (Message).

A message sent to an address is one ``MessageData`` however many queues it reaches; each queue holds a
reference of its own (``queue.Reference``) with its own delivery count. Every delivery hands out a new
``Message``: a light view of the data plus that delivery's count, so a consumer holding an old
delivery never sees the count of a later one.
"""
from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

__all__ = ["Message", "MessageData", "HEADER_NAMES", "MESSAGE_ID_PROPERTY", "delivery_of"]

#: Header fields a queue filter can name besides the message's properties (Artemis's filter names).
HEADER_NAMES = frozenset({"AMQAddress", "AMQDurable", "AMQExpiration", "AMQSize", "AMQMessageID"})

#: The stored property that keeps a message's own id on a copy that has another id in the store (an
#: ActiveMQ Classic or Qpid dead-letter copy keeps the id of the message it copies); never shown to consumers.
MESSAGE_ID_PROPERTY = "_JE_MESSAGE_ID"

_EMPTY: Mapping[str, Any] = types.MappingProxyType({})


class MessageData:
    """One message's content and its bookkeeping: how many references it has, and how many of them
    the message store holds (the store deletes the message when the last of those is acknowledged)."""

    __slots__ = ("message_id", "address", "body", "properties", "durable", "expiration", "routing_type",
                 "durable_refs", "public_id", "_view")

    def __init__(self, message_id: int, address: str, body: bytes, properties: dict | None, durable: bool,
                 expiration: int, routing_type: str | None) -> None:
        self.message_id = message_id
        self.address = address
        self.body = body
        self.properties = properties          # a dict the broker owns, or None for none
        self.durable = durable
        self.expiration = expiration          # epoch ms, 0 = never
        self.routing_type = routing_type      # None, "anycast" or "multicast"
        self.durable_refs = 0                 # references the store holds (> 0: the store holds the message)
        self.public_id = message_id           # the id consumers see (a Classic or Qpid copy keeps its original's)
        self._view: Mapping[str, Any] | None = None

    def set_property(self, name: str, value: Any) -> None:
        """Set one property (the broker's own, such as Classic's ``redeliveryDelay``) in a new dict:
        deliveries already handed out hold the old one and must not see it change."""
        properties = self.properties
        self.properties = {**properties, name: value} if properties else {name: value}
        self._view = None

    def stored_properties(self) -> dict | None:
        """The properties as the store keeps them: with MESSAGE_ID_PROPERTY when the id consumers see is
        not the store's."""
        if self.public_id == self.message_id:
            return self.properties
        return {**(self.properties or {}), MESSAGE_ID_PROPERTY: self.public_id}

    def properties_view(self) -> Mapping[str, Any]:
        """The properties, read-only (consumers share the data; none may change it for the others)."""
        view = self._view
        if view is None:
            view = _EMPTY if not self.properties else types.MappingProxyType(self.properties)
            self._view = view
        return view

    def headers(self) -> dict:
        """The header fields a filter may use (only filters that name one of them ask)."""
        return {
            "AMQAddress": self.address,
            "AMQDurable": "DURABLE" if self.durable else "NON_DURABLE",
            "AMQExpiration": self.expiration,
            "AMQSize": len(self.body),
            "AMQMessageID": self.message_id,
        }

    def __repr__(self) -> str:
        return f"MessageData(id={self.message_id}, address={self.address!r}, durable={self.durable})"


class Message:
    """One delivery of a message (or a browsed copy, whose delivery_count is 0).

    ``delivery_count`` is 1 on the first delivery and goes up at each dispatch; ``redelivered`` is
    ``delivery_count > 1``. ``properties`` is read-only and those of this delivery: a later change
    (a redelivery's ``redeliveryDelay``) is not seen. ``queue`` names the queue it came from.
    Acknowledge or roll it back through the consumer that received it.
    """

    __slots__ = ("_data", "_properties", "delivery_count", "queue", "_ref", "_owner")

    def __init__(self, data: MessageData, delivery_count: int, queue: str, ref=None, owner=None) -> None:
        self._data = data
        self._properties = data.properties    # the dict of this moment: the broker replaces, never changes it
        self.delivery_count = delivery_count
        self.queue = queue
        self._ref = ref           # the queue reference this delivery is of (None: browsed)
        self._owner = owner       # the consumer it was delivered to (None: browsed)

    @property
    def message_id(self) -> int:
        return self._data.public_id

    @property
    def address(self) -> str:
        return self._data.address

    @property
    def body(self) -> bytes:
        return self._data.body

    @property
    def properties(self) -> Mapping[str, Any]:
        data = self._data
        properties = self._properties
        if properties is data.properties:
            return data.properties_view()
        return types.MappingProxyType(properties) if properties else _EMPTY

    @property
    def durable(self) -> bool:
        return self._data.durable

    @property
    def expiration(self) -> int:
        return self._data.expiration

    @property
    def routing_type(self) -> str | None:
        return self._data.routing_type

    @property
    def redelivered(self) -> bool:
        return self.delivery_count > 1

    def __repr__(self) -> str:
        return (f"Message(id={self._data.public_id}, address={self._data.address!r}, queue={self.queue!r}, "
                f"delivery_count={self.delivery_count}, body={self._data.body[:32]!r})")


def delivery_of(message: Message) -> tuple[Any, Any]:
    """(reference, consumer) of the delivery ``message`` stands for; (None, None) for a browsed copy.

    The broker's way back from a Message it handed out to its own bookkeeping; the caller checked that
    ``message`` is a Message.
    """
    return message._ref, message._owner
