"""A message that becomes deliverable while nothing is sent reaches a live subscriber of
`journal-engine serve-stomp` (a child process) at once: a dead letter made by a NACK or by a
disconnect past the delivery limit reaches a subscriber of /queue/DLQ, and a redelivery held back by
--redelivery-delay-ms reaches its subscriber when due (not before), and a message sent with an
``expires`` header reaches a subscriber of /queue/DLQ as an expiry copy when it expires.

Before, serve-stomp dispatched only on a SEND, an ACK, a NACK or a SUBSCRIBE, and only on the
destination concerned: a dead letter sat in /queue/DLQ until a later SUBSCRIBE there, and due
redeliveries were offered by a poller that ran only when a redelivery delay was set.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from stomp_server import RawClient, Server, frame_bytes, has_traceback, send, subscriber

pytest.importorskip("coilmq", reason="coilmq is not installed (pip install 'journal_engine[coilmq]')")

from journal_engine.limits import STOMP_WATCH_WAIT_S  # noqa: E402

ARRIVAL_S = 5.0                 # a bound for "at once" on a loaded machine; typically milliseconds


@pytest.mark.parametrize("failure", ["nack", "disconnect"])
def test_a_new_dead_letter_reaches_a_live_dlq_subscriber(tmp_path, failure):
    server = Server(tmp_path / "store", tmp_path / "server.log", "--max-delivery-attempts", "1")
    try:
        dead_letters = subscriber(server.port, "/queue/DLQ", "auto")
        worker = subscriber(server.port, "/queue/work", "client-individual")
        send(server.port, "/queue/work", b"poison")
        command, headers, body = worker.read_frame()
        assert (command, body) == ("MESSAGE", b"poison")
        if failure == "nack":
            worker.send_raw(frame_bytes("NACK", {"id": headers["ack"], "receipt": "nacked"}))
            assert worker.read_frame()[1]["receipt-id"] == "nacked"
        else:
            worker.close()
        started = time.monotonic()
        command, headers, body = dead_letters.read_frame(ARRIVAL_S)
        print(f"dead letter ({failure}) reached the DLQ subscriber in {1000 * (time.monotonic() - started):.1f} ms")
        assert (command, body) == ("MESSAGE", b"poison")
        assert headers["destination"] == "/queue/DLQ" and headers["original-destination"] == "/queue/work"
        assert headers["x-kind"] == "work"
        assert not has_traceback(server.stderr()), server.stderr()[-3000:]
    finally:
        server.stop()


def test_a_delayed_redelivery_reaches_its_live_subscriber_when_due(tmp_path):
    delay_ms = 400
    server = Server(tmp_path / "store", tmp_path / "server.log", "--redelivery-delay-ms", str(delay_ms))
    try:
        worker = subscriber(server.port, "/queue/work", "client-individual")
        send(server.port, "/queue/work", b"again")
        command, headers, _ = worker.read_frame()
        assert (headers["delivery-count"], headers.get("redelivered")) == ("1", None), headers
        worker.send_raw(frame_bytes("NACK", {"id": headers["ack"], "receipt": "nacked"}))
        assert worker.read_frame()[1]["receipt-id"] == "nacked"
        nacked = time.monotonic()
        command, headers, body = worker.read_frame(delay_ms / 1000 + ARRIVAL_S)
        waited_ms = 1000 * (time.monotonic() - nacked)
        print(f"redelivery after {waited_ms:.1f} ms (delay {delay_ms} ms)")
        assert (command, body, headers.get("redelivered")) == ("MESSAGE", b"again", "true")
        assert headers["delivery-count"] == "2", headers
        assert waited_ms >= delay_ms * 0.9, waited_ms          # not before it is due (clock granularity aside)
        assert not has_traceback(server.stderr()), server.stderr()[-3000:]
    finally:
        server.stop()


def test_an_expiry_copy_reaches_a_live_dlq_subscriber(tmp_path):
    server = Server(tmp_path / "store", tmp_path / "server.log")
    try:
        dead_letters = subscriber(server.port, "/queue/DLQ", "auto")
        client = RawClient(server.port)
        client.connect("1.2")
        expires_ms = int(time.time() * 1000) + 300
        client.send_raw(frame_bytes("SEND", {"destination": "/queue/nobody", "receipt": "sent",
                                             "expires": str(expires_ms)}, b"stale"))
        assert client.read_frame()[1]["receipt-id"] == "sent"
        command, headers, body = dead_letters.read_frame(ARRIVAL_S)
        late_ms = time.time() * 1000 - expires_ms
        print(f"expiry copy reached the DLQ subscriber {late_ms:.1f} ms after the expiration")
        assert (command, body) == ("MESSAGE", b"stale")
        assert headers["original-destination"] == "/queue/nobody" and late_ms >= 0
        # an expiry timer brings it, not the watcher's own return every STOMP_WATCH_WAIT_S
        assert late_ms < STOMP_WATCH_WAIT_S * 1000 / 2, late_ms
        # an expires header that is no time is refused with an ERROR frame naming it
        client.send_raw(frame_bytes("SEND", {"destination": "/queue/nobody", "expires": "tomorrow"}, b"x"))
        command, headers, _ = client.read_frame()
        assert command == "ERROR" and "expires" in headers["message"], headers
        assert client.closed_by_server()
        assert not has_traceback(server.stderr()), server.stderr()[-3000:]
    finally:
        server.stop()


def test_a_dlq_subscriber_coming_after_the_last_one_left_gets_dead_letters_at_once(tmp_path):
    """A destination's watcher ends once its subscribers are gone; the next SUBSCRIBE starts another."""
    server = Server(tmp_path / "store", tmp_path / "server.log", "--max-delivery-attempts", "1")
    try:
        subscriber(server.port, "/queue/DLQ", "auto").close()
        time.sleep(STOMP_WATCH_WAIT_S * 1.5)        # the watcher has seen that nobody is left
        dead_letters = subscriber(server.port, "/queue/DLQ", "auto")
        worker = subscriber(server.port, "/queue/work", "client")
        send(server.port, "/queue/work", b"poison")
        headers = worker.read_frame()[1]
        worker.send_raw(frame_bytes("NACK", {"id": headers["ack"]}))
        command, headers, body = dead_letters.read_frame(ARRIVAL_S)
        assert (command, body, headers["original-destination"]) == ("MESSAGE", b"poison", "/queue/work")
        assert not has_traceback(server.stderr()), server.stderr()[-3000:]
    finally:
        server.stop()


def server_cpu_s(server: Server) -> float:
    fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")      # utime + stime


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the server's CPU time from /proc")
def test_a_subscriber_on_a_queue_nobody_sent_to_costs_no_cpu_and_gets_the_first_send(tmp_path):
    """The watcher of a queue that did not exist yet waits on it (it spun at full speed: 2.6 s of CPU
    in 3 s)."""
    server = Server(tmp_path / "store", tmp_path / "server.log")
    try:
        waiting = subscriber(server.port, "/queue/never-sent", "auto")
        before = server_cpu_s(server)
        time.sleep(2.0)
        spent_s = server_cpu_s(server) - before
        assert spent_s < 0.3, f"an idle server spent {spent_s:.2f} s of CPU in 2 s"
        send(server.port, "/queue/never-sent", b"first")
        command, _, body = waiting.read_frame(ARRIVAL_S)
        assert (command, body) == ("MESSAGE", b"first")
    finally:
        server.stop()
