"""One client's STOMP connection: an asyncio protocol on the loop that owns the broker.

Frames are read with the shared reader (``integrations/stomp_frames.py``: any split of the stream,
STOMP 1.0 to 1.2, escapes, CRLF, ``content-length`` bodies of any bytes) and handled at once; every
answer waits in the connection's buffer for the end of the turn (``turn.py``), where one sync covers
the turn and one write sends the buffer. A frame that breaks the grammar, a limit or the protocol
gets an ERROR frame (``message`` says what in words, ``receipt-id`` names the frame's receipt), then
a clean close: the server stops writing and drops what the client still sends for
STOMP_ERROR_LINGER_S, so that the close is no reset that could discard the ERROR.

Acknowledgement: STOMP 1.2 acknowledges by the MESSAGE's ``ack`` header (the ACK's ``id``), 1.0 and
1.1 by ``message-id``. ``client`` is cumulative (an ACK or NACK settles every message the
subscription was handed before it), ``client-individual`` settles one. A NACK is a failed delivery
(the broker's delivery count, redelivery delay and dead-letter rule); a NACK with ``requeue:false``
sends the message to the dead-letter queue at once. Messages not settled when the connection ends
are failed deliveries too. An UNSUBSCRIBE stops deliveries; what the subscription holds can still be
settled until the connection ends. A frame in a transaction (BEGIN ... COMMIT) is handled at COMMIT,
its RECEIPT then; ABORT drops them and receipts those that asked.

Security (``serve-stomp --users``): the CONNECT or STOMP frame must carry a ``login`` and a
``passcode`` that match a line of the users file (users.py). A failed login gets an ERROR frame that
says the login failed, never which part, and the connection is closed SERVED_LOGIN_FAILURE_DELAY_S
later by a timer of the loop (others go on meanwhile). A connection past the server's connection
limit (SERVED_CONNECTIONS_MAX, or ``--connections-max``) gets an ERROR naming it and is closed.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import time

from ..errors import JournalError
from ..integrations.exchanges import CONTROL_PREFIX, EXCHANGE_PREFIX, REQUEUE_HEADER
from ..integrations.stomp_frames import FrameReader, StompFrame, StompFrameError, header_value, pack
from ..limits import (SERVED_HEARTBEAT_GRACE, SERVED_LOGIN_FAILURE_DELAY_S, SERVED_SUBSCRIPTIONS_PER_CONNECTION_MAX, SERVED_WRITE_BUFFER_HIGH_BYTES,
                      SERVED_WRITE_BUFFER_LOW_BYTES, STOMP_ERROR_LINGER_S, STOMP_WRITE_TIMEOUT_S)
from .messages import message_frame
from .stomp import CLIENT_COMMANDS, ProtocolError, agreed_heart_beats, agreed_version
from .subscriptions import ACK_MODES, TOPIC_PREFIX, Subscription, prefetch_of

__all__ = ["StompConnection"]

_log = logging.getLogger(__name__)
_TRANSACTION_COMMANDS = frozenset({"BEGIN", "COMMIT", "ABORT"})
_SERVER_NAME = "journal-engine"


class StompConnection(asyncio.Protocol):
    """A connection of the server ``server`` (server.py: its destinations, dispatcher and turn)."""

    def __init__(self, server) -> None:
        self._server = server
        self._destinations = server.destinations
        self._dispatcher = server.dispatcher
        self._turn = server.turn
        self._reader = FrameReader()
        self.transport: asyncio.Transport | None = None
        self.version: str | None = None          # agreed at CONNECT
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._paused = False                     # the transport's buffer is past its high mark
        self._paused_timer = None
        self._closing = False                    # an ERROR or DISCONNECT: nothing more is handled
        self._close_delay_s = 0.0                # a failed login: the close waits this long
        self._eof_sent = False                   # the close began: nothing more is written
        self._closed = False
        self._checking = False                   # a CONNECT's login is being checked (off the loop)
        self._held_back: list[bytes] = []        # what came meanwhile
        self._subscriptions: dict[str, Subscription] = {}    # active, by id
        self._holding: dict[str, Subscription] = {}          # ack id -> the subscription that holds it
        self._transactions: dict[str, list[StompFrame]] = {}
        self._heart_beat_out = None
        self._heart_beat_in = None
        self._last_read = 0.0
        self._last_write = 0.0

    # ------------------------------------------------------------------ asyncio's protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        self._server.connections_accepted += 1
        transport.set_write_buffer_limits(high=SERVED_WRITE_BUFFER_HIGH_BYTES, low=SERVED_WRITE_BUFFER_LOW_BYTES)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # no Nagle: a frame written right after another (an ACK's RECEIPT after the next MESSAGE)
            # would wait for the client's delayed TCP acknowledgement of the first, 40 ms on Linux
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if len(self._server.connections) >= self._server.connections_max:
            self._refuse(f"too many connections: the server holds {self._server.connections_max}, the most it "
                         "takes (SERVED_CONNECTIONS_MAX, serve-stomp --connections-max)", None)
            self.write_out()
            return
        self._server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return                              # an ERROR was sent: what follows is dropped
        self._last_read = time.monotonic()
        if self._checking:
            self._held_back.append(data)        # read once the login is checked
            return
        frame = None
        frames = self._reader.feed(data)
        try:
            for frame in frames:
                self._handle(frame)
                frame = None                    # handled: a refusal the reader raises next is not its
                if self._closing or self._checking:
                    return                      # the rest stays in the reader until the login is checked
        except (StompFrameError, ProtocolError) as error:
            self._refuse(str(error), frame)
        except JournalError as error:           # the broker refused it (a bad header, a request) or failed
            self._refuse(str(error), frame)
        finally:
            frames.close()

    def eof_received(self):
        return False                            # the transport closes; connection_lost settles the rest

    def connection_lost(self, exc) -> None:
        self._closed = True
        self._server.connections.discard(self)
        self._turn.forget(self)
        for timer in (self._heart_beat_out, self._heart_beat_in, self._paused_timer):
            if timer is not None:
                timer.cancel()
        if not self._server.stopping:
            self._release()

    def pause_writing(self) -> None:
        self._paused = True
        # a client that reads nothing for this long is given up (its messages go to other consumers)
        self._paused_timer = asyncio.get_running_loop().call_later(STOMP_WRITE_TIMEOUT_S, self._give_up)

    def resume_writing(self) -> None:
        self._paused = False
        if self._paused_timer is not None:
            self._paused_timer.cancel()
            self._paused_timer = None
        for subscription in self._subscriptions.values():
            self._dispatcher.mark(subscription.destination)

    # ------------------------------------------------------------------ what the dispatcher calls
    def can_take(self) -> bool:
        """Whether MESSAGE frames may be handed to this connection now (back-pressure)."""
        return (not self._paused and not self._closing and not self._closed
                and self._out_bytes < SERVED_WRITE_BUFFER_HIGH_BYTES)

    def deliver(self, subscription: Subscription, message) -> None:
        """``message`` (just received from the broker) to ``subscription``, in this turn's buffer."""
        self._server.delivered += 1
        self._server.frames_sent["MESSAGE"] += 1
        self._queue(message_frame(message, subscription.destination, subscription.id,
                                  self.version == "1.2" and not subscription.auto, self.version != "1.0"))
        if subscription.auto:
            subscription.consumer.ack(message)
        else:
            ack_id = str(message.message_id)
            subscription.unacked[ack_id] = message
            self._holding[ack_id] = subscription

    def deliver_topic(self, subscription: Subscription, headers: dict[str, str], body: bytes, message_id: str) -> None:
        if not self.can_take():
            return                              # a topic is not stored: a subscriber that cannot take it misses it
        headers = {name: value for name, value in headers.items()
                   if name not in ("receipt", "transaction", "content-length")}
        headers.update({"destination": subscription.destination, "message-id": message_id,
                        "subscription": subscription.id})
        self._server.frames_sent["MESSAGE"] += 1
        self._queue(pack(StompFrame("MESSAGE", headers, body), escapes=self.version != "1.0"))

    # ------------------------------------------------------------------ what the turn calls
    def write_out(self) -> None:
        """The turn's buffer, in one write; then the close an ERROR or DISCONNECT asked for."""
        if self._closed or self.transport.is_closing():
            self._out.clear()               # aborted (a stop, a give-up): nothing more goes out
            self._out_bytes = 0
            return
        if self._out and not self._eof_sent:
            data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
            self._out.clear()
            self._out_bytes = 0
            self.transport.write(data)
            self._server.writes += 1
            self._last_write = time.monotonic()
        if self._closing and not self._eof_sent:
            if self._close_delay_s:
                self._eof_sent = True           # the ERROR is out; the close waits (a failed login)
                asyncio.get_running_loop().call_later(self._close_delay_s, self.transport.close)
            else:
                self._close_after_error()

    def fail(self, message: str) -> None:
        """The turn could not make this connection's frames durable: an ERROR, then the close."""
        self._out.clear()
        self._out_bytes = 0
        self._refuse(message, None)
        self.write_out()

    # ------------------------------------------------------------------ frames
    def _handle(self, frame: StompFrame) -> None:
        command = frame.cmd
        if command not in CLIENT_COMMANDS:
            raise ProtocolError(f"unknown STOMP command {command[:40]!r}")
        self._server.frames_received[command] += 1
        if self.version is None:
            if command not in ("CONNECT", "STOMP"):
                raise ProtocolError(f"{command} before CONNECT: the first frame must be CONNECT or STOMP")
            self._connect(frame)
            return
        if command in ("CONNECT", "STOMP"):
            raise ProtocolError(f"{command} on a connection already connected")
        transaction = frame.headers.get("transaction")
        if transaction is not None and command in ("SEND", "ACK", "NACK"):
            if transaction not in self._transactions:
                raise ProtocolError(f"{command}: no transaction {transaction[:60]!r} was begun on this connection")
            self._transactions[transaction].append(frame)   # handled at COMMIT, its RECEIPT then
            return
        self._perform(frame)

    def _perform(self, frame: StompFrame) -> None:
        command = frame.cmd
        reply = getattr(self, "_" + command.lower())(frame)
        receipt = frame.headers.get("receipt")
        if receipt is not None:
            self._receipt(receipt, reply)
        if command == "DISCONNECT":
            self._closing = True
            self._turn.waiting(self)

    def _connect(self, frame: StompFrame) -> None:
        version = agreed_version(frame.headers)
        # a malformed heart-beat is refused before the login is checked
        beats = agreed_heart_beats(frame.headers) if version != "1.0" else None
        users = self._server.users
        if users is None:
            self._connected(version, beats)
            return
        # the scrypt derivation takes tens of milliseconds: on a thread of the loop's executor, so that
        # the other connections go on; this one reads nothing meanwhile
        self._checking = True
        self.transport.pause_reading()
        checked = asyncio.get_running_loop().run_in_executor(
            None, users.check, frame.headers.get("login"), frame.headers.get("passcode"))
        checked.add_done_callback(lambda future: self._login_checked(future, frame, version, beats))

    def _login_checked(self, future, frame: StompFrame, version: str, beats: tuple | None) -> None:
        self._checking = False
        if self._closed:
            return
        self.transport.resume_reading()         # a refusal drops what follows; a close with unread bytes would reset
        if future.cancelled() or future.exception() is not None or not future.result():
            _log.info("serve-stomp: a login failed")
            self._refuse("login failed: the login or the passcode does not match", frame)
            self._close_delay_s = SERVED_LOGIN_FAILURE_DELAY_S
            return
        self._connected(version, beats)
        held_back, self._held_back = b"".join(self._held_back), []
        self.data_received(held_back)           # the frames that came with or after the CONNECT

    def _connected(self, version: str, beats: tuple[int, int, str] | None) -> None:
        """CONNECTED, with the heart-beats ``agreed_heart_beats`` gave (None on STOMP 1.0)."""
        headers = {"server": _SERVER_NAME, "session": f"{id(self):x}"}
        if beats is not None:
            server_sends, client_sends, offered = beats
            headers = {"version": version, "heart-beat": offered, **headers}
            self._start_heart_beats(server_sends, client_sends)
        self.version = version
        self._reader.escapes = version != "1.0"
        self._server.frames_sent["CONNECTED"] += 1
        self._queue(pack(StompFrame("CONNECTED", headers), escapes=False))

    def _send(self, frame: StompFrame) -> dict | None:
        headers = frame.headers
        destination = headers.get("destination")
        if not destination:
            raise ProtocolError("SEND needs a destination header")
        if destination.startswith(CONTROL_PREFIX):
            operation = destination[len(CONTROL_PREFIX):]
            if operation == "stats":
                return self._server.stats()
            return self._destinations.control(operation, headers)
        if destination.startswith(TOPIC_PREFIX):
            self._dispatcher.publish(destination, headers, frame.body)
            return None
        if destination.startswith(EXCHANGE_PREFIX):
            for routed in self._destinations.send_to_exchange(destination[len(EXCHANGE_PREFIX):], headers, frame.body):
                self._dispatcher.mark(routed)
        else:
            self._destinations.send(destination, headers, frame.body)
            self._dispatcher.mark(destination)
        return None

    def _subscribe(self, frame: StompFrame) -> None:
        headers = frame.headers
        destination = headers.get("destination")
        if not destination:
            raise ProtocolError("SUBSCRIBE needs a destination header")
        subscription_id = headers.get("id")
        if subscription_id is None:
            if self.version == "1.2":
                raise ProtocolError("SUBSCRIBE needs an id header (STOMP 1.2)")
            subscription_id = destination
        if subscription_id in self._subscriptions:
            raise ProtocolError(f"SUBSCRIBE: this connection has a subscription {subscription_id[:60]!r} already")
        if len(self._subscriptions) >= SERVED_SUBSCRIPTIONS_PER_CONNECTION_MAX:
            raise ProtocolError(f"SUBSCRIBE: this connection has {len(self._subscriptions)} subscriptions, the most "
                                "one connection may hold (SERVED_SUBSCRIPTIONS_PER_CONNECTION_MAX)")
        ack_mode = headers.get("ack", "auto")
        if ack_mode not in ACK_MODES:
            raise ProtocolError(f"SUBSCRIBE: ack:{ack_mode[:40]} is none of {', '.join(ACK_MODES)}")
        prefetch = prefetch_of(headers)
        consumer = None if destination.startswith(TOPIC_PREFIX) else self._destinations.create_consumer(destination)
        subscription = Subscription(subscription_id, self, destination, ack_mode, prefetch, consumer)
        self._subscriptions[subscription_id] = subscription
        self._dispatcher.add(subscription)
        if consumer is not None:
            # what is there now comes before the SUBSCRIBE's RECEIPT (the kombu transport's basic_get
            # subscribes, reads what came, unsubscribes)
            self._dispatcher.dispatch(destination, first=subscription)

    def _unsubscribe(self, frame: StompFrame) -> None:
        subscription_id = frame.headers.get("id")
        if subscription_id is None and self.version == "1.0":
            subscription_id = frame.headers.get("destination")
        if subscription_id is None:
            raise ProtocolError("UNSUBSCRIBE needs an id header")
        subscription = self._subscriptions.pop(subscription_id, None)
        if subscription is None:
            return
        subscription.active = False
        self._dispatcher.remove(subscription)
        if not subscription.unacked and subscription.consumer is not None:
            subscription.consumer.close()

    def _ack(self, frame: StompFrame) -> None:
        self._settle(frame, failed=False)

    def _nack(self, frame: StompFrame) -> None:
        self._settle(frame, failed=True)

    def _settle(self, frame: StompFrame, *, failed: bool) -> None:
        id_header = "id" if self.version == "1.2" else "message-id"
        ack_id = frame.headers.get(id_header)
        if not ack_id:
            raise ProtocolError(f"{frame.cmd} needs a {id_header} header (STOMP {self.version})")
        subscription = self._holding.get(ack_id)
        if subscription is None:
            _log.debug("%s of %s matches no message this connection holds", frame.cmd, ack_id)
            return
        messages = subscription.settled(ack_id, cumulative=subscription.ack_mode == "client")
        consumer = subscription.consumer
        dead_letter = failed and frame.headers.get(REQUEUE_HEADER, "true").lower() == "false"
        for message in messages:
            held = str(message.message_id)
            self._holding.pop(held, None)
            if dead_letter:
                target = self._destinations.dead_letter(consumer, message)
                if target is not None:
                    self._dispatcher.mark(target)
            elif failed:
                consumer.rollback(message)
            else:
                consumer.ack(message)
        if failed:
            self._dispatcher.mark(subscription.destination)
        if subscription.active:
            if "receipt" in frame.headers:
                # the room freed is filled now: the next MESSAGE comes before this frame's RECEIPT
                self._dispatcher.dispatch(subscription.destination, first=subscription)
            else:       # filled at the end of the turn, with the room every other ACK of the turn freed
                self._dispatcher.mark(subscription.destination)
        elif not subscription.unacked:
            consumer.close()

    def _begin(self, frame: StompFrame) -> None:
        transaction = self._transaction_of(frame)
        if transaction in self._transactions:
            raise ProtocolError(f"BEGIN: transaction {transaction[:60]!r} was begun already")
        self._transactions[transaction] = []

    def _commit(self, frame: StompFrame) -> None:
        for buffered in self._transactions.pop(self._open_transaction(frame)):
            self._perform(buffered)

    def _abort(self, frame: StompFrame) -> None:
        for buffered in self._transactions.pop(self._open_transaction(frame)):
            receipt = buffered.headers.get("receipt")
            if receipt is not None:
                self._receipt(receipt, None)         # dropped: nobody waits for its RECEIPT in vain

    def _disconnect(self, frame: StompFrame) -> None:
        return None

    def _transaction_of(self, frame: StompFrame) -> str:
        transaction = frame.headers.get("transaction")
        if not transaction:
            raise ProtocolError(f"{frame.cmd} needs a transaction header")
        return transaction

    def _open_transaction(self, frame: StompFrame) -> str:
        transaction = self._transaction_of(frame)
        if transaction not in self._transactions:
            raise ProtocolError(f"{frame.cmd}: no transaction {transaction[:60]!r} was begun on this connection")
        return transaction

    # ------------------------------------------------------------------ output
    def _queue(self, data: bytes) -> None:
        self._out.append(data)
        self._out_bytes += len(data)
        self._turn.waiting(self)

    def _receipt(self, receipt: str, reply: dict | None) -> None:
        """A RECEIPT, which promises that what its frame did is durable: the turn syncs before it
        goes out. (What no RECEIPT promises, the store's own group commit writes within its window.)"""
        self._turn.promised = True
        self._server.frames_sent["RECEIPT"] += 1
        if reply:
            headers = dict(reply)
            headers["receipt-id"] = receipt
            self._queue(pack(StompFrame("RECEIPT", headers), escapes=self.version not in (None, "1.0")))
        else:       # the common case, written directly: the receipt id escaped as pack() escapes it
            self._queue(b"RECEIPT\nreceipt-id:%s\n\n\x00" % header_value(receipt, self.version not in (None, "1.0")))

    def _refuse(self, message: str, frame: StompFrame | None) -> None:
        """An ERROR frame after what the turn holds, then the clean close (``write_out``)."""
        headers = {"message": message.replace("\n", " "), "content-type": "text/plain"}
        receipt = frame.headers.get("receipt") if frame is not None else None
        if receipt:
            headers["receipt-id"] = receipt
        self._server.frames_sent["ERROR"] += 1
        self._queue(pack(StompFrame("ERROR", headers, message.encode("utf-8")),
                         escapes=self.version not in (None, "1.0")))
        self._closing = True

    def _close_after_error(self) -> None:
        """Stop writing (the ERROR or RECEIPT is out), drop what the client still sends, close when it
        closes or after STOMP_ERROR_LINGER_S."""
        self._eof_sent = True
        self._out.clear()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        asyncio.get_running_loop().call_later(STOMP_ERROR_LINGER_S, self.transport.close)

    def _give_up(self) -> None:
        """The client read nothing for STOMP_WRITE_TIMEOUT_S: the connection is aborted (part of a
        frame may be out: nothing may follow it); what it held becomes failed deliveries."""
        _log.info("serve-stomp: a client read nothing for %s s; its connection is closed", STOMP_WRITE_TIMEOUT_S)
        self.transport.abort()

    # ------------------------------------------------------------------ heart-beats
    def _start_heart_beats(self, server_sends_ms: int, client_sends_ms: int) -> None:
        loop = asyncio.get_running_loop()
        if server_sends_ms:
            self._heart_beat_out = loop.call_later(server_sends_ms / 1000, self._beat, server_sends_ms / 1000)
        if client_sends_ms:
            self._last_read = time.monotonic()
            self._heart_beat_in = loop.call_later(client_sends_ms / 1000, self._listen, client_sends_ms / 1000)

    def _beat(self, interval_s: float) -> None:
        """An EOL unless something was written within the interval."""
        if self._closed or self._closing or self._eof_sent:
            return
        if time.monotonic() - self._last_write >= interval_s * 0.9 and not self._out:
            self.transport.write(b"\n")
            self._last_write = time.monotonic()
        self._heart_beat_out = asyncio.get_running_loop().call_later(interval_s, self._beat, interval_s)

    def _listen(self, interval_s: float) -> None:
        """Give the client up when it was silent for SERVED_HEARTBEAT_GRACE of its intervals."""
        if self._closed:
            return
        silent_s = time.monotonic() - self._last_read
        if silent_s > interval_s * SERVED_HEARTBEAT_GRACE:
            _log.info("serve-stomp: a client sent no heart-beat for %.1f s; its connection is closed", silent_s)
            self.transport.close()
            return
        self._heart_beat_in = asyncio.get_running_loop().call_later(interval_s, self._listen, interval_s)

    # ------------------------------------------------------------------ the end
    def _release(self) -> None:
        """The connection ended: what it held and did not settle are failed deliveries (counted,
        redelivered, dead-lettered past the limit); its subscriptions end."""
        self._transactions.clear()
        holders = {id(s): s for s in self._holding.values()}
        holders.update((id(s), s) for s in self._subscriptions.values())
        self._holding.clear()
        for subscription in holders.values():
            subscription.active = False
            self._dispatcher.remove(subscription)
            consumer = subscription.consumer
            if consumer is None:
                continue
            try:
                for message in subscription.unacked.values():
                    consumer.rollback(message)
                subscription.unacked.clear()
                consumer.close()
            except JournalError as error:           # the store failed: the next open counts them
                _log.warning("serve-stomp: returning the messages of a closed connection: %s", error)
            self._dispatcher.mark(subscription.destination)
        self._subscriptions.clear()
