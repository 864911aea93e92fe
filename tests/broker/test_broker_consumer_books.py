"""A consumer's own books (the deliveries it holds, whether it is closed), kept by the consumer in the
same locked step as the queue's: a failed store write leaves them as they were, a refused settlement
changes nothing, and a close that comes while a receive waits is seen by that receive."""
from __future__ import annotations

import threading
import time

import pytest

from journal_engine import Broker, JournalClosedError, ManualClock, MessageStateError

NOW = 1_700_000_000_000
SMALL = {"file_size": 256 * 1024}


@pytest.fixture
def durable_broker(tmp_path):
    broker = Broker(tmp_path / "broker", clock=ManualClock(NOW), store_options=SMALL)
    broker.create_queue("q")
    yield broker
    broker.close()


def test_an_ack_whose_store_write_fails_leaves_the_message_held_in_its_place(durable_broker, monkeypatch):
    for body in (b"a", b"b", b"c"):
        durable_broker.send("q", body)
    consumer = durable_broker.create_consumer("q")
    first, second, third = (consumer.receive(0) for _ in range(3))

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(durable_broker.store, "acknowledge", full)
    with pytest.raises(OSError):
        consumer.ack(second)
    assert consumer.delivering_count == 3
    assert durable_broker.queue("q").delivering_count == 3
    monkeypatch.undo()
    consumer.ack(second)                        # the same delivery, acknowledged once the store takes it
    with pytest.raises(MessageStateError):
        consumer.ack(second)
    consumer.close()                            # the other two go back in message order, uncounted
    again = durable_broker.create_consumer("q")
    assert [(m.body, m.delivery_count) for m in (again.receive(0), again.receive(0))] == [(b"a", 1), (b"c", 1)]
    assert first.body == b"a" and third.body == b"c"


def test_settling_a_message_the_consumer_does_not_hold_changes_nothing(durable_broker):
    durable_broker.send("q", b"a")
    mine, other = durable_broker.create_consumer("q"), durable_broker.create_consumer("q")
    message = mine.receive(0)
    for settle in (other.ack, other.rollback, lambda m: other.rollback(m, 5)):
        with pytest.raises(MessageStateError, match="another consumer"):
            settle(message)
    with pytest.raises(TypeError):
        other.ack(["not", "a", "message"])
    with pytest.raises(ValueError):
        mine.rollback(message, -1)
    assert (mine.delivering_count, other.delivering_count) == (1, 0)
    mine.rollback(message)
    with pytest.raises(MessageStateError, match="already acknowledged or rolled back"):
        mine.ack(message)
    assert mine.delivering_count == 0 and durable_broker.queue("q").message_count == 1


def test_a_receive_waiting_when_its_consumer_closes_raises():
    broker = Broker()
    broker.create_queue("q")
    consumer = broker.create_consumer("q")
    raised = []

    def wait():
        try:
            consumer.receive(5.0)
        except JournalClosedError as exc:
            raised.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.1)                             # the receive is waiting (or about to: then it sees the close first)
    consumer.close()
    waiter.join(5.0)
    assert not waiter.is_alive() and len(raised) == 1 and "consumer is closed" in str(raised[0])
    broker.close()
