"""`journal-engine serve-stomp` (a child process) under ordinary clients: stomp.py sending back to back,
frames pipelined in one write or split byte by byte, large and binary bodies, many connections at
once, protocol errors, and a receipt that means durable (SIGKILL right after it). Every test also
checks the server's stderr holds no traceback.

Before serve-stomp read frames with its own reader (journal_engine/integrations/stomp_frames.py),
coilmq's FrameBuffer parsed each socket read as if it held whole lines: stomp.py's 300 receipted
SENDs got about 100 RECEIPTs, then a ValueError from parse_headers dropped the connection.
"""
from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
from stomp_server import RawClient, Server, frame_bytes, has_traceback, serving

stomp = pytest.importorskip("stomp", reason="stomp.py is not installed (pip install 'journal_engine[coilmq]')")
pytest.importorskip("coilmq", reason="coilmq is not installed (pip install 'journal_engine[coilmq]')")

from journal_engine.limits import STOMP_FRAME_BYTES_MAX  # noqa: E402

SENDS = 300
WAIT_S = 30.0


@pytest.fixture
def server(tmp_path):
    yield from serving(tmp_path)


def drain(port: int, destination: str, count: int, version: str = "1.0") -> list[tuple[dict, bytes]]:
    """``count`` messages of ``destination`` (ack auto), read by a raw client; then nothing more within
    a short quiet time."""
    client = RawClient(port)
    client.connect(version)
    client.send_raw(frame_bytes("SUBSCRIBE", {"destination": destination, "id": "drain", "ack": "auto"}))
    got = []
    for _ in range(count):
        command, headers, body = client.read_frame(WAIT_S)
        assert command == "MESSAGE", (command, headers, body[:200])
        got.append((headers, body))
    with pytest.raises(TimeoutError):
        client.read_frame(0.5)
    client.close()
    return got


