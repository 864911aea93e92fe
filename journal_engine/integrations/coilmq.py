"""journal_engine as the storage of coilmq, a STOMP broker written in Python.

coilmq (PyPI ``coilmq``) keeps the messages of its queues in a ``coilmq.store.QueueStore``: the
queue manager calls ``enqueue`` when nobody can take a SEND, ``dequeue`` to hand a stored frame to a
subscriber, ``requeue`` to put back a frame a subscriber did not acknowledge, ``size``,
``has_frames``, ``destinations`` and ``close``. :class:`JournalQueueStore` implements that interface
on our :class:`~journal_engine.Broker`, whose messages live in a ``MessageStore`` (the journal or
LMDB backend) in the store's directory, so that everything queued survives a restart or a crash.

The model, in three layers:

* **The store alone** (``JournalQueueStore``, usable from coilmq's own configuration through
  :func:`make_store`). ``enqueue`` returns once the message is durable: the broker appends it, then
  waits for the journal's shared fdatasync (group commit: SENDs of concurrent connections share one
  sync). ``dequeue`` removes the next frame for good, as coilmq's memory, dbm and SQLAlchemy stores
  do. On top of the interface the store offers ``deliver`` (hand out a frame but keep it until
  ``acknowledge``; ``requeue`` of such a frame is a failed delivery), which the queue manager below
  uses.
* **The queue manager** (:class:`DurableQueueManager`, a ``coilmq.queue.QueueManager``). coilmq's
  own manager hands a SEND straight to an idle subscriber without storing it and forgets a frame once
  it is sent; ours stores every SEND first (so the RECEIPT means durable), keeps a frame handed to a
  ``client`` / ``client-individual`` subscriber in the store until its ACK, and counts a NACK or a
  disconnect before the ACK as a failed delivery: the message is delivered again with the header
  ``redelivered:true`` (as ActiveMQ's STOMP does), and moved to the dead-letter queue once it failed
  ``max_delivery_attempts`` times (Artemis's rule; its ``max-delivery-attempts`` and
  ``redelivery-delay`` address settings).
* **The server** (:func:`build_server`, :func:`serve`; ``journal-engine serve-stomp`` ran it until
  it got a server of its own, ``journal_engine.served``, on one event loop): coilmq's
  threaded socket server with our manager and protocol adapters (NACK, which coilmq 1.1.0 answers
  with an error; ``client-individual`` acknowledgement; STOMP 1.2's ``ack`` header and a CONNECT
  whose ``host`` is the address the client dialled), and our frame reader and writer
  (``stomp_frames.py``: coilmq's parser breaks on a frame split across socket reads). A bad frame
  or a protocol error gets an ERROR frame and a clean close. Each destination with subscribers has
  a watcher that hands over a message as soon as it becomes deliverable (a dead letter, an expiry
  copy, a redelivery falling due), waking on the broker's own events.

A message handed to a subscriber has its delivery count written before it leaves
(``persist_delivery_count_before_delivery``), so after a crash a message that may have reached a
client comes back with ``redelivered:true`` and the attempt counts towards the limit.

coilmq is imported by this module only; ``pip install ".[coilmq]"`` in the checkout brings it.
"""
from __future__ import annotations

import heapq
import logging
import os
import selectors
import signal
import socket
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from datetime import datetime
from itertools import chain
from typing import Any

from coilmq.engine import StompEngine
from coilmq.exception import AuthError, ProtocolError
from coilmq.protocol import STOMP10, STOMP11, STOMP12, protocol_class_from_first_frame
from coilmq.queue import QueueManager
from coilmq.queue import lock as _manager_lock   # the lock coilmq's own manager methods take
from coilmq.server.socket_server import StompRequestHandler, ThreadedStompServer
from coilmq.store import QueueStore
from coilmq.topic import TopicManager
from coilmq.util.concurrency import synchronized
from coilmq.util.frames import (ABORT, ACK, BEGIN, COMMIT, CONNECT, DISCONNECT, MESSAGE, NACK, SEND, STOMP_CMD,
                                SUBSCRIBE, UNSUBSCRIBE, ConnectedFrame, ErrorFrame, Frame, ReceiptFrame)

from .. import Broker, ConfigError, JournalClosedError
from ..errors import JournalError
from ..limits import (STOMP_ERROR_LINGER_S, STOMP_OUTBOX_BYTES_MAX, STOMP_READ_BYTES, STOMP_WATCH_WAIT_S,
                      STOMP_WRITE_TIMEOUT_S)
from .exchanges import CONTROL_PREFIX, EXCHANGE_PREFIX, REQUEUE_HEADER, ROUTING_KEY_HEADER, ExchangeTable, answer_control
from .server_rules import add_server_rules
from .stomp_frames import FrameReader, StompFrameError, pack

__all__ = ["JournalQueueStore", "DurableQueueManager", "make_store", "build_server", "serve",
           "REDELIVERED_HEADER", "DELIVERY_COUNT_HEADER", "ORIGINAL_DESTINATION_HEADER", "EXPIRES_HEADER", "DEFAULT_DEAD_LETTER_QUEUE"]

#: set to "true" on a MESSAGE that may have been delivered before (ActiveMQ's STOMP header name)
REDELIVERED_HEADER = "redelivered"
#: on every MESSAGE: the delivery attempt it is, 1 the first time (the broker's delivery count, persisted
#: before the frame leaves, so an attempt cut by a crash counts)
DELIVERY_COUNT_HEADER = "delivery-count"
#: on a MESSAGE taken from the dead-letter queue: the destination it was sent to (ActiveMQ's name)
ORIGINAL_DESTINATION_HEADER = "original-destination"
#: on a SEND: when the message expires (epoch ms; ActiveMQ's name); it then goes to the dead-letter queue
EXPIRES_HEADER = "expires"
DEFAULT_DEAD_LETTER_QUEUE = "/queue/DLQ"
DEFAULT_MAX_DELIVERY_ATTEMPTS = 10      # Artemis's default max-delivery-attempts
_log = logging.getLogger(__name__)

