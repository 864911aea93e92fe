"""Deliveries: the broker's side of consumers (Artemis ServerConsumerImpl): dispatch, acknowledgement,
rollback and close, and the pump that makes due references deliverable and runs the two periodic
scans: the expiry reaper (every ``message-expiry-scan-period``: Artemis's ExpiryReaper) and the queue
reaper (every ``address-queue-scan-period``: ``queue_reaper``).

* receive (dispatch): the delivery count goes up by one (the first delivery has count 1); with
  ``persist_delivery_count_before_delivery`` (strict) the count reaches the store before the message is
  handed out. An expired message met at dispatch is expired instead of delivered.
* ack: ACKNOWLEDGE_REF 33 (in a transacted session: inside its transaction, applied at commit).
* rollback: the redelivery path (``redelivery``).
* close: unacknowledged messages go back without counting a failed delivery: their counts lowered and
  persisted, the dead-letter rule applied, no redelivery delay.

Why a module of its own: this is the consumer-facing half of the broker and its hottest path. Each
step is written once: the dispatch in ``next_delivery`` (strict mode adds the store write after it,
``_count_before_delivery``), the acknowledgement through ``PostOffice.remove``.

Thread-safe: ``next_delivery``, ``acknowledge`` and ``rollback`` run with the broker's lock held by the
Consumer, which keeps its own deliveries in the same step (consumer.py says why); the rest takes the
lock itself.
"""
from __future__ import annotations

import time

from ..errors import JournalClosedError, MessageStateError
from ..message_store.message_store import MessageStore
from .arguments import I64_MAX
from .classic.policy import ClassicRedeliveryPolicy
from .clock import Clock
from .dead_letter import DeadLetters
from .gate import Gate
from .message import Message, delivery_of
from .operations import AcknowledgingSession, ConsumerOperations
from .post_office import PostOffice
from .queue import ACKED_IN_TX, DELIVERING, NORMAL, READY, QueueState, Reference
from .queue_reaper import reap_queues
from .redelivery import Redelivery
from .timers import PeriodicScan
from .consumer import Consumer

__all__ = ["Delivery"]


