"""Checks of what users pass to the broker: queue and address names, epoch times, message properties,
and the choices a few arguments have.

Why a module of its own: the checks are the same wherever a value enters (Broker, Session), and keeping
them apart lets broker.py read as the broker's behaviour. Every function is pure and thread-safe.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from ..limits import I64_MAX, I64_MIN, NAME_LENGTH_MAX, SYNC_MODE_NAMES
from ..message_store.message_store import BACKENDS

__all__ = ["ROUTING_TYPES", "STORE_BACKENDS", "SYNC_MODES", "I64_MAX", "NAME_LENGTH_MAX", "check_name",
           "check_time", "checked_properties"]

ROUTING_TYPES = ("anycast", "multicast")
STORE_BACKENDS = BACKENDS           # the message store's backends, said once there
SYNC_MODES = SYNC_MODE_NAMES        # the store's sync modes, said once in limits
_PROPERTY_TYPES = (str, int, float, bool, bytes, type(None))


def check_name(value: Any, what: str) -> str:
    """A queue or address name: a non-empty str of at most NAME_LENGTH_MAX characters.
    TypeError for another type, ConfigError (naming ``what``) for an empty or too long one."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise ConfigError(what, value, "must not be empty")
    if len(value) > NAME_LENGTH_MAX:
        raise ConfigError(what, value[:40] + "...", f"longer than {NAME_LENGTH_MAX} characters")
    return value


def check_time(value: Any, what: str) -> int:
    """An epoch time in milliseconds (0 = none): an int in [0, I64_MAX]; ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= I64_MAX:
        raise ValueError(f"{what}={value!r}: an epoch time in milliseconds, an int >= 0 (0 = none)")
    return value


def checked_properties(properties: Any) -> dict | None:
    """A private copy of the properties (the caller may change its dict afterwards), types checked;
    None for none. TypeError for a non-mapping, a non-str name or an unsupported value type;
    OverflowError for an int outside signed 64 bits."""
    if not isinstance(properties, Mapping):
        raise TypeError(f"properties must be a mapping, not {type(properties).__name__}")
    if not properties:
        return None
    copy = {}
    for key, value in properties.items():
        if not isinstance(key, str):
            raise TypeError(f"property names are str, not {type(key).__name__} ({key!r})")
        if not isinstance(value, _PROPERTY_TYPES):
            if isinstance(value, (bytearray, memoryview)):
                value = bytes(value)
            else:
                raise TypeError(f"property {key!r} has a value of type {type(value).__name__}; "
                                "use str, int, float, bool, bytes or None")
        elif isinstance(value, int) and not isinstance(value, bool) and not I64_MIN <= value <= I64_MAX:
            raise OverflowError(f"property {key!r}={value}: integers are signed 64-bit")
        copy[key] = value
    return copy