# How a coilmq frame is kept in a message: the body as bytes, the rest in message properties.
_COMMAND = "stomp.command"
_TEXT_BODY = "stomp.text"               # True when the frame's body was a str (coilmq's tests use str)
_HEADER = "stomp.header."               # prefix of one property per header
_REQUEST_HEADERS = frozenset({"receipt"})   # asks the broker for a RECEIPT; not part of the message
_CONNECT_COMMANDS = frozenset({CONNECT, STOMP_CMD})
_TRANSACTION_COMMANDS = frozenset({BEGIN, COMMIT, ABORT})
_CLIENT_COMMANDS = _CONNECT_COMMANDS | _TRANSACTION_COMMANDS | {SEND, SUBSCRIBE, UNSUBSCRIBE, ACK, NACK, DISCONNECT}
_ORIGINAL_ADDRESS = ("_AMQ_ORIG_ADDRESS", "_HQ_ORIG_ADDRESS")   # set by the broker on dead-letter copies


def _message_of(frame: Frame) -> tuple[bytes, dict]:
    """The body and properties that keep ``frame``; header values are kept as str (or int), every
    header but ``receipt``, which asked the broker for a RECEIPT of the SEND."""
    body = frame.body
    text = isinstance(body, str)
    if text:
        body = body.encode("utf-8")
    elif body is None:
        body = b""
    properties: dict[str, Any] = {_COMMAND: frame.cmd or MESSAGE, _TEXT_BODY: text}
    for name, value in frame.headers.items():
        if name in _REQUEST_HEADERS:
            continue
        if not (isinstance(value, (str, int)) and not isinstance(value, bool)):
            value = str(value)          # e.g. coilmq's HeaderValue
        properties[_HEADER + str(name)] = value
    return bytes(body), properties


def _expiration_of(frame: Frame) -> int:
    """The frame's ``expires`` header (ActiveMQ's STOMP header: epoch ms, 0 or none: never) as the
    message's expiration; ConfigError naming the header unless it is such a number."""
    value = frame.headers.get(EXPIRES_HEADER)
    if value is None or value == "":
        return 0
    text = str(value).strip()
    if not (text.isascii() and text.isdigit()):
        raise ConfigError(EXPIRES_HEADER, value, "must be a time in epoch milliseconds, 0 for none")
    return int(text)


def _frame_of(message, destination: str) -> Frame:
    """The frame kept in ``message`` (a journal_engine Message), as delivered from ``destination``."""
    properties = message.properties or {}
    headers = {name[len(_HEADER):]: value for name, value in properties.items() if name.startswith(_HEADER)}
    body: Any = message.body
    if properties.get(_TEXT_BODY):
        body = body.decode("utf-8")
    original = next((properties[key] for key in _ORIGINAL_ADDRESS if key in properties), None)
    if original is not None and original != destination:
        headers[ORIGINAL_DESTINATION_HEADER] = original
        headers["destination"] = destination
    if message.redelivered:
        headers[REDELIVERED_HEADER] = "true"
    return Frame(properties.get(_COMMAND, MESSAGE), headers=headers, body=body)


