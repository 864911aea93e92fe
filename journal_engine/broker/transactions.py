"""Transactions: the broker's side of sessions (Artemis ServerSessionImpl + TransactionImpl): commit,
rollback and close of a session's unit of work.

* commit: the store transaction commits (and is synced outside the lock, so commit() returns durable);
  the pending sends are enqueued (scheduled when their time is still ahead) and the acknowledged
  references leave their queues. The sends' duplicate ids join their addresses' caches, journaled in
  the same transaction; a transaction made rollback-only by a duplicate (or whose id another session
  committed meanwhile) rolls back instead, and commit() raises DuplicateIdError, as Artemis does. With
  ActiveMQ Classic's rules the sends' producers and sequences are recorded by their destinations'
  producer audits (a duplicate was dropped at its send, the transaction unharmed).
* rollback: the store transaction rolls back, the sends are dropped, and every reference the session
  acknowledged or still holds in delivery takes the redelivery path, by its consumer's redelivery
  policy when it has one. With ActiveMQ Classic's rules a consumer without a policy is a STOMP
  subscription: the ABORT only undoes its acknowledgements, and its messages stay with it, pending
  (ProtocolConverter.onStompAbort).
* close: the session's consumers close (their messages go back uncounted), then the acknowledged
  references take the redelivery path (with Classic's rules they come back as a closed consumer's do,
  their count kept: the transaction of a consumer that went away rolls back without a poison ack).

Why a module of its own: the session state (``Session``) and the consumer-side work (``delivery``) are
apart; what a unit of work does to both at once is said here. Thread-safe: every operation takes the
broker's lock.
"""
from __future__ import annotations

from ..errors import DuplicateIdError, MessageStateError
from .clock import Clock
from .delivery import Delivery
from .duplicate_ids import DuplicateIds
from .gate import Gate
from .post_office import PostOffice
from .queue import NORMAL
from .redelivery import SESSION_ROLLBACK, Redelivery
from .session import Session

__all__ = ["Transactions"]


class Transactions:
    """Commits, rolls back and closes sessions for the broker."""

    __slots__ = ("_gate", "_clock", "_post_office", "_redelivery", "_delivery", "_duplicates")

    def __init__(self, gate: Gate, clock: Clock, post_office: PostOffice, redelivery: Redelivery,
                 delivery: Delivery, duplicates: DuplicateIds) -> None:
        self._gate = gate
        self._clock = clock
        self._post_office = post_office
        # the consumer side a rollback hands references back to
        self._redelivery, self._delivery = redelivery, delivery
        self._duplicates = duplicates       # the caches a commit adds its sends' duplicate ids to

    def commit(self, session: Session) -> None:
        """See Session.commit. MessageStateError when the session is closed or not transacted."""
        post_office = self._post_office
        with self._gate.lock:
            self._gate.check_open()
            _check_transacted(session, "commit")
            self._remember_duplicate_ids(session)
            for audit, (producer, sequence) in session.take_audited():     # Classic: the cursor records it now
                audit.is_duplicate(producer, sequence)
            tx = session.pending_transaction()
            wrote = tx is not None and tx.records > 0
            if tx is not None:
                tx.commit(sync=False)
                session.end_transaction()
            for data, targets, scheduled_time in session.take_sends():
                live = [queue for queue in targets if not queue.deleted]
                if scheduled_time and scheduled_time <= self._clock.now_ms():
                    scheduled_time = 0
                post_office.enqueue(data, live, scheduled_time)
            for ref, _consumer in session.acks():
                ref.queue.delivering -= 1
                post_office.remove(ref, NORMAL, False)
            session.clear_acks()
            store = post_office.store
        if wrote and store.sync_mode.boundaries_wait:
            store.sync()        # outside the lock: the commit is durable when commit() returns

    def _remember_duplicate_ids(self, session: Session) -> None:
        """The session's duplicate ids into their caches, their entries into its store transaction; a
        refused transaction (or one whose id another session committed since its send) rolls back
        instead and raises DuplicateIdError. Lock held."""
        duplicates = self._duplicates
        pending = session.take_duplicate_ids()
        refused = session.take_refusal()
        if refused is None:
            refused = next((DuplicateIdError(address, duplicate_id) for address, duplicate_id in pending
                            if duplicates.seen(address, duplicate_id)), None)
        if refused is not None:
            self._rollback_locked(session, include_delivering=False)
            raise refused
        store = self._post_office.store
        for address, duplicate_id in pending:
            entry, replaces = duplicates.entry(address, duplicate_id)
            if entry is not None:
                session.transaction(store).store_duplicate_id(entry, replaces=replaces)
            duplicates.remember(address, duplicate_id, entry)

    def rollback(self, session: Session) -> None:
        """See Session.rollback. MessageStateError when the session is closed or not transacted."""
        with self._gate.lock:
            self._gate.check_open()
            _check_transacted(session, "roll back")
            self._rollback_locked(session, include_delivering=True)

    def _rollback_locked(self, session: Session, *, include_delivering: bool) -> None:
        tx = session.end_transaction()
        if tx is not None:
            tx.rollback(sync=False)
        session.take_sends()
        session.take_duplicate_ids()
        session.take_audited()
        session.take_refusal()
        now = self._clock.now_ms()
        acked = session.acks()
        session.clear_acks()
        redelivery = self._redelivery
        classic = redelivery.by_classic_rules
        failed = []
        for ref, consumer in acked:
            policy = consumer.redelivery_policy
            if classic and policy is None and not consumer.closed:
                ref.back_to_delivering()        # a STOMP ABORT: the acknowledgement undone, the message pending
                consumer.restore(ref)
                continue
            ref.undo_transacted_ack()
            failed.append((ref, policy))
        if include_delivering:
            for consumer in session.consumers():
                policy = consumer.redelivery_policy
                if classic and policy is None:
                    continue                    # a STOMP subscription keeps what it was delivered
                for ref in consumer.take_deliveries():
                    ref.leave_consumer()
                    failed.append((ref, policy))
        for ref, policy in failed:
            if classic and not include_delivering:      # the session closes: back as a closed consumer's
                redelivery.cancel(ref, now, None, counted=False)
            else:
                redelivery.cancel(ref, now, None, policy, SESSION_ROLLBACK)

    def close(self, session: Session) -> None:
        """See Session.close. Closing twice is harmless."""
        with self._gate.lock:
            if session.closed:
                return
            for consumer in session.consumers():
                self._delivery.close_consumer_locked(consumer)
            if session.transacted and not self._gate.closed:
                self._rollback_locked(session, include_delivering=False)
            session.mark_closed()


def _check_transacted(session: Session, verb: str) -> None:
    if session.closed:
        raise MessageStateError("the session is closed")
    if not session.transacted:
        raise MessageStateError(f"the session is not transacted; there is nothing to {verb}")
