"""Every Artemis and HornetQ configuration example of their manuals (Artemis's and
HornetQ's "Message Redelivery and Undelivered Messages" chapters) read from broker.xml or
hornetq-configuration.xml and run: each behaves as its text says."""
from __future__ import annotations

import random

import pytest

from journal_engine import Broker, ManualClock
from journal_engine.config import load
from scripted_random import ScriptedRandom
from test_wildcard_and_settings import MANUAL_DELAY_EXAMPLE

NOW = 1_700_000_000_000


def artemis(settings: str, core: str = "") -> str:
    return (f'<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">{core}'
            f"<address-settings>{settings}</address-settings></core></configuration>")


def hornetq(settings: str, top: str = "") -> str:
    return f'<configuration xmlns="urn:hornetq">{top}<address-settings>{settings}</address-settings></configuration>'


def assert_redelivery_waits(broker: Broker, queue: str, waits: list[int]) -> None:
    """Each rollback of the queue's message is redelivered exactly ``wait`` ms later (not 1 ms before),
    while another message sent meanwhile is delivered at once ("other subsequent messages will be
    delivered regularly")."""
    consumer = broker.create_consumer(queue)
    clock = broker.clock
    message = consumer.receive(0)
    for wait in waits:
        consumer.rollback(message)
        other = broker.send(queue, b"other")
        passing = consumer.receive(0)
        assert passing.message_id == other
        consumer.ack(passing)
        clock.advance(wait - 1)
        assert consumer.receive(0) is None
        clock.advance(1)
        message = consumer.receive(0)
        assert message is not None and message.redelivered
    consumer.ack(message)


# ----- HornetQ's chapter ---------------------------------------------------------------------------------

HORNETQ_DELAY = hornetq("""
<!-- delay redelivery of messages for 5s -->
<address-setting match="jms.queue.exampleQueue">
<!-- default is 1.0 -->
<redelivery-delay-multiplier>1.5</redelivery-delay-multiplier>
<!-- default is 0 (no delay) -->
<redelivery-delay>5000</redelivery-delay>
<!-- default is redelivery-delay * 10 -->
<max-redelivery-delay>50000</max-redelivery-delay>
</address-setting>""")


def test_hornetq_delayed_redelivery_example():
    broker = Broker(clock=ManualClock(NOW), config=HORNETQ_DELAY, jms_queue_names=True)
    assert broker.dialect == "hornetq"
    broker.create_queue("exampleQueue")                 # jms.queue.exampleQueue
    broker.send("exampleQueue", b"m")
    assert_redelivery_waits(broker, "exampleQueue", [5000, 7500, 11250, 16875, 25312, 37968, 50000, 50000])


def test_hornetq_max_redelivery_delay_defaults_to_ten_times_the_delay():
    config = load(hornetq('<address-setting match="#"><redelivery-delay>700</redelivery-delay></address-setting>'))
    assert config.address_settings.get("jms.queue.x").max_redelivery_delay == 7000


HORNETQ_DLA = hornetq("""
<!-- undelivered messages in exampleQueue will be sent to the dead letter address
deadLetterQueue after 3 unsuccessful delivery attempts -->
<address-setting match="jms.queue.exampleQueue">
<dead-letter-address>jms.queue.deadLetterQueue</dead-letter-address>
<max-delivery-attempts>3</max-delivery-attempts>
</address-setting>""")


def test_hornetq_dead_letter_example_and_its_properties():
    broker = Broker(clock=ManualClock(NOW), config=HORNETQ_DLA, jms_queue_names=True)
    broker.create_queue("exampleQueue")
    broker.create_queue("deadLetterQueue")
    original = broker.send("exampleQueue", b"m")
    consumer = broker.create_consumer("exampleQueue")
    for _ in range(3):                                   # 3 unsuccessful attempts
        consumer.rollback(consumer.receive(0))
    assert consumer.receive(0) is None
    (dead,) = broker.browse("deadLetterQueue")
    assert dead.properties["_HQ_ORIG_ADDRESS"] == "jms.queue.exampleQueue"     # a String: the original address
    assert dead.properties["_HQ_ORIG_QUEUE"] == "jms.queue.exampleQueue"       # the original queue
    assert dead.properties["_HQ_ORIG_MESSAGE_ID"] == original
    assert not any(name.startswith("_AMQ_") for name in dead.properties)