class JournalQueueStore(QueueStore):
    """A coilmq queue store kept by journal_engine in ``data_dir`` (created if missing).

    Options: ``backend`` "journal" or "lmdb"; ``sync`` the store's sync mode ("group": group commit,
    the default; "always"; "none": nothing waits for the disk, so an enqueue is not durable on
    return); ``max_delivery_attempts`` (Artemis's; -1 = unlimited) and ``dead_letter_queue`` (a
    destination such as "/queue/DLQ", created at open; None: a message over the limit is dropped, as
    Artemis drops it without a dead-letter address); ``redelivery_delay_ms`` before a failed message
    is delivered again; ``max_redelivery_records`` and ``persist_delivery_count_before_delivery`` as
    for the Broker; ``store_options`` for the MessageStore (file_size, buffer_timeout_us, ...).

    Every destination is one anycast queue of the same name. Thread-safe; ``enqueue`` waits for the
    disk without holding the store's lock, so the SENDs of concurrent connections share fdatasyncs.
    """

    def __init__(self, data_dir: str | os.PathLike, *, backend: str = "journal", sync: str = "group",
                 max_delivery_attempts: int = DEFAULT_MAX_DELIVERY_ATTEMPTS,
                 dead_letter_queue: str | None = DEFAULT_DEAD_LETTER_QUEUE, redelivery_delay_ms: int = 0,
                 max_redelivery_records: int = 10, persist_delivery_count_before_delivery: bool = True,
                 store_options: dict | None = None) -> None:
        QueueStore.__init__(self)
        if dead_letter_queue is not None and (not isinstance(dead_letter_queue, str) or not dead_letter_queue):
            raise ConfigError("dead_letter_queue", dead_letter_queue, "a destination name such as /queue/DLQ, or None")
        self.data_dir = os.fspath(data_dir)
        os.makedirs(self.data_dir, exist_ok=True)
        self.dead_letter_queue = dead_letter_queue
        self.redelivery_delay_ms = redelivery_delay_ms
        self._wait_for_disk = sync != "none"
        self._lock = threading.RLock()
        self._broker = Broker(self.data_dir, store=backend, sync=sync, max_redelivery_records=max_redelivery_records,
                              persist_delivery_count_before_delivery=persist_delivery_count_before_delivery,
                              store_options=store_options, message_expiry_scan_period=1)  # expire on time
        self._queues: set[str] = set(self._broker.queue_names())
        self._exchanges = ExchangeTable(self.data_dir)     # kombu's exchanges and bindings (exchanges.py)
        try:
            add_server_rules(self._broker.address_settings, max_delivery_attempts=max_delivery_attempts,
                             redelivery_delay_ms=redelivery_delay_ms, dead_letter_queue=dead_letter_queue)
            if dead_letter_queue is not None:
                self._ensure_queue(dead_letter_queue)
        except BaseException:
            self._broker.close()
            raise
        self._consumers: dict[str, Any] = {}
        # frames handed out by deliver() and not yet settled: id(frame) -> (frame, consumer, message);
        # the entry holds the frame, so its id() is not reused while it is here
        self._held: dict[int, tuple[Frame, Any, Any]] = {}
        # the expirations of the messages sent through this store, (epoch ms, destination) in a heap:
        # a timer thread runs the broker's reaper when the first comes, so that the expiry copy reaches
        # a waiting deliver(timeout_s=...) then (the broker's receive wakes at scheduled times only)
        self._expirations: list[tuple[int, str]] = []
        self._expiration_changed = threading.Condition(self._lock)
        self._expiry_timer: threading.Thread | None = None
        self._closed = False

    # ---------------------------------------------------------------- coilmq's QueueStore interface
    def enqueue(self, destination: str, frame: Frame) -> None:
        """Store ``frame`` at the tail of ``destination``; durable on return (unless sync="none")."""
        if not frame.headers.get("message-id"):
            raise ValueError("Cannot queue a frame without message-id set.")
        body, properties = _message_of(frame)
        with self._lock:
            self._check_open()
            self._ensure_queue(destination)
            expiration = _expiration_of(frame)
            self._broker.send(destination, body, properties=properties, routing_type="anycast",
                              expiration=expiration)
            if expiration:
                self._watch_expiration(expiration, destination)
        if self._wait_for_disk:
            self._broker.sync()         # outside the lock: concurrent enqueues share one fdatasync

    def dequeue(self, destination: str) -> Frame | None:
        """Remove and return the next frame of ``destination`` (None when none is deliverable)."""
        with self._lock:
            frame = self.deliver(destination)
            if frame is not None:
                self.acknowledge(frame)
            return frame

    def requeue(self, destination: str, frame: Frame) -> None:
        """Put a frame back. A frame handed out by :meth:`deliver` and not settled: a failed delivery
        (delivered again, counted, dead-lettered past the limit). Any other frame: stored anew."""
        with self._lock:
            entry = self._held.pop(id(frame), None)
            if entry is not None:
                _, consumer, message = entry
                consumer.rollback(message)
                return
        self.enqueue(destination, frame)

    def size(self, destination: str) -> int:
        """Frames of ``destination`` not handed out (scheduled redeliveries included)."""
        with self._lock:
            self._check_open()
            if destination not in self._queues:
                return 0
            info = self._broker.queue(destination)
            return info.message_count - info.delivering_count

    def has_frames(self, destination: str) -> bool:
        return self.size(destination) > 0

    def destinations(self) -> set[str]:
        with self._lock:
            self._check_open()
            return set(self._queues)

    def close(self) -> None:
        """Close the broker; frames handed out and not acknowledged are delivered again after reopening."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._expiration_changed.notify_all()
            self._held.clear()
            self._broker.close()

    # ---------------------------------------------------------------- beyond coilmq's interface
    def deliver(self, destination: str, *, timeout_s: float = 0.0) -> Frame | None:
        """Hand out the next frame of ``destination`` and keep it until :meth:`acknowledge` (or
        :meth:`requeue`, a failed delivery). Its delivery count is persisted before it is returned.
        ``timeout_s`` > 0: wait up to that long for one to become deliverable (a send, a failed
        delivery put back, a dead letter or expiry copy, a redelivery falling due), without holding
        the store's lock; a message sent here expiring sooner ends the wait when it expires."""
        with self._lock:
            self._check_open()
            if destination not in self._queues:
                if not timeout_s:
                    return None
                # a wait needs the queue (the broker's receive waits on it): created, empty, as a
                # SEND would create it
                self._ensure_queue(destination)
            consumer = self._consumers.get(destination)
            if consumer is None:
                consumer = self._consumers[destination] = self._broker.create_consumer(destination)
            if not timeout_s:
                return self._hold(destination, consumer, consumer.receive(0))
        # the broker's consumer is thread-safe; its receive wakes on a message becoming deliverable
        # (an expiry copy included: the store's expiry timer runs the reaper) and at the broker's
        # next scheduled time
        message = consumer.receive(timeout_s)
        with self._lock:
            return self._hold(destination, consumer, message)

    def _watch_expiration(self, expiration_ms: int, destination: str) -> None:
        """Lock held. Have the broker's reaper run when ``expiration_ms`` comes."""
        heapq.heappush(self._expirations, (expiration_ms, destination))
        if self._expiry_timer is None:
            self._expiry_timer = threading.Thread(target=self._expire_when_due, daemon=True,
                                                  name="serve-stomp expiry timer")
            self._expiry_timer.start()
        self._expiration_changed.notify()

    def _expire_when_due(self) -> None:
        """The expiry timer: sleeps until the earliest expiration, then asks the broker for the queue's
        counts, which first expires what expired (the copy goes to the dead-letter queue)."""
        expirations = self._expirations
        with self._expiration_changed:
            while not self._closed:
                if not expirations:
                    self._expiration_changed.wait()
                    continue
                wait_s = (expirations[0][0] + 1) / 1000 - time.time()
                if wait_s > 0:
                    self._expiration_changed.wait(wait_s)
                    continue
                _, destination = heapq.heappop(expirations)
                try:
                    self._broker.queue(destination)
                except JournalError as error:           # the store failed; the next receive reaps it
                    _log.warning("serve-stomp: expiring messages of %s: %s", destination, error)

    def _hold(self, destination: str, consumer, message) -> Frame | None:
        if message is None:
            return None
        frame = _frame_of(message, destination)
        self._held[id(frame)] = (frame, consumer, message)
        return frame

    def delivery_count(self, frame: Frame) -> int | None:
        """Which delivery of its message ``frame`` is (1 the first time), while :meth:`deliver` holds
        it; None otherwise."""
        with self._lock:
            entry = self._held.get(id(frame))
            return entry[2].delivery_count if entry is not None else None

    def acknowledge(self, frame: Frame) -> bool:
        """The frame handed out by :meth:`deliver` was consumed: it leaves the store. False if it was
        not held (already settled, or never delivered by this store)."""
        with self._lock:
            entry = self._held.pop(id(frame), None)
            if entry is None:
                return False
            _, consumer, message = entry
            consumer.ack(message)
            return True

    def dead_letter(self, frame: Frame) -> bool:
        """The frame handed out by :meth:`deliver` is refused for good (kombu's ``reject(requeue=False)``):
        a copy goes to the dead-letter queue, naming its origin, then the original is acknowledged. A
        crash between the two leaves it in both (at least once). Without a dead-letter queue it is
        dropped. False if the frame was not held."""
        with self._lock:
            entry = self._held.pop(id(frame), None)
            if entry is None:
                return False
            _, consumer, message = entry
            if self.dead_letter_queue is not None:
                properties = dict(message.properties or {})
                properties[_ORIGINAL_ADDRESS[0]] = message.queue
                self._broker.send(self.dead_letter_queue, message.body, properties=properties,
                                  routing_type="anycast")
            consumer.ack(message)
            return True

    def sync(self) -> None:
        """Wait until everything done so far is on disk (unless sync="none"); not under the lock, so
        that concurrent callers share one fdatasync."""
        if self._wait_for_disk:
            self._broker.sync()

    def route(self, exchange: str, routing_key: str) -> list[str]:
        """The destinations of a SEND to ``/exchange/<exchange>`` with ``routing_key`` (exchanges.py)."""
        with self._lock:
            self._check_open()
            return self._exchanges.route(exchange, routing_key)

    def control(self, operation: str, headers: dict) -> dict[str, str]:
        """A request of the kombu transport (a SEND to ``/journal-engine/<operation>``); returns the
        headers of its RECEIPT (``exchanges.answer_control`` says which)."""
        with self._lock:
            self._check_open()
            return answer_control(operation, headers, self._exchanges, self)

    # the queues as answer_control asks for them
    def queue_exists(self, destination: str) -> bool:
        with self._lock:
            return destination in self._queues

    def ensure_queue(self, destination: str) -> None:
        with self._lock:
            self._ensure_queue(destination)

    def waiting_count(self, destination: str) -> int:
        return self.size(destination)

    def purge(self, destination: str) -> int:
        """Acknowledge every deliverable message of ``destination``; how many."""
        removed = 0
        with self._lock:
            while (frame := self.deliver(destination)) is not None:
                self.acknowledge(frame)
                removed += 1
        return removed

    @property
    def broker(self) -> Broker:
        """The journal_engine Broker underneath (for inspection: ``broker.queue(name)``, ``stats()``)."""
        return self._broker

    def _ensure_queue(self, destination: str) -> None:
        if destination not in self._queues:
            self._broker.create_queue(destination, address=destination, routing_type="anycast")
            self._queues.add(destination)

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError(f"the coilmq store in {self.data_dir} is closed")


