"""The journal-engine kombu transport between processes: `journal-engine serve-stomp` in a child
process, a consumer in another child process, this process as the producer.

What kombu's own suite (test_kombu_suite.py) runs in one process cannot show: the bindings a worker
declared route what another process publishes, a delivery a killed consumer held comes back from the
server (redelivered, its delivery count up), the server's redelivery delay and delivery limit apply
to reject(requeue=True), and the bindings outlive a server restart.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from locations import ROOT
from stomp_server import RawClient, Server, frame_bytes, has_traceback

kombu = pytest.importorskip("kombu", reason="kombu is not installed (pip install 'journal_engine[celery]')")
import journal_engine.integrations.kombu  # noqa: E402,F401  (registers the journal-engine scheme)
from journal_engine.errors import ConfigError, CorruptRecordError  # noqa: E402
from journal_engine.integrations.exchanges import EXCHANGES_FILE, ExchangeTable  # noqa: E402

READ_TIMEOUT_S = 30.0

# A consumer in a process of its own: declares exchange ORDERS (topic) and queue EU bound with
# "orders.eu.#", prints "ready", then for each message a JSON line (body, redelivered, delivery count),
# acknowledging it unless told to hold it (then it waits to be killed).
CONSUMER = """
import json, sys, time
import kombu
import journal_engine.integrations.kombu

url, hold = sys.argv[1], sys.argv[2] == "hold"
exchange = kombu.Exchange("orders", type="topic")
queue = kombu.Queue("eu", exchange=exchange, routing_key="orders.eu.#")

def received(body, message):
    info = message.delivery_info
    print(json.dumps([body, info["redelivered"], info["delivery_count"]]), flush=True)
    if hold:
        time.sleep(120)
    message.ack()

with kombu.Connection(url) as connection:
    with kombu.Consumer(connection, [queue], callbacks=[received], accept=["json"]):
        print("ready", flush=True)
        while True:
            try:
                connection.drain_events(timeout=1)
            except TimeoutError:
                pass
