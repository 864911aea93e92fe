"""`journal-engine serve-stomp` in a child process, and a raw-socket STOMP client that reads the
server's frames with a reader of its own (not the server's parser: the tests judge that one).

Everything on the loopback interface with a port the kernel picks (the command prints it); each wait
has a deadline.
"""
from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from locations import ROOT

from journal_engine._impl import IMPLEMENTATION

START_TIMEOUT_S = 30.0
# a clean stop closes every journal, and a close saves the checkpoint: each file written since the load
# is decoded and checksummed whole -- in pure Python with the twin, at about 8 MB/s (8 s for the 24 MB
# a test of large frames writes, more on a loaded machine), in well under a second compiled
STOP_TIMEOUT_S = 15.0 if IMPLEMENTATION == "cython" else 90.0
READ_TIMEOUT_S = 10.0


class LoggedChild:
    """A child process whose stdout and stderr (or stderr alone) go to ``log``; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, command: list[str], log: Path, *, env: dict, stdout=None, cwd: Path = ROOT) -> None:
        self.log_path = log
        self.log = open(log, "ab")
        self.process = subprocess.Popen(command, stdout=self.log if stdout is None else stdout,
                                        stderr=subprocess.STDOUT if stdout is None else self.log,
                                        stdin=subprocess.DEVNULL, env=env, cwd=str(cwd))

    def stderr(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        self.log.close()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_TIMEOUT_S)
        finally:
            self.kill()


class Server(LoggedChild):
    """`python -m journal_engine serve-stomp --data DATA --port 0 ...`; ``port`` is the one it printed
    (``extra`` may name another: the last --port counts)."""

    def __init__(self, data: Path, log: Path, *extra: str) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        super().__init__([sys.executable, "-m", "journal_engine", "serve-stomp", "--data", str(data), "--port", "0",
                          "--host", "127.0.0.1", *extra], log, env=env, stdout=subprocess.PIPE)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: lines.put(self.process.stdout.readline()), daemon=True).start()
        try:
            line = lines.get(timeout=START_TIMEOUT_S).decode()
        except queue.Empty:
            self.kill()
            raise AssertionError(f"serve-stomp did not start within {START_TIMEOUT_S} s; see {log}")
        assert "listening on 127.0.0.1:" in line, (line, log.read_text())
        self.line = line
        self.port = int(line.split("listening on 127.0.0.1:")[1].split()[0])
        # with --http: the console's address, at the end of the line (docs/console.md)
        self.console_url = line.split("console on ")[1].split(")")[0].rstrip("/") if "console on " in line else None


def add_user(users: Path, login: str, password: str) -> None:
    """``login`` with ``password`` into the users file ``users``, as an operator adds one
    (`journal-engine users add`, the password on stdin)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    added = subprocess.run([sys.executable, "-m", "journal_engine", "users", "add", str(users), login],
                           input=password + "\n", text=True, capture_output=True, env=env, timeout=60)
    assert added.returncode == 0, added.stderr


def frame_bytes(command: str, headers: dict | None = None, body: bytes = b"", *, content_length: bool = True) -> bytes:
    """A client frame as STOMP 1.0 writes it (no escapes): with ``content-length`` unless told not to."""
    headers = dict(headers or {})
    if content_length:
        headers["content-length"] = str(len(body))
    head = command + "\n" + "".join(f"{name}:{value}\n" for name, value in headers.items()) + "\n"
    return head.encode() + body + b"\x00"


class RawClient:
    """A STOMP client on a bare socket: writes the bytes it is given, reads whole server frames."""

    def __init__(self, port: int) -> None:
        self.socket = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT_S)
        self.pending = b""

    def connect(self, version: str = "1.0") -> dict:
        headers = {} if version == "1.0" else {"accept-version": version, "host": "127.0.0.1"}
        self.socket.sendall(frame_bytes("CONNECT", headers, content_length=False))
        command, headers, _ = self.read_frame()
        assert command == "CONNECTED", (command, headers)
        return headers

    def send_raw(self, data: bytes) -> None:
        self.socket.sendall(data)

    def read_frame(self, timeout: float = READ_TIMEOUT_S) -> tuple[str, dict, bytes]:
        """The next server frame (command, headers, body); heart-beat EOLs skipped. EOFError when the
        server closed the connection first."""
        deadline = time.monotonic() + timeout
        while True:
            self.pending = self.pending.lstrip(b"\r\n")
            head_end = self.pending.find(b"\n\n")
            if head_end >= 0:
                lines = self.pending[:head_end].decode().split("\n")
                headers = dict(line.split(":", 1) for line in lines[1:])
                start = head_end + 2
                if "content-length" in headers:
                    end = start + int(headers["content-length"])
                    if len(self.pending) > end:
                        assert self.pending[end:end + 1] == b"\x00", self.pending[:200]
                        body, self.pending = self.pending[start:end], self.pending[end + 1:]
                        return lines[0], headers, body
                else:
                    end = self.pending.find(b"\x00", start)
                    if end >= 0:
                        body, self.pending = self.pending[start:end], self.pending[end + 1:]
                        return lines[0], headers, body
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no whole frame within {timeout} s; have {self.pending[:200]!r}")
            self.socket.settimeout(left)
            data = self.socket.recv(1 << 16)
            if not data:
                raise EOFError(f"the server closed the connection; unread {self.pending[:200]!r}")
            self.pending += data

    def closed_by_server(self, timeout: float = READ_TIMEOUT_S) -> bool:
        """True once the server closed its side (EOF), with nothing more sent."""
        self.socket.settimeout(timeout)
        try:
            return self.socket.recv(1) == b"" and not self.pending.strip(b"\r\n")
        except ConnectionResetError:
            return False

    def close(self) -> None:
        self.socket.close()


def has_traceback(text: str) -> bool:
    return "Traceback" in text or "Error processing STOMP frame" in text


def serving(directory: Path) -> Iterator[Server]:
    """A test's server, for a fixture to ``yield from``: one on a store in ``directory``; when the test is
    done, no traceback in its stderr and a clean stop (SIGTERM: watchers and writers included, status 0)."""
    started = Server(directory / "store", directory / "server.log")
    yield started
    assert not has_traceback(started.stderr()), started.stderr()[-3000:]
    assert started.stop() == 0


def subscriber(port: int, destination: str, ack: str) -> RawClient:
    """A STOMP 1.2 connection subscribed to `destination` (its SUBSCRIBE receipted)."""
    client = RawClient(port)
    client.connect("1.2")
    client.send_raw(frame_bytes("SUBSCRIBE", {"destination": destination, "id": "s", "ack": ack, "receipt": "sub"}))
    command, headers, _ = client.read_frame()
    assert (command, headers.get("receipt-id")) == ("RECEIPT", "sub"), (command, headers)
    return client


def send(port: int, destination: str, body: bytes) -> None:
    """One receipted SEND on a connection of its own."""
    client = RawClient(port)
    client.connect("1.2")
    client.send_raw(frame_bytes("SEND", {"destination": destination, "receipt": "sent", "x-kind": "work"}, body))
    assert client.read_frame()[1]["receipt-id"] == "sent"
    client.close()
