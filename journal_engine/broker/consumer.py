"""Consumers: receive, acknowledge, roll back and close, on one queue.

A consumer pulls: ``receive(timeout)`` hands out the message at the head of its queue (None when
nothing is deliverable now and the timeout ran out). The work is done by the broker under its lock,
through the ConsumerOperations it gave this consumer; the consumer owns the list of references it holds
in delivery, and the broker changes it only through the methods below.
"""
from __future__ import annotations

from .message import Message
from .operations import AcknowledgingSession, ConsumerOperations
from .queue import QueueState, Reference

__all__ = ["Consumer"]


class Consumer:
    """Receives messages from one queue. Create it with ``broker.create_consumer(queue)`` or
    ``session.create_consumer(queue)``. Thread-safe (the broker serialises the work)."""

    __slots__ = ("_operations", "_queue", "_session", "_delivering", "_closed", "__weakref__")

    def __init__(self, operations: ConsumerOperations, queue: QueueState,
                 session: AcknowledgingSession | None) -> None:
        self._operations = operations
        self._queue = queue
        self._session = session
        self._delivering: dict[Reference, None] = {}    # in delivery order: delivered, not yet acknowledged
        self._closed = False

    @property
    def queue(self) -> str:
        """The name of the queue this consumer reads."""
        return self._queue.name

    @property
    def closed(self) -> bool:
        """True once close() ran (or the consumer's session closed)."""
        return self._closed

    @property
    def session(self) -> AcknowledgingSession | None:
        """The Session this consumer belongs to; None for a consumer of ``broker.create_consumer``."""
        return self._session

    @property
    def delivering_count(self) -> int:
        """Messages delivered to this consumer and not yet acknowledged, rolled back or returned."""
        return len(self._delivering)

    def receive(self, timeout: float | None = 0.0) -> Message | None:
        """The next deliverable message, or None.

        timeout is in seconds: 0 returns at once (and never sleeps, with any clock), None waits until
        a message comes. Each delivery raises the message's delivery count by one (1 on the first).
        Raises JournalClosedError when the consumer or the broker is closed, MessageStateError when
        the queue was deleted, ValueError for a bad timeout.
        """
        return self._operations.receive(self, self._queue, timeout)

    def ack(self, message: Message) -> None:
        """Acknowledge a message this consumer received: it leaves the queue (in a transacted session:
        at commit). Acknowledging twice, or a message of another consumer, raises MessageStateError;
        a non-Message raises TypeError."""
        self._operations.acknowledge(self, self._session, message)

    def rollback(self, message: Message, delay_ms: int | None = None) -> None:
        """A failed delivery: the redelivery path (delivery count persisted; dead-lettered when it
        reaches max_delivery_attempts; else redelivered after the address's redelivery delay).

        delay_ms, when given, replaces the address's redelivery delay for this one redelivery
        (ValueError unless an int >= 0). Raises MessageStateError as ack() does.
        """
        self._operations.rollback(self, message, delay_ms)

    def close(self) -> None:
        """Stop consuming. Unacknowledged messages go back to the queue without counting a failed
        delivery (Artemis takes the delivery count back). Closing twice is harmless."""
        self._operations.close(self)

    # -- the broker's side: called with the broker's lock held, not by applications
    def add_delivery(self, ref: Reference) -> None:
        """Hold ``ref``: it was just delivered to this consumer."""
        self._delivering[ref] = None

    def take_delivery(self, ref: Reference) -> None:
        """Let go of ``ref`` (acknowledged or rolled back); KeyError when it is not held (a bug)."""
        del self._delivering[ref]

    def take_deliveries(self) -> list[Reference]:
        """Let go of every reference held, returned in delivery order."""
        refs = list(self._delivering)
        self._delivering.clear()
        return refs

    def detach(self) -> tuple[QueueState, list[Reference]] | None:
        """Mark the consumer closed; its queue and the references it held (in delivery order), for the
        broker to return. None when it was closed already."""
        if self._closed:
            return None
        self._closed = True
        return self._queue, self.take_deliveries()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"delivering={len(self._delivering)}"
        return f"Consumer(queue={self._queue.name!r}, {state})"