"""


class Consumer:
    def __init__(self, port: int, hold: bool) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        self.process = subprocess.Popen([sys.executable, "-c", CONSUMER, f"journal-engine://127.0.0.1:{port}",
                                         "hold" if hold else "ack"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        stdin=subprocess.DEVNULL, env=env)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        assert self.line() == "ready", self.stderr()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line.decode().strip())

    def line(self) -> str:
        try:
            return self.lines.get(timeout=READ_TIMEOUT_S)
        except queue.Empty:
            raise AssertionError(f"the consumer printed nothing within {READ_TIMEOUT_S} s: {self.stderr()}") from None

    def delivery(self) -> list:
        return json.loads(self.line())

    def stderr(self) -> str:
        if self.process.poll() is None:
            return "(running)"
        return self.process.stderr.read().decode(errors="replace")[-3000:]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


def url(server: Server) -> str:
    return f"journal-engine://127.0.0.1:{server.port}"


def publish(server: Server, body, routing_key: str) -> None:
    """To exchange "orders" from this process, which declares the exchange and nothing else."""
    with kombu.Connection(url(server)) as connection:
        producer = kombu.Producer(connection.default_channel, exchange=kombu.Exchange("orders", type="topic"))
        producer.publish(body, routing_key=routing_key, serializer="json")


def publish_numbered(server: Server, routing_key: str, count: int) -> None:
    """``{"n": 0}`` to ``{"n": count - 1}`` to the default exchange, one connection, released after."""
    with kombu.Connection(url(server)) as connection:
        producer = kombu.Producer(connection.default_channel)
        for index in range(count):
            producer.publish({"n": index}, routing_key=routing_key)


def test_bindings_declared_by_the_consumer_route_what_another_process_publishes(tmp_path):
    server = Server(tmp_path / "store", tmp_path / "server.log")
    consumer = Consumer(server.port, hold=False)
    try:
        publish(server, {"order": 1}, "orders.eu.paris")
        publish(server, {"order": 2}, "orders.us.boston")       # bound nowhere: dropped, as AMQP does
        publish(server, {"order": 3}, "orders.eu")
        assert consumer.delivery() == [{"order": 1}, False, 1]
        assert consumer.delivery() == [{"order": 3}, False, 1]
    finally:
        consumer.kill()
        server.stop()


def test_a_delivery_a_killed_consumer_held_comes_back_from_the_server_redelivered(tmp_path):
    server = Server(tmp_path / "store", tmp_path / "server.log")
    first = Consumer(server.port, hold=True)
    try:
        publish(server, {"order": 7}, "orders.eu.rome")
        assert first.delivery() == [{"order": 7}, False, 1]
        first.kill()                    # not acknowledged; no client of kombu's is left to restore it
        second = Consumer(server.port, hold=False)
        try:
            assert second.delivery() == [{"order": 7}, True, 2]
        finally:
            second.kill()
    finally:
        first.kill()
        server.stop()


def test_reject_with_requeue_is_a_failed_delivery_with_the_servers_delay_and_limit(tmp_path):
    delay_ms = 300
    server = Server(tmp_path / "store", tmp_path / "server.log", "--redelivery-delay-ms", str(delay_ms),
                    "--max-delivery-attempts", "2")
    try:
        with kombu.Connection(url(server)) as connection:
            work = connection.SimpleQueue("work")
            work.put({"job": 1})
            message = work.get(timeout=READ_TIMEOUT_S)
            assert (message.delivery_info["redelivered"], message.delivery_info["delivery_count"]) == (False, 1)
            rejected = time.monotonic()
            message.reject(requeue=True)
            with pytest.raises(work.Empty):
                work.get_nowait()       # held back by the redelivery delay
            message = work.get(timeout=READ_TIMEOUT_S)
            assert time.monotonic() - rejected >= delay_ms / 1000
            assert (message.delivery_info["redelivered"], message.delivery_info["delivery_count"]) == (True, 2)
            message.reject(requeue=True)        # the second failed delivery of two allowed: dead-lettered
            dead_letters = kombu.Queue("DLQ", no_declare=True)(connection.default_channel)
            dead = dead_letters.get()
            assert dead is not None and dead.payload == {"job": 1}
            assert dead.delivery_info["original_queue"] == "work"
            dead.ack()
            work.close()
    finally:
        server.stop()


def test_bindings_outlive_a_server_killed_and_restarted(tmp_path):
    server = Server(tmp_path / "store", tmp_path / "server.log")
    with kombu.Connection(url(server)) as connection:
        kombu.Queue("eu", exchange=kombu.Exchange("orders", type="topic"),
                    routing_key="orders.eu.#")(connection.default_channel).declare()
    server.kill()
    server = Server(tmp_path / "store", tmp_path / "server-2.log")
    try:
        publish(server, {"order": 9}, "orders.eu.oslo")
        with kombu.Connection(url(server)) as connection:
            message = kombu.Queue("eu", no_declare=True)(connection.default_channel).get()
            assert message is not None and message.payload == {"order": 9}
            message.ack()
    finally:
        server.stop()


def test_a_request_serve_stomp_does_not_know_gets_an_error_frame_and_no_traceback(tmp_path):
    server = Server(tmp_path / "store", tmp_path / "server.log")
    try:
        client = RawClient(server.port)
        client.connect("1.1")
        client.send_raw(frame_bytes("SEND", {"destination": "/journal-engine/rename-queue", "receipt": "r"}))
        command, headers, _ = client.read_frame()
        assert command == "ERROR" and "no such request of serve-stomp" in headers["message"], headers
        client.send_raw(frame_bytes("SEND", {"destination": "/journal-engine/bind", "exchange": "nowhere",
                                             "routing-key": "k", "queue": "/queue/q", "receipt": "r"}))
        assert client.closed_by_server()
        assert not has_traceback(server.stderr()), server.stderr()[-3000:]
    finally:
        server.stop()


def test_a_request_the_server_refuses_is_a_channel_error_and_the_connection_comes_back(tmp_path):
    """A channel error, not a connection error: kombu retries those, and the request would be refused
    again (it looped, reconnecting, on an exchange of type headers)."""
    server = Server(tmp_path / "store", tmp_path / "server.log")
    try:
        with kombu.Connection(url(server)) as connection:
            with pytest.raises(kombu.exceptions.ChannelError, match="serve-stomp routes direct, topic, fanout"):
                kombu.Exchange("by-headers", type="headers")(connection.default_channel).declare()
            connection.ensure_connection(max_retries=3)
            work = connection.SimpleQueue("work")
            work.put({"job": 1})
            work.get(timeout=READ_TIMEOUT_S).ack()
            work.close()
    finally:
        server.stop()


def test_consuming_with_acknowledgements_is_not_held_up_by_delayed_tcp_acknowledgements(tmp_path):
    """The server answers an ACK with the next MESSAGE, then the ACK's RECEIPT: two writes back to back,
    of which Nagle's algorithm held the second until the client's delayed TCP acknowledgement of the
    first, 40 ms later (50 messages took 2.2 s; now about 0.05 s). The bound leaves a wide margin."""
    count = 50
    server = Server(tmp_path / "store", tmp_path / "server.log")
    try:
        with kombu.Connection(url(server)) as connection:
            work = connection.SimpleQueue("work")
            for index in range(count):
                work.put({"job": index})
            started = time.monotonic()
            for index in range(count):
                message = work.get(timeout=READ_TIMEOUT_S)
                assert message.payload == {"job": index}
                message.ack()
            elapsed_s = time.monotonic() - started
            work.close()
        print(f"{count} messages consumed and acknowledged in {elapsed_s:.3f} s")
        assert elapsed_s < 1.0, elapsed_s
    finally:
        server.stop()


def test_a_server_that_is_not_there_is_said_with_the_reason_and_nothing_else(capfd):
    """The message gave no reason ("... at 127.0.0.1:P (); ..."), and stomp.py printed its own lines
    about each attempt to stderr beside it (issue 40, point 7)."""
    import socket
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]          # closed again: nothing listens there
    with pytest.raises(ConnectionError) as refused:
        with kombu.Connection(f"journal-engine://127.0.0.1:{port}", connect_timeout=2) as connection:
            connection.connect()
    assert f"127.0.0.1:{port}: Connection refused;" in str(refused.value), refused.value
    assert "()" not in str(refused.value)
    assert capfd.readouterr().err == ""


# ------------------------------------------------------------------ the exchange table alone
def test_the_exchange_table_routes_as_amqp(tmp_path):
    table = ExchangeTable(str(tmp_path))
    table.declare("direct", "direct")
    table.declare("topic", "topic")
    table.declare("fanout", "fanout")
    table.bind("direct", "d1", "/queue/a")
    table.bind("direct", "d1", "/queue/a")      # the same binding twice is one
    table.bind("direct", "d2", "/queue/b")
    table.bind("topic", "t.*", "/queue/a")
    table.bind("topic", "t.#", "/queue/b")
    table.bind("topic", "t", "/queue/c")
    table.bind("fanout", "", "/queue/a")
    table.bind("fanout", "anything", "/queue/b")
    assert table.route("direct", "d1") == ["/queue/a"]
    assert table.route("direct", "d3") == []
    assert table.route("topic", "t.1") == ["/queue/a", "/queue/b"]
    assert table.route("topic", "t.1.2") == ["/queue/b"]
    assert table.route("topic", "t") == ["/queue/b", "/queue/c"]
    assert table.route("fanout", "x") == ["/queue/a", "/queue/b"]
    assert table.route("undeclared", "x") == []
    table.unbind_destination("/queue/a")
    assert ExchangeTable(str(tmp_path)).route("fanout", "x") == ["/queue/b"]   # kept on disk


def test_the_exchange_table_refuses_what_amqp_refuses(tmp_path):
    table = ExchangeTable(str(tmp_path))
    table.declare("orders", "direct")
    with pytest.raises(ConfigError, match="exists with type 'direct'"):
        table.declare("orders", "fanout")
    with pytest.raises(ConfigError, match="serve-stomp routes direct, topic, fanout"):
        table.declare("headers", "headers")
    with pytest.raises(ConfigError, match="no such exchange"):
        table.bind("missing", "k", "/queue/a")


def test_a_damaged_exchange_table_is_refused_naming_its_path(tmp_path):
    Path(tmp_path, EXCHANGES_FILE).write_text('{"orders": {"type": "headers", "bindings": []}}')
    with pytest.raises(CorruptRecordError, match=EXCHANGES_FILE) as raised:
        ExchangeTable(str(tmp_path))
    assert raised.value.hint


# ------------------------------------------------------------------ confirmations and prefetch
class SilentServer:
    """A STOMP server that answers CONNECT and then reads every frame and answers none: no RECEIPT
    ever comes. ``frames()`` lists the commands read and whether each asked for a receipt;
    ``drop()`` closes the connection, as a server that dies does."""

    def __init__(self) -> None:
        import socket
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._read = b""
        self._connection = None
        self._accepted = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self._connection, _ = self._listener.accept()
        self._accepted.set()
        while True:
            try:
                data = self._connection.recv(65536)
            except OSError:
                return
            if not data:
                return
            if not self._read:
                self._connection.sendall(b"CONNECTED\nversion:1.1\n\n\x00")
            self._read += data

    def frames(self) -> list[tuple[str, bool]]:
        frames = [frame.lstrip(b"\n") for frame in self._read.split(b"\x00")[1:-1]]   # less the CONNECT
        return [(frame.split(b"\n", 1)[0].decode(), b"\nreceipt:" in frame) for frame in frames]

    def drop(self) -> None:
        import socket
        self._accepted.wait(READ_TIMEOUT_S)
        self._connection.shutdown(socket.SHUT_RDWR)     # the FIN now (a close alone waits for the reading thread)
        self._connection.close()
        self._listener.close()


def test_a_publish_returns_before_its_receipt_and_a_lost_one_is_raised_by_the_next_call():
    """publish_window=3: two publishes return with no RECEIPT come (the first asked for one, the second
    did not: one awaited receipt covers both); the connection lost, the next publish raises
    UnconfirmedPublishError naming them, not a connection error kombu would retry (a retry would
    send only the publish at hand)."""
    from journal_engine.integrations.kombu import UnconfirmedPublishError
    silent = SilentServer()
    connection = kombu.Connection(f"journal-engine://127.0.0.1:{silent.port}", transport_options={"publish_window": 3})
    producer = kombu.Producer(connection.default_channel)
    started = time.monotonic()
    producer.publish({"n": 1}, routing_key="work", correlation_id="first")
    producer.publish({"n": 2}, routing_key="work", correlation_id="second")
    assert time.monotonic() - started < 5.0
    deadline = time.monotonic() + READ_TIMEOUT_S
    while len(silent.frames()) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert silent.frames() == [("SEND", True), ("SEND", False)]
    silent.drop()
    with pytest.raises(UnconfirmedPublishError, match=r"publish\(es\) not confirmed durable") as raised:
        producer.publish({"n": 3}, routing_key="work", correlation_id="third")
    # the third is named too when it was written before the loss was seen (it filled the window, and
    # its wait for the RECEIPT found the connection's end); else it was not sent
    assert raised.value.unconfirmed in (["(default)/work (first)", "(default)/work (second)"],
                                        ["(default)/work (first)", "(default)/work (second)", "(default)/work (third)"])
    assert not isinstance(raised.value, ConnectionError)
    connection.collect()


def test_a_connection_released_with_publishes_unconfirmed_raises_them():
    """kombu closes a connection's default channel ignoring its errors: the release raises them."""
    from journal_engine.integrations.kombu import UnconfirmedPublishError
    silent = SilentServer()
    connection = kombu.Connection(f"journal-engine://127.0.0.1:{silent.port}")
    kombu.Producer(connection.default_channel).publish({"n": 1}, routing_key="work", correlation_id="only")
    deadline = time.monotonic() + READ_TIMEOUT_S
    while not silent.frames() and time.monotonic() < deadline:
        time.sleep(0.01)
    silent.drop()
    with pytest.raises(UnconfirmedPublishError, match=r"1 publish\(es\)") as raised:
        connection.release()
    assert raised.value.unconfirmed == ["(default)/work (only)"]


