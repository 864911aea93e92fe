"""The message-store additions the broker relies on: journal transactions (StoreTransaction), the
one-call send and acknowledgement, and the fast message encoder (byte-identical to encode_message)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from journal_engine import DuplicateRecordError, JournalError, MessageStore, RecordType, UnknownRecordError
from journal_engine.record_format import encode_message, encode_plain_message

SMALL = 256 * 1024


@pytest.fixture
def open_store(tmp_path):
    opened = []

    def _open(**options):
        options.setdefault("file_size", SMALL)
        store = MessageStore(tmp_path / "store", **options)
        opened.append(store)
        return store, store.load()

    yield _open
    for store in opened:
        store.close()


def store_with_a_message(open_store, body: bytes = b"m"):
    """A fresh store holding queue 1 ("q") and message 1 with its reference on that queue."""
    store, _ = open_store()
    store.store_queue(1, "q", "q")
    store.store_message(1, "q", body)
    store.store_reference(1, 1)
    return store


def test_transaction_records_are_invisible_until_commit(open_store):
    store = store_with_a_message(open_store, b"original")
    tx = store.transaction()
    tx.store_message(2, "DLA", b"copy", properties={"_AMQ_ORIG_MESSAGE_ID": 1})
    tx.store_reference(1, 2)
    tx.store_acknowledge(1, 1)
    assert tx.records == 3
    assert not store.has_message(2)
    assert store.reference_queues(1) == {1}
    tx.commit()
    assert store.reference_queues(2) == {1}
    assert store.reference_queues(1) == set()
    store.delete_message(1)
    store.close()
    store, state = open_store()
    assert list(state.messages) == [2]
    assert [r.message_id for r in state.references[1]] == [2]


def test_a_transaction_without_commit_is_rolled_back_at_load(open_store):
    store = store_with_a_message(open_store)
    tx = store.transaction()
    tx.store_message(2, "q", b"lost")
    tx.store_reference(1, 2)
    tx.store_acknowledge(1, 1)
    store.close()                       # no COMMIT: recovery rolls it back
    store, state = open_store()
    assert list(state.messages) == [1]
    assert state.reports["messages"].rolled_back == [tx.tx_id]


def test_rolled_back_transaction_leaves_nothing(open_store):
    store = store_with_a_message(open_store)
    tx = store.transaction()
    tx.store_acknowledge(1, 1)
    tx.rollback()
    assert store.reference_queues(1) == {1}
    with pytest.raises(JournalError, match="rolled back"):
        tx.commit()
    store.close()
    store, state = open_store()
    assert [r.message_id for r in state.references[1]] == [1]


def test_transaction_checks_its_records(open_store):
    store = store_with_a_message(open_store)
    tx = store.transaction()
    with pytest.raises(DuplicateRecordError):
        tx.store_message(1, "q", b"again")
    with pytest.raises(UnknownRecordError):
        tx.store_reference(9, 1)
    with pytest.raises(UnknownRecordError):
        tx.store_acknowledge(1, 5)
    tx.store_acknowledge(1, 1)
    with pytest.raises(DuplicateRecordError):
        tx.store_acknowledge(1, 1)
    assert tx.records == 1
    tx.commit()


def test_empty_transaction_touches_no_file(open_store):
    store, _ = open_store()
    before = store.stats()["messages_journal"]
    with store.transaction() as tx:
        pass
    assert tx.state == "committed"
    assert store.stats()["messages_journal"] == before


def test_transactional_scheduled_time_is_not_capped(open_store):
    store, _ = open_store(max_redelivery_records=0)
    store.store_queue(1, "q", "q")
    tx = store.transaction()
    tx.store_message(1, "q", b"later")
    tx.store_reference(1, 1)
    tx.update_scheduled_delivery_time(1, 1, 4_000_000_000_000)
    tx.commit()
    store.close()
    store, state = open_store(max_redelivery_records=0)
    assert state.references[1][0].scheduled_delivery_time == 4_000_000_000_000


def test_one_call_send_and_acknowledge_write_the_same_records(open_store, tmp_path):
    store, _ = open_store(sync="none")
    store.store_queue(1, "a", "t")
    store.store_queue(2, "b", "t")
    store.store_message_references(1, "t", b"m", [1, 2], properties={"k": 1})
    with pytest.raises(UnknownRecordError):
        store.store_message_references(2, "t", b"m", [1, 3])
    with pytest.raises(DuplicateRecordError):
        store.store_message_references(2, "t", b"m", [1, 1])
    assert not store.has_message(2)
    assert store.reference_queues(1) == {1, 2}
    assert store.acknowledge(1, 1) is False
    assert store.acknowledge(2, 1) is True
    assert not store.has_message(1)
    with pytest.raises(UnknownRecordError):
        store.acknowledge(2, 1)
    counts = {t: store.record_count(t) for t in (RecordType.ADD_MESSAGE, RecordType.ADD_REF)}
    assert counts == {RecordType.ADD_MESSAGE: 0, RecordType.ADD_REF: 0}     # deleted with its message


_texts = st.text(max_size=12)
_values = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False), _texts,
                    st.binary(max_size=8))


@settings(max_examples=200, deadline=None)
@given(address=_texts, body=st.binary(max_size=64), durable=st.booleans(),
       expiration=st.integers(0, 2**63 - 1), routing=st.sampled_from([None, "anycast", "multicast"]),
       properties=st.one_of(st.none(), st.dictionaries(_texts, _values, max_size=3),
                            st.dictionaries(_texts, _texts, max_size=3)))      # text maps: the cached path
def test_fast_encoder_is_byte_identical_to_encode_message(address, body, durable, expiration, routing, properties):
    expected = encode_message(address, body, properties=properties, durable=durable, expiration=expiration,
                              routing_type=routing)
    first = encode_plain_message(address, body, properties, durable, expiration, routing)
    again = encode_plain_message(address, body, properties, durable, expiration, routing)    # the cached head
    assert first == again == expected
    if expiration:
        assert encode_plain_message(address, body, properties, durable, 0, routing) == encode_message(
            address, body, properties=properties, durable=durable, expiration=0, routing_type=routing)


def test_fast_encoder_keeps_text_maps_apart_from_equal_values_of_other_types():
    """The text-map cache is keyed by the map's items: 1, 1.0 and True equal each other, never a str."""
    for properties in ({"k": "1"}, {"k": 1}, {"k": True}, {"k": 1.0}, {"k": "1"}, {"k": b"1"}, {"k": bytearray(b"1")}):
        for _ in range(2):
            assert encode_plain_message("q", b"b", properties, True, 0, None) == encode_message(
                "q", b"b", properties=properties, durable=True, expiration=0, routing_type=None)


def test_fast_encoder_refuses_what_encode_message_refuses():
    encode_plain_message("a", b"b", None, True, 0, None)          # the head of ("a", True, None) is cached now
    for bad in ({"expiration": -1}, {"routing_type": "broadcast"}, {"expiration": 0.0}, {"expiration": False}):
        arguments = dict(address="a", body=b"b", properties=None, durable=True, expiration=0, routing_type=None)
        arguments.update(bad)
        with pytest.raises(ValueError):
            encode_plain_message(*arguments.values())
