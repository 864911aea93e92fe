"""A stored message keeps its priority (ADD_MESSAGE format version 2), and the version 1 bodies written
before priorities read as the default priority, through record_format, the compiled reader and the twin."""
from __future__ import annotations

import pytest

from journal_engine import limits, record_format as fmt
from journal_engine._twin import message_recovery as twin_recovery
from journal_engine.errors import CorruptRecordError
from journal_engine.message_store.message_store import MessageStore

compiled_recovery = pytest.importorskip("journal_engine._message_recovery", reason="the compiled core is not built")
READERS = [compiled_recovery, twin_recovery]

pytestmark = pytest.mark.twin

#: a message body as every version before priorities wrote it (version 1, a zero pad byte)
VERSION_1 = (bytes([1, fmt.FLAG_DURABLE, 1, 0]) + (0).to_bytes(8, "little") + (6).to_bytes(4, "little") + b"orders"
             + (2).to_bytes(4, "little") + b"hi" + (0).to_bytes(4, "little"))


def test_a_version_1_message_reads_as_the_default_priority():
    stored = fmt.decode_message(1, VERSION_1)
    assert (stored.address, stored.body, stored.routing_type, stored.priority) == ("orders", b"hi", "anycast", 4)
    for reader in READERS:
        assert reader.decode_message_fields(1, VERSION_1)[-1] == limits.PRIORITY_DEFAULT


def test_the_default_priority_is_written_as_version_1_byte_for_byte():
    assert fmt.encode_message("orders", b"hi", routing_type="anycast") == VERSION_1
    assert fmt.encode_message("orders", b"hi", routing_type="anycast", priority=4) == VERSION_1
    assert fmt.encode_plain_message("orders", b"hi", None, True, 0, "anycast") == VERSION_1
    assert fmt.encode_plain_message("orders", b"hi", None, True, 0, "anycast", 4) == VERSION_1


@pytest.mark.parametrize("priority", range(limits.PRIORITY_MIN, limits.PRIORITY_MAX + 1))
def test_every_priority_is_kept(priority):
    body = fmt.encode_plain_message("orders", b"hi", {"k": "v"}, True, 0, None, priority)
    assert body == fmt.encode_message("orders", b"hi", properties={"k": "v"}, priority=priority)
    assert body[0] == (fmt.MESSAGE_FORMAT_VERSION if priority == 4 else fmt.MESSAGE_WITH_PRIORITY_FORMAT_VERSION)
    assert fmt.decode_message(1, body).priority == priority
    plain = fmt.encode_message("orders", b"hi", priority=priority)      # no properties: the compiled reader's own path
    for reader in READERS:
        assert reader.decode_message_fields(1, body)[-1] == priority
        assert reader.decode_message_fields(1, plain)[-1] == priority


@pytest.mark.parametrize("priority", [-1, 10, True, 4.0, "4", None])
def test_a_priority_outside_0_to_9_is_refused(priority):
    with pytest.raises(ValueError, match="priority"):
        fmt.encode_message("orders", b"hi", priority=priority)
    with pytest.raises(ValueError, match="priority"):
        fmt.encode_plain_message("orders", b"hi", None, True, 0, None, priority)


def test_a_version_2_body_with_a_priority_past_9_is_corrupt():
    body = bytearray(fmt.encode_message("orders", b"hi", priority=9))
    body[3] = 10
    with pytest.raises(CorruptRecordError, match="priority 10"):
        fmt.decode_message(1, bytes(body))
    for reader in READERS:
        with pytest.raises(CorruptRecordError, match="priority 10"):
            reader.decode_message_fields(1, bytes(body))


@pytest.mark.parametrize("backend", ["journal", "lmdb"])
def test_the_store_recovers_each_messages_priority(tmp_path, backend):
    if backend == "lmdb":
        pytest.importorskip("lmdb")
    with MessageStore(tmp_path, backend=backend, **({"file_size": 1 << 20} if backend == "journal" else {})) as store:
        store.load()
        store.store_queue(1, "q", "orders")
        store.store_message_references(10, "orders", b"a", [1], priority=9)
        store.store_message_references(11, "orders", b"b", [1])
        store.store_message_references(12, "orders", b"c", [1], properties={"k": "v"}, priority=0)
        with store.transaction() as tx:
            tx.store_message(13, "orders", b"d", priority=2)
            tx.store_reference(1, 13)
    with MessageStore(tmp_path, backend=backend, **({"file_size": 1 << 20} if backend == "journal" else {})) as store:
        messages = store.load().messages
        assert {message_id: messages[message_id].priority for message_id in messages} == {10: 9, 11: 4, 12: 0, 13: 2}
        assert [fields[-1] for fields in messages.fields_of([10, 11, 12, 13])] == [9, 4, 0, 2]
