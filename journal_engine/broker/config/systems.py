"""Configuration files of the systems journal_engine imitates, recognised and read into a
``BrokerConfig``: ``load(path_or_text)``.

Which system's file it is follows from the root element: ``<configuration>`` or ``<core>`` is an
Artemis broker.xml (a HornetQ file when its namespace is ``urn:hornetq``), ``<beans>`` or ``<broker>``
an ActiveMQ Classic activemq.xml; a JSON document (text starting with ``{``) is a Qpid Broker-J virtual
host's configuration (``qpid``). Each system has one reader, a function of the parsed root element
and the file's label, listed in ``READERS``; a system without a reader is refused with a
ConfigError saying so. The XML is parsed once, by defusedxml (``safe_xml.parse_xml``): a DOCTYPE, an
entity or an external reference is refused.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any
from xml.etree import ElementTree

from ...errors import ConfigError
from .classic import classic_config
from .qpid import is_json, qpid_config
from .model import BrokerConfig
from .artemis import HORNETQ_NAMESPACE, artemis_config
from .safe_xml import ARTEMIS_ROOTS, line_of, local_name, namespace_of, parse_xml, read_source

__all__ = ["BrokerConfig", "READERS", "detect_system", "load", "merged_switch"]

#: the roots of an ActiveMQ Classic activemq.xml: Spring beans, or the broker element alone
CLASSIC_ROOTS = ("beans", "broker")

#: system -> reader(root element, label) -> BrokerConfig
READERS: dict[str, Callable[[ElementTree.Element, str], BrokerConfig]] = {
    "artemis": artemis_config,
    "hornetq": artemis_config,
    "classic": classic_config,
}

_SYSTEM_NAMES = {"artemis": "an Artemis broker.xml", "hornetq": "a HornetQ configuration",
                 "classic": "an ActiveMQ Classic activemq.xml"}


def detect_system(root: ElementTree.Element, label: str = "config") -> str:
    """"artemis", "hornetq" or "classic" from the root element; ConfigError (with the line) otherwise."""
    name = local_name(root)
    if name in ARTEMIS_ROOTS:
        return "hornetq" if namespace_of(root) == HORNETQ_NAMESPACE else "artemis"
    if name in CLASSIC_ROOTS:
        return "classic"
    raise ConfigError(label, f"<{name}>", "is neither an Artemis broker.xml nor an ActiveMQ Classic activemq.xml",
                      line=line_of(root), hint="expected the root <configuration>, <core>, <beans> or <broker>")


def load(path_or_text: Any) -> BrokerConfig:
    """Read a configuration file: a path, the XML text (a str starting with ``<``), a Broker-J virtual
    host's JSON text (starting with ``{``) or bytes; a BrokerConfig is returned as it is.

    Raises ConfigError: a file that cannot be read, malformed XML (line, column), a DOCTYPE, entity or
    external reference, a root of no known system, a system whose files are not read yet, a wrong
    value (naming the element, the value and the line). Elements the broker does not implement are
    logged at WARNING (``journal_engine.config``) with their line and listed in ``unimplemented``.
    """
    if isinstance(path_or_text, BrokerConfig):
        return path_or_text
    if not isinstance(path_or_text, (str, bytes, os.PathLike)):
        raise TypeError(f"config must be a path, XML text, bytes or a BrokerConfig, not {type(path_or_text).__name__}")
    text, label = read_source(path_or_text, "config")
    if is_json(text):
        return qpid_config(text, label)
    root = parse_xml(text, label)
    system = detect_system(root, label)
    reader = READERS.get(system)
    if reader is None:
        raise ConfigError("config", label, f"is {_SYSTEM_NAMES[system]} (root <{local_name(root)}>); reading "
                          f"{_SYSTEM_NAMES[system].split(' ', 1)[1]} files is not supported yet",
                          line=line_of(root),
                          hint="pass an Artemis broker.xml, or set broker.address_settings in code")
    return reader(root, label)


def merged_switch(name: str, argument: Any, default: Any, from_file: Any, source: str) -> Any:
    """The configuration file's value of a broker-wide switch, unless the argument was set to something
    else: then ConfigError (a switch is set in one place only)."""
    if from_file is None:
        return argument
    if argument != default and argument != from_file:
        raise ConfigError(name, argument, f"conflicts with {from_file!r} in {source}",
                          hint="set it in one place only")
    return from_file
