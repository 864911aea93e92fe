"""A kombu transport on journal_engine's STOMP server: ``kombu.Connection("journal-engine://HOST:PORT")``.

Importing this module registers the ``journal-engine`` alias in kombu's transport table
(``kombu.transport.TRANSPORT_ALIASES``): kombu 5 resolves a URL's scheme through that table only
(it reads no entry-point group for transports), so a program, or a Celery app module, imports this
module once; ``transport="journal_engine.integrations.kombu:Transport"`` works without the import.

Producers and workers are separate processes sharing one ``journal-engine serve-stomp`` server,
so nothing that decides delivery lives in a client:

* **Exchanges and bindings** are kept by the server (``exchanges.py``): ``exchange_declare`` and
  ``queue_bind`` are requests to it, a publish to an exchange is a SEND to ``/exchange/<name>`` that
  the server routes; kombu's virtual transports keep that table in each process instead.
* **Unacknowledged messages** are the server's: each delivery is a STOMP MESSAGE pending on a
  ``client-individual`` subscription until its ACK. ``ack`` is an ACK, ``reject(requeue=True)`` a
  NACK (a failed delivery: the server's redelivery delay and delivery count apply, and the
  dead-letter queue past the limit), ``reject(requeue=False)`` a NACK with ``requeue:false`` (to the
  dead-letter queue at once, naming its origin). A worker that dies leaves its deliveries pending:
  the server counts each as a failed delivery and sends it again with ``redelivered`` set. kombu's
  client-side restore of unacknowledged messages is off.
* ``delivery_info`` carries ``redelivered``, ``delivery_count`` (the server's, 1 the first time) and,
  for a message taken from the dead-letter queue, ``original_queue``.

**Confirmations.** A RECEIPT, which the server sends once what its frame did is on disk, confirms
every frame the connection wrote before it (the server handles them in order): a publish, ACK or
NACK asks for one only when none is awaited already (see :class:`_Link`). A declaration, and any
request answered in its RECEIPT's headers, waits for it. A publish does not: each channel lets up to
``publish_window`` publishes (a transport option, default :data:`PUBLISH_WINDOW_DEFAULT`) go
unconfirmed, waits for a RECEIPT covering them all when that many are, and before it closes. A
publish the server refused, or that a lost connection left unconfirmed, is raised as
:class:`UnconfirmedPublishError` by the channel's next call (or by the connection's release), naming
the messages, and logged at the interpreter's exit for a connection never released: none is dropped
silently. ``publish_window=1`` makes each publish return once durable. ACKs and NACKs likewise up to
``ack_window`` (default :data:`ACK_WINDOW_DEFAULT`): an ACK whose RECEIPT never comes (the connection
lost first) leaves its message delivered and not acknowledged, which the server delivers again with
``redelivered`` set (at least once, as AMQP's basic.ack); ``ack_window=1`` makes ``ack()`` return
once the acknowledgement is on disk.

**Prefetch.** Each subscription asks the server for as many unacknowledged messages as kombu's
prefetch count (``basic_qos``; Celery sets ``worker_prefetch_multiplier`` times the concurrency),
``activemq.prefetchSize`` on the SUBSCRIBE; with no count set (0), one at a time, so that a message
kombu has not taken stays in the server's queue for any consumer. A new count while consuming
subscribes again with it (Celery raises its count for each task with an ETA it holds).

**The connection** is one socket read by whichever thread waits for something (a RECEIPT, a
MESSAGE): no thread of its own; frames are read and written with the server's own codec
(``stomp_frames.py``). The transport is asynchronous in kombu's sense: a Celery worker runs its event
loop on the socket (``register_with_event_loop``). A Celery worker told to stop
(``worker_shutting_down``) wakes that loop, or a blocking wait for messages, at once.
"""
from __future__ import annotations

import atexit
import logging
import os
import select
import socket
import sys
import threading
import time
import uuid
import weakref
from collections import deque
from typing import Any, Callable

from amqp.protocol import queue_declare_ok_t
from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, virtual
from kombu.utils.json import dumps, loads

from ..limits import KOMBU_REPLY_TIMEOUT_S, PRIORITY_MAX, PRIORITY_MIN, SERVED_PREFETCH_MAX
from ..served.messages import (DELIVERY_COUNT_HEADER, DUPLICATE_ID_HEADERS, EXPIRES_HEADER, ORIGINAL_DESTINATION_HEADER,
                               PRIORITY_HEADER,
                               REDELIVERED_HEADER)
from .exchanges import CONTROL_PREFIX, EXCHANGE_PREFIX, QUEUE_PREFIX, REQUEUE_HEADER, ROUTING_KEY_HEADER
from .stomp_frames import FrameReader, StompFrame, header_value, pack

__all__ = ["Transport", "Channel", "SCHEME", "UnconfirmedPublishError", "PUBLISH_WINDOW_DEFAULT", "ACK_WINDOW_DEFAULT"]

_log = logging.getLogger(__name__)

SCHEME = "journal-engine"
DEFAULT_PORT = 61613
PREFETCH_HEADER = "activemq.prefetchSize"
#: publishes of a channel that may await their RECEIPT at once (transport option ``publish_window``).
#: A receipt is asked for only when none is awaited, so the window fills only when the server falls a
#: window behind; it bounds what a lost connection can leave unconfirmed
PUBLISH_WINDOW_DEFAULT = 64
#: ACKs and NACKs of a channel that may await their RECEIPT at once (transport option ``ack_window``)
ACK_WINDOW_DEFAULT = 64
#: what one read from the socket asks for
_READ_BYTES = 65536
#: how many unconfirmed messages an UnconfirmedPublishError names (it counts them all)
_NAMED_MAX = 10
#: how long a wait for messages lasts at most once a Celery worker is stopping (its loop may go on
#: draining for a while, as in a soft shutdown: this keeps that from spinning)
_STOPPING_WAIT_S = 0.05


