"""The broker layer: Artemis address settings, wildcards, JMS selectors (and the broker built on them)."""
from .selector import Selector, SelectorError, compile_selector
from .address_settings import AddressSettings, AddressSettingsRepository, HierarchicalRepository
from .config.artemis import ArtemisBrokerXml, read_artemis_broker_xml
from .wildcard import WildcardConfiguration
from .clock import Clock, ManualClock, WallClock
from .message import Message
from .queue import QueueInfo
from .consumer import Consumer
from .session import Session
from .broker import Broker

__all__ = ["Selector", "SelectorError", "compile_selector", "AddressSettings", "AddressSettingsRepository",
           "HierarchicalRepository", "ArtemisBrokerXml", "read_artemis_broker_xml", "WildcardConfiguration",
           "Broker", "Clock", "ManualClock", "WallClock", "Message", "QueueInfo", "Consumer", "Session"]
