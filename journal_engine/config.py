"""Configuration files read into a ``BrokerConfig`` (``journal_engine.config.load``).

``load(path_or_text)`` recognises an Artemis broker.xml, a HornetQ configuration or an ActiveMQ
Classic activemq.xml by its root element and reads it; ``Broker(directory, config=...)`` takes the
same argument. The implementation lives in ``journal_engine.broker.config`` (``systems``); this module is
the public path. docs/configuration.md lists what each system's file may say.
"""
from .broker.config.model import SYSTEMS, BrokerConfig
from .broker.config.systems import READERS, detect_system, load
from .errors import ConfigError

__all__ = ["load", "BrokerConfig", "ConfigError", "detect_system", "READERS", "SYSTEMS"]
