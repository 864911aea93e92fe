"""End to end: `journal-engine serve-stomp` in a child process, stomp.py clients, SIGKILL, restart.

Everything runs on the loopback interface, with bounded counts and timeouts: the server listens on
127.0.0.1 with a port the kernel picks (it prints it), each wait has a deadline.

* Crash mid-stream: two producers send with receipts while a client-acknowledging consumer takes
  messages; the server is SIGKILLed while the consumer holds one unacknowledged message and the
  producers are still sending. After a restart every message whose SEND was receipted is delivered
  (before or after the kill) with its body and headers exactly as sent; the held message comes back
  with ``redelivered:true``; a message first seen after the restart has no such header.
* Dead letters: a message NACKed, then lost to a SIGKILL while delivered, then abandoned by a
  disconnect, has failed three deliveries: with ``--max-delivery-attempts 3`` it is on /queue/DLQ.
"""
from __future__ import annotations

import queue
import threading
import time

import pytest
from stomp_server import Server

stomp = pytest.importorskip("stomp", reason="stomp.py is not installed (pip install 'journal_engine[coilmq]')")
pytest.importorskip("coilmq", reason="coilmq is not installed (pip install 'journal_engine[coilmq]')")

RECEIPT_TIMEOUT_S = 10.0
QUIET_S = 2.0                       # no message for this long: the queue is drained


class Client(stomp.ConnectionListener):
    """A STOMP 1.1 connection that records messages and receipts."""

    def __init__(self, port: int) -> None:
        self.messages: queue.Queue = queue.Queue()
        self.receipts: set[str] = set()
        self.errors: list = []
        self.condition = threading.Condition()
        self.connection = stomp.Connection11([("127.0.0.1", port)], auto_decode=False, reconnect_attempts_max=1,
                                             timeout=5)
        self.connection.set_listener("recorder", self)
        self.connection.connect(wait=True)

    def on_message(self, frame) -> None:
        self.messages.put(frame)

    def on_receipt(self, frame) -> None:
        with self.condition:
            self.receipts.add(frame.headers["receipt-id"])
            self.condition.notify_all()

    def on_error(self, frame) -> None:
        self.errors.append((frame.headers, frame.body))

    def on_disconnected(self) -> None:
        with self.condition:
            self.condition.notify_all()

    def send_receipted(self, destination: str, body: bytes, headers: dict, receipt: str) -> bool:
        """Send and wait for the RECEIPT; False when none came (the server died)."""
        self.connection.send(destination, body, headers={**headers, "receipt": receipt})
        deadline = time.monotonic() + RECEIPT_TIMEOUT_S
        with self.condition:
            while receipt not in self.receipts:
                left = deadline - time.monotonic()
                if left <= 0 or not self.connection.is_connected():
                    return receipt in self.receipts
                self.condition.wait(min(left, 0.2))
        return True

    def next_message(self, timeout: float = QUIET_S):
        try:
            return self.messages.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        if self.connection.is_connected():
            try:
                self.connection.disconnect()
            except Exception:
                pass


def user_headers(frame) -> dict:
    """The headers a producer set (the broker adds message-id, subscription, ack, redelivered...)."""
    return {key: value for key, value in frame.headers.items() if key.startswith("x-")}


