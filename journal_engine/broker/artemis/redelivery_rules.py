"""Artemis's redelivery rules (QueueImpl.checkRedelivery), by the address settings of the queue's
address: when max_delivery_attempts > 0 and the delivery count reached it, the reference is
dead-lettered; else the redelivery delay applies (or the caller's override), and ``redelivery`` schedules
the reference at now + delay, or without one returns it at once. HornetQ's are the same. A broker
without a Classic configuration follows these (``redelivery`` says when others apply).

Why here, in Artemis's floor: the decision is the address settings' and nothing else's. The broker's
objects it reads and acts through (the post office's settings, the dead letters) sit above this floor,
so they are declared by what is used of them (``SettingsHolder``, ``DeadLetterPath``), not imported.
"""
from __future__ import annotations

import random
from typing import Any, Protocol

from .address_settings import AddressSettings, AddressSettingsRepository

__all__ = ["ArtemisRedeliveryRules", "redelivery_delay_ms", "SettingsHolder", "DeadLetterPath"]


class SettingsHolder(Protocol):
    """What the rules use of the post office: the address settings in force (a broker may replace them)."""

    address_settings: AddressSettingsRepository


class DeadLetterPath(Protocol):
    """What the rules use of the dead letters: the move to the dead-letter address."""

    def dead_letter(self, ref: Any, settings: AddressSettings, now: int) -> None: ...


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


class ArtemisRedeliveryRules:
    """The broker's rules when it runs as Artemis (or HornetQ). Not thread-safe on its own: called
    with the broker's lock held."""

    __slots__ = ("_settings_holder", "_dead_letters", "_rng")

    #: a closing consumer's messages have their delivery count taken back (ServerConsumerImpl.cancelRefs)
    close_keeps_count = False
    #: sessions behave as Artemis's (not as Classic's STOMP subscriptions: transactions.py)
    by_classic_rules = False

    def __init__(self, settings_holder: SettingsHolder, dead_letters: DeadLetterPath, rng: random.Random) -> None:
        self._settings_holder = settings_holder
        self._dead_letters = dead_letters
        self._rng = rng

    def settle(self, ref: Any, now: int, delay_override: int | None, counted: bool, policy: object) -> int | None:
        """checkRedelivery: None when the reference was dead-lettered (or dropped), else the delay
        before it is delivered again (0: at once). Not ``counted`` (a consumer went away): the
        dead-letter rule applies to the lowered count, and no delay does. ``policy`` is not read: a
        consumer with one has rules of its own."""
        # the hot path of a rollback: attribute lookups as few as can be, nothing allocated
        count = ref.delivery_count
        address = ref.queue.address
        repository = self._settings_holder.address_settings
        cached = repository.cached          # an attribute, not a method: loaded first, then called
        settings = cached(address) or repository.get(address)
        max_attempts = settings.max_delivery_attempts
        if max_attempts > 0 and count >= max_attempts:
            self._dead_letters.dead_letter(ref, settings, now)
            return None
        return redelivery_delay_ms(settings, count, delay_override, self._rng) if counted else 0
