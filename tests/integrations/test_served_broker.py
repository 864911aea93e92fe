"""The served broker's own promises (journal_engine/served/, `journal-engine serve-stomp` in a child
process), beyond what the older serve-stomp tests hold it to:

* group commit across connections: many producers' receipted SENDs share fdatasyncs (the store's
  own counter, read through the server's /journal-engine/stats request);
* flow: ``activemq.prefetchSize`` and its default bound what a subscription holds unacknowledged;
  MESSAGE frames go out many to a write; a consumer that stops reading holds up no other consumer;
* STOMP 1.1/1.2 heart-beating, both ways;
* content-length bodies of any bytes; NACK, the ack modes and ACKs in transactions;
* a port in use is said, naming the port, and nothing is created.

Every wait has a deadline; every test checks the server's output holds no traceback.
"""
from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time

import pytest
from stomp_server import RawClient, frame_bytes, has_traceback, serving

from journal_engine.benchmarking import served_workload
from journal_engine.limits import (SERVED_HEARTBEAT_GRACE, SERVED_HEARTBEAT_MS, SERVED_PREFETCH_MAX,
                                   SERVED_SUBSCRIPTIONS_PER_CONNECTION_MAX)

WAIT_S = 30.0
QUIET_S = 0.5


@pytest.fixture
def server(tmp_path):
    yield from serving(tmp_path)


def stats(port: int) -> dict:
    return asyncio.run(served_workload.stats(port))


def send_all(port: int, destination: str, bodies: list[bytes], version: str = "1.2") -> None:
    """``bodies`` to ``destination`` in one write, the last SEND receipted (so all are stored)."""
    client = RawClient(port)
    client.connect(version)
    frames = [frame_bytes("SEND", {"destination": destination}, body) for body in bodies[:-1]]
    frames.append(frame_bytes("SEND", {"destination": destination, "receipt": "last"}, bodies[-1]))
    client.send_raw(b"".join(frames))
    assert client.read_frame(WAIT_S)[1]["receipt-id"] == "last"
    client.close()


def subscribe(port: int, destination: str, ack: str) -> RawClient:
    """A STOMP 1.2 connection subscribed to ``destination`` (no receipt: what the queue holds may
    come first, before a RECEIPT would)."""
    client = RawClient(port)
    client.connect("1.2")
    client.send_raw(frame_bytes("SUBSCRIBE", {"destination": destination, "id": "s", "ack": ack}))
    return client


def messages(client: RawClient, count: int) -> list[tuple[dict, bytes]]:
    got = []
    for _ in range(count):
        command, headers, body = client.read_frame(WAIT_S)
        assert command == "MESSAGE", (command, headers, body[:200])
        got.append((headers, body))
    return got


def nothing_more(client: RawClient) -> None:
    with pytest.raises(TimeoutError):
        client.read_frame(QUIET_S)


# ------------------------------------------------------------------ group commit
def test_receipted_sends_of_many_producers_share_fdatasyncs(server):
    """32 producers, each waiting for its RECEIPT before the next SEND: a RECEIPT means durable, and
    the SENDs arriving in one loop turn share one sync. One fdatasync per message or more (the
    coilmq-based server made 1.1 to 1.95) fails this."""
    result = asyncio.run(served_workload._produce_all(server.port, 32, 4, 2.0, True, 0))
    per_message = result["fdatasyncs"] / result["sent"]
    print(f"{result['sent']} receipted SENDs from 32 producers, {result['fdatasyncs']} fdatasyncs: "
          f"{per_message:.3f} a message")
    assert result["sent"] >= 200, result
    assert per_message < 0.5, result


