"""Address settings and the broker.xml reader, under the name they have always been imported by.

The code lives in ``address_settings`` (the settings and their repositories), ``config_xml`` (XML to
plain values) and ``broker_xml`` (the broker.xml reader); this module only gathers their public names,
so ``from journal_engine.broker.settings import ...`` keeps working.
"""
from __future__ import annotations

from .address_settings import (ADDRESS_SETTINGS_DEFAULTS, AddressSettings, AddressSettingsRepository,
                               HierarchicalRepository)
from .broker_xml import ArtemisBrokerXml, read_artemis_broker_xml
from .config_xml import ARTEMIS_IGNORED_ADDRESS_SETTING_ELEMENTS

__all__ = ["AddressSettings", "HierarchicalRepository", "AddressSettingsRepository", "ArtemisBrokerXml",
           "read_artemis_broker_xml", "ADDRESS_SETTINGS_DEFAULTS", "ARTEMIS_IGNORED_ADDRESS_SETTING_ELEMENTS"]