def make_store() -> JournalQueueStore:
    """A store configured from coilmq's configuration (``qstore.factory =
    journal_engine.integrations.coilmq:make_store``), section [coilmq]:
    ``qstore.journal_engine.data_dir`` (required), ``.backend``, ``.sync``, ``.max_delivery_attempts``,
    ``.dead_letter_queue`` (empty: none), ``.redelivery_delay_ms``.

    Under coilmq's own queue manager a frame is stored only when no subscriber can take it at once,
    and leaves the store when it is sent; :func:`serve` uses :class:`DurableQueueManager` instead.
    """
    from coilmq.config import config
    from coilmq.exception import ConfigError as CoilConfigError
    section = "coilmq"
    prefix = "qstore.journal_engine."
    if not config.has_option(section, prefix + "data_dir"):
        raise CoilConfigError(f"Missing configuration parameter: {prefix}data_dir")
    dead_letter_queue = config.get(section, prefix + "dead_letter_queue", fallback=DEFAULT_DEAD_LETTER_QUEUE)
    return JournalQueueStore(
        config.get(section, prefix + "data_dir"),
        backend=config.get(section, prefix + "backend", fallback="journal"),
        sync=config.get(section, prefix + "sync", fallback="group"),
        max_delivery_attempts=config.getint(section, prefix + "max_delivery_attempts",
                                            fallback=DEFAULT_MAX_DELIVERY_ATTEMPTS),
        dead_letter_queue=dead_letter_queue or None,
        redelivery_delay_ms=config.getint(section, prefix + "redelivery_delay_ms", fallback=0))


