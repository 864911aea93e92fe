"""The served broker's life: the listening socket, the event loop, the listening line, the stop.

Order at start: the socket is bound first, so that a port in use is said (AddressInUseError naming
host and port) before anything is created on disk; then the broker opens its data directory
(recovery); then the loop accepts connections and the line ``journal-engine serve-stomp: listening
on HOST:PORT (...)`` is printed and flushed (scripts and the test harness wait for it).

SIGTERM or SIGINT stops it cleanly: no more connections are accepted, each connection is closed
(what the turns wrote is out; what a client had not acknowledged is delivered again after the next
start, marked redelivered, its delivery count persisted), the broker is closed (the store synced, its
checkpoint saved), and :func:`serve` returns 0.

The serving lock (takeover.py) is taken after the bind and before the store: one serve-stomp a
directory, across machines sharing it. With ``backup`` the order differs: the backup first waits for
that lock (printing ``waiting for the directory lock of DIR, held by pid N on HOST``) and binds its
port only once it holds it, so the clients' failover lists find only the live server meanwhile; then
it recovers and serves as any start does, with the same listening line. A backup that serves hands the
directory back to a primary restarted with ``failback`` (takeover.py, FailbackRequest): it prints
``handing DIR back to pid N on HOST (failback)``, stops as on SIGTERM, and waits for the lock again as
a backup. The primary asks (``asking pid N on HOST to hand back the directory of DIR (failback)``)
and, once it holds the lock, serves with the usual line.

The loop is uvloop's when uvloop is installed (``pip install '.[uvloop]'`` in the checkout), asyncio's
otherwise; the server runs the same on either.
"""
from __future__ import annotations

import asyncio
import errno
import os
import signal
import ipaddress
import socket
import ssl
import sys

from ..errors import AddressInUseError, ConfigError, JournalIOError
from ..limits import SERVED_CONNECTIONS_MAX, SERVED_FAILBACK_HANDOVER_S, SERVED_FAILBACK_POLL_S
from .connection import StompConnection
from .stomp import CLIENT_COMMANDS, SERVER_COMMANDS
from .users import Users
from .destinations import DEFAULT_DEAD_LETTER_QUEUE, DEFAULT_MAX_DELIVERY_ATTEMPTS, Destinations
from .subscriptions import Dispatcher
from .takeover import FailbackRequest, ServingLock
from .turn import Turn

__all__ = ["ServedBroker", "serve", "listening_socket", "new_event_loop"]

_BACKLOG = 1024


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when uvloop is installed, else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening (port 0: any free port). AddressInUseError
    naming them when another program holds the port; JournalIOError for another refusal."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # a restart on the port of a server just killed must not wait for its TIME_WAIT connections
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise AddressInUseError(f"serve-stomp cannot listen on {host}:{port}: another program uses that port; "
                                    "nothing was created", errno=error.errno,
                                    hint="stop that program, or choose another port (--port 0: any free one)") from None
        raise JournalIOError(f"serve-stomp cannot listen on {host}:{port}: {error.strerror or error}; nothing was "
                             "created", errno=error.errno,
                             hint="check the host is an address of this machine and the port is yours to use") from None
    return sock


