"""Message priority under ActiveMQ Classic (priority order only where a policy entry says
prioritizedMessages="true"; else FIFO) and Qpid Broker-J (only on a queue declared with
x-qpid-priorities N, 0-9 mapped onto N levels as its PriorityQueueList maps them)."""
from __future__ import annotations

import pytest
from broker_queues import drain as received

from journal_engine import Broker, ClassicBrokerConfig, ConfigError, ManualClock

NOW = 1_700_000_000_000
SMALL = {"file_size": 1 << 20}
SENT = [(b"a4", 4), (b"b1", 1), (b"c9", 9), (b"d6", 6), (b"e0", 0), (b"f9", 9)]
BY_PRIORITY = [b"c9", b"f9", b"d6", b"a4", b"b1", b"e0"]
FIFO = [body for body, _ in SENT]


def activemq_xml(tmp_path, entries: str, default: str = "") -> str:
    default_entry = f"<defaultEntry>{default}</defaultEntry>" if default else ""
    path = tmp_path / "activemq.xml"
    path.write_text(f"""<beans xmlns="http://www.springframework.org/schema/beans">
<broker xmlns="http://activemq.apache.org/schema/core">
<destinationPolicy><policyMap><policyEntries>
{entries}
</policyEntries>{default_entry}</policyMap></destinationPolicy>
</broker>
</beans>""")
    return str(path)


def send_all(broker: Broker, queue: str) -> None:
    for body, priority in SENT:
        broker.send(queue, body, priority=priority)


def test_classic_orders_by_priority_only_where_the_policy_entry_says_so(tmp_path):
    config = activemq_xml(tmp_path, '<policyEntry queue="orders.>" prioritizedMessages="true"/>\n'
                                    '<policyEntry queue="plain" prioritizedMessages="false"/>\n'
                                    '<policyEntry queue="other" expireMessagesPeriod="0"/>')
    broker = Broker(tmp_path / "b", clock=ManualClock(NOW), config=config, store_options=SMALL)
    for name in ("orders.eu", "plain", "other", "unmatched"):
        broker.create_queue(name)
        send_all(broker, name)
    assert received(broker, "orders.eu") == BY_PRIORITY
    for name in ("plain", "other", "unmatched"):
        assert received(broker, name) == FIFO, name
    broker.close()


def test_classic_default_entry_applies_where_no_entry_matches(tmp_path):
    config = activemq_xml(tmp_path, '<policyEntry queue="fifo" expireMessagesPeriod="0"/>',
                          default='<policyEntry prioritizedMessages="true"/>')
    broker = Broker(clock=ManualClock(NOW), config=config)
    for name in ("fifo", "any"):
        broker.create_queue(name)
        send_all(broker, name)
    assert received(broker, "fifo") == FIFO            # its entry's default: false
    assert received(broker, "any") == BY_PRIORITY
    broker.close()


def test_classic_fifo_and_priority_queues_keep_their_order_after_a_restart(tmp_path):
    config = activemq_xml(tmp_path, '<policyEntry queue="ordered" prioritizedMessages="true"/>')
    broker = Broker(tmp_path / "b", clock=ManualClock(NOW), config=config, store_options=SMALL)
    for name in ("ordered", "fifo"):
        broker.create_queue(name)
        send_all(broker, name)
    broker.close()
    broker = Broker(tmp_path / "b", clock=ManualClock(NOW), config=config, store_options=SMALL)
    assert received(broker, "ordered") == BY_PRIORITY
    assert received(broker, "fifo") == FIFO
    broker.close()


def test_a_bad_prioritized_messages_value_is_refused(tmp_path):
    config = activemq_xml(tmp_path, '<policyEntry queue="q" prioritizedMessages="maybe"/>')
    with pytest.raises(ConfigError, match="prioritizedMessages"):
        Broker(config=config)


def test_a_classic_configuration_built_in_code():
    broker = Broker(clock=ManualClock(NOW), config=ClassicBrokerConfig(default_prioritized_messages=True))
    broker.create_queue("q")
    send_all(broker, "q")
    assert received(broker, "q") == BY_PRIORITY
    broker.close()


def test_a_qpid_queue_is_fifo_unless_declared_with_priorities():
    broker = Broker(clock=ManualClock(NOW))
    broker.create_queue("fifo", arguments={"x-qpid-maximum-delivery-count": 3})
    broker.create_queue("ten", arguments={"x-qpid-priorities": 10})
    broker.create_queue("artemis")
    for name in ("fifo", "ten", "artemis"):
        send_all(broker, name)
    assert received(broker, "fifo") == FIFO
    assert received(broker, "ten") == BY_PRIORITY
    assert received(broker, "artemis") == BY_PRIORITY
    broker.close()


def test_a_qpid_queue_of_two_levels_maps_0_to_4_low_and_5_to_9_high(tmp_path):
    broker = Broker(tmp_path / "b", clock=ManualClock(NOW), store_options=SMALL)
    broker.create_queue("two", arguments={"priorities": "2"})        # Broker-J's attribute, a string as AMQP sends
    send_all(broker, "two")
    broker.close()
    broker = Broker(tmp_path / "b", clock=ManualClock(NOW), store_options=SMALL)
    assert received(broker, "two") == [b"c9", b"d6", b"f9", b"a4", b"b1", b"e0"]
    broker.close()


def test_qpid_arguments_given_later_regroup_the_ready_messages():
    broker = Broker(clock=ManualClock(NOW))
    broker.create_queue("q", arguments={"x-qpid-dlq-enabled": False})
    send_all(broker, "q")
    broker.set_queue_arguments("q", {"x-qpid-priorities": 10})
    assert [m.body for m in broker.browse("q")] == BY_PRIORITY
    broker.set_queue_arguments("q", {"x-qpid-dlq-enabled": False})
    assert [m.body for m in broker.browse("q")] == FIFO
    broker.close()


@pytest.mark.parametrize("value", [0, 256, -1, "many", True])
def test_a_bad_qpid_priorities_argument_is_refused(value):
    broker = Broker()
    with pytest.raises(ConfigError, match="priorities"):
        broker.create_queue("q", arguments={"x-qpid-priorities": value})
    broker.close()
