"""`serve-stomp --backup`: a backup on the live server's directory waits for its lock, and takes over
when the live server is SIGKILLed (docs/failover.md). Real processes, real SIGKILLs:

* under load (``JOURNAL_ENGINE_FAILOVER_CLIENTS`` connections, half producing with receipts, half
  consuming with receipted ACKs, each with both ports as its failover list) the live server is
  SIGKILLed ``JOURNAL_ENGINE_FAILOVER_KILLS`` times in a row, a new backup started on the freed port
  after each takeover: nothing receipted is lost, nothing whose ACK was receipted comes again, the load
  goes on after every takeover, and no life prints a traceback. Default: the issue's 20 kills and 32
  clients. Each SEND carries a duplicate id, and a producer sends again the one a kill left without
  its RECEIPT: no message comes twice except as a flagged redelivery;
* the waiting backup names the holder, binds no port, and a SIGTERM ends it with status 0;
* refusals: a backup on a missing directory, a second live server on a served directory;
* the same takeover on the LMDB backend;
* stomp.py's own host list with reconnect, kombu's failover URL, and a Celery worker on a broker URL
  list (a task sent before a kill runs after the takeover) go on after a kill.

That the load check can fail: tests/integrations/test_serve_stomp_load.py shows it reporting the
messages a server that receipts from memory loses at a SIGKILL.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest
from failover_pair import LISTENING, WAITING, FailoverPair, ServeStomp
from locations import ROOT
from stomp_load import run_load
from stomp_server import RawClient

KILLS = int(os.environ.get("JOURNAL_ENGINE_FAILOVER_KILLS", "20"))
CLIENTS = int(os.environ.get("JOURNAL_ENGINE_FAILOVER_CLIENTS", "32"))
LOAD_BETWEEN_KILLS_S = 0.5
WAIT_S = 30.0


def test_a_backup_takes_over_kill_after_kill_and_nothing_receipted_is_lost(tmp_path):
    """With duplicate ids on: a producer sends the SEND a kill left without its RECEIPT again, and no
    message comes twice except as a flagged redelivery (the server refused each resent copy)."""
    pair = FailoverPair(tmp_path / "store", tmp_path)
    try:
        result = run_load(pair.ports[0], connections=CLIENTS, duration_s=LOAD_BETWEEN_KILLS_S * (KILLS + 1),
                          kill=pair.kill, kills=KILLS, failover_ports=pair.ports, duplicate_ids=True)
    finally:
        statuses = pair.stop()
    print(result.summary(), f"takeovers (s): {[round(took, 2) for took in pair.takeovers_s]}")
    assert not result.violations(), (result.summary(), result.violations())
    assert result.resent > 0, "no kill left a SEND without its RECEIPT: the resends went untested"
    assert len(pair.takeovers_s) == KILLS
    receipted_at_kills = [receipted for receipted, _ in result.at_kills] + [len(result.receipted)]
    # the load went on after every takeover: more receipted before each next kill (and the end)
    assert all(before < after for before, after in zip(receipted_at_kills, receipted_at_kills[1:])), result.at_kills
    assert any(backlog > 0 for _, backlog in result.at_kills), result.at_kills     # the store alone held some
    assert not pair.tracebacks(), pair.tracebacks()
    assert statuses == (0, 0)                  # SIGTERM: the live server stops cleanly, the waiting backup too


def test_the_waiting_backup_names_the_holder_binds_nothing_and_stops_on_sigterm(tmp_path):
    pair = FailoverPair(tmp_path / "store", tmp_path)
    try:
        assert f"{WAITING}{tmp_path / 'store'}, held by pid {pair.live.process.pid} on {socket.gethostname()}" \
            in pair.waiting_line, pair.waiting_line
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", pair.backup.port), timeout=WAIT_S).close()
        assert pair.backup.stop() == 0
        assert pair.backup.lines.get(timeout=WAIT_S) == ""          # nothing more printed: it never served
        RawClient(pair.live.port).connect("1.2")                    # the live server did not notice
    finally:
        assert pair.live.stop() == 0


def test_a_backup_with_no_live_server_serves_at_once(tmp_path):
    (tmp_path / "store").mkdir()
    backup = ServeStomp(tmp_path / "store", tmp_path / "backup.log", 0, "--backup")
    try:
        assert LISTENING in backup.line(), backup.stderr()
    finally:
        assert backup.stop() == 0


def run_cli(*arguments: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "journal_engine", "serve-stomp", "--port", "0", *arguments],
                          capture_output=True, text=True, env=env, timeout=WAIT_S, stdin=subprocess.DEVNULL)


def test_a_backup_of_a_missing_directory_is_refused_and_creates_nothing(tmp_path):
    done = run_cli("--data", str(tmp_path / "absent"), "--backup")
    assert done.returncode == 2, done
    assert "does not exist: a backup waits for the store of a live server" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "absent").exists()


def test_a_second_live_server_is_refused_naming_the_holder(tmp_path):
    pair = FailoverPair(tmp_path / "store", tmp_path)
    try:
        done = run_cli("--data", str(tmp_path / "store"))
        assert done.returncode == 4, done
        assert f"is served by another serve-stomp (pid {pair.live.process.pid} on" in done.stderr, done.stderr
        assert "--backup" in done.stderr and "Traceback" not in done.stderr
    finally:
        assert pair.stop() == (0, 0)


def send_receipted(port: int, destination: str, bodies: list[bytes]) -> None:
    client = RawClient(port)
    client.connect("1.2")
    for index, body in enumerate(bodies):
        client.send_raw(frame_bytes_send(destination, body, f"r{index}"))
        command, headers, _ = client.read_frame(WAIT_S)
        assert (command, headers.get("receipt-id")) == ("RECEIPT", f"r{index}"), (command, headers)
    client.close()


def frame_bytes_send(destination: str, body: bytes, receipt: str) -> bytes:
    from stomp_server import frame_bytes
    return frame_bytes("SEND", {"destination": destination, "receipt": receipt}, body)


def received_bodies(port: int, destination: str, count: int) -> list[bytes]:
    from stomp_server import frame_bytes
    client = RawClient(port)
    client.connect("1.2")
    client.send_raw(frame_bytes("SUBSCRIBE", {"destination": destination, "id": "s", "ack": "auto"}))
    bodies = []
    for _ in range(count):
        command, _, body = client.read_frame(WAIT_S)
        assert command == "MESSAGE", command
        bodies.append(body)
    client.close()
    return bodies


def test_an_lmdb_store_is_taken_over_too(tmp_path):
    pytest.importorskip("lmdb", reason="the lmdb package is not installed")
    pair = FailoverPair(tmp_path / "store", tmp_path, "--backend", "lmdb")
    try:
        bodies = [f"m{index}".encode() for index in range(50)]
        send_receipted(pair.live.port, "/queue/lmdb", bodies)
        port = pair.kill()
        assert received_bodies(port, "/queue/lmdb", len(bodies)) == bodies
        assert not pair.tracebacks(), pair.tracebacks()
    finally:
        assert pair.stop() == (0, 0)


def test_stomp_py_with_its_host_list_goes_on_after_the_kill(tmp_path):
    stomp = pytest.importorskip("stomp", reason="stomp.py is not installed (pip install 'journal_engine[coilmq]')")
    pair = FailoverPair(tmp_path / "store", tmp_path)
    received: list[bytes] = []
    arrived = threading.Condition()

    class Listener(stomp.ConnectionListener):
        def on_message(self, frame) -> None:
            with arrived:
                received.append(frame.body if isinstance(frame.body, bytes) else frame.body.encode())
                arrived.notify_all()

    hosts = [("127.0.0.1", port) for port in pair.ports]
    connection = stomp.Connection(hosts, reconnect_attempts_max=200, reconnect_sleep_initial=0.05,
                                  reconnect_sleep_increase=0.0, reconnect_sleep_max=0.2, auto_decode=False)
    connection.set_listener("", Listener())
    try:
        connection.connect(wait=True)
        connection.subscribe("/queue/py", id="s", ack="auto")
        connection.send("/queue/py", b"before", receipt="before")
        with arrived:
            assert arrived.wait_for(lambda: b"before" in received, timeout=WAIT_S), received
        pair.kill()
        # stomp.py reconnects on its own, down its host list; a SEND on the dead socket is refused, so the
        # client connects again and subscribes again (stomp.py keeps no subscriptions across reconnects)
        connection.connect(wait=True)
        connection.subscribe("/queue/py", id="s", ack="auto")
        connection.send("/queue/py", b"after", receipt="after")
        with arrived:
            assert arrived.wait_for(lambda: b"after" in received, timeout=WAIT_S), received
        assert connection.transport.current_host_and_port == ("127.0.0.1", pair.live.port)
        assert received == [b"before", b"after"]
    finally:
        connection.disconnect()
        assert pair.stop() == (0, 0)


def test_kombu_fails_over_through_its_url_list(tmp_path):
    kombu = pytest.importorskip("kombu", reason="kombu is not installed (pip install 'journal_engine[kombu]')")
    import journal_engine.integrations.kombu  # noqa: F401  (registers the journal-engine scheme)

    pair = FailoverPair(tmp_path / "store", tmp_path)
    url = ";".join(f"journal-engine://127.0.0.1:{port}" for port in pair.ports)
    try:
        # publish_window=1: publish returns once receipted, so "before" is on disk when the kill comes
        with kombu.Connection(url, failover_strategy="round-robin",
                              transport_options={"publish_window": 1}) as connection:
            queue = kombu.Queue("work", routing_key="work")
            producer = connection.Producer()
            publish = connection.ensure(producer, producer.publish, max_retries=50, interval_start=0.05,
                                        interval_step=0.05, interval_max=0.2)
            publish("before", routing_key="work", declare=[queue])
            pair.kill()
            publish("after", routing_key="work", declare=[queue])
            assert connection.as_uri().endswith(f":{pair.live.port}//"), connection.as_uri()
            got = []
            with connection.Consumer([queue], callbacks=[lambda body, message: (got.append(body), message.ack())]):
                while len(got) < 2:
                    connection.drain_events(timeout=WAIT_S)
            assert sorted(got) == ["after", "before"], got
        assert not pair.tracebacks(), pair.tracebacks()
    finally:
        assert pair.stop() == (0, 0)


def test_celery_with_a_broker_url_list_runs_tasks_sent_before_and_after_takeovers(tmp_path):
    pytest.importorskip("celery", reason="celery is not installed (pip install 'journal_engine[celery]')")
    from celery_app import app, work
    from test_celery_worker import Worker, runs_of, wait_for

    pair = FailoverPair(tmp_path / "store", tmp_path)
    url = ";".join(f"journal-engine://127.0.0.1:{port}" for port in pair.ports)
    runs = tmp_path / "runs"
    worker = None

    def send(key: str) -> None:
        with app.connection_for_write(url) as connection:
            work.apply_async((key,), connection=connection, retry=True,
                             retry_policy={"max_retries": 50, "interval_start": 0.05, "interval_step": 0.05,
                                           "interval_max": 0.2})

    try:
        send("before-kill")                     # to the live server, no worker yet
        pair.kill()
        worker = Worker(0, runs, tmp_path / "worker.log", "failover", broker_url=url)
        wait_for(lambda: ("work", "before-kill", False) in runs_of(runs), "the task sent before the kill", worker)
        pair.kill()                             # now under the running worker: it moves down its URL list
        send("after-second-kill")
        wait_for(lambda: ("work", "after-second-kill", False) in runs_of(runs), "the task sent after", worker)
        assert [key for _, key, _ in runs_of(runs)] == ["before-kill", "after-second-kill"]
        assert not pair.tracebacks(), pair.tracebacks()
    finally:
        if worker is not None:
            worker.stop()
        assert pair.stop() == (0, 0)
