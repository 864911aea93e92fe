"""The delivery-count shadow's rules (journal_engine/message_store/delivery_shadow.py), file level: what
counts, what is voided, and what a store in strict mode does with it around a load."""
from __future__ import annotations

import contextlib
import os
import shutil
import threading
import uuid

import pytest

import journal_engine
from journal_engine import Journal, MessageStore
from journal_engine.errors import IncompatibleFormatError
from journal_engine._twin import record_writer
from journal_engine.message_store import delivery_shadow
from journal_engine.message_store.delivery_shadow import (ENTRY_BYTES, HEADER_BYTES, DeliveryShadow, read_counts)

BOOT = uuid.UUID("12345678-1234-5678-1234-567812345678").bytes
OTHER_BOOT = uuid.UUID("87654321-4321-8765-4321-876543218765").bytes


class WriteOuts:
    """Stands in for the journal's flush: counts the write-outs the shadow asks for."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def _shadow(tmp_path, entries=8):
    write_out = WriteOuts()
    return DeliveryShadow(str(tmp_path / delivery_shadow.FILE_NAME), write_out, entries=entries,
                          this_boot=BOOT, life=0x5EED), write_out


@contextlib.contextmanager
def _writer_with_shadow(directory, implementation, *, cap=-1, entries=8, write_out=None):
    """A record writer (compiled or twin) of a new journal (sync none) in ``directory``, a shadow
    attached whose write-out is ``write_out(journal)`` (default: a WriteOuts): (journal, writer, shadow,
    write-out)."""
    writer_class = _writer_class(implementation)
    journal = Journal(directory / "journal", sync="none", file_size=64 * 1024)
    journal.load()
    writer = writer_class(journal, cap)
    write_out = WriteOuts() if write_out is None else write_out(journal)
    shadow = DeliveryShadow(str(directory / delivery_shadow.FILE_NAME), write_out, entries=entries, this_boot=BOOT,
                            life=0x5EED)
    writer.attach_shadow(shadow)
    try:
        yield journal, writer, shadow, write_out
    finally:
        writer.detach_shadow()
        shadow.close(void=False)
        journal.close()


def test_counts_are_the_latest_per_reference(tmp_path):
    # entries are written in order: dispatches raise a count, a close lowers it (3 -> 2)
    shadow, _ = _shadow(tmp_path)
    for queue_id, message_id, count in [(1, 1, 1), (1, 2, 1), (1, 1, 3), (1, 1, 2), (2, 1, 5)]:
        shadow.record(queue_id, message_id, count)
    assert read_counts(shadow.path, BOOT) == {(1, 1): 2, (1, 2): 1, (2, 1): 5}
    shadow.close(void=False)


def test_another_boot_or_a_voided_header_counts_nothing(tmp_path):
    shadow, _ = _shadow(tmp_path)
    shadow.record(1, 1, 4)
    assert read_counts(shadow.path, OTHER_BOOT) == {}
    shadow.close(void=True)
    assert read_counts(shadow.path, BOOT) == {}


def test_reading_stops_at_an_entry_cut_short(tmp_path):
    shadow, _ = _shadow(tmp_path)
    shadow.record(1, 1, 1)
    shadow.record(1, 2, 1)
    shadow.record(1, 3, 1)
    shadow.close(void=False)
    with open(shadow.path, "r+b") as file:         # the second entry's last bytes never made it
        file.seek(HEADER_BYTES + 2 * ENTRY_BYTES - 3)
        file.write(b"\0\0\0")
    assert read_counts(shadow.path, BOOT) == {(1, 1): 1}


def test_a_full_shadow_writes_the_journal_out_and_voids_its_entries(tmp_path):
    shadow, write_out = _shadow(tmp_path, entries=4)
    for count in range(1, 5):
        shadow.record(1, 1, count)
    assert write_out.calls == 0
    shadow.record(1, 2, 7)                           # the fifth: a write-out, then a new epoch
    assert write_out.calls == 1
    assert read_counts(shadow.path, BOOT) == {(1, 2): 7}     # (1, 1) is the journal's business now
    shadow.close(void=False)


@pytest.mark.parametrize("implementation", ["compiled", "twin"])
def test_a_reference_added_again_does_not_inherit_the_earlier_count(tmp_path, implementation):
    """A message id used again while its earlier reference has a shadow entry: the writer has the
    journal written out and the epoch voided, so only the new reference's dispatches count."""
    with _writer_with_shadow(tmp_path, implementation) as (_journal, writer, shadow, write_out):
        writer.store_message_reference(1, 1, b"message")
        assert writer.record_dispatch(1, 1, 5) is True
        assert read_counts(shadow.path, BOOT) == {(1, 1): 5}
        writer.acknowledge_reference(1, 1, True)
        writer.store_message_reference(1, 1, b"message again")       # the same ids
        assert write_out.calls == 1
        assert read_counts(shadow.path, BOOT) == {}
        writer.record_dispatch(1, 1, 1)
        assert read_counts(shadow.path, BOOT) == {(1, 1): 1}
        writer.store_message_reference(2, 1, b"another message")     # new ids: no write-out
        assert write_out.calls == 1


