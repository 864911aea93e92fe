"""How a STOMP SEND is kept in a broker message and how a kept message goes out as a MESSAGE frame.

The body is the message's body, byte for byte; each header of the SEND (but those that ask something
of the server or that it sets on the way out: ``receipt``, ``transaction``, ``content-length``,
``message-id``, ``destination``) is a message property ``stomp.header.<name>``. That is the scheme the coilmq-based serve-stomp wrote, so a data
directory it left is served as it was. On the way out the server adds ``destination`` (the queue the
message comes from), ``message-id`` (the broker's id), ``delivery-count`` (1 the first time, persisted
before the frame leaves), ``redelivered:true`` when it may have been delivered before, and
``original-destination`` on a dead-letter or expiry copy (ActiveMQ's header names).

A ``priority`` header (0-9, ActiveMQ's and JMS's) is the message's priority: a queue delivers its
highest priority first (docs/broker.md); kept as a header like any other, it goes out on the MESSAGE.

A duplicate-id header (``_AMQ_DUPL_ID``, or HornetQ's ``_HQ_DUPL_ID``) is also kept as the property
of its own name, which the broker's duplicate detection reads (Artemis maps STOMP headers to
properties by name): a SEND resent after a lost RECEIPT is then not routed twice.
"""
from __future__ import annotations

from ..broker.dialects import DIALECTS
from ..errors import ConfigError
from ..limits import PRIORITY_DEFAULT, PRIORITY_MAX, PRIORITY_MIN
from .._impl import message_frame_bytes

__all__ = ["REDELIVERED_HEADER", "DELIVERY_COUNT_HEADER", "ORIGINAL_DESTINATION_HEADER", "EXPIRES_HEADER",
           "HEADER_PROPERTY", "ORIGINAL_ADDRESS_PROPERTIES", "DUPLICATE_ID_HEADERS", "properties_of", "expiration_of", "priority_of",
           "PRIORITY_HEADER", "message_headers",
           "message_frame"]

#: set to "true" on a MESSAGE that may have been delivered before (ActiveMQ's STOMP header name)
REDELIVERED_HEADER = "redelivered"
#: on every MESSAGE: the delivery attempt it is, 1 the first time
DELIVERY_COUNT_HEADER = "delivery-count"
#: on a MESSAGE taken from the dead-letter queue: the destination it was sent to (ActiveMQ's name)
ORIGINAL_DESTINATION_HEADER = "original-destination"
#: on a SEND: when the message expires (epoch ms; ActiveMQ's name); it then goes to the dead-letter queue
EXPIRES_HEADER = "expires"
#: on a SEND: the message's priority, 0-9 (ActiveMQ's name, JMSPriority); absent: the default
PRIORITY_HEADER = "priority"
#: the prefix of the message property that keeps one header of the SEND
HEADER_PROPERTY = "stomp.header."
#: set by the broker on dead-letter and expiry copies (Artemis's and HornetQ's names)
ORIGINAL_ADDRESS_PROPERTIES = ("_AMQ_ORIG_ADDRESS", "_HQ_ORIG_ADDRESS")

# headers that ask the server for something (a RECEIPT, a transaction) or that it sets itself
# (destination: the queue that keeps the message names it; a property less to encode on the hot path)
_NOT_KEPT = frozenset({"receipt", "transaction", "content-length", "message-id", "destination"})


#: the duplicate-id properties of the dialects (Artemis's _AMQ_DUPL_ID, HornetQ's _HQ_DUPL_ID)
DUPLICATE_ID_HEADERS = tuple(dict.fromkeys(dialect.duplicate_id for dialect in DIALECTS.values()))


def properties_of(headers: dict[str, str]) -> dict[str, str]:
    """The message properties that keep the headers of a SEND, and its duplicate id under the
    property the broker's duplicate detection reads."""
    properties = {HEADER_PROPERTY + name: value for name, value in headers.items() if name not in _NOT_KEPT}
    for name in DUPLICATE_ID_HEADERS:
        value = headers.get(name)
        if value is not None:
            properties[name] = value
    return properties


def expiration_of(headers: dict[str, str]) -> int:
    """The ``expires`` header (epoch ms; absent, empty or 0: never) as the message's expiration;
    ConfigError naming the header unless it is such a number."""
    value = headers.get(EXPIRES_HEADER)
    if not value:
        return 0
    text = value.strip()
    if not (text.isascii() and text.isdigit()):
        raise ConfigError(EXPIRES_HEADER, value, "must be a time in epoch milliseconds, 0 for none")
    return int(text)


def priority_of(headers: dict[str, str]) -> int:
    """The ``priority`` header (absent or empty: the default) as the message's priority; ConfigError
    naming the header unless it is a whole number from 0 to 9."""
    value = headers.get(PRIORITY_HEADER)
    if not value:
        return PRIORITY_DEFAULT
    text = value.strip()
    if not (text.isascii() and text.isdigit() and PRIORITY_MIN <= int(text) <= PRIORITY_MAX):
        raise ConfigError(PRIORITY_HEADER, value, f"must be a priority from {PRIORITY_MIN} to {PRIORITY_MAX}")
    return int(text)


def message_headers(message, destination: str) -> dict[str, str]:
    """The headers of the MESSAGE frame that delivers ``message`` (a broker Message) from the queue
    ``destination``, but those naming the subscription and the acknowledgement."""
    properties = message.properties or {}
    start = len(HEADER_PROPERTY)
    headers = {name[start:]: str(value) for name, value in properties.items() if name.startswith(HEADER_PROPERTY)}
    headers["destination"] = destination
    for key in ORIGINAL_ADDRESS_PROPERTIES:
        original = properties.get(key)
        if original is not None:
            if original != destination:
                headers[ORIGINAL_DESTINATION_HEADER] = str(original)
            break
    headers["message-id"] = str(message.message_id)
    headers[DELIVERY_COUNT_HEADER] = str(message.delivery_count)
    if message.redelivered:
        headers[REDELIVERED_HEADER] = "true"
    return headers


# headers the server sets on the way out: a kept one of these names (a data directory of the older
# server kept destination and message-id) is not written twice
_SET_ON_THE_WAY_OUT = frozenset({"destination", "message-id", DELIVERY_COUNT_HEADER, REDELIVERED_HEADER,
                                 ORIGINAL_DESTINATION_HEADER, "subscription", "ack", "content-length"})


def message_frame(message, destination: str, subscription_id: str, ack: bool, escapes: bool) -> bytes:
    """The bytes of the MESSAGE frame that delivers ``message`` from ``destination`` to the
    subscription ``subscription_id``: the headers of :func:`message_headers`, ``subscription``, and
    ``ack`` (the message id) when ``ack``; escaped when ``escapes`` (STOMP 1.1, 1.2), with a
    ``content-length``. The hot path's writer, compiled (``_stomp_codec``): no dict of headers and no
    frame object on the way (``pack`` of the same headers reads back the same;
    tests/integrations/test_served_broker.py)."""
    return message_frame_bytes(message, destination, subscription_id, ack, escapes, HEADER_PROPERTY,
                               _SET_ON_THE_WAY_OUT, ORIGINAL_ADDRESS_PROPERTIES)
