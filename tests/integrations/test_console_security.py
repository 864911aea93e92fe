"""The console's security rules and its read-only form, over plain HTTP clients (no browser):

* without a users file reading is open, but redrive and delete are refused, saying why, and change nothing;
* `journal-engine console DIR` reads a stopped broker's directory and never writes (every file's bytes
  and mtime are the same after its pages were read and a redrive was refused);
* over TLS when --tls-cert/--tls-key are given, its session cookie then Secure;
* a --http-host beyond loopback without --users is refused at start, nothing created.
"""
from __future__ import annotations

import http.cookiejar
import json
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from locations import ROOT
from stomp_server import LoggedChild, Server, frame_bytes, has_traceback, RawClient, START_TIMEOUT_S
from tls_certificate import self_signed

from journal_engine import AddressSettings, Broker
from journal_engine.console.data import LiveSource, StoredSource

ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


class Browser:
    """urllib with cookies: a session as a browser keeps it, and the CSRF token of the page last read."""

    def __init__(self, base: str, context: ssl.SSLContext | None = None) -> None:
        self.base = base
        self.cookies = http.cookiejar.CookieJar()
        handlers = [urllib.request.HTTPCookieProcessor(self.cookies)]
        if context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self.opener = urllib.request.build_opener(*handlers)
        self.csrf = None

    def get(self, path: str) -> tuple[int, str]:
        return self._open(path, None)

    def post(self, path: str, form: dict) -> tuple[int, str]:
        """The form with the CSRF token of the page last read; the page it leads to (a login's starts a
        new session, whose token it holds)."""
        return self._open(path, urllib.parse.urlencode({"csrf": self.csrf, **form}).encode())

    def _open(self, path: str, data: bytes | None) -> tuple[int, str]:
        """(status, page); the page's CSRF token is kept for the next form (an error page keeps the last)."""
        try:
            with self.opener.open(self.base + path, data=data, timeout=15) as answer:
                status, text = answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        found = re.search(r'name="csrf" value="([^"]+)"', text)
        if found:
            self.csrf = found.group(1)
        return status, text


def stopped_broker(directory: Path) -> None:
    """A broker directory holding two dead letters of 'orders', closed."""
    with Broker(directory, store_options={"file_size": 256 * 1024}) as broker:
        broker.address_settings.add("orders", AddressSettings(max_delivery_attempts=2, dead_letter_address="DLQ"))
        broker.create_queue("orders")
        broker.create_queue("DLQ")
        for n in range(2):
            broker.send("orders", f'{{"n": {n}}}'.encode(), properties={"n": n})
        broker.send("orders", b"tomorrow", scheduled_delivery_time=int(time.time() * 1000) + 86_400_000)
        consumer = broker.create_consumer("orders")
        for _ in range(4):
            consumer.rollback(consumer.receive(0))
        consumer.close()
        assert broker.queue("DLQ").message_count == 2


def files_of(directory: Path) -> dict:
    return {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in sorted(directory.rglob("*")) if path.is_file()}


class Console(LoggedChild):
    """`journal-engine console DIR --port 0`; ``url`` from the line it prints."""

    def __init__(self, directory: Path, log: Path, *extra: str) -> None:
        super().__init__([sys.executable, "-m", "journal_engine", "console", str(directory), "--port", "0", *extra],
                         log, env=ENV, stdout=subprocess.PIPE)
        line = self.process.stdout.readline().decode()
        assert "listening on http" in line, (line, self.stderr())
        self.url = line.split("listening on ")[1].split()[0]