def test_a_receipt_waits_for_the_disk_and_a_send_without_one_does_not(server):
    """One producer, SENDs pipelined without receipts then one receipted: the turn syncs for the
    RECEIPT only, so the fdatasyncs stay far below the SENDs."""
    before = stats(server.port)
    send_all(server.port, "/queue/unreceipted", [b"x" * 100] * 2000)
    after = stats(server.port)
    assert after["syncs"] - before["syncs"] <= 5, (before, after)
    assert after["fdatasyncs"] - before["fdatasyncs"] < 200, (before, after)


# ------------------------------------------------------------------ prefetch
def test_prefetch_size_bounds_what_a_subscription_holds_unacknowledged(server):
    send_all(server.port, "/queue/prefetch", [f"m{n}".encode() for n in range(10)])
    client = RawClient(server.port)
    client.connect("1.2")
    client.send_raw(frame_bytes("SUBSCRIBE", {"destination": "/queue/prefetch", "id": "s", "ack": "client-individual",
                                              "activemq.prefetchSize": "3"}))
    held = messages(client, 3)
    assert [body for _, body in held] == [b"m0", b"m1", b"m2"]
    nothing_more(client)                                    # three held: the window is full
    client.send_raw(frame_bytes("ACK", {"id": held[1][0]["ack"]}))
    assert [body for _, body in messages(client, 1)] == [b"m3"]   # one acknowledged: one more
    nothing_more(client)
    client.close()


def test_the_default_prefetch_is_one_message(server):
    send_all(server.port, "/queue/default-prefetch", [b"a", b"b"])
    client = subscribe(server.port, "/queue/default-prefetch", "client")
    [(headers, body)] = messages(client, 1)
    assert body == b"a"
    nothing_more(client)
    client.send_raw(frame_bytes("ACK", {"id": headers["ack"]}))
    assert messages(client, 1)[0][1] == b"b"
    client.close()


@pytest.mark.parametrize("value", ["0", str(SERVED_PREFETCH_MAX + 1), "many"])
def test_a_prefetch_size_out_of_bounds_is_refused_naming_the_header(server, value):
    client = RawClient(server.port)
    client.connect("1.2")
    client.send_raw(frame_bytes("SUBSCRIBE", {"destination": "/queue/p", "id": "s", "ack": "client",
                                              "activemq.prefetchSize": value, "receipt": "sub"}))
    command, headers, _ = client.read_frame()
    assert (command, headers.get("receipt-id")) == ("ERROR", "sub"), headers
    assert "activemq.prefetchSize" in headers["message"] and "SERVED_PREFETCH_MAX" in headers["message"], headers
    assert client.closed_by_server()


def test_the_prefetch_size_at_its_maximum_is_taken(server):
    client = RawClient(server.port)
    client.connect("1.2")
    client.send_raw(frame_bytes("SUBSCRIBE", {"destination": "/queue/p", "id": "s", "ack": "client",
                                              "activemq.prefetchSize": str(SERVED_PREFETCH_MAX), "receipt": "sub"}))
    assert client.read_frame()[:2] == ("RECEIPT", {"receipt-id": "sub"})
    client.close()


def test_a_connection_holds_subscriptions_up_to_its_limit_and_is_refused_past_it(server):
    client = RawClient(server.port)
    client.connect("1.2")
    count = SERVED_SUBSCRIPTIONS_PER_CONNECTION_MAX
    client.send_raw(b"".join(frame_bytes("SUBSCRIBE", {"destination": f"/topic/t{n}", "id": f"s{n}",
                                                       "receipt": f"r{n}"}) for n in range(count)))
    assert [client.read_frame(WAIT_S)[1]["receipt-id"] for _ in range(count)] == [f"r{n}" for n in range(count)]
    client.send_raw(frame_bytes("SUBSCRIBE", {"destination": "/topic/one-more", "id": "over", "receipt": "over"}))
    command, headers, _ = client.read_frame()
    assert (command, headers["receipt-id"]) == ("ERROR", "over"), headers
    assert "SERVED_SUBSCRIPTIONS_PER_CONNECTION_MAX" in headers["message"], headers
    assert client.closed_by_server()