class HeldWriteOut:
    """The journal's flush, held at its start until released: a roll whose write-out is slow."""

    def __init__(self, journal) -> None:
        self.journal = journal
        self.started, self.release = threading.Event(), threading.Event()

    def __call__(self) -> None:
        self.started.set()
        assert self.release.wait(60)
        self.journal.flush()


def _count_a_kill_keeps(directory, shadow_path, queue_id: int, message_id: int) -> int:
    """The count load gives the reference from these files: the shadow's latest entry, else the
    journal's latest count record (MessageStore.load's rule)."""
    shadowed = read_counts(str(shadow_path), BOOT).get((queue_id, message_id))
    if shadowed is not None:
        return shadowed
    with Journal(directory, read_only=True) as journal:
        record = journal.load().records[message_id]
    counts = [int.from_bytes(body[8:12], "little") for record_type, body in record.updates
              if record_type == 34 and int.from_bytes(body[:8], "little") == queue_id]
    return counts[-1] if counts else 0


@pytest.mark.parametrize("implementation", ["compiled", "twin"])
def test_a_dispatch_during_another_threads_roll_survives_a_kill_before_the_new_epoch(tmp_path, implementation):
    """A dispatch that comes while another thread's roll writes the journal out: once it returns, a
    kill (the files as they are then) keeps its count. Had it returned after a write-out of its own,
    with no entry, its earlier entry would still be the latest of the old epoch, and load prefers
    that to the journal's newer count: one short."""
    kept = tmp_path / "kept"
    with _writer_with_shadow(tmp_path, implementation, entries=2,
                             write_out=HeldWriteOut) as (_journal, writer, shadow, held):
        for message_id in (1, 2):
            writer.store_message_reference(message_id, 7, b"m")
        writer.record_dispatch(7, 1, 1)
        writer.record_dispatch(7, 2, 1)                      # the shadow is full
        rolling = threading.Thread(target=writer.record_dispatch, args=(7, 2, 2))     # rolls, held
        rolling.start()
        try:
            assert held.started.wait(60)
            dispatching = threading.Thread(target=writer.record_dispatch, args=(7, 1, 2))
            dispatching.start()
            dispatching.join(2)
            if not dispatching.is_alive():                   # returned during the roll: killed now
                shutil.copytree(tmp_path / "journal", kept / "journal")
                shutil.copy(shadow.path, kept / delivery_shadow.FILE_NAME)
        finally:
            held.release.set()
        rolling.join(60)
        dispatching.join(60)
        assert not rolling.is_alive() and not dispatching.is_alive()
        if not kept.exists():                                # it waited for the roll: killed after it
            shutil.copytree(tmp_path / "journal", kept / "journal")
            shutil.copy(shadow.path, kept / delivery_shadow.FILE_NAME)
    assert _count_a_kill_keeps(kept / "journal", kept / delivery_shadow.FILE_NAME, 7, 1) == 2


