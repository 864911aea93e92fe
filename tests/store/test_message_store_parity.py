"""The compiled redelivery writers and their Python twin write the same journals.

Two levels: the whole store run as a subprocess under each implementation
(JOURNAL_ENGINE_IMPLEMENTATION=python for the twin), journals compared byte for byte; and a
property test driving both writers with the same random calls on two journals.
"""
from __future__ import annotations

import os
import subprocess
import sys
from array import array
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import journal_engine
from journal_engine import DuplicateRecordError, Journal, UnknownRecordError
from journal_engine._impl import scan_frames
from journal_engine.storage.journal.format import stamp_of
from journal_engine.storage.journal.segment_files import list_directory
from journal_engine._twin import record_writer
from journal_engine.message_store.message_store import BINDINGS_DIRECTORY, MESSAGES_DIRECTORY
from locations import HELPERS

WORKER = HELPERS / "store_worker.py"
SMALL_FILE = 256 * 1024

compiled = pytest.mark.skipif(journal_engine.IMPLEMENTATION != "cython", reason="needs the compiled writers")


def _run_script(directory: Path, implementation: str) -> None:
    env = dict(os.environ, JOURNAL_ENGINE_IMPLEMENTATION=implementation)
    env.pop("JOURNAL_ENGINE_REQUIRE_EXTENSION", None)
    result = subprocess.run([sys.executable, str(WORKER), "script", str(directory)], env=env, capture_output=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().split() == ["done"]


def _data_files(directory: Path) -> dict:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir()) if path.suffix == ".jej"}


def _frames(directory: Path) -> list:
    """Every frame of every data file in replay order, without the per-file stamp."""
    out = []
    for data in list_directory(str(directory)).data:
        raw = Path(data.path).read_bytes()
        for offset, check, kind, user_type, record_id, tx_id, body in scan_frames(raw, stamp_of(data.header.file_id),
                                                                                 64):
            if check == 0:
                out.append((kind, user_type, record_id, tx_id, body))
    return out


@compiled
def test_python_twin_writes_the_same_store_journals_as_the_compiled_writers(tmp_path):
    _run_script(tmp_path / "cython", "cython")
    _run_script(tmp_path / "python", "python")
    for sub in (MESSAGES_DIRECTORY, BINDINGS_DIRECTORY):
        compiled_files = _data_files(tmp_path / "cython-phase1" / sub)
        twin_files = _data_files(tmp_path / "python-phase1" / sub)
        assert compiled_files.keys() == twin_files.keys()
        for name, content in compiled_files.items():
            assert content == twin_files[name], f"{sub}/{name} differs"
        assert _frames(tmp_path / "cython" / sub) == _frames(tmp_path / "python" / sub)
    assert len(_frames(tmp_path / "cython" / MESSAGES_DIRECTORY)) > 1000


# ----- the writers side by side, on the same random calls --------------------------------------------------

QUEUES = (1, 2)
MESSAGES = tuple(range(1, 6))
SENT = (20, 21, 22)                 # message ids only a "send" makes live
ids = st.tuples(st.sampled_from(QUEUES), st.sampled_from(MESSAGES + SENT + (99,)))
counts = st.integers(min_value=0, max_value=12) | st.sampled_from([-1, 1 << 32, (1 << 32) - 1])
times = st.integers(min_value=0, max_value=(1 << 64) - 1) | st.just(-5)
sync_flags = st.sampled_from([None, False, True])
operations = st.lists(st.one_of(
    st.tuples(st.just("add"), ids),
    st.tuples(st.just("remove"), ids),
    st.tuples(st.just("count"), ids, counts, sync_flags),
    st.tuples(st.just("time"), ids, times, counts, sync_flags),
    st.tuples(st.just("counts"), st.lists(st.tuples(ids, counts), max_size=6), sync_flags),
    st.tuples(st.just("times"), st.lists(st.tuples(ids, times, counts), max_size=6), sync_flags),
    st.tuples(st.just("persisted"), ids),
    st.tuples(st.just("send"), ids, st.sampled_from([b"head", b""]), st.sampled_from([None, b"body", b""])),
    st.tuples(st.just("ack"), ids),
    st.tuples(st.just("has"), ids),
    st.tuples(st.just("refs"), st.sampled_from(QUEUES), st.lists(st.sampled_from(MESSAGES + SENT + (99,)), max_size=4),
              st.integers(min_value=0, max_value=12)),
), min_size=5, max_size=60)