# ------------------------------------------------------------------ batched writes, slow consumers
def test_message_frames_go_out_many_to_a_write(server):
    count = 500
    send_all(server.port, "/queue/batched", [f"b{n}".encode() for n in range(count)])
    before = stats(server.port)
    client = subscribe(server.port, "/queue/batched", "auto")
    got = messages(client, count)
    after = stats(server.port)
    assert [body for _, body in got] == [f"b{n}".encode() for n in range(count)]
    delivered, writes = after["delivered"] - before["delivered"], after["writes"] - before["writes"]
    print(f"{delivered} MESSAGE frames in {writes} writes")
    assert delivered == count and writes < count / 10, (delivered, writes)
    client.close()


def test_a_consumer_that_stops_reading_holds_up_no_other_consumer(server):
    """Two consumers of one queue, 1 MiB messages: the one that reads nothing (client-individual, a
    prefetch of 1000) is handed what its connection's buffers hold, the other gets the rest at once,
    and the producer's RECEIPTs keep coming. Handing them out in turn regardless (no back-pressure)
    would give each half. Nothing is lost: what the stalled one held comes back when it goes (also
    if the server gave it up first, as it does after STOMP_WRITE_TIMEOUT_S on a slow machine)."""
    count, body = 40, b"s" * (1024 * 1024)
    stalled = RawClient(server.port)
    stalled.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    stalled.connect("1.2")
    stalled.send_raw(frame_bytes("SUBSCRIBE", {"destination": "/queue/shared", "id": "s", "ack": "client-individual",
                                               "activemq.prefetchSize": "1000", "receipt": "sub"}))
    assert stalled.read_frame()[1]["receipt-id"] == "sub"
    reader = subscribe(server.port, "/queue/shared", "auto")
    got: list = []

    def read() -> None:
        try:
            while True:
                got.append(reader.read_frame(5.0)[0])
        except (TimeoutError, EOFError, OSError):
            pass

    thread = threading.Thread(target=read)
    thread.start()
    producer = RawClient(server.port)
    producer.connect("1.2")
    started = time.monotonic()
    for number in range(count):
        producer.send_raw(frame_bytes("SEND", {"destination": "/queue/shared", "receipt": f"r{number}"}, body))
        assert producer.read_frame(WAIT_S)[1]["receipt-id"] == f"r{number}"
    sent_s = time.monotonic() - started
    thread.join(WAIT_S + 10)
    print(f"{count} MiB receipted in {sent_s:.2f} s; the reading consumer got {len(got)}")
    assert got.count("MESSAGE") >= 28, len(got)
    for client in (producer, reader, stalled):
        client.close()
    rest = subscribe(server.port, "/queue/shared", "auto")
    assert len(messages(rest, count - len(got))) == count - len(got)     # what the stalled one held
    nothing_more(rest)
    rest.close()


# ------------------------------------------------------------------ heart-beats
def test_the_server_sends_heart_beats_at_the_agreed_interval(server):
    client = RawClient(server.port)
    client.socket.sendall(frame_bytes("CONNECT", {"accept-version": "1.1,1.2", "host": "127.0.0.1",
                                                  "heart-beat": "0,1000"}, content_length=False))
    command, headers, _ = client.read_frame()
    assert (command, headers["version"]) == ("CONNECTED", "1.2")
    assert headers["heart-beat"] == f"{SERVED_HEARTBEAT_MS},{SERVED_HEARTBEAT_MS}"
    interval_s = max(SERVED_HEARTBEAT_MS, 1000) / 1000
    beats = b""
    client.socket.settimeout(interval_s * 3)
    deadline = time.monotonic() + interval_s * 2.5
    while time.monotonic() < deadline:
        beats += client.socket.recv(16)
    assert beats and set(beats) == {ord("\n")}, beats
    assert 1 <= len(beats) <= 3, beats
    client.close()