@pytest.mark.parametrize("implementation", ["compiled", "twin"])
@pytest.mark.parametrize("write", ["update_delivery_count", "update_delivery_counts", "update_redelivery"])
def test_a_count_written_by_other_than_a_dispatch_becomes_the_references_latest_entry(tmp_path, implementation,
                                                                                      write):
    """A reference with an entry in this epoch whose count is then written otherwise (a rollback, a
    batch of strict dispatches): the count is its latest entry too, or a kill after the record's
    write-out would give the reference the dispatch's earlier count (load prefers an entry). A
    reference without an entry gets none."""
    with _writer_with_shadow(tmp_path, implementation) as (journal, writer, shadow, write_out):
        writer.store_message_reference(1, 7, b"m")
        writer.store_message_reference(2, 7, b"m")
        writer.record_dispatch(7, 1, 1)
        if write == "update_delivery_count":
            writer.update_delivery_count(7, 1, 2, False)
            writer.update_delivery_count(7, 2, 3, False)
        elif write == "update_delivery_counts":
            writer.update_delivery_counts([7, 7], [1, 2], [2, 3], False)
        else:
            writer.update_redelivery(7, 1, 2, 1_000, False)
            writer.update_redelivery(7, 2, 3, 1_000, False)
        journal.flush()
        assert read_counts(shadow.path, BOOT) == {(7, 1): 2}
        assert _count_a_kill_keeps(tmp_path / "journal", shadow.path, 7, 1) == 2
        assert _count_a_kill_keeps(tmp_path / "journal", shadow.path, 7, 2) == 3
        assert write_out.calls == 0


def _fill_and_roll(directory, implementation) -> bytes:
    with _writer_with_shadow(directory, implementation, cap=3,
                             entries=4) as (_journal, writer, shadow, write_out):
        for message_id in range(1, 4):
            writer.store_message_reference(message_id, 7, b"m")
        for count, message_id in [(1, 1), (1, 2), (2, 1), (4, 3), (3, 1)]:    # 4 is above the cap
            writer.record_dispatch(7, message_id, count)
        assert write_out.calls == 0
        assert read_counts(shadow.path, BOOT) == {(7, 1): 3, (7, 2): 1}
        writer.record_dispatch(7, 3, 1)                  # the fifth entry: a write-out and a new epoch
        assert write_out.calls == 1 and shadow.epoch == 1
        assert read_counts(shadow.path, BOOT) == {(7, 3): 1}
    with open(shadow.path, "rb") as file:
        return file.read()


def test_writers_fill_and_roll_the_shadow_alike(tmp_path):
    """Both writers write the same entries (the compiled one straight into the mapping); a full
    shadow rolls over after a write-out, and the writers carry on in the new epoch."""
    (tmp_path / "twin").mkdir()
    (tmp_path / "compiled").mkdir()
    twin = _fill_and_roll(tmp_path / "twin", "twin")
    assert _fill_and_roll(tmp_path / "compiled", "compiled") == twin


def _writer_class(implementation):
    if implementation == "twin":
        return record_writer.RecordWriter
    if journal_engine.IMPLEMENTATION != "cython":
        pytest.skip("needs the compiled writer")
    from journal_engine._record_writer import RecordWriter
    return RecordWriter


def test_an_unknown_version_is_refused_naming_the_file(tmp_path):
    shadow, _ = _shadow(tmp_path)
    shadow.record(1, 1, 1)
    shadow.close(void=False)
    raw = bytearray(open(shadow.path, "rb").read())
    raw[8:12] = (99).to_bytes(4, "little")
    head = bytes(raw[:delivery_shadow._HEADER.size])
    raw[len(head):len(head) + 4] = delivery_shadow._HEADER_CRC.pack(delivery_shadow.crc32c(head))
    open(shadow.path, "wb").write(bytes(raw))
    with pytest.raises(IncompatibleFormatError, match="version 99") as error:
        read_counts(shadow.path, BOOT)
    assert error.value.path == shadow.path


