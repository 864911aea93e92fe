"""Redelivery: what a failed delivery leads to. A reference comes back from its consumer (a rollback,
a session rolled back or closed); a redelivery-rules object decides: it dead-letters the reference (or
drops it, or poison-acks it) itself, or names the delay before the reference is delivered again. With a
delay the reference is scheduled at now + delay, released to the HEAD of its queue by the timers when
due; without one it goes back at once, in message order (addSorted). Why a module of its own: every
path that returns a reference takes it back the same way, here; what the rules are is the seed
systems' (artemis/, classic/, qpid/ ``redelivery_rules``).

Which rules apply, first match:

1. the queue's own (``queue.redelivery_rules``): a Qpid queue's maximum delivery count and alternate;
2. the consumer's ClassicRedeliveryPolicy, when it has one (``classic.redelivery_rules``:
   ``ConsumerPolicyRules``);
3. the broker's, picked once when it is made: Artemis's address settings (QueueImpl.checkRedelivery),
   or, for a broker run with a Classic activemq.xml, Classic's poison ack at once.

What reaches the store is one unit per outcome, so a crash keeps the rollback whole or not at all:
back at once, the count (UPDATE_DELIVERY_COUNT 34); scheduled, the count and the time (36) as one
record group (``post_office.schedule_again``); dead-lettered or dropped, the move's transaction or
the acknowledgement alone. Artemis persists the count before it dead-letters, and a crash between
the two leaves the message counted up in its queue, neither where it was nor moved; here the count
goes with the reference into the dead-letter copy (``_JE_ORIG_DELIVERY_COUNT``).
"""
from __future__ import annotations

from typing import Any, Protocol

from .post_office import PostOffice
from .queue import DELIVERING, Reference

__all__ = ["Redelivery", "RedeliveryRules", "BrokerRedeliveryRules", "CONSUMER_ROLLBACK", "SESSION_ROLLBACK"]

# why a delivery failed, as a dead-letter copy's delivery history names it
CONSUMER_ROLLBACK = "rollback"                  # Consumer.rollback
SESSION_ROLLBACK = "session-rollback"           # a transacted session rolled back (or closed uncommitted)


class RedeliveryRules(Protocol):
    """Decides a failed delivery of a reference that has just left its consumer (state DELIVERING)."""

    def settle(self, ref: Reference, now: int, delay_override: int | None, counted: bool,
               policy: Any) -> int | None:
        """None when the rules dead-lettered, dropped or poison-acked the reference; else the delay
        (ms) before it is delivered again, 0 for at once. ``delay_override``: the rollback's own delay,
        or None; ``counted=False``: handed back by a consumer that went away, its count already lowered
        (or kept, by Classic's rules); ``policy``: the consumer's ClassicRedeliveryPolicy, or None."""
        ...


class BrokerRedeliveryRules(RedeliveryRules, Protocol):
    """The rules of a broker as a whole (Artemis's or Classic's), with the two session behaviours that
    go with them."""

    #: does a closing consumer's message keep its delivery count (Classic), or have it taken back (Artemis)?
    close_keeps_count: bool
    #: do sessions follow ActiveMQ Classic's rules (transactions.py)?
    by_classic_rules: bool


class Redelivery:
    """Takes back failed deliveries for the broker (see the module docstring): ``rules`` are the
    broker's, ``consumer_policy_rules`` apply a consumer's ClassicRedeliveryPolicy.

    Not thread-safe on its own: every method runs with the broker's lock held.
    """

    __slots__ = ("_post_office", "_rules", "_consumer_policy_rules")

    def __init__(self, post_office: PostOffice, rules: BrokerRedeliveryRules,
                 consumer_policy_rules: RedeliveryRules) -> None:
        self._post_office = post_office
        self._rules = rules
        self._consumer_policy_rules = consumer_policy_rules

    @property
    def by_classic_rules(self) -> bool:
        """Does the broker run with ActiveMQ Classic's rules (an activemq.xml or a ClassicBrokerConfig)?"""
        return self._rules.by_classic_rules

    def cancel(self, ref: Reference, now: int, delay_override: int | None, policy: Any = None,
               failure: str = CONSUMER_ROLLBACK, *, counted: bool = True) -> None:
        """A failed delivery of a reference that has just left its consumer (state DELIVERING, no longer
        counted as delivering by its queue): dead-lettered, scheduled or back in its queue. ``failure``
        names why, for the delivery history of a dead-letter copy; ``policy``: the consumer's
        ClassicRedeliveryPolicy, if it has one.

        ``counted=False``: the reference was handed back without a failed delivery (its consumer or
        session closed) and its count already lowered (Artemis's cancelRefs; ActiveMQ Classic keeps it);
        as Artemis's checkRedelivery with the redelivery delay ignored, the count is persisted when it
        differs from the persisted one (in strict mode it reaches the operating system, as the
        dispatch's did), the dead-letter rule applies to it (Qpid's likewise; Classic has none for a
        consumer that goes away), and no delay does.

        When the store fails the error propagates and the reference stays deliverable (READY, in order).
        (A consumer's rollback passes every argument by position: keywords cost the call its fast path.)
        """
        queue = ref.queue
        if counted:
            ref.record_failure(now, failure)
            queue.messages_rolled_back += 1
        rules = queue.redelivery_rules      # the queue's own first, then the consumer's, then the broker's
        if rules is None:
            rules = self._rules if policy is None else self._consumer_policy_rules
        try:
            delay = rules.settle(ref, now, delay_override, counted, policy)
            if delay is None:
                return
            if delay > 0:
                self._post_office.schedule_again(ref, now + delay)
                return
            data = ref.data
            if data.durable_refs and queue.durable:
                # the count of a stored reference going back at once (UPDATE_DELIVERY_COUNT 34; not
                # counted: a count lowered by a close, under update_delivery_count_after_cancel's rule)
                store = self._post_office.store
                if counted:
                    store.update_delivery_count(queue.queue_id, data.message_id, ref.delivery_count)
                else:
                    store.update_delivery_count_after_cancel(queue.queue_id, data.message_id, ref.delivery_count)
        except BaseException:
            if ref.state == DELIVERING:     # the store failed: the message stays, deliverable again
                ref.back_to_ready()
                queue.add_sorted(ref)
            raise
        ref.back_to_ready()                 # back at once, in message order
        queue.add_sorted(ref)
        if data.expiration:
            self._post_office.timers.watch_expiry(ref)
        if queue.waiters:
            queue.condition.notify()