def test_a_client_silent_past_its_promised_heart_beats_is_given_up(server):
    silent = RawClient(server.port)
    silent.socket.sendall(frame_bytes("CONNECT", {"accept-version": "1.2", "host": "127.0.0.1",
                                                  "heart-beat": "500,0"}, content_length=False))
    assert silent.read_frame()[0] == "CONNECTED"
    beating = RawClient(server.port)
    beating.socket.sendall(frame_bytes("CONNECT", {"accept-version": "1.2", "host": "127.0.0.1",
                                                   "heart-beat": "500,0"}, content_length=False))
    assert beating.read_frame()[0] == "CONNECTED"
    limit_s = max(500, SERVED_HEARTBEAT_MS) / 1000 * (SERVED_HEARTBEAT_GRACE + 1)
    started = time.monotonic()
    while time.monotonic() - started < limit_s + 1:
        beating.send_raw(b"\n")
        time.sleep(0.25)
    assert silent.closed_by_server(timeout=limit_s)
    beating.send_raw(frame_bytes("SEND", {"destination": "/queue/alive", "receipt": "alive"}, b"x"))
    assert beating.read_frame()[1]["receipt-id"] == "alive"      # the one that beat is still served
    beating.close()


# ------------------------------------------------------------------ bodies, acknowledgement, transactions
def test_a_content_length_body_of_any_bytes_comes_back_whole_in_stomp_1_2(server):
    body = bytes(range(256)) * 64 + b"\x00\x00"
    client = RawClient(server.port)
    client.connect("1.2")
    client.send_raw(frame_bytes("SEND", {"destination": "/queue/nul", "receipt": "r", "x-escaped": "a\\cb\\nc"}, body))
    assert client.read_frame()[1]["receipt-id"] == "r"
    client.close()
    consumer = subscribe(server.port, "/queue/nul", "auto")
    [(headers, got)] = messages(consumer, 1)
    assert got == body and headers["x-escaped"] == "a\\cb\\nc"      # escaped as it was sent
    consumer.close()


def test_client_acknowledgement_is_cumulative_and_client_individual_is_not(server):
    send_all(server.port, "/queue/modes", [f"c{n}".encode() for n in range(3)] + [f"i{n}".encode() for n in range(3)])
    cumulative = RawClient(server.port)
    cumulative.connect("1.2")
    cumulative.send_raw(frame_bytes("SUBSCRIBE", {"destination": "/queue/modes", "id": "c", "ack": "client",
                                                  "activemq.prefetchSize": "3"}))
    first = messages(cumulative, 3)
    cumulative.send_raw(frame_bytes("ACK", {"id": first[2][0]["ack"], "receipt": "acked"}))
    # the ACK of the third settles all three; the window refills with the next three
    rest = messages(cumulative, 3)
    assert cumulative.read_frame()[1]["receipt-id"] == "acked"
    cumulative.send_raw(frame_bytes("ACK", {"id": rest[1][0]["ack"], "receipt": "one"}))
    assert cumulative.read_frame()[1]["receipt-id"] == "one"
    cumulative.close()                      # i2 was not acknowledged: it comes back
    individual = RawClient(server.port)
    individual.connect("1.2")
    individual.send_raw(frame_bytes("SUBSCRIBE", {"destination": "/queue/modes", "id": "i",
                                                  "ack": "client-individual", "activemq.prefetchSize": "10"}))
    [(headers, body)] = messages(individual, 1)
    assert (body, headers.get("redelivered")) == (b"i2", "true"), headers
    individual.close()

    send_all(server.port, "/queue/individual", [b"x0", b"x1", b"x2"])
    client = RawClient(server.port)
    client.connect("1.2")
    client.send_raw(frame_bytes("SUBSCRIBE", {"destination": "/queue/individual", "id": "i",
                                              "ack": "client-individual", "activemq.prefetchSize": "3"}))
    held = messages(client, 3)
    client.send_raw(frame_bytes("ACK", {"id": held[1][0]["ack"], "receipt": "acked"}))
    assert client.read_frame()[1]["receipt-id"] == "acked"
    client.close()                          # x0 and x2 come back, x1 does not
    again = subscribe(server.port, "/queue/individual", "auto")
    assert sorted(body for _, body in messages(again, 2)) == [b"x0", b"x2"]
    nothing_more(again)
    again.close()