@pytest.mark.parametrize("xml, attempts, removed", [
    # "If a dead-letter-address is not specified, messages will removed after max-delivery-attempts"
    (hornetq('<address-setting match="#"><max-delivery-attempts>3</max-delivery-attempts></address-setting>'),
     3, True),
    # "By default, messages are redelivered 10 times at the maximum"
    (hornetq('<address-setting match="#"><redelivery-delay>0</redelivery-delay></address-setting>'), 10, True),
    # "Set max-delivery-attempts to -1 for infinite redeliveries" (a DLA set globally, -1 for one address)
    (hornetq('<address-setting match="#"><dead-letter-address>jms.queue.dlq</dead-letter-address>'
             '</address-setting><address-setting match="jms.queue.exampleQueue">'
             '<max-delivery-attempts>-1</max-delivery-attempts></address-setting>'), 50, False),
])
def test_hornetq_removal_after_max_delivery_attempts(xml, attempts, removed):
    broker = Broker(clock=ManualClock(NOW), config=xml, jms_queue_names=True)
    broker.create_queue("exampleQueue")
    broker.create_queue("dlq")
    broker.send("exampleQueue", b"m")
    consumer = broker.create_consumer("exampleQueue")
    for _ in range(attempts - 1):
        consumer.rollback(consumer.receive(0))
    last = consumer.receive(0)
    assert last.delivery_count == attempts
    consumer.rollback(last)
    assert (broker.queue("exampleQueue").message_count == 0) is removed
    assert broker.browse("dlq") == []                    # removed means dropped, not moved


def test_hornetq_persist_delivery_count_before_delivery(tmp_path):
    xml = hornetq("", top="<persist-delivery-count-before-delivery>true</persist-delivery-count-before-delivery>")
    broker = Broker(tmp_path / "b", clock=ManualClock(NOW), config=xml)
    assert broker.persist_delivery_count_before_delivery is True
    broker.create_queue("q")
    broker.send("q", b"m")
    broker.create_consumer("q").receive(0)              # delivered, the server "crashes" (no rollback)
    broker.store.sync()
    broker.close()
    broker = Broker(tmp_path / "b", clock=ManualClock(NOW), config=xml)
    message = broker.create_consumer("q").receive(0)
    assert (message.delivery_count, message.redelivered) == (2, True)   # redelivered true, as it should be
    broker.close()


# ----- Artemis's chapter ---------------------------------------------------------------------------------

ARTEMIS_DELAY = artemis(MANUAL_DELAY_EXAMPLE)        # the chapter's example, as test_wildcard_and_settings reads it


def test_artemis_delayed_redelivery_example_with_collision_avoidance():
    config = load(ARTEMIS_DELAY)
    settings = config.address_settings.get("exampleQueue")
    rng = random.Random(7)
    for count in range(1, 12):
        nominal = min(int(5000 * 1.5 ** (count - 1)), 50000)
        delay = settings.redelivery_delay_for(count, rng)
        assert nominal * 0.85 - 1 <= delay <= min(nominal * 1.15, 50000)    # the cap is never exceeded
        assert delay <= 50000


def worked_example(delay: int, multiplier: float, longest: int, factor: float) -> str:
    """The broker.xml of one of the chapter's worked examples (redelivery-delay=..., ... as it lists them)."""
    return artemis(f"""<address-setting match="exampleQueue">
        <redelivery-delay>{delay}</redelivery-delay><redelivery-delay-multiplier>{multiplier}</redelivery-delay-multiplier>
        <max-redelivery-delay>{longest}</max-redelivery-delay>
        <redelivery-collision-avoidance-factor>{factor}</redelivery-collision-avoidance-factor>
        </address-setting>""")


def test_artemis_worked_example_5000_times_2_capped_at_15000():
    broker = Broker(clock=ManualClock(NOW), config=worked_example(5000, 2, 15000, 0.0))
    broker.create_queue("exampleQueue")
    broker.send("exampleQueue", b"m")
    assert_redelivery_waits(broker, "exampleQueue", [5000, 10000, 15000])