def test_publish_window_one_waits_for_each_receipt():
    """publish_window=1: each publish asks for its RECEIPT and waits for it, as before the window; the
    connection lost while it waits, it raises UnconfirmedPublishError."""
    from journal_engine.integrations.kombu import UnconfirmedPublishError
    silent = SilentServer()
    connection = kombu.Connection(f"journal-engine://127.0.0.1:{silent.port}", transport_options={"publish_window": 1})
    producer = kombu.Producer(connection.default_channel)
    raised: queue.Queue = queue.Queue()

    def publish() -> None:
        try:
            producer.publish({"n": 1}, routing_key="work", correlation_id="waited")
            raised.put(None)
        except Exception as error:      # noqa: BLE001  (handed to the test's thread)
            raised.put(error)

    threading.Thread(target=publish, daemon=True).start()
    with pytest.raises(queue.Empty):
        raised.get(timeout=0.5)         # no RECEIPT: it waits
    silent.drop()
    error = raised.get(timeout=READ_TIMEOUT_S)
    assert isinstance(error, UnconfirmedPublishError) and error.unconfirmed == ["(default)/work (waited)"], error
    connection.collect()
    listening = SilentServer()
    with pytest.raises(ValueError, match="publish_window must be a whole number of at least 1"):
        kombu.Connection(f"journal-engine://127.0.0.1:{listening.port}",
                         transport_options={"publish_window": 0}).connect()
    listening.drop()