def test_a_nack_is_a_failed_delivery_counted_and_flagged(server):
    send_all(server.port, "/queue/nack", [b"again"])
    client = subscribe(server.port, "/queue/nack", "client-individual")
    [(headers, _)] = messages(client, 1)
    assert (headers["delivery-count"], headers.get("redelivered")) == ("1", None)
    client.send_raw(frame_bytes("NACK", {"id": headers["ack"], "receipt": "nacked"}))
    [(headers, body)] = messages(client, 1)            # the failed message comes back first...
    assert client.read_frame()[1]["receipt-id"] == "nacked"     # ...then the NACK's RECEIPT
    assert (body, headers["delivery-count"], headers["redelivered"]) == (b"again", "2", "true")
    client.close()


@pytest.mark.parametrize("end", ["COMMIT", "ABORT"])
def test_an_ack_in_a_transaction_takes_effect_at_commit_only(server, end):
    send_all(server.port, "/queue/tx-ack", [b"held"])
    client = subscribe(server.port, "/queue/tx-ack", "client")
    [(headers, _)] = messages(client, 1)
    client.send_raw(frame_bytes("BEGIN", {"transaction": "t"}))
    client.send_raw(frame_bytes("ACK", {"id": headers["ack"], "transaction": "t", "receipt": "ack"}))
    client.send_raw(frame_bytes(end, {"transaction": "t", "receipt": "end"}))
    assert [client.read_frame()[1]["receipt-id"] for _ in range(2)] == ["ack", "end"]
    client.close()
    after = subscribe(server.port, "/queue/tx-ack", "auto")
    if end == "COMMIT":
        nothing_more(after)
    else:
        [(headers, body)] = messages(after, 1)
        assert (body, headers["redelivered"]) == (b"held", "true")
    after.close()


def test_a_frame_naming_a_transaction_never_begun_is_refused(server):
    client = RawClient(server.port)
    client.connect("1.2")
    client.send_raw(frame_bytes("SEND", {"destination": "/queue/x", "transaction": "nope", "receipt": "r"}, b"x"))
    command, headers, _ = client.read_frame()
    assert (command, headers["receipt-id"]) == ("ERROR", "r") and "nope" in headers["message"], headers
    assert client.closed_by_server()


@pytest.mark.parametrize("data, said", [(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", '"GET / HTTP/1.1"'),
                                        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "speaking TLS")])
def test_an_error_frame_says_in_words_what_was_sent_not_in_a_bytes_repr(server, data, said):
    client = RawClient(server.port)
    client.send_raw(data)
    command, headers, _ = client.read_frame()
    assert command == "ERROR" and said in headers["message"], headers
    assert "b'" not in headers["message"] and "\\x" not in headers["message"], headers
    assert client.closed_by_server()


