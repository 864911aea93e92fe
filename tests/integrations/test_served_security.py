"""`journal-engine serve-stomp` as a network service (issue 40, point 5), driven the way users do:
the command in a child process, clients on loopback sockets (raw, over TLS, stomp.py).

* it binds 127.0.0.1 unless told otherwise; a bind beyond loopback without --users is refused at
  start (exit status 2, naming the flag, nothing created) unless --allow-anonymous;
* `journal-engine users add` writes a 0600 users file of salted scrypt hashes, reading the password
  from stdin, refusing a login already there unless --replace;
* with --users a CONNECT needs a matching login and passcode; a failed one gets an ERROR saying the
  login failed (not which part) and is closed SERVED_LOGIN_FAILURE_DELAY_S later, while other
  connections go on;
* TLS with --tls-cert/--tls-key (a self-signed certificate made here); an unreadable file is named;
* a connection past --connections-max gets an ERROR naming SERVED_CONNECTIONS_MAX.

(Subscriptions per connection and unacknowledged messages per subscription are bounded by
SERVED_SUBSCRIPTIONS_PER_CONNECTION_MAX and the prefetch, SERVED_PREFETCH_MAX: test_served_broker.py.)
"""
from __future__ import annotations

import os
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import time

import pytest
from locations import ROOT
from stomp_server import START_TIMEOUT_S, RawClient, Server, frame_bytes, has_traceback
from tls_certificate import self_signed

from journal_engine.limits import SERVED_CONNECTIONS_MAX, SERVED_LOGIN_FAILURE_DELAY_S
from journal_engine.served.server import check_exposure, is_loopback
from journal_engine.served.users import Users

WAIT_S = 10.0
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def command(*arguments: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "journal_engine", *arguments], input=stdin, capture_output=True,
                          text=True, env=ENV, cwd=str(ROOT), timeout=START_TIMEOUT_S)


def add_user(path, login: str, password: str, *extra: str) -> subprocess.CompletedProcess:
    return command("users", "add", str(path), login, *extra, stdin=password + "\n")


@pytest.fixture(scope="module")
def made_users_file(tmp_path_factory):
    """Written once by the tool (each `users add` is a child process): the tests take copies."""
    path = tmp_path_factory.mktemp("users") / "users"
    assert add_user(path, "alice", "wonder land").returncode == 0
    assert add_user(path, "bob", "builder").returncode == 0
    return path


@pytest.fixture
def users_file(tmp_path, made_users_file):
    path = tmp_path / "users"
    shutil.copy2(made_users_file, path)         # its mode too
    return path


def stopped_clean(server: Server) -> None:
    assert not has_traceback(server.stderr()), server.stderr()[-3000:]
    assert server.stop() == 0


def connect_frame(login: str | None, passcode: str | None) -> bytes:
    headers = {"accept-version": "1.2", "host": "127.0.0.1"}
    if login is not None:
        headers["login"] = login
    if passcode is not None:
        headers["passcode"] = passcode
    return frame_bytes("CONNECT", headers, content_length=False)