class ServedBroker:
    """One event loop's broker: its destinations, dispatcher, turn and connections."""

    def __init__(self, destinations: Destinations, loop: asyncio.AbstractEventLoop, *, users: Users | None = None,
                 connections_max: int = SERVED_CONNECTIONS_MAX) -> None:
        self.destinations = destinations
        self.users = users                      # None: anonymous connections are taken
        self.connections_max = connections_max
        self.loop = loop
        self.dispatcher = Dispatcher(loop, self._wake)
        self.turn = Turn(loop, self.dispatcher, destinations.sync)
        self.connections: set[StompConnection] = set()
        self.stopping = False
        self.delivered = 0              # MESSAGE frames handed to subscriptions
        # the metrics' counts (journal_engine/metrics/stomp.py), each command's present from the start so
        # that a connection adds to an int and a scrape sees every command's series, zeros included
        self.connections_accepted = 0   # connections made, those refused past connections_max included
        self.frames_received = dict.fromkeys(sorted(CLIENT_COMMANDS), 0)    # valid frames, by command
        self.frames_sent = dict.fromkeys(sorted(SERVER_COMMANDS), 0)
        self.writes = 0                 # transport writes of the turns (each holding a connection's frames)

    def _wake(self) -> None:
        self.turn.wake()

    def stats(self) -> dict[str, str]:
        """Counters (the reply of the ``/journal-engine/stats`` request): the loop's turns and syncs,
        the fdatasyncs the message store made (its background flusher's included), the MESSAGE
        frames delivered and the writes that carried the turns' frames."""
        return {"turns": str(self.turn.turns), "syncs": str(self.turn.syncs),
                "fdatasyncs": str(self.destinations.fdatasyncs()), "connections": str(len(self.connections)),
                "delivered": str(self.delivered), "writes": str(self.writes)}

    async def run(self, sock: socket.socket, announce, stop: asyncio.Event, tls: ssl.SSLContext | None = None) -> None:
        """Accept connections on ``sock`` (over TLS when ``tls``) until ``stop`` is set; ``announce()``
        once accepting."""
        server = await self.loop.create_server(lambda: StompConnection(self), sock=sock, ssl=tls)
        try:
            announce()
            await stop.wait()
        finally:
            self.stopping = True
            self.dispatcher.stop()
            server.close()
            for connection in list(self.connections):
                if connection.transport is not None:
                    connection.transport.abort()
            await asyncio.sleep(0)          # connection_lost of each runs


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False                            # a name: it may resolve to any address


def check_exposure(host: str, users_path, allow_anonymous: bool) -> None:
    """ConfigError (exit status 2) for a bind beyond loopback without --users nor --allow-anonymous:
    anyone who reaches the address could read and write every queue."""
    if users_path is None and not allow_anonymous and not is_loopback(host):
        raise ConfigError("--host", host, "is not a loopback address, and without --users anyone who reaches it "
                          "may read and write every queue; nothing was created",
                          hint="give --users FILE (journal-engine users add FILE LOGIN), or --allow-anonymous "
                               "to serve without logins on purpose")


def tls_context(cert_path, key_path) -> ssl.SSLContext:
    """A server SSLContext with the certificate chain ``cert_path`` and its key ``key_path``;
    ConfigError naming the file that is missing, unreadable or not what it should be."""
    if (cert_path is None) != (key_path is None):
        missing = "--tls-key" if key_path is None else "--tls-cert"
        raise ConfigError(missing, None, "TLS needs both --tls-cert and --tls-key")
    for option, path in (("--tls-cert", cert_path), ("--tls-key", key_path)):
        try:
            with open(path, "rb"):
                pass
        except OSError as error:
            raise ConfigError(option, os.fspath(path), f"cannot read it: {error.strerror or error}; nothing was "
                              "created") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_path, key_path)
    except ssl.SSLError as error:
        raise ConfigError("--tls-cert", os.fspath(cert_path), f"with --tls-key {os.fspath(key_path)!r}: not a PEM "
                          f"certificate and its private key ({error.reason or error}); nothing was created") from None
    return context


