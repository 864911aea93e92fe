"""Messages as the broker holds them (MessageData) and as consumers receive them (Message).

A message sent to an address is one ``MessageData`` however many queues it reaches; each queue holds a
reference of its own (``queue.Reference``) with its own delivery count. Every delivery hands out a new
``Message``: a light view of the data plus that delivery's count, so a consumer holding an old
delivery never sees the count of a later one.
"""
from __future__ import annotations

from .._impl import Message, MessageData, delivery_of
from ..record_format import MESSAGE_ID_PROPERTY

__all__ = ["Message", "MessageData", "HEADER_NAMES", "MESSAGE_ID_PROPERTY", "delivery_of"]

#: Header fields a queue filter can name besides the message's properties (Artemis's filter names).
HEADER_NAMES = frozenset({"AMQAddress", "AMQDurable", "AMQExpiration", "AMQSize", "AMQMessageID"})
