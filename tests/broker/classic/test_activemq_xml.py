"""ActiveMQ Classic's activemq.xml: every configuration example of the seed's Classic page loads through
journal_engine.config.load and Broker(config=...) and behaves as its text says; hostile and wrong
files are refused, naming the element, the value and the line; what is not implemented is logged."""
from __future__ import annotations

import logging

import pytest

import journal_engine.config
from journal_engine import Broker, ConfigError, ManualClock
from journal_engine.broker.classic.dead_letter_strategy import IndividualDeadLetterStrategy, SharedDeadLetterStrategy

START = 1_700_000_000_000
SCAN = 30_000        # the expiry scan's period (Classic's expireMessagesPeriod, Artemis's message-expiry-scan-period)


def fail_once(broker, queue):
    consumer = broker.create_consumer(queue)
    consumer.rollback(consumer.receive(0))
    consumer.close()


def policy(entry: str) -> str:
    return f"""<beans xmlns="http://www.springframework.org/schema/beans">
<broker xmlns="http://activemq.apache.org/schema/core">
<destinationPolicy>
<policyMap>
<policyEntries>
{entry}
</policyEntries>
</policyMap>
</destinationPolicy>
</broker>
</beans>"""


INDIVIDUAL = policy("""<!-- Set the following policy on all queues using the '>' wildcard -->
<policyEntry queue=">">
<deadLetterStrategy>
<!--
Use the prefix 'DLQ.' for the destination name, and make
the DLQ a queue rather than a topic
-->
<individualDeadLetterStrategy queuePrefix="DLQ." useQueueForQueueMessages="true"/>
</deadLetterStrategy>
</policyEntry>""")


def dead_letter_policy(strategy: str, queue: str = ">") -> str:
    """A policy entry that gives ``queue`` (all queues by default) the dead-letter ``strategy``."""
    return policy(f"""<policyEntry queue="{queue}">
<deadLetterStrategy>
{strategy}
</deadLetterStrategy>
</policyEntry>""")


NO_EXPIRED = dead_letter_policy('<sharedDeadLetterStrategy processExpired="false" />')
NON_PERSISTENT = dead_letter_policy('<sharedDeadLetterStrategy processNonPersistent="true" />')
# the seed writes the strategy as "<.... expiration=...>": any strategy takes the attribute
DLQ_EXPIRATION = dead_letter_policy('<individualDeadLetterStrategy expiration="300000"/>',
                                    queue="QueueWhereItIsOkToExpireDLQEntries")
AUDIT = dead_letter_policy('<sharedDeadLetterStrategy enableAudit="false" maxProducersToAudit="10" '
                           'maxAuditDepth="100"/>')
DISCARDING = dead_letter_policy("<discarding/>")


def discarding_plugin(attributes: str) -> str:
    return f"""<beans>
<broker>
<plugins>
<discardingDLQBrokerPlugin {attributes}/>
</plugins>
</broker>
</beans>"""


DROP_ALL = discarding_plugin('dropAll="true" dropTemporaryTopics="true" dropTemporaryQueues="true"')
DROP_ONLY = discarding_plugin('dropOnly="MY.EXAMPLE.TOPIC.29 MY.EXAMPLE.QUEUE.87" reportInterval="1000"')
DROP_REGEX = discarding_plugin('dropOnly="MY.EXAMPLE.TOPIC.[0-9]{3} MY.EXAMPLE.QUEUE.[0-9]{3}" reportInterval="3000"')

REDELIVERY = """<broker schedulerSupport="true">
<plugins>
<redeliveryPlugin fallbackToDeadLetter="true"
sendToDlqIfMaxRetriesExceeded="true">
<redeliveryPolicyMap>
<redeliveryPolicyMap>
<redeliveryPolicyEntries>
<!-- a destination specific policy -->
<redeliveryPolicy queue="SpecialQueue"
maximumRedeliveries="4"
redeliveryDelay="10000"/>
</redeliveryPolicyEntries>

<defaultEntry>
<!-- the fallback policy for all other destinations -->
  <redeliveryPolicy maximumRedeliveries="4"
initialRedeliveryDelay="5000"
redeliveryDelay="10000"/>
</defaultEntry>
</redeliveryPolicyMap>
</redeliveryPolicyMap>
</redeliveryPlugin>
</plugins>
</broker>"""


