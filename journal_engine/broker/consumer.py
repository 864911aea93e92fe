"""Consumers: receive, acknowledge, roll back and close, on one queue.

A consumer pulls: ``receive(timeout)`` hands out the message at the head of its queue (None when
nothing is deliverable now and the timeout ran out). Each step takes the broker's lock, keeps the
consumer's own books (the deliveries it holds, whether it is closed) and calls the broker's side for
the queue and store work, through the ConsumerOperations the broker gave this consumer. Why the
consumer takes the lock itself: its books change in the same step as the queue's, and a step is then
one call into the broker's side instead of several calls back into the consumer (this is the hot
path: every message passes here twice).
"""
from __future__ import annotations

from typing import Any

from .message import Message
from .operations import AcknowledgingSession, ConsumerOperations
from .queue import QueueState, Reference

__all__ = ["Consumer"]


class Consumer:
    """Receives messages from one queue. Create it with ``broker.create_consumer(queue)`` or
    ``session.create_consumer(queue)``. Thread-safe (the broker serialises the work)."""

    __slots__ = ("_queue", "_session", "_lock", "_next_delivery", "_acknowledge", "_rollback", "_operations",
                 "_delivering", "_closed", "_redelivery_policy", "__weakref__")

    def __init__(self, operations: ConsumerOperations, queue: QueueState,
                 session: AcknowledgingSession | None, redelivery_policy: Any = None) -> None:
        self._queue = queue
        self._redelivery_policy = redelivery_policy
        self._session = session
        self._operations = operations
        # bound once: each message calls them (loaded into a local before the call: a callable held in an
        # attribute is not a method, and calling it as one costs a generic lookup)
        self._lock = operations.lock
        self._next_delivery = operations.next_delivery
        self._acknowledge = operations.acknowledge
        self._rollback = operations.rollback
        # undecided deliveries, in delivery order: the Message handed out -> its queue reference
        self._delivering: dict[Message, Reference] = {}
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
    def redelivery_policy(self) -> Any:
        """The consumer's ClassicRedeliveryPolicy (its rollbacks follow it), or None."""
        return self._redelivery_policy

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
        deadline = self._operations.deadline(timeout) if timeout is not None and timeout != 0 else None
        next_delivery = self._next_delivery
        lock = self._lock
        lock.acquire()
        try:
            ref = next_delivery(self, self._queue, timeout, deadline, self._closed)
            if ref is None:
                return None
            count = ref.delivery_count
            queue = ref.queue
            message = Message(ref.data, count, queue.name, ref, self)
            ref.delivery = message
            self._delivering[message] = ref
            queue.messages_delivered += 1       # the queue's counts of what it handed out (the metrics)
            if count > 1:
                queue.messages_redelivered += 1
            return message
        finally:
            lock.release()

    def ack(self, message: Message) -> None:
        """Acknowledge a message this consumer received: it leaves the queue (in a transacted session:
        at commit). Acknowledging twice, or a message of another consumer, raises MessageStateError;
        a non-Message raises TypeError."""
        acknowledge = self._acknowledge
        lock = self._lock
        lock.acquire()
        try:
            delivering = self._delivering
            ref = delivering.get(message) if type(message) is Message else None
            acknowledge(self, self._session, message, ref)      # raises, changing nothing, unless ours
            del delivering[message]
        finally:
            lock.release()

    def rollback(self, message: Message, delay_ms: int | None = None) -> None:
        """A failed delivery: the redelivery path (delivery count persisted; dead-lettered when it
        reaches max_delivery_attempts; else redelivered after the address's redelivery delay).

        delay_ms, when given, replaces the address's redelivery delay for this one redelivery
        (ValueError unless an int >= 0). Raises MessageStateError as ack() does.
        """
        if delay_ms is not None:
            self._operations.check_delay(delay_ms)
        rollback = self._rollback
        lock = self._lock
        lock.acquire()
        try:
            ref = self._delivering.pop(message, None) if type(message) is Message else None
            # raises, changing nothing, when ref is None
            rollback(self, message, ref, delay_ms, self._redelivery_policy)
        finally:
            lock.release()

    def close(self) -> None:
        """Stop consuming. Unacknowledged messages go back to the queue without counting a failed
        delivery (Artemis takes the delivery count back). Closing twice is harmless."""
        self._operations.close(self)

    # -- the broker's side: called with the broker's lock held, not by applications
    def take_deliveries(self) -> list[Reference]:
        """Let go of every reference held, returned in delivery order."""
        refs = list(self._delivering.values())
        self._delivering.clear()
        return refs

    def restore(self, ref: Reference) -> None:
        """Hold ``ref`` again, undecided: its acknowledgement in a transaction was undone (Classic's
        STOMP ABORT) and it stays this consumer's delivery."""
        self._delivering[ref.delivery] = ref

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
