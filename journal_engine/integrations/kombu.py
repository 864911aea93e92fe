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

Each publish, declaration, ACK and NACK waits for its RECEIPT, which the server sends once it is on
disk. Each subscription asks the server for one message at a time (``activemq.prefetchSize:1``): a
message kombu has not taken stays in the server's queue, for any consumer; kombu's prefetch count has
no further effect.
"""
from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections import deque
from typing import Any, Callable

import stomp
import stomp.exception
from amqp.protocol import queue_declare_ok_t
from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, virtual
from kombu.utils.json import dumps, loads

from ..limits import KOMBU_REPLY_TIMEOUT_S
from ..served.messages import DELIVERY_COUNT_HEADER, EXPIRES_HEADER, ORIGINAL_DESTINATION_HEADER, REDELIVERED_HEADER
from .exchanges import CONTROL_PREFIX, EXCHANGE_PREFIX, QUEUE_PREFIX, REQUEUE_HEADER, ROUTING_KEY_HEADER

__all__ = ["Transport", "Channel", "SCHEME"]

SCHEME = "journal-engine"
DEFAULT_PORT = 61613
PREFETCH_HEADER = "activemq.prefetchSize"


class _Link:
    """One STOMP connection to the server and what arrives on it: RECEIPTs waited for by
    :meth:`request`, MESSAGEs queued in an inbox for :meth:`take`. stomp.py's receiver thread fills
    both; a lost connection or an ERROR frame wakes every waiter."""

    def __init__(self, host: str, port: int, connect_timeout_s: float | None) -> None:
        self._changed = threading.Condition()
        self._replies: dict[str, dict] = {}
        self._inbox: deque[tuple[str, Any]] = deque()
        self.lost: str | None = None
        # receipt id -> the ERROR frame's message, for a request the server refused (then it closes)
        self._refused: dict[str, str] = {}
        self._connection = stomp.Connection11([(host, port)], reconnect_attempts_max=1, auto_decode=False,
                                              timeout=connect_timeout_s, heartbeats=(0, 0))
        self._connection.set_listener("journal-engine", _Listener(self))
        self._connection.connect(wait=True)

    # ------------------------------------------------------------- called by stomp.py's receiver
    def arrived(self, frame) -> None:
        with self._changed:
            self._inbox.append((frame.headers.get("subscription", ""), frame))
            self._changed.notify_all()

    def receipted(self, frame) -> None:
        with self._changed:
            self._replies[frame.headers.get("receipt-id", "")] = dict(frame.headers)
            self._changed.notify_all()

    def refused(self, frame) -> None:
        message = frame.headers.get("message", "")
        with self._changed:
            self._refused[frame.headers.get("receipt-id", "")] = message
        self.broken(f"the server refused a frame: {message}")

    def broken(self, why: str) -> None:
        with self._changed:
            if self.lost is None:
                self.lost = why
            self._changed.notify_all()

    # ------------------------------------------------------------- called by the transport
    @property
    def stomp(self) -> stomp.Connection11:
        return self._connection

    def request(self, send: Callable[[str], None]) -> dict:
        """``send(receipt_id)`` writes a frame asking for that receipt; returns the RECEIPT's headers.
        ChannelError when the server refused the frame (an ERROR naming the receipt: the request is
        wrong, and would be wrong again); ConnectionError when the connection is lost first (or no
        RECEIPT comes in KOMBU_REPLY_TIMEOUT_S)."""
        receipt = uuid.uuid4().hex
        self._check()
        send(receipt)
        deadline = time.monotonic() + KOMBU_REPLY_TIMEOUT_S
        with self._changed:
            while receipt not in self._replies:
                if receipt in self._refused:
                    raise ChannelError(f"journal-engine serve-stomp refused the request: {self._refused.pop(receipt)}")
                left = deadline - time.monotonic()
                if self.lost is not None or left <= 0:
                    self.broken(self.lost or f"no RECEIPT within {KOMBU_REPLY_TIMEOUT_S} s")
                    self._check()
                self._changed.wait(left)
            return self._replies.pop(receipt)

    def take(self, timeout_s: float | None, subscriptions: set[str] | None = None):
        """The oldest MESSAGE (of one of ``subscriptions`` when given) as (subscription id, frame);
        None once ``timeout_s`` passed (0: do not wait). ConnectionError when the connection is lost."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._changed:
            while True:
                for index, entry in enumerate(self._inbox):
                    if subscriptions is None or entry[0] in subscriptions:
                        del self._inbox[index]
                        return entry
                self._check()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._changed.wait(left)

    def close(self) -> None:
        try:
            if self._connection.is_connected():
                self._connection.disconnect()
        except (stomp.exception.StompException, OSError):
            pass                # it went away already: what it held is the server's to deliver again
        self.broken("closed")

    def _check(self) -> None:
        if self.lost is not None:
            raise ConnectionError(f"the journal-engine server connection is lost: {self.lost}")


