"""The dialects a broker can speak, by name: ``Broker(dialect=...)``, the CLI's ``--dialect`` and the
analyses that read either family's copies choose from here."""
from __future__ import annotations

from ..errors import ConfigError
from .artemis.dialect import ARTEMIS, Dialect
from .hornetq.dialect import HORNETQ

__all__ = ["DIALECTS", "dialect_named"]

DIALECTS: dict[str, Dialect] = {dialect.name: dialect for dialect in (ARTEMIS, HORNETQ)}


def dialect_named(name: str) -> Dialect:
    """The Dialect called ``name`` ("artemis" or "hornetq"); ConfigError for another name."""
    try:
        return DIALECTS[name]
    except (KeyError, TypeError):
        raise ConfigError("dialect", name, f"use one of {', '.join(sorted(DIALECTS))}") from None