class DurableQueueManager(QueueManager):
    """coilmq's queue manager with at-least-once delivery on a :class:`JournalQueueStore`.

    * SEND: stored (durable) before anything else, then dispatched to an idle subscriber.
    * A subscriber with ``ack: client`` (or ``client-individual``) gets one frame at a time (coilmq's
      model) through ``store.deliver``; its ACK acknowledges it in the store; its NACK, or the
      connection ending first, is a failed delivery (``store.requeue``), and the frame goes to
      another subscriber, or the same one again.
    * An ``ack: auto`` subscriber gets frames that leave the store once written to it.
    * A message that becomes deliverable with nothing sent (a dead letter or expiry copy reaching
      its queue, a redelivery falling due after the redelivery delay) reaches a live subscriber at
      once: each destination with subscribers has a watcher thread that waits in the broker's
      ``Consumer.receive``, which wakes when a message becomes deliverable there and when the
      broker's next scheduled time comes (no poll interval).
    """

    def __init__(self, store: JournalQueueStore, subscriber_scheduler=None, queue_scheduler=None) -> None:
        super().__init__(store, subscriber_scheduler=subscriber_scheduler, queue_scheduler=queue_scheduler)
        self._stopping = False
        # signalled (under coilmq's manager lock) whenever a subscription comes, goes or becomes idle
        self._changed = threading.Condition(_manager_lock)
        self._watchers: dict[str, threading.Thread] = {}
        # frames a watcher took for a subscriber that was no longer idle when it came: handed out first
        self._parked: dict[str, list[Frame]] = {}

    def send(self, message: Frame) -> None:
        destination = message.headers.get("destination")
        if not destination:
            raise ValueError(f"Cannot send frame with no destination: {message}")
        message.cmd = MESSAGE
        if destination.startswith(EXCHANGE_PREFIX):
            self._send_to_exchange(destination[len(EXCHANGE_PREFIX):], message)
            return
        message.headers.setdefault("message-id", str(uuid.uuid4()))
        self.store.enqueue(destination, message)    # not under the manager's lock: syncs are shared
        self.dispatch(destination)

    def _send_to_exchange(self, exchange: str, message: Frame) -> None:
        """A copy of ``message`` in each queue the exchange routes its ``routing-key`` to (exchanges.py),
        each with a message-id of its own; none when nothing is bound (AMQP drops it)."""
        routing_key = str(message.headers.get(ROUTING_KEY_HEADER, ""))
        for destination in self.store.route(exchange, routing_key):
            copy = Frame(MESSAGE, headers=dict(message.headers, destination=destination,
                                               **{"message-id": str(uuid.uuid4())}), body=message.body)
            self.store.enqueue(destination, copy)
            self.dispatch(destination)

    @synchronized(_manager_lock)
    def subscribe(self, connection, destination, id=None) -> None:
        super().subscribe(connection, destination, id=id)
        if destination not in self._watchers and not self._stopping:
            watcher = threading.Thread(target=self._watch, args=(destination,), daemon=True,
                                       name=f"serve-stomp watcher {destination}")
            self._watchers[destination] = watcher
            watcher.start()
        self._changed.notify_all()

    @synchronized(_manager_lock)
    def unsubscribe(self, connection, destination, id=None) -> None:
        super().unsubscribe(connection, destination, id=id)
        self._changed.notify_all()

    @synchronized(_manager_lock)
    def dispatch(self, destination: str) -> None:
        """Hand frames of ``destination`` to its idle subscribers while both last."""
        while True:
            idle = self._idle(destination)
            chosen = self.subscriber_scheduler.choice(idle, None)
            if chosen is None or not self._send_backlog(chosen, destination):
                return

    @synchronized(_manager_lock)
    def ack(self, connection, frame, transaction=None, id=None) -> None:
        self.settle(connection, frame.headers.get("message-id"), id, failed=False)

    @synchronized(_manager_lock)
    def settle(self, connection, message_id: str | None, subscription_id: str | None, *, failed: bool,
               dead_letter: bool = False) -> bool:
        """The ACK (``failed=False``) or NACK (``failed=True``) of the frame ``message_id`` pending on
        one of ``connection``'s subscriptions (``subscription_id`` when given); a NACK with
        ``dead_letter`` sends it to the dead-letter queue at once. False when none is pending."""
        for subscription, pending in list(self._pending.items()):
            if subscription.connection is not connection or pending.headers.get("message-id") != message_id:
                continue
            if subscription_id is not None and subscription.id != subscription_id:
                continue
            del self._pending[subscription]
            destination = pending.headers.get("destination")
            if failed and dead_letter:
                self.store.dead_letter(pending)
            elif failed:
                self.store.requeue(destination, pending)
            else:
                self.store.acknowledge(pending)
            self._send_backlog(subscription)
            if failed:
                self.dispatch(destination)
            self._changed.notify_all()
            return True
        self.log.warning("%s of message-id %s matches no pending frame", "NACK" if failed else "ACK", message_id)
        return False

    @synchronized(_manager_lock)
    def disconnect(self, connection) -> None:
        returned = {frame.headers.get("destination") for subscription, frame in self._pending.items()
                    if subscription.connection is connection}
        super().disconnect(connection)               # store.requeue of each pending frame: failed deliveries
        for destination in returned:
            self.dispatch(destination)
        self._changed.notify_all()

    def _send_backlog(self, subscription, destination=None) -> bool:
        """Hand ``subscription`` the next frame of ``destination`` (of any of its destinations with one
        when None); all of them to an ``ack: auto`` subscriber. Whether a frame was handed."""
        if destination is None:
            candidates = {dest: subscribers for dest, subscribers in self._subscriptions.all_subscribers()
                          if subscription in subscribers and (self._parked.get(dest) or self.store.has_frames(dest))}
            destination = self.queue_scheduler.choice(candidates, subscription)
            if destination is None:
                return False
        reliable = subscription.connection.reliable_subscriber
        if reliable and subscription in self._pending:
            return False
        handed = False
        while (frame := self._take(destination)) is not None:
            self._hand(subscription, frame)
            handed = True
            if reliable:
                break
        return handed

    def _idle(self, destination: str) -> list:
        """The subscriptions of ``destination`` that can take a frame now: none pending, and a
        connection that was not given up (a failed write shuts it down; its thread then unbinds it)."""
        return [s for s in self._subscriptions.subscribers(destination)
                if s not in self._pending and not getattr(s.connection, "given_up", False)]

    def _take(self, destination: str) -> Frame | None:
        parked = self._parked.get(destination)
        if parked:
            return parked.pop(0)
        return self.store.deliver(destination)

    def _hand(self, subscription, frame: Frame) -> None:
        """Send ``frame`` to ``subscription`` (into its connection's outbox, which never raises); an
        ``ack: auto`` subscriber's frame leaves the store then."""
        self._send_frame(subscription, frame)
        if not subscription.connection.reliable_subscriber:
            self.store.acknowledge(frame)

    def _send_frame(self, subscription, frame) -> None:
        if frame.cmd == MESSAGE:
            count = self.store.delivery_count(frame)
            if count is not None:
                frame.headers[DELIVERY_COUNT_HEADER] = str(count)
            if subscription.connection.reliable_subscriber:
                frame.headers["ack"] = frame.headers.get("message-id")   # STOMP 1.2 acknowledges by this id
        super()._send_frame(subscription, frame)

    def _watch(self, destination: str) -> None:
        """The watcher of ``destination``: while it has subscribers, wait (outside the manager's lock)
        for a message to become deliverable there whenever one of them is idle, and hand it over."""
        try:
            while self._wait_for_idle_subscriber(destination):
                frame = self.store.deliver(destination, timeout_s=STOMP_WATCH_WAIT_S)
                if frame is not None:
                    self._offer(destination, frame)
        except JournalClosedError:      # the store closed under it: the server is stopping
            with self._changed:
                self._watchers.pop(destination, None)

    def _wait_for_idle_subscriber(self, destination: str) -> bool:
        """Wait until a subscriber of ``destination`` is idle (True), or none is left or the manager
        stops (False: the watcher is struck off in the same hold of the lock, so a SUBSCRIBE coming
        next starts a new one)."""
        with self._changed:
            while not self._stopping:
                if not self._subscriptions.subscribers(destination):
                    break
                if self._idle(destination):
                    return True
                self._changed.wait()
            del self._watchers[destination]
            return False

    @synchronized(_manager_lock)
    def _offer(self, destination: str, frame: Frame) -> None:
        """A frame a watcher took: to an idle subscriber, else parked until one is (the subscribers
        may have been served or gone meanwhile)."""
        idle = self._idle(destination)
        chosen = self.subscriber_scheduler.choice(idle, frame)
        if chosen is None:
            self._parked.setdefault(destination, []).append(frame)
            return
        self._hand(chosen, frame)
        self.dispatch(destination)      # an auto subscriber takes what else is there

    def close(self) -> None:
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        super().close()                 # closes the store: a watcher's waiting receive ends


