"""Qpid Broker-J's redelivery rules, for a queue declared with Qpid's arguments (``queue.qpid_policy``,
queue_policy.py): at the maximum delivery count the message goes to the queue's alternate destination
(``<queue>_DLE`` with the DLQ enabled; keeping its id: ``DeadLetters.route_keeping_id``), or is discarded
without one; below it, back at once (after the rollback's own delay, when it gives one). A consumer that
goes away hands its messages back uncounted, and the same rule applies to the lowered count.

Why a module of its own: Qpid's rule belongs to the queue, and outranks the consumer's and the broker's
(``redelivery``); the queue carries this object as its ``redelivery_rules`` while it has a Qpid policy.
"""
from __future__ import annotations

from typing import Any

from ..dead_letter import DeadLetters
from ..queue import Reference

__all__ = ["QpidRedeliveryRules"]


class QpidRedeliveryRules:
    """The rules of every queue with a Qpid policy (one object per broker: each queue's policy is read
    from the queue). Not thread-safe on its own: called with the broker's lock held."""

    __slots__ = ("_dead_letters",)

    def __init__(self, dead_letters: DeadLetters) -> None:
        self._dead_letters = dead_letters

    def settle(self, ref: Reference, now: int, delay_override: int | None, counted: bool,
               policy: Any) -> int | None:
        """The queue's maximum delivery count decides: None when the message went to the alternate (or
        was dropped), else the rollback's own delay (0 without one: at once). ``policy``, a
        consumer's, is not read: the queue's rule comes first."""
        queue = ref.queue
        qpid = queue.qpid_policy
        if qpid.reached(ref.delivery_count):
            self._dead_letters.route_keeping_id(ref, qpid.alternate_of(queue.name), now, expired=False,
                                                system="Qpid Broker-J")
            return None
        return delay_override or 0
