"""Messages as the broker holds them (MessageData) and as consumers receive them (Message).

A message sent to an address is one ``MessageData`` however many queues it reaches; each queue holds a
reference of its own (``queue.Reference``) with its own delivery count. Every delivery hands out a new
``Message``: a light view of the data plus that delivery's count, so a consumer holding an old
delivery never sees the count of a later one.
"""
from __future__ import annotations

from .._impl import Message, MessageData, delivery_of
from ..record_format import MESSAGE_ID_PROPERTY

__all__ = ["Message", "MessageData", "HEADER_NAMES", "MESSAGE_ID_PROPERTY", "delivery_of", "filter_headers"]

#: Header fields a queue filter can name besides the message's properties (Artemis's filter names).
HEADER_NAMES = frozenset({"AMQAddress", "AMQDurable", "AMQExpiration", "AMQSize", "AMQMessageID"})


def filter_headers(message_id: int, address: str, durable: bool, expiration: int, size: int) -> dict:
    """The header fields a filter may name, of a message read from a store without becoming a
    MessageData (a stopped broker's, as the read-only console reads it): the values
    ``MessageData.headers()`` gives a live one, so that a selector picks the same messages in both."""
    return {"AMQAddress": address, "AMQDurable": "DURABLE" if durable else "NON_DURABLE",
            "AMQExpiration": expiration, "AMQSize": size, "AMQMessageID": message_id}