def test_artemis_collision_avoidance_worked_example():
    """delay 1000, multiplier 1, max 15000, factor 0.5 with the manual's draws: 875, 1375, 975."""
    xml = worked_example(1000, 1, 15000, 0.5)

    # sign below 0.5 is +, else -; then the magnitude
    broker = Broker(clock=ManualClock(NOW), config=xml, rng=ScriptedRandom([0.9, 0.25, 0.1, 0.75, 0.9, 0.05]))
    broker.create_queue("exampleQueue")
    broker.send("exampleQueue", b"m")
    assert_redelivery_waits(broker, "exampleQueue", [875, 1375, 975])


ARTEMIS_DLA = artemis("""
<!-- undelivered messages in exampleQueue will be sent to the dead letter address
deadLetterQueue after 3 unsuccessful delivery attempts -->
<address-setting match="exampleQueue">
   <dead-letter-address>deadLetterQueue</dead-letter-address>
   <max-delivery-attempts>3</max-delivery-attempts>
</address-setting>""")


def test_artemis_dead_letter_example():
    broker = Broker(clock=ManualClock(NOW), config=ARTEMIS_DLA)
    broker.create_queue("exampleQueue")
    broker.create_queue("deadLetterQueue")
    original = broker.send("exampleQueue", b"m")
    consumer = broker.create_consumer("exampleQueue")
    for _ in range(3):
        consumer.rollback(consumer.receive(0))
    (dead,) = broker.browse("deadLetterQueue")
    assert (dead.properties["_AMQ_ORIG_ADDRESS"], dead.properties["_AMQ_ORIG_QUEUE"],
            dead.properties["_AMQ_ORIG_MESSAGE_ID"]) == ("exampleQueue", "exampleQueue", original)
    assert broker.queue("exampleQueue").message_count == 0


ARTEMIS_AUTO_CREATE = artemis("""
<address-setting match="#">
   <dead-letter-address>DLA</dead-letter-address>
   <max-delivery-attempts>3</max-delivery-attempts>
   <auto-create-dead-letter-resources>true</auto-create-dead-letter-resources>
   <dead-letter-queue-prefix></dead-letter-queue-prefix> <!-- override the default -->
   <dead-letter-queue-suffix>.DLQ</dead-letter-queue-suffix>
</address-setting>""")


def test_artemis_automatically_created_dead_letter_resources_example():
    """A message sent to stocks that fails ends in the auto-created multicast queue stocks.DLQ on DLA,
    filtered on _AMQ_ORIG_ADDRESS; orders' in orders.DLQ."""
    broker = Broker(clock=ManualClock(NOW), config=ARTEMIS_AUTO_CREATE)
    for address in ("stocks", "orders"):
        broker.create_queue(address)
        broker.send(address, address.encode())
        consumer = broker.create_consumer(address)
        for _ in range(3):
            consumer.rollback(consumer.receive(0))
        consumer.close()
    for address in ("stocks", "orders"):
        info = broker.queue(f"{address}.DLQ")
        assert (info.address, info.routing_type, info.filter) == ("DLA", "multicast",
                                                                  f"_AMQ_ORIG_ADDRESS = '{address}'")
        assert [m.body for m in broker.browse(f"{address}.DLQ")] == [address.encode()]


def test_artemis_persist_delivery_count_and_max_redelivery_records(tmp_path):
    """broker.xml's persist-delivery-count-before-delivery true, and the recommended max-redelivery-records 1."""
    xml = artemis("", core="<persist-delivery-count-before-delivery>true</persist-delivery-count-before-delivery>"
                           "<max-redelivery-records>1</max-redelivery-records>")
    broker = Broker(tmp_path / "b", clock=ManualClock(NOW), config=xml)
    assert (broker.persist_delivery_count_before_delivery, broker.max_redelivery_records) == (True, 1)
    broker.create_queue("q")
    broker.send("q", b"m")
    consumer = broker.create_consumer("q")
    for _ in range(3):
        consumer.rollback(consumer.receive(0))
    assert broker.store.record_count(34) == 1           # counts above 1 are not written
    broker.close()
