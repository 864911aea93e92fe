"""The dead-letter path of a broker run with ActiveMQ Classic's rules (``Broker(config=activemq.xml)``).

What Classic does, read from its source (RegionBroker.sendToDeadLetterQueue, the strategies, the two
plugins) and checked against what a real Classic 5.17.2 broker did:

* a consumer's failure is a **poison ack** (a rollback by a consumer without a ClassicRedeliveryPolicy,
  or a consumer whose policy's maximum was passed); an **expired** message goes the same way; a poison
  ack on a non-durable topic subscription drops the message (TopicSubscription.acknowledge only counts it),
  and so does its expiry (TopicSubscription.dispatchMatched discards it);
* the redelivery plugin, when configured, takes a poison ack first (``classic_plugins``): it schedules
  the message again (any consumer may take it when due, the delay recorded as ``redeliveryDelay``), or
  dead-letters it, or drops it;
* on the way to the DLQ the discarding-DLQ plugin may drop it; then the dead-letter strategy of the
  destination's policy entry decides (``dead_letter_strategy``): not at all (audit duplicate,
  non-persistent, expired) or to which DLQ;
* a message whose DLQ is the destination it failed on (a DLQ entry failing again under the shared
  strategy) is not re-added: dropped;
* the DLQ copy keeps the message id the consumer saw (the store gives it an id of its own and keeps
  the visible one beside it), gets ``originalDestination`` (``queue://orders``), ``dlqDeliveryFailureCause``
  (the poison ack's cause, or ``java.lang.Throwable: Message Expired. Expiration:<ms>``) and, for a
  non-persistent message, ``originalDeliveryMode`` = ``NON_PERSISTENT``; the copy is persistent; its
  expiration is the strategy's ``expiration`` after now, or, without one, none and
  ``originalExpiration`` records the message's (0 when none; the first record is kept, as Classic's
  stampAsExpired does); and, beyond Classic, the account every dead-letter copy carries here
  (``_JE_DEAD_LETTER_REASON`` ``poison-ack`` or ``expired``, its time, delivery count and history; see
  ``dead_letter``). A queue DLQ is created on first use (anycast,
  durable); a topic DLQ reaches the subscriptions it has (none: dropped). The move is one store
  transaction, as an Artemis dead-letter move.

Every message dropped on this path is logged on the ``journal_engine.broker`` logger at WARNING,
naming the queue, the destination and why (the discarding-DLQ plugin's drops at DEBUG, with its
report every ``reportInterval`` drops at INFO, as Classic logs them).
"""
from __future__ import annotations

import random

from .config import ClassicBrokerConfig
from .destinations import ClassicDestination, destination_of_queue
from .plugins import REDELIVERY_DELAY_PROPERTY
from .policy import expired_cause
from ..artemis.dialect import Dialect
from ..dead_letter import (DLQ_DELIVERY_FAILURE_CAUSE, DeadLetterReason, DeadLetters, add_account, keeping_copy, log,
                           log_drop)
from ..post_office import PostOffice
from ..queue import EXPIRED, KILLED, AddressState, Reference

__all__ = ["ClassicDeadLetters", "ORIGINAL_DESTINATION", "ORIGINAL_EXPIRATION", "DLQ_DELIVERY_FAILURE_CAUSE",
           "ORIGINAL_DELIVERY_MODE"]

ORIGINAL_DESTINATION = "originalDestination"
ORIGINAL_EXPIRATION = "originalExpiration"
ORIGINAL_DELIVERY_MODE = "originalDeliveryMode"