def nack_one(port: int, destination: str, body: bytes) -> RawClient:
    """A receipted SEND of ``body`` to ``destination``, its MESSAGE received and NACKed (receipted): one
    failed delivery. The client, still connected."""
    client = RawClient(port)
    client.connect("1.2")
    client.send_raw(frame_bytes("SEND", {"destination": destination, "receipt": "r"}, body))
    assert client.read_frame()[1]["receipt-id"] == "r"
    client.send_raw(frame_bytes("SUBSCRIBE", {"destination": destination, "id": "s", "ack": "client-individual"}))
    command, headers, _body = client.read_frame()
    assert command == "MESSAGE"
    client.send_raw(frame_bytes("NACK", {"id": headers["ack"], "receipt": "n"}))
    assert client.read_frame()[1]["receipt-id"] == "n"
    return client


def test_the_read_only_console_reads_a_stopped_broker_and_never_writes(tmp_path):
    store = tmp_path / "store"
    stopped_broker(store)
    before = files_of(store)
    console = Console(store, tmp_path / "console.log")
    try:
        browser = Browser(console.url)
        status, page = browser.get("/dead-letters?queue=DLQ")
        assert status == 200 and page.count("max-delivery-attempts") >= 2 and "read-only" in page
        message_id = re.search(r"/message\?queue=DLQ&amp;id=(\d+)", page).group(1)
        status, page = browser.get(f"/message?queue=DLQ&id={message_id}")
        assert status == 200 and page.count('class="attempt"') == 2
        status, page = browser.get("/messages?queue=orders")
        assert status == 200 and re.search(r'<table class="scheduled">.*tomorrow', page, re.S), page[-3000:]
        for path in ("/queues", "/messages?queue=DLQ&filter=n+%3D+1", "/health", "/queue?name=DLQ"):
            status, page = browser.get(path)
            assert status == 200, (path, page[-500:])
        status, page = browser.post("/dead-letters/redrive", {"queue": "DLQ", "scope": "filter"})
        assert status == 403 and "read-only" in page
        status, page = browser.post("/dead-letters/delete", {"queue": "DLQ", "scope": "filter"})
        assert status == 403 and "read-only" in page
    finally:
        assert console.stop() == 0
    assert not has_traceback(console.stderr()), console.stderr()
    assert files_of(store) == before         # every byte and mtime: it never wrote


def test_the_read_only_console_refuses_a_directory_without_a_store(tmp_path):
    done = subprocess.run([sys.executable, "-m", "journal_engine", "console", str(tmp_path), "--port", "0"],
                          capture_output=True, text=True, env=ENV, timeout=START_TIMEOUT_S)
    assert done.returncode == 2 and "no journal found" in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_without_a_users_file_reading_is_open_and_writing_refused(tmp_path):
    server = Server(tmp_path / "store", tmp_path / "server.log", "--http", "0", "--max-delivery-attempts", "1")
    try:
        nack_one(server.port, "/queue/q", b"x").close()
        browser = Browser(server.console_url)
        status, page = browser.get("/dead-letters?queue=/queue/DLQ")
        assert status == 200 and "max-delivery-attempts" in page
        assert "redrive and delete need a logged-in user" in page     # said on the page, no buttons
        status, page = browser.post("/dead-letters/redrive", {"queue": "/queue/DLQ", "scope": "filter"})
        assert status == 403 and "--users FILE" in page
        status, page = browser.post("/dead-letters/delete", {"queue": "/queue/DLQ", "scope": "filter"})
        assert status == 403
        status, page = browser.get("/api/queues")
        assert status == 200 and '"name": "/queue/DLQ", "address": "/queue/DLQ", "depth": 1' in page
        assert 'Secure' not in str([cookie for cookie in browser.cookies])
    finally:
        assert not has_traceback(server.stderr()), server.stderr()[-3000:]
        assert server.stop() == 0


def test_over_tls_the_console_is_https_with_a_secure_cookie(tmp_path, certificate):
    cert, key = certificate
    server = Server(tmp_path / "store", tmp_path / "server.log", "--http", "0", "--tls-cert", str(cert),
                    "--tls-key", str(key))
    try:
        assert server.console_url.startswith("https://127.0.0.1:")
        browser = Browser(server.console_url, ssl.create_default_context(cafile=str(cert)))
        status, page = browser.get("/queues")
        assert status == 200 and "/queue/DLQ" in page
        assert [cookie.secure for cookie in browser.cookies] == [True]
        plain = Browser(server.console_url.replace("https://", "http://"))
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            plain.opener.open(plain.base + "/queues", timeout=5).read()
    finally:
        assert server.stop() == 0


