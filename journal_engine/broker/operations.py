"""What a Consumer and a Session ask of their broker, as bundles of callables the broker hands them.

Why: consumer.py and session.py must not import broker.py (which imports them; a TYPE_CHECKING import
is a cycle too). The broker gives each consumer and session the few operations it may call, and the
handles never see the rest of the broker. Each bundle is built per handle, so no reference cycle keeps
a dropped broker alive. The operations take the handle itself as their first argument (a consumer's
``lock``, ``deadline`` and ``check_delay`` are the broker's lock and two argument checks).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .message import Message
from .queue import QueueState, Reference

__all__ = ["ConsumerOperations", "SessionOperations", "AcknowledgingSession"]


@dataclass(frozen=True, slots=True)
class ConsumerOperations:
    """The broker's side of a Consumer. The consumer takes ``lock`` (the broker's) around each step,
    keeps its own deliveries and calls these for the queue and store work; each raises what the
    Consumer's method documents, before changing anything. ``close`` takes the lock itself."""

    lock: Any                                                              # the broker's lock
    deadline: Callable[[float], float]                                     # (timeout) -> monotonic deadline
    next_delivery: Callable[[Any, QueueState, float | None, float | None, bool], Reference | None]
    #                        (consumer, its queue, timeout, deadline, closed) -> the reference to deliver
    acknowledge: Callable[[Any, Any, Message, Reference | None], None]     # (consumer, session, message, ref)
    check_delay: Callable[[Any], None]                                     # (delay_ms) ValueError unless valid
    rollback: Callable[[Any, Message, Reference | None, int | None, Any], None]
    #                  (consumer, message, ref, delay_ms, the consumer's ClassicRedeliveryPolicy or None)
    close: Callable[[Any], None]


@dataclass(frozen=True, slots=True)
class SessionOperations:
    """The broker's side of a Session: each runs under the broker's lock and raises what the
    Session's method of the same name documents."""

    create_consumer: Callable[[str, Any, Any], Any]   # (queue name, session, redelivery policy) -> Consumer
    send: Callable[..., int]                          # (address, body, properties, durable, expiration,
                                                      #  scheduled_delivery_time, routing_type, session, priority)
    commit: Callable[[Any], None]
    rollback: Callable[[Any], None]
    close: Callable[[Any], None]


class AcknowledgingSession(Protocol):
    """What the broker asks of a consumer's session when the consumer acknowledges (a Session)."""

    transacted: bool

    def transaction(self, store: Any) -> Any: ...

    def record_ack(self, ref: Reference, consumer: Any) -> None: ...
