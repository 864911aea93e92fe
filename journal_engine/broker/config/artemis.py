"""The Artemis broker.xml (and HornetQ's hornetq-configuration.xml, its ancestor) as the Broker reads
it: the address settings, the wildcard syntax, literal markers, the two broker-wide redelivery
switches and the two scan periods (expiry, auto-deleted queues).

Why a module of its own: reading configuration is a concern apart from holding settings
(``address_settings``) and from running the broker (``broker``); ``safe_xml`` below it does the XML,
``configuration`` above it recognises which system's file it is given.
"""
from __future__ import annotations

import os
from xml.etree import ElementTree

from ..artemis.address_settings import AddressSettingsRepository
from .model import BrokerConfig
from .safe_xml import BrokerXmlDocument, artemis_document, line_of, local_name, log, read_broker_xml_document

__all__ = ["ArtemisBrokerXml", "HORNETQ_NAMESPACE", "read_artemis_broker_xml", "artemis_config"]

#: the namespace of HornetQ's configuration files (Artemis's are urn:activemq and urn:activemq:core)
HORNETQ_NAMESPACE = "urn:hornetq"

#: the name this result had before other systems' files were read; the same class
ArtemisBrokerXml = BrokerConfig


def read_artemis_broker_xml(path_or_text: str | bytes | os.PathLike[str]) -> BrokerConfig:
    """Read the address settings, wildcard syntax, literal markers and redelivery switches of a broker.xml.

    The root must be ``<configuration>`` (with a ``<core>`` child, or the settings directly under it) or
    ``<core>``; namespaces are ignored. A DOCTYPE, malformed XML, an unknown element inside
    ``<address-setting>`` or ``<wildcard-addresses>``, or a bad value raise ConfigError naming the
    element, the value and the line; an element the broker does not implement is logged at WARNING.
    Thread-safe.
    """
    return _config_of(read_broker_xml_document(path_or_text))


def artemis_config(root: ElementTree.Element, source: str) -> BrokerConfig:
    """The BrokerConfig of a parsed Artemis or HornetQ configuration (``configuration.load`` calls it)."""
    return _config_of(artemis_document(root, source))


#: elements Artemis added after HornetQ: in a HornetQ file each is applied as Artemis reads it, with a WARNING
ARTEMIS_ONLY_ELEMENTS = frozenset({
    "redelivery-collision-avoidance-factor", "auto-create-dead-letter-resources", "dead-letter-queue-prefix",
    "dead-letter-queue-suffix", "auto-create-expiry-resources", "expiry-queue-prefix", "expiry-queue-suffix",
    "min-expiry-delay", "max-expiry-delay", "no-expiry", "max-redelivery-records", "literal-match-markers",
    "wildcard-addresses", "address-queue-scan-period", "auto-delete-queues", "auto-delete-created-queues",
    "auto-delete-queues-delay", "auto-delete-queues-message-count"})


def _warn_artemis_only(document: BrokerXmlDocument) -> None:
    """A HornetQ file naming an element only Artemis has: a WARNING naming it and its line."""
    elements = [(element, local_name(element)) for settings_list in document.address_settings_lists
                for setting in settings_list for element in setting]
    elements += [(element, local_name(element)) for element in document.artemis_only]
    for element, name in elements:
        if name in ARTEMIS_ONLY_ELEMENTS:
            log.warning("%s, line %s: <%s> is an Artemis element HornetQ did not have; applied as Artemis reads it",
                        document.source, line_of(element), name)


def _config_of(document: BrokerXmlDocument) -> BrokerConfig:
    repository = AddressSettingsRepository.from_broker_xml_document(document)
    hornetq = document.namespace == HORNETQ_NAMESPACE
    if hornetq:
        _warn_artemis_only(document)
    return BrokerConfig(repository, document.max_redelivery_records,
                        document.persist_delivery_count_before_delivery, document.wildcard_routing_enabled,
                        document.source, system="hornetq" if hornetq else "artemis",
                        dialect="hornetq" if hornetq else None, unimplemented=document.unimplemented,
                        message_expiry_scan_period=document.message_expiry_scan_period,
                        address_queue_scan_period=document.address_queue_scan_period,
                        id_cache_size=document.id_cache_size, persist_id_cache=document.persist_id_cache)
