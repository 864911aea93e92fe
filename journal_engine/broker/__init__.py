"""The broker, in four floors, each importing only the ones below it (tests/project/test_import_rules.py):

* ``artemis/``: Artemis's configuration model the broker is built on (address settings, wildcards, the
  dialect of a copy's properties);
* the common model, the modules of this folder that hold state: messages, queues and their references,
  the post office, timers, dead letters, consumers, sessions, JMS selectors;
* the seed systems' additions: ``classic/`` (ActiveMQ Classic), ``qpid/`` (Qpid Broker-J), ``hornetq/``;
  and ``config/``, which reads every system's configuration file into them;
* the engine, which decides: ``redelivery``, ``delivery``, ``transactions``, ``redrive``, ``dialects``
  and ``broker`` (the Broker, which composes the rest).
"""
from .selector import Selector, SelectorError, compile_selector
from .artemis.address_settings import AddressSettings, AddressSettingsRepository, HierarchicalRepository
from .config.artemis import ArtemisBrokerXml, read_artemis_broker_xml
from .artemis.wildcard import WildcardConfiguration
from .clock import Clock, ManualClock, WallClock
from .message import Message
from .queue import QueueInfo
from .consumer import Consumer
from .session import Session
from .broker import Broker

__all__ = ["Selector", "SelectorError", "compile_selector", "AddressSettings", "AddressSettingsRepository",
           "HierarchicalRepository", "ArtemisBrokerXml", "read_artemis_broker_xml", "WildcardConfiguration",
           "Broker", "Clock", "ManualClock", "WallClock", "Message", "QueueInfo", "Consumer", "Session"]
