"""The two redelivery extensions read from broker.xml: <redelivery-delays> (a per-attempt list, then the
formula) and <max-rollback-delay> (the cap of a consumer's rollback(message, delay_ms=...)). Their
survival of a SIGKILL with the scheduled time: tests/broker/test_broker_recovery.py."""
from __future__ import annotations

import pytest

from journal_engine import AddressSettings, Broker, ConfigError, ManualClock
from journal_engine.config import load

NOW = 1_700_000_000_000

XML = """<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <address-settings>
    <address-setting match="orders.#">
      <redelivery-delays>100, 1000 5000</redelivery-delays>
      <redelivery-delay>10000</redelivery-delay>
      <redelivery-delay-multiplier>2</redelivery-delay-multiplier>
      <max-redelivery-delay>30000</max-redelivery-delay>
      <max-rollback-delay>2000</max-rollback-delay>
    </address-setting>
  </address-settings>
</core></configuration>"""


def waits(broker: Broker, queue: str, attempts: int, delay_ms=None) -> list[int]:
    consumer = broker.create_consumer(queue)
    clock = broker.clock
    found = []
    message = consumer.receive(0)
    for _ in range(attempts):
        consumer.rollback(message, delay_ms=delay_ms)
        waited = 0
        while (message := consumer.receive(0)) is None:
            clock.advance(50)
            waited += 50
        found.append(waited)
    consumer.close()
    return found


def test_the_delay_list_then_the_formula_from_broker_xml():
    settings = load(XML).address_settings.get("orders.eu")
    assert settings.redelivery_delays == (100, 1000, 5000) and settings.max_rollback_delay == 2000
    broker = Broker(clock=ManualClock(NOW), config=XML)
    broker.create_queue("orders.eu")
    broker.send("orders.eu", b"m")
    # counts 1-3 from the list; 4 and 5 from the formula: 10000 * 2**3 and 2**4, capped at 30000
    assert waits(broker, "orders.eu", 5) == [100, 1000, 5000, 30000, 30000]


@pytest.mark.parametrize("asked, waited", [(5000, 2000), (1500, 1500), (0, 0)])
def test_a_consumers_own_delay_is_capped_by_max_rollback_delay(asked, waited):
    broker = Broker(clock=ManualClock(NOW), config=XML)
    broker.create_queue("orders.eu")
    broker.send("orders.eu", b"m")
    assert waits(broker, "orders.eu", 1, delay_ms=asked) == [waited]


def test_without_the_cap_the_consumers_delay_applies_as_asked():
    broker = Broker(clock=ManualClock(NOW))
    broker.create_queue("q")
    broker.send("q", b"m")
    assert waits(broker, "q", 1, delay_ms=60_000) == [60_000]
    assert AddressSettings().resolved().max_rollback_delay == -1


@pytest.mark.parametrize("element, value", [("max-rollback-delay", "-2"), ("max-rollback-delay", "soon"),
                                            ("redelivery-delays", "100, -1"), ("redelivery-delays", "1s")])
def test_bad_extension_values_are_named_with_their_line(element, value):
    xml = f"<configuration>\n<address-settings>\n<address-setting match='#'>\n<{element}>{value}</{element}>" \
          "</address-setting></address-settings></configuration>"
    with pytest.raises(ConfigError) as caught:
        load(xml)
    assert element in str(caught.value) and caught.value.line == 4
