"""ActiveMQ Classic's producer audit (a destination policy's enableAudit): with a Classic activemq.xml, a
message whose JMSMessageID (producer id + producer sequence number) its destination's audit window holds
is not routed. Each rule cites where Classic states it (apache/activemq, activemq-client and
activemq-broker; the per-destination-policies page of the Classic documentation)."""
from __future__ import annotations

import pytest
from broker_queues import drain as _drain

from journal_engine import Broker, ConfigError
from journal_engine.broker.classic.destinations import QUEUE, TOPIC, ClassicDestination
from journal_engine.broker.classic.producer_audit import (AuditPolicy, DestinationAudit, ProducerWindow,
                                                          parse_message_id, window_words)
from journal_engine.limits import CLASSIC_AUDIT_DEPTH_MAX, CLASSIC_AUDIT_PRODUCERS_MAX

SMALL_FILE = 1 << 20


def _id(sequence: int, producer: int = 1, connection: str = "ID:host-41234-1700000000000-1:1") -> dict:
    """A message's properties carrying Classic's MessageId text: connection:session:producer:sequence."""
    return {"JMSMessageID": f"{connection}:1:{producer}:{sequence}"}


def _xml(entries: str = "", default: str | None = None) -> str:
    default_entry = f"<defaultEntry><policyEntry {default}/></defaultEntry>" if default is not None else ""
    return (f'<beans><broker xmlns="http://activemq.apache.org/schema/core"><destinationPolicy><policyMap>'
            f"<policyEntries>{entries}</policyEntries>{default_entry}</policyMap></destinationPolicy></broker></beans>")


# ------------------------------------------------------------------------------------ the id and the window
pure = pytest.mark.same_on_both


@pure
def test_the_message_id_splits_at_its_last_colons_as_message_id_and_producer_id_parse_it():
    # MessageId.setValue: the text after the last ':' is producerSequenceId (Long.parseLong), the rest the
    # ProducerId; ProducerId(String): the last word its value, the one before its sessionId, the rest its
    # connectionId; ProducerId.equals compares the three, numbers as longs
    assert parse_message_id("ID:host-1-2-3:7:1:2:42") == (("ID:host-1-2-3:7", 1, 2), 42)
    assert parse_message_id("ID:host-1-2-3:7:01:002:42")[0] == parse_message_id("ID:host-1-2-3:7:1:2:9")[0]
    assert parse_message_id("producer:5") == (("producer", 0, 0), 5)      # no session or producer word: 0


@pure
@pytest.mark.parametrize("text", ["no-colon", "ID:a:1:1:x", "ID:a:1:x:5", "ID:a:1:1:-3", "ID:a:1:1:",
                                  f"ID:a:1:1:{1 << 63}", 42, b"ID:a:1:1:1"])
def test_a_message_id_classic_cannot_parse_is_a_config_error_naming_the_property(text):
    # MessageId.setValue throws NumberFormatException without ':' or with a non-number; a negative sequence
    # is refused here (a producer counts from 1; BitArrayBin's arithmetic is undefined below 0)
    with pytest.raises(ConfigError, match="JMSMessageID"):
        parse_message_id(text)


@pure
@pytest.mark.parametrize("depth, words", [(0, 1), (62, 1), (63, 2), (2048, 33), (10_000, 157)])
def test_a_window_is_whole_64_bit_words_never_fewer_than_one(depth, words):
    # BitArrayBin(windowSize): maxNumberOfArrays = ((windowSize + 1) / BitArray.LONG_SIZE) + 1, at least 1
    assert window_words(depth) == words


@pure
def test_the_window_starts_64_aligned_slides_by_words_and_forgets_what_it_leaves():
    # BitArrayBin.getBin: the first index sets longFirstIndex = index - index % 64; an index past the last
    # word removes words from the front (longFirstIndex += 64 each); setBit returns the bit's old value
    # (BitArray.set), and an index before the window has no BitArray: setBit returns false, sets nothing
    window = ProducerWindow(0)                  # one word: ids 64..127 once 100 is seen
    assert not window.record(100) and window.record(100)
    assert not window.record(64) and window.record(64)
    assert not window.record(63) and not window.record(63)         # before the window: never a duplicate
    assert not window.record(128)                                   # slides one word: now 128..191
    assert not window.seen(100) and not window.record(100)          # left behind: forgotten, not kept
    assert window.record(128) and not window.record(1_000_000)      # a long jump empties the window
    assert not window.seen(128)


