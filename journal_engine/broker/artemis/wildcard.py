"""Address wildcards as Artemis address settings use them (docs/address-settings.md).

Words are separated by a delimiter (``.``); ``#`` matches zero or more words and ``*`` exactly one
non-empty word; all three characters are configurable (MQTT style is ``/``, ``#``, ``+``).

A pattern becomes a regular expression the way Artemis's ``Match`` builds one, and the address must
match it whole:

1. the pattern that is exactly ``#`` matches everything, the empty address included;
2. otherwise every ``<delimiter>#`` first collapses to ``#`` (so ``a.b.#`` also matches ``a.b``);
3. ``*`` becomes "one or more characters other than the delimiter";
4. ``#`` becomes "nothing, or the delimiter followed by one or more characters".

Two deliberate differences from the Java text substitution, neither visible with ordinary addresses:
every other character is matched literally (Artemis leaves regex metacharacters such as ``+`` or
``(`` live), and a backslash before a wildcard character makes that character literal, the same rule
``is_wild`` applies.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ...errors import ConfigError

__all__ = ["WildcardConfiguration", "DEFAULT_WILDCARDS", "matches", "is_wild", "verify_match", "to_regex",
           "unescape", "contains_wildcard"]

ESCAPE = "\\"


@dataclass(frozen=True)
class WildcardConfiguration:
    """The three wildcard characters, checked once so every lookup can trust them."""

    delimiter: str = "."
    any_words: str = "#"
    single_word: str = "*"

    def __post_init__(self) -> None:
        for field_name in ("delimiter", "any_words", "single_word"):
            value = getattr(self, field_name)
            if not isinstance(value, str) or len(value) != 1:
                raise ConfigError(field_name, value, "must be exactly one character")
            if value == ESCAPE:
                raise ConfigError(field_name, value, "the backslash is the escape character and cannot be a wildcard")
        if len({self.delimiter, self.any_words, self.single_word}) != 3:
            raise ConfigError("wildcards", (self.delimiter, self.any_words, self.single_word),
                              "delimiter, any-words and single-word must be three different characters")


DEFAULT_WILDCARDS = WildcardConfiguration()


@functools.lru_cache(maxsize=64)
def _configuration(delimiter: str, any_words: str, single_word: str) -> WildcardConfiguration:
    return WildcardConfiguration(delimiter, any_words, single_word)


def _tokens(pattern: str, wildcards: tuple[str, str]) -> list[tuple[str, bool]]:
    """Split ``pattern`` into (character, is_wildcard) pairs, resolving backslash escapes."""
    out: list[tuple[str, bool]] = []
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c == ESCAPE and i + 1 < n and pattern[i + 1] in wildcards:
            out.append((pattern[i + 1], False))
            i += 2
            continue
        out.append((c, c in wildcards))
        i += 1
    return out


def _check_text(value: object, what: str) -> str:
    if value is None:
        raise TypeError(f"{what} is None; a string is required")
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    return value


@functools.lru_cache(maxsize=8192)
def _compile(pattern: str, delimiter: str, any_words: str, single_word: str) -> re.Pattern[str]:
    tokens = _tokens(pattern, (any_words, single_word))
    if tokens == [(any_words, True)]:
        return re.compile(r".*", re.DOTALL)
    # <delimiter># collapses to # (an escaped # is an ordinary character and does not collapse).
    collapsed: list[tuple[str, bool]] = []
    for i, token in enumerate(tokens):
        if (token == (delimiter, False) and i + 1 < len(tokens) and tokens[i + 1] == (any_words, True)):
            continue
        collapsed.append(token)
    quoted_delimiter = re.escape(delimiter)
    parts: list[str] = []
    for char, wild in collapsed:
        if wild and char == single_word:
            parts.append(f"[^{quoted_delimiter}]+")
        elif wild and char == any_words:
            # Artemis writes (<d>.+)*; any repetition of "<d> then one or more characters" is itself
            # "<d> then one or more characters", so the optional single group matches the same
            # strings without the nested quantifier's exponential backtracking.
            parts.append(f"(?:{quoted_delimiter}.+)?")
        else:
            parts.append(re.escape(char))
    return re.compile("".join(parts), re.DOTALL)


def to_regex(pattern: str, *, delimiter: str = ".", any_words: str = "#", single_word: str = "*") -> re.Pattern[str]:
    """The compiled expression ``pattern`` stands for (use ``fullmatch``); cached."""
    _check_text(pattern, "pattern")
    _configuration(delimiter, any_words, single_word)
    return _compile(pattern, delimiter, any_words, single_word)


def matches(pattern: str, address: str, *, delimiter: str = ".", any_words: str = "#",
            single_word: str = "*") -> bool:
    """True when ``address`` matches the whole of ``pattern`` (address-settings rules)."""
    _check_text(pattern, "pattern")
    _check_text(address, "address")
    _configuration(delimiter, any_words, single_word)
    return _compile(pattern, delimiter, any_words, single_word).fullmatch(address) is not None


def is_wild(match: str, *, delimiter: str = ".", any_words: str = "#", single_word: str = "*") -> bool:
    """True when ``match`` holds a wildcard character that is not backslash-escaped.

    A match that is not wild is an exact match: it applies to the one address spelled the same way.
    """
    _check_text(match, "match")
    _configuration(delimiter, any_words, single_word)
    if any_words not in match and single_word not in match:
        return False
    return any(wild for _, wild in _tokens(match, (any_words, single_word)))


def contains_wildcard(match: str, char: str, *, any_words: str = "#", single_word: str = "*") -> bool:
    """True when ``match`` holds ``char`` (one of the wildcard characters) unescaped."""
    if char not in match:
        return False
    return any(wild and c == char for c, wild in _tokens(match, (any_words, single_word)))


def verify_match(match: str, *, delimiter: str = ".", any_words: str = "#", single_word: str = "*") -> None:
    """Refuse an address-settings match Artemis refuses: ``#`` anywhere but last (ConfigError), None (TypeError).

    Routing-side wildcards allow ``#`` in the middle (``a.#.d``); address settings do not, because the
    precedence rules only rank a trailing ``#``.
    """
    _check_text(match, "match")
    _configuration(delimiter, any_words, single_word)
    tokens = _tokens(match, (any_words, single_word))
    for i, (char, wild) in enumerate(tokens):
        if wild and char == any_words and i != len(tokens) - 1:
            raise ConfigError("match", match,
                              f"{any_words!r} may only be the last character of an address-settings match",
                              hint=f"use {single_word!r} for one word in the middle, or escape it as "
                                   f"'{ESCAPE}{any_words}' for a literal character")


def unescape(match: str, *, any_words: str = "#", single_word: str = "*") -> str:
    """``match`` with its backslash escapes of wildcard characters removed (the literal address it names)."""
    return "".join(char for char, _ in _tokens(match, (any_words, single_word)))
