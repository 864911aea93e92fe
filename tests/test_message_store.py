"""MessageStore: round trips of queues, messages and references, recovery rules, bad input."""
from __future__ import annotations

import os

import pytest

import journal_engine
from journal_engine import (ConfigError, CorruptRecordError, DuplicateRecordError, Journal, JournalClosedError,
                            MessageStore, RecordType, RecoveredReference, StoredMessage, StoredQueue,
                            UnknownRecordError)
from journal_engine.store import records
from journal_engine.store.message_store import BINDINGS_DIRECTORY, MESSAGES_DIRECTORY

SMALL_FILE = 256 * 1024
NOW_MS = 1_700_000_000_000


@pytest.fixture
def store_dir(tmp_path):
    return tmp_path / "store"


@pytest.fixture
def open_store(store_dir):
    """open_store(**options) -> (store, recovered state); every store is closed at the end."""
    opened = []

    def _open(directory=None, *, now_ms=NOW_MS, **options):
        options.setdefault("file_size", SMALL_FILE)
        store = MessageStore(directory or store_dir, **options)
        opened.append(store)
        return store, store.load(now_ms=now_ms)

    yield _open
    for store in opened:
        store.close()


def reopen(open_store, store, **options):
    store.close()
    return open_store(**options)


def test_public_names_are_exported():
    for name in ("MessageStore", "RecoveredState", "RecoveredReference", "StoredMessage", "StoredQueue",
                 "RecordType"):
        assert hasattr(journal_engine, name)
    assert [int(t) for t in (RecordType.QUEUE_BINDING_RECORD, RecordType.ADD_REF, RecordType.ACKNOWLEDGE_REF,
                             RecordType.UPDATE_DELIVERY_COUNT, RecordType.SET_SCHEDULED_DELIVERY_TIME,
                             RecordType.ADD_MESSAGE)] == [21, 32, 33, 34, 36, 45]


def test_messages_queues_and_references_survive_reopen(open_store):
    store, state = open_store()
    assert state.queues == {} and state.messages == {} and state.references == {}
    store.store_queue(1, "orders", "orders.eu", filter="priority > 3")
    store.store_queue(2, "audit", "orders.eu", routing_type="multicast")
    properties = {"s": "text", "i": -(1 << 63), "big": (1 << 63) - 1, "f": 2.5, "t": True, "no": False,
                  "raw": b"\x00\xff", "none": None, "ünï": "cödé"}
    store.store_message(10, "orders.eu", b"payload", properties=properties, expiration=NOW_MS + 5000,
                        routing_type="anycast")
    store.store_message(11, "orders.eu", b"", durable=False)
    store.store_reference(1, 10)
    store.store_reference(2, 10)
    store.store_reference(1, 11)
    store, state = reopen(open_store, store)
    assert state.queues == {1: StoredQueue(1, "orders", "orders.eu", "anycast", "priority > 3"),
                            2: StoredQueue(2, "audit", "orders.eu", "multicast", None)}
    assert state.messages[10] == StoredMessage(10, "orders.eu", b"payload", properties, True, NOW_MS + 5000,
                                               "anycast")
    assert state.messages[11] == StoredMessage(11, "orders.eu", b"", {}, False, 0, None)
    assert state.references == {1: [RecoveredReference(10, 0, 0), RecoveredReference(11, 0, 0)],
                                2: [RecoveredReference(10, 0, 0)]}
    assert state.anomalies == [] and state.deleted_messages == []
    assert (state.max_message_id, state.max_queue_id) == (11, 2)


