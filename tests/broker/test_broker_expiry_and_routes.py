"""Artemis's PostOfficeImpl.applyExpiryDelay (no-expiry, expiry-delay, min/max-expiry-delay) and
maybeSendToDLA (send-to-dla-on-no-route), and every dropped message logged at WARNING with the code of
Artemis's message for the case (AMQ222150, AMQ222148, AMQ222147, AMQ222146, AMQ222056)."""
from __future__ import annotations

import logging

import pytest

from journal_engine import AddressSettings, Broker, ManualClock

NOW = 1_700_000_000_000
SCAN = 30_000        # Artemis's message-expiry-scan-period: the expiry reaper runs every 30 s


@pytest.mark.parametrize("settings, expiration, expected", [
    # message-expiry.adoc, "Never Expire": an expiration of 10 becomes 0
    (dict(no_expiry=True), NOW + 10, 0),
    (dict(no_expiry=True, expiry_delay=10, max_expiry_delay=5), 0, 0),       # no-expiry first
    # "Modify Default Expiry": 0 -> now + 10; 20 stays
    (dict(expiry_delay=10), 0, NOW + 10),
    (dict(expiry_delay=10), NOW + 20, NOW + 20),
    (dict(expiry_delay=10, min_expiry_delay=50, max_expiry_delay=100), NOW + 500, NOW + 500),  # bounds ignored
    # "Enforce an Expiry Range": min 10, max 100
    (dict(min_expiry_delay=10, max_expiry_delay=100), 0, NOW + 100),          # without: the max
    (dict(min_expiry_delay=10), 0, NOW + 10),                                  # no max: the min
    (dict(), 0, 0),                                                             # neither: unchanged
    (dict(min_expiry_delay=10, max_expiry_delay=100), NOW + 500, NOW + 100),  # above the max
    (dict(min_expiry_delay=10, max_expiry_delay=100), NOW + 5, NOW + 10),     # below the min
    (dict(min_expiry_delay=10, max_expiry_delay=100), NOW + 50, NOW + 50),    # within
    (dict(max_expiry_delay=0), NOW + 50, NOW),                                 # max 0: expires at once
    (dict(expiry_delay=-1, min_expiry_delay=-1, max_expiry_delay=-1), NOW + 7, NOW + 7),
])
def test_expiration_for_follows_apply_expiry_delay(settings, expiration, expected):
    assert AddressSettings(**settings).expiration_for(expiration, NOW) == expected
    assert AddressSettings(**settings).resolved().expiration_for(expiration, NOW) == expected


def test_new_fields_resolve_to_artemis_defaults_and_are_checked():
    resolved = AddressSettings().resolved()
    assert (resolved.min_expiry_delay, resolved.max_expiry_delay, resolved.no_expiry,
            resolved.send_to_dla_on_no_route) == (-1, -1, False, False)
    from journal_engine import ConfigError
    with pytest.raises(ConfigError, match="min_expiry_delay"):
        AddressSettings(min_expiry_delay=-2)
    with pytest.raises(ConfigError, match="no_expiry"):
        AddressSettings(no_expiry="yes")


def broker_with(settings: dict, **options) -> Broker:
    broker = Broker(clock=ManualClock(NOW), **options)
    for match, values in settings.items():
        broker.address_settings.add(match, AddressSettings(**values))
    return broker


def test_sends_get_the_bounded_expiration_and_expire_by_it():
    broker = broker_with({"q": dict(min_expiry_delay=1000, max_expiry_delay=5000)})
    broker.create_queue("q")
    broker.send("q", b"forever")                         # no expiration -> now + 5000
    broker.send("q", b"soon", expiration=NOW + 1)        # below the min -> now + 1000
    assert [m.expiration for m in broker.browse("q")] == [NOW + 5000, NOW + 1000]
    broker.clock.advance(1000)
    assert broker.queue("q").messages_expired == 0          # expired, not yet met by the reaper's scan
    broker.clock.advance(SCAN - 1000)
    assert broker.browse("q") == [] and broker.queue("q").messages_expired == 2


def test_no_expiry_keeps_a_message_whose_ttl_passed():
    broker = broker_with({"q": dict(no_expiry=True)})
    broker.create_queue("q")
    broker.send("q", b"m", expiration=NOW + 10)
    broker.clock.advance(60_000)
    (message,) = broker.browse("q")
    assert message.expiration == 0


