"""Messages/s through a real STOMP client (stomp.py) against coilmq, on coilmq's stores and on ours.

Groups (numbers, command and machine in docs/benchmarks.md, section "coilmq"):
  coilmq: send with receipts     PRODUCERS connections each send MESSAGES / PRODUCERS messages, one
                                 at a time, waiting for the RECEIPT; nobody subscribes, so every
                                 message goes to the store
  coilmq: receive with acks      one connection subscribes with ack=client and takes the same messages,
                                 acknowledging each (coilmq hands a client-acknowledging subscriber one
                                 message at a time)

Servers, each a child process on a loopback port, all in the same run:
  memory        coilmq 1.1.0's server with coilmq.store.memory.MemoryQueue (nothing on disk)
  dbm           with coilmq.store.dbm (shelve; syncs its metadata every 100 operations, never fsyncs)
  sqlalchemy    with coilmq.store.sa on SQLite in a file (one transaction per enqueue and per dequeue;
                SQLite's default synchronous=FULL: an fsync per commit)
  journal       journal-engine serve-stomp (a RECEIPT once the message is fdatasynced, group commit)
  lmdb          journal-engine serve-stomp --backend lmdb
What is durable when the RECEIPT arrives differs: only sqlalchemy, journal and lmdb have the message
on disk then; journal and lmdb also keep a delivered message until its ACK.
"""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from stomp_load import coilmq_config  # tests/helpers, on the path in CI

stomp = pytest.importorskip("stomp", reason="stomp.py is not installed (pip install 'journal_engine[bench]')")
pytest.importorskip("coilmq", reason="coilmq is not installed (pip install 'journal_engine[bench]')")

ROOT = Path(__file__).resolve().parent.parent
MESSAGES = 1_000
PRODUCERS = 4
BODY = bytes(range(256))
ROUNDS = 3
START_TIMEOUT_S = 30.0
WAIT_S = 30.0
STORES = ["memory", "dbm", "sqlalchemy", "journal", "lmdb"]


class Server:
    """One broker in a child process; ``port`` is read from what it prints (it picks a free one)."""

    def __init__(self, store: str, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        if store in ("journal", "lmdb"):
            command = [sys.executable, "-m", "journal_engine", "serve-stomp", "--data", str(directory / "store"),
                       "--port", "0", "--backend", store]
            marker, stream = "listening on 127.0.0.1:", "stdout"
        else:
            config = directory / "coilmq.cfg"
            config.write_text(coilmq_config(store, directory, 0))
            command = [sys.executable, "-m", "coilmq.start", "-c", str(config)]
            marker, stream = "listening on 127.0.0.1:", "stderr"
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        stdin=subprocess.DEVNULL, env=env, cwd=str(ROOT))
        lines: queue.Queue = queue.Queue()
        source = getattr(self.process, stream)

        def read() -> None:
            for raw in iter(source.readline, b""):
                lines.put(raw.decode(errors="replace"))

        threading.Thread(target=read, daemon=True).start()
        other = self.process.stderr if stream == "stdout" else self.process.stdout
        threading.Thread(target=lambda: [None for _ in iter(other.readline, b"")], daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.stop()
                raise RuntimeError(f"{store}: the server did not start within {START_TIMEOUT_S} s")
            if marker in line:
                self.port = int(line.split(marker)[1].split()[0].rstrip(".,"))
                return

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


class Client(stomp.ConnectionListener):
    def __init__(self, port: int) -> None:
        self.condition = threading.Condition()
        self.receipts: set[str] = set()
        self.messages: queue.Queue = queue.Queue()
        self.connection = stomp.Connection11([("127.0.0.1", port)], auto_decode=False)
        self.connection.set_listener("bench", self)
        self.connection.connect(wait=True)

    def on_receipt(self, frame) -> None:
        with self.condition:
            self.receipts.add(frame.headers["receipt-id"])
            self.condition.notify_all()

    def on_message(self, frame) -> None:
        self.messages.put(frame)

    def send_receipted(self, destination: str, receipt: str) -> None:
        self.connection.send(destination, BODY, headers={"receipt": receipt})
        with self.condition:
            if not self.condition.wait_for(lambda: receipt in self.receipts, timeout=WAIT_S):
                raise AssertionError(f"no RECEIPT {receipt} within {WAIT_S} s")

    def close(self) -> None:
        self.connection.disconnect()


@pytest.fixture(scope="module", params=STORES)
def server(request, tmp_path_factory):
    if request.param == "sqlalchemy":
        pytest.importorskip("sqlalchemy", reason="SQLAlchemy 1.x is not installed (coilmq's SQL store needs it)")
    if request.param == "lmdb":
        pytest.importorskip("lmdb", reason="the lmdb package is not installed")
    running = Server(request.param, tmp_path_factory.mktemp(f"coilmq-{request.param}"))
    yield request.param, running
    running.stop()


_round = iter(range(1_000_000))


def _send_all(port: int, destination: str) -> None:
    per_producer = MESSAGES // PRODUCERS
    tag = next(_round)
    clients = [Client(port) for _ in range(PRODUCERS)]
    errors: list = []

    def produce(index: int, client: Client) -> None:
        try:
            for i in range(per_producer):
                client.send_receipted(destination, f"{tag}-{index}-{i}")
        except Exception as error:        # reported by the caller
            errors.append(error)

    threads = [threading.Thread(target=produce, args=(i, c)) for i, c in enumerate(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for client in clients:
        client.close()
    assert not errors, errors


def _receive_all(port: int, destination: str) -> int:
    client = Client(port)
    client.connection.subscribe(destination, id="bench", ack="client")
    received = 0
    try:
        while received < MESSAGES:
            frame = client.messages.get(timeout=WAIT_S)
            assert frame.body == BODY
            client.connection.ack(frame.headers["message-id"], "bench")
            received += 1
    finally:
        client.close()
    return received


def test_send_with_receipts(benchmark, server):
    store, running = server
    benchmark.group = "coilmq: send with receipts"
    benchmark.extra_info.update(store=store, messages=MESSAGES, producers=PRODUCERS, body_bytes=len(BODY))
    destination = "/queue/bench-send"
    benchmark.pedantic(_send_all, args=(running.port, destination), rounds=ROUNDS, iterations=1)
    # leave the queue empty for the next case (untimed); --benchmark-disable sent once and measured nothing
    for _ in range(1 if benchmark.disabled else ROUNDS):
        _receive_all(running.port, destination)
    if not benchmark.disabled:
        benchmark.extra_info["messages_per_s"] = round(MESSAGES / benchmark.stats.stats.median)


def test_receive_with_acks(benchmark, server):
    store, running = server
    benchmark.group = "coilmq: receive with acks"
    benchmark.extra_info.update(store=store, messages=MESSAGES, body_bytes=len(BODY))
    destination = "/queue/bench-receive"
    benchmark.pedantic(_receive_all, args=(running.port, destination), rounds=ROUNDS, iterations=1,
                       setup=lambda: _send_all(running.port, destination))
    if not benchmark.disabled:   # --benchmark-disable: one untimed pass
        benchmark.extra_info["messages_per_s"] = round(MESSAGES / benchmark.stats.stats.median)
