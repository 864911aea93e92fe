"""Artemis's two periodic scans: the expiry reaper (PostOfficeImpl.ExpiryReaper, every
``message-expiry-scan-period``: ActiveMQDefaultConfiguration.DEFAULT_MESSAGE_EXPIRY_SCAN_PERIOD = 30,000 ms,
-1 disables) and the address-queue reaper (PostOfficeImpl.reapAddresses, every ``address-queue-scan-period``)
deleting unused auto-created dead-letter and expiry queues (QueueConfigurationUtils.applyDynamicQueueDefaults:
``auto-delete-queues`` for auto-created queues, ``auto-delete-created-queues`` for others,
``auto-delete-queues-delay``, ``auto-delete-queues-message-count``). Time is a ManualClock."""
from __future__ import annotations

import logging

import pytest

import journal_engine.config
from journal_engine import AddressSettings, Broker, ConfigError, ManualClock

NOW = 1_700_000_000_000
SCAN = 30_000


def expiring_broker(clock, **options):
    broker = Broker(clock=clock, **options)
    broker.address_settings.add("#", AddressSettings(expiry_address="EXP"))
    broker.create_queue("orders")
    broker.create_queue("expired", address="EXP")
    return broker


# ---------------------------------------------------------------- the expiry reaper
def test_a_message_nobody_consumes_is_moved_by_the_scan_not_before():
    clock = ManualClock(NOW)
    broker = expiring_broker(clock)
    broker.send("orders", b"m", expiration=NOW + 100)
    clock.advance(SCAN - 1)                         # expired, but no scan yet: still counted on its queue
    info = broker.queue("orders")
    assert (info.message_count, info.messages_expired) == (1, 0) and broker.browse("expired") == []
    clock.advance(1)                                # the scan at NOW + 30 s
    [copy] = broker.browse("expired")
    assert copy.properties["_AMQ_ACTUAL_EXPIRY"] == NOW + SCAN
    assert broker.queue("orders").messages_expired == 1


def test_a_long_clock_move_expires_at_the_first_scan_after_the_expiration():
    clock = ManualClock(NOW)
    broker = expiring_broker(clock)
    broker.send("orders", b"a", expiration=NOW + 45_000)
    broker.send("orders", b"b", expiration=NOW + 200_000)
    clock.advance(365 * 24 * 3600 * 1000)           # a year: scans with nothing to do are skipped
    times = sorted(m.properties["_AMQ_ACTUAL_EXPIRY"] for m in broker.browse("expired"))
    assert times == [NOW + 2 * SCAN, NOW + 7 * SCAN]


def test_the_scan_period_is_a_setting():
    clock = ManualClock(NOW)
    broker = expiring_broker(clock, message_expiry_scan_period=1000)
    broker.send("orders", b"m", expiration=NOW + 1500)
    clock.advance(1999)
    assert broker.browse("expired") == []
    clock.advance(1)
    assert broker.browse("expired")[0].properties["_AMQ_ACTUAL_EXPIRY"] == NOW + 2000


def test_minus_one_disables_the_scan_and_a_consumer_meeting_the_message_expires_it():
    clock = ManualClock(NOW)
    broker = expiring_broker(clock, message_expiry_scan_period=-1)
    broker.send("orders", b"m", expiration=NOW + 100)
    clock.advance(10 * SCAN)
    assert broker.queue("orders").message_count == 1 and broker.browse("expired") == []
    assert broker.create_consumer("orders").receive(0) is None     # QueueImpl: expired at dispatch
    assert broker.browse("expired")[0].properties["_AMQ_ACTUAL_EXPIRY"] == NOW + 10 * SCAN


def test_with_the_wall_clock_a_background_scan_moves_the_message():
    # nothing calls the source queue: only the broker's scanner thread can move the message; the receive on
    # the expiry queue waits on its condition (no sleep, no polling of the broker)
    broker = Broker(message_expiry_scan_period=5)
    broker.address_settings.add("#", AddressSettings(expiry_address="EXP"))
    broker.create_queue("orders")
    broker.create_queue("expired", address="EXP")
    watcher = broker.create_consumer("expired")
    broker.send("orders", b"m", expiration=broker.clock.now_ms() + 20)
    moved = watcher.receive(timeout=10.0)
    assert moved is not None and moved.body == b"m"
    scanner = broker._scanner
    broker.close()
    assert not scanner.running


@pytest.mark.parametrize("value, message", [("0", "must be -1"), ("soon", "is not an integer"), ("-2", "must be -1")])
def test_broker_xml_scan_periods_are_read_and_bad_values_name_the_line(value, message):
    good = ("<configuration xmlns=\"urn:activemq\"><core xmlns=\"urn:activemq:core\">\n"
            "<message-expiry-scan-period>1000</message-expiry-scan-period>\n"
            "<address-queue-scan-period>-1</address-queue-scan-period>\n</core></configuration>")
    config = journal_engine.config.load(good)
    assert (config.message_expiry_scan_period, config.address_queue_scan_period) == (1000, -1)
    broker = Broker(clock=ManualClock(NOW), config=good)
    assert (broker.message_expiry_scan_period, broker.address_queue_scan_period) == (1000, -1)
    with pytest.raises(ConfigError) as caught:
        Broker(config=good, message_expiry_scan_period=5000)       # set in two places, differently
    assert "message_expiry_scan_period" in str(caught.value)
    bad = good.replace(">1000<", f">{value}<")
    with pytest.raises(ConfigError) as caught:
        journal_engine.config.load(bad)
    assert caught.value.line == 2 and message in str(caught.value)
    with pytest.raises(ConfigError):
        Broker(message_expiry_scan_period=0)


