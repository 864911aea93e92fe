"""Artemis's auto-deleting queues across a restart and ``auto-delete-queues-skip-usage-check``.

A queue's auto-delete rule is kept with its binding (Artemis's PersistentQueueBindingEncoding writes
autoCreated, autoDelete, autoDeleteDelay and autoDeleteMessageCount), so a restarted broker knows it
without its address settings; at start-up PostOfficeImpl.startAddressQueueScanner runs
``reapAddresses(true)``: every auto-deleting queue without consumers that passes messageCountCheck is
deleted at once when empty, marked swept otherwise (no delay, no usage check). With
``auto-delete-queues-skip-usage-check`` the regular scan deletes a queue nobody used
(PostOfficeImpl.queueWasUsed), its delay counted from the queue's creation (QueueManagerImpl.delayCheck).
Each restart is a second process acting on the directory the first one left."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import journal_engine.config
from journal_engine import AddressSettings, Broker, ConfigError, ManualClock

NOW = 1_700_000_000_000
SCAN = 30_000


def dead_lettering_broker(directory, **settings):
    broker = Broker(directory, clock=ManualClock(NOW))
    broker.address_settings.add("#", AddressSettings(max_delivery_attempts=1, dead_letter_address="DLA",
                                                     auto_create_dead_letter_resources=True, **settings))
    broker.create_queue("orders")
    broker.send("orders", b"poison")
    consumer = broker.create_consumer("orders")
    consumer.rollback(consumer.receive(0))
    consumer.close()
    return broker


def restart(directory, after: str = "", settings: str = "") -> list[str]:
    """A second process opens the broker (with no address settings unless ``settings``), runs ``after``
    and prints the queue names; its log at INFO goes to stderr. Returns [queue names line, stderr]."""
    script = f"""
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from journal_engine import AddressSettings, Broker, ManualClock
clock = ManualClock({NOW + 10 * SCAN})
broker = Broker({str(directory)!r}, clock=clock)
{settings}
{after}
print(broker.queue_names())
broker.close()
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ),
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return [out.stdout.strip(), out.stderr]


def test_an_empty_auto_created_dlq_left_by_a_stopped_broker_is_deleted_at_start(tmp_path):
    # PostOfficeImpl.startAddressQueueScanner -> reapAddresses(true): "empty auto-created queues and addresses
    # should be removed right away", before the first scan and without its address settings
    broker = dead_lettering_broker(tmp_path)
    dlq = broker.create_consumer("DLQ.orders")
    dlq.ack(dlq.receive(0))
    dlq.close()
    broker.close()                               # stopped before any scan deleted it
    names, log = restart(tmp_path)
    assert names == "['orders']"
    assert "AMQ224112: Auto removing queue DLQ.orders" in log


def test_a_queue_left_with_messages_is_kept_at_start_and_without_use_by_the_scans(tmp_path):
    # reapAddresses(true) deletes only queues with no message (validInitialCheck); one within the message
    # count is swept, but the next scan finds it unused (queueWasUsed: counters start at zero) and unmarks it
    broker = dead_lettering_broker(tmp_path, auto_delete_queues_message_count=-1)
    broker.close()
    names, _ = restart(tmp_path, after=f"clock.advance({3 * SCAN})")
    assert names == "['DLQ.orders', 'orders']"


def test_the_rule_is_the_queues_own_not_its_addresses_settings_at_restart(tmp_path):
    # QueueConfigurationUtils.applyDynamicQueueDefaults fixes autoDelete at creation; the binding keeps it:
    # a restart under settings saying the opposite changes neither queue
    broker = Broker(tmp_path, clock=ManualClock(NOW))
    broker.address_settings.add("temp.#", AddressSettings(auto_delete_created_queues=True))
    broker.create_queue("temp.a")
    broker.create_queue("kept")
    broker.close()
    opposite = ('broker.address_settings.add("#", AddressSettings(auto_delete_created_queues=True))\n'
                'broker.address_settings.add("temp.#", AddressSettings(auto_delete_created_queues=False))')
    names, log = restart(tmp_path, settings="")
    assert names == "['kept']" and "Auto removing queue temp.a" in log
    broker = Broker(tmp_path, clock=ManualClock(NOW))
    broker.create_queue("temp.b")                # no settings: not auto-deleting
    broker.close()
    names, _ = restart(tmp_path, settings=opposite, after=f"clock.advance({3 * SCAN})")
    assert names == "['kept', 'temp.b']"


def test_arguments_set_later_keep_the_rule(tmp_path):
    broker = Broker(tmp_path, clock=ManualClock(NOW))
    broker.address_settings.add("temp.#", AddressSettings(auto_delete_created_queues=True))
    broker.create_queue("temp.a")
    broker.set_queue_arguments("temp.a", {"x-qpid-maximum-delivery-count": 3})
    broker.close()
    names, _ = restart(tmp_path)
    assert names == "[]"


def unused_auto_deleting_queue(clock, **settings):
    broker = Broker(clock=clock)
    broker.address_settings.add("temp.#", AddressSettings(auto_delete_created_queues=True, **settings))
    broker.create_queue("temp.a")
    return broker


def test_skip_usage_check_deletes_a_queue_nobody_used():
    # PostOfficeImpl.queueWasUsed(...) || settings.getAutoDeleteQueuesSkipUsageCheck()
    clock = ManualClock(NOW)
    broker = unused_auto_deleting_queue(clock, auto_delete_queues_skip_usage_check=True)
    clock.advance(2 * SCAN)
    assert broker.queue_names() == []
    clock = ManualClock(NOW)
    broker = unused_auto_deleting_queue(clock)        # the default: never used, kept
    clock.advance(10 * SCAN)
    assert broker.queue_names() == ["temp.a"]


def test_skip_usage_check_counts_the_delay_from_the_queues_creation():
    # QueueManagerImpl.delayCheck: with the skip, now - createdTimestamp >= autoDeleteDelay
    clock = ManualClock(NOW)
    broker = unused_auto_deleting_queue(clock, auto_delete_queues_skip_usage_check=True,
                                        auto_delete_queues_delay=100_000)
    clock.advance(3 * SCAN)                           # 90 s since creation
    assert broker.queue_names() == ["temp.a"]
    clock.advance(SCAN)                               # 120 s: marked
    assert broker.queue_names() == ["temp.a"]
    clock.advance(SCAN)                               # deleted
    assert broker.queue_names() == []


def test_skip_usage_check_is_read_from_its_address_when_the_scan_runs():
    # reapAddresses looks the settings up at every scan (addressSettingsRepository.getMatch)
    clock = ManualClock(NOW)
    broker = unused_auto_deleting_queue(clock)
    clock.advance(2 * SCAN)
    broker.address_settings.add("temp.a", AddressSettings(auto_delete_queues_skip_usage_check=True))
    clock.advance(2 * SCAN)
    assert broker.queue_names() == []


def test_broker_xml_skip_usage_check_with_its_line(caplog):
    text = ('<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core"><address-settings>\n'
            '<address-setting match="#">\n'
            '<auto-delete-queues-skip-usage-check>true</auto-delete-queues-skip-usage-check>\n'
            '</address-setting></address-settings></core></configuration>')
    loaded = journal_engine.config.load(text)
    assert loaded.address_settings.get("x").auto_delete_queues_skip_usage_check is True
    assert "skip-usage-check" not in caplog.text
    with pytest.raises(ConfigError) as caught:
        journal_engine.config.load(text.replace(">true<", ">often<"))
    assert caught.value.line == 3