@pytest.mark.parametrize("escapes", [True, False])
def test_the_message_writer_writes_what_pack_writes_of_the_same_headers(tmp_path, escapes):
    """served/messages.py writes MESSAGE frames without a dict or a frame object (the hot path); read
    back, they hold what ``pack`` of ``message_headers`` would: a first delivery, a redelivery, a
    dead-letter copy naming its origin, headers needing escapes, a body with NULs."""
    from journal_engine.integrations.stomp_frames import FrameReader, StompFrame, pack
    from journal_engine.served.destinations import Destinations
    from journal_engine.served.messages import message_frame, message_headers

    destinations = Destinations(tmp_path / "store", max_delivery_attempts=2)
    try:
        destinations.send("/queue/w", {"destination": "/queue/w", "x-odd": "a:b\\c\nd", "receipt": "r"},
                          b"\x00body\x00")
        consumer = destinations.create_consumer("/queue/w")
        seen = []
        for _ in range(2):                      # the second delivery is a redelivery; then the DLQ
            message = consumer.receive(0)
            seen.append(("/queue/w", message))
            consumer.rollback(message)
        dead = destinations.create_consumer("/queue/DLQ").receive(0)
        seen.append(("/queue/DLQ", dead))
        for destination, message in seen:
            written = message_frame(message, destination, "sub:1", True, escapes)
            headers = dict(message_headers(message, destination), subscription="sub:1", ack=str(message.message_id))
            reference = pack(StompFrame("MESSAGE", headers, bytes(message.body)), escapes=escapes)
            reader = FrameReader()
            reader.escapes = escapes
            [got] = reader.feed(written)
            reader = FrameReader()
            reader.escapes = escapes
            [expected] = reader.feed(reference)
            assert (got.cmd, got.headers, got.body) == (expected.cmd, expected.headers, expected.body)
        assert seen[1][1].redelivered and "original-destination" in message_headers(dead, "/queue/DLQ")
    finally:
        destinations.close()


def test_an_error_frame_names_no_receipt_of_a_frame_it_did_not_refuse(server):
    """A good receipted frame and garbage in one write: the good one is receipted, and the ERROR for
    the garbage carries no receipt-id (it named the good frame's, which a client would take for a
    refusal of that frame)."""
    client = RawClient(server.port)
    client.connect("1.2")
    client.send_raw(frame_bytes("SEND", {"destination": "/queue/x", "receipt": "good"}, b"x") + b"\x01\x02garbage\n\n\x00")
    assert client.read_frame()[:2] == ("RECEIPT", {"receipt-id": "good"})
    command, headers, _ = client.read_frame()
    assert command == "ERROR" and "receipt-id" not in headers, headers
    assert client.closed_by_server()


# ------------------------------------------------------------------ the listening port
def test_a_port_in_use_is_named_and_nothing_is_created(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        data = tmp_path / "never-made"
        done = subprocess.run([sys.executable, "-m", "journal_engine", "serve-stomp", "--data", str(data),
                               "--port", str(port)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    assert f"127.0.0.1:{port}" in done.stderr and "another program uses that port" in done.stderr, done.stderr
    assert "--port" in done.stderr and not has_traceback(done.stderr), done.stderr
    assert done.stdout == "" and not data.exists()


def test_a_send_priority_header_orders_the_queue_and_comes_back_on_the_message(server):
    client = RawClient(server.port)
    client.connect("1.2")
    for body, priority in [(b"low", "1"), (b"plain", None), (b"high", "9")]:
        headers = {"destination": "/queue/prio", "receipt": body.decode()}
        if priority is not None:
            headers["priority"] = priority
        client.send_raw(frame_bytes("SEND", headers, body))
        assert client.read_frame()[1]["receipt-id"] == body.decode()
    client.close()
    consumer = subscribe(server.port, "/queue/prio", "auto")
    got = messages(consumer, 3)
    assert [(body, headers.get("priority")) for headers, body in got] == [(b"high", "9"), (b"plain", None),
                                                                          (b"low", "1")]
    consumer.close()


@pytest.mark.parametrize("value", ["10", "-1", "high", "4.5"])
def test_a_send_priority_header_out_of_0_to_9_is_an_error_frame_naming_it(server, value):
    client = RawClient(server.port)
    client.connect("1.2")
    client.send_raw(frame_bytes("SEND", {"destination": "/queue/prio-bad", "priority": value, "receipt": "r"}, b"x"))
    command, headers, _ = client.read_frame()
    assert command == "ERROR" and "priority" in headers["message"], headers
    client.close()
