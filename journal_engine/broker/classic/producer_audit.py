"""ActiveMQ Classic's producer audit: a destination policy's ``enableAudit``.

Classic names every message by its MessageId, the producer's id and the producer's sequence number
(text ``ID:host-port-start-n:connection:session:producer:sequence``). Each destination keeps an
ActiveMQMessageAudit: per producer a window of sequence numbers it has seen (a BitArrayBin), for at most
``maxProducersToAudit`` producers (an LRUCache: the least recently used producer is forgotten first). A
message whose sequence number is set in its producer's window is a duplicate and is not dispatched (the
queue cursor's ``recordUniqueId``; the failover transport's resends are what it catches).

Facts this module follows (activemq-client: ``MessageId``, ``ProducerId``, ``ActiveMQMessageAuditNoSync``,
``util.BitArrayBin``, ``util.LRUCache``; activemq-broker: ``PolicyEntry``, ``BaseDestination``, ``Queue``,
``TopicSubscription``, ``cursors.AbstractPendingMessageCursor``):

* The message id's text after its last ``:`` is the sequence number (a Java long), the rest the producer id,
  whose last two ``:``-separated words are the producer's and the session's numbers (0 when absent) and the
  rest the connection id. Producer ids are equal when those three are.
* A window holds ``(depth + 1) // 64 + 1`` words of 64 bits (at least one), so never fewer than 64 ids. The
  first id seen puts the window's start at the 64-aligned number at or below it. An id past the window's end
  slides the window forward by whole words (the words left behind are forgotten); an id before the window's
  start is never a duplicate and is not remembered.
* A queue's audit takes its policy entry's ``enableAudit`` (default true), ``maxQueueAuditDepth`` (10,000)
  and ``maxProducersToAudit`` (64), the entry picked as PolicyMap.getEntryFor picks it (the default entry
  when none matches); with no entry at all, the destination's own defaults: enabled, 2,048 deep, 1,024
  producers. A topic subscription audits only when an entry applies and says ``enableAudit``, with its
  ``maxAuditDepth`` (10,000) and ``maxProducersToAudit``.

The audit is in memory, as Classic's: a restarted broker starts with empty windows.

Why a module of its own: the window arithmetic and the id's grammar are one job, apart from routing and
from the configuration reader, which both use it.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from ...errors import ConfigError
from ...limits import (CLASSIC_AUDIT_DEPTH_DESTINATION_DEFAULT, CLASSIC_AUDIT_DEPTH_MAX,
                       CLASSIC_AUDIT_DEPTH_POLICY_DEFAULT, CLASSIC_AUDIT_PRODUCERS_DESTINATION_DEFAULT,
                       CLASSIC_AUDIT_PRODUCERS_MAX, CLASSIC_AUDIT_PRODUCERS_POLICY_DEFAULT, JAVA_LONG_MAX)
from .destinations import ClassicDestination

__all__ = ["MESSAGE_ID_PROPERTY", "AuditPolicy", "ProducerKey", "parse_message_id", "message_key", "ProducerWindow",
           "DestinationAudit", "ProducerAudit", "window_words"]

#: the property that carries a message's Classic MessageId (JMS's header name; what a JMS client reads back)
MESSAGE_ID_PROPERTY = "JMSMessageID"
_WORD_BITS = 64                         # BitArray.LONG_SIZE
_LONG_RE = re.compile(r"[+-]?[0-9]+")   # Long.parseLong's text, ASCII digits

ProducerKey = tuple[str, int, int]      # (connection id, session number, producer number)


def _java_long(text: str) -> int | None:
    if not _LONG_RE.fullmatch(text):
        return None
    number = int(text)
    return number if -JAVA_LONG_MAX - 1 <= number <= JAVA_LONG_MAX else None


def parse_message_id(value: object) -> tuple[ProducerKey, int]:
    """The producer and sequence number of a Classic MessageId's text, parsed as MessageId(String) and
    ProducerId(String) parse it. ConfigError naming ``JMSMessageID`` for anything else: a value that is
    not a str, no ``:``, a number that is not a Java long, or a negative sequence number (a producer
    counts from 1; Classic's window arithmetic is undefined below 0)."""
    if not isinstance(value, str):
        raise ConfigError(MESSAGE_ID_PROPERTY, value, "a Classic message id is a str, "
                                                      "ID:<connection>:<session>:<producer>:<sequence>")
    cut = value.rfind(":")
    sequence = _java_long(value[cut + 1:]) if cut >= 0 else None
    if sequence is None or sequence < 0:
        raise ConfigError(MESSAGE_ID_PROPERTY, value, "must end in :<sequence>, a number from 0 to 2**63-1 "
                                                      "after the producer id")
    producer = value[:cut]
    numbers = [0, 0]                    # ProducerId: its value, then its session id; 0 when absent
    for slot in range(2):
        cut = producer.rfind(":")
        if cut < 0:
            break
        number = _java_long(producer[cut + 1:])
        if number is None:
            raise ConfigError(MESSAGE_ID_PROPERTY, value, "the producer id's session and producer numbers must "
                                                          "be Java longs (ID:<connection>:<session>:<producer>)")
        numbers[slot] = number
        producer = producer[:cut]
    return (producer, numbers[1], numbers[0]), sequence


def window_words(depth: int) -> int:
    """The 64-bit words of a window ``depth`` ids deep (BitArrayBin's maxNumberOfArrays)."""
    return max((depth + 1) // _WORD_BITS + 1, 1)


class ProducerWindow:
    """One producer's sequence numbers seen, a sliding window of whole 64-bit words (BitArrayBin)."""

    __slots__ = ("_bits_max", "_first", "_bits")

    def __init__(self, depth: int) -> None:
        self._bits_max = window_words(depth) * _WORD_BITS
        self._first = -1                # the sequence number of bit 0; -1 until the first id
        self._bits = 0                  # bit i: sequence number _first + i was seen

    def seen(self, sequence: int) -> bool:
        """Whether ``sequence`` is set in the window (no change)."""
        offset = sequence - self._first
        return self._first >= 0 and 0 <= offset < self._bits_max and (self._bits >> offset) & 1 == 1

    def record(self, sequence: int) -> bool:
        """Set ``sequence``; whether it was set before (a duplicate). An id before the window's start is
        never a duplicate and is not kept; one past its end slides the window by whole words."""
        if self._first < 0:
            self._first = sequence - sequence % _WORD_BITS
        offset = sequence - self._first
        if offset < 0:
            return False
        if offset >= self._bits_max:
            shift_words = offset // _WORD_BITS - self._bits_max // _WORD_BITS + 1
            self._bits >>= shift_words * _WORD_BITS
            self._first += shift_words * _WORD_BITS
            offset -= shift_words * _WORD_BITS
        mask = 1 << offset
        was_set = self._bits & mask != 0
        self._bits |= mask
        return was_set


class DestinationAudit:
    """A destination's audit: a ProducerWindow per producer, at most ``producers_max``, the least recently
    used forgotten first (LRUCache in access order)."""

    __slots__ = ("depth", "producers_max", "_windows")

    def __init__(self, depth: int, producers_max: int) -> None:
        self.depth = depth
        self.producers_max = producers_max
        self._windows: OrderedDict[ProducerKey, ProducerWindow] = OrderedDict()

    def seen(self, producer: ProducerKey, sequence: int) -> bool:
        """Whether the message is a duplicate now (nothing changes; a transacted send asks this)."""
        window = self._windows.get(producer)
        return window is not None and window.seen(sequence)

    def is_duplicate(self, producer: ProducerKey, sequence: int) -> bool:
        """ActiveMQMessageAuditNoSync.isDuplicate: the producer's window (made, and the eldest producer
        beyond ``producers_max`` forgotten, when new) records ``sequence``; whether it held it already."""
        windows = self._windows
        window = windows.get(producer)
        if window is None:
            window = windows[producer] = ProducerWindow(self.depth)
            if len(windows) > self.producers_max:
                windows.popitem(last=False)     # with producers_max 0 that is the new window itself
        else:
            windows.move_to_end(producer)
        return window.record(sequence)

    def __len__(self) -> int:
        return len(self._windows)


def _check_count(name: str, value: object, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise ConfigError(name, value, f"must be an integer within 0..{high}")


@dataclass(frozen=True)
class AuditPolicy:
    """The audit attributes of one Classic policy entry (PolicyEntry's defaults)."""

    enable_audit: bool = True
    max_audit_depth: int = CLASSIC_AUDIT_DEPTH_POLICY_DEFAULT          # a topic subscription's window
    max_queue_audit_depth: int = CLASSIC_AUDIT_DEPTH_POLICY_DEFAULT    # a queue's window
    max_producers_to_audit: int = CLASSIC_AUDIT_PRODUCERS_POLICY_DEFAULT

    def __post_init__(self) -> None:
        if not isinstance(self.enable_audit, bool):
            raise ConfigError("enable_audit", self.enable_audit, "must be True or False")
        _check_count("max_audit_depth", self.max_audit_depth, CLASSIC_AUDIT_DEPTH_MAX)
        _check_count("max_queue_audit_depth", self.max_queue_audit_depth, CLASSIC_AUDIT_DEPTH_MAX)
        _check_count("max_producers_to_audit", self.max_producers_to_audit, CLASSIC_AUDIT_PRODUCERS_MAX)

    @staticmethod
    def window_for(entry: "AuditPolicy | None", destination: ClassicDestination) -> tuple[int, int] | None:
        """(depth, producers) of ``destination``'s audit under the policy entry that applies to it (None:
        no entry applies), or None when it does not audit."""
        if destination.is_queue:
            if entry is None:           # BaseDestination's own fields: a queue audits with no policy at all
                return CLASSIC_AUDIT_DEPTH_DESTINATION_DEFAULT, CLASSIC_AUDIT_PRODUCERS_DESTINATION_DEFAULT
            if not entry.enable_audit:
                return None
            return entry.max_queue_audit_depth, entry.max_producers_to_audit
        if entry is None or not entry.enable_audit:     # TopicSubscription: enableAudit false unless an entry sets it
            return None
        return entry.max_audit_depth, entry.max_producers_to_audit


def message_key(properties: Mapping | None) -> tuple[ProducerKey, int] | None:
    """The producer and sequence number of a message's ``JMSMessageID`` (None without one)."""
    if not properties:
        return None
    value = properties.get(MESSAGE_ID_PROPERTY)
    return None if value is None else parse_message_id(value)



class ProducerAudit:
    """The broker's audits under a Classic configuration: one DestinationAudit per destination, made at
    its first message with the window its policy entry gives (``entry_for``: the entry that applies to a
    ClassicDestination, None when none does). ``refused`` counts the duplicates dropped."""

    __slots__ = ("_entry_for", "_audits", "refused")

    def __init__(self, entry_for) -> None:
        self._entry_for = entry_for
        self._audits: dict[ClassicDestination, DestinationAudit | None] = {}
        self.refused = 0

    def audit_for(self, destination: ClassicDestination) -> DestinationAudit | None:
        """``destination``'s audit (None: its policy turns the audit off)."""
        audits = self._audits
        if destination in audits:
            return audits[destination]
        window = AuditPolicy.window_for(self._entry_for(destination), destination)
        audit = audits[destination] = DestinationAudit(*window) if window is not None else None
        return audit

    def forget(self, name: str) -> None:
        """The audits of the queue and topic ``name``: gone with the destination (a new one starts empty,
        as Classic's new destination starts a new cursor and its audit)."""
        for destination in [d for d in self._audits if d.name == name]:
            del self._audits[destination]
