"""The served workloads of issue 40, driven by raw STOMP 1.2 clients on asyncio, producers and consumers
in two child processes of their own (so that neither shares the caller's CPU accounting or its GIL).
The same clients run against `journal-engine serve-stomp`, RabbitMQ's STOMP plugin and ActiveMQ
Classic's STOMP connector (served_peers.py starts them); an ``Endpoint`` says where, and what the
server there understands.

* ``receipted(endpoint, producers, consumers, seconds)``: each producer sends one 256-byte persistent
  message (``persistent:true``) at a time to /queue/served-<i % queues> and waits for its RECEIPT;
  each consumer subscribes there with ``ack:client-individual``, ``activemq.prefetchSize:PREFETCH``
  and ``prefetch-count:PREFETCH`` (ActiveMQ's and RabbitMQ's names for it; ours reads the first)
  and ACKs every MESSAGE. The rate is receipted messages per second of the send phase; p50/p99 of
  send -> RECEIPT.
* ``ingest_then_drain(endpoint, producers, consumers, messages)``: the producers send ``messages`` in
  all without receipts (each ends with one receipted SEND, so the phase ends when the server has
  them all), then the consumers drain the backlog, ACKing each.

Every phase is bounded in count and time. On our server (``Endpoint.counters``) the
``/journal-engine/stats`` request gives the fdatasyncs the store made during a phase; it is never
sent to another server: RabbitMQ answers it with an ERROR and closes the connection, and ActiveMQ
takes it for a SEND to a queue of that name and answers with a RECEIPT.

Run as a program (``python -m journal_engine.benchmarking.served_workload produce|consume ...``) it
is one of the two child processes, and prints one JSON line with what it did.
"""
from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

BODY = b"m" * 256
PREFETCH = 100
PHASE_TIMEOUT_S = 120.0
INGEST_WINDOW = 64                  # SENDs written before the producer yields to the loop
MODULE = "journal_engine.benchmarking.served_workload"   # what the child processes run (python -m)