def test_publishes_are_confirmed_before_the_connection_closes_and_all_arrive(tmp_path):
    """200 publishes pipelined, the connection released: every one is in the queue afterwards."""
    server = Server(tmp_path / "store", tmp_path / "server.log")
    try:
        publish_numbered(server, "many", 200)
        with kombu.Connection(url(server)) as connection:
            assert connection.default_channel.queue_declare("many", passive=True).message_count == 200
    finally:
        server.stop()


def test_the_prefetch_count_is_what_the_server_hands_a_consumer_before_its_acks(tmp_path):
    """basic_qos(prefetch_count=3): the server hands the consumer three messages unacknowledged and
    keeps the rest for any consumer. A new count while consuming subscribes again with it: that many
    more come, beside the three the replaced subscription holds until they are settled."""
    server = Server(tmp_path / "store", tmp_path / "server.log")
    try:
        publish_numbered(server, "prefetched", 10)
        with kombu.Connection(url(server)) as first, kombu.Connection(url(server)) as second:
            held = []
            channel = first.channel()
            channel.basic_qos(0, 3, False)
            consumer = kombu.Consumer(channel, [kombu.Queue("prefetched")], callbacks=[lambda body, m: held.append(m)])
            consumer.consume()
            deadline = time.monotonic() + READ_TIMEOUT_S
            while len(held) < 3 and time.monotonic() < deadline:
                try:
                    first.drain_events(timeout=0.2)
                except TimeoutError:
                    pass
            with pytest.raises(TimeoutError):
                first.drain_events(timeout=0.3)         # three held, none acknowledged: no fourth
            assert [message.payload["n"] for message in held] == [0, 1, 2]
            taken = kombu.Queue("prefetched", no_declare=True)(second.default_channel).get()
            assert taken is not None and taken.payload == {"n": 3}     # not held by the first consumer
            taken.ack()
            channel.basic_qos(0, 5, False)              # five more for the first consumer
            while len(held) < 8 and time.monotonic() < deadline:
                try:
                    first.drain_events(timeout=0.2)
                except TimeoutError:
                    pass
            assert [message.payload["n"] for message in held] == [0, 1, 2, 4, 5, 6, 7, 8]
            for message in held:
                message.ack()
            consumer.cancel()
            channel.close()
        with kombu.Connection(url(server)) as connection:
            # 10 published, 9 acknowledged
            assert connection.default_channel.queue_declare("prefetched", passive=True).message_count == 1
    finally:
        server.stop()