class Delivery:
    """Hands references to consumers and settles them. ``strict``: persist each delivery count before
    the message is handed out. ``manual_clock``: time moves only when the clock is advanced, so a
    receiver never sleeps until a scheduled time. ``close_keeps_count``: a closing consumer's messages
    keep their delivery count (ActiveMQ Classic) instead of taking it back (Artemis)."""

    __slots__ = ("_gate", "_clock", "_store", "_post_office", "_timers", "_dead_letters", "_redelivery", "_strict",
                 "_manual_clock", "_close_keeps_count", "_expiry_scan", "_queue_scan", "next_scan_ms")

    def __init__(self, gate: Gate, clock: Clock, post_office: PostOffice, dead_letters: DeadLetters,
                 redelivery: Redelivery, *, strict: bool, manual_clock: bool, close_keeps_count: bool = False,
                 expiry_scan: PeriodicScan, queue_scan: PeriodicScan) -> None:
        # the broker's parts it works with, and the two it reaches through the post office
        self._gate, self._clock, self._post_office = gate, clock, post_office
        self._dead_letters, self._redelivery = dead_letters, redelivery
        self._store: MessageStore | None = post_office.store
        self._timers = post_office.timers
        # how it delivers (the flags above), and the two periodic scans the pump runs
        self._strict, self._manual_clock, self._close_keeps_count = strict, manual_clock, close_keeps_count
        self._expiry_scan, self._queue_scan = expiry_scan, queue_scan
        self.next_scan_ms = min(expiry_scan.next_ms, queue_scan.next_ms)     # the next run of either scan

    def operations(self) -> ConsumerOperations:
        """The bundle a new Consumer gets (one per consumer: no reference cycle through the broker)."""
        return ConsumerOperations(self._gate.lock, _deadline, self.next_delivery, self.acknowledge, _check_delay,
                                  self.rollback, self.close_consumer)

    # ------------------------------------------------------------------------------- time
    def pump(self, now: int) -> None:
        """Scheduled references due by ``now`` go to the head of their queues (earliest first, as
        Artemis's ScheduledDeliveryHandler adds them); the scans due by ``now`` run, each at its own
        time. Lock held."""
        if now >= self.next_scan_ms:
            self._scan(now)
        self._timers.release_due(now)

    def next_scan_ms_watched(self) -> int:
        """The next scan's time, leaving out the expiry scan while no reference is watched. Lock held."""
        if self._timers.next_expiration_ms() is None:
            return self._queue_scan.next_ms
        return self.next_scan_ms

    def _scan(self, now: int) -> None:
        """Every run of the two scans due by ``now``, in time order, each at its time (what fell due
        before it released first): the expiry reaper expires the READY references expired by then, the
        queue reaper deletes unused queues. Runs that would find nothing are skipped, so a clock moved
        by a year costs no run per period."""
        timers = self._timers
        expiry = self._expiry_scan
        queues = self._queue_scan
        if not self._manual_clock:      # the wall clock: a late run does the missed ones' work once
            expiry.catch_up(now)
            queues.catch_up(now)
        while True:
            tick = min(expiry.next_ms, queues.next_ms)
            if tick > now:
                break
            timers.release_due(tick)
            if queues.next_ms == tick:
                wake_ms = reap_queues(self._post_office, tick)
                queues.ran()
                if wake_ms is not None:             # nothing to do before then (or before now)
                    queues.skip_to(min(wake_ms, now + 1))
            if expiry.next_ms == tick:
                expiration = timers.next_expiration_ms()
                if expiration is not None and expiration <= tick:
                    self._dead_letters.expire_due(tick)
                    expiry.ran()
                    queues.rewind_after(tick)       # an expiry may make a queue deletable
                else:       # nothing expired by this run: the next one that can find something
                    event = timers.next_event_ms()
                    expiry.skip_to(event if event is not None and event > tick else now + 1)
        self.next_scan_ms = min(expiry.next_ms, queues.next_ms)

    def pump_now(self) -> None:
        """``pump`` at the clock's time, when anything waits on a timer. Lock held."""
        if self._timers.pending:
            self.pump(self._clock.now_ms())

    # ------------------------------------------------------------------------------- dispatch
    def next_delivery(self, consumer: Consumer, queue: QueueState, timeout: float | None, deadline: float | None,
                      closed: bool) -> Reference | None:
        """The reference ``consumer`` delivers next from ``queue`` (see Consumer.receive), its delivery
        count raised and its state DELIVERING; None when nothing is deliverable before the timeout.
        ``closed``: whether the consumer is closed (read under the lock; read again after each wait).
        Lock held by the consumer, which records the delivery."""
        while True:
            if closed or self._gate.closed or queue.deleted:
                self._gate.check_open()
                if queue.deleted:
                    raise MessageStateError(f"queue {queue.name!r} was deleted")
                raise JournalClosedError("the consumer is closed")
            if self._timers.pending:
                self.pump(self._clock.now_ms())
            ready = queue.ready
            while ready:
                ref = ready.popleft()
                if ref.state != READY:
                    continue            # expired by the reaper while it waited here
                data = ref.data
                if data.expiration:
                    now = self._clock.now_ms()
                    if now >= data.expiration:
                        try:
                            self._dead_letters.expire(ref, now)
                        except BaseException:
                            if ref.state == READY:
                                ready.appendleft(ref)       # the store failed: it stays where it was
                            raise
                        continue
                ref.dispatch()              # the count goes up first
                queue.delivering += 1
                if self._strict:
                    self._count_before_delivery(ref)
                return ref
            # nothing deliverable now
            if timeout == 0:
                return None
            if deadline is not None:
                wait_s = deadline - time.monotonic()
                if wait_s <= 0:
                    return None
            else:
                wait_s = None
            if not self._manual_clock:
                due_ms = self._timers.next_due_ms()
                if due_ms is not None:
                    due_s = (due_ms - self._clock.now_ms()) / 1000.0
                    wait_s = due_s if wait_s is None else min(wait_s, due_s)
                    wait_s = max(wait_s, 0.0005)
            queue.waiters += 1
            try:
                queue.condition.wait(wait_s)
            finally:
                queue.waiters -= 1
            closed = consumer.closed

    def _count_before_delivery(self, ref: Reference) -> None:
        """Strict mode: the count of a reference just dispatched reaches the store before the message is
        handed out; when the store fails, the dispatch is undone (the reference back in order) and the
        error propagates (lock held)."""
        data = ref.data
        queue = ref.queue
        if data.durable_refs and queue.durable:
            try:
                self._store.before_delivery(queue.queue_id, data.message_id, ref.delivery_count)
            except BaseException:
                ref.undo_dispatch()
                queue.delivering -= 1
                queue.add_sorted(ref)
                raise

    # ------------------------------------------------------------------------------- settling
    @staticmethod
    def _owned(consumer: Consumer, message: Message, action: str) -> None:
        """Raise why ``consumer`` cannot settle ``message`` (it does not hold it undecided): TypeError or
        MessageStateError."""
        if not isinstance(message, Message):
            raise TypeError(f"expected a Message, not {type(message).__name__}")
        ref, owner = delivery_of(message)
        if ref is None:
            raise MessageStateError(f"message {message.message_id} was browsed, not delivered; only a received "
                                    f"message can be {action}")
        if owner is not consumer:
            raise MessageStateError(f"message {message.message_id} was delivered to another consumer; it can only be "
                                    f"{action} through that consumer")
        if ref.delivery is message and ref.state == ACKED_IN_TX:
            raise MessageStateError(f"message {message.message_id} is already acknowledged in the session's open "
                                    "transaction; commit or roll back the session")
        if ref.delivery is not message or ref.state != DELIVERING:
            if consumer.closed:
                raise MessageStateError(f"message {message.message_id} went back to its queue when the consumer "
                                        "closed; it cannot be " + action)
            raise MessageStateError(f"message {message.message_id} (delivery {message.delivery_count}) was already "
                                    "acknowledged or rolled back")
        raise AssertionError(f"message {message.message_id} is held undecided by its consumer, which did not find it")

    def acknowledge(self, consumer: Consumer, session: AcknowledgingSession | None, message: Message,
                    ref: Reference | None) -> None:
        """Acknowledge ``message`` (see Consumer.ack); ``ref``: its reference, as ``consumer`` (of
        ``session``) holds it, None when it does not. Raises before changing anything unless the consumer
        holds it undecided or the store fails. Lock held by the consumer, which lets go of the delivery
        once this returns."""
        if ref is None or ref.delivery is not message or ref.state != DELIVERING:
            self._owned(consumer, message, "acknowledged")      # raises, saying why
        if session is not None and session.transacted:
            data = ref.data
            queue = ref.queue
            if data.durable_refs and queue.durable:
                session.transaction(self._store).store_acknowledge(queue.queue_id, data.message_id)
            session.record_ack(ref, consumer)
            ref.acknowledge_in_transaction()
            return
        self._post_office.remove(ref, NORMAL, True)
        ref.queue.delivering -= 1

    def rollback(self, consumer: Consumer, message: Message, ref: Reference | None, delay_ms: int | None,
                 policy: ClassicRedeliveryPolicy | None = None) -> None:
        """A failed delivery of ``message`` (see Consumer.rollback); ``ref``: its reference, which
        ``consumer`` has just let go of, None when it did not hold it (then this raises why, changing
        nothing). ``delay_ms`` was checked; ``policy``: the consumer's ClassicRedeliveryPolicy, if any.
        Lock held by the consumer."""
        if ref is None or ref.delivery is not message or ref.state != DELIVERING:
            self._owned(consumer, message, "rolled back")       # raises, saying why
        ref.leave_consumer()
        self._redelivery.cancel(ref, self._clock.now_ms(), delay_ms, policy)

    def close_consumer(self, consumer: Consumer) -> None:
        """Close ``consumer`` (see Consumer.close)."""
        with self._gate.lock:
            self.close_consumer_locked(consumer)

    def close_consumer_locked(self, consumer: Consumer) -> None:
        """``close_consumer`` with the lock held (a closing session closes its consumers)."""
        detached = consumer.detach()
        if detached is None:
            return
        queue, refs = detached
        queue.consumers -= 1
        now = self._clock.now_ms()
        queue.consumer_removed_ms = now     # the queue reaper's delay counts from here
        cancel = self._redelivery.cancel
        failed: BaseException | None = None
        for ref in refs:
            # not a failed delivery: Artemis decrements the count (ServerConsumerImpl.cancelRefs), then
            # checkRedelivery persists the lowered count and applies the dead-letter rule, without a delay
            ref.leave_consumer()
            if not self._close_keeps_count:     # Classic keeps it: the message comes back redelivered, and it
                ref.delivery_count -= 1         # counts toward the redelivery plugin's limit
            try:
                cancel(ref, now, None, counted=False)
            except BaseException as exc:      # the store failed: this one is back in its queue; the rest too
                failed = failed or exc
        if queue.waiters:
            queue.condition.notify_all()    # the returned messages, and a receive() of this consumer that waits
        if failed is not None:
            raise failed


def _deadline(timeout: float) -> float:
    """The time.monotonic() by which a receive waiting ``timeout`` seconds gives up (not 0, not None);
    ValueError for a bad timeout."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
        raise ValueError(f"timeout={timeout!r}: seconds >= 0, or None to wait for a message")
    return time.monotonic() + timeout


def _check_delay(delay_ms) -> None:
    """ValueError unless ``delay_ms`` (given to a rollback) is an int in [0, I64_MAX]."""
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or not 0 <= delay_ms <= I64_MAX:
        raise ValueError(f"delay_ms={delay_ms!r}: milliseconds, an int >= 0 (or None for the address's delay)")