def _apply(writer, op):
    """The result of one call, or the type of the error it raised."""
    name = op[0]
    try:
        if name == "add":
            return writer.add_reference(*op[1])
        if name == "remove":
            return writer.remove_reference(*op[1])
        if name == "count":
            return writer.update_delivery_count(*op[1], op[2], op[3])
        if name == "time":
            return writer.update_scheduled_delivery_time(*op[1], op[2], op[3], op[4])
        if name == "counts":
            entries = op[1]
            return writer.update_delivery_counts([e[0][0] for e in entries], [e[0][1] for e in entries],
                                                 [e[1] for e in entries], op[2])
        if name == "times":
            entries = op[1]
            return writer.update_scheduled_delivery_times([e[0][0] for e in entries], [e[0][1] for e in entries],
                                                          [e[1] for e in entries], [e[2] for e in entries], op[2])
        if name == "persisted":
            return writer.persisted_count(*op[1])
        if name == "send":
            queue_id, message_id = op[1]
            return writer.store_message_reference(message_id, queue_id, op[2], op[3])
        if name == "ack":
            return writer.acknowledge_reference(*op[1], op[2])
        if name == "has":
            return writer.has_reference(*op[1])
        if name == "refs":
            return writer.add_references(op[1], array("Q", op[2]), array("I", [op[3]] * len(op[2])))
    except (OverflowError, UnknownRecordError, DuplicateRecordError, ValueError) as exc:
        return type(exc)
    raise AssertionError(op)


@compiled
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cap=st.sampled_from([-1, 0, 1, 3, 10]), ops=operations, setup=st.sampled_from(["each", "rising", "falling"]),
       recovered=st.lists(st.integers(min_value=0, max_value=12), min_size=3, max_size=3))
def test_compiled_writer_and_twin_agree_call_by_call(tmp_path_factory, cap, ops, setup, recovered):
    """``setup``: the first references come one by one, or as a recovery's batch of rising ids (which
    the compiled writer holds as columns until each is first looked up), or of falling ids."""
    from journal_engine._record_writer import RecordWriter as CompiledWriter

    root = tmp_path_factory.mktemp("writers")
    journals = [Journal(root / name, sync="none", file_size=64 * 1024, replaceable_types={34: 8, 36: 8})
                for name in ("compiled", "twin")]
    try:
        for journal in journals:
            journal.load()
            for message_id in MESSAGES:
                journal.add(message_id, 45, b"m")
        writers = [CompiledWriter(journals[0], cap), record_writer.RecordWriter(journals[1], cap)]
        for writer in writers:           # most calls then find a live reference
            for queue_id in QUEUES:
                if setup == "each":
                    for message_id in MESSAGES[:3]:
                        writer.add_reference(queue_id, message_id)
                else:
                    order = slice(None) if setup == "rising" else slice(None, None, -1)
                    writer.add_references(queue_id, array("Q", MESSAGES[:3][order]), array("I", recovered[order]))
        for op in ops:
            if op[0] == "ack":      # the store deletes the message with its last reference, never before
                message_id = op[1][1]
                op = op + (sum(writers[0].has_reference(queue, message_id) for queue in QUEUES) == 1,)
            results = [_apply(writer, op) for writer in writers]
            assert results[0] == results[1], op
            assert len(writers[0]) == len(writers[1])
        written = writers[0].delivery_count_records_written + writers[0].scheduled_time_records_written
        event(f"records written: {'none' if written == 0 else 'some'}")
        assert writers[0].delivery_count_records_written == writers[1].delivery_count_records_written
        assert writers[0].scheduled_time_records_written == writers[1].scheduled_time_records_written
    finally:
        for journal in journals:
            journal.close()
    assert _frames(root / "compiled") == _frames(root / "twin")
    assert _data_files(root / "compiled") == _data_files(root / "twin")
