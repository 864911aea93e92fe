"""What HornetQ adds on top of the common broker: its names for the properties of dead-letter and
expiry copies (``_HQ_ORIG_*``, no routing type), and its rule that a copy of a copy keeps the first
origin (ServerMessageImpl.setOriginalHeaders). Its configuration file, hornetq-configuration.xml, is
read by broker/config/artemis.py (the format Artemis's broker.xml grew from); ``jms_queue_names``
creates queues under its ``jms.queue.`` prefix."""
from __future__ import annotations

from ..artemis.dialect import Dialect

__all__ = ["HORNETQ"]

HORNETQ = Dialect("hornetq", "_HQ_ORIG_ADDRESS", "_HQ_ORIG_QUEUE", "_HQ_ORIG_MESSAGE_ID", None,
                  "_HQ_ACTUAL_EXPIRY", keeps_first_origin=True, duplicate_id="_HQ_DUPL_ID")
