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

With ``http_port`` the operator's console (journal_engine/console, docs/console.md) is served from the
same loop and the same Broker: its socket is bound with the STOMP one (a port in use is said before
anything is created), on ``http_host`` (127.0.0.1 unless told otherwise, under the same rule as
``--host``: beyond loopback it needs ``--users`` or ``--allow-anonymous``), over the same TLS.

The loop is uvloop's when uvloop is installed (``pip install '.[uvloop]'`` in the checkout), asyncio's
otherwise; the server runs the same on either.
"""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import ssl
import sys
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..limits import SERVED_CONNECTIONS_MAX, SERVED_FAILBACK_HANDOVER_S, SERVED_FAILBACK_POLL_S
from .network import check_exposure, is_loopback, listening_socket, new_event_loop, tls_context
from .connection import StompConnection
from .stomp import CLIENT_COMMANDS, SERVER_COMMANDS
from .users import Users
from .destinations import DEFAULT_DEAD_LETTER_QUEUE, DEFAULT_MAX_DELIVERY_ATTEMPTS, Destinations
from .subscriptions import Dispatcher
from .takeover import FailbackRequest, ServingLock
from .turn import Turn

__all__ = ["ServedBroker", "serve", "listening_socket", "new_event_loop", "check_exposure", "is_loopback",
           "tls_context"]

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


def serve(data_dir: str | os.PathLike, port: int = 61613, host: str = "127.0.0.1", *, backend: str = "journal",
          max_delivery_attempts: int = DEFAULT_MAX_DELIVERY_ATTEMPTS,
          dead_letter_queue: str | None = DEFAULT_DEAD_LETTER_QUEUE, redelivery_delay_ms: int = 0,
          sync: str = "group", store_options: dict | None = None, out=None, users_path=None,
          allow_anonymous: bool = False, tls_cert=None, tls_key=None,
          connections_max: int = SERVED_CONNECTIONS_MAX, backup: bool = False, failback: bool = False,
          http_port: int | None = None, http_host: str = "127.0.0.1", console=None) -> int:
    """Run the served broker until SIGTERM or SIGINT; prints one line ``listening on HOST:PORT`` (to
    ``out``, default stdout) once connections are accepted. ``store_options`` go to the
    MessageStore (file_size, buffer_timeout_us, ...). ``users_path``: the users file CONNECT frames
    must match (users.py); a host beyond loopback needs it or ``allow_anonymous``. ``tls_cert`` and
    ``tls_key``: PEM files, TLS on every connection. Every refusal of the options comes before
    anything is bound or created. ``backup``: wait for the serving lock of ``data_dir`` (takeover.py)
    before binding anything, printing a line naming its holder, then serve as usual, until a primary
    restarted with ``failback`` asks for the directory back: then stop serving and wait again; a SIGTERM
    or SIGINT during a wait returns 0. ``failback``: a restarted primary; ask the backup that serves
    ``data_dir`` to hand it back, wait for the lock, then serve. ``http_port``: serve the operator's
    console and ``/metrics`` there too, on ``http_host``: ``console`` is what starts it on the bound
    socket from the loop (journal_engine.console.served_console gives one; the server does not import
    the console, which stands above it). Returns the exit status (0)."""
    out = out or sys.stdout
    if not 1 <= connections_max <= SERVED_CONNECTIONS_MAX:
        raise ConfigError("--connections-max", connections_max, f"must be between 1 and {SERVED_CONNECTIONS_MAX} "
                          "(SERVED_CONNECTIONS_MAX)")
    if backup and failback:
        raise ConfigError("--failback", True, "is for a restarted primary, which asks a serving backup for the "
                          "directory; --backup waits to take over", hint="start the primary with --failback and the "
                          "backup with --backup")
    check_exposure(host, users_path, allow_anonymous)
    if http_port is not None:
        if console is None:
            raise ConfigError("http_port", http_port, "needs console= (journal_engine.console.served_console)")
        check_exposure(http_host, users_path, allow_anonymous, option="--http-host")
    users = Users.read(users_path) if users_path is not None else None
    tls = tls_context(tls_cert, tls_key) if tls_cert is not None or tls_key is not None else None
    directory = os.fspath(data_dir)
    request = FailbackRequest(directory)

    def bind() -> tuple[socket.socket, socket.socket | None]:
        """The STOMP socket and the console's (None without ``http_port``), both or neither."""
        sock = listening_socket(host, port)
        try:
            return sock, listening_socket(http_host, http_port) if http_port is not None else None
        except BaseException:
            sock.close()
            raise

    while True:
        if backup or failback:  # the ports are bound once the lock is held
            lock = ServingLock.for_backup(data_dir)
            if backup:
                taken = lock.wait(lambda holder: print(f"journal-engine serve-stomp: waiting for the directory lock "
                                                       f"of {directory}, held by {holder}", file=out, flush=True))
            else:
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
                sock, http_sock = bind()
            except BaseException:
                lock.release()
                raise
        else:
            sock, http_sock = bind()
            try:
                os.makedirs(data_dir, exist_ok=True)
                lock = ServingLock(data_dir)
                lock.take()
            except BaseException:
                sock.close()
                if http_sock is not None:
                    http_sock.close()
                raise
        served = _Served(directory, backend, sync, max_delivery_attempts, dead_letter_queue, redelivery_delay_ms,
                         store_options, users, connections_max, tls, out, console)
        requester = served.run(sock, http_sock, lock, request if backup else None)
        if requester is None:
            return 0
        # handed back: the primary takes the lock now; ask for it again only once it holds it
        request.wait_withdrawn(SERVED_FAILBACK_HANDOVER_S, SERVED_FAILBACK_POLL_S)