class _Listener(stomp.ConnectionListener):
    def __init__(self, link: _Link) -> None:
        self._link = link

    def on_message(self, frame) -> None:
        self._link.arrived(frame)

    def on_receipt(self, frame) -> None:
        self._link.receipted(frame)

    def on_error(self, frame) -> None:
        self._link.refused(frame)

    def on_disconnected(self) -> None:
        self._link.broken("disconnected")


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


class Channel(virtual.Channel):
    """A kombu channel whose exchanges, bindings and unacknowledged messages are the server's."""

    QoS = _ServerQoS
    do_restore = False
    supports_fanout = True

    def __init__(self, connection, **kwargs) -> None:
        super().__init__(connection, **kwargs)
        # subscription id -> (queue, no_ack, callback) of each basic_consume
        self._subscriptions: dict[str, tuple[str, bool, Callable]] = {}
        # delivery tag -> (message-id, subscription id) of each delivery not yet settled
        self._unsettled: dict[str, tuple[str, str]] = {}

    @property
    def _link(self) -> _Link:
        return self.connection.link

    def _control(self, operation: str, **headers: str) -> dict:
        return self._link.request(lambda receipt: self._link.stomp.send(
            CONTROL_PREFIX + operation, b"", headers=dict(headers, receipt=receipt)))

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
        """A SEND, returned from once the server has it on disk (its RECEIPT)."""
        self._inplace_augment_message(message, exchange, routing_key)
        headers: dict[str, str] = {}
        if exchange:
            destination = EXCHANGE_PREFIX + exchange
            headers[ROUTING_KEY_HEADER] = routing_key or ""
        else:
            destination = _queue_destination(routing_key)
        expiration_ms = message["properties"].get("expiration")
        if expiration_ms not in (None, ""):
            headers[EXPIRES_HEADER] = str(int(time.time() * 1000) + int(float(expiration_ms)))
        body = dumps(message).encode("utf-8")
        self._link.request(lambda receipt: self._link.stomp.send(
            destination, body, content_type="application/json", headers=dict(headers, receipt=receipt)))

    # ------------------------------------------------------------- consuming
    def basic_consume(self, queue, no_ack, callback, consumer_tag, **kwargs) -> str:
        subscription = f"{self.channel_id}:{consumer_tag}"
        self._subscribe(queue, subscription)
        self._subscriptions[subscription] = (queue, bool(no_ack), callback)
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
        subscription = f"{self.channel_id}:{consumer_tag}"
        self._subscriptions.pop(subscription, None)
        if self._link.lost is None:
            self._unsubscribe(queue, subscription)
            while (entry := self._link.take(0, {subscription})) is not None:
                self._nack(entry[1].headers["message-id"], subscription, requeue=True)

    def basic_get(self, queue, no_ack=False, **kwargs):
        """The next message of ``queue``, or None. While this channel consumes from ``queue``, the
        message the server handed to that consumer and kombu has not yet seen; otherwise a
        subscription of its own, ended once the server answered it."""
        consuming = {subscription for subscription, entry in self._subscriptions.items() if entry[0] == queue}
        if consuming:
            entry = self._link.take(0, consuming)
        else:
            subscription = f"{self.channel_id}:get:{uuid.uuid4().hex}"
            self._subscribe(queue, subscription)       # the server sends what it has before the RECEIPT
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
        payload = loads(frame.body)
        properties = payload["properties"]
        tag = uuid.uuid4().hex
        properties["delivery_tag"] = tag
        info = properties.setdefault("delivery_info", {})
        info["redelivered"] = frame.headers.get(REDELIVERED_HEADER) == "true"
        info["delivery_count"] = int(frame.headers.get(DELIVERY_COUNT_HEADER, 1))
        original = frame.headers.get(ORIGINAL_DESTINATION_HEADER)
        if original:
            info["original_queue"] = _queue_of(original)
        message = self.Message(payload, channel=self)
        if no_ack:
            self._link.stomp.ack(frame.headers["message-id"], subscription)
        else:
            self._unsettled[tag] = (frame.headers["message-id"], subscription)
        return message

    def _subscribe(self, queue: str, subscription: str) -> None:
        self._link.request(lambda receipt: self._link.stomp.subscribe(
            _queue_destination(queue), subscription, ack="client-individual",
            headers={"receipt": receipt, PREFETCH_HEADER: "1"}))

    def _unsubscribe(self, queue: str, subscription: str) -> None:
        self._link.request(lambda receipt: self._link.stomp.unsubscribe(
            subscription, headers={"receipt": receipt, "destination": _queue_destination(queue)}))

    # ------------------------------------------------------------- settling
    def basic_ack(self, delivery_tag, multiple=False) -> None:
        """An ACK, returned from once the server has it on disk."""
        settled = self._unsettled.pop(delivery_tag, None)
        if settled is None:
            return
        message_id, subscription = settled
        self._link.request(lambda receipt: self._link.stomp.ack(message_id, subscription, receipt=receipt))

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
        self.qos.prefetch_count = prefetch_count     # each subscription asks the server for one at a time

    def _nack(self, message_id: str, subscription: str, *, requeue: bool) -> None:
        self._link.request(lambda receipt: self._link.stomp.nack(
            message_id, subscription, receipt=receipt, **{REQUEUE_HEADER: str(requeue).lower()}))

    def close(self) -> None:
        """Cancel the consumers; deliveries not settled go back to the server (failed deliveries)."""
        if not self.closed and self.connection is not None and self.connection.link is not None:
            try:
                for tag in list(self._consumers):
                    self.basic_cancel(tag)
                if self._link.lost is None:
                    self.basic_recover(requeue=True)
            except ConnectionError:
                pass            # the server counts what this connection held as failed deliveries
        super().close()


