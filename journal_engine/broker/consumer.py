"""Consumers: receive, acknowledge, roll back and close, on one queue.

A consumer pulls: ``receive(timeout)`` hands out the message at the head of its queue (None when
nothing is deliverable now and the timeout ran out). The work is done by the broker under its lock;
this class is the handle a user holds.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .message import Message

if TYPE_CHECKING:
    from .broker import Broker
    from .queue import QueueState
    from .session import Session

__all__ = ["Consumer"]


class Consumer:
    """Receives messages from one queue. Thread-safe (the broker serialises the work)."""

    __slots__ = ("_broker", "_queue", "_session", "_delivering", "_closed", "__weakref__")

    def __init__(self, broker: "Broker", queue: "QueueState", session: "Session | None") -> None:
        self._broker = broker
        self._queue = queue
        self._session = session
        self._delivering: dict = {}      # reference -> None, in delivery order: delivered, not yet acknowledged
        self._closed = False

    @property
    def queue(self) -> str:
        """The name of the queue this consumer reads."""
        return self._queue.name

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def session(self) -> "Session | None":
        return self._session

    @property
    def delivering_count(self) -> int:
        """Messages delivered to this consumer and not yet acknowledged, rolled back or returned."""
        return len(self._delivering)

    def receive(self, timeout: float | None = 0.0) -> Message | None:
        """The next deliverable message, or None.

        timeout is in seconds: 0 returns at once (and never sleeps, with any clock), None waits until
        a message comes. Each delivery raises the message's delivery count by one (1 on the first).
        """
        return self._broker._receive(self, timeout)

    def ack(self, message: Message) -> None:
        """Acknowledge a message this consumer received: it leaves the queue (in a transacted session:
        at commit). Acknowledging twice, or a message of another consumer, raises MessageStateError."""
        self._broker._acknowledge(self, message)

    def rollback(self, message: Message, delay_ms: int | None = None) -> None:
        """A failed delivery: the redelivery path (delivery count persisted; dead-lettered when it
        reaches max_delivery_attempts; else redelivered after the address's redelivery delay).

        delay_ms, when given, replaces the address's redelivery delay for this one redelivery.
        """
        self._broker._rollback(self, message, delay_ms)

    def close(self) -> None:
        """Stop consuming. Unacknowledged messages go back to the queue without counting a failed
        delivery (Artemis takes the delivery count back). Closing twice is harmless."""
        self._broker._close_consumer(self)

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"delivering={len(self._delivering)}"
        return f"Consumer(queue={self._queue.name!r}, {state})"
