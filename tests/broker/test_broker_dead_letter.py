"""Dead letters and expiry as Artemis does them (reference §6): the copy and its properties, dropping
when there is nowhere to go, auto-created resources, the reaper, the HornetQ dialect, and the store
transaction of a move."""
from __future__ import annotations

import re

import pytest
from broker_time import NOW

from journal_engine import AddressSettings, Broker, MessageStore
from journal_engine.broker.dead_letter import DEAD_LETTER_REASONS, DeadLetterReason, decode_history, make_copy
from journal_engine.broker.dialects import DIALECTS
from journal_engine.broker.message import MessageData
from journal_engine.cli import main as cli_main

SCAN = 30_000        # Artemis's message-expiry-scan-period: the expiry reaper runs every 30 s
SMALL = {"file_size": 256 * 1024}


def fail(consumer, times):
    """Receive and roll back ``times`` times (no redelivery delay configured)."""
    for _ in range(times):
        consumer.rollback(consumer.receive(0))


# ----- dead letters ------------------------------------------------------------------------------------

def test_dead_letter_after_max_attempts_has_the_four_properties(broker):
    broker.address_settings.add("orders", AddressSettings(max_delivery_attempts=3, dead_letter_address="DLA"))
    broker.create_queue("orders")
    broker.create_queue("dead", address="DLA")
    original_id = broker.send("orders", b"payload", properties={"kind": "x"}, routing_type="anycast",
                              expiration=NOW + 10_000_000)
    consumer = broker.create_consumer("orders")
    fail(consumer, 3)
    assert broker.queue("orders").message_count == 0
    assert broker.queue("orders").messages_killed == 1
    assert broker.queue("orders").messages_dropped == 0
    copy = broker.create_consumer("dead").receive(0)
    assert copy.message_id != original_id
    assert (copy.address, copy.body, copy.delivery_count, copy.expiration) == ("DLA", b"payload", 1, 0)
    assert copy.properties["kind"] == "x"
    assert copy.properties["_AMQ_ORIG_ADDRESS"] == "orders"
    assert copy.properties["_AMQ_ORIG_QUEUE"] == "orders"
    assert copy.properties["_AMQ_ORIG_MESSAGE_ID"] == original_id
    assert type(copy.properties["_AMQ_ORIG_MESSAGE_ID"]) is int
    assert copy.properties["_AMQ_ORIG_ROUTING_TYPE"] == 1            # Artemis's ANYCAST byte
    assert copy.routing_type is None


def test_orig_routing_type_is_set_only_when_the_original_had_one(broker):
    broker.address_settings.add("t", AddressSettings(max_delivery_attempts=1, dead_letter_address="DLA"))
    broker.create_queue("sub", address="t", routing_type="multicast")
    broker.create_queue("dead", address="DLA")
    broker.send("t", b"typed", routing_type="multicast")
    broker.send("t", b"untyped")
    fail(broker.create_consumer("sub"), 2)
    copies = broker.browse("dead")
    assert copies[0].properties["_AMQ_ORIG_ROUTING_TYPE"] == 0        # MULTICAST
    assert "_AMQ_ORIG_ROUTING_TYPE" not in copies[1].properties


def test_dead_letter_queue_filter_is_queue_name_independent_of_the_failing_queue(broker):
    broker.address_settings.add("shared", AddressSettings(max_delivery_attempts=1, dead_letter_address="DLA"))
    broker.create_queue("first", address="shared", routing_type="multicast")
    broker.create_queue("second", address="shared", routing_type="multicast")
    broker.create_queue("dead", address="DLA")
    broker.send("shared", b"m")
    fail(broker.create_consumer("second"), 1)
    (copy,) = broker.browse("dead")
    assert (copy.properties["_AMQ_ORIG_QUEUE"], copy.properties["_AMQ_ORIG_ADDRESS"]) == ("second", "shared")
    assert broker.queue("first").message_count == 1


def test_no_dead_letter_address_drops_the_message_and_counts_it(broker):
    broker.address_settings.add("q", AddressSettings(max_delivery_attempts=2))
    broker.create_queue("q")
    broker.send("q", b"m")
    fail(broker.create_consumer("q"), 2)
    info = broker.queue("q")
    assert (info.message_count, info.messages_killed, info.messages_dropped) == (0, 1, 1)


