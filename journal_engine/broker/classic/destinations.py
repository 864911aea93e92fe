"""ActiveMQ Classic destinations: queues and topics by name, and the destination map that finds a
destination's policy entry.

A Classic destination is a queue or a topic with a physical name. Here an anycast queue is a Classic
queue (named by its address) and a multicast queue is a subscription of the topic named by its
address. Destinations whose name starts with ``ID:`` are temporary (Classic names temporary
destinations after the connection that made them).

Policy entries name a queue or a topic, possibly with wildcards: ``.`` separates words, ``*`` is
exactly one word, ``>`` (last) is the rest, zero words or more (Classic's PrefixDestinationFilter:
``orders.>`` matches ``orders`` and ``orders.eu.north``). A comma-separated name is a composite entry
(one entry per part). When several entries match, Classic's DestinationMap.chooseValue picks the
entry named exactly like the destination, else the matching entry whose name sorts first (Java's
String.compareTo, code unit by code unit; so ``>`` comes before any letter). Queue entries apply to
queues only, topic entries to topics only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from ...errors import ConfigError
from ..artemis.wildcard import matches as wildcard_matches

__all__ = ["QUEUE", "TOPIC", "ClassicDestination", "ClassicDestinationMap", "destination_of_queue", "check_pattern"]

QUEUE = "queue"
TOPIC = "topic"
_DELIMITER = "."
_ANY_DESCENDANT = ">"
_ANY_CHILD = "*"
_TEMPORARY_PREFIX = "ID:"

V = TypeVar("V")


@dataclass(frozen=True)
class ClassicDestination:
    """A queue or topic of the given physical name."""

    kind: str           # QUEUE or TOPIC
    name: str

    @property
    def is_queue(self) -> bool:
        return self.kind == QUEUE

    @property
    def is_temporary(self) -> bool:
        return self.name.startswith(_TEMPORARY_PREFIX)

    @property
    def qualified_name(self) -> str:
        """``queue://name`` or ``topic://name``, as Classic prints a destination (``originalDestination``)."""
        return f"{self.kind}://{self.name}"


def destination_of_queue(address: str, routing_type: str) -> ClassicDestination:
    """The Classic destination a queue of ours stands for: anycast = the queue ``address``, multicast = a
    subscription of the topic ``address``."""
    return ClassicDestination(QUEUE if routing_type == "anycast" else TOPIC, address)


def check_pattern(pattern: str, label: str) -> str:
    """A policy entry's destination name: non-empty words, ``>`` only as the last word. ConfigError else."""
    if not pattern:
        raise ConfigError(label, pattern, "an empty destination name")
    words = pattern.split(_DELIMITER)
    for index, word in enumerate(words):
        if not word:
            raise ConfigError(label, pattern, "has an empty word (two dots, or a dot at an end)")
        if _ANY_DESCENDANT in word and (word != _ANY_DESCENDANT or index != len(words) - 1):
            raise ConfigError(label, pattern, "'>' must be a whole word and the last one",
                              hint="'orders.>' matches orders and everything under it")
    return pattern


class ClassicDestinationMap(Generic[V]):
    """Values (policy entries, redelivery policies) by queue or topic name pattern; ``get`` picks one as
    Classic does (see the module docstring). Not thread-safe while being filled; read-only after."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], V] = {}

    def put(self, kind: str, pattern: str, value: V, label: str = "destination") -> None:
        """Add ``value`` for ``pattern`` (comma-separated: each part); a later entry for the same name
        replaces an earlier one. ConfigError for a malformed name."""
        if kind not in (QUEUE, TOPIC):
            raise ConfigError(label, kind, "use 'queue' or 'topic'")
        for part in pattern.split(","):
            self._entries[(kind, check_pattern(part.strip(), label))] = value

    def get(self, destination: ClassicDestination) -> V | None:
        """The value of the entry that applies to ``destination``, or None."""
        exact = self._entries.get((destination.kind, destination.name))
        if exact is not None:
            return exact
        best: str | None = None
        for kind, pattern in self._entries:
            if kind != destination.kind or not _is_wild(pattern):
                continue
            if wildcard_matches(pattern, destination.name, delimiter=_DELIMITER, any_words=_ANY_DESCENDANT,
                                single_word=_ANY_CHILD):
                if best is None or _java_order(pattern) < _java_order(best):
                    best = pattern
        return None if best is None else self._entries[(destination.kind, best)]

    def values(self) -> list[V]:
        return list(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)


def _is_wild(pattern: str) -> bool:
    return _ANY_CHILD in pattern or _ANY_DESCENDANT in pattern


def _java_order(text: str) -> list[int]:
    """The key String.compareTo sorts by: UTF-16 code units."""
    data = text.encode("utf-16-be")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]
