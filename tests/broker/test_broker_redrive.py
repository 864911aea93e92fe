"""Broker.redrive (broker/redrive.py): dead letters back to their queue with an audit trail, in one
store transaction, with loop protection; the same from the library and `journal-engine dlq redrive`."""
from __future__ import annotations

import json
import re

import pytest
from broker_time import NOW

from journal_engine import AddressSettings, Broker, ConfigError, SelectorError, UnknownQueueError
from journal_engine.cli import main as cli_main

SMALL = {"file_size": 256 * 1024}


def dead_letter_some(broker, clock, count=3, attempts=2):
    broker.address_settings.add("orders", AddressSettings(max_delivery_attempts=attempts, dead_letter_address="DLA"))
    for name, address in (("orders", None), ("DLQ", "DLA"), ("retry", None)):
        if name not in broker.queue_names():
            broker.create_queue(name, address=address)
    ids = [broker.send("orders", f"m{n}".encode(), properties={"n": n}) for n in range(count)]
    consumer = broker.create_consumer("orders")
    for _ in range(count * attempts):
        consumer.rollback(consumer.receive(0))
    consumer.close()
    return ids


def test_redrive_moves_every_dead_letter_back_with_its_audit_trail(tmp_path, clock):
    with Broker(tmp_path / "b", clock=clock, store_options=SMALL) as broker:
        ids = dead_letter_some(broker, clock)
        clock.advance(500)
        result = broker.redrive("DLQ")
        assert [queue for _old, _new, queue in result.moved] == ["orders"] * 3 and result.refused == []
        assert broker.queue("DLQ").message_count == 0
        messages = broker.browse("orders")
        assert [m.properties["_AMQ_ORIG_MESSAGE_ID"] for m in messages] == ids
        for message in messages:
            assert message.properties["_JE_REDRIVE_COUNT"] == 1
            assert message.properties["_JE_REDRIVE_TIME"] == NOW + 500
            assert message.properties["_JE_REDRIVE_SOURCE"] == "DLQ"
            assert message.properties["_JE_DEAD_LETTER_REASON"] == "max-delivery-attempts"
        redelivered = broker.create_consumer("orders").receive(0)
        assert (redelivered.delivery_count, redelivered.redelivered) == (1, False)
    with Broker(tmp_path / "b", clock=clock, store_options=SMALL) as broker:      # durable
        assert broker.queue("orders").message_count == 3 and broker.queue("DLQ").message_count == 0


def test_redrive_is_one_store_transaction(tmp_path, clock, capsys):
    with Broker(tmp_path / "b", clock=clock, store_options=SMALL) as broker:
        dead_letter_some(broker, clock, count=2)
        result = broker.redrive("DLQ")
    capsys.readouterr()
    assert cli_main(["print", str(tmp_path / "b" / "messages"), "--json"]) == 0
    frames = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    new_ids = [new for _old, new, _queue in result.moved]
    start = next(i for i, f in enumerate(frames) if f["record_id"] == new_ids[0] and f["kind"] == "ADD_TX")
    window = frames[start:start + 7]
    assert [(f["kind"], f["record_type_name"]) for f in window] == [
        ("ADD_TX", "ADD_MESSAGE"), ("UPDATE_TX", "ADD_REF"), ("UPDATE_TX", "ACKNOWLEDGE_REF"),
        ("ADD_TX", "ADD_MESSAGE"), ("UPDATE_TX", "ADD_REF"), ("UPDATE_TX", "ACKNOWLEDGE_REF"), ("COMMIT", None)]
    assert len({f["tx_id"] for f in window}) == 1


def test_redrive_to_another_queue_with_a_filter_and_a_limit(clock):
    with Broker(clock=clock) as broker:
        dead_letter_some(broker, clock, count=4)
        result = broker.redrive("DLQ", to_queue="retry", filter="n >= 1", limit=2)
        assert [queue for _o, _n, queue in result.moved] == ["retry", "retry"]
        assert [m.properties["n"] for m in broker.browse("retry")] == [1, 2]
        assert sorted(m.properties["n"] for m in broker.browse("DLQ")) == [0, 3]


def test_redrive_refuses_a_message_that_loops_more_than_max_redrives(clock):
    with Broker(clock=clock) as broker:
        dead_letter_some(broker, clock, count=1)
        assert len(broker.redrive("DLQ", max_redrives=1).moved) == 1
        consumer = broker.create_consumer("orders")         # it fails again: dead-lettered a second time
        for _ in range(2):
            consumer.rollback(consumer.receive(0))
        (copy,) = broker.browse("DLQ")
        assert copy.properties["_JE_DEAD_LETTER_COUNT"] == 2 and copy.properties["_JE_REDRIVE_COUNT"] == 1
        result = broker.redrive("DLQ", max_redrives=1)
        assert result.moved == []
        ((refused_id, why),) = result.refused
        assert refused_id == copy.message_id and re.search(r"redriven 1 times already \(max_redrives 1\)", why)
        assert broker.queue("DLQ").message_count == 1                       # it stays
        assert len(broker.redrive("DLQ", max_redrives=2).moved) == 1        # a higher bound lets it go


def test_redrive_refuses_when_the_original_queue_is_gone(clock):
    with Broker(clock=clock) as broker:
        dead_letter_some(broker, clock, count=1)
        broker.delete_queue("orders")
        result = broker.redrive("DLQ")
        assert result.moved == [] and "does not exist" in result.refused[0][1]


def test_redrive_checks_its_arguments(clock):
    with Broker(clock=clock) as broker:
        dead_letter_some(broker, clock, count=1)
        with pytest.raises(UnknownQueueError):
            broker.redrive("nowhere")
        with pytest.raises(UnknownQueueError):
            broker.redrive("DLQ", to_queue="nowhere")
        with pytest.raises(SelectorError):
            broker.redrive("DLQ", filter="n = = 1")
        with pytest.raises(ConfigError, match="limit"):
            broker.redrive("DLQ", limit=-1)
        with pytest.raises(ConfigError, match="max_redrives"):
            broker.redrive("DLQ", max_redrives=True)
        assert broker.queue("DLQ").message_count == 1