def test_acknowledged_reference_is_not_recovered_and_message_without_references_is_deleted(open_store):
    store, _ = open_store()
    store.store_queue(1, "a", "a")
    store.store_queue(2, "b", "a")
    store.store_message(5, "a", b"x")
    store.store_reference(1, 5)
    store.store_reference(2, 5)
    store.store_acknowledge(1, 5)
    store.store_message(6, "a", b"y")
    store.store_reference(1, 6)
    store.store_acknowledge(1, 6)          # every reference acknowledged, delete_message never called
    store, state = reopen(open_store, store)
    assert state.references == {1: [], 2: [RecoveredReference(5)]}
    assert set(state.messages) == {5}
    assert state.deleted_messages == [6]   # as Artemis's handleNoMessageReferences
    store, state = reopen(open_store, store)
    assert state.deleted_messages == [] and set(state.messages) == {5}


def test_deleted_message_takes_its_references_with_it(open_store):
    store, _ = open_store()
    store.store_queue(1, "a", "a")
    store.store_message(5, "a", b"x")
    store.store_reference(1, 5)
    store.update_delivery_count(1, 5, 1)
    store.delete_message(5)
    assert not store.has_message(5)
    with pytest.raises(UnknownRecordError):
        store.update_delivery_count(1, 5, 2)
    store, state = reopen(open_store, store)
    assert state.messages == {} and state.references == {1: []}


def test_restored_count_is_the_writers_last_persisted_count(open_store):
    store, _ = open_store(max_redelivery_records=-1)
    store.store_queue(1, "a", "a")
    store.store_message(5, "a", b"x")
    store.store_reference(1, 5)
    assert store.update_delivery_count(1, 5, 3)
    store, state = reopen(open_store, store, max_redelivery_records=-1)
    assert state.references[1] == [RecoveredReference(5, 3, 0)]
    assert store.persisted_delivery_count(1, 5) == 3
    # the first cancel after a restart with the same count writes nothing (Artemis: setDeliveryCount
    # also sets persistedCount)
    assert store.update_delivery_count(1, 5, 3) is False
    assert store.update_delivery_count(1, 5, 4) is True
    assert store.record_count(RecordType.UPDATE_DELIVERY_COUNT) == 2


def test_scheduled_time_in_the_past_comes_back_as_deliver_now(open_store):
    store, _ = open_store(max_redelivery_records=-1)
    store.store_queue(1, "a", "a")
    for message_id, scheduled in ((1, NOW_MS - 1), (2, NOW_MS), (3, NOW_MS + 1), (4, 0)):
        store.store_message(message_id, "a", b"x")
        store.store_reference(1, message_id)
        if scheduled:
            store.update_scheduled_delivery_time(1, message_id, scheduled, 1)
    store, state = reopen(open_store, store, max_redelivery_records=-1)
    times = {ref.message_id: ref.scheduled_delivery_time for ref in state.references[1]}
    assert times == {1: 0, 2: 0, 3: NOW_MS + 1, 4: 0}     # "<= now" is due (PostOfficeJournalLoader)


def test_the_clock_decides_what_is_due(open_store):
    class Clock:
        def now_ms(self):
            return 5_000

    store, _ = open_store(max_redelivery_records=-1)
    store.store_queue(1, "a", "a")
    store.store_message(1, "a", b"x")
    store.store_reference(1, 1)
    store.update_scheduled_delivery_time(1, 1, 6_000, 1)
    store.close()
    store = MessageStore(store.directory, clock=Clock(), file_size=SMALL_FILE)
    try:
        assert store.load().references[1] == [RecoveredReference(1, 0, 6_000)]
    finally:
        store.close()


def test_store_directory_holds_a_message_and_a_bindings_journal(open_store, store_dir):
    store, _ = open_store()
    store.store_queue(1, "a", "a")
    store.store_message(1, "a", b"x")
    assert sorted(os.listdir(store_dir)) == sorted([MESSAGES_DIRECTORY, BINDINGS_DIRECTORY])
    assert store.record_count(RecordType.QUEUE_BINDING_RECORD) == 1
    assert store.record_count(RecordType.ADD_MESSAGE) == 1


