"""A Qpid Broker-J virtual host's JSON configuration as the broker's config file: its ``context``
variables ``queue.deadLetterQueueEnabled``, ``queue.maximumDeliveryAttempts``, ``queue.defaultExpiryPolicy``
(Broker-J's Queue.java context defaults, read by AbstractQueue at creation; in 6.1
AbstractVirtualHost.shouldCreateDLQ) become the defaults of every queue declared, inherited as
AbstractConfiguredObject.getContextValue inherits them (virtual host over node over broker). The file
is read like the other configuration files: size-capped, errors naming the file, the key and the line."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

import journal_engine.config
from journal_engine import Broker, ConfigError

START = 1_700_000_000_000

VIRTUAL_HOST = """{
  "id" : "2b5a4e4b-8b0b-4c1e-9d3f-1c7a2e0c9a11",
  "name" : "default",
  "type" : "BDB",
  "modelVersion" : "9.0",
  "context" : {
    "queue.deadLetterQueueEnabled" : "true",
    "queue.maximumDeliveryAttempts" : "2",
    "queue.defaultExpiryPolicy" : "ROUTE_TO_ALTERNATE",
    "qpid.housekeepingCheckPeriod" : "30000"
  }
}
"""


def test_a_broker_started_on_a_virtual_host_file_gives_its_queues_the_defaults(tmp_path):
    # a second process, as a user starts it: Broker(directory, config=<the virtual host's JSON file>)
    path = tmp_path / "default.json"
    path.write_text(VIRTUAL_HOST)
    script = f"""
import logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
from journal_engine import Broker, ManualClock
broker = Broker({str(tmp_path / "data")!r}, clock=ManualClock({START}), config={str(path)!r})
broker.create_queue("orders")
broker.send("orders", b"poison")
consumer = broker.create_consumer("orders")
for _ in range(2):
    consumer.rollback(consumer.receive(0))
print(broker.queue_names(), [m.body for m in broker.browse("orders_DLQ")])
broker.close()
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ),
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['orders', 'orders_DLQ'] [b'poison']"
    assert "line 10: context/qpid.housekeepingCheckPeriod is not implemented" in out.stderr


def test_the_read_context_and_what_is_not_implemented(caplog):
    with caplog.at_level(logging.WARNING, logger="journal_engine.config"):
        loaded = journal_engine.config.load(VIRTUAL_HOST)
    assert loaded.system == "qpid"
    context = loaded.qpid_context
    assert (context.dead_letter_queue_enabled, context.maximum_delivery_attempts, context.expiry_policy) == (
        True, 2, "ROUTE_TO_ALTERNATE")
    assert loaded.unimplemented == [("context/qpid.housekeepingCheckPeriod", 10)]


def test_config_json_context_is_inherited_virtual_host_over_node_over_broker():
    host = {"type": "Memory", "context": {"queue.maximumDeliveryAttempts": "7"}}
    document = {"name": "broker", "context": {"queue.maximumDeliveryAttempts": "3",
                                              "queue.defaultExpiryPolicy": "ROUTE_TO_ALTERNATE"},
                "virtualhostnodes": [{"name": "default", "type": "JSON",
                                      "context": {"queue.deadLetterQueueEnabled": True,
                                                  "queue.defaultExpiryPolicy": "DELETE"},
                                      "virtualHostInitialConfiguration": json.dumps(host)}]}
    context = journal_engine.config.load(json.dumps(document, indent=2)).qpid_context
    assert (context.dead_letter_queue_enabled, context.maximum_delivery_attempts, context.expiry_policy) == (
        True, 7, "DELETE")


@pytest.mark.parametrize("replace, field, line", [
    ('"2"', '"two"', ("context/queue.maximumDeliveryAttempts", 8)),
    ('"ROUTE_TO_ALTERNATE"', '"KEEP"', ("context/queue.defaultExpiryPolicy", 9)),
    ('"true"', '"${qpid.dlq}"', ("context/queue.deadLetterQueueEnabled", 7)),
])
def test_a_bad_value_names_the_file_the_key_and_its_line(tmp_path, replace, field, line):
    path = tmp_path / "vhost.json"
    path.write_text(VIRTUAL_HOST.replace(replace, field, 1))
    with pytest.raises(ConfigError) as caught:
        Broker(config=str(path))
    assert (caught.value.field, caught.value.line) == line and str(path) in str(caught.value)


def test_malformed_json_is_refused_with_its_line(tmp_path):
    path = tmp_path / "vhost.json"
    path.write_text(VIRTUAL_HOST.replace('"2",', '"2"', 1))
    with pytest.raises(ConfigError) as caught:
        journal_engine.config.load(path)
    assert caught.value.line == 9 and "not valid JSON" in str(caught.value)


def test_two_virtual_host_nodes_and_a_second_source_of_defaults_are_refused():
    document = {"virtualhostnodes": [{"name": "a"}, {"name": "b"}]}
    with pytest.raises(ConfigError) as caught:
        journal_engine.config.load(json.dumps(document))
    assert caught.value.field == "virtualhostnodes" and caught.value.value == ["a", "b"]
    with pytest.raises(ConfigError) as caught:
        Broker(config=VIRTUAL_HOST, qpid_context={"queue.maximumDeliveryAttempts": 2})
    assert caught.value.field == "qpid_context"
