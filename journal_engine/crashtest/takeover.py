"""The ``takeover`` mode: a live ``serve-stomp`` and its ``--backup`` on one directory, STOMP clients at
work, the live server SIGKILLed at a seeded random moment; the backup takes the directory's lock, recovers
and serves, and the clients go over to it (docs/failover.md).

One run: ``PRODUCERS`` producers, each sending one SEND at a time with a ``receipt`` and the duplicate id
``_AMQ_DUPL_ID: p<producer>-<n>``, and one consumer (``ack:client-individual``, every MESSAGE acknowledged)
work against the live server; after ``KILL_AFTER_S`` (seeded) it is SIGKILLed. A producer whose SEND had no
RECEIPT when its connection broke sends it again to the backup, under the same id, as a client does after
a lost reply; the consumer subscribes again. After ``AFTER_TAKEOVER_S`` of load on the backup the
producers stop, and the consumer drains the queue.

The invariants, from what the clients saw:
  * no receipted message is lost: every id whose SEND was receipted (by the live server or the backup)
    is delivered to the consumer;
  * no duplicate id is routed twice: an id comes at most once without ``redelivered:true`` (a message the
    dead server handed out unacknowledged comes again flagged, its count persisted before it left; a
    resent SEND the live server had stored would come as a second, unflagged message if the backup had
    not recovered its id);
  * nothing never sent is delivered;
  * the backup prints its listening line within ``TAKEOVER_TIMEOUT_S`` of the kill.

The servers are fresh interpreters (``python -m journal_engine serve-stomp``), killed in a ``finally``;
the clients are threads of the worker that runs the mode, talking STOMP 1.2 over plain sockets.
"""
from __future__ import annotations

import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time

__all__ = ["takeover_run", "violations", "PRODUCERS"]