def _duplicate_id_of(message: dict) -> str | None:
    """The duplicate id a publish carries (the server's ``_AMQ_DUPL_ID``), stable when the same message
    is published again after a lost RECEIPT: a Celery task's id with its retry count (a retry is a
    new message of the same task), else the application's ``message_id`` property; None for neither."""
    application = message.get("headers") or {}
    task_id = application.get("id")
    if task_id is not None and "task" in application:      # Celery's task message protocol 2
        return f"celery:{task_id}:{application.get('retries') or 0}"
    message_id = (message.get("properties") or {}).get("message_id")
    return None if message_id in (None, "") else f"kombu:{message_id}"


class UnconfirmedPublishError(ChannelError):
    """Publishes that were sent and never confirmed durable: the server refused them (an ERROR frame) or
    the connection was lost before their RECEIPT. ``unconfirmed`` lists each as "exchange/routing key
    (correlation id)"; they may or may not be on the server. A channel error, not a connection error:
    kombu does not retry it (a retry would send only the publish at hand, not these)."""

    def __init__(self, why: str, unconfirmed: list[str]) -> None:
        named = ", ".join(unconfirmed[:_NAMED_MAX]) + (", ..." if len(unconfirmed) > _NAMED_MAX else "")
        super().__init__(f"{len(unconfirmed)} publish(es) not confirmed durable ({why}): {named}; "
                         "publish them again (a copy may be on the server already)")
        self.why = why
        self.unconfirmed = unconfirmed


