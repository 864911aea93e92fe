"""Duplicate detection (Artemis's "Duplicate Message Detection", HornetQ's the same with _HQ_DUPL_ID):
a message whose duplicate id its address saw among its last id_cache_size ids is not routed, a
transacted one makes the commit raise DuplicateIdError, and with persist_id_cache the ids are
journaled (DUPLICATE_ID, 37) with their messages, so that no crash lets an id through twice."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from journal_engine import Broker, ConfigError, DuplicateIdError, MessageStore, RecordType
from journal_engine.limits import ID_CACHE_SIZE_MAX

ID = "_AMQ_DUPL_ID"
SMALL_FILE = 1 << 20        # the journal's files: pre-allocating 10 MiB ones is most of a twin run's time


@pytest.fixture(params=["journal", "lmdb", None], ids=["journal", "lmdb", "memory"])
def store(request):
    if request.param == "lmdb":
        pytest.importorskip("lmdb", reason="the lmdb extra (pip install '.[lmdb]') is not installed")
    return request.param


@pytest.fixture(params=["journal", "lmdb"])
def durable_store(request):
    if request.param == "lmdb":
        pytest.importorskip("lmdb", reason="the lmdb extra (pip install '.[lmdb]') is not installed")
    return request.param


def _broker(tmp_path, store, **options):
    if store is None:
        return Broker(**options)
    return Broker(tmp_path / "broker", store=store, sync="none", store_options={"file_size": SMALL_FILE}, **options)


def _stored_ids(tmp_path, store) -> int:
    """DUPLICATE_ID records live in the store's message journal, read by a store of its own."""
    with MessageStore(tmp_path / "broker", backend=store, read_only=True) as reader:
        reader.load()
        return reader.record_count(RecordType.DUPLICATE_ID)


def test_a_resent_id_is_not_routed_and_stores_nothing(tmp_path, store):
    broker = _broker(tmp_path, store)
    broker.create_queue("orders")
    first = broker.send("orders", b"one", properties={ID: "order-1"})
    assert isinstance(first, int)
    assert broker.send("orders", b"one again", properties={ID: "order-1"}) is None
    assert broker.queue("orders").message_count == 1
    assert broker.stats()["duplicates"] == 1
    consumer = broker.create_consumer("orders")
    message = consumer.receive(0)
    assert message.body == b"one" and message.properties[ID] == "order-1"
    consumer.ack(message)
    assert broker.send("orders", b"after its ack", properties={ID: "order-1"}) is None, \
        "an id stays in the cache after its message is gone"
    broker.close()
    if store is not None:
        assert _stored_ids(tmp_path, store) == 1


def test_ids_are_kept_per_address_and_str_is_its_utf8_bytes(tmp_path, store):
    broker = _broker(tmp_path, store)
    broker.create_queue("a")
    broker.create_queue("b")
    assert broker.send("a", b"1", properties={ID: "né"}) is not None
    assert broker.send("b", b"1", properties={ID: "né"}) is not None
    assert broker.send("a", b"2", properties={ID: "né".encode()}) is None
    assert broker.send("a", b"3", properties={ID: b"n\xe9"}) is not None, "other bytes, another id"
    assert broker.send("a", b"4") is not None and broker.send("a", b"5") is not None, "no id, no detection"
    broker.close()


def test_an_id_of_another_type_is_refused_naming_the_property(tmp_path, store):
    broker = _broker(tmp_path, store)
    broker.create_queue("q")
    with pytest.raises(ConfigError, match=ID):
        broker.send("q", b"x", properties={ID: 12})
    assert broker.queue("q").message_count == 0
    broker.close()


def test_the_ring_forgets_its_oldest_id_and_deletes_its_record(tmp_path, store):
    broker = _broker(tmp_path, store, id_cache_size=3)
    broker.create_queue("q")
    for n in range(4):
        assert broker.send("q", b"x", properties={ID: f"id-{n}"}) is not None
    assert broker.send("q", b"x", properties={ID: "id-3"}) is None
    assert broker.send("q", b"x", properties={ID: "id-0"}) is not None, "id-0 left the ring when id-3 came"
    assert broker.send("q", b"x", properties={ID: "id-1"}) is not None
    broker.close()
    if store is not None:
        assert _stored_ids(tmp_path, store) == 3