# ------------------------------------------------------------------------------------ protocol
class _SettlingProtocol:
    """ACK and NACK through DurableQueueManager.settle; ``client-individual`` as ``client`` (coilmq
    hands one frame at a time to a client-acknowledging subscription, so the two modes coincide)."""

    _ack_id_header = "message-id"       # STOMP 1.2: "id", the MESSAGE's "ack" header

    def process_frame(self, frame):
        """coilmq's dispatch of a frame, except that an error is not answered here and the connection
        kept: it propagates, and the request handler answers with an ERROR frame and closes (STOMP:
        the server closes the connection after an ERROR). Only client commands are commands here."""
        command = frame.cmd
        if command not in _CLIENT_COMMANDS:
            raise ProtocolError(f"unknown STOMP command {command[:40]!r}")
        if not self.engine.connected and command not in _CONNECT_COMMANDS:
            raise ProtocolError(f"{command} before CONNECT: the first frame must be CONNECT or STOMP")
        transaction = frame.headers.get("transaction")
        if transaction and command not in _TRANSACTION_COMMANDS:
            if transaction not in self.engine.transactions:
                raise ProtocolError(f"Invalid transaction specified: {transaction}")
            # its RECEIPT comes at COMMIT, once it is processed (a SEND: stored), or at ABORT
            self.engine.transactions[transaction].append(frame)
            return
        reply = getattr(self, command.lower())(frame)
        receipt = frame.headers.get("receipt")
        if receipt and command not in _CONNECT_COMMANDS:
            if command in (ACK, NACK):
                self.engine.queue_manager.store.sync()      # a receipted settlement is on disk
            self.engine.connection.send_frame(ReceiptFrame(receipt, extra_headers=reply if isinstance(reply, dict) else None))

    def send(self, frame):
        """SEND: to a queue, to an exchange (routed by the server's bindings), or a request of the kombu
        transport to the server, whose answer goes in the RECEIPT's headers (exchanges.py)."""
        destination = frame.headers.get("destination") or ""
        if destination.startswith(CONTROL_PREFIX):
            return self.engine.queue_manager.store.control(destination[len(CONTROL_PREFIX):], frame.headers)
        if destination.startswith(EXCHANGE_PREFIX):
            return self.engine.queue_manager.send(frame)
        return super().send(frame)

    def abort(self, frame):
        """ABORT: the transaction's frames are dropped; those that asked for a RECEIPT get it now
        (they were processed: discarded), so that no client waits for one in vain."""
        dropped = self.engine.transactions.get(frame.transaction, ())
        super().abort(frame)
        for buffered in dropped:
            if buffered.headers.get("receipt"):
                self.engine.connection.send_frame(ReceiptFrame(buffered.headers["receipt"]))

    def subscribe(self, frame):
        if (frame.headers.get("ack") or "").lower() == "client-individual":
            frame.headers["ack"] = "client"
        super().subscribe(frame)

    def ack(self, frame):
        self._settle(frame, failed=False)

    def nack(self, frame):
        self._settle(frame, failed=True)

    def _settle(self, frame, *, failed: bool) -> None:
        message_id = frame.headers.get(self._ack_id_header)
        if not message_id:
            raise ProtocolError(f"No {self._ack_id_header} specified for {frame.cmd} command.")
        dead_letter = failed and str(frame.headers.get(REQUEUE_HEADER, "true")).lower() == "false"
        self.engine.queue_manager.settle(self.engine.connection, message_id, frame.headers.get("subscription"),
                                         failed=failed, dead_letter=dead_letter)