class _Link:
    """One STOMP connection to the server.

    **Reading.** The thread that needs a frame reads the socket (one at a time: the reader; others
    wait on ``changed``) and sorts what comes: a MESSAGE to the inbox, a RECEIPT to the request
    waiting for its headers and to the confirmations, an ERROR to the request it names (the server
    then closes the connection). No thread of its own; every wait has a deadline; a lost connection
    wakes them all.

    **Confirmations.** Each frame written is numbered (``sent``). The server handles a connection's
    frames in order and sends a RECEIPT only once everything appended before it is durable, so a
    RECEIPT confirms every frame written before it on this connection: ``confirmed`` is the number
    of the newest frame a RECEIPT came for. A pipelined frame (a publish, an ACK, a NACK) asks for a
    receipt only when no receipt is awaited already (or when its channel will wait for it): a fast
    producer gets one RECEIPT, and the server one fdatasync, for all it wrote in a round trip, and a
    slow one a RECEIPT for each frame."""

    def __init__(self, host: str, port: int, connect_timeout_s: float | None, login: str | None = None,
                 passcode: str | None = None) -> None:
        # guards the link's state and the confirmation state of its channels (Channel uses it too);
        # waited on by the threads that wait while another reads
        self.changed = threading.Condition(threading.Lock())
        self._write_lock = threading.Lock()     # held around numbering a frame and writing it: in order
        self._reading = False                   # a thread is reading the socket (without changed held)
        self._requests: set[str] = set()        # receipt ids whose RECEIPT headers a request() awaits
        self._replies: dict[str, dict] = {}     # receipt id -> RECEIPT headers, for request()
        self._refused: dict[str, str] = {}      # receipt id -> the ERROR's message, for request()
        self._receipt_numbers: dict[str, int] = {}     # receipt id -> the number of the frame that asked
        self._awaited: str | None = None        # the newest receipt asked for and not yet come
        self._receipts = 0
        self.sent = 0                           # frames written (numbered 1, 2, ...)
        self.confirmed = 0                      # the newest frame a RECEIPT came for (or after)
        self._inbox: deque[tuple[str, Any]] = deque()
        self.channels: weakref.WeakSet[Channel] = weakref.WeakSet()    # channels with pipelined frames
        self.lost: str | None = None
        self.stopping = False                   # a Celery worker is stopping: take() returns soon
        self.pid = os.getpid()                  # a forked child (a pool process) never uses its parent's link
        self._reader = FrameReader()
        timeout_s = connect_timeout_s or KOMBU_REPLY_TIMEOUT_S
        self._socket = socket.create_connection((host, port), timeout=timeout_s)
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._wake_read, self._wake_write = os.pipe()    # interrupt(): wakes a reader out of select
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        try:
            self._connect(host, login, passcode, timeout_s)
        except BaseException:
            self._close_socket()
            raise
        # sendall may block this long on a server that reads nothing; reads wait in select
        self._socket.settimeout(KOMBU_REPLY_TIMEOUT_S)
        _LINKS.add(self)

    def _connect(self, host: str, login: str | None, passcode: str | None, timeout_s: float) -> None:
        headers = {"accept-version": "1.1", "host": host, "heart-beat": "0,0"}
        if login:
            headers.update(login=login, passcode=passcode or "")
        self._socket.sendall(pack(StompFrame("CONNECT", headers), escapes=False))
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("it accepts connections but did not answer STOMP's CONNECT")
            self._socket.settimeout(left)
            data = self._socket.recv(_READ_BYTES)
            if not data:
                raise ConnectionError("it closed the connection after STOMP's CONNECT")
            for frame in self._reader.feed(data):
                if frame.cmd == "CONNECTED":
                    self._reader.escapes = True
                    return
                if frame.cmd == "ERROR":
                    raise ConnectionError(f"it refused STOMP's CONNECT: {frame.headers.get('message', '')}")

    # ------------------------------------------------------------- writing
    def write(self, build: Callable[[str | None], bytes], *, receipt: str = "never",
              sent: Callable[[int, str | None], None] | None = None) -> tuple[int, str | None]:
        """Write the frame ``build(receipt id or None)`` makes, numbered; return (its number, the receipt
        id it asks for). ``receipt``: "always", "never", or "unless-awaited" (only when no receipt is
        awaited already). ``sent(number, receipt id)`` runs with ``changed`` held before the frame is
        written, so that its RECEIPT finds it counted. ConnectionError when the connection is lost or the
        write fails (then it is lost)."""
        with self._write_lock:
            with self.changed:
                self._check_locked()
                number = self.sent + 1
                receipt_id = None
                if receipt == "always" or (receipt == "unless-awaited" and self._awaited is None):
                    self._receipts += 1
                    receipt_id = str(self._receipts)
                    self._receipt_numbers[receipt_id] = number
                    self._awaited = receipt_id
                self.sent = number
                if sent is not None:
                    sent(number, receipt_id)
            try:
                self._socket.sendall(build(receipt_id))
            except OSError as error:
                self.broken(f"a write failed: {error.strerror or error}")
                self.check()
        return number, receipt_id

    def request(self, build: Callable[[str], bytes]) -> dict:
        """Write the frame ``build(receipt id)`` makes; return its RECEIPT's headers. ChannelError when
        the server refused it (an ERROR naming the receipt: the request is wrong, and would be wrong
        again); ConnectionError when the connection is lost first, or no RECEIPT comes in
        KOMBU_REPLY_TIMEOUT_S."""
        _, receipt = self.write(build, receipt="always", sent=lambda _, receipt: self._requests.add(receipt))
        with self.changed:
            try:
                self.wait(lambda: receipt in self._replies or receipt in self._refused,
                          time.monotonic() + KOMBU_REPLY_TIMEOUT_S)
                if receipt in self._refused:
                    raise ChannelError(f"journal-engine serve-stomp refused the request: {self._refused.pop(receipt)}")
                if receipt not in self._replies:
                    self._check_locked()
                return self._replies.pop(receipt)
            finally:
                self._requests.discard(receipt)

    def confirm(self, number: int, deadline: float) -> None:
        """With ``changed`` held: wait until frame ``number`` is confirmed (the connection lost, or the
        deadline passed: then it is lost). Asks for a RECEIPT (an empty transaction's ABORT) when none
        awaited would cover it."""
        if self.confirmed >= number or self.lost is not None:
            return
        awaited = self._receipt_numbers.get(self._awaited) if self._awaited is not None else None
        if awaited is None or awaited < number:
            self.changed.release()
            try:
                self.write(lambda receipt: b"BEGIN\ntransaction:confirm-%s\n\n\x00"
                                           b"ABORT\ntransaction:confirm-%s\nreceipt:%s\n\n\x00"
                                           % (receipt.encode(), receipt.encode(), receipt.encode()), receipt="always")
            except ConnectionError:
                pass
            finally:
                self.changed.acquire()
        self.wait(lambda: self.confirmed >= number, deadline)

    # ------------------------------------------------------------- reading
    def wait(self, done: Callable[[], bool], deadline: float | None, *, interruptible: bool = False) -> None:
        """With ``changed`` held: read frames, or wait for the reader's, until ``done()``, the deadline
        (None: none), or a lost connection. A deadline passed without ``done()`` loses the connection
        unless ``interruptible`` (a take's timeout is no fault); an ``interruptible`` wait, once
        :meth:`interrupt` was called (whoever reads is woken), lasts at most _STOPPING_WAIT_S more."""
        while not done():
            if self.lost is not None:
                return
            now = time.monotonic()
            if interruptible and self.stopping and (deadline is None or deadline > now + _STOPPING_WAIT_S):
                deadline = now + _STOPPING_WAIT_S
            left = None if deadline is None else deadline - now
            if left is not None and left <= 0:
                if not interruptible:
                    self._broken_locked(f"no RECEIPT within {KOMBU_REPLY_TIMEOUT_S} s")
                return
            if self._reading:
                self.changed.wait(left)
                continue
            self._read_locked(left)

    def _read(self, timeout_s: float | None) -> tuple[list, str | None, bool]:
        """The frames one read brings (none when ``timeout_s`` passed first or :meth:`interrupt` woke
        it), why the connection is lost if it is, and whether anything was read."""
        try:
            readable, _, _ = select.select([self._socket, self._wake_read], [], [], timeout_s)
            if self._wake_read in readable:
                try:
                    os.read(self._wake_read, 64)
                except BlockingIOError:
                    pass
            if self._socket not in readable:
                return [], None, False
            data = self._socket.recv(_READ_BYTES)
        except (OSError, ValueError) as error:      # ValueError: select on a socket closed meanwhile
            return [], f"a read failed: {getattr(error, 'strerror', None) or error}", False
        if not data:
            return [], "the server closed the connection", False
        try:
            return list(self._reader.feed(data)), None, True
        except Exception as error:                  # noqa: BLE001  (a frame the codec refuses)
            return [], f"the server sent a frame this client cannot read: {error}", False

    def _sort(self, frames: list) -> None:
        for frame in frames:
            command = frame.cmd
            if command == "MESSAGE":
                self._inbox.append((frame.headers.get("subscription", ""), frame))
            elif command == "RECEIPT":
                receipt = frame.headers.get("receipt-id", "")
                number = self._receipt_numbers.pop(receipt, 0)
                if number > self.confirmed:
                    self.confirmed = number
                if receipt == self._awaited:
                    self._awaited = None
                if receipt in self._requests:
                    self._replies[receipt] = frame.headers
            elif command == "ERROR":
                receipt = frame.headers.get("receipt-id", "")
                message = frame.headers.get("message", "") or bytes(frame.body).decode("utf-8", "replace")
                if receipt in self._requests:
                    self._refused[receipt] = message
                self._broken_locked(f"the server refused a frame: {message}")

    def take(self, timeout_s: float | None, subscriptions: set[str] | None = None):
        """The oldest MESSAGE (of one of ``subscriptions`` when given) as (subscription id, frame);
        None once ``timeout_s`` passed (0: do not wait), or soon while a Celery worker stops.
        ConnectionError when the connection is lost."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        found: list = []

        def arrived() -> bool:
            for index, entry in enumerate(self._inbox):
                if subscriptions is None or entry[0] in subscriptions:
                    del self._inbox[index]
                    found.append(entry)
                    return True
            return False

        with self.changed:
            if timeout_s == 0:
                if not arrived():
                    self._poll_locked()
                    arrived()
            else:
                self.wait(arrived, deadline, interruptible=True)
            if found:
                return found[0]
            self._check_locked()
            return None

    def _poll_locked(self) -> None:
        """With ``changed`` held: sort what the socket holds now, without waiting (unless another
        thread is reading it: that one sorts it)."""
        while self.lost is None and not self._reading:
            if not self._read_locked(0):
                return

    def _read_locked(self, timeout_s: float | None) -> bool:
        """With ``changed`` held and nobody reading: one read of the socket with ``changed`` released,
        its frames sorted, the waiters woken; whether the read brought bytes."""
        self._reading = True
        self.changed.release()
        try:
            frames, why_lost, read = self._read(timeout_s)
        finally:
            self.changed.acquire()
            self._reading = False
        self._sort(frames)
        if why_lost is not None:
            self._broken_locked(why_lost)
        self.changed.notify_all()          # what came may be another's; or another may read now
        return read

    def pop_message(self):
        """The oldest MESSAGE read, as (subscription id, frame), or None; reads nothing."""
        with self.changed:
            return self._inbox.popleft() if self._inbox else None

    def read_available(self) -> None:
        """Sort what the socket holds now (an event loop found it readable). ConnectionError when the
        connection is lost: what it delivered is the server's to deliver again."""
        with self.changed:
            self._poll_locked()
            self._check_locked()

    def wake(self) -> None:
        """Make the reader's select, or an event loop's poll, return at once."""
        try:
            os.write(self._wake_write, b"!")
        except OSError:
            pass                # the pipe is full (a wake-up is pending already) or closed

    def fileno(self) -> int:
        return self._socket.fileno()

    def wake_fileno(self) -> int:
        return self._wake_read

    def drain_wake(self) -> None:
        """The wake-up pipe is readable (an event loop's reader): empty it."""
        try:
            os.read(self._wake_read, 64)
        except OSError:
            pass

    # ------------------------------------------------------------- losing and closing
    def interrupt(self) -> None:
        """Stop waiting for messages (a Celery worker is stopping). Called from a signal handler: it
        takes no lock, and wakes the reader through its pipe."""
        self.stopping = True
        self.wake()

    def broken(self, why: str) -> None:
        with self.changed:
            self._broken_locked(why)

    def _broken_locked(self, why: str) -> None:
        if self.lost is None:
            self.lost = why
        self.changed.notify_all()

    def check(self) -> None:
        with self.changed:
            self._check_locked()

    def _check_locked(self) -> None:
        if self.lost is not None:
            raise ConnectionError(f"the journal-engine server connection is lost: {self.lost}")

    def close(self) -> None:
        """DISCONNECT (its RECEIPT comes once everything before it is durable), then close."""
        _LINKS.discard(self)
        if self.lost is None:
            try:
                self.request(lambda receipt: b"DISCONNECT\nreceipt:%s\n\n\x00" % receipt.encode())
            except (ConnectionError, ChannelError, OSError):
                pass            # it went away already: what it held is the server's to deliver again
        self.broken("closed")
        self._close_socket()

    def _close_socket(self) -> None:
        for close in (self._socket.close, lambda: os.close(self._wake_read), lambda: os.close(self._wake_write)):
            try:
                close()
            except OSError:
                pass

    def confirm_all(self, timeout_s: float) -> list[str]:
        """Wait for a RECEIPT covering every frame written (at exit); the publishes not confirmed."""
        with self.changed:
            if self.lost is None:
                self.confirm(self.sent, time.monotonic() + timeout_s)
            return [what for channel in list(self.channels) for what in channel.unconfirmed_publishes_of(self)]


