"""The served workloads of issue 40, driven by raw STOMP 1.2 clients on asyncio, producers and consumers
in two child processes of their own (so that neither shares the caller's CPU accounting or its GIL).

* ``receipted(port, producers, consumers, seconds)``: each producer sends one 256-byte persistent
  message at a time to /queue/served-<i % queues> and waits for its RECEIPT; each consumer subscribes
  there with ``ack:client-individual`` and ``activemq.prefetchSize:PREFETCH`` and ACKs every MESSAGE.
  The rate is receipted messages per second of the send phase; p50/p99 of send -> RECEIPT.
* ``ingest_then_drain(port, producers, consumers, messages)``: the producers send ``messages`` in all
  without receipts (each ends with one receipted SEND, so the phase ends when the server has them
  all), then the consumers drain the backlog, ACKing each.

Every phase is bounded in count and time. The server's ``/journal-engine/stats`` request (the served
broker's counters; another server answers with an ERROR, and the counts are then None) gives the
fdatasyncs the store made during a phase.

Run as a program (``python served_workload.py produce|consume ...``) it is one of the two child
processes, and prints one JSON line with what it did.
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
from dataclasses import dataclass

BODY = b"m" * 256
PREFETCH = 100
PHASE_TIMEOUT_S = 120.0
INGEST_WINDOW = 64                  # SENDs written before the producer yields to the loop


class Stomp:
    """One STOMP 1.2 connection on asyncio streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Stomp:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client = cls(reader, writer)
        client.write("CONNECT", {"accept-version": "1.2", "host": "127.0.0.1"})
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


async def _produce(port: int, index: int, queues: int, until: float, receipted: bool, count: int,
                   latencies: list[float]) -> int:
    client = await Stomp.open(port)
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


async def _consume(port: int, index: int, queues: int, received: list[int]) -> None:
    """ACK every MESSAGE until cancelled."""
    client = await Stomp.open(port)
    client.write("SUBSCRIBE", {"destination": queue_of(index, queues), "id": "s", "ack": "client-individual",
                               "activemq.prefetchSize": str(PREFETCH)})
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


async def stats(port: int) -> dict | None:
    """The served broker's counters, or None from a server that has no such request."""
    client = await Stomp.open(port)
    try:
        client.write("SEND", {"destination": "/journal-engine/stats", "receipt": "stats"})
        command, headers, _ = await asyncio.wait_for(client.read(), 10)
        return {name: int(value) for name, value in headers.items() if value.isdigit()} if command == "RECEIPT" else None
    finally:
        await client.close()


async def _produce_all(port: int, producers: int, queues: int, seconds: float, receipted: bool, count: int) -> dict:
    latencies: list[float] = []
    before = await stats(port)
    started = time.monotonic()
    sent = await asyncio.gather(*(_produce(port, index, queues, started + seconds, receipted,
                                           count // producers + (index < count % producers), latencies)
                                  for index in range(producers)))
    elapsed = time.monotonic() - started
    after = await stats(port)
    fdatasyncs = after["fdatasyncs"] - before["fdatasyncs"] if before and after else None
    ordered = sorted(latencies)
    return {"sent": sum(sent), "seconds": elapsed, "fdatasyncs": fdatasyncs,
            "p50_ms": 1000 * statistics.median(ordered) if ordered else None,
            "p99_ms": 1000 * ordered[int(0.99 * (len(ordered) - 1))] if ordered else None}


async def _consume_all(port: int, consumers: int, queues: int, expected: int | None, timeout_s: float) -> dict:
    """Consume until ``expected`` arrived (None: until a line on stdin says how many), or timeout_s."""
    received = [0]
    tasks = [asyncio.ensure_future(_consume(port, index, queues, received)) for index in range(consumers)]
    print(json.dumps({"subscribed": consumers}), flush=True)
    if expected is None:
        line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        expected = int(line)
    started = time.monotonic()
    deadline = started + timeout_s
    while received[0] < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.002)
    elapsed = time.monotonic() - started
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"received": received[0], "seconds": elapsed}


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


def _child(*arguments: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, *arguments], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=dict(os.environ))


def _result(child: subprocess.Popen, timeout_s: float) -> dict:
    out, _ = child.communicate(timeout=timeout_s)
    if child.returncode:
        raise RuntimeError(f"a workload process failed ({child.returncode}): {out[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])


def receipted(port: int, producers: int, consumers: int, seconds: float, queues: int | None = None) -> Phase:
    """The receipted workload; the consumers take every receipted message before it returns."""
    queues = queues or max(1, min(producers, consumers))
    consuming = _child("consume", str(port), str(consumers), str(queues))
    try:
        assert "subscribed" in consuming.stdout.readline()
        producing = _child("produce", str(port), str(producers), str(queues), str(seconds), "receipted", "0")
        produced = _result(producing, seconds + PHASE_TIMEOUT_S)
        consuming.stdin.write(f"{produced['sent']}\n")
        consuming.stdin.flush()
        consumed = _result(consuming, PHASE_TIMEOUT_S + 10)
    finally:
        consuming.kill()
    if consumed["received"] < produced["sent"]:
        raise RuntimeError(f"{produced['sent']} receipted, {consumed['received']} received")
    return Phase(produced["sent"], produced["seconds"], produced["fdatasyncs"], produced["p50_ms"], produced["p99_ms"])


def ingest_then_drain(port: int, producers: int, consumers: int, messages: int) -> tuple[Phase, Phase]:
    """The ingest (no receipts) of ``messages``, then their drain with ACKs."""
    queues = max(1, min(producers, consumers))
    produced = _result(_child("produce", str(port), str(producers), str(queues), str(PHASE_TIMEOUT_S), "ingest",
                              str(messages)), PHASE_TIMEOUT_S + 10)
    before = asyncio.run(stats(port))
    consuming = _child("consume", str(port), str(consumers), str(queues), str(messages))
    consumed = _result(consuming, PHASE_TIMEOUT_S + 10)
    after = asyncio.run(stats(port))
    if consumed["received"] < messages:
        raise RuntimeError(f"{messages} sent, {consumed['received']} drained")
    fdatasyncs = after["fdatasyncs"] - before["fdatasyncs"] if before and after else None
    return (Phase(produced["sent"], produced["seconds"], produced["fdatasyncs"]),
            Phase(consumed["received"], consumed["seconds"], fdatasyncs))


def _main(arguments: list[str]) -> None:
    role, port, count, queues = arguments[0], int(arguments[1]), int(arguments[2]), int(arguments[3])
    if role == "produce":
        seconds, mode, total = float(arguments[4]), arguments[5], int(arguments[6])
        result = asyncio.run(_produce_all(port, count, queues, seconds, mode == "receipted", total))
    else:
        expected = int(arguments[4]) if len(arguments) > 4 else None
        result = asyncio.run(_consume_all(port, count, queues, expected, PHASE_TIMEOUT_S))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