@pure
def test_the_least_recently_used_producer_is_forgotten_past_max_producers():
    # ActiveMQMessageAuditNoSync: map = LRUCache(0, maximumNumberOfProducersToTrack, 0.75f, true), access
    # ordered; LRUCache.removeEldestEntry evicts when size() > maxCacheSize
    audit = DestinationAudit(depth=2048, producers_max=2)
    assert not audit.is_duplicate("p", 1) and not audit.is_duplicate("q", 1)
    assert audit.is_duplicate("p", 1)           # p used: q is now the eldest
    assert not audit.is_duplicate("r", 1)       # a third producer: q is forgotten
    assert not audit.is_duplicate("q", 1) and audit.is_duplicate("r", 1)
    none_kept = DestinationAudit(depth=2048, producers_max=0)      # the new window is its own eldest
    assert not none_kept.is_duplicate("p", 1) and not none_kept.is_duplicate("p", 1)


@pure
def test_the_window_a_destination_audits_with():
    # PolicyEntry.baseConfiguration: destination.setEnableAudit(enableAudit), setMaxAuditDepth(
    # getMaxQueueAuditDepth()), setMaxProducersToAudit; defaults enableAudit=true, maxQueueAuditDepth and
    # maxAuditDepth = BaseDestination.MAX_AUDIT_DEPTH (10000), maxProducersToAudit = MAX_PRODUCERS_TO_AUDIT
    # (64). With no entry: BaseDestination's fields (enableAudit=true, maxAuditDepth=2048,
    # maxProducersToAudit=1024). TopicSubscription: enableAudit=false unless an entry sets it (PolicyEntry.
    # configure(..., TopicSubscription): if (enableAudit) { ... setMaxAuditDepth(maxAuditDepth) })
    queue, topic = ClassicDestination(QUEUE, "orders"), ClassicDestination(TOPIC, "prices")
    assert AuditPolicy.window_for(None, queue) == (2048, 1024)
    assert AuditPolicy.window_for(AuditPolicy(), queue) == (10_000, 64)
    assert AuditPolicy.window_for(AuditPolicy(max_audit_depth=5, max_queue_audit_depth=7), queue) == (7, 64)
    assert AuditPolicy.window_for(AuditPolicy(enable_audit=False), queue) is None
    assert AuditPolicy.window_for(None, topic) is None
    assert AuditPolicy.window_for(AuditPolicy(max_audit_depth=5, max_producers_to_audit=3), topic) == (5, 3)


@pure
@pytest.mark.parametrize("attribute, high", [("maxAuditDepth", CLASSIC_AUDIT_DEPTH_MAX),
                                             ("maxQueueAuditDepth", CLASSIC_AUDIT_DEPTH_MAX),
                                             ("maxProducersToAudit", CLASSIC_AUDIT_PRODUCERS_MAX)])
def test_audit_limits_are_taken_at_their_maximum_and_refused_past_it(attribute, high):
    Broker(config=_xml(f'<policyEntry queue=">" {attribute}="{high}"/>')).close()
    for bad in (high + 1, -1):
        with pytest.raises(ConfigError, match=f"policyEntry/@{attribute}"):
            Broker(config=_xml(f'<policyEntry queue=">" {attribute}="{bad}"/>'))
    with pytest.raises(ConfigError, match="policyEntry/@enableAudit"):
        Broker(config=_xml('<policyEntry queue=">" enableAudit="yes"/>'))
    field = {"maxAuditDepth": "max_audit_depth", "maxQueueAuditDepth": "max_queue_audit_depth",
             "maxProducersToAudit": "max_producers_to_audit"}[attribute]
    assert getattr(AuditPolicy(**{field: high}), field) == high          # built in code: the same bounds
    with pytest.raises(ConfigError, match=field):
        AuditPolicy(**{field: high + 1})