PRODUCERS = 3
DESTINATION = "/queue/takeover"
DUPLICATE_ID = "_AMQ_DUPL_ID"
KILL_AFTER_S = (0.2, 0.8)          # the kill comes this long after the load began (seeded)
AFTER_TAKEOVER_S = 0.4             # load on the backup before the producers stop
START_TIMEOUT_S = 30.0             # a server that prints nothing this long failed to start
TAKEOVER_TIMEOUT_S = 30.0          # kill to the backup's listening line
DRAIN_TIMEOUT_S = 20.0             # the consumer's wait for the last receipted message
IO_TIMEOUT_S = 10.0                # a frame the server owes
CONSUMER_PAUSE_S = 0.05            # the consumer looks whether the run ended this often while no MESSAGE comes
LISTENING = "listening on 127.0.0.1:"
WAITING = "waiting for the directory lock of "


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class _Server:
    """``python -m journal_engine serve-stomp`` on ``port``, its stdout read line by line."""

    def __init__(self, directory: str, port: int, store: str, log_path: str, *, backup: bool) -> None:
        self.port = port
        self._log = open(log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "journal_engine", "serve-stomp", "--data", directory, "--port", str(port),
             "--host", "127.0.0.1", "--backend", store, *(["--backup"] if backup else [])],
            stdout=subprocess.PIPE, stderr=self._log, env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                filter(None, [os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                              os.environ.get("PYTHONPATH")]))))
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in iter(self.process.stdout.readline, b""):
            self.lines.put(line.decode(errors="replace"))
        self.lines.put("")

    def wait_for(self, text: str, timeout_s: float) -> str | None:
        """The first line holding ``text`` within ``timeout_s`` (None: none came, or the output ended)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if not line:
                return None
            if text in line:
                return line

    def end(self, sig: int = signal.SIGKILL) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            status = self.process.wait(timeout=IO_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            status = self.process.wait()
        self.process.stdout.close()
        self._log.close()
        return status


class _Broken(Exception):
    """The connection to the server broke (or a frame it owed did not come)."""


class _Client:
    """A STOMP 1.2 connection: frames written whole, frames read up to their NUL."""

    def __init__(self, port: int, read_timeout_s: float = IO_TIMEOUT_S) -> None:
        try:
            self._socket = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S)
        except OSError as exc:
            raise _Broken(str(exc)) from None
        self._buffer = b""
        self.write("CONNECT", {"accept-version": "1.2", "host": "takeover"})
        try:
            command, _, _ = self.read()
        except socket.timeout:
            raise _Broken("no CONNECTED") from None
        if command != "CONNECTED":
            raise _Broken(f"{command} instead of CONNECTED")
        self._socket.settimeout(read_timeout_s)

    def write(self, command: str, headers: dict, body: bytes = b"") -> None:
        head = command + "\n" + "".join(f"{name}:{value}\n" for name, value in headers.items())
        try:
            self._socket.sendall(head.encode() + f"content-length:{len(body)}\n\n".encode() + body + b"\x00")
        except OSError as exc:
            raise _Broken(str(exc)) from None

    def read(self) -> tuple[str, dict, bytes]:
        while True:
            self._buffer = self._buffer.lstrip(b"\r\n")            # heart-beats
            end = self._buffer.find(b"\x00")
            if end >= 0:
                frame, self._buffer = self._buffer[:end], self._buffer[end + 1:]
                head, _, body = frame.partition(b"\n\n")
                command, *lines = head.decode().split("\n")
                return command, dict(line.split(":", 1) for line in lines if ":" in line), body
            try:
                data = self._socket.recv(65536)
            except socket.timeout:
                raise                   # the caller decides: a RECEIPT owed, or a consumer's pause
            except OSError as exc:
                raise _Broken(str(exc)) from None
            if not data:
                raise _Broken("closed by the server")
            self._buffer += data

    def close(self) -> None:
        self._socket.close()


class _Run:
    """What the clients of one run share: where to connect, when to stop, what they saw."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.receipted: set[str] = set()
        self.attempted: set[str] = set()
        self.deliveries: list[tuple[str, bool]] = []    # (duplicate id, redelivered) of every MESSAGE
        self.resent = 0
        self.errors: list[str] = []

    def connect(self, deadline: float, read_timeout_s: float = IO_TIMEOUT_S) -> _Client:
        """A connection to whichever server serves now, tried again until ``deadline``."""
        while True:
            try:
                return _Client(self.port, read_timeout_s)
            except _Broken:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def produce(self, producer: int) -> None:
        client, n, deadline = None, 0, time.monotonic() + START_TIMEOUT_S + TAKEOVER_TIMEOUT_S + 30
        try:
            while not self.stop.is_set():
                n += 1
                ident = f"p{producer}-{n}"
                with self.lock:
                    self.attempted.add(ident)
                while True:             # until this SEND is receipted: again, under its id, after a break
                    try:
                        if client is None:
                            client = self.connect(deadline)
                        client.write("SEND", {"destination": DESTINATION, "receipt": ident, DUPLICATE_ID: ident},
                                     ident.encode())
                        command, headers, body = client.read()
                        if command != "RECEIPT" or headers.get("receipt-id") != ident:
                            raise AssertionError(f"{command} {headers} {body[:200]!r} instead of the RECEIPT of {ident}")
                        break
                    except (_Broken, socket.timeout):
                        if client is not None:
                            client.close()
                        client = None
                        with self.lock:
                            self.resent += 1
                with self.lock:
                    self.receipted.add(ident)
        except Exception as exc:        # a worker thread: its failure is the run's, said in a sentence
            self.errors.append(f"producer {producer}: {type(exc).__name__}: {exc}")
        finally:
            if client is not None:
                client.close()

    def consume(self, drained: threading.Event) -> None:
        client, deadline = None, time.monotonic() + START_TIMEOUT_S + TAKEOVER_TIMEOUT_S + 30
        try:
            while not drained.is_set():
                try:
                    if client is None:
                        client = self.connect(deadline, CONSUMER_PAUSE_S)
                        client.write("SUBSCRIBE", {"destination": DESTINATION, "id": "0", "ack": "client-individual"})
                    command, headers, body = client.read()
                    if command != "MESSAGE":
                        raise AssertionError(f"{command} {headers} {body[:200]!r} instead of a MESSAGE")
                    with self.lock:
                        self.deliveries.append((body.decode(), headers.get("redelivered") == "true"))
                    client.write("ACK", {"id": headers.get("ack") or headers["message-id"]})
                except _Broken:
                    client = None
                    if time.monotonic() > deadline:
                        raise
                except socket.timeout:
                    continue
        except Exception as exc:
            self.errors.append(f"consumer: {type(exc).__name__}: {exc}")
        finally:
            if client is not None:
                client.close()

    def delivered(self) -> set[str]:
        with self.lock:
            return {ident for ident, _ in self.deliveries}


