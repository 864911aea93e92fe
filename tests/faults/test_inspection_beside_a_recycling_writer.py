"""An inspection (a read-only message store, an export) beside a live writer in another process keeps
the bodies it read: the writer compacts, its pool recycles the freed files and overwrites them with new
messages, and what the inspection loaded still reads as it was at its load.

A read-only load that kept bodies as views into the mapped files would read the recycled files' next
life (the writer's pins are its own process's), silently: the frames were checked at load, not at read.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import journal_engine
from journal_engine import MessageStore
from journal_engine.storage.backends import backend_named

pytestmark = pytest.mark.skipif(journal_engine.IMPLEMENTATION != "cython",
                                reason="needs the compiled core (the twin's loads always copy)")

FILE_SIZE = 64 * 1024
OPTIONS = dict(file_size=FILE_SIZE, min_files=2, compact_min_files=0, sync="always")
OLD = 120           # about two files of 1 KiB bodies
BODY = 1000

WRITER = textwrap.dedent("""
    import json, sys
    from journal_engine import MessageStore
    directory, options, old, body = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    with MessageStore(directory, **options) as store:
        store.load()
        for message_id in range(1, old + 1):
            store.acknowledge(1, message_id)
        store.compact()             # the old files go back to the pool
        for message_id in range(old + 1, 4 * old + 1):     # and the pool's files are written again
            store.store_message_references(message_id, "q", bytes([0x6E]) * body, [1])
        store.compact()
    print("recycled")
""")


def _old_body(message_id: int) -> bytes:
    return f"old-{message_id:06d}-".encode().ljust(BODY, b"o")


def _store_old_messages(directory: str) -> None:
    with MessageStore(directory, **OPTIONS) as store:
        store.load()
        store.store_queue(1, "q", "q")
        for message_id in range(1, OLD + 1):
            store.store_message_references(message_id, "q", _old_body(message_id), [1])


def _recycle_in_another_process(directory: str) -> None:
    """The writer acknowledges every old message, compacts, and writes the freed files again."""
    result = subprocess.run([sys.executable, "-c", WRITER, directory, json.dumps(OPTIONS), str(OLD), str(BODY)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "recycled" in result.stdout, result.stderr


def test_a_read_only_load_keeps_its_bodies_when_the_writer_recycles_their_files(tmp_path):
    directory = str(tmp_path / "store")
    _store_old_messages(directory)
    inspection = MessageStore(directory, read_only=True)
    state = inspection.load()
    try:
        _recycle_in_another_process(directory)
        messages_dir = os.path.join(directory, "messages")
        assert len(os.listdir(messages_dir)) >= 2
        changed = [message_id for message_id in range(1, OLD + 1)
                   if bytes(state.messages[message_id].body) != _old_body(message_id)]
        assert not changed, f"{len(changed)} bodies read the recycled files' new bytes: {changed[:5]}..."
    finally:
        inspection.close()


def test_an_export_read_keeps_its_bodies_when_the_writer_recycles_their_files(tmp_path):
    """journal-engine export's read of a store part (cli/transfer.py): the same guarantee, for the rows
    it builds from the bodies after the load."""
    from journal_engine.cli.target import Part
    from journal_engine.cli.transfer import _load_read_only
    directory = str(tmp_path / "store")
    _store_old_messages(directory)
    loaded = _load_read_only(Part("messages", os.path.join(directory, "messages"), backend_named("journal")))
    before = {record_id: bytes(info.body) for record_id, info in loaded.records.items()}
    _recycle_in_another_process(directory)
    after = {record_id: bytes(info.body) for record_id, info in loaded.records.items()}
    assert len(before) == OLD and after == before