# the links open in this process: a stopping Celery worker interrupts their waits; at exit, their
# pipelined publishes are confirmed
_LINKS: weakref.WeakSet[_Link] = weakref.WeakSet()


def _stop_waiting(**_kwargs) -> None:
    """Celery's ``worker_shutting_down`` (sent from its SIGTERM/SIGINT handler): the worker's loop calls
    ``drain_events(timeout=2.0)`` once more after it decided to stop, so a wait for messages would hold
    the stop up to twice 2 s; it now returns at once."""
    for link in list(_LINKS):
        if link.pid == os.getpid():
            link.interrupt()


def _confirm_at_exit() -> None:
    """A program that publishes and exits without releasing its connection (Celery's producer pool
    keeps it) still learns whether its last publishes were confirmed: they are waited for here, and
    what was not confirmed is logged as an error."""
    for link in list(_LINKS):
        if link.pid != os.getpid():
            continue            # a forked child's copy of its parent's connection: the parent's to confirm
        try:
            unconfirmed = link.confirm_all(KOMBU_REPLY_TIMEOUT_S)
        except Exception:       # noqa: BLE001  (at exit: say it, never raise)
            _log.exception("journal-engine transport at exit: confirming the last publishes failed")
            continue
        if unconfirmed:
            _log.error("journal-engine transport at exit: %d publish(es) not confirmed durable (%s): %s",
                       len(unconfirmed), link.lost or "no RECEIPT", ", ".join(unconfirmed[:_NAMED_MAX]))


atexit.register(_confirm_at_exit)
_celery_hooked = False


def _hook_celery() -> None:
    """Connect :func:`_stop_waiting` to Celery's ``worker_shutting_down``, once, if Celery is in use."""
    global _celery_hooked
    if _celery_hooked or "celery" not in sys.modules:
        return
    try:
        from celery.signals import worker_shutting_down
    except ImportError:
        return
    worker_shutting_down.connect(_stop_waiting, weak=False, dispatch_uid="journal-engine-kombu-stop-waiting")
    _celery_hooked = True


class _ServerQoS(virtual.QoS):
    """Nothing to restore at the client: the server delivers again what was not acknowledged."""

    def restore_unacked(self) -> None:
        return None

    def restore_unacked_once(self, stderr=None) -> None:
        return None


def _queue_destination(queue: str) -> str:
    return QUEUE_PREFIX + queue


def _queue_of(destination: str) -> str:
    return destination[len(QUEUE_PREFIX):] if destination.startswith(QUEUE_PREFIX) else destination


