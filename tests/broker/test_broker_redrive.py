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


# ----- what the operator's console asks of the broker: chosen ids, deletion, a bounded page ------------

def test_redrive_of_chosen_ids_moves_only_those(tmp_path, clock):
    with Broker(tmp_path / "b", clock=clock, store_options=SMALL) as broker:
        dead_letter_some(broker, clock, count=4)
        dead = [m.message_id for m in broker.browse("DLQ")]
        result = broker.redrive("DLQ", message_ids=[dead[1], dead[3]])
        assert [old for old, _new, _queue in result.moved] == [dead[1], dead[3]]
        assert [m.message_id for m in broker.browse("DLQ")] == [dead[0], dead[2]]
        with pytest.raises(ConfigError, match="message_ids"):
            broker.redrive("DLQ", message_ids=["x"])


def test_delete_messages_removes_the_chosen_ones_for_good_in_one_transaction(tmp_path, clock):
    with Broker(tmp_path / "b", clock=clock, store_options=SMALL) as broker:
        dead_letter_some(broker, clock, count=4)
        dead = [m.message_id for m in broker.browse("DLQ")]
        assert broker.delete_messages("DLQ", message_ids=[dead[0]]) == [dead[0]]
        assert broker.delete_messages("DLQ", filter="n >= 2") == dead[2:]
        assert [m.message_id for m in broker.browse("DLQ")] == [dead[1]]
        assert broker.queue("DLQ").messages_acknowledged == 3
        with pytest.raises(SelectorError):
            broker.delete_messages("DLQ", filter="n >=")
        with pytest.raises(UnknownQueueError):
            broker.delete_messages("nowhere")
    with Broker(tmp_path / "b", clock=clock, store_options=SMALL) as broker:      # durable
        assert [m.message_id for m in broker.browse("DLQ")] == [dead[1]]


def test_browse_page_walks_a_bounded_part_of_the_queue_and_says_where_to_go_on(clock):
    with Broker(clock=clock) as broker:
        broker.create_queue("q")
        ids = [broker.send("q", b"x", properties={"n": n, "odd": n % 2 == 1}) for n in range(10)]
        page = broker.browse_page("q", start=2, limit=3)
        assert [(position, m.message_id) for position, m in page.messages] == [(2, ids[2]), (3, ids[3]), (4, ids[4])]
        assert (page.next_start, page.more) == (5, True)
        odd = broker.browse_page("q", filter="odd = TRUE", limit=10, scan_max=4)     # looks at 4 references
        assert [m.properties["n"] for _p, m in odd.messages] == [1, 3] and (odd.next_start, odd.more) == (4, True)
        rest = broker.browse_page("q", start=odd.next_start, filter="odd = TRUE", limit=10)
        assert [m.properties["n"] for _p, m in rest.messages] == [5, 7, 9] and not rest.more
        consumer = broker.create_consumer("q")
        consumer.rollback(consumer.receive(0))
        assert broker.browse_page("q", limit=1).messages[0][1].delivery_count == 1    # the reference's count
        with pytest.raises(ConfigError, match="limit"):
            broker.browse_page("q", limit=0)


def test_browse_scheduled_lists_a_queues_scheduled_messages_soonest_first(clock):
    with Broker(clock=clock) as broker:
        broker.create_queue("q")
        broker.create_queue("other")
        late = broker.send("q", b"late", scheduled_delivery_time=NOW + 5000)
        soon = broker.send("q", b"soon", scheduled_delivery_time=NOW + 1000)
        broker.send("other", b"elsewhere", scheduled_delivery_time=NOW + 500)
        broker.send("q", b"now")
        found, more = broker.browse_scheduled("q")
        assert [(due, m.message_id) for due, m in found] == [(NOW + 1000, soon), (NOW + 5000, late)] and not more
        assert [m.message_id for _due, m in broker.browse_scheduled("q", limit=1)[0]] == [soon]
        assert broker.browse_scheduled("q", scan_max=1)[1]              # three entries, one looked at
        clock.advance(1000)                                              # `soon` falls due: ready, no longer listed
        assert [m.message_id for _due, m in broker.browse_scheduled("q")[0]] == [late]
        with pytest.raises(UnknownQueueError):
            broker.browse_scheduled("nowhere")
