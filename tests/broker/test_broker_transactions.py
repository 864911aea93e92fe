"""Transacted sessions: sends and acknowledgements take effect together at commit; rollback is the
redelivery path for every message delivered in the session; what reaches the store and survives."""
from __future__ import annotations

import pytest
from broker_time import NOW

from journal_engine import AddressSettings, Broker, MessageStateError, RecordType

SMALL = {"file_size": 256 * 1024}


@pytest.fixture
def broker(tmp_path, clock):
    b = Broker(tmp_path / "b", clock=clock, store_options=SMALL)
    b.create_queue("q")
    yield b
    b.close()


def session_consumer(broker, *bodies, transacted: bool = True):
    """``bodies`` sent to queue "q", then a session and its consumer on "q"."""
    for body in bodies:
        broker.send("q", body)
    session = broker.create_session(transacted=transacted)
    return session, session.create_consumer("q")


def test_sends_become_visible_at_commit(broker):
    session = broker.create_session(transacted=True)
    first = session.send("q", b"a")
    session.send("q", b"b")
    assert broker.queue("q").message_count == 0
    assert not broker.store.has_message(first)            # written in the open transaction only
    session.commit()
    assert [m.body for m in broker.browse("q")] == [b"a", b"b"]
    assert broker.store.has_message(first)


def test_acknowledgements_take_effect_at_commit(broker):
    session, consumer = session_consumer(broker, b"a", b"b", b"c")
    a, b = consumer.receive(0), consumer.receive(0)
    consumer.ack(a)
    consumer.ack(b)
    info = broker.queue("q")
    assert (info.message_count, info.delivering_count) == (3, 2)
    with pytest.raises(MessageStateError, match="open transaction"):
        consumer.ack(a)
    session.commit()
    info = broker.queue("q")
    assert (info.message_count, info.delivering_count, info.messages_acknowledged) == (1, 0, 2)
    assert not broker.store.has_message(a.message_id)


def test_rollback_redelivers_every_message_delivered_in_the_session(broker):
    session, consumer = session_consumer(broker, b"a", b"b")
    a = consumer.receive(0)
    consumer.ack(a)                        # acknowledged in the transaction
    consumer.receive(0)                    # delivered, not acknowledged
    sent = session.send("q", b"never")
    session.rollback()
    assert [(m.body, m.delivery_count) for m in (consumer.receive(0), consumer.receive(0))] == [(b"a", 2), (b"b", 2)]
    assert consumer.receive(0) is None
    queue_id = broker.queue("q").queue_id
    assert broker.store.persisted_delivery_count(queue_id, a.message_id) == 1
    assert not broker.store.has_message(sent)


def test_session_rollback_takes_the_delay_and_dead_letter_path(broker, clock):
    broker.address_settings.add("q", AddressSettings(redelivery_delay=1000, max_delivery_attempts=2,
                                                     dead_letter_address="DLA"))
    broker.create_queue("dead", address="DLA")
    session, consumer = session_consumer(broker, b"m")
    consumer.ack(consumer.receive(0))
    session.rollback()
    assert consumer.receive(0) is None
    assert broker.queue("q").scheduled_count == 1
    clock.advance(1000)
    consumer.ack(consumer.receive(0))
    session.rollback()                     # count 2 = max: dead-lettered
    assert broker.queue("q").message_count == 0
    assert broker.queue("dead").message_count == 1


def test_close_of_a_session_returns_unacked_uncounted_and_rolls_back_acked(broker):
    session, consumer = session_consumer(broker, b"a", b"b")
    consumer.ack(consumer.receive(0))
    consumer.receive(0)
    session.close()
    other = broker.create_consumer("q")
    assert [(m.body, m.delivery_count) for m in (other.receive(0), other.receive(0))] == [(b"a", 2), (b"b", 1)]
    with pytest.raises(MessageStateError):
        session.commit()


def test_a_transacted_consumer_can_still_roll_back_one_message(broker):
    session, consumer = session_consumer(broker, b"a")
    consumer.rollback(consumer.receive(0))
    assert consumer.receive(0).delivery_count == 2


def test_non_transacted_session_acknowledges_at_once(broker):
    session, consumer = session_consumer(broker, b"a", transacted=False)
    consumer.ack(consumer.receive(0))
    assert broker.queue("q").message_count == 0
    with pytest.raises(MessageStateError, match="not transacted"):
        session.commit()
    with pytest.raises(MessageStateError, match="not transacted"):
        session.rollback()
    session.send("q", b"b")
    assert broker.queue("q").message_count == 1


def test_committed_work_survives_a_restart_and_open_work_does_not(tmp_path, clock):
    directory = tmp_path / "b"
    broker = Broker(directory, clock=clock, store_options=SMALL)
    broker.create_queue("q")
    session, consumer = session_consumer(broker, b"keep", b"acked")
    consumer.receive(0)
    consumer.ack(consumer.receive(0))
    session.send("q", b"committed")
    session.commit()
    open_session = broker.create_session()
    open_session.send("q", b"uncommitted")
    open_consumer = open_session.create_consumer("q")
    open_consumer.ack(open_consumer.receive(0))            # b"committed", acknowledged but not committed
    broker.close()
    broker = Broker(directory, clock=clock, store_options=SMALL)
    assert sorted(m.body for m in broker.browse("q")) == [b"committed", b"keep"]
    broker.close()


def test_transactional_records_are_written_inside_a_journal_transaction(broker):
    session, consumer = session_consumer(broker, b"a")
    consumer.ack(consumer.receive(0))
    session.send("q", b"b", scheduled_delivery_time=NOW + 100)
    assert broker.store.record_count(RecordType.ACKNOWLEDGE_REF) == 0
    session.commit()
    assert broker.queue("q").scheduled_count == 1
    assert broker.store.record_count(RecordType.SET_SCHEDULED_DELIVERY_TIME) == 1


def test_commit_and_rollback_of_an_empty_session_are_harmless(broker):
    session = broker.create_session()
    session.commit()
    session.rollback()
    assert broker.queue("q").message_count == 0


def test_delete_queue_waits_for_pending_transactional_sends(broker):
    session = broker.create_session()
    session.send("q", b"a")
    with pytest.raises(MessageStateError, match="pending transactional"):
        broker.delete_queue("q")
    session.rollback()
    assert broker.delete_queue("q") == 0