def test_a_wait_for_messages_ends_at_once_when_a_celery_worker_stops(tmp_path):
    """Celery's blocking loop (eventlet, gevent) calls drain_events(timeout=2.0), and once more after
    it decided to stop: the transport's receiver of Celery's worker_shutting_down ends such a wait at
    once, and later ones within a few hundredths of a second."""
    from journal_engine.integrations.kombu import _stop_waiting
    server = Server(tmp_path / "store", tmp_path / "server.log")
    try:
        with kombu.Connection(url(server)) as connection:
            consumer = kombu.Consumer(connection.default_channel, [kombu.Queue("idle")], callbacks=[])
            consumer.consume()
            ended = queue.Queue()

            def drain() -> None:
                started = time.monotonic()
                try:
                    connection.drain_events(timeout=20)
                except TimeoutError:
                    ended.put(time.monotonic() - started)

            threading.Thread(target=drain, daemon=True).start()
            time.sleep(0.3)                     # waiting in select
            _stop_waiting()
            assert ended.get(timeout=READ_TIMEOUT_S) < 5.0
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                connection.drain_events(timeout=20)
            assert time.monotonic() - started < 5.0
            consumer.cancel()
    finally:
        server.stop()


# A producer that publishes and exits without releasing its connection (as Celery's producer pool
# keeps one): the transport confirms its publishes at the interpreter's exit.
EXITING_PRODUCER = """
import sys, kombu
import journal_engine.integrations.kombu
connection = kombu.Connection(sys.argv[1])
kombu.Producer(connection.default_channel).publish({"n": 1}, routing_key="at-exit", correlation_id="last")
print("published", flush=True)
"""