@dataclass(frozen=True)
class Endpoint:
    """A STOMP server on the loopback interface, and what it understands beyond STOMP 1.2."""
    port: int
    virtual_host: str = "127.0.0.1"   # CONNECT's host header: RabbitMQ takes it for its virtual host ("/")
    counters: bool = True             # it answers the /journal-engine/stats request (our server only)

    @classmethod
    def of(cls, target: Endpoint | int) -> Endpoint:
        """An Endpoint as it is, a bare port as our server on it."""
        return target if isinstance(target, Endpoint) else cls(int(target))

    def argument(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_argument(cls, text: str) -> Endpoint:
        return cls(**json.loads(text))


class Stomp:
    """One STOMP 1.2 connection on asyncio streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, target: Endpoint | int) -> Stomp:
        endpoint = Endpoint.of(target)
        reader, writer = await asyncio.open_connection("127.0.0.1", endpoint.port)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client = cls(reader, writer)
        client.write("CONNECT", {"accept-version": "1.2", "host": endpoint.virtual_host})
        command, headers, _ = await client.read()
        if command != "CONNECTED":
            raise RuntimeError(f"{command} {headers}")
        return client

    def write(self, command: str, headers: dict, body: bytes = b"") -> None:
        head = command + "\n" + "".join(f"{name}:{value}\n" for name, value in headers.items())
        if body:
            head += f"content-length:{len(body)}\n"
        self.writer.write(head.encode() + b"\n" + body + b"\x00")

    async def read(self) -> tuple[str, dict, bytes]:
        while True:
            block = await self.reader.readuntil(b"\n\n")
            block = block.lstrip(b"\r\n")
            if block:
                break
        lines = block[:-2].decode().split("\n")
        headers = dict(line.split(":", 1) for line in lines[1:])
        length = headers.get("content-length")
        if length is None:
            body = (await self.reader.readuntil(b"\x00"))[:-1]
        else:
            body = (await self.reader.readexactly(int(length) + 1))[:-1]
        return lines[0], headers, body

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


def queue_of(index: int, queues: int) -> str:
    return f"/queue/served-{index % queues}"


async def _produce(endpoint: Endpoint, index: int, queues: int, until: float, receipted: bool, count: int,
                   latencies: list[float]) -> int:
    client = await Stomp.open(endpoint)
    destination = queue_of(index, queues)
    sent = 0
    try:
        if receipted:
            while time.monotonic() < until:
                started = time.perf_counter()
                client.write("SEND", {"destination": destination, "persistent": "true", "receipt": f"r{sent}"}, BODY)
                command, headers, _ = await client.read()
                if command != "RECEIPT":
                    raise RuntimeError(f"{command} {headers}")
                latencies.append(time.perf_counter() - started)
                sent += 1
        else:
            while sent < count - 1:
                for _ in range(min(INGEST_WINDOW, count - 1 - sent)):
                    client.write("SEND", {"destination": destination, "persistent": "true"}, BODY)
                    sent += 1
                await client.writer.drain()
            client.write("SEND", {"destination": destination, "persistent": "true", "receipt": "last"}, BODY)
            command, headers, _ = await asyncio.wait_for(client.read(), PHASE_TIMEOUT_S)
            if command != "RECEIPT":
                raise RuntimeError(f"{command} {headers}")
            sent += 1
    finally:
        await client.close()
    return sent


async def _consume(endpoint: Endpoint, index: int, queues: int, received: list[int]) -> None:
    """ACK every MESSAGE until cancelled."""
    client = await Stomp.open(endpoint)
    client.write("SUBSCRIBE", {"destination": queue_of(index, queues), "id": "s", "ack": "client-individual",
                               "activemq.prefetchSize": str(PREFETCH), "prefetch-count": str(PREFETCH)})
    try:
        while True:
            command, headers, _ = await client.read()
            if command == "MESSAGE":
                received[0] += 1
                client.write("ACK", {"id": headers.get("ack", headers["message-id"])})
            elif command == "ERROR":
                raise RuntimeError(f"{command} {headers}")
    finally:
        await client.close()


async def stats(target: Endpoint | int) -> dict | None:
    """Our server's counters; None from another server, which is not asked (see the module's text)."""
    endpoint = Endpoint.of(target)
    if not endpoint.counters:
        return None
    client = await Stomp.open(endpoint)
    try:
        client.write("SEND", {"destination": "/journal-engine/stats", "receipt": "stats"})
        command, headers, _ = await asyncio.wait_for(client.read(), 10)
        if command != "RECEIPT" or "fdatasyncs" not in headers:
            raise RuntimeError(f"the /journal-engine/stats request was answered {command} {headers}: is this "
                               "our server? (Endpoint.counters is for journal-engine serve-stomp only)")
        return {name: int(value) for name, value in headers.items() if value.isdigit()}
    finally:
        await client.close()


def _fdatasyncs(before: dict | None, after: dict | None) -> int | None:
    return after["fdatasyncs"] - before["fdatasyncs"] if before is not None and after is not None else None


async def _produce_all(target: Endpoint | int, producers: int, queues: int, seconds: float, receipted: bool,
                       count: int) -> dict:
    endpoint = Endpoint.of(target)
    latencies: list[float] = []
    before = await stats(endpoint)
    started = time.monotonic()
    sent = await asyncio.gather(*(_produce(endpoint, index, queues, started + seconds, receipted,
                                           count // producers + (index < count % producers), latencies)
                                  for index in range(producers)))
    elapsed = time.monotonic() - started
    after = await stats(endpoint)
    fdatasyncs = _fdatasyncs(before, after)
    ordered = sorted(latencies)
    return {"sent": sum(sent), "seconds": elapsed, "fdatasyncs": fdatasyncs,
            "p50_ms": 1000 * statistics.median(ordered) if ordered else None,
            "p99_ms": 1000 * ordered[int(0.99 * (len(ordered) - 1))] if ordered else None}


async def _consume_all(endpoint: Endpoint, consumers: int, queues: int, expected: int | None, timeout_s: float) -> dict:
    """Consume until ``expected`` arrived (None: until a line on stdin says how many), or timeout_s."""
    received = [0]
    tasks = [asyncio.ensure_future(_consume(endpoint, index, queues, received)) for index in range(consumers)]
    print(json.dumps({"subscribed": consumers}), flush=True)
    if expected is None:
        line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        expected = int(line)
    started = time.monotonic()
    deadline = started + timeout_s
    while received[0] < expected and time.monotonic() < deadline and not all(task.done() for task in tasks):
        await asyncio.sleep(0.002)
    elapsed = time.monotonic() - started
    for task in tasks:
        task.cancel()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    errors = [repr(outcome) for outcome in outcomes if not isinstance(outcome, (asyncio.CancelledError, type(None)))]
    return {"received": received[0], "seconds": elapsed, "errors": errors[:3]}


@dataclass
class Phase:
    messages: int
    seconds: float
    fdatasyncs: int | None
    p50_ms: float | None = None
    p99_ms: float | None = None

    @property
    def per_s(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    @property
    def fdatasyncs_per_message(self) -> float | None:
        return None if self.fdatasyncs is None or not self.messages else self.fdatasyncs / self.messages


# the directory holding the journal_engine package, for the children's imports (a checkout or site-packages)
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


def _child(*arguments: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [_PACKAGE_PARENT, os.environ.get("PYTHONPATH")])))
    return subprocess.Popen([sys.executable, "-m", MODULE, *arguments], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)


def _result(child: subprocess.Popen, timeout_s: float) -> dict:
    out, _ = child.communicate(timeout=timeout_s)
    if child.returncode:
        raise RuntimeError(f"a workload process failed ({child.returncode}): {out[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])


def receipted(target: Endpoint | int, producers: int, consumers: int, seconds: float,
              queues: int | None = None) -> Phase:
    """The receipted workload; the consumers take every receipted message before it returns."""
    endpoint = Endpoint.of(target)
    queues = queues or max(1, min(producers, consumers))
    consuming = _child("consume", endpoint.argument(), str(consumers), str(queues))
    try:
        line = consuming.stdout.readline()
        if "subscribed" not in line:
            raise RuntimeError(f"the consumers did not subscribe (exit status {consuming.poll()}): {line!r}")
        producing = _child("produce", endpoint.argument(), str(producers), str(queues), str(seconds), "receipted", "0")
        produced = _result(producing, seconds + PHASE_TIMEOUT_S)
        consuming.stdin.write(f"{produced['sent']}\n")
        consuming.stdin.flush()
        consumed = _result(consuming, PHASE_TIMEOUT_S + 10)
    finally:
        consuming.kill()
    if consumed["received"] < produced["sent"]:
        raise RuntimeError(f"{produced['sent']} receipted, {consumed['received']} received {consumed['errors']}")
    return Phase(produced["sent"], produced["seconds"], produced["fdatasyncs"], produced["p50_ms"], produced["p99_ms"])


def ingest_then_drain(target: Endpoint | int, producers: int, consumers: int, messages: int) -> tuple[Phase, Phase]:
    """The ingest (no receipts) of ``messages``, then their drain with ACKs."""
    endpoint = Endpoint.of(target)
    queues = max(1, min(producers, consumers))
    produced = _result(_child("produce", endpoint.argument(), str(producers), str(queues), str(PHASE_TIMEOUT_S),
                              "ingest", str(messages)), PHASE_TIMEOUT_S + 10)
    before = asyncio.run(stats(endpoint))
    consuming = _child("consume", endpoint.argument(), str(consumers), str(queues), str(messages))
    consumed = _result(consuming, PHASE_TIMEOUT_S + 10)
    after = asyncio.run(stats(endpoint))
    if consumed["received"] < messages:
        raise RuntimeError(f"{messages} sent, {consumed['received']} drained {consumed['errors']}")
    fdatasyncs = _fdatasyncs(before, after)
    return (Phase(produced["sent"], produced["seconds"], produced["fdatasyncs"]),
            Phase(consumed["received"], consumed["seconds"], fdatasyncs))


def _main(arguments: list[str]) -> None:
    role, endpoint = arguments[0], Endpoint.from_argument(arguments[1])
    count, queues = int(arguments[2]), int(arguments[3])
    if role == "produce":
        seconds, mode, total = float(arguments[4]), arguments[5], int(arguments[6])
        result = asyncio.run(_produce_all(endpoint, count, queues, seconds, mode == "receipted", total))
    else:
        expected = int(arguments[4]) if len(arguments) > 4 else None
        result = asyncio.run(_consume_all(endpoint, count, queues, expected, PHASE_TIMEOUT_S))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