def test_ids_survive_a_restart_and_a_compaction(tmp_path, durable_store):
    store = durable_store
    broker = _broker(tmp_path, store, id_cache_size=100)
    broker.create_queue("q")
    for n in range(50):
        broker.send("q", b"x" * 1000, properties={ID: f"id-{n}"})
    consumer = broker.create_consumer("q")
    for _ in range(50):
        consumer.ack(consumer.receive(0))
    broker.close()
    with MessageStore(tmp_path / "broker", backend=store, sync="none", file_size=SMALL_FILE) as compacting:
        compacting.load()
        compacting.compact()
    broker = _broker(tmp_path, store, id_cache_size=100)
    assert all(broker.send("q", b"x", properties={ID: f"id-{n}"}) is None for n in range(50))
    assert broker.send("q", b"x", properties={ID: "id-50"}) is not None
    broker.close()


def test_a_smaller_cache_at_restart_keeps_the_newest_ids(tmp_path, durable_store):
    store = durable_store
    broker = _broker(tmp_path, store, id_cache_size=10)
    broker.create_queue("q")
    for n in range(10):
        broker.send("q", b"x", properties={ID: f"id-{n}"})
    broker.close()
    broker = _broker(tmp_path, store, id_cache_size=4)
    assert broker.send("q", b"x", properties={ID: "id-9"}) is None
    assert broker.send("q", b"x", properties={ID: "id-6"}) is None
    broker.close()
    assert _stored_ids(tmp_path, store) == 4
    broker = _broker(tmp_path, store, id_cache_size=4)
    assert broker.send("q", b"x", properties={ID: "id-5"}) is not None, "forgotten at the smaller restart"
    broker.close()


def test_persist_id_cache_false_keeps_the_ids_in_memory_only(tmp_path, durable_store):
    store = durable_store
    broker = _broker(tmp_path, store, persist_id_cache=False)
    broker.create_queue("q")
    broker.send("q", b"x", properties={ID: "a"})
    assert broker.send("q", b"x", properties={ID: "a"}) is None
    broker.close()
    assert _stored_ids(tmp_path, store) == 0
    broker = _broker(tmp_path, store, persist_id_cache=False)
    assert broker.send("q", b"x", properties={ID: "a"}) is not None
    broker.close()


def test_an_id_is_remembered_whatever_becomes_of_its_message(tmp_path, durable_store):
    """Artemis checks and caches the id before routing: an unrouted, a non-durable and a scheduled
    message's id all count, and are journaled."""
    sends = {"unrouted": ("nowhere", {}), "light": ("q", {"durable": False}),
             "later": ("q", {"scheduled_delivery_time": 4102444800000})}
    broker = _broker(tmp_path, durable_store)
    broker.create_queue("q")
    for key, (address, options) in sends.items():
        assert broker.send(address, b"x", properties={ID: key}, **options) is not None
    broker.close()
    broker = _broker(tmp_path, durable_store)
    for key, (address, options) in sends.items():
        assert broker.send(address, b"x", properties={ID: key}, **options) is None, key
    broker.close()
    assert _stored_ids(tmp_path, durable_store) == 3


def test_hornetq_reads_hq_dupl_id_and_no_other(tmp_path, store):
    broker = _broker(tmp_path, store, dialect="hornetq")
    broker.create_queue("q")
    broker.send("q", b"x", properties={"_HQ_DUPL_ID": "a"})
    assert broker.send("q", b"x", properties={"_HQ_DUPL_ID": "a"}) is None
    broker.send("q", b"x", properties={ID: "b"})
    assert broker.send("q", b"x", properties={ID: "b"}) is not None, "HornetQ never read _AMQ_DUPL_ID"
    broker.close()


def test_a_duplicate_in_a_transaction_makes_its_commit_roll_back(tmp_path, store):
    broker = _broker(tmp_path, store)
    broker.create_queue("q")
    broker.send("q", b"old", properties={ID: "seen"})
    session = broker.create_session()
    consumer = session.create_consumer("q")
    received = consumer.receive(0)
    consumer.ack(received)
    assert session.send("q", b"new", properties={ID: "fresh"}) is not None
    assert session.send("q", b"again", properties={ID: "seen"}) is None
    with pytest.raises(DuplicateIdError) as raised:
        session.commit()
    assert raised.value.duplicate_id == b"seen" and raised.value.address == "q"
    assert broker.queue("q").message_count == 1, "the send rolled back, the ack undone"
    assert session.send("q", b"new", properties={ID: "fresh"}) is not None, "a rolled-back id was not kept"
    session.commit()
    assert broker.send("q", b"x", properties={ID: "fresh"}) is None
    again = consumer.receive(0)
    assert again.message_id == received.message_id and again.redelivered
    broker.close()


