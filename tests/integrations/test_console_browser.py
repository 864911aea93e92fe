"""The operator's console in a real browser (issue 43): Debian's Chromium driven by Playwright, on a
`serve-stomp --http` started as users start it, with real stomp.py clients.

* a dead letter made by real rollbacks (STOMP NACKs past --max-delivery-attempts) shows its delivery
  history as a timeline;
* a redrive from the page puts it back on its queue (a client receives it) and in the audit trail
  (the page's list of actions, the message's _JE_REDRIVE_* properties);
* a refused login changes nothing (the DLQ keeps its messages; a POST without the session's CSRF token
  is refused);
* the Queues page's counts move while a producer runs, without a reload;
* the pages fit a phone's width.

One browser for the module; with JOURNAL_ENGINE_SCREENSHOTS=docs/images the pages' pictures are written
for docs/console.md.
"""
from __future__ import annotations

import json
import re
import threading
import time
import urllib.request

import pytest
import stomp
from console_browser import DESKTOP, PHONE, launched_browser, screenshot
from stomp_server import Server, add_user, has_traceback

LOGIN, PASSWORD = "operator", "dead letters at dawn"
WAIT_MS = 10_000


@pytest.fixture(scope="module")
def browser():
    playwright, launched = launched_browser()
    yield launched
    launched.close()
    playwright.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    directory = tmp_path_factory.mktemp("console")
    users = directory / "users"
    add_user(users, LOGIN, PASSWORD)
    server = Server(directory / "store", directory / "server.log", "--http", "0", "--users", str(users),
                    "--max-delivery-attempts", "3")
    assert server.console_url is not None and server.console_url.startswith("http://127.0.0.1:"), server.line
    yield server
    assert not has_traceback(server.stderr()), server.stderr()[-3000:]
    assert server.stop() == 0


def client(server) -> stomp.Connection12:
    connection = stomp.Connection12([("127.0.0.1", server.port)])
    connection.connect(LOGIN, PASSWORD, wait=True)
    return connection


def send(server, destination: str, bodies: list[str]) -> None:
    connection = client(server)
    for index, body in enumerate(bodies):
        headers = {"kind": "order"}
        if index == len(bodies) - 1:
            headers["receipt"] = "last"
        connection.send(destination, body, headers=headers)
    connection.disconnect()      # stomp.py waits for the DISCONNECT's receipt: every SEND before it is in


class Collector(stomp.ConnectionListener):
    def __init__(self, connection, nacks: int) -> None:
        self.connection = connection
        self.nacks = nacks
        self.received: list[tuple[str, dict]] = []
        self.done = threading.Event()

    def on_message(self, frame) -> None:
        self.received.append((frame.body, dict(frame.headers)))
        if self.nacks > 0:
            self.nacks -= 1
            self.connection.nack(frame.headers["ack"])
        else:
            self.connection.ack(frame.headers["ack"])
            self.done.set()


def fail_three_times(server, destination: str) -> None:
    """Deliver the queue's one message and NACK it until the broker dead-letters it (3 attempts)."""
    connection = client(server)
    listener = Collector(connection, nacks=3)
    connection.set_listener("collector", listener)
    connection.subscribe(destination, id="s", ack="client-individual")
    deadline = time.monotonic() + 10
    while listener.nacks > 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert listener.nacks == 0, listener.received
    connection.disconnect()


def api_queues(server, page) -> dict:
    answer = page.request.get(server.console_url + "/api/queues")
    assert answer.ok, answer.status
    return {queue["name"]: queue for queue in answer.json()["queues"]}


def logged_in(browser, server, viewport=DESKTOP):
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.goto(server.console_url + "/queues")
    assert "/login" in page.url                     # reading needs a login when --users is given
    page.fill("input[name=login]", LOGIN)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r".*/queues$"))
    return context, page