EXPIRING_EXPIRED = """<configuration><core>
  <address-settings>
    <address-setting match="#">
      <expiry-address>expiryQueue</expiry-address>
    </address-setting>
    <address-setting match="expiryQueue">
      <expiry-address/>
      <expiry-delay>600000</expiry-delay>
    </address-setting>
  </address-settings>
</core></configuration>"""


def test_message_expiry_manual_expiring_expired_messages(caplog):
    """message-expiry.adoc, "Expiring Expired Messages": expired messages go to expiryQueue, expire
    there after 600000 ms and are dropped, the expiry address being explicitly unset."""
    broker = Broker(clock=ManualClock(NOW), config=EXPIRING_EXPIRED)
    broker.create_queue("orders")
    broker.create_queue("expiryQueue")
    broker.send("orders", b"m", expiration=NOW + 10)
    broker.clock.advance(SCAN)                  # the reaper's first scan moves it
    (expired,) = broker.browse("expiryQueue")
    assert expired.expiration == NOW + SCAN + 600_000 and expired.properties["_AMQ_ACTUAL_EXPIRY"] == NOW + SCAN
    with caplog.at_level(logging.WARNING, logger="journal_engine"):
        broker.clock.advance(600_000)
    assert broker.browse("expiryQueue") == []
    assert broker.queue("expiryQueue").messages_dropped == 1
    (record,) = [r for r in caplog.records if r.name == "journal_engine.broker"]
    assert (record.code, record.queue, record.address, record.reason) == ("AMQ222147", "expiryQueue",
                                                                         "expiryQueue", "expired")


# ----- send-to-dla-on-no-route ----------------------------------------------------------------------------

def no_route_broker(**options) -> Broker:
    broker = broker_with({"orders.#": dict(send_to_dla_on_no_route=True, dead_letter_address="DLA")}, **options)
    broker.create_queue("dead", address="DLA")
    return broker


@pytest.mark.parametrize("dialect, prefix", [("artemis", "_AMQ_"), ("hornetq", "_HQ_")])
def test_a_message_no_queue_takes_goes_to_the_dla(dialect, prefix):
    broker = no_route_broker(dialect=dialect)
    message_id = broker.send("orders.eu", b"lost", properties={"k": 1}, expiration=NOW + 5,
                             routing_type="anycast" if dialect == "artemis" else None)
    (copy,) = broker.browse("dead")
    assert copy.message_id == message_id and copy.address == "DLA" and copy.body == b"lost"
    assert copy.properties[prefix + "ORIG_ADDRESS"] == "orders.eu"
    assert copy.properties[prefix + "ORIG_MESSAGE_ID"] == message_id
    assert prefix + "ORIG_QUEUE" not in copy.properties
    assert copy.properties["_JE_DEAD_LETTER_REASON"] == "no-route" and copy.properties["k"] == 1
    assert copy.expiration == 0
    if dialect == "artemis":
        assert copy.properties["_AMQ_ORIG_ROUTING_TYPE"] == 1
    assert broker.stats()["unrouted"] == 0


def test_a_message_every_filter_refuses_goes_to_the_dla_too():
    broker = no_route_broker()
    broker.create_queue("orders.big", filter="amount > 100")
    broker.send("orders.big", b"small", properties={"amount": 5})
    broker.send("orders.big", b"big", properties={"amount": 500})
    assert [m.body for m in broker.browse("orders.big")] == [b"big"]
    assert [m.body for m in broker.browse("dead")] == [b"small"]


def test_without_the_setting_an_unrouted_message_is_dropped_quietly(caplog):
    broker = broker_with({})
    with caplog.at_level(logging.DEBUG, logger="journal_engine"):
        broker.send("nowhere", b"m")
    assert broker.stats()["unrouted"] == 1
    assert [r.levelno for r in caplog.records if r.name == "journal_engine.broker"] == [logging.DEBUG]


def test_no_dla_configured_is_logged_as_amq222056(caplog):
    broker = broker_with({"#": dict(send_to_dla_on_no_route=True)})
    with caplog.at_level(logging.WARNING, logger="journal_engine"):
        message_id = broker.send("nowhere", b"m")
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and record.code == "AMQ222056"
    assert (record.address, record.reason, record.message_id, record.queue) == ("nowhere", "no-route",
                                                                               message_id, None)
    assert "nowhere" in record.getMessage() and "no-route" in record.getMessage()
    assert broker.stats()["unrouted"] == 1