def run_exiting_producer(port: int, during=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    child = subprocess.Popen([sys.executable, "-c", EXITING_PRODUCER, f"journal-engine://127.0.0.1:{port}"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
    assert child.stdout.readline().strip() == b"published"
    if during is not None:
        during()
    out, err = child.communicate(timeout=READ_TIMEOUT_S * 3)
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


def test_a_producer_exiting_without_a_release_has_its_publishes_confirmed_or_said(tmp_path):
    server = Server(tmp_path / "store", tmp_path / "server.log")
    try:
        done = run_exiting_producer(server.port)
        assert done.returncode == 0 and done.stderr == b"", done.stderr
        with kombu.Connection(url(server)) as connection:
            assert connection.default_channel.queue_declare("at-exit", passive=True).message_count == 1
    finally:
        server.stop()
    silent = SilentServer()
    done = run_exiting_producer(silent.port, during=silent.drop)     # lost before any RECEIPT
    assert b"1 publish(es) not confirmed durable" in done.stderr and b"at-exit (last)" in done.stderr, done.stderr


def test_a_message_published_again_with_its_id_is_on_the_server_once(tmp_path):
    """The transport sends each publish's stable id as _AMQ_DUPL_ID (the application's message_id, or a
    Celery task's id and retry count), so a publish repeated after a lost RECEIPT is not delivered
    twice, while another message or a task's retry is."""
    server = Server(tmp_path / "store", tmp_path / "server.log")
    try:
        with kombu.Connection(url(server)) as connection:
            producer = kombu.Producer(connection.default_channel)
            for _ in range(3):
                producer.publish({"n": 1}, routing_key="once", message_id="order-1")
            producer.publish({"n": 2}, routing_key="once", message_id="order-2")
            producer.publish({"n": 3}, routing_key="once")
            producer.publish({"n": 3}, routing_key="once")
            task = {"id": "task-7", "task": "tasks.add", "retries": 0}
            producer.publish({"n": 4}, routing_key="once", headers=task)
            producer.publish({"n": 4}, routing_key="once", headers=task)
            producer.publish({"n": 5}, routing_key="once", headers=dict(task, retries=1))
        with kombu.Connection(url(server)) as connection:
            assert connection.default_channel.queue_declare("once", passive=True).message_count == 6
    finally:
        server.stop()
