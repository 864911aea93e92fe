"""Redelivery: what a failed delivery leads to, as Artemis's QueueImpl.checkRedelivery decides it (and,
where a queue or a consumer says so, as Qpid Broker-J or ActiveMQ Classic do).

A reference comes back from its consumer (a rollback, a session rolled back or closed). When
max_delivery_attempts > 0 and its delivery count reached it, the reference is dead-lettered; else the
redelivery delay of its queue's address applies (or the caller's override): with a delay the reference
is scheduled at now + delay, released to the HEAD of its queue by the timers when due; without one it
goes back at once, in message order (addSorted). Why a module of its own: the delay computation and
the schedule are one decision, taken the same way for every path that returns a reference.

What reaches the store is one unit per outcome, so a crash keeps the rollback whole or not at all:
back at once, the count (UPDATE_DELIVERY_COUNT 34); scheduled, the count and the time (36) as one
record group (``post_office.schedule_again``); dead-lettered or dropped, the move's transaction or
the acknowledgement alone. Artemis persists the count before it dead-letters, and a crash between
the two leaves the message counted up in its queue, neither where it was nor moved; here the count
goes with the reference into the dead-letter copy (``_JE_ORIG_DELIVERY_COUNT``).

Three other rules replace the address settings' when they apply (written the same way):

* a Qpid queue (``queue.qpid_policy``, from its queue-declare arguments, ``qpid``): at the maximum
  delivery count the message goes to the queue's alternate destination (``<queue>_DLE`` with the DLQ
  enabled; keeping its id; ``DeadLetters.route_keeping_id``), or is discarded without one; below it,
  back at once;
* a consumer with a ClassicRedeliveryPolicy: the message's redelivery counter becomes its delivery
  count; past the policy's maximum a poison ack (cause: ``classic_policy.poison_cause``), else back
  after the policy's delay for that counter;
* a broker run with a Classic activemq.xml: any other failure is a poison ack at once. A poison ack
  goes down Classic's dead-letter path (``classic``); on an Artemis broker, to the address settings'
  dead-letter address, the cause recorded on the message as ``dlqDeliveryFailureCause`` (Artemis's
  OpenWire AMQConsumer does the same).
"""
from __future__ import annotations

import random

from .artemis.address_settings import AddressSettings
from .classic.dead_letters import DLQ_DELIVERY_FAILURE_CAUSE, ClassicDeadLetters
from .classic.policy import ClassicRedeliveryPolicy, poison_cause
from .dead_letter import DeadLetterReason, DeadLetters
from .post_office import PostOffice
from .queue import DELIVERING, Reference

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

    __slots__ = ("_post_office", "_dead_letters", "_rng", "_classic")

    def __init__(self, post_office: PostOffice, dead_letters: DeadLetters, rng: random.Random) -> None:
        self._post_office = post_office
        self._dead_letters = dead_letters
        self._rng = rng
        # Classic's dead-letter path when the broker runs with an activemq.xml
        self._classic = dead_letters if isinstance(dead_letters, ClassicDeadLetters) else None

    @property
    def by_classic_rules(self) -> bool:
        """Does the broker run with ActiveMQ Classic's rules (an activemq.xml or a ClassicBrokerConfig)?"""
        return self._classic is not None

    def cancel(self, ref: Reference, now: int, delay_override: int | None, failure: str = CONSUMER_ROLLBACK, *,
               counted: bool = True, policy: ClassicRedeliveryPolicy | None = None) -> None:
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
        """
        queue = ref.queue
        if counted:
            ref.record_failure(now, failure)
        try:
            if policy is None and queue.qpid_policy is None and self._classic is None:
                # Artemis's checkRedelivery, by the queue's address settings
                post_office = self._post_office
                count = ref.delivery_count
                repository = post_office.address_settings
                cached = repository.cached          # an attribute, not a method: loaded first, then called
                settings = cached(queue.address) or repository.get(queue.address)
                max_attempts = settings.max_delivery_attempts
                if max_attempts > 0 and count >= max_attempts:
                    self._dead_letters.dead_letter(ref, settings, now)
                    return
                delay = redelivery_delay_ms(settings, count, delay_override, self._rng) if counted else 0
                if delay > 0:
                    post_office.schedule_again(ref, now + delay)
                    return
                self._persist_count(ref, counted)
            elif self._by_other_rules(ref, now, delay_override, policy, counted):
                return
        except BaseException:
            if ref.state == DELIVERING:     # the store failed: the message stays, deliverable again
                ref.back_to_ready()
                queue.add_sorted(ref)
            raise
        ref.back_to_ready()                 # back at once, in message order
        queue.add_sorted(ref)
        if ref.data.expiration:
            self._post_office.timers.watch_expiry(ref)
        if queue.waiters:
            queue.condition.notify()

    def _persist_count(self, ref: Reference, counted: bool) -> None:
        """The delivery count of a stored reference that goes back at once (UPDATE_DELIVERY_COUNT 34;
        ``counted=False``: a count lowered by a close, under update_delivery_count_after_cancel's rule)."""
        data = ref.data
        queue = ref.queue
        if data.durable_refs and queue.durable:
            store = self._post_office.store
            if counted:
                store.update_delivery_count(queue.queue_id, data.message_id, ref.delivery_count)
            else:
                store.update_delivery_count_after_cancel(queue.queue_id, data.message_id, ref.delivery_count)

    def _by_other_rules(self, ref: Reference, now: int, delay_override: int | None,
                        policy: ClassicRedeliveryPolicy | None, counted: bool) -> bool:
        """Qpid's rule, a Classic consumer's policy or Classic's poison ack (module docstring): True when
        the reference was dead-lettered, dropped or scheduled. Not ``counted`` (a consumer went away):
        only Qpid's rule applies, to the lowered count."""
        count = ref.delivery_count
        qpid = ref.queue.qpid_policy
        delay = delay_override or 0
        if qpid is not None:
            if qpid.reached(count):
                self._dead_letters.route_keeping_id(ref, qpid.alternate_of(ref.queue.name), now, expired=False,
                                                    system="Qpid Broker-J")
                return True
        elif not counted:
            self._persist_count(ref, counted)
            return False
        elif policy is not None:
            if policy.exceeded(count):
                self._poison(ref, poison_cause(count, policy), now)
                return True
            if delay_override is None:
                delay = policy.redelivery_delay_for(count, self._rng)
        else:
            self._poison(ref, None, now)
            return True
        if delay > 0:
            self._post_office.schedule_again(ref, now + delay)
            return True
        self._persist_count(ref, counted)
        return False

    def _poison(self, ref: Reference, cause: str | None, now: int) -> None:
        """A poison ack: Classic's dead-letter path, or (on an Artemis broker) the address settings'."""
        if self._classic is not None:
            self._classic.poison(ref, cause, now)
            return
        if cause is not None:       # Artemis's OpenWire poison ack records the cause on the message itself
            ref.data.set_property(DLQ_DELIVERY_FAILURE_CAUSE, cause)
        repository = self._post_office.address_settings
        self._dead_letters.dead_letter(ref, repository.get(ref.queue.address), now, DeadLetterReason.POISON_ACK)