def test_a_dla_without_queues_drops_the_unrouted_message_with_a_warning(caplog):
    broker = broker_with({"#": dict(send_to_dla_on_no_route=True, dead_letter_address="DLA")})
    with caplog.at_level(logging.WARNING, logger="journal_engine"):
        broker.send("nowhere", b"m")
    (record,) = caplog.records
    assert record.reason == "no-route" and "DLA" in record.getMessage()
    assert broker.stats()["unrouted"] == 1


def test_the_dla_copy_gets_the_dla_expiry_rules():
    broker = no_route_broker()
    broker.address_settings.add("DLA", AddressSettings(expiry_delay=1000))
    broker.send("orders.x", b"m")
    (copy,) = broker.browse("dead")
    assert copy.expiration == NOW + 1000


def test_an_unrouted_durable_message_in_the_dla_survives_a_restart_and_transactions_hold_it(tmp_path):
    directory = tmp_path / "b"
    broker = Broker(directory, clock=ManualClock(NOW))
    broker.address_settings.add("orders.#", AddressSettings(send_to_dla_on_no_route=True, dead_letter_address="DLA"))
    broker.create_queue("dead", address="DLA")
    first = broker.send("orders.a", b"a")
    session = broker.create_session()
    second = session.send("orders.b", b"b")
    assert [m.message_id for m in broker.browse("dead")] == [first]      # not before the commit
    session.commit()
    broker.close()
    broker = Broker(directory, clock=ManualClock(NOW))
    assert [(m.message_id, m.properties["_AMQ_ORIG_ADDRESS"]) for m in broker.browse("dead")] == \
        [(first, "orders.a"), (second, "orders.b")]
    broker.close()


# ----- drops are logged ---------------------------------------------------------------------------------

def fail_until_dead(broker: Broker, queue: str) -> None:
    consumer = broker.create_consumer(queue)
    while (message := consumer.receive(0)) is not None:
        consumer.rollback(message, delay_ms=0)


def test_dead_letter_without_a_dla_is_logged_as_amq222150(caplog):
    broker = broker_with({"orders": dict(max_delivery_attempts=2)})
    broker.create_queue("orders")
    message_id = broker.send("orders", b"m")
    with caplog.at_level(logging.WARNING, logger="journal_engine"):
        fail_until_dead(broker, "orders")
    (record,) = caplog.records
    assert (record.code, record.queue, record.address, record.reason, record.message_id) == (
        "AMQ222150", "orders", "orders", "max-delivery-attempts", message_id)
    assert "'orders'" in record.getMessage() and "max-delivery-attempts" in record.getMessage()
    info = broker.queue("orders")
    assert (info.messages_killed, info.messages_dropped) == (1, 1)


@pytest.mark.parametrize("dla", ["DLA", ""])
def test_dead_letter_to_a_dla_without_queues_is_logged_as_amq222148(caplog, dla):
    broker = broker_with({"orders": dict(max_delivery_attempts=1, dead_letter_address=dla)})
    broker.create_queue("orders")
    broker.send("orders", b"m")
    with caplog.at_level(logging.WARNING, logger="journal_engine"):
        fail_until_dead(broker, "orders")
    (record,) = caplog.records
    assert (record.code, record.queue, record.reason) == ("AMQ222148", "orders", "max-delivery-attempts")
    assert broker.queue("orders").messages_dropped == 1


def test_expiry_to_an_address_without_queues_is_logged_as_amq222146(caplog):
    broker = broker_with({"orders": dict(expiry_address="EXP")})
    broker.create_queue("orders")
    broker.send("orders", b"m", expiration=NOW + 1)
    with caplog.at_level(logging.WARNING, logger="journal_engine"):
        broker.clock.advance(SCAN)
        broker.queue("orders")
    (record,) = caplog.records
    assert (record.code, record.queue, record.address, record.reason) == ("AMQ222146", "orders", "orders", "expired")
    assert "'EXP'" in record.getMessage()
    info = broker.queue("orders")
    assert (info.messages_expired, info.messages_dropped) == (1, 1)