@pytest.mark.parametrize("backend", ["journal", "lmdb"])
def test_every_receipted_send_survives_a_sigkill_mid_stream(tmp_path, backend):
    data = tmp_path / "store"
    server = Server(data, tmp_path / "server.log", "--backend", backend)
    sent: dict[str, tuple[bytes, dict]] = {}          # receipted: key -> (body, headers)
    attempted: dict[str, tuple[bytes, dict]] = {}
    lock = threading.Lock()
    stop_producing = threading.Event()
    producers_limit = 400                              # per producer, a bound: the kill comes first

    def produce(name: str) -> None:
        client = Client(server.port)
        try:
            for i in range(producers_limit):
                if stop_producing.is_set():
                    return
                key = f"{name}-{i}"
                body = f"{key}:".encode() + bytes(range(256))[i % 200:] + b"\x00tail"
                headers = {"x-key": key, "x-seq": str(i), "x-colon": "a:b"}
                with lock:
                    attempted[key] = (body, headers)
                if not client.send_receipted("/queue/orders", body, headers, receipt=f"r-{key}"):
                    return
                with lock:
                    sent[key] = (body, headers)
        except (stomp.exception.StompException, OSError):
            return      # the server was killed under us (stomp.py's socket may be closed mid-send: EBADF)
        finally:
            client.close()

    consumer = Client(server.port)
    consumer.connection.subscribe("/queue/orders", id="before", ack="client")
    producers = [threading.Thread(target=produce, args=(name,), daemon=True) for name in ("p1", "p2")]
    for thread in producers:
        thread.start()

    received_before: list = []
    held = None
    deadline = time.monotonic() + 60
    while held is None and time.monotonic() < deadline:
        frame = consumer.next_message(timeout=5)
        assert frame is not None, "the consumer got nothing for 5 s before the kill"
        received_before.append(frame)
        if len(received_before) < 30:
            consumer.connection.ack(frame.headers["message-id"], "before")
        else:
            held = frame                               # never acknowledged: the server dies with it out
    assert held is not None
    with lock:
        receipted_at_kill = len(sent)
    while True:                                        # let the producers get ahead of the consumer
        with lock:
            if len(sent) >= receipted_at_kill + 50 or len(sent) >= 2 * producers_limit - 5:
                break
        assert time.monotonic() < deadline, "the producers stalled"
        time.sleep(0.01)
    server.kill()                                      # SIGKILL, mid-stream
    stop_producing.set()
    for thread in producers:
        thread.join(timeout=30)
    consumer.close()
    assert not any(thread.is_alive() for thread in producers)
    with lock:
        receipted = dict(sent)
    # what the wait above guarantees (a delivery can overtake its own receipt, so not "30 + 50")
    assert len(receipted) >= min(receipted_at_kill + 50, 2 * producers_limit - 5)

    server = Server(data, tmp_path / "server.log", "--backend", backend)
    try:
        consumer = Client(server.port)
        consumer.connection.subscribe("/queue/orders", id="after", ack="client")
        received_after = []
        for _ in range(2 * producers_limit + 10):     # bounded: at most every message once, and a few more
            frame = consumer.next_message()
            if frame is None:
                break
            received_after.append(frame)
            consumer.connection.ack(frame.headers["message-id"], "after")
        consumer.close()
        assert not consumer.errors
    finally:
        assert server.stop() == 0

    delivered = {}
    for frame in received_before + received_after:
        key = frame.headers["x-key"]
        assert key in attempted, f"a message nobody sent: {frame.headers}"
        body, headers = attempted[key]
        assert frame.body == body, key                 # byte for byte
        assert user_headers(frame) == headers, key
        delivered.setdefault(key, frame)
    missing = sorted(set(receipted) - set(delivered))
    assert not missing, f"{len(missing)} receipted messages lost: {missing[:10]}"

    seen_before = {frame.headers["x-key"] for frame in received_before}
    after = {frame.headers["x-key"]: frame for frame in received_after}
    held_key = held.headers["x-key"]
    assert held_key in after, "the message held at the kill was not delivered again"
    assert after[held_key].headers.get("redelivered") == "true"
    for key, frame in after.items():
        if key not in seen_before:
            assert "redelivered" not in frame.headers, key


def test_failed_deliveries_by_nack_sigkill_and_disconnect_end_in_the_dead_letter_queue(tmp_path):
    data = tmp_path / "store"
    options = ("--max-delivery-attempts", "3", "--dead-letter-queue", "/queue/DLQ")
    server = Server(data, tmp_path / "server.log", *options)
    try:
        producer = Client(server.port)
        assert producer.send_receipted("/queue/jobs", b"poison\x00pill", {"x-key": "poison"}, receipt="r-poison")
        assert producer.send_receipted("/queue/jobs", b"fine", {"x-key": "fine"}, receipt="r-fine")
        producer.close()

        consumer = Client(server.port)
        consumer.connection.subscribe("/queue/jobs", id="s", ack="client")
        first = consumer.next_message(timeout=5)
        assert first.headers["x-key"] == "poison" and "redelivered" not in first.headers
        consumer.connection.nack(first.headers["message-id"], "s")            # failure 1: NACK
        second = consumer.next_message(timeout=5)
        assert second.headers["x-key"] == "poison" and second.headers["redelivered"] == "true"
        server.kill()                                                        # failure 2: lost to a crash
        consumer.close()

        server = Server(data, tmp_path / "server.log", *options)
        consumer = Client(server.port)
        consumer.connection.subscribe("/queue/jobs", id="s", ack="client")
        third = consumer.next_message(timeout=5)
        assert third.headers["x-key"] == "poison" and third.headers["redelivered"] == "true"
        assert third.body == b"poison\x00pill"
        consumer.close()                                                     # failure 3: gone without ACK

        consumer = Client(server.port)
        consumer.connection.subscribe("/queue/jobs", id="s", ack="client")
        survivor = consumer.next_message(timeout=5)
        assert survivor.headers["x-key"] == "fine"
        consumer.connection.ack(survivor.headers["message-id"], "s")
        assert consumer.next_message(timeout=1.0) is None                    # the poison is not here
        consumer.connection.subscribe("/queue/DLQ", id="d", ack="client")
        dead = consumer.next_message(timeout=5)
        assert dead is not None, "nothing in the dead-letter queue"
        assert dead.headers["x-key"] == "poison" and dead.body == b"poison\x00pill"
        assert dead.headers["original-destination"] == "/queue/jobs"
        assert dead.headers["destination"] == "/queue/DLQ"
        consumer.connection.ack(dead.headers["message-id"], "d")
        consumer.close()
        assert not consumer.errors
    finally:
        assert server.stop() == 0
