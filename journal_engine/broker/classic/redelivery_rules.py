"""ActiveMQ Classic's redelivery rules: the broker's (``Broker(config=activemq.xml)``) and a consumer's
(``create_consumer(redelivery_policy=ClassicRedeliveryPolicy(...))``, on either broker).

* A broker run with Classic's rules: any failed delivery is a poison ack at once, down Classic's
  dead-letter path (``dead_letters``); a consumer that goes away hands its messages back with their
  count kept (and persisted), never dead-lettered for it.
* A consumer with a ClassicRedeliveryPolicy: the message's redelivery counter is its delivery count;
  past the policy's maximum a poison ack (its cause: ``policy.poison_cause``) down the broker's own poison
  path (Classic's, or on an Artemis broker the address settings' dead-letter address: dead_letter.py),
  else back after the policy's delay for that counter (or the rollback's own delay when it gives one).

Why a module of its own: these are the two places Classic decides a failed delivery; ``redelivery``
says when they apply.
"""
from __future__ import annotations

import random

from .policy import ClassicRedeliveryPolicy, poison_cause
from ..dead_letter import DeadLetters
from ..queue import Reference

__all__ = ["ClassicRedeliveryRules", "ConsumerPolicyRules"]


class ClassicRedeliveryRules:
    """The broker's rules when it runs with an activemq.xml (or a ClassicBrokerConfig); ``dead_letters``
    is its ClassicDeadLetters. Not thread-safe on its own: called with the broker's lock held."""

    __slots__ = ("_dead_letters",)

    #: a closing consumer's messages come back redelivered, their count kept (it counts toward the
    #: redelivery plugin's limit)
    close_keeps_count = True
    #: sessions behave as Classic's: a consumer without a policy is a STOMP subscription (transactions.py)
    by_classic_rules = True

    def __init__(self, dead_letters: DeadLetters) -> None:
        self._dead_letters = dead_letters

    def settle(self, ref: Reference, now: int, delay_override: int | None, counted: bool,
               policy: ClassicRedeliveryPolicy | None) -> int | None:
        """A poison ack (None); not ``counted`` (a consumer went away): back at once (0).
        ``delay_override`` and ``policy`` are not read: the poison ack has no delay, and a consumer with
        a policy has rules of its own."""
        if not counted:
            return 0
        self._dead_letters.poison(ref, None, now)
        return None


class ConsumerPolicyRules:
    """A consumer's ClassicRedeliveryPolicy, on either broker (``dead_letters``: the broker's, whose
    ``poison`` is its poison path). ``rng`` draws the policy's collision avoidance. Not thread-safe on its
    own: called with the broker's lock held."""

    __slots__ = ("_dead_letters", "_rng")

    def __init__(self, dead_letters: DeadLetters, rng: random.Random) -> None:
        self._dead_letters = dead_letters
        self._rng = rng

    def settle(self, ref: Reference, now: int, delay_override: int | None, counted: bool,
               policy: ClassicRedeliveryPolicy) -> int | None:
        """``policy`` (the consumer's) decides: past its maximum a poison ack (None), else its delay for
        the count (``delay_override``, a rollback's own delay, instead when given; 0: at once). Not
        ``counted`` (a consumer went away): no poison ack and no delay."""
        if not counted:
            return 0
        count = ref.delivery_count
        if policy.exceeded(count):
            self._dead_letters.poison(ref, poison_cause(count, policy), now)
            return None
        return policy.redelivery_delay_for(count, self._rng) if delay_override is None else delay_override