@pytest.mark.parametrize("address", ["DLA-without-queues", ""])
def test_dead_letter_address_without_queues_drops_the_message(broker, address):
    broker.address_settings.add("q", AddressSettings(max_delivery_attempts=1, dead_letter_address=address,
                                                     auto_create_dead_letter_resources=(address == "")))
    broker.create_queue("q")
    broker.send("q", b"m")
    fail(broker.create_consumer("q"), 1)
    info = broker.queue("q")
    assert (info.message_count, info.messages_killed, info.messages_dropped) == (0, 1, 1)
    assert broker.queue_names() == ["q"]          # an empty DLA creates nothing


def test_auto_created_dead_letter_queues_for_two_addresses(broker):
    """undelivered-messages.adoc: stocks -> DLQ.stocks, orders -> DLQ.orders, multicast queues on the
    DLA filtered on _AMQ_ORIG_ADDRESS."""
    broker.address_settings.add("#", AddressSettings(dead_letter_address="DLA", max_delivery_attempts=1,
                                                     auto_create_dead_letter_resources=True))
    for name in ("stocks", "orders"):
        broker.create_queue(name)
        broker.send(name, name.encode())
    broker.send("orders", b"orders-2")
    for name in ("stocks", "orders"):
        fail(broker.create_consumer(name), 2 if name == "orders" else 1)
    assert broker.queue_names() == ["DLQ.orders", "DLQ.stocks", "orders", "stocks"]
    for name in ("stocks", "orders"):
        info = broker.queue(f"DLQ.{name}")
        assert (info.address, info.routing_type, info.filter, info.durable, info.auto_created) == \
            ("DLA", "multicast", f"_AMQ_ORIG_ADDRESS = '{name}'", True, True)
    assert [m.body for m in broker.browse("DLQ.stocks")] == [b"stocks"]
    assert [m.body for m in broker.browse("DLQ.orders")] == [b"orders", b"orders-2"]


def test_auto_created_dead_letter_queue_prefix_and_suffix(broker):
    broker.address_settings.add("#", AddressSettings(dead_letter_address="DLA", max_delivery_attempts=1,
                                                     auto_create_dead_letter_resources=True,
                                                     dead_letter_queue_prefix="", dead_letter_queue_suffix=".DLQ"))
    broker.create_queue("it's")
    broker.send("it's", b"m")
    fail(broker.create_consumer("it's"), 1)
    info = broker.queue("it's.DLQ")
    assert info.filter == "_AMQ_ORIG_ADDRESS = 'it''s'"
    assert info.message_count == 1


def test_dead_letter_of_a_dead_letter_copy_keeps_the_original_routing_type(broker):
    """move(): a copy's routing type comes from the ORIGINAL's _AMQ_ORIG_ROUTING_TYPE; the ORIG
    properties describe the latest move."""
    broker.address_settings.add("orders", AddressSettings(max_delivery_attempts=1, dead_letter_address="DLA"))
    broker.address_settings.add("DLA", AddressSettings(max_delivery_attempts=1, dead_letter_address="DLA2"))
    broker.create_queue("orders")
    broker.create_queue("DLQ", address="DLA")
    broker.create_queue("final-any", address="DLA2")
    broker.create_queue("final-multi", address="DLA2", routing_type="multicast")
    original_id = broker.send("orders", b"m", routing_type="anycast")
    fail(broker.create_consumer("orders"), 1)
    first_copy_id = broker.browse("DLQ")[0].message_id
    fail(broker.create_consumer("DLQ"), 1)
    assert broker.queue("final-multi").message_count == 0
    (second,) = broker.browse("final-any")
    assert second.routing_type == "anycast"
    assert second.properties["_AMQ_ORIG_ADDRESS"] == "DLA"
    assert second.properties["_AMQ_ORIG_QUEUE"] == "DLQ"
    assert second.properties["_AMQ_ORIG_MESSAGE_ID"] == first_copy_id != original_id
    assert second.properties["_AMQ_ORIG_ROUTING_TYPE"] == 1


