"""`/metrics` of `serve-stomp --http` (issue 43): Prometheus's text format, parsed with prometheus_client's
own parser, its per-queue numbers checked against the broker's counts (QueueInfo, which the console's
/api/queues reports) after real STOMP traffic: sends, acknowledgements, failed deliveries, a dead letter.
Reading it needs a login of the users file (HTTP Basic, as Prometheus's basic_auth sends it)."""
from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pytest
import stomp
from stomp_server import Server, add_user, has_traceback

parser = pytest.importorskip("prometheus_client.parser", reason="prometheus_client is a dependency of the package")

LOGIN, PASSWORD = "prometheus", "scrape me"


def get(url: str, login: str | None = None, password: str | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(url)
    if login is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{login}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=15) as answer:
            return answer.status, answer.headers.get("Content-Type", ""), answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read().decode()


def samples(text: str) -> dict[tuple[str, str], float]:
    """(sample name, queue label) -> value, summed over the other labels (a reason, an address)."""
    found: dict[tuple[str, str], float] = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, sample.labels.get("queue", ""))
            found[key] = found.get(key, 0.0) + sample.value
    return found


def test_metrics_parse_and_agree_with_the_broker_counts(tmp_path):
    users = tmp_path / "users"
    add_user(users, LOGIN, PASSWORD)
    server = Server(tmp_path / "store", tmp_path / "server.log", "--http", "0", "--users", str(users),
                    "--max-delivery-attempts", "2")
    try:
        connection = stomp.Connection12([("127.0.0.1", server.port)])
        connection.connect(LOGIN, PASSWORD, wait=True)
        for n in range(10):
            connection.send("/queue/metered", f"m{n}", headers={"receipt": f"r{n}"} if n == 9 else {})
        frames = []

        class Listener(stomp.ConnectionListener):
            def on_message(self, frame) -> None:
                frames.append(frame)

        connection.set_listener("l", Listener())
        connection.subscribe("/queue/metered", id="s", ack="client-individual", headers={"activemq.prefetchSize": "1"})
        handled = 0
        deadline = __import__("time").monotonic() + 15
        while handled < 6 and __import__("time").monotonic() < deadline:
            if len(frames) > handled:
                frame = frames[handled]
                # the first message fails twice (dead-lettered at 2 attempts); the next four are acknowledged
                if frame.body == "m0":
                    connection.nack(frame.headers["ack"])
                else:
                    connection.ack(frame.headers["ack"])
                handled += 1
            else:
                __import__("time").sleep(0.01)
        assert handled == 6, [frame.body for frame in frames]
        connection.disconnect()       # what was handed out and not acknowledged goes back to the queue

        status, _type, _text = get(server.console_url + "/metrics")
        assert status == 401                                          # a login of the users file is needed
        assert get(server.console_url + "/metrics", LOGIN, "wrong")[0] == 401
        status, content_type, text = get(server.console_url + "/metrics", LOGIN, PASSWORD)
        assert status == 200 and content_type.startswith("text/plain"), (status, content_type)
        found = samples(text)
        status, _type, api = get(server.console_url + "/api/queues", LOGIN, PASSWORD)
        assert status == 200
        queues = {queue["name"]: queue for queue in json.loads(api)["queues"]}
        metered, dead = queues["/queue/metered"], queues["/queue/DLQ"]
        assert (metered["added"], metered["acknowledged"], metered["killed"], dead["depth"]) == (10, 4, 1, 1)
        for name, queue in (("/queue/metered", metered), ("/queue/DLQ", dead)):
            assert found[("journal_engine_queue_messages", name)] == queue["depth"]
            assert found[("journal_engine_queue_scheduled_messages", name)] == queue["scheduled"]
            assert found[("journal_engine_queue_delivering_messages", name)] == queue["delivering"]
            assert found[("journal_engine_queue_consumers", name)] == queue["consumers"]
            assert found[("journal_engine_queue_messages_added_total", name)] == queue["added"]
            assert found[("journal_engine_queue_messages_acknowledged_total", name)] == queue["acknowledged"]
            assert found.get(("journal_engine_queue_messages_dead_lettered_total", name), 0.0) == queue["killed"]
            assert found[("journal_engine_queue_messages_delivered_total", name)] == queue["delivered"]
            assert found[("journal_engine_queue_messages_redelivered_total", name)] == queue["redelivered"]
            assert found[("journal_engine_queue_messages_rolled_back_total", name)] == queue["rolled_back"]
        # two NACKs, and what the subscription held when the client went away (a lost delivery counts)
        assert metered["rolled_back"] >= 2 and metered["dead_letters"] == {"max-delivery-attempts": 1}
        assert metered["delivered"] >= 6 and metered["redelivered"] >= 1
        assert found[("journal_engine_broker_queues", "")] == len(queues)
        assert found[("journal_engine_stomp_connections", "")] >= 0
        assert any(name.startswith("journal_engine_journal_") for name, _queue in found), sorted(found)[:20]
    finally:
        assert not has_traceback(server.stderr()), server.stderr()[-3000:]
        assert server.stop() == 0