def test_queue_and_message_ids_are_separate_spaces(open_store):
    store, _ = open_store()
    store.store_queue(7, "a", "a")
    store.store_message(7, "a", b"x")     # same number, no collision
    store.store_reference(7, 7)
    store, state = reopen(open_store, store)
    assert set(state.queues) == {7} and set(state.messages) == {7}


def test_delete_queue_acknowledges_its_references(open_store):
    store, _ = open_store()
    store.store_queue(1, "a", "a")
    store.store_queue(2, "b", "a")
    store.store_message(1, "a", b"x")
    store.store_reference(1, 1)
    store.store_reference(2, 1)
    store.store_message(2, "a", b"y")
    store.store_reference(1, 2)
    assert store.delete_queue(1) == 2
    assert not store.has_message(2) and store.reference_queues(1) == {2}
    store, state = reopen(open_store, store)
    assert set(state.queues) == {2}
    assert state.references == {2: [RecoveredReference(1)]}
    assert state.anomalies == []


# ----- misuse gets clear errors -------------------------------------------------------------------------

def test_misuse_raises_named_errors(open_store):
    store, _ = open_store()
    store.store_queue(1, "a", "a")
    store.store_message(1, "a", b"x")
    store.store_reference(1, 1)
    with pytest.raises(DuplicateRecordError):
        store.store_queue(1, "again", "a")
    with pytest.raises(DuplicateRecordError):
        store.store_message(1, "a", b"again")
    with pytest.raises(DuplicateRecordError):
        store.store_reference(1, 1)
    with pytest.raises(UnknownRecordError, match="queue 2"):
        store.store_reference(2, 1)
    with pytest.raises(UnknownRecordError, match="message 9"):
        store.store_reference(1, 9)
    with pytest.raises(UnknownRecordError):
        store.store_acknowledge(1, 9)
    with pytest.raises(UnknownRecordError):
        store.delete_message(9)
    with pytest.raises(UnknownRecordError):
        store.update_delivery_count(1, 9, 1)
    with pytest.raises(UnknownRecordError):
        store.update_scheduled_delivery_time(1, 9, 1, 1)
    with pytest.raises(OverflowError):
        store.update_delivery_count(1, 1, -1)
    with pytest.raises(OverflowError):
        store.update_delivery_count(1, 1, 1 << 32)
    with pytest.raises(TypeError):
        store.store_message(2, "a", b"x", properties={"bad": object()})
    with pytest.raises(OverflowError):
        store.store_message(2, "a", b"x", properties={"big": 1 << 63})
    with pytest.raises(ValueError):
        store.store_message(2, "a", b"x", routing_type="broadcast")
    with pytest.raises(ValueError):
        store.store_queue(3, "a", "a", routing_type="direct")
    assert not store.has_message(2)


def test_a_store_must_be_loaded_and_not_closed(store_dir):
    store = MessageStore(store_dir, file_size=SMALL_FILE)
    with pytest.raises(JournalClosedError, match="load"):
        store.store_queue(1, "a", "a")
    with pytest.raises(JournalClosedError, match="load"):
        store.update_delivery_count(1, 1, 1)
    store.load()
    store.close()
    with pytest.raises(JournalClosedError, match="closed"):
        store.store_message(1, "a", b"x")
    with pytest.raises(JournalClosedError):
        store.update_delivery_count(1, 1, 1)
    store.close()   # twice is fine


@pytest.mark.parametrize("field, value", [
    ("max_redelivery_records", -2), ("max_redelivery_records", 1.5), ("max_redelivery_records", True),
    ("persist_delivery_count_before_delivery", 1), ("backend", "sqlite"), ("sync", "sometimes"),
])
def test_bad_configuration_names_the_field(store_dir, field, value):
    with pytest.raises(ConfigError) as info:
        MessageStore(store_dir, **{field: value})
    assert field in str(info.value)


