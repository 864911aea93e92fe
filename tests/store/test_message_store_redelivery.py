"""What only the journal backend does with the delivery-count (34) records: Artemis's update-factor
compaction of its files.

Every backend-neutral message-store behaviour (max_redelivery_records, the batch entry points,
strict mode, compaction keeping the latest count and time per reference, SIGKILL recovery, ...)
lives in tests/store/test_store_conformance.py, which runs each test body on every backend;
tests/store/test_message_store_parity.py holds the compiled writers' parity with their Python twin.
"""
from __future__ import annotations

from journal_engine import MessageStore, RecordType

# small files, a low file threshold and rule (a) off (compact_percentage=0): only the update factor can compact
OPTIONS = {"backend": "journal", "max_redelivery_records": -1, "file_size": 64 * 1024, "compact_min_files": 2,
           "compact_percentage": 0}


def test_update_factor_triggers_compaction_of_count_records(tmp_path):
    """Artemis's rule (b): replaceable updates / adds > 10 with more than compact_min_files files."""
    store = MessageStore(tmp_path / "store", **OPTIONS)
    try:
        store.load()
        store.store_queue(1, "a", "a")
        for message_id in range(1, 5):
            store.store_message(message_id, "a", b"x")
            store.store_reference(1, message_id)
        queues, messages = [1] * 4, [1, 2, 3, 4]
        rounds = 5000                       # 20000 records of 48 bytes: about 15 files of 64 KiB
        for count in range(1, rounds + 1):
            store.update_delivery_counts(queues, messages, [count] * 4)
        journal = store._message_records
        if journal._compaction_thread is not None:
            journal._compaction_thread.join()
        # compact_percentage=0 turns rule (a) off: only the update factor can have started these
        assert journal.compaction_count >= 1
        # what is left: the latest per reference plus the records written since the last compaction
        assert store.record_count(RecordType.UPDATE_DELIVERY_COUNT) < 4 * rounds
    finally:
        store.close()
    store = MessageStore(tmp_path / "store", **OPTIONS)
    try:
        state = store.load()
        assert [ref.delivery_count for ref in state.references[1]] == [rounds] * 4
    finally:
        store.close()