# ------------------------------------------------------------------------------------ the broker
@pytest.fixture(params=["journal", "lmdb"])
def store(request):
    if request.param == "lmdb":
        pytest.importorskip("lmdb", reason="the lmdb extra (pip install '.[lmdb]') is not installed")
    return request.param


def _broker(tmp_path, store, config):
    return Broker(tmp_path / "broker", store=store, sync="none", config=config,
                  store_options={"file_size": SMALL_FILE})


def test_a_resent_message_id_is_dropped_and_stores_nothing(tmp_path, store):
    # AbstractStoreCursor.recoverMessage: recordUniqueId(messageId) false -> "cursor got duplicate send",
    # the duplicate removed (duplicate(message)); the documentation's enableAudit: "the broker will track
    # duplicate messages"; default true (PolicyEntry.enableAudit)
    broker = _broker(tmp_path, store, _xml('<policyEntry queue="orders"/>'))
    broker.create_queue("orders")
    assert broker.send("orders", b"first", properties=_id(1)) is not None
    records = broker.store.stats()
    assert broker.send("orders", b"again", properties=_id(1)) is None
    assert broker.store.stats() == records and broker.stats()["duplicates"] == 1
    assert broker.send("orders", b"other producer", properties=_id(1, producer=2)) is not None
    assert broker.send("orders", b"no id") is not None and broker.send("orders", b"no id") is not None
    assert _drain(broker, "orders") == [b"first", b"other producer", b"no id", b"no id"]
    # consumed or not, the id stays in the window (the cursor never rolls the audit back on an ack)
    assert broker.send("orders", b"after the ack", properties=_id(1)) is None
    broker.close()


def test_the_window_is_the_policy_entrys_or_the_destinations_own(tmp_path, store):
    # with an entry: maxQueueAuditDepth 10000 -> 157 words (10048 ids); with none: 2048 -> 33 words (2112)
    broker = _broker(tmp_path, store, _xml('<policyEntry queue="audited"/>'))
    for queue, first_forgetting in (("audited", 157 * 64), ("plain", 33 * 64)):
        broker.create_queue(queue)
        assert broker.send(queue, b"1", properties=_id(1)) is not None
        assert broker.send(queue, b"last", properties=_id(first_forgetting - 1)) is not None
        assert broker.send(queue, b"1", properties=_id(1)) is None          # still in the window
        assert broker.send(queue, b"slides", properties=_id(first_forgetting)) is not None
        assert broker.send(queue, b"1", properties=_id(1)) is not None       # left behind: let through
    broker.close()


def test_enable_audit_false_and_max_producers_zero_let_duplicates_through(tmp_path, store):
    # PolicyEntry enableAudit="false": recordUniqueId returns true without an audit; maxProducersToAudit 0:
    # the LRUCache evicts every new producer's window at once
    broker = _broker(tmp_path, store, _xml('<policyEntry queue="off" enableAudit="false"/>'
                                           '<policyEntry queue="none" maxProducersToAudit="0"/>'))
    for queue in ("off", "none"):
        broker.create_queue(queue)
        assert broker.send(queue, b"a", properties=_id(1)) is not None
        assert broker.send(queue, b"a", properties=_id(1)) is not None
        assert _drain(broker, queue) == [b"a", b"a"]
    broker.close()


def test_a_topic_audits_only_under_an_entry_with_its_max_audit_depth(tmp_path, store):
    # TopicSubscription.enableAudit defaults to false; PolicyEntry.configure(TopicSubscription) turns it on
    # with maxAuditDepth (not maxQueueAuditDepth)
    broker = _broker(tmp_path, store, _xml('<policyEntry topic="audited" maxAuditDepth="0" maxQueueAuditDepth="100000"/>'))
    for topic in ("audited", "plain"):
        broker.create_queue(topic + ".sub", address=topic, routing_type="multicast")
    assert [broker.send("plain", b"p", properties=_id(1)) is None for _ in range(2)] == [False, False]
    assert [broker.send("audited", b"a", properties=_id(n)) is None for n in (1, 1, 64, 1)] == [False, True, False,
                                                                                                 False]
    assert _drain(broker, "plain.sub") == [b"p", b"p"] and len(_drain(broker, "audited.sub")) == 3
    broker.close()


