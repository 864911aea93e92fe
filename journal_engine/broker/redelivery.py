"""Redelivery: what a failed delivery leads to, as Artemis's QueueImpl.checkRedelivery decides it.

A reference comes back from its consumer (a rollback, a session rolled back or closed). Its delivery
count is persisted (UPDATE_DELIVERY_COUNT 34); when max_delivery_attempts > 0 and the count reached it,
the reference is dead-lettered; else the redelivery delay of its queue's address applies (or the
caller's override): with a delay the reference is scheduled at now + delay (SET_SCHEDULED_DELIVERY_TIME
36, released to the HEAD of its queue by the timers when due); without one it goes back at once, in
message order (addSorted). Why a module of its own: the delay computation and the schedule are one
decision, taken the same way for every path that returns a reference.
"""
from __future__ import annotations

import random

from .address_settings import AddressSettings
from .dead_letter import DeadLetters
from .post_office import PostOffice
from .queue import DELIVERING, READY, Reference

__all__ = ["Redelivery", "redelivery_delay_ms", "CONSUMER_ROLLBACK", "SESSION_ROLLBACK"]

# why a delivery failed, as a dead-letter copy's delivery history names it
CONSUMER_ROLLBACK = "rollback"                  # Consumer.rollback
SESSION_ROLLBACK = "session-rollback"           # a transacted session rolled back (or closed uncommitted)


def redelivery_delay_ms(settings: AddressSettings, delivery_count: int, override: int | None,
                        rng: random.Random) -> int:
    """Milliseconds before a failed delivery is delivered again: ``override`` (a consumer's
    rollback(delay_ms=...)) when given, capped by the address's ``max_rollback_delay`` when that is set
    (>= 0); else the address's delay for this delivery count (collision avoidance drawn from ``rng``),
    0 for none."""
    if override is not None:
        cap = settings.max_rollback_delay
        return override if cap < 0 or override <= cap else cap
    if settings.redelivery_delay > 0 or settings.redelivery_delays:
        return settings.redelivery_delay_for(delivery_count, rng)
    return 0


class Redelivery:
    """Takes back failed deliveries for the broker (see the module docstring).

    Not thread-safe on its own: every method runs with the broker's lock held.
    """

    __slots__ = ("_post_office", "_dead_letters", "_rng")

    def __init__(self, post_office: PostOffice, dead_letters: DeadLetters, rng: random.Random) -> None:
        self._post_office = post_office
        self._dead_letters = dead_letters
        self._rng = rng

    def cancel(self, ref: Reference, now: int, delay_override: int | None, failure: str = CONSUMER_ROLLBACK, *,
               counted: bool = True) -> None:
        """A failed delivery of a reference that has just left its consumer (state DELIVERING, no longer
        counted as delivering by its queue): dead-lettered, scheduled or back in its queue. ``failure``
        names why, for the delivery history of a dead-letter copy.

        ``counted=False``: the reference was handed back without a failed delivery (its consumer or
        session closed) and its count already lowered (Artemis's cancelRefs); as Artemis's
        checkRedelivery with the redelivery delay ignored, the lowered count is persisted when it
        differs from the persisted one (in strict mode it reaches the operating system, as the
        dispatch's did), the dead-letter rule applies to it, and no delay does.

        When the store fails the error propagates and the reference stays deliverable (READY, in order).
        """
        post_office = self._post_office
        queue = ref.queue
        data = ref.data
        count = ref.delivery_count
        repository = post_office.address_settings
        cached = repository.cached          # an attribute, not a method: loaded first, then called
        settings = cached(queue.address) or repository.get(queue.address)
        stored = bool(data.durable_refs) and queue.durable
        store = post_office.store
        if counted:
            ref.record_failure(now, failure)
        try:
            if stored:
                if counted:
                    store.update_delivery_count(queue.queue_id, data.message_id, count)
                else:
                    store.update_delivery_count_after_cancel(queue.queue_id, data.message_id, count)
            max_attempts = settings.max_delivery_attempts
            if max_attempts > 0 and count >= max_attempts:
                self._dead_letters.dead_letter(ref, settings, now)
                return
            delay = redelivery_delay_ms(settings, count, delay_override, self._rng) if counted else 0
            if delay > 0:
                due = now + delay
                if stored:
                    store.update_scheduled_delivery_time(queue.queue_id, data.message_id, due, count)
                post_office.timers.schedule(ref, due)
                return
        except BaseException:
            if ref.state == DELIVERING:     # the store failed: the message stays, deliverable again
                ref.state = READY
                queue.add_sorted(ref)
            raise
        ref.state = READY
        queue.add_sorted(ref)
        if data.expiration:
            post_office.timers.watch_expiry(ref)
        if queue.waiters:
            queue.condition.notify()