def broker_for(text, clock=None, **options):
    return Broker(clock=clock or ManualClock(START), config=text, **options)


def test_load_recognises_classic_and_reads_the_strategy():
    config = journal_engine.config.load(INDIVIDUAL)
    assert config.system == "classic"
    from journal_engine.broker.classic.destinations import QUEUE, ClassicDestination
    strategy = config.classic.strategy_for(ClassicDestination(QUEUE, "orders"))
    assert isinstance(strategy, IndividualDeadLetterStrategy) and strategy.queue_prefix == "DLQ."


def test_seed_individual_strategy_gives_each_queue_its_dlq():
    broker = broker_for(INDIVIDUAL)
    broker.create_queue("orders")
    broker.send("orders", b"o")
    fail_once(broker, "orders")
    assert [m.body for m in broker.browse("DLQ.orders")] == [b"o"]
    broker.create_queue("sub", address="prices", routing_type="multicast")    # topics have no entry: shared
    broker.send("prices", b"p")
    fail_once(broker, "sub")
    assert [m.body for m in broker.browse("ActiveMQ.DLQ")] == [b"p"]


def test_seed_process_expired_false_discards_expired_messages():
    clock = ManualClock(START)
    broker = broker_for(NO_EXPIRED, clock)
    broker.create_queue("q")
    broker.send("q", b"e", expiration=START + 10)
    broker.send("q", b"f")
    clock.advance(10)
    assert "ActiveMQ.DLQ" not in broker.queue_names()
    fail_once(broker, "q")                  # failures still go to the DLQ
    assert [m.body for m in broker.browse("ActiveMQ.DLQ")] == [b"f"]


def test_default_process_expired_sends_expired_messages_to_the_dlq():
    clock = ManualClock(START)
    broker = broker_for("<broker/>", clock)
    broker.create_queue("q")
    broker.send("q", b"e", expiration=START + 10)
    clock.advance(SCAN)
    [dead] = broker.browse("ActiveMQ.DLQ")
    assert dead.properties["dlqDeliveryFailureCause"] == f"java.lang.Throwable: Message Expired. Expiration:{START + 10}"


def test_seed_process_non_persistent_true_dead_letters_non_persistent_messages():
    broker = broker_for(NON_PERSISTENT)
    broker.create_queue("q")
    broker.send("q", b"n", durable=False)
    fail_once(broker, "q")
    [dead] = broker.browse("ActiveMQ.DLQ")
    assert dead.properties["originalDeliveryMode"] == "NON_PERSISTENT"
    default = broker_for("<broker/>")
    default.create_queue("q")
    default.send("q", b"n", durable=False)
    fail_once(default, "q")
    assert "ActiveMQ.DLQ" not in default.queue_names()


def test_seed_dlq_expiration_applies_to_the_named_queue_only():
    clock = ManualClock(START)
    broker = broker_for(DLQ_EXPIRATION, clock)
    for name in ("QueueWhereItIsOkToExpireDLQEntries", "other"):
        broker.create_queue(name)
        broker.send(name, name.encode())
        fail_once(broker, name)
    [dead] = broker.browse("ActiveMQ.DLQ.Queue.QueueWhereItIsOkToExpireDLQEntries")
    assert dead.expiration == START + 300000
    [kept] = broker.browse("ActiveMQ.DLQ")
    assert kept.expiration == 0
    clock.advance(300000 + SCAN)            # the DLQ's scan after the expiration (Message.isExpired: now > it)
    assert broker.browse("ActiveMQ.DLQ.Queue.QueueWhereItIsOkToExpireDLQEntries") == []
    # the expired DLQ entry goes the DLQ's own way: no entry for it, so the shared DLQ (without expiry)
    moved = [m for m in broker.browse("ActiveMQ.DLQ") if m.message_id == dead.message_id]
    assert len(broker.browse("ActiveMQ.DLQ")) == 2 and moved[0].expiration == 0
    assert moved[0].properties["dlqDeliveryFailureCause"].endswith(f"Expiration:{START + 300000}")