class Stomp10(_SettlingProtocol, STOMP10):
    pass


class Stomp11(_SettlingProtocol, STOMP11):
    pass


class Stomp12(_SettlingProtocol, STOMP12):
    _ack_id_header = "id"

    def connect(self, frame, response=None):
        # coilmq 1.1.0 requires host == socket.getfqdn(); a client names the host it dialled (127.0.0.1)
        if not frame.headers.get("host"):
            raise ProtocolError('"host" header is required')
        response = response or ConnectedFrame(str(uuid.uuid4()))
        response.headers.setdefault("version", "1.2")
        STOMP11.connect(self, frame, response)


_PROTOCOLS = {STOMP10: Stomp10, STOMP11: Stomp11, STOMP12: Stomp12}


class _Outbox:
    """A connection's bytes on their way out, written by a thread of its own.

    Why: coilmq writes a MESSAGE from the thread that dispatches it (a producer's SEND, another
    client's ACK), holding the queue manager's lock; a subscriber that paused reading then held up
    the producer's RECEIPT and every other delivery, and the server's 0.5 s socket timeout cut the
    frame short in the middle. Here ``put`` only queues; it waits (up to STOMP_WRITE_TIMEOUT_S) only
    when more than STOMP_OUTBOX_BYTES_MAX are queued. A write that fails or times out shuts the
    connection down (part of a frame may be out: nothing may follow it); its reader then sees the end
    and the connection is unbound (its unacknowledged frames are failed deliveries).
    """

    def __init__(self, sock: socket.socket, name: str) -> None:
        self._socket = sock
        self._queued: deque[bytes] = deque()
        self._queued_bytes = 0          # queued or being written
        self._changed = threading.Condition()
        self._closing = False
        self.broken = False
        self._writer = threading.Thread(target=self._write_out, daemon=True, name=f"serve-stomp writer {name}")
        self._writer.start()

    def put(self, data: bytes) -> None:
        """Queue ``data`` (whole frames, in order). Once the connection is given up, dropped: its
        reader is ending it, and what it had not acknowledged becomes failed deliveries then (an
        error here would only reach the thread that dispatched, another client's)."""
        with self._changed:
            deadline = time.monotonic() + STOMP_WRITE_TIMEOUT_S
            while not self.broken and self._queued_bytes and self._queued_bytes + len(data) > STOMP_OUTBOX_BYTES_MAX:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._give_up()
                    break
                self._changed.wait(left)
            if self.broken:
                return
            self._queued.append(data)
            self._queued_bytes += len(data)
            self._changed.notify_all()

    def close(self, timeout_s: float) -> None:
        """Write what is queued (for ``timeout_s`` at most), then stop the writer."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
            deadline = time.monotonic() + timeout_s
            while self._queued_bytes and not self.broken and (left := deadline - time.monotonic()) > 0:
                self._changed.wait(left)
            if self._queued_bytes and not self.broken:
                self._give_up()
        self._writer.join(timeout_s)

    def _write_out(self) -> None:
        while True:
            with self._changed:
                while not self._queued and not self._closing and not self.broken:
                    self._changed.wait()
                if self.broken or not self._queued:
                    return
                data = self._queued.popleft()
            try:
                self._socket.sendall(data)      # the socket's timeout: STOMP_WRITE_TIMEOUT_S
            except OSError:
                with self._changed:
                    self._give_up()
                return
            with self._changed:
                self._queued_bytes -= len(data)
                self._changed.notify_all()

    def _give_up(self) -> None:
        """Lock held."""
        self.broken = True
        self._queued.clear()
        self._queued_bytes = 0
        self._changed.notify_all()
        try:
            self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _RequestHandler(StompRequestHandler):
    """coilmq's connection handler with our frame reader and writer (stomp_frames.py says why), an
    outbox written by a thread of its own (:class:`_Outbox` says why) and our protocol adapters. A
    frame that breaks the grammar, a limit or the protocol is answered with an ERROR frame (its
    ``message`` header says what, ``receipt-id`` names the frame's receipt), then the connection
    closes; the server and its other connections go on."""

    def setup(self) -> None:
        super().setup()
        self.reader = FrameReader(frame_type=Frame)
        # coilmq sets the server's 0.5 s timeout on the socket, for its reads to see a shutdown; reads
        # wait on a selector with that timeout instead, and the socket's own timeout is the writes'
        self.request.settimeout(STOMP_WRITE_TIMEOUT_S)
        # no Nagle: a frame written right after another (an ACK's RECEIPT after the next MESSAGE) would
        # wait for the client's delayed TCP acknowledgement of the first, 40 ms on Linux
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._readable = selectors.DefaultSelector()
        self._readable.register(self.request, selectors.EVENT_READ)
        self._outbox = _Outbox(self.request, f"{self.client_address}")

    def finish(self) -> None:
        self._outbox.close(STOMP_WRITE_TIMEOUT_S)       # what is queued goes out before the close
        self._readable.close()
        super().finish()

    def handle(self) -> None:
        frames = self.iter_frames()
        engine = None
        frame = None
        try:
            frame = next(frames, None)
            if frame is None:
                return
            protocol = _PROTOCOLS[protocol_class_from_first_frame(frame)]
            self.reader.escapes = protocol is not Stomp10       # 1.1 and 1.2 escape header values
            engine = StompEngine(connection=self, authenticator=self.server.authenticator,
                                 queue_manager=self.server.queue_manager, topic_manager=self.server.topic_manager,
                                 protocol=protocol)
            for frame in chain([frame], frames):
                engine.process_frame(frame)
                if frame.cmd == DISCONNECT:
                    return
        except (StompFrameError, ProtocolError, AuthError) as error:
            self._refuse(str(error), frame)
        except OSError:                 # the client went away mid-read or mid-write
            pass
        except JournalError as error:   # an operating error of the store (disk full, closed at shutdown)
            _log.warning("serve-stomp: %s", error)
            self._refuse(str(error), frame)
        finally:
            if engine is not None:
                engine.unbind()

    def iter_frames(self) -> Iterator[Frame]:
        """The client's frames until it closes the connection or the server shuts down."""
        while not self.server.shutdown_requested.is_set():
            if not self._readable.select(self.server.timeout):
                continue
            data = self.request.recv(STOMP_READ_BYTES)
            if not data:
                return
            self.last_data = datetime.now()
            yield from self.reader.feed(data)

    @property
    def given_up(self) -> bool:
        """True once a write failed or timed out: the connection is being shut down."""
        return self._outbox.broken

    def send_frame(self, frame: Frame) -> None:
        self._outbox.put(pack(frame, escapes=self.reader.escapes))

    def send_heartbeat(self) -> None:
        self._outbox.put(b"\n")

    def _refuse(self, message: str, frame: Frame | None) -> None:
        """An ERROR frame, then a clean close: stop writing, drop what the client still sends (for
        STOMP_ERROR_LINGER_S at most), so that the close is no reset that could discard the ERROR."""
        error = ErrorFrame(message, body=message)
        error.headers["content-type"] = "text/plain"
        receipt = frame.headers.get("receipt") if frame is not None else None
        if receipt:
            error.headers["receipt-id"] = receipt
        try:
            self.send_frame(error)
            self._outbox.close(STOMP_ERROR_LINGER_S)
            self.request.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + STOMP_ERROR_LINGER_S
            while (left := deadline - time.monotonic()) > 0:
                self.request.settimeout(left)
                if not self.request.recv(STOMP_READ_BYTES):
                    break
        except OSError:
            pass


class _Server(ThreadedStompServer):
    daemon_threads = True               # a connection thread never keeps the process alive
    block_on_close = False


def build_server(data_dir: str | os.PathLike, *, host: str = "127.0.0.1", port: int = 61613,
                 timeout_s: float = 0.5, **store_options) -> ThreadedStompServer:
    """A coilmq server on ``host:port`` (port 0: any free port; ``server.server_address`` tells)
    whose queues live in a :class:`JournalQueueStore` in ``data_dir`` (``store_options`` go to it)."""
    store = JournalQueueStore(data_dir, **store_options)
    try:
        return _Server((host, port), RequestHandlerClass=_RequestHandler, timeout=timeout_s,
                       queue_manager=DurableQueueManager(store), topic_manager=TopicManager())
    except BaseException:
        store.close()
        raise


def serve(data_dir: str | os.PathLike, port: int = 61613, host: str = "127.0.0.1", *, backend: str = "journal",
          max_delivery_attempts: int = DEFAULT_MAX_DELIVERY_ATTEMPTS,
          dead_letter_queue: str | None = DEFAULT_DEAD_LETTER_QUEUE, redelivery_delay_ms: int = 0,
          sync: str = "group", out=None) -> int:
    """Run a STOMP broker until SIGTERM or SIGINT; prints one line ``listening on HOST:PORT`` (to
    ``out``, default stdout) once connections are accepted. Returns the exit status (0)."""
    out = out or sys.stdout
    server = build_server(data_dir, host=host, port=port, backend=backend, sync=sync,
                          max_delivery_attempts=max_delivery_attempts, dead_letter_queue=dead_letter_queue,
                          redelivery_delay_ms=redelivery_delay_ms)
    stop = threading.Event()

    def request_stop(signum, frame) -> None:
        stop.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        bound_host, bound_port = server.server_address[:2]
        print(f"journal-engine serve-stomp: listening on {bound_host}:{bound_port} "
              f"(store {os.fspath(data_dir)}, backend {backend}, max delivery attempts {max_delivery_attempts}, "
              f"dead-letter queue {dead_letter_queue})", file=out, flush=True)
        server.serve_forever(poll_interval=0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.server_close()           # closes the queue manager, hence the store
    return 0


_log.addHandler(logging.NullHandler())