def test_a_dead_letter_made_by_real_rollbacks_shows_its_history_and_a_redrive_puts_it_back(browser, served):
    send(served, "/queue/orders", [json.dumps({"order": 7, "item": "teapot"})])
    fail_three_times(served, "/queue/orders")
    context, page = logged_in(browser, served)
    try:
        page.goto(served.console_url + "/dead-letters?queue=/queue/DLQ")
        row = page.locator("table.messages tbody tr").filter(has_text="/queue/orders")
        assert row.count() == 1
        assert "max-delivery-attempts" in row.inner_text()
        assert row.locator("td.history").inner_text().count("rollback") == 3
        screenshot(page, "dead-letters")
        row.locator("td a").first.click()
        timeline = page.locator("#history li")
        assert timeline.count() == 3
        assert [timeline.nth(i).locator(".attempt").inner_text() for i in range(3)] == \
            ["attempt 1", "attempt 2", "attempt 3"]
        assert all(timeline.nth(i).locator(".reason").inner_text() == "rollback" for i in range(3))
        assert timeline.nth(1).locator(".delay").count() == 1        # the delay since the attempt before
        page.click("button[data-tab=json]")
        assert '"item": "teapot"' in page.locator("pre[data-panel=json]").inner_text()
        screenshot(page, "message")
        dead_letter_id = int(re.search(r"Message (\d+)", page.locator("h1").inner_text()).group(1))

        # the redrive, from the dead-letters page: tick it, press Redrive
        page.goto(served.console_url + "/dead-letters?queue=/queue/DLQ")
        page.check(f"input[name=id][value='{dead_letter_id}']")
        page.click("button[formaction='/dead-letters/redrive']")
        assert "1 moved, 0 refused" in page.locator(".flash").inner_text()
        action = page.locator("#actions tbody tr").first
        assert LOGIN in action.inner_text() and "redrive" in action.inner_text()
        assert str(dead_letter_id) in action.inner_text() and "/queue/orders" in action.inner_text()
        screenshot(page, "redriven")
        counts = api_queues(served, page)
        assert counts["/queue/DLQ"]["depth"] == 0 and counts["/queue/orders"]["depth"] == 1

        # on its queue with its trail, and a client receives it
        action.locator("a").first.click()
        properties = page.locator("table").filter(has_text="_JE_REDRIVE_COUNT").inner_text()
        assert "_JE_REDRIVE_SOURCE\t/queue/DLQ" in properties and "_JE_REDRIVE_COUNT\t1" in properties
        connection = client(served)
        listener = Collector(connection, nacks=0)
        connection.set_listener("collector", listener)
        connection.subscribe("/queue/orders", id="s", ack="client-individual")
        assert listener.done.wait(10)
        assert json.loads(listener.received[0][0]) == {"order": 7, "item": "teapot"}
        connection.disconnect()
    finally:
        context.close()


def test_a_refused_login_changes_nothing(browser, served):
    send(served, "/queue/payments", ["refund 1"])
    fail_three_times(served, "/queue/payments")
    context, page = logged_in(browser, served)
    before = api_queues(served, page)
    context.close()
    assert before["/queue/DLQ"]["depth"] >= 1
    stranger = browser.new_context(viewport=DESKTOP)
    try:
        page = stranger.new_page()
        page.goto(served.console_url + "/dead-letters?queue=/queue/DLQ")
        assert "/login" in page.url
        page.fill("input[name=login]", LOGIN)
        page.fill("input[name=password]", "not the password")
        page.click("button[type=submit]")
        assert "Login refused" in page.locator(".error").inner_text()
        screenshot(page, "login-refused")
        # nothing to read without a login: the API and /metrics ask for one
        assert stranger.request.get(served.console_url + "/api/queues").status == 401
        # a redrive posted without the session's CSRF token is refused before anything is done
        answer = stranger.request.post(served.console_url + "/dead-letters/redrive",
                                       form={"queue": "/queue/DLQ", "scope": "filter", "csrf": "guessed"})
        assert answer.status == 403 and "CSRF" in answer.text()
        page.goto(served.console_url + "/dead-letters?queue=/queue/DLQ")
        assert "/login" in page.url
    finally:
        stranger.close()
    context, page = logged_in(browser, served)
    try:
        after = api_queues(served, page)
        assert after["/queue/DLQ"]["depth"] == before["/queue/DLQ"]["depth"]
        assert after["/queue/DLQ"]["acknowledged"] == before["/queue/DLQ"]["acknowledged"]
    finally:
        context.close()