class ClassicDeadLetters(DeadLetters):
    """Dead letters and expiry by Classic's rules (see the module docstring). Not thread-safe on its
    own: every method runs with the broker's lock held."""

    __slots__ = ("config", "_rng")

    def __init__(self, post_office: PostOffice, dialect: Dialect, config: ClassicBrokerConfig,
                 rng: random.Random) -> None:
        super().__init__(post_office, dialect)
        self.config = config
        self._rng = rng

    # ------------------------------------------------------------------------------- entry points
    def poison(self, ref: Reference, cause: str | None, now: int) -> None:
        """A poison ack of a reference that has just left its consumer, down Classic's path (the
        module docstring)."""
        destination = self._destination_of(ref)
        if not destination.is_queue and not ref.queue.durable:
            # TopicSubscription.acknowledge: a non-durable subscription's poison ack only updates its
            # statistics; neither the redelivery plugin nor a DLQ sees the message
            self._drop(ref, KILLED, destination, "a poison ack on a non-durable topic subscription only updates "
                       "its statistics (TopicSubscription.acknowledge)")
            return
        plugin = self.config.redelivery_plugin
        if plugin is None:
            self.send_to_dead_letter_queue(ref, cause, now, expired=False)
            return
        policy = plugin.policy_for(destination)
        if policy is None:
            if plugin.fallback_to_dead_letter:
                self.send_to_dead_letter_queue(ref, cause, now, expired=False)
            else:
                self._drop(ref, KILLED, destination, "no redelivery policy matches (fallbackToDeadLetter is false)")
            return
        data = ref.data
        delay = plugin.delay_for(policy, ref.delivery_count - 1, self._rng)
        if delay is None:
            if plugin.send_to_dlq_if_max_retries_exceeded:
                self.send_to_dead_letter_queue(ref, cause, now, expired=False)
            else:
                self._drop(ref, KILLED, destination, f"past the redelivery policy's maximumRedeliveries "
                           f"({policy.maximum_redeliveries}; sendToDlqIfMaxRetriesExceeded is false)")
            return
        data.set_property(REDELIVERY_DELAY_PROPERTY, delay)
        self._post_office.schedule_again(ref, now + delay)

    def expire(self, ref: Reference, now: int) -> None:
        """An expired reference (READY): to the DLQ with the expiry cause, by the same rules; on a
        non-durable topic subscription discarded (TopicSubscription.dispatchMatched; Topic's expiry task
        sees only what durable subscriptions keep)."""
        destination = self._destination_of(ref)
        if not destination.is_queue and not ref.queue.durable:
            self._drop(ref, EXPIRED, destination, "expired on a non-durable topic subscription, which discards it "
                       "(TopicSubscription.dispatchMatched)")
            return
        self.send_to_dead_letter_queue(ref, expired_cause(ref.data.expiration), now, expired=True)

    def send_to_dead_letter_queue(self, ref: Reference, cause: str | None, now: int, *, expired: bool) -> None:
        """The discarding-DLQ plugin, then the destination's strategy, then the move (module docstring)."""
        reason = EXPIRED if expired else KILLED
        destination = self._destination_of(ref)
        discarding = self.config.discarding_plugin
        if discarding is not None:
            why = discarding.drop_reason(destination)
            if why is not None:
                log.debug("Discarding DLQ BrokerFilter[%s] - skipping message %s of queue %r (%s)", why,
                          ref.data.public_id, ref.queue.name, destination.qualified_name)
                discarding.count_drop(log)
                self._discard(ref, reason)
                return
        data = ref.data
        properties = dict(data.properties) if data.properties else {}
        strategy = self.config.strategy_for(destination)
        producer = properties.get(ORIGINAL_DESTINATION) or destination.qualified_name
        why = strategy.accepts(destination, producer, data.public_id, persistent=data.durable, expired=expired)
        if why is not None:
            self._drop(ref, reason, destination, why)
            return
        queue = ref.queue
        subscription = queue.name if not destination.is_queue and queue.durable else None
        dead_letter_queue = strategy.dead_letter_queue_for(destination, subscription)
        if dead_letter_queue == destination:
            self._drop(ref, reason, destination, "it is on its own DLQ already (not re-added)")
            return
        target = self._dead_letter_target(dead_letter_queue, now)
        if target is None:
            self._drop(ref, reason, destination, f"its DLQ {dead_letter_queue.qualified_name} has no subscription")
            return
        properties[ORIGINAL_DESTINATION] = destination.qualified_name
        expiration = 0
        if strategy.expiration > 0:
            expiration = now + strategy.expiration
        else:
            properties.setdefault(ORIGINAL_EXPIRATION, data.expiration)     # stampAsExpired: the first one kept
        if cause is not None:
            properties[DLQ_DELIVERY_FAILURE_CAUSE] = cause
        if not data.durable:
            properties[ORIGINAL_DELIVERY_MODE] = "NON_PERSISTENT"
        cause = _copy_reason(reason)
        add_account(properties, cause, now, ref.delivery_count, ref.failures or ())
        copy = keeping_copy(data, self._post_office.new_message_id(), target.name, properties, expiration=expiration)
        self.move_copy(ref, copy, target, reason, cause)

    # ------------------------------------------------------------------------------- helpers
    @staticmethod
    def _destination_of(ref: Reference) -> ClassicDestination:
        queue = ref.queue
        return destination_of_queue(queue.address, queue.routing_type)

    def _dead_letter_target(self, destination: ClassicDestination, now: int) -> AddressState | None:
        """The address a DLQ copy goes to: a queue DLQ is created on first use; a topic DLQ only has the
        subscriptions it has."""
        post_office = self._post_office
        target = post_office.addresses.get(destination.name)
        if target is not None and target.has_queues():
            return target
        if not destination.is_queue:
            return None
        if destination.name not in post_office.queues:
            post_office.create_queue(destination.name, destination.name, "anycast", None, True, auto_created=True,
                                     now_ms=now)
        return post_office.addresses.get(destination.name)

    def _drop(self, ref: Reference, reason: str, destination: ClassicDestination, why: str) -> None:
        log_drop("ActiveMQ Classic", ref.data, ref.queue.name, _copy_reason(reason),
                 f"{why} ({destination.qualified_name})")
        self._discard(ref, reason)

    def _discard(self, ref: Reference, reason: str) -> None:
        self._post_office.drop(ref, reason, _copy_reason(reason))


def _copy_reason(reason: str) -> str:
    """The DeadLetterReason of a reference leaving by Classic's rules as ``reason`` (KILLED, EXPIRED):
    Classic dead-letters only on a poison ack."""
    return DeadLetterReason.EXPIRED if reason is EXPIRED else DeadLetterReason.POISON_ACK