def test_lmdb_backend_keeps_the_same_layout_in_lmdb_environments(store_dir):
    """backend="lmdb" (docs/backends.md; its behaviour is checked in tests/test_store_conformance.py)."""
    with MessageStore(store_dir, backend="lmdb") as store:
        store.load()
        assert store.backend == "lmdb"
    for sub in (MESSAGES_DIRECTORY, BINDINGS_DIRECTORY):
        assert os.path.exists(store_dir / sub / "data.mdb")


def test_strict_delivery_sync_needs_the_strict_mode(store_dir):
    with pytest.raises(ConfigError, match="strict_delivery_sync"):
        MessageStore(store_dir, strict_delivery_sync=True)


# ----- bad input in the files -----------------------------------------------------------------------------

def _write_raw(store_dir, records_by_journal):
    """Write records straight into the store's journals, as another program (or a bug) might."""
    for sub, ops in records_by_journal.items():
        with Journal(store_dir / sub, file_size=SMALL_FILE) as journal:
            journal.load()
            for op, record_id, record_type, body in ops:
                getattr(journal, op)(record_id, record_type, body)


def test_corrupt_message_body_raises_naming_the_record(store_dir):
    good = records.encode_message("a", b"x")
    _write_raw(store_dir, {
        BINDINGS_DIRECTORY: [("add", 1, 21, records.encode_queue("a", "a"))],
        MESSAGES_DIRECTORY: [("add", 41, 45, good), ("update", 41, 32, records.encode_queue_id(1)),
                             ("add", 42, 45, good[:-3]), ("update", 42, 32, records.encode_queue_id(1))],
    })
    store = MessageStore(store_dir, file_size=SMALL_FILE)
    try:
        with pytest.raises(CorruptRecordError) as info:
            store.load()
    finally:
        store.close()
    assert "message record 42" in str(info.value)
    assert "ADD_MESSAGE" in str(info.value)
    assert info.value.path == str(store_dir / MESSAGES_DIRECTORY)


def test_corrupt_message_can_be_skipped_and_reported(store_dir):
    good = records.encode_message("a", b"x")
    _write_raw(store_dir, {
        BINDINGS_DIRECTORY: [("add", 1, 21, records.encode_queue("a", "a"))],
        MESSAGES_DIRECTORY: [("add", 41, 45, good), ("update", 41, 32, records.encode_queue_id(1)),
                             ("add", 42, 45, b"\x07garbage"), ("update", 42, 32, records.encode_queue_id(1))],
    })
    store = MessageStore(store_dir, file_size=SMALL_FILE)
    try:
        state = store.load(skip_corrupt=True)
        assert set(state.messages) == {41}
        assert len(state.corrupt_messages) == 1 and "record 42" in str(state.corrupt_messages[0])
        assert state.deleted_messages == []        # a corrupt message is left for a person to look at
    finally:
        store.close()


@pytest.mark.parametrize("body, why", [
    (b"", "message header"),
    (records.encode_message("a", b"x")[:1] + b"\x09" + records.encode_message("a", b"x")[2:], "flag"),
    (b"\x02" + records.encode_message("a", b"x")[1:], "version"),
    (records.encode_message("a", b"x") + b"\x00", "unexpected bytes"),
    (records.encode_message("a", b"x", properties={"k": 1})[:-9] + b"\x63" + b"\x00" * 8, "type tag"),
    (records.encode_message("\u00e9", b"x")[:16] + b"\xff\xfe" + records.encode_message("\u00e9", b"x")[18:],
     "UTF-8"),
])
def test_every_malformed_message_body_is_detected(body, why):
    with pytest.raises(CorruptRecordError, match=why):
        records.decode_message(3, body)