def test_live_counts_move_while_a_producer_runs(browser, served):
    send(served, "/queue/live", ["first"])
    context, page = logged_in(browser, served)
    stop = threading.Event()

    def produce() -> None:
        connection = client(served)
        sent = 0
        while not stop.is_set() and sent < 2000:
            connection.send("/queue/live", f"tick {sent}")
            sent += 1
            time.sleep(0.01)
        connection.disconnect()

    producer = threading.Thread(target=produce, daemon=True)
    try:
        page.goto(served.console_url + "/queues")
        depth = page.locator("tr[data-queue='/queue/live'] [data-field=depth]")
        first = int(depth.inner_text())
        producer.start()
        seen = {first}
        deadline = time.monotonic() + 15
        while len(seen) < 3 and time.monotonic() < deadline:     # two updates by the page's script, no reload
            page.wait_for_timeout(250)
            seen.add(int(depth.inner_text()))
        assert len(seen) >= 3 and max(seen) > first, seen
        send_rate = page.locator("tr[data-queue='/queue/live'] [data-field=send]")
        for _ in range(WAIT_MS // 200):   # polled here: the page's CSP forbids the eval wait_for_function needs
            if float(send_rate.inner_text()) > 0:
                break
            page.wait_for_timeout(200)
        assert float(send_rate.inner_text()) > 0
        assert page.locator("#live-at").inner_text().startswith("updated")
        page.reload()                   # the rates' lines are drawn by the server: the samples of the load so far
        for _ in range(50):             # the page's script updates the counts within its 2 s period
            if page.locator("#live-at").inner_text().startswith("updated"):
                break
            page.wait_for_timeout(200)
        assert page.locator("#live-at").inner_text().startswith("updated")
        screenshot(page, "queues")
        page.click("a:text-is('/queue/live')")
        assert page.locator("dl.facts").filter(has_text="max_delivery_attempts").count() == 0
        settings = page.locator("table").filter(has_text="max_delivery_attempts").inner_text()
        assert re.search(r"max_delivery_attempts\t3\t#\tserve-stomp's options", settings), settings
        screenshot(page, "queue")
        page.goto(served.console_url + "/messages?queue=/queue/live&limit=20")
        assert page.locator("table.messages tbody tr").count() == 20
        page.fill("input[name=filter]", "AMQSize > 7")
        page.click("form.filter button")
        assert page.locator("table.messages tbody tr").count() == 20
        screenshot(page, "messages")
        page.goto(served.console_url + "/health")
        assert page.locator("#verdict").inner_text() == "verify: healthy (no damage)"
        assert page.locator("table.files tbody tr").count() >= 2
        screenshot(page, "health")
    finally:
        stop.set()
        if producer.is_alive():
            producer.join(10)
        context.close()


def test_the_pages_fit_a_phone(browser, served):
    context, page = logged_in(browser, served, viewport=PHONE)
    try:
        for path in ("/queues", "/dead-letters?queue=/queue/DLQ", "/health"):
            page.goto(served.console_url + path)
            overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
            assert overflow <= 1, (path, overflow)      # wide tables scroll inside their box, not the page
        page.goto(served.console_url + "/dead-letters?queue=/queue/DLQ")
        screenshot(page, "phone")
    finally:
        context.close()


def test_the_pages_fetch_nothing_from_elsewhere(served):
    """Every asset is the package's: the pages name no other host, and the stylesheet and script are served."""
    request = urllib.request.Request(served.console_url + "/login")
    with urllib.request.urlopen(request, timeout=10) as answer:
        html = answer.read().decode()
        assert "default-src 'self'" in answer.headers["Content-Security-Policy"]
    assert not re.search(r"(src|href)=\"(https?:)?//", html), html
    for asset in ("/static/console.css", "/static/console.js"):
        with urllib.request.urlopen(served.console_url + asset, timeout=10) as answer:
            assert answer.status == 200 and len(answer.read()) > 500