def test_dead_letter_move_is_one_store_transaction(tmp_path, clock, capsys):
    """§2.3 step 4: ADD_TX 45 (the copy), UPDATE_TX 32 (its reference), UPDATE_TX 33 (the original's
    acknowledgement), COMMIT, then a DELETE of the original. Unlike Artemis no UPDATE 34 comes first:
    the count goes into the copy, and a crash between the two would leave the message counted up in
    its queue, neither where it was nor moved."""
    directory = tmp_path / "b"
    broker = Broker(directory, clock=clock, store_options=SMALL)
    broker.address_settings.add("q", AddressSettings(max_delivery_attempts=1, dead_letter_address="DLA"))
    broker.create_queue("q")
    broker.create_queue("dead", address="DLA")
    original_id = broker.send("q", b"m")
    fail(broker.create_consumer("q"), 1)
    copy_id = broker.browse("dead")[0].message_id
    broker.close()
    capsys.readouterr()
    assert cli_main(["print", str(directory / "messages")]) == 0
    frames = re.findall(r"(\w+)\s+id=(\d+) type=(\d+) tx=(\d+)", capsys.readouterr().out)
    after_send = [(kind, int(rid), int(kind_type), int(tx)) for kind, rid, kind_type, tx in frames]
    kinds = [(kind, rid, record_type) for kind, rid, record_type, _ in after_send]
    start = kinds.index(("ADD_TX", copy_id, 45))
    assert kinds[start:start + 5] == [("ADD_TX", copy_id, 45), ("UPDATE_TX", copy_id, 32),
                                      ("UPDATE_TX", original_id, 33), ("COMMIT", 0, 0), ("DELETE", original_id, 0)]
    tx_ids = {after_send[start + i][3] for i in range(4)}
    assert len(tx_ids) == 1 and tx_ids != {0}
    assert kinds[:start] == [("GROUP", 0, 0), ("ADD", original_id, 45), ("UPDATE", original_id, 32)]   # the send


def test_dead_letter_copy_survives_a_restart_and_the_original_does_not(tmp_path, clock):
    directory = tmp_path / "b"
    broker = Broker(directory, clock=clock, store_options=SMALL)
    broker.address_settings.add("#", AddressSettings(dead_letter_address="DLA", max_delivery_attempts=2,
                                                     auto_create_dead_letter_resources=True))
    broker.create_queue("orders")
    original_id = broker.send("orders", b"m", properties={"n": 1})
    fail(broker.create_consumer("orders"), 2)
    broker.close()
    broker = Broker(directory, clock=clock, store_options=SMALL)
    assert broker.queue("orders").message_count == 0
    info = broker.queue("DLQ.orders")
    assert (info.filter, info.routing_type, info.message_count) == ("_AMQ_ORIG_ADDRESS = 'orders'", "multicast", 1)
    copy = broker.create_consumer("DLQ.orders").receive(0)
    assert copy.properties == {"n": 1, "_AMQ_ORIG_QUEUE": "orders", "_AMQ_ORIG_ADDRESS": "orders",
                               "_AMQ_ORIG_MESSAGE_ID": original_id,
                               "_JE_DEAD_LETTER_REASON": "max-delivery-attempts", "_JE_DEAD_LETTER_TIME": NOW,
                               "_JE_DEAD_LETTER_COUNT": 1,
                               "_JE_ORIG_DELIVERY_COUNT": 2,
                               "_JE_DELIVERY_HISTORY": f'[{{"time":{NOW},"reason":"rollback"}},{{"time":{NOW},"reason":"rollback"}}]'}
    broker.close()


def test_dead_letter_copy_carries_its_reason_count_and_delivery_history(broker, clock):
    """Beyond Artemis: the copy names why it was dead-lettered, when, after how many deliveries, and
    the time and kind of each failed delivery (a consumer's rollback, a session's)."""
    broker.address_settings.add("orders", AddressSettings(max_delivery_attempts=3, dead_letter_address="DLA"))
    broker.create_queue("orders")
    broker.create_queue("dead", address="DLA")
    broker.send("orders", b"m")
    consumer = broker.create_consumer("orders")
    consumer.rollback(consumer.receive(0))
    clock.advance(10)
    consumer.close()
    session = broker.create_session(transacted=True)
    session_consumer = session.create_consumer("orders")
    assert session_consumer.receive(0) is not None
    session.rollback()
    clock.advance(5)
    assert session_consumer.receive(0) is not None
    session.rollback()
    (copy,) = broker.browse("dead")
    properties = copy.properties
    assert properties["_JE_DEAD_LETTER_REASON"] == DeadLetterReason.MAX_DELIVERY_ATTEMPTS == "max-delivery-attempts"
    assert properties["_JE_DEAD_LETTER_TIME"] == NOW + 15
    assert properties["_JE_ORIG_DELIVERY_COUNT"] == 3
    assert decode_history(properties["_JE_DELIVERY_HISTORY"]) == [
        {"time": NOW, "reason": "rollback"}, {"time": NOW + 10, "reason": "session-rollback"},
        {"time": NOW + 15, "reason": "session-rollback"}]


