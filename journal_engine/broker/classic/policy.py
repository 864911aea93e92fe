"""ActiveMQ Classic's RedeliveryPolicy: the delays of a consumer's redeliveries and when they end.

Classic's arithmetic (``RedeliveryPolicy.getNextRedeliveryDelay``, read from its source):

* the first redelivery waits ``initial_redelivery_delay``; each later one asks for the next delay
  given the previous one;
* the next delay is ``redelivery_delay``, unless the previous delay is > 0, exponential back-off is on
  and the multiplier is > 1: then ``int(previous * backoff_multiplier)``, and when that passes
  ``maximum_redelivery_delay`` (-1 = no cap) it becomes ``max(maximum_redelivery_delay, redelivery_delay)``;
* collision avoidance comes AFTER the cap (so it can pass it): ``delay += delay * (±factor * random)``,
  the sign and the magnitude drawn separately, truncated toward zero as Java's ``long +=`` does;
* a consumer's rollback raises the message's redelivery counter; once it passes
  ``maximum_redeliveries`` (-1 = never) the consumer sends a poison ack whose cause names the delivery
  and the policy (``poison_cause``).

Why a module of its own: the consumer-side policy (``create_consumer(redelivery_policy=...)``), the
broker's redelivery plugin and the activemq.xml reader all use the same policy object.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ...limits import JAVA_INT_MAX
from ...errors import ConfigError
from ..artemis.address_settings import java_long, with_collision_variance
from ..arguments import I64_MAX

__all__ = ["ClassicRedeliveryPolicy", "NO_MAXIMUM_REDELIVERIES", "java_double", "poison_cause", "expired_cause"]

#: Classic's RedeliveryPolicy.NO_MAXIMUM_REDELIVERIES
NO_MAXIMUM_REDELIVERIES = -1


def java_double(value: float) -> str:
    """``value`` as Java's Double.toString writes it (5.0, 0.15, 1.0E10), for the policy's text."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    magnitude = abs(value)
    if magnitude == 0 or 1e-3 <= magnitude < 1e7:
        text = repr(float(value))
        return text if "e" not in text else f"{value:.1f}"
    mantissa, exponent = f"{value:e}".split("e")
    digits = repr(float(mantissa))
    return f"{digits}E{int(exponent)}"


