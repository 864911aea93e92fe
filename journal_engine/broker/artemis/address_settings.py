"""Address settings with Artemis's hierarchical wildcard lookup, field-wise merge and delay formula.

Reading them from broker.xml is not done here: ``config.safe_xml`` turns the XML into plain values below
this module, so ``from_xml`` and ``from_broker_xml`` build from those (``config.artemis`` reads the rest of
the file, above this module).

``AddressSettings`` holds the redelivery, dead-letter and expiry settings of one ``<address-setting>``;
every field is None when unset so that a lookup can merge several matches field by field.
``HierarchicalRepository`` stores values under matches (exact, literal or wildcard) and returns them
most specific first; ``AddressSettingsRepository`` merges those and resolves the defaults after the
merge, as Artemis's ``HierarchicalObjectRepository`` + ``AddressSettings.mergeCopy`` do.
The rules, the worked examples and the places where this module differs from Artemis on purpose are
in docs/address-settings.md.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import random
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from xml.etree import ElementTree

from ...limits import (ADDRESS_SETTINGS_CACHE_ENTRIES_MAX, JAVA_INT_MAX, JAVA_INT_MIN, JAVA_LONG_MAX, JAVA_LONG_MIN,
                       REDELIVERY_DELAYS_LENGTH_MAX)
from ...errors import ConfigError
from ..config.safe_xml import (BrokerXmlDocument, address_setting_element,
                              address_setting_values, element_line, element_name_of, line_of, local_name,
                              read_broker_xml_document, renamed)
from .wildcard import WildcardConfiguration, contains_wildcard, is_wild, to_regex, unescape, verify_match

__all__ = ["AddressSettings", "HierarchicalRepository", "AddressSettingsRepository", "ADDRESS_SETTINGS_DEFAULTS"]

# Artemis's AddressSettings getter defaults (AddressSettings.java DEFAULT_*). max_redelivery_delay has no
# fixed default: it is redelivery_delay * 10, computed on the merged settings.
ADDRESS_SETTINGS_DEFAULTS: dict[str, Any] = {
    "dead_letter_address": None,
    "max_delivery_attempts": 10,
    "redelivery_delay": 0,
    "redelivery_delay_multiplier": 1.0,
    "max_redelivery_delay": None,
    "redelivery_collision_avoidance_factor": 0.0,
    "auto_create_dead_letter_resources": False,
    "dead_letter_queue_prefix": "DLQ.",
    "dead_letter_queue_suffix": "",
    "expiry_address": None,
    "auto_create_expiry_resources": False,
    "expiry_queue_prefix": "EXP.",
    "expiry_queue_suffix": "",
    "expiry_delay": -1,
    "redelivery_delays": (),
    "min_expiry_delay": -1,
    "max_expiry_delay": -1,
    "no_expiry": False,
    "send_to_dla_on_no_route": False,
    "max_rollback_delay": -1,
    "auto_delete_queues": True,
    "auto_delete_created_queues": False,
    "auto_delete_queues_delay": 0,
    "auto_delete_queues_message_count": 0,
    "auto_delete_queues_skip_usage_check": False,
}

_default_rng = random.Random()


def java_long(x: float) -> int:
    """Java's ``(long) double``: truncation toward zero, NaN to 0, saturation at the long range."""
    if math.isnan(x):
        return 0
    if x >= 9.223372036854775807e18:
        return JAVA_LONG_MAX
    if x <= -9.223372036854775808e18:
        return JAVA_LONG_MIN
    return int(x)


def _power(base: float, exponent: int) -> float:
    """``Math.pow``: overflow gives infinity instead of raising."""
    try:
        return math.pow(base, exponent)
    except OverflowError:
        return math.inf