def _unreachable_because(host: str, port: int, timeout_s: float | None) -> str:
    """Why a STOMP connection to ``host:port`` failed, in the operating system's words."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s or KOMBU_REPLY_TIMEOUT_S):
            return "it accepts connections but did not answer STOMP's CONNECT"
    except OSError as error:
        return error.strerror or str(error) or type(error).__name__


class Transport(virtual.Transport):
    """kombu's transport for ``journal-engine://HOST:PORT`` (a ``journal-engine serve-stomp`` server)."""

    Channel = Channel
    default_port = DEFAULT_PORT
    driver_type = SCHEME
    driver_name = "stomp"
    connection_errors = (ConnectionError, OSError, stomp.exception.StompException)
    channel_errors = (ChannelError,)
    implements = virtual.Transport.implements.extend(
        asynchronous=False, exchange_type=frozenset(["direct", "topic", "fanout"]), heartbeats=False)

    def __init__(self, client, **kwargs) -> None:
        super().__init__(client, **kwargs)
        self.link: _Link | None = None

    def establish_connection(self):
        conninfo = self.client
        host = conninfo.hostname or "127.0.0.1"
        if host == "localhost":
            host = "127.0.0.1"
        port = int(conninfo.port or self.default_port)
        try:
            self.link = _Link(host, port, conninfo.connect_timeout)
        except stomp.exception.ConnectFailedException:
            # stomp.py's exception carries no reason: a plain connection attempt finds it
            raise ConnectionError(f"cannot connect to a journal-engine server at {host}:{port}: "
                                  f"{_unreachable_because(host, port, conninfo.connect_timeout)}; "
                                  "is `journal-engine serve-stomp` running there?") from None
        return super().establish_connection()

    def close_connection(self, connection) -> None:
        try:
            super().close_connection(connection)
        finally:
            if self.link is not None:
                self.link.close()
                self.link = None

    def verify_connection(self, connection) -> bool:
        return self.link is not None and self.link.lost is None

    def drain_events(self, connection, timeout=None) -> None:
        """Hand the next MESSAGE to its channel's consumer; socket.timeout when none comes in time."""
        if self.link is None:
            raise ConnectionError("not connected to a journal-engine server")
        entry = self.link.take(timeout)
        if entry is None:
            raise socket.timeout()
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
            self.link.stomp.nack(frame.headers["message-id"], subscription, **{REQUEUE_HEADER: "true"})

    @property
    def default_connection_params(self) -> dict:
        return {"port": self.default_port, "hostname": "127.0.0.1"}


TRANSPORT_ALIASES.setdefault(SCHEME, f"{__name__}:Transport")
# stomp.py logs each failed connection attempt; without a handler of the program's own, Python's
# last-resort handler printed them to stderr beside the ConnectionError that says it all
logging.getLogger("stomp.py").addHandler(logging.NullHandler())