def test_dead_letter_reason_is_one_of_the_named_reasons():
    original = MessageData(1, "orders", b"m", None, True, 0, None)
    copy = make_copy(original, 2, "DLA", None, DIALECTS["artemis"], reason=DeadLetterReason.NO_ROUTE, now_ms=NOW)
    assert copy.properties["_JE_DEAD_LETTER_REASON"] == "no-route"
    assert "_AMQ_ORIG_QUEUE" not in copy.properties            # it was on no queue
    assert decode_history(copy.properties["_JE_DELIVERY_HISTORY"]) == []
    assert {"max-delivery-attempts", "expired", "poison-ack", "no-route"} <= DEAD_LETTER_REASONS
    with pytest.raises(ValueError, match="dead-letter reason 'tired'"):
        make_copy(original, 2, "DLA", "orders", DIALECTS["artemis"], reason="tired", now_ms=NOW)


# ----- expiry ---------------------------------------------------------------------------------------------

def test_expiry_moves_to_the_expiry_address_with_actual_expiry(broker, clock):
    broker.address_settings.add("q", AddressSettings(expiry_address="EXPIRY"))
    broker.create_queue("q")
    broker.create_queue("expired", address="EXPIRY")
    original_id = broker.send("q", b"m", expiration=NOW + 100, properties={"p": "v"})
    clock.advance(SCAN)                    # the reaper's scan: no receive needed
    assert broker.queue("q").message_count == 0
    assert broker.queue("q").messages_expired == 1
    (copy,) = broker.browse("expired")
    assert copy.expiration == 0
    assert copy.properties == {"p": "v", "_AMQ_ORIG_QUEUE": "q", "_AMQ_ORIG_ADDRESS": "q",
                               "_AMQ_ORIG_MESSAGE_ID": original_id, "_AMQ_ACTUAL_EXPIRY": NOW + SCAN,
                               "_JE_DEAD_LETTER_REASON": "expired", "_JE_DEAD_LETTER_TIME": NOW + SCAN,
                               "_JE_DEAD_LETTER_COUNT": 1,
                               "_JE_ORIG_DELIVERY_COUNT": 0, "_JE_DELIVERY_HISTORY": "[]"}


def test_expiry_without_expiry_address_drops(broker, clock):
    broker.create_queue("q")
    broker.send("q", b"m", expiration=NOW + 1)
    clock.advance(SCAN)
    info = broker.queue("q")
    assert (info.message_count, info.messages_expired, info.messages_dropped) == (0, 1, 1)


@pytest.mark.parametrize("address", ["EXPIRY-without-queues", ""])
def test_expiry_address_without_queues_or_empty_drops(broker, clock, address):
    broker.address_settings.add("q", AddressSettings(expiry_address=address))
    broker.create_queue("q")
    broker.send("q", b"m", expiration=NOW + 1)
    clock.advance(SCAN)
    assert broker.queue("q").messages_dropped == 1
    assert broker.queue_names() == ["q"]


def test_auto_created_expiry_queues(broker, clock):
    broker.address_settings.add("#", AddressSettings(expiry_address="EXP", auto_create_expiry_resources=True))
    for name in ("a", "b"):
        broker.create_queue(name)
        broker.send(name, name.encode(), expiration=NOW + 10)
    clock.advance(SCAN)
    for name in ("a", "b"):
        info = broker.queue(f"EXP.{name}")
        assert (info.address, info.filter, info.message_count) == ("EXP", f"_AMQ_ORIG_ADDRESS = '{name}'", 1)
        assert [m.body for m in broker.browse(f"EXP.{name}")] == [name.encode()]


def test_expiry_is_checked_at_delivery(broker, clock):
    broker.address_settings.add("q", AddressSettings(expiry_address="EXPIRY"))
    broker.create_queue("q")
    broker.create_queue("expired", address="EXPIRY")
    broker.send("q", b"m", expiration=NOW + 100)
    consumer = broker.create_consumer("q")
    message = consumer.receive(0)
    clock.advance(200)                     # expired while delivered: not touched
    assert broker.queue("q").delivering_count == 1
    consumer.rollback(message)             # back in the queue, expired: the next delivery attempt expires it
    assert consumer.receive(0) is None
    assert broker.queue("expired").message_count == 1


def test_delivered_message_can_be_acknowledged_after_its_expiration(broker, clock):
    broker.create_queue("q")
    broker.send("q", b"m", expiration=NOW + 100)
    consumer = broker.create_consumer("q")
    message = consumer.receive(0)
    clock.advance(1000)
    consumer.ack(message)
    assert broker.queue("q").messages_acknowledged == 1