def _headers_bytes(headers: dict[str, str]) -> bytes:
    return b"".join(b"\n%s:%s" % (header_value(name, True), header_value(str(value), True))
                    for name, value in headers.items())


def _drop_confirmed(pending: deque, confirmed: int) -> None:
    while pending and pending[0][0] <= confirmed:
        pending.popleft()


def _window(options: dict, name: str, default: int) -> int:
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"transport option {name} must be a whole number of at least 1, not {value!r}")
    return value


class Channel(virtual.Channel):
    """A kombu channel whose exchanges, bindings and unacknowledged messages are the server's."""

    QoS = _ServerQoS
    do_restore = False
    supports_fanout = True

    def __init__(self, connection, **kwargs) -> None:
        super().__init__(connection, **kwargs)
        options = connection.client.transport_options
        self.publish_window = _window(options, "publish_window", PUBLISH_WINDOW_DEFAULT)
        self.ack_window = _window(options, "ack_window", ACK_WINDOW_DEFAULT)
        # subscription id -> (queue, no_ack, callback) of each basic_consume (and of its earlier
        # subscriptions while a new prefetch count replaced them: their messages still arrive)
        self._subscriptions: dict[str, tuple[str, bool, Callable]] = {}
        # consumer tag -> its subscription ids, the current one last
        self._subscriptions_of: dict[str, list[str]] = {}
        # delivery tag -> (message-id, subscription id) of each delivery not yet settled
        self._unsettled: dict[str, tuple[str, str]] = {}
        self._prefetch = 1
        self._deliveries = 0                    # deliveries handed to kombu: their tags
        # the pipelined frames not yet confirmed, oldest first (under the link's lock): each publish
        # as (frame number, what it was, in words), each ACK or NACK as (frame number, "")
        self._publishes: deque[tuple[int, str]] = deque()
        self._settlements: deque[tuple[int, str]] = deque()
        self._failed: list[str] = []            # publishes a lost connection (or a refusal) left unconfirmed
        self._failed_why = ""

    @property
    def _link(self) -> _Link:
        link = self.connection.link if self.connection is not None else None
        if link is None:
            raise ConnectionError("not connected to a journal-engine server")
        return link

    # ------------------------------------------------------------- confirmations
    def unconfirmed_publishes_of(self, link: _Link) -> list[str]:
        """With the link's lock held: the publishes not confirmed (those that failed included)."""
        _drop_confirmed(self._publishes, link.confirmed)
        return [*self._failed, *(what for _, what in self._publishes)]

    def _check_failed_locked(self, link: _Link | None) -> None:
        """With the link's lock held: raise UnconfirmedPublishError for the publishes the connection
        was lost (or refused) before confirming, once."""
        if link is not None:
            _drop_confirmed(self._publishes, link.confirmed)
            _drop_confirmed(self._settlements, link.confirmed)
            if link.lost is not None and self._publishes:
                self._failed.extend(what for _, what in self._publishes)
                self._failed_why = f"the connection was lost before their RECEIPT: {link.lost}"
                self._publishes.clear()
            if link.lost is not None:
                self._settlements.clear()       # their messages are the server's to deliver again
        if self._failed:
            failed, self._failed = self._failed, []
            raise UnconfirmedPublishError(self._failed_why, failed)

    def _check_failed(self) -> None:
        link = self.connection.link if self.connection is not None else None
        if link is None:
            self._check_failed_locked(None)
            return
        with link.changed:
            self._check_failed_locked(link)

    def _send_pipelined(self, build: Callable[[str | None], bytes], what: str) -> None:
        """Write the frame ``build(receipt id or None)`` makes without waiting for its RECEIPT (see
        _Link); once the channel has its window of publishes (``what``: in words), or of ACKs and NACKs
        (``what`` ""), unconfirmed, wait for them all. Raises what failed before
        (UnconfirmedPublishError) instead of writing, and ConnectionError for a lost connection."""
        link = self._link
        pending = self._publishes if what else self._settlements
        with link.changed:
            self._check_failed_locked(link)
            full = len(pending) + 1 >= (self.publish_window if what else self.ack_window)

        def sent(number: int, _receipt: str | None) -> None:
            pending.append((number, what))
            link.channels.add(self)

        try:
            number, _ = link.write(build, receipt="always" if full else "unless-awaited", sent=sent)
        except ConnectionError:
            self._check_failed()
            raise
        if full:
            with link.changed:
                link.wait(lambda: link.confirmed >= number, time.monotonic() + KOMBU_REPLY_TIMEOUT_S)
                self._check_failed_locked(link)

    def _confirm(self) -> None:
        """Wait for a RECEIPT covering every frame this channel pipelined; raise the publishes that
        failed (UnconfirmedPublishError)."""
        link = self.connection.link if self.connection is not None else None
        if link is not None:
            with link.changed:
                last = max(self._publishes[-1][0] if self._publishes else 0,
                           self._settlements[-1][0] if self._settlements else 0)
                if last:
                    link.confirm(last, time.monotonic() + KOMBU_REPLY_TIMEOUT_S)
        self._check_failed()

    def _request(self, build: Callable[[str], bytes]) -> dict:
        self._check_failed()
        return self._link.request(build)

    def _control(self, operation: str, **headers: str) -> dict:
        headers = dict(headers, destination=CONTROL_PREFIX + operation)
        return self._request(lambda receipt: b"SEND%s\nreceipt:%s\n\n\x00" % (
            _headers_bytes(headers), header_value(receipt, True)))

    # ------------------------------------------------------------- exchanges, queues, bindings
    def exchange_declare(self, exchange=None, type="direct", durable=False, auto_delete=False, arguments=None,
                         nowait=False, passive=False) -> None:
        type = type or "direct"
        exchange = exchange or f"amq.{type}"
        reply = self._control("declare-exchange", exchange=exchange, **{"exchange-type": type},
                              passive=str(bool(passive)).lower())
        if passive and reply.get("exists") != "true":
            raise ChannelError(f"NOT_FOUND - no exchange {exchange!r}", (50, 10), "Channel.exchange_declare", "404")

    def exchange_delete(self, exchange, if_unused=False, nowait=False) -> None:
        self._control("delete-exchange", exchange=exchange)

    def queue_declare(self, queue=None, passive=False, **kwargs):
        queue = queue or f"amq.gen-{uuid.uuid4()}"
        reply = self._control("declare-queue", queue=_queue_destination(queue), passive=str(bool(passive)).lower())
        if reply.get("exists") != "true":
            raise ChannelError(f"NOT_FOUND - no queue {queue!r}", (50, 10), "Channel.queue_declare", "404")
        return queue_declare_ok_t(queue, int(reply.get("message-count", 0)), 0)

    def queue_bind(self, queue, exchange=None, routing_key="", arguments=None, **kwargs) -> None:
        if exchange:                    # the default exchange routes by queue name: nothing to bind
            self._control("bind", exchange=exchange, queue=_queue_destination(queue),
                          **{ROUTING_KEY_HEADER: routing_key or ""})

    def queue_unbind(self, queue, exchange=None, routing_key="", arguments=None, **kwargs) -> None:
        if exchange:
            self._control("unbind", exchange=exchange, queue=_queue_destination(queue),
                          **{ROUTING_KEY_HEADER: routing_key or ""})

    def queue_purge(self, queue, **kwargs) -> int:
        return int(self._control("purge", queue=_queue_destination(queue)).get("message-count", 0))

    def queue_delete(self, queue, if_unused=False, if_empty=False, **kwargs) -> int | None:
        if if_empty and self._size(queue):
            return None
        return int(self._control("delete-queue", queue=_queue_destination(queue)).get("message-count", 0))

    def _size(self, queue) -> int:
        return int(self._control("declare-queue", queue=_queue_destination(queue), passive="true")
                   .get("message-count", 0))

    def _has_queue(self, queue, **kwargs) -> bool:
        return self._control("declare-queue", queue=_queue_destination(queue),
                             passive="true").get("exists") == "true"

    def list_bindings(self):
        raise NotImplementedError("the bindings are the server's; journal-engine serve-stomp keeps them in "
                                  "exchanges.json in its data directory")

    # ------------------------------------------------------------- publishing
    def basic_publish(self, message, exchange, routing_key, **kwargs) -> None:
        """A SEND with a receipt, not waited for (up to ``publish_window`` of them; see the module's
        docstring); raises an earlier publish's failure (UnconfirmedPublishError) instead of sending."""
        self._inplace_augment_message(message, exchange, routing_key)
        headers: dict[str, str] = {}
        if exchange:
            destination = EXCHANGE_PREFIX + exchange
            headers[ROUTING_KEY_HEADER] = routing_key or ""
        else:
            destination = _queue_destination(routing_key)
        properties = message["properties"]
        expiration_ms = properties.get("expiration")
        if expiration_ms not in (None, ""):
            headers[EXPIRES_HEADER] = str(int(time.time() * 1000) + int(float(expiration_ms)))
        duplicate_id = _duplicate_id_of(message)
        if duplicate_id is not None:
            headers[DUPLICATE_ID_HEADERS[0]] = duplicate_id
        priority = properties.get("priority")
        if priority not in (None, ""):      # AMQP's 0-255 clamped to JMS's 0-9, as Artemis's AMQP side does
            headers[PRIORITY_HEADER] = str(min(max(int(priority), PRIORITY_MIN), PRIORITY_MAX))
        body = dumps(message).encode("utf-8")
        headers["destination"] = destination
        head = b"SEND%s\ncontent-type:application/json\ncontent-length:%d" % (_headers_bytes(headers), len(body))
        what = f"{exchange or '(default)'}/{routing_key} ({properties.get('correlation_id') or '-'})"
        self._send_pipelined(lambda receipt: b"%s%s\n\n%s\x00" % (
            head, b"" if receipt is None else b"\nreceipt:" + receipt.encode(), body), what)

    # ------------------------------------------------------------- consuming
    def basic_consume(self, queue, no_ack, callback, consumer_tag, **kwargs) -> str:
        self._check_failed()
        subscription = f"{self.channel_id}:{consumer_tag}"
        self._subscribe(queue, subscription, self._prefetch)
        self._subscriptions[subscription] = (queue, bool(no_ack), callback)
        self._subscriptions_of[consumer_tag] = [subscription]
        self._tag_to_queue[consumer_tag] = queue
        self._active_queues.append(queue)
        self._consumers.add(consumer_tag)
        return consumer_tag

    def basic_cancel(self, consumer_tag) -> None:
        """UNSUBSCRIBE; a message that arrived for it and was not handed to kombu goes back (a NACK)."""
        if consumer_tag not in self._consumers:
            return
        self._consumers.discard(consumer_tag)
        queue = self._tag_to_queue.pop(consumer_tag, None)
        if queue in self._active_queues:
            self._active_queues.remove(queue)
        subscriptions = self._subscriptions_of.pop(consumer_tag, [])
        for subscription in subscriptions:
            self._subscriptions.pop(subscription, None)
        link = self.connection.link
        if link is not None and link.lost is None and subscriptions:
            self._unsubscribe(queue, subscriptions[-1])     # the earlier ones were unsubscribed when replaced
            while (entry := link.take(0, set(subscriptions))) is not None:
                self._nack(entry[1].headers["message-id"], entry[0], requeue=True)

    def basic_get(self, queue, no_ack=False, **kwargs):
        """The next message of ``queue``, or None. While this channel consumes from ``queue``, the
        message the server handed to that consumer and kombu has not yet seen; otherwise a
        subscription of its own, ended once the server answered it."""
        self._check_failed()
        consuming = {subscription for subscription, entry in self._subscriptions.items() if entry[0] == queue}
        if consuming:
            entry = self._link.take(0, consuming)
        else:
            subscription = f"{self.channel_id}:get:{uuid.uuid4().hex}"
            self._subscribe(queue, subscription, 1)     # the server sends what it has before the RECEIPT
            self._unsubscribe(queue, subscription)
            entry = self._link.take(0, {subscription})
        if entry is None:
            return None
        return self._message_of(entry[0], entry[1], no_ack)

    def deliver(self, subscription: str, frame) -> None:
        """A MESSAGE the transport drained: to its consumer's callback. One whose consumer is gone
        goes back to the server, and one that expired while it waited here goes back too (the server
        then moves it to the dead-letter queue as expired)."""
        entry = self._subscriptions.get(subscription)
        expires = frame.headers.get(EXPIRES_HEADER)
        if entry is None or (expires and 0 < int(expires) <= time.time() * 1000):
            self._nack(frame.headers["message-id"], subscription, requeue=True)
            return
        _, no_ack, callback = entry
        callback(self._message_of(subscription, frame, no_ack))

    def _message_of(self, subscription: str, frame, no_ack: bool):
        payload = loads(bytes(frame.body))
        properties = payload["properties"]
        self._deliveries += 1
        tag = f"{self.channel_id}.{self._deliveries}"     # unique in the channel (a uuid4 took 6 % of a worker)
        properties["delivery_tag"] = tag
        info = properties.setdefault("delivery_info", {})
        info["redelivered"] = frame.headers.get(REDELIVERED_HEADER) == "true"
        info["delivery_count"] = int(frame.headers.get(DELIVERY_COUNT_HEADER, 1))
        original = frame.headers.get(ORIGINAL_DESTINATION_HEADER)
        if original:
            info["original_queue"] = _queue_of(original)
        message = self.Message(payload, channel=self)
        if no_ack:
            acknowledged = b"ACK%s\n\n\x00" % _headers_bytes(
                {"message-id": frame.headers["message-id"], "subscription": subscription})
            self._link.write(lambda _: acknowledged)
        else:
            self._unsettled[tag] = (frame.headers["message-id"], subscription)
        return message

    def _subscribe(self, queue: str, subscription: str, prefetch: int) -> None:
        head = b"SUBSCRIBE%s" % _headers_bytes({"destination": _queue_destination(queue), "id": subscription,
                                                "ack": "client-individual", PREFETCH_HEADER: str(prefetch)})
        self._request(lambda receipt: b"%s\nreceipt:%s\n\n\x00" % (head, receipt.encode()))

    def _unsubscribe(self, queue: str, subscription: str) -> None:
        head = b"UNSUBSCRIBE%s" % _headers_bytes({"id": subscription, "destination": _queue_destination(queue)})
        self._request(lambda receipt: b"%s\nreceipt:%s\n\n\x00" % (head, receipt.encode()))

    # ------------------------------------------------------------- settling
    def basic_ack(self, delivery_tag, multiple=False) -> None:
        """An ACK, its RECEIPT not waited for (up to ``ack_window``: see the module's docstring)."""
        settled = self._unsettled.pop(delivery_tag, None)
        if settled is None:
            return
        message_id, subscription = settled
        head = b"ACK%s" % _headers_bytes({"message-id": message_id, "subscription": subscription})
        self._send_pipelined(lambda receipt: b"%s%s\n\n\x00" % (
            head, b"" if receipt is None else b"\nreceipt:" + receipt.encode()), "")

    def basic_reject(self, delivery_tag, requeue=False) -> None:
        """requeue=True: a failed delivery (the server's redelivery delay and delivery count apply);
        requeue=False: to the server's dead-letter queue, naming the queue it came from."""
        settled = self._unsettled.pop(delivery_tag, None)
        if settled is not None:
            self._nack(*settled, requeue=requeue)

    def basic_recover(self, requeue=False) -> None:
        """Every delivery of this channel not settled goes back to the server (failed deliveries)."""
        for tag in list(self._unsettled):
            self.basic_reject(tag, requeue=True)

    def basic_qos(self, prefetch_size=0, prefetch_count=0, apply_global=False) -> None:
        """Each subscription asks the server for ``prefetch_count`` messages (0: one at a time); a new
        count replaces the subscriptions: the server stops sending on the old ones, and what they hold
        is still acknowledged and delivered as before."""
        self.qos.prefetch_count = prefetch_count
        prefetch = min(max(int(prefetch_count or 1), 1), SERVED_PREFETCH_MAX)
        if prefetch == self._prefetch:
            return
        self._prefetch = prefetch
        for consumer_tag, subscriptions in self._subscriptions_of.items():
            queue, no_ack, callback = self._subscriptions[subscriptions[-1]]
            subscription = f"{self.channel_id}:{consumer_tag}:{len(subscriptions)}"
            self._subscribe(queue, subscription, prefetch)
            self._subscriptions[subscription] = (queue, no_ack, callback)
            self._unsubscribe(queue, subscriptions[-1])
            subscriptions.append(subscription)

    def _nack(self, message_id: str, subscription: str, *, requeue: bool) -> None:
        head = b"NACK%s" % _headers_bytes({"message-id": message_id, "subscription": subscription,
                                           REQUEUE_HEADER: str(requeue).lower()})
        self._send_pipelined(lambda receipt: b"%s%s\n\n\x00" % (
            head, b"" if receipt is None else b"\nreceipt:" + receipt.encode()), "")

    def close(self) -> None:
        """Cancel the consumers; deliveries not settled go back to the server (failed deliveries); wait
        for the RECEIPTs of what this channel pipelined. Publishes not confirmed are raised by the
        connection's release (kombu closes a connection's default channel quietly, ignoring errors),
        or here for a channel without a connection."""
        failed: list[UnconfirmedPublishError] = []
        if not self.closed and self.connection is not None and self.connection.link is not None:
            try:
                for tag in list(self._consumers):
                    self.basic_cancel(tag)
                if self.connection.link.lost is None:
                    self.basic_recover(requeue=True)
                self._confirm()
            except UnconfirmedPublishError as error:
                failed.append(error)
            except ConnectionError:
                pass            # the server counts what this connection held as failed deliveries
        try:
            self._check_failed()
        except UnconfirmedPublishError as error:
            failed.append(error)
        transport = self.connection
        super().close()
        if failed:
            if transport is None:
                raise failed[0]
            transport.failed_publishes.extend(failed)