def test_a_console_beyond_loopback_without_users_is_refused_at_start(tmp_path):
    done = subprocess.run([sys.executable, "-m", "journal_engine", "serve-stomp", "--data", str(tmp_path / "store"),
                           "--port", "0", "--http", "0", "--http-host", "0.0.0.0"],
                          capture_output=True, text=True, env=ENV, timeout=START_TIMEOUT_S)
    assert done.returncode == 2 and "--http-host" in done.stderr, done.stderr
    assert not (tmp_path / "store").exists()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 and its key, as PEM files."""
    return self_signed(tmp_path_factory.mktemp("tls"), "journal-engine console test")


def test_the_read_only_console_inspects_a_directory_a_broker_serves_as_the_cli_does(tmp_path):
    """A journal is read without a lock (its files are appended, never rewritten in place), as `dlq list`
    reads it beside a running broker: the console shows what the broker had written when it read."""
    server = Server(tmp_path / "store", tmp_path / "server.log")
    try:
        client = RawClient(server.port)
        client.connect("1.2")
        client.send_raw(frame_bytes("SEND", {"destination": "/queue/seen", "receipt": "r"}, b"written"))
        assert client.read_frame()[1]["receipt-id"] == "r"
        client.close()
        console = Console(tmp_path / "store", tmp_path / "console.log")
        try:
            status, page = Browser(console.url).get("/messages?queue=/queue/seen")
            assert status == 200 and "written" in page
        finally:
            assert console.stop() == 0
    finally:
        assert server.stop() == 0


def test_the_health_page_plots_the_reports_it_is_given(tmp_path):
    """--report: a crash campaign's runs by fault mode and verdict, a bench run's median rates; a file that
    is neither is named as such (shapes as `crash-test --json` and `bench --json` write them)."""
    store = tmp_path / "store"
    stopped_broker(store)
    crash = tmp_path / "crash.json"
    crash.write_text(json.dumps({"seed": 15, "size": "ci", "store": "journal", "runs": {"kill": 30, "torn": 12},
                                 "violations": [], "acknowledged": 900, "duration_s": 61.5}))
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"schema": "journal-engine-bench", "matrix": "tiny", "machine": {"date": "today"},
                                 "results": [{"scenario": "append", "cell": {"key": "256 B x 1"}, "store": "journal",
                                              "median_records_per_s": 41000.0, "min_records_per_s": 40000.0,
                                              "max_records_per_s": 42000.0}]}))
    other = tmp_path / "other.json"
    other.write_text("[1, 2]")
    console = Console(store, tmp_path / "console.log", "--report", str(crash), "--report", str(bench),
                      "--report", str(other))
    try:
        status, page = Browser(console.url).get("/health")
    finally:
        assert console.stop() == 0
    assert status == 200
    assert "crash runs by fault mode" in page and "0 violations, 42 runs" in page and ">kill<" in page
    assert "median records/s" in page and "append 256 B x 1 journal" in page and "41.0k/s" in page
    assert "neither a crash-test nor a bench report" in page


def test_a_logged_in_user_deletes_dead_letters_matching_a_filter(tmp_path):
    """Delete, over HTTP as a form posts it: the logged-in user, the session's CSRF token, a selector; the
    message is gone for good and the action is listed with its user."""
    users = tmp_path / "users"
    added = subprocess.run([sys.executable, "-m", "journal_engine", "users", "add", str(users), "ops"],
                           input="pass word\n", text=True, capture_output=True, env=ENV, timeout=60)
    assert added.returncode == 0, added.stderr
    server = Server(tmp_path / "store", tmp_path / "server.log", "--http", "0", "--users", str(users),
                    "--max-delivery-attempts", "1")
    try:
        client = RawClient(server.port)
        client.send_raw(frame_bytes("CONNECT", {"accept-version": "1.2", "host": "h", "login": "ops",
                                                "passcode": "pass word"}, content_length=False))
        assert client.read_frame()[0] == "CONNECTED"
        for n in range(3):
            client.send_raw(frame_bytes("SEND", {"destination": "/queue/work", "receipt": f"r{n}"},
                                        b"job" if n else b"x"))
            assert client.read_frame()[1]["receipt-id"] == f"r{n}"
        client.send_raw(frame_bytes("SUBSCRIBE", {"destination": "/queue/work", "id": "s",
                                                  "ack": "client-individual"}))
        nacked = receipts = 0
        while receipts < 3:       # each NACK dead-letters its message (--max-delivery-attempts 1)
            command, headers, _body = client.read_frame()
            if command == "MESSAGE":
                client.send_raw(frame_bytes("NACK", {"id": headers["ack"], "receipt": f"n{nacked}"}))
                nacked += 1
            else:
                assert command == "RECEIPT", (command, headers)
                receipts += 1
        client.close()
        browser = Browser(server.console_url)
        browser.get("/login")
        status, page = browser.post("/login", {"login": "ops", "password": "pass word", "next": "/dead-letters"})
        assert status == 200 and ">ops<" in page and "/queue/DLQ" in page
        status, page = browser.post("/dead-letters/delete", {"queue": "/queue/DLQ", "scope": "filter",
                                                             "filter": "AMQSize = 1"})
        assert status == 200 and "deleted from /queue/DLQ: 1 messages" in page, page[-2000:]
        assert re.search(r"<td>ops</td><td>delete</td><td>/queue/DLQ</td>", page), page[-3000:]
        status, api = browser.get("/api/queues")
        counts = {queue["name"]: queue for queue in json.loads(api)["queues"]}
        assert counts["/queue/DLQ"]["depth"] == 2 and counts["/queue/DLQ"]["acknowledged"] == 1
    finally:
        assert not has_traceback(server.stderr()), server.stderr()[-3000:]
        assert server.stop() == 0


def test_the_running_brokers_scheduled_redelivery_is_listed_with_its_time(tmp_path):
    """A NACK with --redelivery-delay-ms schedules the message again: the messages page lists it under
    Scheduled, with its delivery count and the time it will be delivered."""
    server = Server(tmp_path / "store", tmp_path / "server.log", "--http", "0", "--redelivery-delay-ms", "600000")
    try:
        client = nack_one(server.port, "/queue/later", b"try again")
        status, page = Browser(server.console_url).get("/messages?queue=/queue/later")
        client.close()
        assert status == 200
        scheduled = page.split('<table class="scheduled">')[1].split("</table>")[0]
        assert "try again" in scheduled and '<td class="n">1</td>' in scheduled, scheduled
        due = re.search(r"<tr><td>(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", scheduled)
        assert due is not None, scheduled          # its delivery time, about ten minutes ahead
    finally:
        assert not has_traceback(server.stderr()), server.stderr()[-3000:]
        assert server.stop() == 0


def test_a_selector_on_headers_picks_the_same_messages_read_only_as_live(tmp_path):
    """The read-only console filters stored messages by the header values a live broker's filters see
    (AMQDurable is 'DURABLE' or 'NON_DURABLE', not a bool)."""
    selector = "AMQDurable = 'DURABLE' AND AMQSize = 1"
    with Broker(tmp_path / "store") as broker:
        broker.create_queue("q")
        broker.send("q", b"a")
        broker.send("q", b"bb")
        live = [view.body for view in LiveSource(broker).page("q", 0, 10, selector).messages]
    stored = [view.body for view in StoredSource(str(tmp_path / "store")).page("q", 0, 10, selector).messages]
    assert live == stored == [b"a"]