# ---------------------------------------------------------------- the address-queue reaper
def dead_lettering_broker(clock, **settings):
    broker = Broker(clock=clock)
    broker.address_settings.add("#", AddressSettings(max_delivery_attempts=1, dead_letter_address="DLA",
                                                     auto_create_dead_letter_resources=True, **settings))
    broker.create_queue("orders")
    return broker


def dead_letter_one(broker):
    broker.send("orders", b"poison")
    consumer = broker.create_consumer("orders")
    consumer.rollback(consumer.receive(0))
    consumer.close()


def test_an_auto_created_dlq_consumed_empty_is_deleted_after_two_scans_and_made_again(caplog):
    # AutoCreateDeadLetterResourcesTest#testAutoDeletionAndRecreationOfDeadLetterResources
    clock = ManualClock(NOW)
    broker = dead_lettering_broker(clock)
    dead_letter_one(broker)
    dlq = broker.create_consumer("DLQ.orders")
    dlq.ack(dlq.receive(0))
    dlq.close()
    clock.advance(SCAN)                             # the first scan marks it (swept)
    assert "DLQ.orders" in broker.queue_names()
    with caplog.at_level(logging.INFO, logger="journal_engine.broker"):
        clock.advance(SCAN)                         # the second deletes it
    assert "DLQ.orders" not in broker.queue_names() and "AMQ224112" in caplog.text
    dead_letter_one(broker)                         # and the next dead letter makes it again
    assert [m.body for m in broker.browse("DLQ.orders")] == [b"poison"]


def test_a_dlq_holding_messages_or_never_used_is_kept():
    clock = ManualClock(NOW)
    broker = dead_lettering_broker(clock)
    dead_letter_one(broker)                         # one message waits there: message count 1 > 0
    clock.advance(10 * SCAN)
    assert broker.queue("DLQ.orders").message_count == 1


def test_auto_delete_queues_false_keeps_it():
    clock = ManualClock(NOW)
    broker = dead_lettering_broker(clock, auto_delete_queues=False)
    dead_letter_one(broker)
    dlq = broker.create_consumer("DLQ.orders")
    dlq.ack(dlq.receive(0))
    dlq.close()
    clock.advance(10 * SCAN)
    assert "DLQ.orders" in broker.queue_names()


def test_the_message_count_and_the_delay():
    clock = ManualClock(NOW)
    broker = dead_lettering_broker(clock, auto_delete_queues_message_count=1, auto_delete_queues_delay=100_000)
    dead_letter_one(broker)
    dlq = broker.create_consumer("DLQ.orders")      # used (a consumer went away), one message left: <= 1
    dlq.close()
    clock.advance(3 * SCAN)                         # 90 s since the consumer left: the delay is not over
    assert "DLQ.orders" in broker.queue_names()
    clock.advance(SCAN)                             # 120 s: over at this scan, the queue is marked
    assert "DLQ.orders" in broker.queue_names()
    clock.advance(SCAN)                             # deleted, with its message
    assert "DLQ.orders" not in broker.queue_names()


def test_auto_delete_created_queues_applies_to_queues_created_by_hand():
    clock = ManualClock(NOW)
    broker = Broker(clock=clock)
    broker.address_settings.add("temp.#", AddressSettings(auto_delete_created_queues=True))
    broker.create_queue("temp.a")
    broker.create_queue("kept")
    for name in ("temp.a", "kept"):
        broker.send(name, b"x")
        consumer = broker.create_consumer(name)
        consumer.ack(consumer.receive(0))
        consumer.close()
    clock.advance(2 * SCAN)
    assert broker.queue_names() == ["kept"]


def test_an_auto_created_expiry_queue_follows_the_same_rules():
    # AutoCreateExpiryResourcesTest#testAutoDeletionAndRecreationOfExpiryResources
    clock = ManualClock(NOW)
    broker = Broker(clock=clock)
    broker.address_settings.add("#", AddressSettings(expiry_address="EXP", auto_create_expiry_resources=True))
    broker.create_queue("orders")
    broker.send("orders", b"m", expiration=NOW + 1)
    clock.advance(SCAN)
    consumer = broker.create_consumer("EXP.orders")
    consumer.ack(consumer.receive(0))
    consumer.close()
    clock.advance(2 * SCAN)
    assert "EXP.orders" not in broker.queue_names()


@pytest.mark.parametrize("element, value, message", [
    ("auto-delete-queues", "sometimes", "true or false"),
    ("auto-delete-queues-delay", "-1", "out of range"),
    ("auto-delete-queues-message-count", "-2", "out of range"),
])
def test_broker_xml_auto_delete_settings_and_bad_values_with_their_line(element, value, message):
    text = ('<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core"><address-settings>\n'
            '<address-setting match="#">\n<auto-delete-queues>false</auto-delete-queues>\n'
            '<auto-delete-created-queues>true</auto-delete-created-queues>\n'
            '<auto-delete-queues-delay>500</auto-delete-queues-delay>\n'
            '<auto-delete-queues-message-count>-1</auto-delete-queues-message-count>\n'
            '</address-setting></address-settings></core></configuration>')
    settings = journal_engine.config.load(text).address_settings.get("anything")
    assert (settings.auto_delete_queues, settings.auto_delete_created_queues, settings.auto_delete_queues_delay,
            settings.auto_delete_queues_message_count) == (False, True, 500, -1)
    line = {"auto-delete-queues": 3, "auto-delete-queues-delay": 5, "auto-delete-queues-message-count": 6}[element]
    bad = text.replace(f"<{element}>", f"<{element}>{value}<!--", 1).replace(f"</{element}>", f"--></{element}>", 1)
    with pytest.raises(ConfigError) as caught:
        journal_engine.config.load(bad)
    assert caught.value.line == line and message in str(caught.value).lower()