def _check_int(field_name: str, value: Any, low: int, high: int, meaning: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(field_name, value, f"must be an integer ({meaning})")
    if not low <= value <= high:
        raise ConfigError(field_name, value, f"out of range [{low}, {high}] ({meaning})")
    return int(value)


def _check_float(field_name: str, value: Any, low: float, high: float, meaning: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(field_name, value, f"must be a number ({meaning})")
    number = float(value)
    if not math.isfinite(number) or not low <= number <= high:
        raise ConfigError(field_name, value, f"out of range [{low}, {high}] ({meaning})")
    return number


@dataclass(frozen=True)
class AddressSettings:
    """Redelivery, dead-letter and expiry settings of one address match; None = unset (merge falls through).

    Values are checked at construction (ConfigError names the field and the value). Instances are
    immutable: ``replace(**changes)`` gives a changed copy, ``merged_with(other)`` the field-wise merge,
    ``resolved()`` a copy with every unset field at its default.
    """

    dead_letter_address: str | None = None
    max_delivery_attempts: int | None = None
    redelivery_delay: int | None = None
    redelivery_delay_multiplier: float | None = None
    max_redelivery_delay: int | None = None
    redelivery_collision_avoidance_factor: float | None = None
    auto_create_dead_letter_resources: bool | None = None
    dead_letter_queue_prefix: str | None = None
    dead_letter_queue_suffix: str | None = None
    expiry_address: str | None = None
    auto_create_expiry_resources: bool | None = None
    expiry_queue_prefix: str | None = None
    expiry_queue_suffix: str | None = None
    expiry_delay: int | None = None
    redelivery_delays: tuple[int, ...] | None = None
    min_expiry_delay: int | None = None
    max_expiry_delay: int | None = None
    no_expiry: bool | None = None
    send_to_dla_on_no_route: bool | None = None
    max_rollback_delay: int | None = None
    # whether a queue created at this address is deleted once unused (Artemis's AddressQueueReaper): an
    # auto-created one (dead-letter and expiry resources) by auto_delete_queues, another by
    # auto_delete_created_queues; after auto_delete_queues_delay ms without consumers and with at most
    # auto_delete_queues_message_count messages (-1: any number); with auto_delete_queues_skip_usage_check
    # also a queue nobody used, its delay counted from its creation (read when the reaper scans)
    auto_delete_queues: bool | None = None
    auto_delete_created_queues: bool | None = None
    auto_delete_queues_delay: int | None = None
    auto_delete_queues_message_count: int | None = None
    auto_delete_queues_skip_usage_check: bool | None = None

    def __post_init__(self) -> None:
        put = functools.partial(object.__setattr__, self)
        for name in ("dead_letter_address", "dead_letter_queue_prefix", "dead_letter_queue_suffix",
                     "expiry_address", "expiry_queue_prefix", "expiry_queue_suffix"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ConfigError(name, value, "must be a string")
        for name in ("auto_create_dead_letter_resources", "auto_create_expiry_resources", "no_expiry",
                     "send_to_dla_on_no_route", "auto_delete_queues", "auto_delete_created_queues",
                     "auto_delete_queues_skip_usage_check"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise ConfigError(name, value, "must be True or False")
        if self.max_delivery_attempts is not None:
            put("max_delivery_attempts", _check_int("max_delivery_attempts", self.max_delivery_attempts,
                                                    JAVA_INT_MIN, JAVA_INT_MAX, "-1 or 0 = redeliver forever"))
        if self.redelivery_delay is not None:
            put("redelivery_delay", _check_int("redelivery_delay", self.redelivery_delay, 0, JAVA_LONG_MAX,
                                               "milliseconds, not negative"))
        if self.max_redelivery_delay is not None:
            put("max_redelivery_delay", _check_int("max_redelivery_delay", self.max_redelivery_delay, 0, JAVA_LONG_MAX,
                                                   "milliseconds, not negative"))
        if self.redelivery_delay_multiplier is not None:
            put("redelivery_delay_multiplier", _check_float(
                "redelivery_delay_multiplier", self.redelivery_delay_multiplier, 0.0, math.inf,
                "a finite factor, not negative; below 1 the delay shrinks"))
        if self.redelivery_collision_avoidance_factor is not None:
            put("redelivery_collision_avoidance_factor", _check_float(
                "redelivery_collision_avoidance_factor", self.redelivery_collision_avoidance_factor, 0.0, 1.0,
                "Artemis accepts 0.0 to 1.0"))
        if self.expiry_delay is not None:
            put("expiry_delay", _check_int("expiry_delay", self.expiry_delay, -1, JAVA_LONG_MAX,
                                           "milliseconds; -1 = keep the message's own expiration"))
        if self.auto_delete_queues_delay is not None:
            put("auto_delete_queues_delay", _check_int("auto_delete_queues_delay", self.auto_delete_queues_delay, 0,
                                                       JAVA_LONG_MAX, "milliseconds, not negative"))
        if self.auto_delete_queues_message_count is not None:
            put("auto_delete_queues_message_count", _check_int(
                "auto_delete_queues_message_count", self.auto_delete_queues_message_count, -1, JAVA_LONG_MAX,
                "messages; -1 = any number"))
        for name in ("min_expiry_delay", "max_expiry_delay", "max_rollback_delay"):
            if getattr(self, name) is not None:
                put(name, _check_int(name, getattr(self, name), -1, JAVA_LONG_MAX, "milliseconds; -1 = no bound"))
        # whether expiration_for can change an expiration (read on every send: an attribute, not a property)
        put("changes_expiration", bool(self.no_expiry) or any(
            value is not None and value >= 0 for value in (self.expiry_delay, self.min_expiry_delay,
                                                           self.max_expiry_delay)))
        if self.redelivery_delays is not None:
            delays = self.redelivery_delays
            if isinstance(delays, (str, bytes)) or not isinstance(delays, Sequence):
                raise ConfigError("redelivery_delays", delays, "must be a list of delays in milliseconds")
            if len(delays) > REDELIVERY_DELAYS_LENGTH_MAX:
                raise ConfigError("redelivery_delays", f"<{len(delays)} entries>",
                                  f"at most {REDELIVERY_DELAYS_LENGTH_MAX} entries")
            put("redelivery_delays", tuple(
                _check_int(f"redelivery_delays[{i}]", d, 0, JAVA_LONG_MAX, "milliseconds, not negative")
                for i, d in enumerate(delays)))

    # -- merging and defaults
    def merged_with(self, other: AddressSettings) -> AddressSettings:
        """Artemis's ``mergeCopy``: each field from ``self`` when set, else from ``other``."""
        if not isinstance(other, AddressSettings):
            raise TypeError(f"cannot merge AddressSettings with {type(other).__name__}")
        changes = {name: getattr(other, name) for name in _FIELD_NAMES
                   if getattr(self, name) is None and getattr(other, name) is not None}
        return dataclasses.replace(self, **changes) if changes else self

    def resolved(self) -> AddressSettings:
        """A copy with every unset field at its default; ``max_redelivery_delay`` = delay x 10 when unset."""
        changes = {name: ADDRESS_SETTINGS_DEFAULTS[name] for name in _FIELD_NAMES
                   if getattr(self, name) is None and ADDRESS_SETTINGS_DEFAULTS[name] is not None}
        if self.max_redelivery_delay is None:
            delay = self.redelivery_delay if self.redelivery_delay is not None else 0
            changes["max_redelivery_delay"] = min(delay * 10, JAVA_LONG_MAX)
        return dataclasses.replace(self, **changes) if changes else self

    def replace(self, **changes: Any) -> AddressSettings:
        """A copy with some fields changed (checked like the constructor's)."""
        return dataclasses.replace(self, **changes)

    def set_fields(self) -> dict[str, Any]:
        """The fields that are set, by name."""
        return {name: getattr(self, name) for name in _FIELD_NAMES if getattr(self, name) is not None}

    # -- expiry
    def expiration_for(self, expiration: int, now_ms: int) -> int:
        """The expiration (epoch ms, 0 = never) a message gets when it is routed to an address with these
        settings: Artemis's ``PostOfficeImpl.applyExpiryDelay``, in its order of precedence.

        ``no_expiry``: 0, the message never expires. Else ``expiry_delay`` >= 0: a message without an
        expiration gets ``now + expiry_delay`` (one with an expiration keeps it). Else the bounds: a
        message without an expiration, or expiring after ``now + max_expiry_delay``, gets that (when
        ``max_expiry_delay`` is set); else one expiring before ``now + min_expiry_delay`` (without one:
        0 counts as before) gets that (when ``min_expiry_delay`` is set). -1 = unset for each; unset
        fields take their defaults.
        """
        if self.no_expiry:
            return 0
        delay = self.expiry_delay
        if delay is not None and delay >= 0:
            return now_ms + delay if expiration == 0 else expiration
        longest = self.max_expiry_delay
        if longest is not None and longest >= 0 and (expiration == 0 or expiration > now_ms + longest):
            return now_ms + longest
        shortest = self.min_expiry_delay
        if shortest is not None and shortest >= 0 and expiration < now_ms + shortest:
            return now_ms + shortest
        return expiration

    # -- the redelivery delay
    def redelivery_delay_for(self, delivery_count: int, rng: random.Random | None = None) -> int:
        """Milliseconds to wait before redelivering a message whose delivery count is ``delivery_count``.

        Artemis's ``QueueImpl.calculateRedeliveryDelay`` (unset fields take their defaults):
        ``n = count - 1`` (0 for counts 0 and 1); ``delay = (long)(redelivery_delay * multiplier**n)``;
        with a collision-avoidance factor f > 0 two draws from ``rng.random()`` are made, the first
        picks the sign (below 0.5 = +f, as Java's ``nextBoolean()`` true) and the second the magnitude,
        ``variance = ±f * second`` and ``delay = (long)(delay + delay * variance)`` (truncated toward zero);
        the cap ``max_redelivery_delay`` (default delay x 10) is applied last, so it is never exceeded.
        With f = 0 nothing is drawn, so a seeded rng is not disturbed.

        Extension: ``redelivery_delays`` lists the delays of the first attempts explicitly (entry k-1
        for delivery count k); past its end the formula above applies. An entry is used as written
        (collision avoidance still applies; the cap does not: the list is itself the choice).
        """
        if isinstance(delivery_count, bool) or not isinstance(delivery_count, int):
            raise TypeError(f"delivery_count must be an int, not {type(delivery_count).__name__}")
        factor = self.redelivery_collision_avoidance_factor
        if factor is None:
            factor = 0.0
        delays = self.redelivery_delays
        attempt_index = delivery_count - 1 if delivery_count > 0 else 0
        if delays and attempt_index < len(delays):
            return with_collision_variance(delays[attempt_index], factor, rng)
        base = self.redelivery_delay if self.redelivery_delay is not None else 0
        multiplier = self.redelivery_delay_multiplier if self.redelivery_delay_multiplier is not None else 1.0
        cap = self.max_redelivery_delay if self.max_redelivery_delay is not None else min(base * 10, JAVA_LONG_MAX)
        delay = java_long(float(base) * _power(multiplier, attempt_index))
        delay = with_collision_variance(delay, factor, rng)
        return min(delay, cap)

    # -- XML
    @classmethod
    def from_xml(cls, text: str | bytes) -> AddressSettings:
        """Settings from one ``<address-setting>`` element, or from a run of its child elements.

        Element names as in Artemis's broker.xml (``<redelivery-delay>``, ...), matched without regard
        to case or namespace. Elements Artemis knows but this class does not model (``<max-size-bytes>``,
        ...) are ignored; an unknown element, a bad value, a DOCTYPE or an entity declaration raise
        ConfigError naming the element and the value.
        """
        element, label = address_setting_element(text)
        settings, _ = _settings_from_element(element, label)
        return settings


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(AddressSettings))


def with_collision_variance(delay: int, factor: float, rng: random.Random | None) -> int:
    """``delay`` varied by collision avoidance, as Artemis and Classic both draw it: the first draw picks
    the sign (below 0.5 = +factor, Java's ``nextBoolean()`` true), the second the magnitude; the sum is
    truncated toward zero. ``factor`` <= 0 draws nothing."""
    if factor <= 0.0:
        return delay
    generator = rng if rng is not None else _default_rng
    sign = factor if generator.random() < 0.5 else -factor
    variance = sign * generator.random()
    return java_long(float(delay) + float(delay) * variance)


# ---------------------------------------------------------------------------------- the repositories

V = TypeVar("V")


class _Entry(Generic[V]):
    __slots__ = ("match", "key", "value", "regex", "literal", "has_any_words", "has_single_word", "words")

    def __init__(self, match: str, key: str, value: V, regex: re.Pattern[str] | None, literal: bool,
                 wildcards: WildcardConfiguration) -> None:
        self.match = match          # as added (markers included)
        self.key = key              # what is matched: the literal or exact name, or the wildcard pattern
        self.value = value
        self.regex = regex
        self.literal = literal
        # What MatchComparator looks at, computed once (escaped wildcard characters do not count).
        self.has_any_words = contains_wildcard(key, wildcards.any_words, any_words=wildcards.any_words,
                                               single_word=wildcards.single_word)
        self.has_single_word = contains_wildcard(key, wildcards.single_word, any_words=wildcards.any_words,
                                                 single_word=wildcards.single_word)
        self.words = _java_split(key, wildcards.delimiter)


class HierarchicalRepository(Generic[V]):
    """Values stored under address matches, looked up by address, most specific match first.

    Precedence (Artemis ``HierarchicalObjectRepository.getMatches``): the exact match, then the literal
    match (with ``literal_markers`` such as ``"()"``, ``"(orders.#)"`` names only the address
    ``orders.#``), then every wildcard match that matches the whole address, ordered by Artemis's
    ``MatchComparator``: a match without ``#`` before one with it; between two with ``#`` the longer
    first; else a match without ``*`` first; between two with ``*`` the first word where only one side
    is ``*`` decides (the other side first), and the one with more words first; otherwise the shorter
    first. Ties keep insertion order.

    Results are cached per address: adding a wildcard (or literal wildcard) match clears the cache,
    adding an exact match evicts that address only, removing anything or changing the default clears it.
    Safe to share between threads.
    """

    def __init__(self, *, delimiter: str = ".", any_words: str = "#", single_word: str = "*",
                 literal_markers: str | None = None) -> None:
        self.wildcards = WildcardConfiguration(delimiter, any_words, single_word)
        if literal_markers is not None:
            if not isinstance(literal_markers, str) or len(literal_markers) not in (1, 2):
                raise ConfigError("literal_markers", literal_markers,
                                  "must be two characters (start and end, such as '()') or one used for both")
            if any(c in (delimiter, any_words, single_word) for c in literal_markers):
                raise ConfigError("literal_markers", literal_markers, "must differ from the wildcard characters")
        self.literal_markers = literal_markers
        self._exact: dict[str, _Entry[V]] = {}
        self._literal: dict[str, _Entry[V]] = {}
        self._wild: dict[str, _Entry[V]] = {}
        self._cache: dict[str, Any] = {}
        self._lock = threading.RLock()
        self._default: V | None = None

    # -- configuration
    @property
    def delimiter(self) -> str:
        return self.wildcards.delimiter

    @property
    def any_words(self) -> str:
        return self.wildcards.any_words

    @property
    def single_word(self) -> str:
        return self.wildcards.single_word

    @property
    def default(self) -> V | None:
        """Returned by ``get`` when no match applies (never merged with matches)."""
        return self._default

    def set_default(self, value: V | None) -> None:
        with self._lock:
            self._default = value
            self._cache.clear()

    # -- matches
    def _split_literal(self, match: str) -> tuple[str, bool]:
        markers = self.literal_markers
        if markers and len(match) >= 2 and match[0] == markers[0] and match[-1] == markers[-1]:
            return match[1:-1], True
        return match, False

    def _wild_args(self) -> dict[str, str]:
        return {"delimiter": self.delimiter, "any_words": self.any_words, "single_word": self.single_word}

    def _check_value(self, value: Any) -> None:
        """Subclasses restrict what may be stored."""

    def add(self, match: str, value: V) -> None:
        """Store ``value`` under ``match`` (replacing what was there). ``#`` only last: ConfigError."""
        if match is None:
            raise TypeError("match is None; a string is required")
        if not isinstance(match, str):
            raise TypeError(f"match must be a str, not {type(match).__name__}")
        self._check_value(value)
        key, literal = self._split_literal(match)
        verify_match(key, **self._wild_args())
        wild = is_wild(key, **self._wild_args())
        with self._lock:
            if literal:
                self._literal[key] = _Entry(match, key, value, None, True, self.wildcards)
            elif wild:
                self._wild[key] = _Entry(match, key, value, to_regex(key, **self._wild_args()), False,
                                         self.wildcards)
            else:
                name = unescape(key, any_words=self.any_words, single_word=self.single_word)
                self._exact[name] = _Entry(match, name, value, None, False, self.wildcards)
            if wild:
                self._cache.clear()
            else:
                self._cache.pop(unescape(key, any_words=self.any_words, single_word=self.single_word), None)

    def remove(self, match: str) -> bool:
        """Remove the value stored under ``match``; True when there was one.

        A marked literal (``"(a.#)"``) removes only the literal; an unmarked exact name removes both the
        exact and the literal entry of that name, as Artemis's ``removeMatch`` does.
        """
        if match is None:
            raise TypeError("match is None; a string is required")
        if not isinstance(match, str):
            raise TypeError(f"match must be a str, not {type(match).__name__}")
        key, literal = self._split_literal(match)
        with self._lock:
            removed = False
            if literal:
                removed = self._literal.pop(key, None) is not None
            elif is_wild(key, **self._wild_args()):
                removed = self._wild.pop(key, None) is not None
            else:
                name = unescape(key, any_words=self.any_words, single_word=self.single_word)
                removed = self._exact.pop(name, None) is not None
                removed = (self._literal.pop(name, None) is not None) or removed
            self._cache.clear()
            return removed

    def clear(self) -> None:
        with self._lock:
            self._exact.clear()
            self._literal.clear()
            self._wild.clear()
            self._cache.clear()

    def _entries_for(self, address: str) -> list[_Entry[V]]:
        found: list[_Entry[V]] = []
        exact = self._exact.get(address)
        if exact is not None:
            found.append(exact)
        literal = self._literal.get(address)
        if literal is not None:
            found.append(literal)
        wild = [entry for entry in self._wild.values() if entry.regex is not None and entry.regex.fullmatch(address)]
        wild.sort(key=functools.cmp_to_key(self._compare_keys))
        found.extend(wild)
        return found

    def _compare_keys(self, left: _Entry[V], right: _Entry[V]) -> int:
        """Artemis's MatchComparator on two wildcard keys: negative = ``left`` is more specific."""
        if left.has_any_words and not right.has_any_words:
            return 1
        if right.has_any_words and not left.has_any_words:
            return -1
        if left.has_any_words and right.has_any_words:
            return len(right.key) - len(left.key)
        if left.has_single_word and not right.has_single_word:
            return 1
        if right.has_single_word and not left.has_single_word:
            return -1
        if left.has_single_word and right.has_single_word:
            single = self.single_word
            for i, left_word in enumerate(left.words):
                if i >= len(right.words):
                    return -1
                right_word = right.words[i]
                if left_word == single and right_word != single:
                    return 1
                if left_word != single and right_word == single:
                    return -1
        return len(left.key) - len(right.key)

    def _check_address(self, address: Any) -> str:
        if address is None:
            raise TypeError("address is None; a string is required")
        if not isinstance(address, str):
            raise TypeError(f"address must be a str, not {type(address).__name__}")
        return address

    def matches(self, address: str) -> list[V]:
        """Every value whose match applies to ``address``, most specific first."""
        self._check_address(address)
        with self._lock:
            return [entry.value for entry in self._entries_for(address)]

    def matching_keys(self, address: str) -> list[str]:
        """The matches (as added) that apply to ``address``, most specific first; for reports and tests."""
        self._check_address(address)
        with self._lock:
            return [entry.match for entry in self._entries_for(address)]

    def _combine(self, values: list[V]) -> Any:
        """The value ``get`` returns for these matches (most specific first); here the first."""
        return values[0]

    def get(self, address: str) -> Any:
        """The value for ``address`` (the most specific match), the default when none applies, else None."""
        self._check_address(address)
        cached = self._cache.get(address, _MISSING)
        if cached is not _MISSING:
            return cached
        with self._lock:
            cached = self._cache.get(address, _MISSING)
            if cached is not _MISSING:
                return cached
            values = [entry.value for entry in self._entries_for(address)]
            result = self._combine(values) if values else self._default_result()
            if result is not None:
                if len(self._cache) >= ADDRESS_SETTINGS_CACHE_ENTRIES_MAX:
                    self._cache.clear()
                self._cache[address] = result
            return result

    def _default_result(self) -> Any:
        return self._default

    # -- introspection
    def items(self) -> list[tuple[str, V]]:
        """(match as added, value) pairs: exact, then literal, then wildcard matches, each in insertion order."""
        with self._lock:
            return [(e.match, e.value) for d in (self._exact, self._literal, self._wild) for e in d.values()]

    def __len__(self) -> int:
        return len(self._exact) + len(self._literal) + len(self._wild)

    def __iter__(self) -> Iterator[str]:
        return iter([match for match, _ in self.items()])

    def __contains__(self, match: object) -> bool:
        if not isinstance(match, str):
            return False
        key, literal = self._split_literal(match)
        if literal:
            return key in self._literal
        if is_wild(key, **self._wild_args()):
            return key in self._wild
        return unescape(key, any_words=self.any_words, single_word=self.single_word) in self._exact

    def cache_size(self) -> int:
        return len(self._cache)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({len(self)} matches, delimiter={self.delimiter!r}, "
                f"any_words={self.any_words!r}, single_word={self.single_word!r}, "
                f"literal_markers={self.literal_markers!r})")


_MISSING = object()


def _java_split(text: str, delimiter: str) -> list[str]:
    """``String.split`` with a literal delimiter: trailing empty strings dropped."""
    parts = text.split(delimiter)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


class AddressSettingsRepository(HierarchicalRepository[AddressSettings]):
    """A HierarchicalRepository of AddressSettings whose ``get`` merges and resolves.

    ``get(address)`` merges every applicable match field by field (the most specific non-None value
    wins), then resolves the defaults on the merged result (so ``max_redelivery_delay`` = the merged
    ``redelivery_delay`` x 10 only when no match sets it). When no match applies the repository default
    (``AddressSettings()`` unless ``set_default`` changed it) is returned, resolved, and not merged.
    """

    def __init__(self, *, delimiter: str = ".", any_words: str = "#", single_word: str = "*",
                 literal_markers: str | None = None) -> None:
        super().__init__(delimiter=delimiter, any_words=any_words, single_word=single_word,
                         literal_markers=literal_markers)
        self._default = AddressSettings()
        self.ignored_elements: list[tuple[str, str]] = []   # (match, element) read from XML and not modelled
        # cached(address): the dict's own get, bound once (a hot path pays one C call, no Python frame);
        # valid for good because the cache dict is only ever cleared, never replaced
        self.cached: Callable[[str], AddressSettings | None] = self._cache.get

    def _check_value(self, value: Any) -> None:
        if not isinstance(value, AddressSettings):
            raise TypeError(f"an AddressSettingsRepository holds AddressSettings, not {type(value).__name__}")

    def set_default(self, value: AddressSettings | None) -> None:
        if value is not None:
            self._check_value(value)
        super().set_default(value if value is not None else AddressSettings())

    def _combine(self, values: list[AddressSettings]) -> AddressSettings:
        merged = values[0]
        for value in values[1:]:
            merged = merged.merged_with(value)
        return merged.resolved()

    def _default_result(self) -> AddressSettings:
        default = self._default if self._default is not None else AddressSettings()
        return default.resolved()

    def get(self, address: str) -> AddressSettings:
        """The merged settings for ``address``, every field resolved to a value.

        Raises TypeError when ``address`` is not a str. Thread-safe.
        """
        return super().get(address)

    # cached(address) -> AddressSettings | None, set in __init__: what get(address) returned last if it
    # is still cached, else None (then call get). No checks, no lock: for hot paths. Thread-safe (the
    # cache only ever holds get() results and add, remove and set_default keep it current).

    def merged(self, address: str) -> AddressSettings | None:
        """The field-wise merge of the matches for ``address`` before defaults; None when no match applies."""
        values = self.matches(address)
        if not values:
            return None
        merged = values[0]
        for value in values[1:]:
            merged = merged.merged_with(value)
        return merged

    @classmethod
    def from_broker_xml(cls, path_or_text: str | bytes | os.PathLike[str]) -> AddressSettingsRepository:
        """Every ``<address-settings><address-setting match="...">`` of an Artemis broker.xml.

        The ``<wildcard-addresses>`` characters and ``<literal-match-markers>`` of the file configure
        the repository. ``path_or_text`` is a path, or the XML itself (text starting with ``<``, or bytes).
        """
        return cls.from_broker_xml_document(read_broker_xml_document(path_or_text))

    @classmethod
    def from_broker_xml_document(cls, document: BrokerXmlDocument) -> AddressSettingsRepository:
        """The repository a broker.xml describes, already read (``config.safe_xml.read_broker_xml_document``).

        Raises ConfigError naming the element: bad wildcard characters or literal markers, an element
        other than ``<address-setting>`` in ``<address-settings>``, a missing match, a bad value.
        """
        try:
            repository = cls(delimiter=document.delimiter, any_words=document.any_words,
                             single_word=document.single_word, literal_markers=document.literal_markers)
        except ConfigError as exc:
            raise renamed(exc, "literal-match-markers" if exc.field == "literal_markers"
                          else "wildcard-addresses") from exc
        for settings_list in document.address_settings_lists:
            for element in settings_list:
                if not isinstance(element.tag, str):
                    continue
                if local_name(element) != "address-setting":
                    raise ConfigError("address-settings", f"<{local_name(element)}>",
                                      "holds only <address-setting> elements", line=line_of(element))
                match = element.get("match")
                if match is None:
                    raise ConfigError("address-setting", "<address-setting>", "needs a match attribute",
                                      line=line_of(element))
                element_label = f"address-setting[match={match!r}]"
                settings, ignored = _settings_from_element(element, element_label, document.source,
                                                           document.unimplemented)
                try:
                    repository.add(match, settings)
                except ConfigError as exc:
                    raise renamed(exc, f"{element_label}@match", line_of(element)) from exc
                repository.ignored_elements.extend((match, name) for name in ignored)
        return repository


def _settings_from_element(element: ElementTree.Element, label: str, source: str = "address-setting",
                           unimplemented: list[tuple[str, int | None]] | None = None
                           ) -> tuple[AddressSettings, list[str]]:
    """AddressSettings from an ``<address-setting>`` element; a bad value is reported by element name and line."""
    values, ignored = address_setting_values(element, label, source, unimplemented)
    try:
        return AddressSettings(**values), ignored
    except ConfigError as exc:
        name = element_name_of(exc.field.split("[", 1)[0])
        raise renamed(exc, f"{label}/{name}", element_line(element, name)) from exc
