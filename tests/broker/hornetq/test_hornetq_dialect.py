"""HornetQ as HornetQ: its property names, no routing types, the FIRST origin kept on a copy of a copy
(ServerMessageImpl.setOriginalHeaders), where Artemis records the latest move; a HornetQ file naming
an element only Artemis has is read with a WARNING."""
from __future__ import annotations

import logging


from journal_engine import AddressSettings, Broker, ManualClock
from journal_engine.config import load

NOW = 1_700_000_000_000
SCAN = 30_000        # Artemis's message-expiry-scan-period: the expiry reaper runs every 30 s


def twice_dead_lettered(dialect: str) -> tuple[Broker, int, int]:
    """A message dead-lettered from "orders" to DLA (queue "dlq"), then from "dlq" to DLA2 (queue "dlq2")."""
    broker = Broker(clock=ManualClock(NOW), dialect=dialect)
    broker.address_settings.add("orders", AddressSettings(max_delivery_attempts=1, dead_letter_address="DLA"))
    broker.address_settings.add("DLA", AddressSettings(max_delivery_attempts=1, dead_letter_address="DLA2"))
    broker.create_queue("orders")
    broker.create_queue("dlq", address="DLA")
    broker.create_queue("dlq2", address="DLA2")
    original = broker.send("orders", b"m")
    consumer = broker.create_consumer("orders")
    consumer.rollback(consumer.receive(0))
    consumer.close()
    (first_copy,) = broker.browse("dlq")
    consumer = broker.create_consumer("dlq")
    consumer.rollback(consumer.receive(0))
    consumer.close()
    return broker, original, first_copy.message_id


def test_hornetq_keeps_the_first_origin_on_a_copy_of_a_copy():
    broker, original, _ = twice_dead_lettered("hornetq")
    (copy,) = broker.browse("dlq2")
    assert (copy.properties["_HQ_ORIG_ADDRESS"], copy.properties["_HQ_ORIG_QUEUE"],
            copy.properties["_HQ_ORIG_MESSAGE_ID"]) == ("orders", "orders", original)


def test_artemis_records_the_latest_move_instead():
    broker, _, first_copy = twice_dead_lettered("artemis")
    (copy,) = broker.browse("dlq2")
    assert (copy.properties["_AMQ_ORIG_ADDRESS"], copy.properties["_AMQ_ORIG_QUEUE"],
            copy.properties["_AMQ_ORIG_MESSAGE_ID"]) == ("DLA", "dlq", first_copy)


def test_hornetq_expiry_of_a_dead_letter_copy_keeps_the_first_origin_and_adds_the_expiry_time():
    broker = Broker(clock=ManualClock(NOW), dialect="hornetq")
    broker.address_settings.add("orders", AddressSettings(max_delivery_attempts=1, dead_letter_address="DLA"))
    broker.address_settings.add("DLA", AddressSettings(expiry_delay=10, expiry_address="EXP"))
    for name, address in (("orders", "orders"), ("dlq", "DLA"), ("expired", "EXP")):
        broker.create_queue(name, address=address)
    original = broker.send("orders", b"m")
    consumer = broker.create_consumer("orders")
    consumer.rollback(consumer.receive(0))
    broker.clock.advance(SCAN)
    (copy,) = broker.browse("expired")
    assert (copy.properties["_HQ_ORIG_ADDRESS"], copy.properties["_HQ_ORIG_QUEUE"],
            copy.properties["_HQ_ORIG_MESSAGE_ID"], copy.properties["_HQ_ACTUAL_EXPIRY"]) == (
        "orders", "orders", original, NOW + SCAN)
    assert copy.expiration == 0 and "_HQ_ORIG_ROUTING_TYPE" not in copy.properties


def test_a_hornetq_file_naming_an_artemis_only_element_is_read_with_a_warning(caplog):
    xml = """<configuration xmlns="urn:hornetq">
  <address-settings>
    <address-setting match="#">
      <redelivery-delay>100</redelivery-delay>
      <redelivery-collision-avoidance-factor>0.1</redelivery-collision-avoidance-factor>
    </address-setting>
  </address-settings>
  <max-redelivery-records>1</max-redelivery-records>
</configuration>"""
    with caplog.at_level(logging.WARNING, logger="journal_engine"):
        config = load(xml)
    assert config.address_settings.get("q").redelivery_collision_avoidance_factor == 0.1
    assert config.max_redelivery_records == 1
    messages = [r.getMessage() for r in caplog.records if r.name == "journal_engine.config"]
    assert len(messages) == 2
    assert "line 5" in messages[0] and "redelivery-collision-avoidance-factor" in messages[0]
    assert "line 8" in messages[1] and "max-redelivery-records" in messages[1]
    with caplog.at_level(logging.WARNING, logger="journal_engine"):
        caplog.clear()
        load(xml.replace("urn:hornetq", "urn:activemq"))        # the same in an Artemis file: no warning
    assert not caplog.records
