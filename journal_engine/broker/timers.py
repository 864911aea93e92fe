"""The broker's two timers: references scheduled for a later delivery, and READY references that will
expire.

A scheduled reference (sent with a delivery time, or waiting for its redelivery delay) waits in a heap
until due, then goes to the HEAD of its queue, earliest first, as Artemis's ScheduledDeliveryHandler
adds them. A READY reference with an expiration is watched in a second heap so the reaper finds it
without scanning queues. Why one object: enqueueing, redelivery and the reaper all put references on
these heaps, and the heaps and their tiebreak (the order of equal times) belong to nobody else.
Not thread-safe on its own: every method runs with the broker's lock held.
"""
from __future__ import annotations

import heapq
import itertools

from .queue import READY, SCHEDULED, QueueState, Reference

__all__ = ["DeliveryTimers"]


class DeliveryTimers:
    """The scheduled-delivery heap and the expiry heap. ``wake_waiters``: a newly scheduled reference
    wakes the sleeping receivers of its queue so they recompute their wait (not with a manual clock,
    whose moves wake them instead)."""

    __slots__ = ("_scheduled", "_expiring", "_tiebreak", "_wake_waiters", "pending")

    def __init__(self, *, wake_waiters: bool) -> None:
        self._scheduled: list = []          # heap of (due ms, tiebreak, reference)
        self._expiring: list = []           # heap of (expiration ms, tiebreak, reference) of READY references
        self._tiebreak = itertools.count()
        self._wake_waiters = wake_waiters
        # Is anything scheduled or watched for expiry? A plain attribute, because every receive reads it:
        # read it freely; every method below that changes a heap keeps it current.
        self.pending = False

    def clear(self) -> None:
        """Forget every scheduled and watched reference (a closed broker's)."""
        self._scheduled.clear()
        self._expiring.clear()
        self.pending = False

    def next_due_ms(self) -> int | None:
        """The earliest scheduled time (epoch ms; stale entries included), or None."""
        scheduled = self._scheduled
        return scheduled[0][0] if scheduled else None

    def schedule(self, ref: Reference, due_ms: int) -> None:
        """Keep ``ref`` out of reach until ``due_ms`` (its state becomes SCHEDULED)."""
        queue = ref.queue
        ref.state = SCHEDULED
        queue.scheduled += 1
        heapq.heappush(self._scheduled, (due_ms, next(self._tiebreak), ref))
        self.pending = True
        if queue.waiters and self._wake_waiters:
            queue.condition.notify_all()        # a sooner due time: sleeping receivers recompute their wait

    def watch_expiry(self, ref: Reference) -> None:
        """Watch a READY reference whose message has an expiration, for the reaper."""
        heapq.heappush(self._expiring, (ref.data.expiration, next(self._tiebreak), ref))
        self.pending = True

    def release_due(self, now: int) -> None:
        """Scheduled references due by ``now`` go to the head of their queues, earliest first; those with
        an expiration are watched; one receiver per released reference is woken."""
        heap = self._scheduled
        if heap and heap[0][0] <= now:
            due: dict[QueueState, list[Reference]] = {}
            while heap and heap[0][0] <= now:
                ref = heapq.heappop(heap)[2]
                if ref.state != SCHEDULED:
                    continue
                ref.state = READY
                ref.queue.scheduled -= 1
                due.setdefault(ref.queue, []).append(ref)
            for queue, refs in due.items():
                queue.ready.extendleft(reversed(refs))
                for ref in refs:
                    if ref.data.expiration:
                        self.watch_expiry(ref)
                if queue.waiters:
                    queue.condition.notify(len(refs))
            self.pending = bool(heap or self._expiring)

    def pop_expired(self, now: int) -> Reference | None:
        """The next watched reference that is still READY and expired by ``now`` (taken off the heap), or
        None. Entries of references that left READY meanwhile are dropped on the way."""
        expiring = self._expiring
        ref = None
        while expiring and expiring[0][0] <= now:
            candidate = heapq.heappop(expiring)[2]
            if candidate.state == READY:
                ref = candidate
                break
        self.pending = bool(self._scheduled or expiring)
        return ref

    def scheduled_on(self, queue: QueueState) -> list[Reference]:
        """The references of ``queue`` that are scheduled now."""
        return [entry[2] for entry in self._scheduled if entry[2].queue is queue and entry[2].state == SCHEDULED]
