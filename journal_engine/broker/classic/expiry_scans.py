"""ActiveMQ Classic's expiry scans: one per destination, each at its own period.

Classic schedules a destination's ``expireMessagesTask`` when the destination starts, every
``expireMessagesPeriod`` ms of its policy entry (Queue.start, Topic.start: ``executePeriodically`` only
when the period is > 0; BaseDestination's default 30,000 ms), and a run expires the messages whose
expiration it has passed (Message.isExpired: ``now > expiration``). A topic's task sees only what its
durable subscriptions keep; a non-durable subscription discards an expired message when it meets it.
Here that is one time per watched reference: when its destination's scan first sees it expired. The
broker's expiry heap is keyed by it and its expiry scan runs at every key, so each destination's scans
happen at their times without a timer per destination. Why a module of its own: the rule is Classic's,
and Artemis's broker-wide scan (``message-expiry-scan-period``) keys the heap by the expiration itself.
"""
from __future__ import annotations

from ..queue import QueueState, Reference
from .config import ClassicBrokerConfig
from .destinations import destination_of_queue

__all__ = ["DestinationExpiryScans"]


class DestinationExpiryScans:
    """``scans(ref)``: the time the scan of ``ref``'s destination first finds it expired (None: never),
    by the destinations' periods in ``config``. A queue's scans count from its ``created_ms`` (a
    recovered queue's: the broker's start, as a restarted Classic broker starts its destinations)."""

    __slots__ = ("_config", "_periods")

    def __init__(self, config: ClassicBrokerConfig) -> None:
        self._config = config
        self._periods: dict[int, int] = {}      # queue id -> its destination's period (ms, <= 0: never)

    def _period_of(self, queue: QueueState) -> int:
        period = self._periods.get(queue.queue_id)
        if period is None:
            destination = destination_of_queue(queue.address, queue.routing_type)
            scanned = destination.is_queue or queue.durable
            period = self._config.expire_messages_period_for(destination) if scanned else 0
            self._periods[queue.queue_id] = period
        return period

    def __call__(self, ref: Reference) -> int | None:
        queue = ref.queue
        period = self._period_of(queue)
        if period <= 0:
            return None
        start = queue.created_ms
        runs = max(1, (ref.data.expiration - start) // period + 1)     # the first run after the expiration
        return start + runs * period
