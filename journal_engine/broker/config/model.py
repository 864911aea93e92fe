"""``BrokerConfig``: what a configuration file tells the Broker, whichever system's file it was.

Why a module of its own: each system's reader (``artemis`` for Artemis and HornetQ, others beside
it) builds one, and ``configuration`` dispatches to the readers; the result sits below both, so no
reader imports the dispatcher.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..artemis.address_settings import AddressSettingsRepository
from ..classic.config import ClassicBrokerConfig
from ..qpid.queue_policy import QpidVirtualHostContext

__all__ = ["BrokerConfig", "SYSTEMS"]

#: the systems whose configuration files journal_engine recognises
SYSTEMS = ("artemis", "hornetq", "classic", "qpid")


@dataclass
class BrokerConfig:
    """A configuration file read into what the Broker uses.

    ``max_redelivery_records`` and ``persist_delivery_count_before_delivery`` are None when the file
    does not set them (the Broker's arguments then apply); ``dialect`` is "hornetq" for a HornetQ file
    (None: the Broker's argument applies). ``unimplemented`` lists (element path, line) of every
    element the broker does not implement; each was also logged at WARNING on the
    ``journal_engine.config`` logger when the file was read. ``classic``: an ActiveMQ Classic file's
    destination policies and plugins (None for the other systems); the Broker then runs Classic's
    dead-letter rules. ``qpid_context``: a Qpid Broker-J virtual host's queue defaults (its JSON's
    context variables; None for the other systems); the Broker then declares queues by Qpid's rules.
    """

    address_settings: AddressSettingsRepository
    max_redelivery_records: int | None = None                      # None = not in the file (default 10)
    persist_delivery_count_before_delivery: bool | None = None     # None = not in the file (default false)
    wildcard_routing_enabled: bool | None = None
    source: str = "broker.xml"
    system: str = "artemis"                                        # one of SYSTEMS
    dialect: str | None = None
    unimplemented: list[tuple[str, int | None]] = field(default_factory=list)
    classic: ClassicBrokerConfig | None = None
    message_expiry_scan_period: int | None = None                  # ms, -1 = never; None = not in the file
    address_queue_scan_period: int | None = None                   # ms, -1 = never; None = not in the file
    qpid_context: QpidVirtualHostContext | None = None
    id_cache_size: int | None = None                               # None = not in the file (default 20,000)
    persist_id_cache: bool | None = None                           # None = not in the file (default true)
