"""The STOMP metrics (journal_engine/metrics/stomp.py) of a served broker run in this process on its own
event loop thread, driven by stomp.py and a raw client: connections, frames by command and ERROR frames
counted as the clients made them, and the per-queue metrics of the same scrape matching what the
STOMP traffic did (sends, deliveries, acknowledgements, NACKs until a dead letter)."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest
from metrics_text import sample, samples_of
from stomp_server import RawClient, frame_bytes

from journal_engine.metrics import registry_for, render
from journal_engine.served.destinations import Destinations
from journal_engine.served.server import ServedBroker, listening_socket, new_event_loop

stomp = pytest.importorskip("stomp", reason="stomp.py is not installed (pip install 'journal_engine[coilmq]')")

WAIT_S = 10.0


@pytest.fixture
def served(tmp_path):
    """(server, port): a ServedBroker on 127.0.0.1 whose loop runs in a thread, stopped at the end."""
    destinations = Destinations(tmp_path / "data", max_delivery_attempts=2)
    loop = new_event_loop()
    server = ServedBroker(destinations, loop)
    sock = listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    listening = threading.Event()
    stop = asyncio.Event()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.run(sock, listening.set, stop),))
    thread.start()
    try:
        assert listening.wait(WAIT_S), "the served broker did not start"
        yield server, port
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(WAIT_S)
        loop.close()
        destinations.close()


class Inbox(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.frames: list = []
        self.condition = threading.Condition()

    def on_message(self, frame) -> None:
        with self.condition:
            self.frames.append(frame)
            self.condition.notify_all()

    def take(self, count: int) -> list:
        with self.condition:
            assert self.condition.wait_for(lambda: len(self.frames) >= count, WAIT_S), self.frames
            taken, self.frames = self.frames[:count], self.frames[count:]
            return taken


def settled(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_stomp_metrics_count_the_clients_frames(served):
    server, port = served
    inbox = Inbox()
    connection = stomp.Connection12([("127.0.0.1", port)])
    connection.set_listener("inbox", inbox)
    connection.connect(wait=True)                                   # STOMP 1.2 clients send STOMP
    for number in range(3):
        connection.send("/queue/jobs", f"job {number}".encode(), receipt=f"r{number}")
    connection.subscribe("/queue/jobs", id="s", ack="client-individual")
    for _ in range(2):
        connection.ack(inbox.take(1)[0].headers["ack"])
    failing = inbox.take(1)[0]
    connection.nack(failing.headers["ack"])                         # a failed delivery: delivered again
    again = inbox.take(1)[0]
    assert again.body == failing.body
    connection.nack(again.headers["ack"])                           # the second attempt: a dead letter
    connection.disconnect()                                         # with a receipt, waited for

    raw = RawClient(port)
    raw.connect("1.2")
    raw.send_raw(frame_bytes("SHOUT"))                              # not a STOMP command: ERROR, closed
    assert raw.read_frame(WAIT_S)[0] == "ERROR"
    assert raw.closed_by_server(WAIT_S)
    raw.close()
    settled(lambda: not server.connections, "the connections did not close")

    samples = samples_of(render(registry_for(server.destinations.broker, server))[0])
    received = {"STOMP": 1, "CONNECT": 1, "SEND": 3, "SUBSCRIBE": 1, "ACK": 2, "NACK": 2, "DISCONNECT": 1,
                "UNSUBSCRIBE": 0, "BEGIN": 0, "COMMIT": 0, "ABORT": 0}
    for command, count in received.items():
        assert sample(samples, "journal_engine_stomp_frames_received_total", {"command": command}) == count, command
    sent = {"CONNECTED": 2, "RECEIPT": 4, "MESSAGE": 4, "ERROR": 1}
    for command, count in sent.items():
        assert sample(samples, "journal_engine_stomp_frames_sent_total", {"command": command}) == count, command
    assert sample(samples, "journal_engine_stomp_errors_total", {}) == 1
    assert sample(samples, "journal_engine_stomp_connections_accepted_total", {}) == 2
    assert sample(samples, "journal_engine_stomp_connections", {}) == 0

    queue = server.destinations.broker.queue_infos()
    jobs = next(info for info in queue if info.name.endswith("jobs"))
    labels = {"queue": jobs.name, "address": jobs.address}
    assert sample(samples, "journal_engine_queue_messages_added_total", labels) == 3
    assert sample(samples, "journal_engine_queue_messages_delivered_total", labels) == 4
    assert sample(samples, "journal_engine_queue_messages_redelivered_total", labels) == 1
    assert sample(samples, "journal_engine_queue_messages_acknowledged_total", labels) == 2
    assert sample(samples, "journal_engine_queue_messages_rolled_back_total", labels) == 2
    assert sample(samples, "journal_engine_queue_messages_dead_lettered_total",
                  dict(labels, reason="max-delivery-attempts")) == 1
    assert sample(samples, "journal_engine_queue_messages", labels) == 0


def test_without_a_server_there_are_no_stomp_metrics(served):
    server, _port = served
    text = render(registry_for(server.destinations.broker))[0]
    assert b"journal_engine_queue_messages" in text
    assert b"journal_engine_stomp_" not in text