def test_a_transacted_duplicate_is_dropped_and_a_rolled_back_send_is_not_remembered(tmp_path, store):
    # Queue's sends in a transaction reach the cursor (and its audit) after the commit; a duplicate is
    # dropped there without failing the transaction; a rolled-back send never reaches the cursor
    broker = _broker(tmp_path, store, _xml())
    broker.create_queue("orders")
    session = broker.create_session(transacted=True)
    assert session.send("orders", b"1", properties=_id(1)) is not None
    assert session.send("orders", b"1 again", properties=_id(1)) is None
    session.commit()
    assert broker.send("orders", b"1 resent", properties=_id(1)) is None
    assert session.send("orders", b"2", properties=_id(2)) is not None
    session.rollback()
    assert session.send("orders", b"2", properties=_id(2)) is not None
    session.commit()
    assert _drain(broker, "orders") == [b"1", b"2"] and broker.stats()["duplicates"] == 2
    broker.close()


def test_the_audit_is_in_memory_a_restart_forgets_it(tmp_path, store):
    # ActiveMQMessageAudit is a field of the cursor, made when it starts (AbstractPendingMessageCursor.start)
    broker = _broker(tmp_path, store, _xml())
    broker.create_queue("orders")
    broker.send("orders", b"1", properties=_id(1))
    assert _drain(broker, "orders") == [b"1"]
    broker.close()
    broker = _broker(tmp_path, store, _xml())
    assert broker.send("orders", b"1 after the restart", properties=_id(1)) is not None
    assert broker.send("orders", b"twice", properties=_id(1)) is None
    broker.close()


def test_a_deleted_destination_takes_its_audit_with_it(tmp_path, store):
    # the audit belongs to the destination's cursor (Queue.initialize: messages.setEnableAudit ...): a queue
    # made again is a new destination with a new cursor, its audit empty
    broker = _broker(tmp_path, store, _xml())
    broker.create_queue("orders")
    assert broker.send("orders", b"1", properties=_id(1)) is not None
    broker.delete_queue("orders")
    broker.create_queue("orders")
    assert broker.send("orders", b"1 to the new queue", properties=_id(1)) is not None
    assert broker.send("orders", b"and again", properties=_id(1)) is None
    broker.close()


def test_without_a_classic_configuration_jms_message_id_is_an_ordinary_property(tmp_path, store):
    broker = Broker(tmp_path / "broker", store=store, sync="none", store_options={"file_size": SMALL_FILE})
    broker.create_queue("orders")
    assert None not in [broker.send("orders", b"x", properties=_id(1)) for _ in range(2)]
    broker.close()


def test_a_bad_message_id_under_classic_is_a_config_error(tmp_path, store):
    broker = _broker(tmp_path, store, _xml())
    broker.create_queue("orders")
    with pytest.raises(ConfigError, match="JMSMessageID"):
        broker.send("orders", b"x", properties={"JMSMessageID": "not-a-message-id"})
    assert broker.queue("orders").message_count == 0
    broker.close()


def test_the_dead_letter_audit_keys_a_message_by_its_message_id(tmp_path, store):
    # AbstractDeadLetterStrategy.isSendToDeadLetterQueue: messageAudit.isDuplicate(message), keyed by the
    # message's MessageId (ActiveMQMessageAuditNoSync.isDuplicate(MessageId)); the shared strategy keeps one
    # audit for every destination, so one MessageId failing on two queues is dead-lettered once
    broker = _broker(tmp_path, store, _xml())
    for queue in ("a", "b"):
        broker.create_queue(queue)
        assert broker.send(queue, b"same id " + queue.encode(), properties=_id(5)) is not None
    for queue in ("a", "b"):
        consumer = broker.create_consumer(queue)
        consumer.rollback(consumer.receive(0))      # a poison ack: dead-lettered at once without a plugin
    assert [m.body for m in broker.browse("ActiveMQ.DLQ")] == [b"same id a"]
    assert broker.queue("b").message_count == 0
    broker.close()