# ---------------------------------------------------------------------------------------- where it listens
def test_serve_stomp_binds_loopback_by_default(tmp_path):
    process = subprocess.Popen([sys.executable, "-m", "journal_engine", "serve-stomp", "--data", str(tmp_path / "d"),
                                "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=ENV,
                               cwd=str(ROOT))
    try:
        line = process.stdout.readline().decode()
        assert "listening on 127.0.0.1:" in line, line
    finally:
        process.terminate()
        assert process.wait(timeout=START_TIMEOUT_S) == 0


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.1", "example.org"])
def test_a_bind_beyond_loopback_without_users_is_refused_and_creates_nothing(tmp_path, host):
    data = tmp_path / "store"
    done = command("serve-stomp", "--data", str(data), "--port", "0", "--host", host)
    assert done.returncode == 2, done
    assert "--users" in done.stderr and "--allow-anonymous" in done.stderr and "Traceback" not in done.stderr
    assert not data.exists()


def test_allow_anonymous_and_users_each_let_a_bind_beyond_loopback_pass_the_check(tmp_path):
    # the check alone: nothing binds an address beyond loopback in the tests
    check_exposure("0.0.0.0", None, True)
    check_exposure("0.0.0.0", tmp_path / "users", False)
    for host in ("127.0.0.1", "127.3.2.1", "::1", "localhost"):
        assert is_loopback(host)
        check_exposure(host, None, False)


# ---------------------------------------------------------------------------------------- the users tool
def test_users_add_writes_a_private_file_of_salted_scrypt_hashes(made_users_file):
    users_file = made_users_file
    assert stat.S_IMODE(users_file.stat().st_mode) == 0o600
    lines = users_file.read_text().splitlines()
    assert [line.split(":")[:3] for line in lines] == [["alice", "scrypt", "16384,8,1"], ["bob", "scrypt", "16384,8,1"]]
    assert "wonder" not in users_file.read_text()
    users = Users.read(users_file)
    assert users.check("alice", "wonder land") and users.check("bob", "builder")
    assert not users.check("alice", "builder") and not users.check("carol", "builder") and not users.check("bob", None)
    assert os.listdir(users_file.parent) == ["users"]      # no temporary file left


def test_users_add_refuses_a_login_already_there_unless_replace(users_file):
    before = users_file.read_text()
    refused = add_user(users_file, "alice", "other")
    assert refused.returncode == 2 and "--replace" in refused.stderr, refused
    assert users_file.read_text() == before
    assert add_user(users_file, "alice", "other", "--replace").returncode == 0
    users = Users.read(users_file)
    assert users.check("alice", "other") and not users.check("alice", "wonder land") and len(users) == 2


def test_a_users_file_with_a_broken_line_is_refused_at_start_naming_the_line(tmp_path, users_file):
    users_file.write_text(users_file.read_text() + "carol:md5:x\n")
    done = command("serve-stomp", "--data", str(tmp_path / "store"), "--port", "0", "--users", str(users_file))
    assert done.returncode == 2 and "line 3" in done.stderr, done
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("option, value", [("--users", "no-such-users-file"), ("--connections-max", "0"),
                                           ("--connections-max", str(SERVED_CONNECTIONS_MAX + 1))])
def test_a_bad_security_option_is_refused_at_start_naming_it(tmp_path, option, value):
    done = command("serve-stomp", "--data", str(tmp_path / "store"), "--port", "0", option, value)
    assert done.returncode == 2 and option in done.stderr and "Traceback" not in done.stderr, done
    assert not (tmp_path / "store").exists()


# ---------------------------------------------------------------------------------------- logins
@pytest.fixture(scope="module")
def guarded(tmp_path_factory, made_users_file):
    """One server with --users for the login tests (they change nothing it holds)."""
    folder = tmp_path_factory.mktemp("guarded")
    started = Server(folder / "store", folder / "server.log", "--users", str(made_users_file))
    yield started
    stopped_clean(started)


def test_a_matching_login_connects(guarded):
    client = RawClient(guarded.port)
    client.send_raw(connect_frame("alice", "wonder land"))
    assert client.read_frame()[0] == "CONNECTED"
    client.send_raw(frame_bytes("SEND", {"destination": "/queue/q", "receipt": "r"}, b"x"))
    assert client.read_frame()[1]["receipt-id"] == "r"
    client.close()


@pytest.mark.parametrize("login, passcode", [("alice", "builder"), ("carol", "builder"), (None, None),
                                             ("alice", None), ("alice", "wonder land ")])
def test_a_failed_login_gets_an_error_and_a_delayed_close(guarded, login, passcode):
    client = RawClient(guarded.port)
    sent = time.monotonic()
    client.send_raw(connect_frame(login, passcode))
    command_name, headers, _ = client.read_frame()
    assert command_name == "ERROR" and headers["message"] == "login failed: the login or the passcode does not match"
    # other connections go on while this one waits for its close
    other = RawClient(guarded.port)
    other.send_raw(connect_frame("bob", "builder"))
    assert other.read_frame(SERVED_LOGIN_FAILURE_DELAY_S)[0] == "CONNECTED"
    other.close()
    assert time.monotonic() - sent < SERVED_LOGIN_FAILURE_DELAY_S * 0.9
    assert client.closed_by_server(WAIT_S + SERVED_LOGIN_FAILURE_DELAY_S)
    assert time.monotonic() - sent >= SERVED_LOGIN_FAILURE_DELAY_S * 0.9
    client.close()


def test_frames_written_with_the_connect_wait_for_its_login_check(guarded):
    """The login is checked off the loop (scrypt takes tens of ms); the frames a client pipelines
    behind its CONNECT are handled after it, in order, when it passes, and dropped when it fails."""
    queue = f"/queue/pipelined-{time.monotonic_ns()}"
    refused = RawClient(guarded.port)
    refused.send_raw(connect_frame("alice", "builder")
                     + frame_bytes("SEND", {"destination": queue, "receipt": "lost"}, b"never stored"))
    command_name, headers, _ = refused.read_frame()
    assert command_name == "ERROR" and "login failed" in headers["message"]
    assert refused.closed_by_server(WAIT_S + SERVED_LOGIN_FAILURE_DELAY_S)   # no RECEIPT came before the close
    refused.close()
    client = RawClient(guarded.port)
    client.send_raw(connect_frame("alice", "wonder land")
                    + frame_bytes("SEND", {"destination": queue, "receipt": "r1"}, b"first")
                    + frame_bytes("SUBSCRIBE", {"destination": queue, "id": "s", "ack": "auto", "receipt": "r2"},
                                  content_length=False))
    assert client.read_frame()[0] == "CONNECTED"
    assert client.read_frame()[1]["receipt-id"] == "r1"
    command_name, headers, body = client.read_frame()
    assert (command_name, body) == ("MESSAGE", b"first")      # the refused client's SEND was never stored
    assert client.read_frame()[1]["receipt-id"] == "r2"
    client.close()


def test_stomp_py_connects_with_its_login_and_is_refused_without(guarded):
    import stomp
    connection = stomp.Connection12([("127.0.0.1", guarded.port)], reconnect_attempts_max=1)
    connection.connect("bob", "builder", wait=True)
    assert connection.is_connected()
    connection.disconnect()
    refused = stomp.Connection12([("127.0.0.1", guarded.port)], reconnect_attempts_max=1)
    with pytest.raises(stomp.exception.ConnectFailedException):
        refused.connect("bob", "wrong", wait=True)
    refused.disconnect()


# ---------------------------------------------------------------------------------------- TLS
@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 and its key, as PEM files."""
    return self_signed(tmp_path_factory.mktemp("tls"), "journal-engine test")


def test_tls_serves_a_client_that_trusts_the_certificate(tmp_path, certificate):
    cert, key = certificate
    server = Server(tmp_path / "store", tmp_path / "server.log", "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        context = ssl.create_default_context(cafile=str(cert))
        client = RawClient.__new__(RawClient)
        client.pending = b""
        client.socket = context.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_S),
                                            server_hostname="127.0.0.1")
        assert client.socket.version() in ("TLSv1.2", "TLSv1.3")
        client.connect("1.2")
        client.send_raw(frame_bytes("SEND", {"destination": "/queue/q", "receipt": "r"}, b"over tls"))
        assert client.read_frame()[1]["receipt-id"] == "r"
        client.close()
        plain = RawClient(server.port)          # a client without TLS gets no STOMP frame
        plain.send_raw(connect_frame(None, None))
        with pytest.raises((EOFError, ConnectionResetError, TimeoutError, AssertionError, ValueError)):
            assert plain.read_frame(2.0)[0] != "CONNECTED"
        plain.close()
    finally:
        stopped_clean(server)


def test_stomp_py_over_tls_with_a_login(tmp_path, certificate, users_file):
    import stomp
    cert, key = certificate
    server = Server(tmp_path / "store", tmp_path / "server.log", "--tls-cert", str(cert), "--tls-key", str(key),
                    "--users", str(users_file))
    try:
        connection = stomp.Connection12([("127.0.0.1", server.port)], reconnect_attempts_max=1)
        connection.set_ssl(for_hosts=[("127.0.0.1", server.port)], ca_certs=str(cert))
        connection.connect("alice", "wonder land", wait=True)
        assert connection.is_connected()
        connection.disconnect()
    finally:
        stopped_clean(server)


@pytest.mark.parametrize("which", ["--tls-cert", "--tls-key"])
def test_a_missing_tls_file_is_refused_at_start_naming_it(tmp_path, certificate, which):
    cert, key = certificate
    missing = tmp_path / "missing.pem"
    files = {"--tls-cert": str(cert), "--tls-key": str(key), which: str(missing)}
    done = command("serve-stomp", "--data", str(tmp_path / "store"), "--port", "0",
                   "--tls-cert", files["--tls-cert"], "--tls-key", files["--tls-key"])
    assert done.returncode == 2 and which in done.stderr and str(missing) in done.stderr, done
    assert not (tmp_path / "store").exists()


# ---------------------------------------------------------------------------------------- connections
def test_a_connection_past_the_limit_gets_an_error_naming_it(tmp_path):
    server = Server(tmp_path / "store", tmp_path / "server.log", "--connections-max", "2")
    try:
        held = [RawClient(server.port) for _ in range(2)]
        for client in held:
            client.connect("1.2")
        refused = RawClient(server.port)
        command_name, headers, _ = refused.read_frame()
        assert command_name == "ERROR" and "SERVED_CONNECTIONS_MAX" in headers["message"], headers
        assert refused.closed_by_server()
        refused.close()
        held.pop().close()
        deadline = time.monotonic() + WAIT_S          # the freed place is taken again
        while True:
            again = RawClient(server.port)
            again.send_raw(connect_frame(None, None))
            answer = again.read_frame()[0]
            again.close()
            if answer == "CONNECTED" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert answer == "CONNECTED"
        for client in held:
            client.close()
    finally:
        stopped_clean(server)
