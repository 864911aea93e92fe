"""Sessions: a group of consumers and sends, transacted or not.

In a transacted session acknowledgements and sends take effect together at ``commit()``: the store
writes them inside one journal transaction as they happen (UPDATE_TX 33 at ack time, ADD_TX 45 and
UPDATE_TX 32 at send time, as Artemis does) and the COMMIT makes them durable and visible at once.
``rollback()`` discards the sends and puts every message delivered in the session and not yet
committed through the redelivery path (its delivery count persisted, dead-lettered when it reached
max_delivery_attempts, redelivered after the redelivery delay otherwise), each by its consumer's
redelivery policy when it has one. On a broker with ActiveMQ Classic's rules a session's consumer has
the Classic client's default policy unless told otherwise (ActiveMQMessageConsumer.rollback redelivers
under the connection's RedeliveryPolicy before its poison ack); one created with ``redelivery_policy=None``
is a STOMP subscription, whose ABORT only undoes the transaction's acknowledgements: its messages stay
with it, pending.

The session owns its open unit of work (the store transaction, the pending sends, the acknowledged
references) and its consumers; the broker works through the SessionOperations it gave the session and
changes that state only through the methods below.
"""
from __future__ import annotations

import enum
from typing import Any

from ..errors import JournalError
from ..limits import PRIORITY_DEFAULT
from .consumer import Consumer
from .message import MessageData
from .operations import SessionOperations
from .queue import QueueState, Reference

__all__ = ["Session", "ClientDefault", "CLIENT_DEFAULT"]


class ClientDefault(enum.Enum):
    """The type of CLIENT_DEFAULT."""

    POLICY = "the client's default redelivery policy"


#: Session.create_consumer's default redelivery policy: ActiveMQ Classic's client default
#: (``ClassicRedeliveryPolicy()``: 6 redeliveries, then the poison ack) on a broker run with Classic's
#: rules, none on any other.
CLIENT_DEFAULT = ClientDefault.POLICY