def test_seed_audit_attributes():
    config = journal_engine.config.load(AUDIT).classic
    strategy = config.strategies.values()[0]
    assert isinstance(strategy, SharedDeadLetterStrategy)
    assert (strategy.enable_audit, strategy.max_producers_to_audit, strategy.max_audit_depth) == (False, 10, 100)


def test_seed_discarding_strategy():
    broker = broker_for(DISCARDING)
    broker.create_queue("q")
    broker.send("q", b"x")
    fail_once(broker, "q")
    assert broker.queue_names() == ["q"] and broker.queue("q").messages_dropped == 1


def test_seed_discarding_plugin_drop_all():
    broker = broker_for(DROP_ALL)
    broker.create_queue("q")
    broker.send("q", b"x")
    fail_once(broker, "q")
    assert broker.queue_names() == ["q"]


@pytest.mark.parametrize("text, dropped, kept", [
    (DROP_ONLY, ["MY.EXAMPLE.QUEUE.87"], ["MY.EXAMPLE.QUEUE.88"]),
    (DROP_REGEX, ["MY.EXAMPLE.QUEUE.087", "MY.EXAMPLE.QUEUE.999"], ["MY.EXAMPLE.QUEUE.87", "MY.EXAMPLE.QUEUE.1000"]),
])
def test_seed_discarding_plugin_drop_only_has_effect_only_with_drop_all_false(text, dropped, kept):
    # as written in the seed dropAll stays true (its default): everything is dropped
    broker = broker_for(text)
    for name in dropped + kept:
        broker.create_queue(name)
        broker.send(name, name.encode())
        fail_once(broker, name)
    assert "ActiveMQ.DLQ" not in broker.queue_names()
    explicit = broker_for(text.replace("<discardingDLQBrokerPlugin ", '<discardingDLQBrokerPlugin dropAll="false" '))
    for name in dropped + kept:
        explicit.create_queue(name)
        explicit.send(name, name.encode())
        fail_once(explicit, name)
    assert sorted(m.body.decode() for m in explicit.browse("ActiveMQ.DLQ")) == sorted(kept)


def test_seed_redelivery_plugin():
    clock = ManualClock(START)
    broker = broker_for(REDELIVERY, clock)
    broker.create_queue("SpecialQueue")
    broker.create_queue("Other")
    broker.send("SpecialQueue", b"s")
    broker.send("Other", b"o")
    fail_once(broker, "SpecialQueue")
    fail_once(broker, "Other")
    clock.advance(1000)                     # SpecialQueue's entry sets no initialRedeliveryDelay: 1000
    special = broker.create_consumer("SpecialQueue")
    assert special.receive(0).delivery_count == 2
    other = broker.create_consumer("Other")
    assert other.receive(0) is None
    clock.advance(4000)                     # the default entry: initialRedeliveryDelay 5000
    assert other.receive(0).properties["redeliveryDelay"] == 5000


def test_the_redelivery_plugin_needs_scheduler_support():
    with pytest.raises(ConfigError) as caught:
        journal_engine.config.load(REDELIVERY.replace(' schedulerSupport="true"', ""))
    assert "schedulerSupport" in str(caught.value) and caught.value.line == 1


def test_the_redelivery_delays_extension_attribute():
    text = REDELIVERY.replace('initialRedeliveryDelay="5000"', 'redeliveryDelays="2000,3000"')
    config = journal_engine.config.load(text).classic
    assert config.redelivery_plugin.default_entry.redelivery_delays == (2000, 3000)


@pytest.mark.parametrize("hostile", [
    '<?xml version="1.0"?><!DOCTYPE broker [<!ENTITY x "y">]><broker>&x;</broker>',
    '<!DOCTYPE beans SYSTEM "http://example.com/evil.dtd"><beans><broker/></beans>',
    '<!DOCTYPE b [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;&a;">]><beans><broker/></beans>',
])
def test_hostile_activemq_xml_is_refused(hostile):
    with pytest.raises(ConfigError):
        journal_engine.config.load(hostile)
    with pytest.raises(ConfigError):
        Broker(config=hostile)