def test_an_id_sent_twice_in_one_transaction_or_committed_meanwhile_refuses_the_commit(tmp_path, store):
    broker = _broker(tmp_path, store)
    broker.create_queue("q")
    twice = broker.create_session()
    twice.send("q", b"1", properties={ID: "x"})
    assert twice.send("q", b"2", properties={ID: "x"}) is None
    with pytest.raises(DuplicateIdError):
        twice.commit()
    late = broker.create_session()
    late.send("q", b"1", properties={ID: "y"})
    assert broker.send("q", b"first", properties={ID: "y"}) is not None
    with pytest.raises(DuplicateIdError):
        late.commit()
    assert broker.queue("q").message_count == 1
    rolled = broker.create_session()
    rolled.send("q", b"1", properties={ID: "z"})
    rolled.rollback()
    assert broker.send("q", b"z", properties={ID: "z"}) is not None
    broker.close()


def test_a_classic_broker_has_no_duplicate_id_property(tmp_path):
    activemq_xml = '<beans><broker xmlns="http://activemq.apache.org/schema/core"/></beans>'
    broker = Broker(config=activemq_xml)
    broker.create_queue("q")
    broker.send("q", b"x", properties={ID: "a"})
    assert broker.send("q", b"x", properties={ID: "a"}) is not None
    broker.close()


def test_broker_xml_sets_the_cache_and_refuses_a_bad_size():
    xml = "<configuration><core><id-cache-size>2</id-cache-size><persist-id-cache>false</persist-id-cache></core></configuration>"
    broker = Broker(config=xml)
    assert (broker._duplicates.size, broker._duplicates.persist) == (2, False)
    broker.close()
    with pytest.raises(ConfigError, match="id-cache-size.*line 1"):
        Broker(config=f"<configuration><core><id-cache-size>{ID_CACHE_SIZE_MAX + 1}</id-cache-size></core></configuration>")
    with pytest.raises(ConfigError, match="id_cache_size"):
        Broker(config=xml, id_cache_size=5)


@pytest.mark.parametrize("size", [-1, ID_CACHE_SIZE_MAX + 1, True, 2.0])
def test_id_cache_size_out_of_range_is_refused(size):
    with pytest.raises(ConfigError, match="id_cache_size"):
        Broker(id_cache_size=size)


def test_id_cache_size_at_its_maximum_is_taken():
    broker = Broker(id_cache_size=ID_CACHE_SIZE_MAX)
    broker.create_queue("q")
    assert broker.send("q", b"x", properties={ID: "a"}) is not None
    broker.close()


_SENDER = textwrap.dedent("""
    import sys
    from journal_engine import Broker
    broker = Broker(sys.argv[1], store=sys.argv[2], sync="always", id_cache_size=1000,
                    store_options={"file_size": 1 << 20})
    if "orders" not in broker.queue_names():
        broker.create_queue("orders")
    n = 0
    while True:
        key = f"id-{n % 1500}"          # ids come round again: some leave the ring, some are refused
        sent = broker.send("orders", b"x" * 64, properties={"_AMQ_DUPL_ID": key})
        print(key, "routed" if sent is not None else "refused", flush=True)
        n += 1
""")


@pytest.mark.parametrize("backend", ["journal", "lmdb"])
def test_a_killed_sender_never_gets_one_id_routed_twice(tmp_path, backend):
    """SIGKILL a sender at random points, three lives in a row: every id whose send returned (synced)
    is refused after the restart, and every message that came back has its id in the cache: a
    message and its id are one atomic group."""
    if backend == "lmdb":
        pytest.importorskip("lmdb", reason="the lmdb extra (pip install '.[lmdb]') is not installed")
    directory = str(tmp_path / "broker")
    for life, lines in enumerate((400, 900, 1700)):
        child = subprocess.Popen([sys.executable, "-c", _SENDER, directory, backend], stdout=subprocess.PIPE,
                                 env=dict(os.environ))
        answered = []
        for _ in range(lines):
            line = child.stdout.readline().decode().split()
            assert line, f"the sender died in life {life}"
            answered.append(line)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        broker = Broker(directory, store=backend, sync="none", id_cache_size=1000, store_options={"file_size": SMALL_FILE})
        consumer = broker.create_consumer("orders")
        recovered = []
        while (message := consumer.receive(0)) is not None:
            recovered.append(message.properties["_AMQ_DUPL_ID"])
            consumer.ack(message)
        remembered = set(key.decode() for key in broker.duplicate_ids("orders"))
        assert set(recovered) <= remembered, "a message came back without its id"
        newest = [key for key, verdict in answered if verdict == "routed"][-1000:]
        assert set(newest) <= remembered, "an id whose send returned was lost"
        assert all(broker.send("orders", b"y", properties={"_AMQ_DUPL_ID": key}) is None for key in newest[-50:])
        broker.close()