class Transport(virtual.Transport):
    """kombu's transport for ``journal-engine://HOST:PORT`` (a ``journal-engine serve-stomp`` server).

    Transport options (``kombu.Connection(url, transport_options={...})``, Celery's
    ``broker_transport_options``): ``publish_window`` and ``ack_window``, the module's docstring says."""

    Channel = Channel
    default_port = DEFAULT_PORT
    driver_type = SCHEME
    driver_name = "stomp"
    connection_errors = (ConnectionError, OSError)
    channel_errors = (ChannelError,)
    # asynchronous: a Celery worker runs its event loop (asynloop) on the connection's socket, and its
    # prefork pool without the threads and semaphore of the blocking loop (synloop), which held a
    # worker to one task in flight per pool process (py-spy: its loop waited on the pool's semaphore
    # a quarter of the time, and each message and result went through three threads)
    implements = virtual.Transport.implements.extend(
        asynchronous=True, exchange_type=frozenset(["direct", "topic", "fanout"]), heartbeats=False)

    def __init__(self, client, **kwargs) -> None:
        super().__init__(client, **kwargs)
        self.link: _Link | None = None
        self._loop = None                       # the event loop (kombu's Hub) the link is registered with
        # UnconfirmedPublishErrors of channels kombu closed quietly; raised by close_connection
        self.failed_publishes: list[UnconfirmedPublishError] = []

    def establish_connection(self):
        conninfo = self.client
        host = conninfo.hostname or "127.0.0.1"
        if host == "localhost":
            host = "127.0.0.1"
        port = int(conninfo.port or self.default_port)
        _hook_celery()
        try:
            self.link = _Link(host, port, conninfo.connect_timeout, conninfo.userid, conninfo.password)
        except OSError as error:
            why = error.strerror or str(error) or type(error).__name__
            raise ConnectionError(f"cannot connect to a journal-engine server at {host}:{port}: {why}; "
                                  "is `journal-engine serve-stomp` running there?") from None
        return super().establish_connection()

    def close_connection(self, connection) -> None:
        """Close the channels (each waits for its RECEIPTs), then the connection; raise the publishes
        the channels found not confirmed."""
        try:
            super().close_connection(connection)
        finally:
            self._unregister()
            if self.link is not None:
                self.link.close()
                self.link = None
        if self.failed_publishes:
            failures, self.failed_publishes = self.failed_publishes, []
            raise UnconfirmedPublishError(failures[0].why, [what for error in failures for what in error.unconfirmed])

    def verify_connection(self, connection) -> bool:
        return self.link is not None and self.link.lost is None

    # ------------------------------------------------------------- an event loop's (Celery's asynloop)
    def register_with_event_loop(self, connection, loop) -> None:
        """Read the socket when the loop finds it readable; wake the loop when a Celery worker stops
        (the link's pipe); hand over, at each turn of the loop, the messages a wait read meanwhile
        (a request's, or a full window's, in a callback)."""
        if self.link is None:
            raise ConnectionError("not connected to a journal-engine server")
        self._unregister()
        self._loop = loop
        loop.add_reader(self.link.fileno(), self.on_readable, connection, loop)
        loop.add_reader(self.link.wake_fileno(), self.link.drain_wake)
        loop.on_tick.add(self._deliver_taken)

    def unregister_from_event_loop(self, connection, loop) -> None:
        self._unregister()

    def _unregister(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None or self.link is None:
            return
        loop.on_tick.discard(self._deliver_taken)
        for fileno in (self.link.fileno(), self.link.wake_fileno()):
            try:
                loop.remove_reader(fileno)
            except (KeyError, OSError, ValueError):
                pass

    def on_readable(self, connection, loop) -> None:
        """The socket is readable: sort what it holds; the MESSAGEs wait for the loop's next turn."""
        if self.link is None:
            raise ConnectionError("not connected to a journal-engine server")
        self.link.read_available()

    def _deliver_taken(self) -> None:
        """At each turn of the loop, before it polls: one MESSAGE to its consumer, and the loop woken
        to turn again at once. One a turn, so that what the consumer scheduled for the loop's next
        turn (Celery acknowledges there, ``call_soon``) runs before the next message is handed over:
        a solo pool runs the task inside the handing over, and its early ACK came after the runs of
        the whole batch a read brought."""
        link = self.link
        if link is None or link.lost is not None:
            return
        entry = link.pop_message()
        if entry is not None:
            self._deliver(entry)
            link.wake()

    # ------------------------------------------------------------- a blocking loop's
    def drain_events(self, connection, timeout=None) -> None:
        """Hand the next MESSAGE to its channel's consumer; socket.timeout when none comes in time."""
        if self.link is None:
            raise ConnectionError("not connected to a journal-engine server")
        entry = self.link.take(timeout)
        if entry is None:
            raise socket.timeout()
        self._deliver(entry)

    def _deliver(self, entry) -> None:
        subscription, frame = entry
        for channel in self.channels:
            if subscription in channel._subscriptions:
                channel.deliver(subscription, frame)
                return
        channel_id = subscription.split(":", 1)[0]
        owner = next((channel for channel in self.channels if str(channel.channel_id) == channel_id), None)
        if owner is not None:
            owner.deliver(subscription, frame)      # its consumer is gone: back to the server
        else:
            refused = b"NACK%s\n\n\x00" % _headers_bytes(
                {"message-id": frame.headers["message-id"], "subscription": subscription, REQUEUE_HEADER: "true"})
            self.link.write(lambda _: refused)

    @property
    def default_connection_params(self) -> dict:
        return {"port": self.default_port, "hostname": "127.0.0.1"}


TRANSPORT_ALIASES.setdefault(SCHEME, f"{__name__}:Transport")
