"""ActiveMQ Classic scans each destination for expired messages at its own period: the policy entry's
``expireMessagesPeriod`` (PolicyEntry.configure -> BaseDestination.setExpireMessagesPeriod; default
BaseDestination.EXPIRE_MESSAGE_PERIOD = 30,000 ms), scheduled when the destination starts
(Queue.start / Topic.start: ``scheduler.executePeriodically(expireMessagesTask, period)`` only when the
period is > 0). The entry is PolicyMap.getEntryFor's: the matching entry (its own default when it does
not set the attribute), else the default entry. A scan expires what Message.isExpired says has
expired: ``now > expiration``. Time is a ManualClock; the configuration a file on disk."""
from __future__ import annotations

import pytest

from journal_engine import Broker, ConfigError, ManualClock

START = 1_700_000_000_000


def activemq_xml(tmp_path, entries: str, default: str = "") -> str:
    default_entry = f"<defaultEntry>{default}</defaultEntry>" if default else ""
    path = tmp_path / "activemq.xml"
    path.write_text(f"""<beans xmlns="http://www.springframework.org/schema/beans">
<broker xmlns="http://activemq.apache.org/schema/core">
<destinationPolicy>
<policyMap>
<policyEntries>
{entries}
</policyEntries>
{default_entry}
</policyMap>
</destinationPolicy>
</broker>
</beans>""")
    return str(path)


def dead(broker) -> list[bytes]:
    return sorted(m.body for m in broker.browse("ActiveMQ.DLQ")) if "ActiveMQ.DLQ" in broker.queue_names() else []


def test_each_destination_is_scanned_at_its_own_period(tmp_path):
    config = activemq_xml(tmp_path, '<policyEntry queue="fast" expireMessagesPeriod="1000"/>\n'
                                    '<policyEntry queue="never" expireMessagesPeriod="0"/>\n'
                                    '<policyEntry queue="slow"/>')
    clock = ManualClock(START)
    broker = Broker(clock=clock, config=config)
    for name in ("fast", "slow", "never"):
        broker.create_queue(name)
        broker.send(name, name.encode(), expiration=START + 500)
    clock.advance(1000)                          # fast's first scan
    assert dead(broker) == [b"fast"]
    clock.advance(28_999)
    assert dead(broker) == [b"fast"]
    clock.advance(1)                             # slow's first scan, at 30 s
    assert dead(broker) == [b"fast", b"slow"]
    clock.advance(10 * 30_000)                   # 0: never scanned; a consumer meeting it expires it
    assert broker.queue("never").message_count == 1
    consumer = broker.create_consumer("never")
    assert consumer.receive(0) is None
    assert dead(broker) == [b"fast", b"never", b"slow"]


def test_a_scan_expires_what_expired_before_it_not_at_it(tmp_path):
    # Message.isExpired: System.currentTimeMillis() > expireTime
    config = activemq_xml(tmp_path, '<policyEntry queue=">" expireMessagesPeriod="1000"/>')
    clock = ManualClock(START)
    broker = Broker(clock=clock, config=config)
    broker.create_queue("q")
    broker.send("q", b"at", expiration=START + 1000)
    clock.advance(1000)
    assert broker.queue("q").message_count == 1
    clock.advance(1000)
    assert dead(broker) == [b"at"]


def test_the_period_counts_from_the_destinations_start(tmp_path):
    config = activemq_xml(tmp_path, '<policyEntry queue=">" expireMessagesPeriod="1000"/>')
    clock = ManualClock(START)
    broker = Broker(clock=clock, config=config)
    clock.advance(700)
    broker.create_queue("q")                     # scans at START + 1700, 2700, ...
    broker.send("q", b"m", expiration=START + 800)
    clock.advance(999)                           # START + 1699
    assert broker.queue("q").message_count == 1
    clock.advance(1)
    assert dead(broker) == [b"m"]


def test_the_default_entry_applies_where_no_entry_matches_and_an_entry_has_its_own_default(tmp_path):
    # PolicyMap.getEntryFor: chooseValue(destination), else getDefaultEntry(); PolicyEntry's field default
    config = activemq_xml(tmp_path, '<policyEntry queue="plain"/>',
                          default='<policyEntry expireMessagesPeriod="2000"/>')
    clock = ManualClock(START)
    broker = Broker(clock=clock, config=config)
    for name in ("plain", "other"):
        broker.create_queue(name)
        broker.send(name, name.encode(), expiration=START + 1)
    clock.advance(2000)
    assert dead(broker) == [b"other"]
    clock.advance(28_000)
    assert dead(broker) == [b"other", b"plain"]


def test_a_topics_durable_subscription_is_scanned_at_the_topics_period(tmp_path):
    config = activemq_xml(tmp_path, '<policyEntry topic="news" expireMessagesPeriod="1000"/>')
    clock = ManualClock(START)
    broker = Broker(clock=clock, config=config)
    broker.create_queue("sub", address="news", routing_type="multicast")
    broker.send("news", b"n", expiration=START + 1)
    clock.advance(1000)
    assert broker.queue("sub").message_count == 0 and broker.queue("sub").messages_expired == 1


@pytest.mark.parametrize("value", ["soon", "1.5", "${period}"])
def test_a_bad_period_is_refused_with_its_line(tmp_path, value):
    config = activemq_xml(tmp_path, f'<policyEntry queue="q"\n expireMessagesPeriod="{value}"/>')
    with pytest.raises(ConfigError) as caught:
        Broker(config=config)
    assert caught.value.line == 6 and "expireMessagesPeriod" in str(caught.value)


def test_the_artemis_scan_period_is_refused_with_a_classic_configuration(tmp_path):
    config = activemq_xml(tmp_path, '<policyEntry queue="q"/>')
    with pytest.raises(ConfigError) as caught:
        Broker(config=config, message_expiry_scan_period=1000)
    assert caught.value.field == "message_expiry_scan_period"


def test_a_configuration_built_in_code_sets_the_periods():
    from journal_engine import ClassicBrokerConfig
    from journal_engine.broker.classic.destinations import QUEUE, ClassicDestinationMap
    periods = ClassicDestinationMap()
    periods.put(QUEUE, "fast", 1000)
    clock = ManualClock(START)
    broker = Broker(clock=clock, config=ClassicBrokerConfig(expire_messages_periods=periods,
                                                            default_expire_messages_period=0))
    for name in ("fast", "other"):
        broker.create_queue(name)
        broker.send(name, name.encode(), expiration=START + 1)
    clock.advance(100_000)
    assert dead(broker) == [b"fast"]
    with pytest.raises(ConfigError):
        ClassicBrokerConfig(default_expire_messages_period="30000")