class Session:
    """A unit of work. Create it with ``broker.create_session(transacted=...)``. Thread-safe (the broker
    serialises the work); ``commit``/``rollback`` on a non-transacted or closed session raise
    MessageStateError."""

    __slots__ = ("_operations", "transacted", "_consumers", "_tx", "_sends", "_acked", "_closed",
                 "_duplicate_ids", "_refused", "_audited", "__weakref__")

    def __init__(self, operations: SessionOperations, transacted: bool) -> None:
        self._operations = operations
        self.transacted = transacted
        self._consumers: list[Consumer] = []
        self._tx = None            # the store transaction, opened by the first persistent write
        self._sends: list = []     # (message data, target queues, scheduled time) to enqueue at commit
        self._acked: dict = {}     # reference -> its consumer: acknowledged in the open transaction, in order
        self._closed = False
        self._duplicate_ids: list[tuple[str, bytes]] = []   # (address, id) of the sends, remembered at commit
        self._refused: JournalError | None = None      # why the open transaction is rollback-only (a duplicate)
        self._audited: list[tuple[Any, Any]] = []      # (a Classic destination audit, producer key) of the sends

    @property
    def closed(self) -> bool:
        """True once close() ran."""
        return self._closed

    @property
    def pending_count(self) -> int:
        """Sends and acknowledgements waiting for commit()."""
        return len(self._sends) + len(self._acked)

    def create_consumer(self, queue_name: str, *,
                        redelivery_policy: Any = CLIENT_DEFAULT) -> Consumer:
        """A consumer whose acknowledgements belong to this session. ``redelivery_policy``: a
        ClassicRedeliveryPolicy its rollbacks (and this session's) follow, as Broker.create_consumer's;
        by default Classic's client default on a broker with Classic's rules, else none (module
        docstring). UnknownQueueError for an unknown queue; MessageStateError when the session is
        closed; TypeError for anything but a ClassicRedeliveryPolicy, None or CLIENT_DEFAULT."""
        return self._operations.create_consumer(queue_name, self, redelivery_policy)

    def send(self, address: str, body, *, properties: dict | None = None, durable: bool = True,
             expiration: int = 0, scheduled_delivery_time: int = 0, routing_type: str | None = None,
             priority: int = PRIORITY_DEFAULT) -> int | None:
        """Send a message (in a transacted session it is routed now and delivered after commit()).
        Arguments and errors as ``Broker.send``; MessageStateError when the session is closed. A
        message whose duplicate id its address has seen (or this transaction sent) returns None and
        makes the transaction rollback-only: commit() then rolls back and raises DuplicateIdError."""
        return self._operations.send(address, body, properties, durable, expiration, scheduled_delivery_time,
                                     routing_type, self, priority)

    def commit(self) -> None:
        """Make the session's sends and acknowledgements durable and visible, all together."""
        self._operations.commit(self)

    def rollback(self) -> None:
        """Discard the sends; every message delivered in the session and not committed is redelivered
        (or dead-lettered) as after a failed delivery."""
        self._operations.rollback(self)

    def close(self) -> None:
        """Close the consumers (their unacknowledged messages go back uncounted) and roll back what
        the open transaction acknowledged (the redelivery path). Closing twice is harmless."""
        self._operations.close(self)

    # -- the broker's side: called with the broker's lock held, not by applications
    def transaction(self, store: Any) -> Any:
        """The store transaction of the open unit of work, begun on ``store`` by its first persistent write."""
        tx = self._tx
        if tx is None:
            tx = self._tx = store.transaction()
        return tx

    def pending_transaction(self) -> Any:
        """The open store transaction, or None when nothing persistent happened yet."""
        return self._tx

    def end_transaction(self) -> Any:
        """Forget the store transaction (committed or about to be rolled back); returns it, or None."""
        tx = self._tx
        self._tx = None
        return tx

    def add_duplicate_id(self, address: str, duplicate_id: bytes) -> None:
        """A send's duplicate id, remembered by its address's cache when the transaction commits."""
        self._duplicate_ids.append((address, duplicate_id))

    def sent_duplicate_id(self, address: str, duplicate_id: bytes) -> bool:
        """Whether the open transaction already sent ``duplicate_id`` to ``address``."""
        return (address, duplicate_id) in self._duplicate_ids

    def take_duplicate_ids(self) -> list[tuple[str, bytes]]:
        """The open transaction's duplicate ids, in send order; the session holds none afterwards."""
        taken, self._duplicate_ids = self._duplicate_ids, []
        return taken

    def add_audited(self, audit: Any, key: Any) -> None:
        """A send's Classic producer and sequence (``key``), recorded by ``audit`` when the transaction commits."""
        self._audited.append((audit, key))

    def sent_audited(self, audit: Any, key: Any) -> bool:
        """Whether the open transaction already sent ``key`` to the destination of ``audit``."""
        return any(a is audit and k == key for a, k in self._audited)

    def take_audited(self) -> list[tuple[Any, Any]]:
        """The open transaction's audited sends, in send order; the session holds none afterwards."""
        taken, self._audited = self._audited, []
        return taken

    def refuse(self, error: JournalError) -> None:
        """Make the open transaction rollback-only: its commit raises ``error`` (the first one stays)."""
        if self._refused is None:
            self._refused = error

    def take_refusal(self) -> JournalError | None:
        """Why the open transaction is rollback-only (None: it is not); the session forgets it."""
        refused, self._refused = self._refused, None
        return refused

    def add_consumer(self, consumer: Consumer) -> None:
        self._consumers.append(consumer)

    def consumers(self) -> tuple[Consumer, ...]:
        """The session's consumers, in creation order."""
        return tuple(self._consumers)

    def add_send(self, data: MessageData, targets: list[QueueState], scheduled_time: int) -> None:
        """A send routed to ``targets``, to enqueue at commit (each target counts it as pending until the
        transaction ends)."""
        for queue in targets:
            queue.pending_sends += 1
        self._sends.append((data, targets, scheduled_time))

    def take_sends(self) -> list[tuple[MessageData, list[QueueState], int]]:
        """The pending sends, in send order; the session holds none afterwards, and their targets no
        longer count them as pending."""
        sends = self._sends
        self._sends = []
        for _data, targets, _scheduled_time in sends:
            for queue in targets:
                queue.pending_sends -= 1
        return sends

    def record_ack(self, ref: Reference, consumer: Consumer) -> None:
        """``ref`` was acknowledged in the open transaction, by ``consumer``."""
        self._acked[ref] = consumer

    def acks(self) -> tuple[tuple[Reference, Consumer], ...]:
        """The references acknowledged in the open transaction with their consumers, in order."""
        return tuple(self._acked.items())

    def clear_acks(self) -> None:
        self._acked.clear()

    def mark_closed(self) -> None:
        self._closed = True

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = "transacted" if self.transacted else "auto-acknowledge"
        return f"Session({kind}, consumers={len(self._consumers)}, pending={self.pending_count})"
