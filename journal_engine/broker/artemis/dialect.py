"""The property names Artemis gives dead-letter and expiry copies, and the shape every dialect shares.

A dialect is what a broker family calls the properties of a copy: where it came from, its queue, its
message id, its routing type and when it expired; and the property of a message's duplicate id. Artemis names them ``_AMQ_ORIG_*``; HornetQ, its
ancestor, ``_HQ_ORIG_*`` (broker/hornetq/dialect.py)."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Dialect", "ARTEMIS"]


@dataclass(frozen=True)
class Dialect:
    """The property names a broker family gives dead-letter and expiry copies."""

    name: str
    orig_address: str
    orig_queue: str
    orig_message_id: str
    orig_routing_type: str | None      # None: the family has no routing types
    actual_expiry: str
    jms_queue_prefix: str = "jms.queue."
    #: a copy of a copy keeps the FIRST origin (HornetQ's ServerMessageImpl.setOriginalHeaders); Artemis's
    #: referenceOriginalMessage records the latest operation
    keeps_first_origin: bool = False
    #: the property carrying a message's duplicate id (Artemis's Message.HDR_DUPLICATE_DETECTION_ID)
    duplicate_id: str = "_AMQ_DUPL_ID"


#: Artemis's Message.HDR_ORIGINAL_ADDRESS, HDR_ORIGINAL_QUEUE, HDR_ORIG_MESSAGE_ID, HDR_ORIG_ROUTING_TYPE and
#: HDR_ACTUAL_EXPIRY_TIME
ARTEMIS = Dialect("artemis", "_AMQ_ORIG_ADDRESS", "_AMQ_ORIG_QUEUE", "_AMQ_ORIG_MESSAGE_ID",
                  "_AMQ_ORIG_ROUTING_TYPE", "_AMQ_ACTUAL_EXPIRY")