def serve(data_dir: str | os.PathLike, port: int = 61613, host: str = "127.0.0.1", *, backend: str = "journal",
          max_delivery_attempts: int = DEFAULT_MAX_DELIVERY_ATTEMPTS,
          dead_letter_queue: str | None = DEFAULT_DEAD_LETTER_QUEUE, redelivery_delay_ms: int = 0,
          sync: str = "group", store_options: dict | None = None, out=None, users_path=None,
          allow_anonymous: bool = False, tls_cert=None, tls_key=None,
          connections_max: int = SERVED_CONNECTIONS_MAX, backup: bool = False, failback: bool = False) -> int:
    """Run the served broker until SIGTERM or SIGINT; prints one line ``listening on HOST:PORT`` (to
    ``out``, default stdout) once connections are accepted. ``store_options`` go to the
    MessageStore (file_size, buffer_timeout_us, ...). ``users_path``: the users file CONNECT frames
    must match (users.py); a host beyond loopback needs it or ``allow_anonymous``. ``tls_cert`` and
    ``tls_key``: PEM files, TLS on every connection. Every refusal of the options comes before
    anything is bound or created. ``backup``: wait for the serving lock of ``data_dir`` (takeover.py)
    before binding anything, printing a line naming its holder, then serve as usual, until a primary
    restarted with ``failback`` asks for the directory back: then stop serving and wait again; a SIGTERM
    or SIGINT during a wait returns 0. ``failback``: a restarted primary; ask the backup that serves
    ``data_dir`` to hand it back, wait for the lock, then serve. Returns the exit status (0)."""
    out = out or sys.stdout
    if not 1 <= connections_max <= SERVED_CONNECTIONS_MAX:
        raise ConfigError("--connections-max", connections_max, f"must be between 1 and {SERVED_CONNECTIONS_MAX} "
                          "(SERVED_CONNECTIONS_MAX)")
    if backup and failback:
        raise ConfigError("--failback", True, "is for a restarted primary, which asks a serving backup for the "
                          "directory; --backup waits to take over", hint="start the primary with --failback and the "
                          "backup with --backup")
    check_exposure(host, users_path, allow_anonymous)
    users = Users.read(users_path) if users_path is not None else None
    tls = tls_context(tls_cert, tls_key) if tls_cert is not None or tls_key is not None else None
    directory = os.fspath(data_dir)
    request = FailbackRequest(directory)
    while True:
        if backup:
            lock = ServingLock.for_backup(data_dir)
            if not lock.wait(lambda holder: print(f"journal-engine serve-stomp: waiting for the directory lock of "
                                                  f"{directory}, held by {holder}", file=out, flush=True)):
                return 0
            try:
                sock = listening_socket(host, port)
            except BaseException:
                lock.release()
                raise
        elif failback:          # as a backup: the port is bound once the lock is held
            lock = ServingLock.for_backup(data_dir)
            request.make()
            try:
                taken = lock.wait(lambda holder: print(
                    f"journal-engine serve-stomp: asking {holder} to hand back the directory of {directory} "
                    "(failback)", file=out, flush=True))
            finally:
                request.withdraw()
            if not taken:
                return 0
            try:
                sock = listening_socket(host, port)
            except BaseException:
                lock.release()
                raise
        else:
            sock = listening_socket(host, port)
            try:
                os.makedirs(data_dir, exist_ok=True)
                lock = ServingLock(data_dir)
                lock.take()
            except BaseException:
                sock.close()
                raise
        requester = _serve_until_stopped(sock, lock, directory, backend, sync, max_delivery_attempts,
                                         dead_letter_queue, redelivery_delay_ms, store_options, users,
                                         connections_max, tls, out, request if backup else None)
        if requester is None:
            return 0
        # handed back: the primary takes the lock now; ask for it again only once it holds it
        request.wait_withdrawn(SERVED_FAILBACK_HANDOVER_S, SERVED_FAILBACK_POLL_S)


def _serve_until_stopped(sock, lock: ServingLock, directory: str, backend: str, sync: str, max_delivery_attempts: int,
                         dead_letter_queue, redelivery_delay_ms: int, store_options, users, connections_max: int,
                         tls, out, request: FailbackRequest | None) -> str | None:
    """Open the store, serve on ``sock`` until SIGTERM or SIGINT (None) or, when ``request`` is given (a
    backup), until a primary asks for the directory back (who asks); close everything and release the lock."""
    try:
        destinations = Destinations(directory, backend=backend, sync=sync, max_delivery_attempts=max_delivery_attempts,
                                    dead_letter_queue=dead_letter_queue, redelivery_delay_ms=redelivery_delay_ms,
                                    store_options=store_options)
    except BaseException:
        sock.close()
        lock.release()
        raise
    loop = new_event_loop()
    asked: list[str] = []
    try:
        broker = ServedBroker(destinations, loop, users=users, connections_max=connections_max)
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        bound_host, bound_port = sock.getsockname()[:2]

        def look_for_failback() -> None:
            requester = request.requester()
            if requester is None:
                loop.call_later(SERVED_FAILBACK_POLL_S, look_for_failback)
                return
            print(f"journal-engine serve-stomp: handing {directory} back to {requester} (failback)", file=out,
                  flush=True)
            asked.append(requester)
            stop.set()

        def announce() -> None:
            print(f"journal-engine serve-stomp: listening on {bound_host}:{bound_port} "
                  f"(store {directory}, backend {backend}, max delivery attempts {max_delivery_attempts}, "
                  f"dead-letter queue {dead_letter_queue}, {'TLS' if tls else 'no TLS'}, "
                  f"{f'{len(users)} users' if users is not None else 'anonymous'})", file=out, flush=True)
            if request is not None:
                loop.call_later(SERVED_FAILBACK_POLL_S, look_for_failback)

        loop.run_until_complete(broker.run(sock, announce, stop, tls))
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        loop.close()
        destinations.close()
        lock.release()
    return asked[0] if asked else None