@pytest.mark.parametrize("entry, attribute, value, line", [
    ('<policyEntry queue=">">\n<deadLetterStrategy>\n<sharedDeadLetterStrategy processExpired="maybe"/>'
     '</deadLetterStrategy></policyEntry>', "processExpired", "maybe", 8),
    ('<policyEntry queue=">">\n<deadLetterStrategy>\n<individualDeadLetterStrategy maxAuditDepth="0"/>'
     '</deadLetterStrategy></policyEntry>', "maxAuditDepth", 0, 8),
    ('<policyEntry queue=">">\n<deadLetterStrategy>\n<sharedDeadLetterStrategy expiration="soon"/>'
     '</deadLetterStrategy></policyEntry>', "expiration", "soon", 8),
    ('\n<policyEntry queue="a.>.b"/>', "queue", "a.>.b", 7),
])
def test_wrong_values_are_named_with_their_line(entry, attribute, value, line):
    with pytest.raises(ConfigError) as caught:
        journal_engine.config.load(policy(entry))
    assert caught.value.field.endswith(attribute) and caught.value.value == value and caught.value.line == line


def test_wrong_plugin_values_are_named_with_their_line():
    with pytest.raises(ConfigError) as caught:
        journal_engine.config.load('<broker>\n<plugins>\n<discardingDLQBrokerPlugin dropAll="false" '
                                   'dropOnly="ok [bad"/></plugins></broker>')
    assert caught.value.value == "[bad" and caught.value.line == 3
    with pytest.raises(ConfigError) as caught:
        journal_engine.config.load(REDELIVERY.replace('maximumRedeliveries="4"\ninitial', 'maximumRedeliveries="-3"\ninitial'))
    assert caught.value.field.endswith("maximumRedeliveries") and caught.value.line == 16


def test_what_is_not_implemented_is_logged_with_its_line(caplog):
    text = """<beans>
<bean id="placeholder" class="org.springframework.beans.factory.config.PropertyPlaceholderConfigurer"/>
<broker brokerName="localhost" schedulerSupport="false">
<persistenceAdapter><kahaDB directory="data"/></persistenceAdapter>
<destinationPolicy><policyMap><policyEntries>
<policyEntry queue=">" producerFlowControl="true"/>
</policyEntries></policyMap></destinationPolicy>
</broker>
</beans>"""
    with caplog.at_level(logging.WARNING, logger="journal_engine.config"):
        config = journal_engine.config.load(text)
    assert ("beans/bean", 2) in config.unimplemented
    assert ("broker/@brokerName", 3) in config.unimplemented
    assert ("broker/persistenceAdapter", 4) in config.unimplemented
    assert ("policyEntry/@producerFlowControl", 6) in config.unimplemented
    assert "line 4" in caplog.text and "persistenceAdapter" in caplog.text


def test_a_beans_file_without_a_broker_is_refused():
    with pytest.raises(ConfigError) as caught:
        journal_engine.config.load("<beans><bean id='x'/></beans>")
    assert "no <broker>" in str(caught.value)


@pytest.mark.parametrize("backend", ["journal", "lmdb"])
def test_a_classic_broker_from_a_file_restarts_with_its_dlq(tmp_path, backend):
    path = tmp_path / "activemq.xml"
    path.write_text(INDIVIDUAL)
    broker = Broker(tmp_path / "b", store=backend, clock=ManualClock(START), config=str(path))
    broker.create_queue("orders")
    sent = broker.send("orders", b"o")
    fail_once(broker, "orders")
    broker.close()
    again = Broker(tmp_path / "b", store=backend, clock=ManualClock(START), config=path)
    try:
        [dead] = again.browse("DLQ.orders")
        assert dead.message_id == sent and dead.properties["originalDestination"] == "queue://orders"
    finally:
        again.close()
