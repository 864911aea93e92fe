"""The Artemis broker.xml as the Broker reads it: the address settings and the two broker-wide
redelivery switches, merged with the Broker's own arguments.

Why a module of its own: reading configuration is a concern apart from holding settings
(``address_settings``) and from running the broker (``broker``); ``config_xml`` below it does the XML.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .address_settings import AddressSettingsRepository
from .config_xml import read_broker_xml_document

__all__ = ["ArtemisBrokerXml", "read_artemis_broker_xml", "read_broker_config", "merged_switch"]

# the roots of an ActiveMQ Classic activemq.xml (Spring beans, or the broker element alone)
_CLASSIC_ROOTS = ("<beans>", "<broker>")


@dataclass
class ArtemisBrokerXml:
    """What journal_engine reads from an Artemis broker.xml: address settings and two broker-wide switches."""

    address_settings: AddressSettingsRepository
    max_redelivery_records: int | None = None                      # None = not in the file (default 10)
    persist_delivery_count_before_delivery: bool | None = None     # None = not in the file (default false)
    wildcard_routing_enabled: bool | None = None
    source: str = "broker.xml"


def read_artemis_broker_xml(path_or_text: str | bytes | os.PathLike[str]) -> ArtemisBrokerXml:
    """Read the address settings, wildcard syntax, literal markers and redelivery switches of a broker.xml.

    The root must be ``<configuration>`` (with a ``<core>`` child, or the settings directly under it) or
    ``<core>``; namespaces are ignored. A DOCTYPE or entity declaration, malformed XML, an unknown
    element inside ``<address-setting>`` or ``<wildcard-addresses>``, or a bad value raise ConfigError
    naming the element and the value. Thread-safe.
    """
    document = read_broker_xml_document(path_or_text)
    repository = AddressSettingsRepository.from_broker_xml_document(document)
    return ArtemisBrokerXml(repository, document.max_redelivery_records,
                            document.persist_delivery_count_before_delivery, document.wildcard_routing_enabled,
                            document.source)


def read_broker_config(config: Any) -> ArtemisBrokerXml:
    """The Broker's ``config=``: an Artemis broker.xml (path or text). A Classic activemq.xml raises
    ConfigError saying so (reading Classic destination policies is not supported yet)."""
    try:
        return read_artemis_broker_xml(config)
    except ConfigError as exc:
        if exc.value in _CLASSIC_ROOTS:
            raise ConfigError("config", exc.field,
                              f"is an ActiveMQ Classic activemq.xml (root {exc.value}); reading Classic "
                              "destination policies is not supported yet",
                              hint="pass an Artemis broker.xml, or set broker.address_settings in code") from exc
        raise


def merged_switch(name: str, argument: Any, default: Any, from_file: Any, source: str) -> Any:
    """The configuration file's value of a broker-wide switch, unless the argument was set to something
    else: then ConfigError (a switch is set in one place only)."""
    if from_file is None:
        return argument
    if argument != default and argument != from_file:
        raise ConfigError(name, argument, f"conflicts with {from_file!r} in {source}",
                          hint="set it in one place only")
    return from_file