def test_wrong_sized_reference_record_is_corrupt(store_dir):
    _write_raw(store_dir, {
        BINDINGS_DIRECTORY: [("add", 1, 21, records.encode_queue("a", "a"))],
        MESSAGES_DIRECTORY: [("add", 41, 45, records.encode_message("a", b"x")),
                             ("update", 41, 32, records.encode_queue_id(1)),
                             ("update", 41, 34, b"\x01" * 11)],
    })
    store = MessageStore(store_dir, file_size=SMALL_FILE)
    try:
        with pytest.raises(CorruptRecordError, match="UPDATE_DELIVERY_COUNT.*11 bytes"):
            store.load()
    finally:
        store.close()


def test_unknown_queue_and_reference_ids_are_reported_not_fatal(store_dir):
    queue_id = records.encode_queue_id
    _write_raw(store_dir, {
        BINDINGS_DIRECTORY: [("add", 1, 21, records.encode_queue("a", "a")), ("add", 2, 99, b"?")],
        MESSAGES_DIRECTORY: [
            ("add", 41, 45, records.encode_message("a", b"x")),
            ("update", 41, 32, queue_id(1)),
            ("update", 41, 32, queue_id(8)),                                  # queue 8 does not exist
            ("update", 41, 33, queue_id(3)),                                  # ack of no live reference
            ("update", 41, 34, records.encode_delivery_count(5, 2)),          # count for no live reference
            ("update", 41, 36, records.encode_scheduled_time(5, NOW_MS)),     # time for no live reference
            ("update", 41, 77, b"?"),                                         # unknown update type
            ("add", 43, 12, b"not a message"),                                # unknown record type
        ]})
    store = MessageStore(store_dir, file_size=SMALL_FILE)
    try:
        state = store.load(now_ms=NOW_MS)
        assert state.references == {1: [RecoveredReference(41)]}
        assert state.unknown_queue_references == {8: [RecoveredReference(41)]}
        text = "\n".join(state.anomalies)
        for fragment in ("queue 8", "acknowledgement on queue 3", "delivery count 2 for queue 5",
                         f"scheduled time {NOW_MS} for queue 5", "unknown type 77", "record 43 has type 12",
                         "bindings record 2 has type 99"):
            assert fragment in text
        assert len(state.anomalies) == 7
        # the reference on the unknown queue stays live: it can be acknowledged
        store.store_acknowledge(8, 41)
    finally:
        store.close()


def test_record_count_counts_live_records_of_a_type(open_store):
    store, _ = open_store(max_redelivery_records=-1)
    store.store_queue(1, "a", "a")
    for message_id in (1, 2):
        store.store_message(message_id, "a", b"x")
        store.store_reference(1, message_id)
        for count in (1, 2, 3):
            store.update_delivery_count(1, message_id, count)
    assert store.record_count(34) == 6
    assert store.record_count(RecordType.ADD_REF) == 2
    store.delete_message(2)       # a deleted message's records are no longer replayed
    assert store.record_count(34) == 3
    assert store.record_count(36) == 0


def test_transactional_records_are_recovered_only_when_committed(open_store):
    store, _ = open_store(max_redelivery_records=-1)
    store.store_queue(1, "a", "a")
    store.store_queue(2, "dlq", "dla")
    store.store_message(1, "a", b"x")
    store.store_reference(1, 1)
    store.update_delivery_count(1, 1, 3)
    with store.transaction() as move:      # a dead-letter move: the copy, its reference, the original's ack
        move.store_message(2, "dla", b"x", properties={"_AMQ_ORIG_QUEUE": "a"})
        move.store_reference(2, 2)
        move.store_acknowledge(1, 1)
    abandoned = store.transaction()
    abandoned.store_message(3, "a", b"y")
    abandoned.store_reference(1, 3)
    abandoned.rollback()
    assert store.reference_queues(2) == {2} and store.reference_queues(1) == set()
    store, state = reopen(open_store, store, max_redelivery_records=-1)
    assert state.references == {1: [], 2: [RecoveredReference(2)]}
    assert set(state.messages) == {2} and state.messages[2].properties == {"_AMQ_ORIG_QUEUE": "a"}
    assert state.deleted_messages == [1] and state.anomalies == []