def takeover_run(directory: str, store: str, seed: int, logs: str) -> tuple[list[str], dict]:
    """One run in ``directory`` (made if missing) on backend ``store``, seeded; the servers' stderr in
    ``logs``. Returns the violations found (sentences) and counts: receipted, resent, delivered,
    redelivered, takeover_ms."""
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    live_port, backup_port = _free_port(), _free_port()
    servers = [_Server(directory, live_port, store, os.path.join(logs, "live.log"), backup=False)]
    problems: list[str] = []
    counts = {"receipted": 0, "resent": 0, "delivered": 0, "redelivered": 0, "takeover_ms": 0}
    threads: list[threading.Thread] = []
    drained = threading.Event()
    run = _Run(live_port)
    try:
        if servers[0].wait_for(LISTENING, START_TIMEOUT_S) is None:
            return [f"the live server did not start (seed {seed})"], counts
        servers.append(_Server(directory, backup_port, store, os.path.join(logs, "backup.log"), backup=True))
        if servers[1].wait_for(WAITING, START_TIMEOUT_S) is None:
            return [f"the backup did not say it waits for the lock (seed {seed})"], counts
        threads = [threading.Thread(target=run.produce, args=(p,)) for p in range(PRODUCERS)]
        threads.append(threading.Thread(target=run.consume, args=(drained,)))
        for thread in threads:
            thread.start()
        time.sleep(rng.uniform(*KILL_AFTER_S))
        killed_at = time.monotonic()
        servers[0].end()
        if servers[1].wait_for(LISTENING, TAKEOVER_TIMEOUT_S) is None:
            return [f"the backup did not take over within {TAKEOVER_TIMEOUT_S} s of the kill (seed {seed})"], counts
        counts["takeover_ms"] = round((time.monotonic() - killed_at) * 1000)
        run.port = backup_port
        time.sleep(AFTER_TAKEOVER_S)
        run.stop.set()
        for thread in threads[:-1]:
            thread.join()
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while not run.receipted <= run.delivered() and time.monotonic() < deadline and not run.errors:
            time.sleep(0.02)
    finally:
        drained.set()
        for thread in threads:
            thread.join()
        for server in servers:
            server.end(signal.SIGTERM)
    problems += [f"{error} (seed {seed})" for error in run.errors]
    problems += violations(run.receipted, run.attempted, run.deliveries, f"seed {seed}")
    counts.update(receipted=len(run.receipted), resent=run.resent, delivered=len(run.deliveries),
                  redelivered=sum(1 for _, flagged in run.deliveries if flagged))
    return problems, counts


def violations(receipted: set[str], attempted: set[str], deliveries: list[tuple[str, bool]], context: str) -> list[str]:
    """The invariants (module docstring) over what the clients saw: ``receipted`` ids, every id a SEND
    carried (``attempted``), and every MESSAGE as (id, redelivered), in order."""
    problems = []
    delivered = {ident for ident, _ in deliveries}
    lost = sorted(receipted - delivered)
    if lost:
        problems.append(f"{len(lost)} receipted message(s) never delivered after the takeover, e.g. {lost[:5]} "
                        f"({context})")
    first_deliveries: dict[str, int] = {}
    for ident, redelivered in deliveries:
        if not redelivered:
            first_deliveries[ident] = first_deliveries.get(ident, 0) + 1
    twice = sorted(ident for ident, n in first_deliveries.items() if n > 1)
    if twice:
        problems.append(f"duplicate id(s) routed twice (delivered unflagged more than once): {twice[:5]} ({context})")
    foreign = sorted(delivered - attempted)
    if foreign:
        problems.append(f"message(s) never sent were delivered: {foreign[:5]} ({context})")
    return problems