class Receipts(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.errors: list = []
        self.condition = threading.Condition()

    def on_receipt(self, frame) -> None:
        with self.condition:
            self.ids.add(frame.headers["receipt-id"])
            self.condition.notify_all()

    def on_error(self, frame) -> None:
        self.errors.append(frame)

    def wait_for(self, count: int, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        with self.condition:
            while len(self.ids) < count and time.monotonic() < deadline:
                self.condition.wait(0.2)
            return len(self.ids)


CONNECTIONS = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_stomp_py_300_receipted_sends_back_to_back(server, version):
    receipts = Receipts()
    connection = CONNECTIONS[version]([("127.0.0.1", server.port)], auto_decode=False, reconnect_attempts_max=1)
    connection.set_listener("receipts", receipts)
    connection.connect(wait=True)
    started = time.monotonic()
    for number in range(SENDS):
        connection.send("/queue/back-to-back", f"message {number}: a:b\\c".encode(),
                        headers={"receipt": f"r-{number}", "x-number": str(number), "x-colon": "a:b"})
    got = receipts.wait_for(SENDS, WAIT_S)
    elapsed_s = time.monotonic() - started
    connection.disconnect()
    print(f"STOMP {version}: {SENDS} receipted SENDs back to back in {elapsed_s:.3f} s")
    assert got == SENDS and not receipts.errors, (got, receipts.errors, server.stderr()[-3000:])
    messages = drain(server.port, "/queue/back-to-back", SENDS)
    assert [body for _, body in messages] == [f"message {n}: a:b\\c".encode() for n in range(SENDS)]
    assert all(headers["x-colon"] == "a:b" for headers, _ in messages)
    assert not has_traceback(server.stderr()), server.stderr()[-3000:]


def test_frames_pipelined_in_one_write_and_split_byte_by_byte(server):
    client = RawClient(server.port)
    client.connect()
    # 200 SENDs with receipts, heart-beat EOLs between some, all in one sendall()
    data = b"".join(frame_bytes("SEND", {"destination": "/queue/pipelined", "receipt": f"p-{n}"}, f"p{n}".encode(),
                                content_length=n % 2 == 0) + (b"\n" if n % 3 == 0 else b"") for n in range(200))
    client.send_raw(data)
    assert [client.read_frame()[1]["receipt-id"] for _ in range(200)] == [f"p-{n}" for n in range(200)]
    # one SEND (CRLF line ends, as 1.2 allows) written a byte at a time
    split = frame_bytes("SEND", {"destination": "/queue/pipelined", "receipt": "split"}, b"split body")
    split = split.replace(b"\n", b"\r\n")
    for byte in range(len(split)):
        client.send_raw(split[byte:byte + 1])
    command, headers, _ = client.read_frame()
    assert (command, headers["receipt-id"]) == ("RECEIPT", "split")
    client.close()
    bodies = [body for _, body in drain(server.port, "/queue/pipelined", 201)]
    assert bodies == [f"p{n}".encode() for n in range(200)] + [b"split body"]
    assert not has_traceback(server.stderr()), server.stderr()[-3000:]


def test_a_1_mib_body_and_a_binary_body_with_nuls(server):
    client = RawClient(server.port)
    client.connect()
    large = bytes(range(1, 256)) * (1024 * 1024 // 255 + 1)
    large = large[:1024 * 1024]
    binary = b"\x00\x01\x00\xff" * 1000 + b"\x00"
    for name, body in (("large", large), ("binary", binary)):
        client.send_raw(frame_bytes("SEND", {"destination": "/queue/bodies", "receipt": name}, body))
        command, headers, _ = client.read_frame()
        assert (command, headers["receipt-id"]) == ("RECEIPT", name)
    client.close()
    assert [body for _, body in drain(server.port, "/queue/bodies", 2)] == [large, binary]
    assert not has_traceback(server.stderr()), server.stderr()[-3000:]


def test_twenty_connections_at_once(server):
    per_connection = 200        # ~20 KiB a connection in one write: frames cross read boundaries
    failures: list = []

    def produce(number: int) -> None:
        try:
            client = RawClient(server.port)
            client.connect("1.2")
            client.send_raw(b"".join(frame_bytes("SEND", {"destination": "/queue/many", "receipt": f"{number}-{n}"},
                                                 f"{number}-{n}".encode().ljust(64, b".")) for n in range(per_connection)))
            receipts = [client.read_frame(WAIT_S)[1]["receipt-id"] for _ in range(per_connection)]
            assert receipts == [f"{number}-{n}" for n in range(per_connection)]
            client.close()
        except BaseException as error:          # noqa: BLE001 - reported by the main thread
            failures.append((number, error))

    threads = [threading.Thread(target=produce, args=(number,)) for number in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S * 2)
    assert not failures, failures
    bodies = sorted(body for _, body in drain(server.port, "/queue/many", 20 * per_connection))
    assert bodies == sorted(f"{number}-{n}".encode().ljust(64, b".") for number in range(20) for n in range(per_connection))
    assert not has_traceback(server.stderr()), server.stderr()[-3000:]


OVER_THE_CAP = (b"SEND\ndestination:/queue/errors\n\n" + b"x" * STOMP_FRAME_BYTES_MAX)

PROTOCOL_ERRORS = {
    "garbage": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\n\n\x00", "STOMP command"),
    "unknown command": (frame_bytes("FROBNICATE", {"receipt": "r"}), "unknown STOMP command"),
    "header without colon": (b"SEND\ndestination:/queue/errors\nno colon here\n\nbody\x00", "no colon"),
    "body longer than content-length": (b"SEND\ndestination:/queue/errors\ncontent-length:2\n\nlonger\x00",
                                        "content-length"),
    "frame over the size cap": (OVER_THE_CAP, "STOMP_FRAME_BYTES_MAX"),
    "content-length over the size cap": (f"SEND\ndestination:/queue/errors\ncontent-length:"
                                         f"{STOMP_FRAME_BYTES_MAX + 1}\n\n".encode(), "STOMP_FRAME_BYTES_MAX"),
}


@pytest.mark.parametrize("case", sorted(PROTOCOL_ERRORS))
def test_a_protocol_error_gets_an_error_frame_and_a_clean_close(server, case):
    data, said = PROTOCOL_ERRORS[case]
    bystander = RawClient(server.port)
    bystander.connect("1.1")
    client = RawClient(server.port)
    client.connect()
    client.send_raw(frame_bytes("SEND", {"destination": "/queue/errors", "receipt": "before"}, b"kept"))
    assert client.read_frame()[1]["receipt-id"] == "before"
    try:
        client.send_raw(data)
    except (BrokenPipeError, ConnectionResetError):
        pass                    # the server refused the frame before it was all written: read its ERROR
    command, headers, body = client.read_frame()
    assert command == "ERROR", (command, headers, body)
    assert said in headers["message"], headers
    assert client.closed_by_server()
    # the server goes on serving the other connection, and new ones
    bystander.send_raw(frame_bytes("SEND", {"destination": "/queue/errors", "receipt": "after"}, b"after"))
    assert bystander.read_frame()[1]["receipt-id"] == "after"
    bystander.close()
    assert [body for _, body in drain(server.port, "/queue/errors", 2)] == [b"kept", b"after"]
    assert not has_traceback(server.stderr()), server.stderr()[-3000:]


def test_an_error_frame_names_the_receipt_of_the_frame_it_refuses(server):
    client = RawClient(server.port)
    client.connect("1.2")
    client.send_raw(frame_bytes("SUBSCRIBE", {"destination": "/queue/x", "receipt": "sub-1"}))    # no id: 1.2 needs one
    command, headers, _ = client.read_frame()
    assert (command, headers.get("receipt-id")) == ("ERROR", "sub-1"), headers
    assert "id" in headers["message"]
    assert client.closed_by_server()
    assert not has_traceback(server.stderr()), server.stderr()[-3000:]


@pytest.mark.parametrize("backend", ["journal", "lmdb"])
def test_a_receipted_send_survives_a_sigkill_right_after_its_receipt(tmp_path, backend):
    """The RECEIPT waits for the group commit's fdatasync (the store's sync()); with --sync none the
    same run loses every message (they sit in the store's write buffer when the SIGKILL comes)."""
    data = tmp_path / "store"
    server = Server(data, tmp_path / "server.log", "--backend", backend)
    client = RawClient(server.port)
    client.connect("1.2")
    bodies = [f"durable {n}".encode() for n in range(20)]
    client.send_raw(b"".join(frame_bytes("SEND", {"destination": "/queue/durable", "receipt": f"d-{n}"}, body)
                             for n, body in enumerate(bodies)))
    assert [client.read_frame()[1]["receipt-id"] for _ in bodies] == [f"d-{n}" for n in range(len(bodies))]
    server.kill()               # at once: nothing after the last RECEIPT gets a chance to write
    client.close()
    restarted = Server(data, tmp_path / "server.log", "--backend", backend)
    try:
        assert [body for _, body in drain(restarted.port, "/queue/durable", len(bodies))] == bodies
        assert not has_traceback(restarted.stderr()), restarted.stderr()[-3000:]
    finally:
        restarted.stop()


def test_a_send_in_a_transaction_is_receipted_once_at_commit(server):
    """A SEND in a transaction is stored at COMMIT: its RECEIPT comes then, once (coilmq sent one when
    the frame was buffered and a second when COMMIT processed it); ABORT receipts what it drops."""
    client = RawClient(server.port)
    client.connect("1.1")
    client.send_raw(frame_bytes("BEGIN", {"transaction": "t1"}))
    client.send_raw(frame_bytes("SEND", {"destination": "/queue/tx", "transaction": "t1", "receipt": "in-t1"}, b"one"))
    with pytest.raises(TimeoutError):
        client.read_frame(0.5)                  # not stored yet: no receipt
    client.send_raw(frame_bytes("COMMIT", {"transaction": "t1", "receipt": "commit-t1"}))
    assert [client.read_frame()[1]["receipt-id"] for _ in range(2)] == ["in-t1", "commit-t1"]
    client.send_raw(frame_bytes("BEGIN", {"transaction": "t2"}))
    client.send_raw(frame_bytes("SEND", {"destination": "/queue/tx", "transaction": "t2", "receipt": "in-t2"}, b"two"))
    client.send_raw(frame_bytes("ABORT", {"transaction": "t2", "receipt": "abort-t2"}))
    assert [client.read_frame()[1]["receipt-id"] for _ in range(2)] == ["in-t2", "abort-t2"]
    with pytest.raises(TimeoutError):
        client.read_frame(0.5)                  # nothing twice
    client.close()
    assert [body for _, body in drain(server.port, "/queue/tx", 1)] == [b"one"]
    assert not has_traceback(server.stderr()), server.stderr()[-3000:]


def test_a_subscriber_that_stops_reading_for_a_while_gets_every_frame_whole(server):
    """Frames larger than the socket buffers to a subscriber that reads nothing for 2 s: the server's
    writes wait for it (they used to give up after the server's 0.5 s read timeout, mid-frame). The
    pause is 2 s from the first SEND however long the sends take: a loaded machine's slow sends must
    not stretch it past STOMP_WRITE_TIMEOUT_S, where the server rightly gives the connection up."""
    bodies = [bytes([n]) * (8 * 1024 * 1024) for n in range(1, 4)]
    client = RawClient(server.port)
    client.connect("1.1")
    client.send_raw(frame_bytes("SUBSCRIBE", {"destination": "/queue/slow", "id": "s", "ack": "auto",
                                              "receipt": "sub"}))
    assert client.read_frame()[1]["receipt-id"] == "sub"
    producer = RawClient(server.port)
    producer.connect()
    got: list = []

    def read_after_the_pause() -> None:
        time.sleep(2.0)
        try:
            got.extend(client.read_frame(WAIT_S) for _ in bodies)
        except Exception as exc:       # said by the assertion below
            got.append(exc)

    reader = threading.Thread(target=read_after_the_pause, name="slow-subscriber")
    reader.start()
    for n, body in enumerate(bodies):
        producer.send_raw(frame_bytes("SEND", {"destination": "/queue/slow", "receipt": f"big-{n}"}, body))
        assert producer.read_frame(WAIT_S)[1]["receipt-id"] == f"big-{n}"
    producer.close()
    reader.join(len(bodies) * WAIT_S + 5)
    assert not [item for item in got if isinstance(item, Exception)], got[-1]
    assert [(command, body) for command, _, body in got] == [("MESSAGE", body) for body in bodies]
    with pytest.raises(TimeoutError):
        client.read_frame(0.5)              # nothing delivered twice
    client.close()
    assert not has_traceback(server.stderr()), server.stderr()[-3000:]


def test_subscribers_vanishing_mid_delivery_lose_nothing_and_leave_no_traceback(server):
    """Topic and client-acknowledging queue subscribers reset their connections while MESSAGEs are
    being written to them: the server goes on, every queue message is still there, stderr is quiet
    (coilmq's topic manager logged a traceback for each write that failed)."""
    queue_bodies = []
    # a queue subscriber is handed the oldest message at its SUBSCRIBE, and its reset makes that a failed
    # delivery: the same message can fail once a round, so the rounds stay below the server's max
    # delivery attempts (10), past which it would be dead-lettered, which is not what this test is about
    for round_number in range(8):
        vanishing = []
        for number in range(4):
            client = RawClient(server.port)
            client.connect()
            destination, ack = ("/topic/vanish", "auto") if number % 2 else ("/queue/vanish", "client")
            client.send_raw(frame_bytes("SUBSCRIBE", {"destination": destination, "ack": ack, "receipt": "s"}))
            while client.read_frame()[0] != "RECEIPT":
                pass                            # a queue message left by the round before may come first
            vanishing.append(client)
        producer = RawClient(server.port)
        producer.connect()
        topic_burst = b"".join(frame_bytes("SEND", {"destination": "/topic/vanish"}, b"t" * 1000) for _ in range(300))
        bodies = [f"{round_number}-{n}".encode() for n in range(5)]
        queue_bodies += bodies
        producer.send_raw(topic_burst + b"".join(frame_bytes("SEND", {"destination": "/queue/vanish"}, body)
                                                 for body in bodies))
        for client in vanishing:
            client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()                      # a reset, with frames in flight to it
        producer.send_raw(topic_burst + frame_bytes("SEND", {"destination": "/queue/other", "receipt": "end"}))
        assert producer.read_frame(WAIT_S)[1]["receipt-id"] == "end"
        producer.close()
    drained = drain(server.port, "/queue/vanish", len(queue_bodies))
    assert sorted(body for _, body in drained) == sorted(queue_bodies)
    assert not has_traceback(server.stderr()), server.stderr()[-3000:]


def test_a_send_resent_with_its_duplicate_id_after_a_kill_is_delivered_once(tmp_path):
    """_AMQ_DUPL_ID is a property by its own name (Artemis maps STOMP headers to properties): a SEND
    resent after the server was killed, as a client does when its RECEIPT never came, is receipted and
    not routed again; the MESSAGE still carries the header."""
    data = tmp_path / "store"
    server = Server(data, tmp_path / "server.log")
    client = RawClient(server.port)
    client.connect("1.2")
    sends = b"".join(frame_bytes("SEND", {"destination": "/queue/once", "receipt": f"r-{n}", "_AMQ_DUPL_ID": f"id-{n}"},
                                 b"body %d" % n) for n in range(5))
    client.send_raw(sends)
    assert [client.read_frame()[1]["receipt-id"] for _ in range(5)] == [f"r-{n}" for n in range(5)]
    server.kill()
    client.close()
    restarted = Server(data, tmp_path / "server.log")
    try:
        again = RawClient(restarted.port)
        again.connect("1.2")
        again.send_raw(sends)
        assert [again.read_frame()[1]["receipt-id"] for _ in range(5)] == [f"r-{n}" for n in range(5)]
        again.close()
        messages = drain(restarted.port, "/queue/once", 5)
        assert [body for _, body in messages] == [b"body %d" % n for n in range(5)]
        assert [headers["_AMQ_DUPL_ID"] for headers, _ in messages] == [f"id-{n}" for n in range(5)]
        assert not has_traceback(restarted.stderr()), restarted.stderr()[-3000:]
    finally:
        restarted.stop()