@dataclass(frozen=True)
class ClassicRedeliveryPolicy:
    """An ActiveMQ Classic redelivery policy (Classic's defaults; see the module docstring).

    ``maximum_redeliveries``: -1 = redeliver forever; delays are milliseconds; ``maximum_redelivery_delay``
    -1 = no cap. Immutable; ConfigError (a ValueError) names a field with a value it cannot take.
    """

    maximum_redeliveries: int = 6
    initial_redelivery_delay: int = 1000
    redelivery_delay: int = 1000
    use_exponential_backoff: bool = False
    backoff_multiplier: float = 5.0
    maximum_redelivery_delay: int = -1
    use_collision_avoidance: bool = False
    collision_avoidance_factor: float = 0.15
    redelivery_delays: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        delays = tuple(self.redelivery_delays) if isinstance(self.redelivery_delays, (list, tuple)) else None
        if delays is None or not all(_is_int(d) and 0 <= d <= I64_MAX for d in delays):
            raise ConfigError("redelivery_delays", self.redelivery_delays,
                              "must be a sequence of delays in milliseconds (ints >= 0)")
        object.__setattr__(self, "redelivery_delays", delays)
        for name in ("use_exponential_backoff", "use_collision_avoidance"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, getattr(self, name), "must be True or False")
        if not _is_int(self.maximum_redeliveries) or not -1 <= self.maximum_redeliveries <= JAVA_INT_MAX:
            raise ConfigError("maximum_redeliveries", self.maximum_redeliveries,
                              f"must be an int in [-1, {JAVA_INT_MAX}] (-1: no maximum)")
        for name in ("initial_redelivery_delay", "redelivery_delay"):
            value = getattr(self, name)
            if not _is_int(value) or not 0 <= value <= I64_MAX:
                raise ConfigError(name, value, "must be milliseconds, an int >= 0")
        if not _is_int(self.maximum_redelivery_delay) or not -1 <= self.maximum_redelivery_delay <= I64_MAX:
            raise ConfigError("maximum_redelivery_delay", self.maximum_redelivery_delay,
                              "must be milliseconds, an int >= 0, or -1 for no cap")
        for name in ("backoff_multiplier", "collision_avoidance_factor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(name, value, "must be a finite number")
        if not 0 <= self.collision_avoidance_factor <= 1:
            raise ConfigError("collision_avoidance_factor", self.collision_avoidance_factor, "must be in [0, 1]")
        object.__setattr__(self, "backoff_multiplier", float(self.backoff_multiplier))
        object.__setattr__(self, "collision_avoidance_factor", float(self.collision_avoidance_factor))

    def next_redelivery_delay(self, previous_delay: int, rng: random.Random | None = None) -> int:
        """The delay after ``previous_delay`` (Classic's getNextRedeliveryDelay). ``rng`` draws the
        collision avoidance (default: the module's random generator)."""
        delay = self.redelivery_delay
        if previous_delay > 0 and self.use_exponential_backoff and self.backoff_multiplier > 1:
            delay = java_long(previous_delay * self.backoff_multiplier)
            cap = self.maximum_redelivery_delay
            if cap != -1 and delay > cap:
                delay = max(cap, self.redelivery_delay)      # a cap below the delay gives the delay
        if self.use_collision_avoidance:
            delay = with_collision_variance(delay, self.collision_avoidance_factor, rng)
        return delay

    def redelivery_delay_for(self, redelivery_counter: int, rng: random.Random | None = None) -> int:
        """The delay before redelivery number ``redelivery_counter`` (1 = the first), as Classic's consumer
        computes it: ``initial_redelivery_delay``, then ``next_redelivery_delay`` applied
        ``redelivery_counter - 1`` times. 0 or less: no delay.

        Extension: ``redelivery_delays`` lists the delays of the first redeliveries explicitly (entry
        k-1 for redelivery k, collision avoidance applied when on); past its end the arithmetic goes on
        from the last entry."""
        if isinstance(redelivery_counter, bool) or not isinstance(redelivery_counter, int):
            raise TypeError(f"redelivery_counter must be an int, not {type(redelivery_counter).__name__}")
        if redelivery_counter <= 0:
            return 0
        delays = self.redelivery_delays
        if redelivery_counter <= len(delays):
            return self.listed_delay(redelivery_counter - 1, rng)
        delay = delays[-1] if delays else self.initial_redelivery_delay
        for _ in range(redelivery_counter - max(len(delays), 1)):
            delay = self.next_redelivery_delay(delay, rng)
        return delay

    def listed_delay(self, index: int, rng: random.Random | None = None) -> int:
        """Entry ``index`` of ``redelivery_delays``, varied by collision avoidance when that is on."""
        delay = self.redelivery_delays[index]
        if self.use_collision_avoidance:
            delay = with_collision_variance(delay, self.collision_avoidance_factor, rng)
        return delay

    def exceeded(self, redelivery_counter: int) -> bool:
        """Has a message redelivered ``redelivery_counter`` times passed the maximum (the poison ack)?"""
        maximum = self.maximum_redeliveries
        return maximum != NO_MAXIMUM_REDELIVERIES and redelivery_counter > maximum

    def java_text(self) -> str:
        """The policy as Classic prints it (IntrospectionSupport.toString), in the poison ack's cause."""
        values = {
            "destination": "null",
            "collisionAvoidanceFactor": java_double(self.collision_avoidance_factor),
            "maximumRedeliveries": str(self.maximum_redeliveries),
            "maximumRedeliveryDelay": str(self.maximum_redelivery_delay),
            "initialRedeliveryDelay": str(self.initial_redelivery_delay),
            "useCollisionAvoidance": _java_bool(self.use_collision_avoidance),
            "useExponentialBackOff": _java_bool(self.use_exponential_backoff),
            "backOffMultiplier": java_double(self.backoff_multiplier),
            "redeliveryDelay": str(self.redelivery_delay),
            "preDispatchCheck": "true",
        }
        return "RedeliveryPolicy {" + ", ".join(f"{k} = {v}" for k, v in values.items()) + "}"


def poison_cause(delivery: int, policy: ClassicRedeliveryPolicy) -> str:
    """``dlqDeliveryFailureCause`` of a consumer's poison ack: the delivery number and the policy, as the
    Classic broker records the client's Throwable."""
    return f"java.lang.Throwable: Delivery[{delivery}] exceeds redelivery policy limit:{policy.java_text()}, cause:null"


def expired_cause(expiration_ms: int) -> str:
    """``dlqDeliveryFailureCause`` of an expired message sent to a DLQ."""
    return f"java.lang.Throwable: Message Expired. Expiration:{expiration_ms}"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _java_bool(value: bool) -> str:
    return "true" if value else "false"
