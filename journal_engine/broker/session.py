"""Sessions: a group of consumers and sends, transacted or not.

In a transacted session acknowledgements and sends take effect together at ``commit()``: the store
writes them inside one journal transaction as they happen (UPDATE_TX 33 at ack time, ADD_TX 45 and
UPDATE_TX 32 at send time, as Artemis does) and the COMMIT makes them durable and visible at once.
``rollback()`` discards the sends and puts every message delivered in the session and not yet
committed through the redelivery path (its delivery count persisted, dead-lettered when it reached
max_delivery_attempts, redelivered after the redelivery delay otherwise).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .consumer import Consumer

if TYPE_CHECKING:
    from .broker import Broker

__all__ = ["Session"]


class Session:
    """A unit of work. Create it with ``broker.create_session(transacted=...)``."""

    __slots__ = ("_broker", "transacted", "_consumers", "_tx", "_sends", "_acked", "_closed", "__weakref__")

    def __init__(self, broker: "Broker", transacted: bool) -> None:
        self._broker = broker
        self.transacted = transacted
        self._consumers: list[Consumer] = []
        self._tx = None            # the store transaction, opened by the first persistent write
        self._sends: list = []     # (message data, target queues, scheduled time) to enqueue at commit
        self._acked: dict = {}     # reference -> None: acknowledged in the open transaction, in order
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pending_count(self) -> int:
        """Sends and acknowledgements waiting for commit()."""
        return len(self._sends) + len(self._acked)

    def _transaction(self, store):
        """The store transaction of the open unit of work, begun on its first persistent write."""
        tx = self._tx
        if tx is None:
            tx = self._tx = store.transaction()
        return tx

    def create_consumer(self, queue_name: str) -> Consumer:
        """A consumer whose acknowledgements belong to this session."""
        return self._broker._create_consumer(queue_name, self)

    def send(self, address: str, body, *, properties: dict | None = None, durable: bool = True,
             expiration: int = 0, scheduled_delivery_time: int = 0, routing_type: str | None = None) -> int:
        """Send a message (in a transacted session it is routed now and delivered after commit())."""
        return self._broker._send(address, body, properties, durable, expiration, scheduled_delivery_time,
                                  routing_type, self)

    def commit(self) -> None:
        """Make the session's sends and acknowledgements durable and visible, all together."""
        self._broker._commit(self)

    def rollback(self) -> None:
        """Discard the sends; every message delivered in the session and not committed is redelivered
        (or dead-lettered) as after a failed delivery."""
        self._broker._rollback_session(self)

    def close(self) -> None:
        """Close the consumers (their unacknowledged messages go back uncounted) and roll back what
        the open transaction acknowledged (the redelivery path)."""
        self._broker._close_session(self)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = "transacted" if self.transacted else "auto-acknowledge"
        return f"Session({kind}, consumers={len(self._consumers)}, pending={self.pending_count})"
