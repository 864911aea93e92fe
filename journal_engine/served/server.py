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
it recovers and serves as any start does, with the same listening line.

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

from ..errors import ConfigError
from ..limits import SERVED_CONNECTIONS_MAX
from .network import check_exposure, is_loopback, listening_socket, new_event_loop, tls_context
from .connection import StompConnection
from .stomp import CLIENT_COMMANDS, SERVER_COMMANDS
from .users import Users
from .destinations import DEFAULT_DEAD_LETTER_QUEUE, DEFAULT_MAX_DELIVERY_ATTEMPTS, Destinations
from .subscriptions import Dispatcher
from .takeover import ServingLock
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
          connections_max: int = SERVED_CONNECTIONS_MAX, backup: bool = False, http_port: int | None = None,
          http_host: str = "127.0.0.1", console=None) -> int:
    """Run the served broker until SIGTERM or SIGINT; prints one line ``listening on HOST:PORT`` (to
    ``out``, default stdout) once connections are accepted. ``store_options`` go to the
    MessageStore (file_size, buffer_timeout_us, ...). ``users_path``: the users file CONNECT frames
    must match (users.py); a host beyond loopback needs it or ``allow_anonymous``. ``tls_cert`` and
    ``tls_key``: PEM files, TLS on every connection. Every refusal of the options comes before
    anything is bound or created. ``backup``: wait for the serving lock of ``data_dir`` (takeover.py)
    before binding anything, printing a line naming its holder, then serve as usual; a SIGTERM or
    SIGINT during the wait returns 0. ``http_port``: serve the operator's console and ``/metrics``
    there too, on ``http_host``: ``console`` is what starts it on the bound socket from the loop
    (journal_engine.console.served_console gives one; the server does not import the console, which
    stands above it). Returns the exit status (0)."""
    out = out or sys.stdout
    if not 1 <= connections_max <= SERVED_CONNECTIONS_MAX:
        raise ConfigError("--connections-max", connections_max, f"must be between 1 and {SERVED_CONNECTIONS_MAX} "
                          "(SERVED_CONNECTIONS_MAX)")
    check_exposure(host, users_path, allow_anonymous)
    if http_port is not None:
        if console is None:
            raise ConfigError("http_port", http_port, "needs console= (journal_engine.console.served_console)")
        check_exposure(http_host, users_path, allow_anonymous, option="--http-host")
    users = Users.read(users_path) if users_path is not None else None
    tls = tls_context(tls_cert, tls_key) if tls_cert is not None or tls_key is not None else None
    if backup:
        lock = ServingLock.for_backup(data_dir)
        if not lock.wait(lambda holder: print(f"journal-engine serve-stomp: waiting for the directory lock of "
                                              f"{os.fspath(data_dir)}, held by {holder}", file=out, flush=True)):
            return 0
        try:
            sock = listening_socket(host, port)
            http_sock = listening_socket(http_host, http_port) if http_port is not None else None
        except BaseException:
            lock.release()
            raise
    else:
        sock = listening_socket(host, port)
        try:
            http_sock = listening_socket(http_host, http_port) if http_port is not None else None
        except BaseException:
            sock.close()
            raise
        try:
            os.makedirs(data_dir, exist_ok=True)
            lock = ServingLock(data_dir)
            lock.take()
        except BaseException:
            sock.close()
            if http_sock is not None:
                http_sock.close()
            raise
    try:
        destinations = Destinations(data_dir, backend=backend, sync=sync, max_delivery_attempts=max_delivery_attempts,
                                    dead_letter_queue=dead_letter_queue, redelivery_delay_ms=redelivery_delay_ms,
                                    store_options=store_options)
    except BaseException:
        sock.close()
        if http_sock is not None:
            http_sock.close()
        lock.release()
        raise
    loop = new_event_loop()
    try:
        broker = ServedBroker(destinations, loop, users=users, connections_max=connections_max)
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        bound_host, bound_port = sock.getsockname()[:2]
        console_line = ""
        if http_sock is not None:
            http_bound = http_sock.getsockname()[:2]
            console_line = f", console on {'https' if tls else 'http'}://{http_bound[0]}:{http_bound[1]}/"

        def announce() -> None:
            print(f"journal-engine serve-stomp: listening on {bound_host}:{bound_port} "
                  f"(store {os.fspath(data_dir)}, backend {backend}, max delivery attempts {max_delivery_attempts}, "
                  f"dead-letter queue {dead_letter_queue}, {'TLS' if tls else 'no TLS'}, "
                  f"{f'{len(users)} users' if users is not None else 'anonymous'}{console_line})", file=out, flush=True)

        async def run() -> None:
            runner = None
            if http_sock is not None:
                # where the address settings of `#` and of the dead-letter queue came from (add_server_rules)
                origins = {"#": f"serve-stomp's options (--max-delivery-attempts {max_delivery_attempts}, "
                                f"--redelivery-delay-ms {redelivery_delay_ms}, --dead-letter-queue {dead_letter_queue})"}
                if dead_letter_queue is not None:
                    origins[dead_letter_queue] = "serve-stomp: the dead-letter queue keeps what reaches it (no limit)"
                runner = await console(broker, http_sock, tls, users, origins)
            try:
                await broker.run(sock, announce, stop, tls)
            finally:
                if runner is not None:
                    await runner.cleanup()

        loop.run_until_complete(run())
    finally:
        if http_sock is not None:
            http_sock.close()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        loop.close()
        destinations.close()
        lock.release()
    return 0
