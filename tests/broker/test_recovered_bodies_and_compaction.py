"""A recovered queue's messages keep their bodies in the mapped journal files (compiled core) until the
queue is first used. A compaction that reclaims such a file moves the bodies it still holds into
memory, and the file goes back to the pool: a queue nobody uses no longer keeps compacted files
deleted but mapped -- their space held -- for as long as the broker runs. The idle queue's messages
read the same afterwards, after the pool has reused the files."""
from __future__ import annotations

import glob
import os

from journal_engine import Broker
from journal_engine._impl import IMPLEMENTATION
from journal_engine.journal.scan import pinned

SMALL = {"file_size": 256 * 1024}
COUNT = 600


def _deleted_but_mapped(directory) -> list[str]:
    """Lines of this process's mappings that name a deleted file under `directory`."""
    with open("/proc/self/maps") as maps:
        return [line.strip() for line in maps if str(directory) in line and "(deleted)" in line]


def _message_files(directory) -> list[str]:
    return sorted(glob.glob(os.path.join(directory, "messages", "journal-*.jej")))


def test_a_compaction_releases_the_files_an_unused_recovered_queue_maps(tmp_path):
    directory = tmp_path / "b"
    broker = Broker(directory, store_options=SMALL)
    broker.create_queue("used")
    broker.create_queue("idle")
    idle_bodies = []
    for index in range(COUNT):
        broker.send("used", b"used %d " % index + b"." * 300)
        idle_bodies.append(b"idle %d " % index + bytes([index % 251]) * 300)
        broker.send("idle", idle_bodies[-1], properties={"i": index} if index % 7 == 0 else None)
    broker.close()

    broker = Broker(directory, store_options=SMALL)
    try:
        if IMPLEMENTATION == "cython":      # the case under test: recovered bodies pin the files
            assert any(pinned(path) for path in _message_files(directory))
        consumer = broker.create_consumer("used")
        for _ in range(COUNT):
            consumer.ack(consumer.receive(0))
        assert broker._post_office.queues["idle"]._restore is not None     # never used: still columns
        broker._store.compact()
        assert _deleted_but_mapped(directory) == []
        assert not any(pinned(path) for path in _message_files(directory))
        for index in range(3 * COUNT):      # the pool hands the recycled files out again
            broker.send("used", b"after %d " % index + b"-" * 300)
        idle = broker.create_consumer("idle")
        received = [idle.receive(0) for _ in range(COUNT)]
        assert [message.body for message in received] == idle_bodies
        assert [dict(message.properties) for message in received] == [
            {"i": index} if index % 7 == 0 else {} for index in range(COUNT)]
        assert idle.receive(0) is None
    finally:
        broker.close()