@dataclass(frozen=True)
class _Served:
    """One serving of the directory, from opening the store to closing it: what serve() was told."""

    directory: str
    backend: str
    sync: str
    max_delivery_attempts: int
    dead_letter_queue: str | None
    redelivery_delay_ms: int
    store_options: dict | None
    users: Users | None
    connections_max: int
    tls: ssl.SSLContext | None
    out: Any
    console: Any            # starts the console on the loop (journal_engine.console.served_console), or None

    def run(self, sock, http_sock, lock: ServingLock, request: FailbackRequest | None) -> str | None:
        """Open the store, serve on ``sock`` (and the console on ``http_sock``) until SIGTERM or SIGINT
        (None) or, when ``request`` is given (a backup), until a primary asks for the directory back (who
        asks); close everything and release the lock."""
        try:
            destinations = Destinations(self.directory, backend=self.backend, sync=self.sync,
                                        max_delivery_attempts=self.max_delivery_attempts,
                                        dead_letter_queue=self.dead_letter_queue,
                                        redelivery_delay_ms=self.redelivery_delay_ms, store_options=self.store_options)
        except BaseException:
            sock.close()
            if http_sock is not None:
                http_sock.close()
            lock.release()
            raise
        loop = new_event_loop()
        asked: list[str] = []
        try:
            broker = ServedBroker(destinations, loop, users=self.users, connections_max=self.connections_max)
            stop = asyncio.Event()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, stop.set)
            bound_host, bound_port = sock.getsockname()[:2]
            console_line = ""
            if http_sock is not None:
                http_bound = http_sock.getsockname()[:2]
                console_line = f", console on {'https' if self.tls else 'http'}://{http_bound[0]}:{http_bound[1]}/"

            def look_for_failback() -> None:
                requester = request.requester()
                if requester is None:
                    loop.call_later(SERVED_FAILBACK_POLL_S, look_for_failback)
                    return
                print(f"journal-engine serve-stomp: handing {self.directory} back to {requester} (failback)",
                      file=self.out, flush=True)
                asked.append(requester)
                stop.set()

            def announce() -> None:
                users = self.users
                print(f"journal-engine serve-stomp: listening on {bound_host}:{bound_port} "
                      f"(store {self.directory}, backend {self.backend}, max delivery attempts "
                      f"{self.max_delivery_attempts}, dead-letter queue {self.dead_letter_queue}, "
                      f"{'TLS' if self.tls else 'no TLS'}, "
                      f"{f'{len(users)} users' if users is not None else 'anonymous'}{console_line})",
                      file=self.out, flush=True)
                if request is not None:
                    loop.call_later(SERVED_FAILBACK_POLL_S, look_for_failback)

            loop.run_until_complete(self._serve(broker, sock, http_sock, announce, stop))
        finally:
            if http_sock is not None:
                http_sock.close()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
            loop.close()
            destinations.close()
            lock.release()
        return asked[0] if asked else None

    async def _serve(self, broker: ServedBroker, sock, http_sock, announce, stop: asyncio.Event) -> None:
        runner = None
        if http_sock is not None:
            # where the address settings of `#` and of the dead-letter queue came from (add_server_rules)
            origins = {"#": f"serve-stomp's options (--max-delivery-attempts {self.max_delivery_attempts}, "
                            f"--redelivery-delay-ms {self.redelivery_delay_ms}, "
                            f"--dead-letter-queue {self.dead_letter_queue})"}
            if self.dead_letter_queue is not None:
                origins[self.dead_letter_queue] = "serve-stomp: the dead-letter queue keeps what reaches it (no limit)"
            runner = await self.console(broker, http_sock, self.tls, self.users, origins)
        try:
            await broker.run(sock, announce, stop, self.tls)
        finally:
            if runner is not None:
                await runner.cleanup()