def test_no_file_counts_nothing(tmp_path):
    assert read_counts(str(tmp_path / "absent"), BOOT) == {}


def dispatch_one(store: MessageStore) -> None:
    """A loaded store with queue 1, message 1 referenced there and dispatched once (count 1)."""
    store.load()
    store.store_queue(1, "q", "q")
    store.store_message(1, "q", b"m")
    store.store_reference(1, 1)
    store.before_delivery(1, 1, 1)


@pytest.mark.skipif(delivery_shadow.boot_id() is None, reason="the system has no boot id (not Linux)")
def test_a_store_voids_its_shadow_at_close_and_when_reopened_without_the_strict_mode(tmp_path):
    directory = tmp_path / "store"
    shadow = os.path.join(directory, delivery_shadow.FILE_NAME)
    with MessageStore(directory, persist_delivery_count_before_delivery=True) as store:
        dispatch_one(store)
        assert read_counts(shadow) == {(1, 1): 1}
    assert read_counts(shadow) == {}                  # closed: the journal has the count, synced
    # sync "none": no flusher makes the count durable before the simulated death (in group mode the
    # flusher syncs an append made after a quiet spell at once)
    with MessageStore(directory, persist_delivery_count_before_delivery=True, sync="none") as store:
        assert store.load().references[1][0].delivery_count == 1
        store.before_delivery(1, 1, 2)
        store._message_records._core_fail(OSError(5, "simulated: the process dies here"))   # no clean close
    assert read_counts(shadow) == {(1, 1): 2}
    with MessageStore(directory) as store:            # default mode: the count is taken, the shadow voided
        state = store.load()
        assert (state.counts_from_shadow, state.references[1][0].delivery_count) == (1, 2)
        assert read_counts(shadow) == {}


@pytest.mark.skipif(delivery_shadow.boot_id() is None, reason="the system has no boot id (not Linux)")
def test_a_count_lowered_by_a_close_outlives_a_killed_process_through_the_shadow(tmp_path):
    """The dispatch's count 1 is durable in the journal; the close lowers it to 0 (its journal record
    still in the buffer when the process dies): the shadow's latest entry, 0, is the count."""
    directory = tmp_path / "store"
    shadow = os.path.join(directory, delivery_shadow.FILE_NAME)
    with MessageStore(directory, persist_delivery_count_before_delivery=True, sync="none") as store:
        dispatch_one(store)
        store.sync()
        assert store.update_delivery_count_after_cancel(1, 1, 0) is True   # no flusher syncs it in mode none
        store._message_records._core_fail(OSError(5, "simulated: the process dies here"))   # no clean close
    assert read_counts(shadow) == {(1, 1): 0}
    with MessageStore(directory, persist_delivery_count_before_delivery=True) as store:
        state = store.load()
        assert (state.counts_from_shadow, state.references[1][0].delivery_count) == (1, 0)
    with MessageStore(directory) as store:
        assert store.load().references[1][0].delivery_count == 0      # appended to the journal at load


@pytest.mark.parametrize("why", ["no boot id", "no shared mapping"])
def test_without_a_shadow_each_dispatch_writes_the_journal_out(tmp_path, monkeypatch, why):
    from journal_engine.message_store import message_store
    if why == "no boot id":
        monkeypatch.setattr(message_store, "shadow_boot_id", lambda: None)
    else:
        def refuse(*args, **kwargs):
            raise OSError(19, "simulated: this file system cannot map the file")
        monkeypatch.setattr(message_store, "DeliveryShadow", refuse)
    with MessageStore(tmp_path / "store", sync="none", persist_delivery_count_before_delivery=True) as store:
        store.load()
        store.store_queue(1, "q", "q")
        store.store_message(1, "q", b"m")
        store.store_reference(1, 1)
        assert store.before_delivery(1, 1, 1) is True
        journal = store._message_records
        assert journal.written_bytes == journal.appended_bytes       # with the OS: survives a kill
        assert not os.path.exists(os.path.join(store.directory, delivery_shadow.FILE_NAME))