def test_expiry_settings_come_from_the_messages_address(broker, clock):
    """A dead-letter copy has the DLA as its address: routing gives it the DLA's expiry delay, and
    it expires to the DLA's expiry address, not to that of the queue it first failed on."""
    broker.address_settings.add("q", AddressSettings(max_delivery_attempts=1, dead_letter_address="DLA",
                                                     expiry_address="EXP-q"))
    broker.address_settings.add("DLA", AddressSettings(expiry_address="EXP-dla", expiry_delay=50))
    broker.create_queue("q")
    broker.create_queue("dead", address="DLA")
    broker.create_queue("exp-q", address="EXP-q")
    broker.create_queue("exp-dla", address="EXP-dla")
    broker.send("q", b"m")
    fail(broker.create_consumer("q"), 1)
    (copy,) = broker.browse("dead")
    assert copy.expiration == NOW + 50
    clock.advance(SCAN)
    assert broker.queue("dead").message_count == 0
    (expired,) = broker.browse("exp-dla")
    assert (expired.body, expired.properties["_AMQ_ORIG_ADDRESS"], expired.expiration) == (b"m", "DLA", 0)
    assert broker.queue("exp-q").message_count == 0


# ----- HornetQ ------------------------------------------------------------------------------------------

def dialect_properties(message):
    """A copy's properties but the dialect-independent _JE_ ones."""
    return {key: value for key, value in message.properties.items() if not key.startswith("_JE_")}


def test_hornetq_dialect_property_names(clock):
    broker = Broker(clock=clock, dialect="hornetq")
    broker.address_settings.add("jms.queue.exampleQueue", AddressSettings(
        dead_letter_address="jms.queue.deadLetterQueue", max_delivery_attempts=3))
    broker.create_queue("jms.queue.exampleQueue")
    broker.create_queue("jms.queue.deadLetterQueue")
    original_id = broker.send("jms.queue.exampleQueue", b"m", routing_type="anycast")
    fail(broker.create_consumer("jms.queue.exampleQueue"), 3)
    (copy,) = broker.browse("jms.queue.deadLetterQueue")
    assert dialect_properties(copy) == {"_HQ_ORIG_ADDRESS": "jms.queue.exampleQueue",
                                        "_HQ_ORIG_QUEUE": "jms.queue.exampleQueue",
                                        "_HQ_ORIG_MESSAGE_ID": original_id}
    assert copy.properties["_JE_DEAD_LETTER_REASON"] == "max-delivery-attempts"     # in both dialects
    broker.close()


def test_hornetq_jms_queue_names_and_expiry(clock):
    broker = Broker(clock=clock, dialect="hornetq", jms_queue_names=True)
    broker.address_settings.add("jms.queue.#", AddressSettings(expiry_address="jms.queue.expiryQueue"))
    info = broker.create_queue("orders")
    assert (info.name, info.address) == ("jms.queue.orders", "jms.queue.orders")
    broker.create_queue("expiryQueue")
    original_id = broker.send("orders", b"m", expiration=NOW + 5)
    assert broker.queue("orders").message_count == 1
    clock.advance(SCAN)
    (copy,) = broker.browse("expiryQueue")
    assert dialect_properties(copy) == {"_HQ_ORIG_ADDRESS": "jms.queue.orders",
                                        "_HQ_ORIG_QUEUE": "jms.queue.orders",
                                        "_HQ_ORIG_MESSAGE_ID": original_id, "_HQ_ACTUAL_EXPIRY": NOW + SCAN}
    assert broker.create_consumer("expiryQueue").receive(0).address == "jms.queue.expiryQueue"
    broker.close()


def test_closed_broker_directory_holds_the_dead_letter_state(tmp_path, clock):
    directory = tmp_path / "b"
    broker = Broker(directory, clock=clock, store_options=SMALL)
    broker.address_settings.add("q", AddressSettings(max_delivery_attempts=1, dead_letter_address="DLA"))
    broker.create_queue("q")
    broker.create_queue("dead", address="DLA")
    broker.send("q", b"m")
    fail(broker.create_consumer("q"), 1)
    broker.close()
    store = MessageStore(directory, file_size=SMALL["file_size"])
    state = store.load()
    (message,) = state.messages.values()
    assert message.address == "DLA" and message.properties["_AMQ_ORIG_QUEUE"] == "q"
    store.close()
