"""A recovered queue's messages keep their bodies in the mapped journal files (compiled core) until each
is delivered: the queue's first use makes its objects, not copies of its bodies. A compaction that reclaims such a file moves the bodies it still holds into
memory, and the file goes back to the pool: a queue nobody uses no longer keeps compacted files
deleted but mapped -- their space held -- for as long as the broker runs. The idle queue's messages
read the same afterwards, after the pool has reused the files."""
from __future__ import annotations

import glob
import os
import tracemalloc

from journal_engine import Broker
from journal_engine._impl import IMPLEMENTATION
from journal_engine.storage.journal.scan import pinned

SMALL = {"file_size": 256 * 1024}
COUNT = 600


def _deleted_but_mapped(directory) -> list[str]:
    """Lines of this process's mappings that name a deleted data file under `directory` (the checkpoint
    a load took stays mapped, its name removed, until the close or a compaction: storage/journal/checkpoint.py)."""
    with open("/proc/self/maps") as maps:
        return [line.strip() for line in maps if str(directory) in line and ".jej (deleted)" in line]


def _message_files(directory) -> list[str]:
    return sorted(glob.glob(os.path.join(directory, "messages", "journal-*.jej")))


def _two_queues(directory, busy: str, kept: str) -> list[bytes]:
    """A broker of small files whose queues ``busy`` and ``kept`` got COUNT messages each, in turn
    (every 7th of ``kept`` with a property); the bodies sent to ``kept``."""
    broker = Broker(directory, store_options=SMALL)
    broker.create_queue(busy)
    broker.create_queue(kept)
    bodies = []
    for index in range(COUNT):
        broker.send(busy, b"%s %d " % (busy.encode(), index) + b"." * 300)
        bodies.append(b"%s %d " % (kept.encode(), index) + bytes([index % 251]) * 300)
        broker.send(kept, bodies[-1], properties={"i": index} if index % 7 == 0 else None)
    broker.close()
    return bodies


def test_a_compaction_releases_the_files_an_unused_recovered_queue_maps(tmp_path):
    directory = tmp_path / "b"
    idle_bodies = _two_queues(directory, "used", "idle")
    broker = Broker(directory, store_options=SMALL)
    try:
        if IMPLEMENTATION == "cython":      # the case under test: recovered bodies pin the files
            assert any(pinned(path) for path in _message_files(directory))
        consumer = broker.create_consumer("used")
        for _ in range(COUNT):
            consumer.ack(consumer.receive(0))
        assert broker._post_office.queues["idle"].ready.unmade == COUNT    # never used: still columns
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


# 32 MB of bodies; the twin's 8 MB (it writes and reads some thirty times slower), were the first receive
# to copy them, would still be twice its allowance
FIRST_USE_BODIES = 2_000 if IMPLEMENTATION == "cython" else 500


def test_a_recovered_queues_first_use_copies_no_body_and_each_delivery_reads_its_own(tmp_path):
    directory = tmp_path / "b"
    broker = Broker(directory)
    broker.create_queue("q")
    bodies = [b"%06d " % index + bytes([index % 251]) * 16_000 for index in range(FIRST_USE_BODIES)]
    for body in bodies:
        broker.send("q", body)
    broker.close()

    broker = Broker(directory)
    try:
        consumer = broker.create_consumer("q")
        tracemalloc.start()
        try:
            first = consumer.receive(0)             # the queue's messages made into objects
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert first.body == bodies[0] and type(first.body) is bytes
        assert peak < 4_000_000, f"the first receive allocated {peak} bytes: bodies were copied"
        consumer.ack(first)
        received = [consumer.receive(0) for _ in range(len(bodies) - 1)]
    finally:
        broker.close()
    # received before the close: each body is bytes of its own, readable after it
    assert all(type(message.body) is bytes for message in received)
    assert [message.body for message in received] == bodies[1:]


def test_bodies_a_used_queue_has_not_delivered_read_the_same_after_a_compaction_reused_their_files(tmp_path):
    directory = tmp_path / "b"
    kept_bodies = _two_queues(directory, "churn", "kept")
    broker = Broker(directory, store_options=SMALL)
    try:
        kept = broker.create_consumer("kept")
        first = kept.receive(0)                     # the queue is used: its objects made, its bodies not read
        assert first.body == kept_bodies[0]
        churn = broker.create_consumer("churn")
        for _ in range(COUNT):
            churn.ack(churn.receive(0))
        broker._store.compact()
        assert _deleted_but_mapped(directory) == []
        for index in range(3 * COUNT):      # the pool hands the recycled files out again
            broker.send("churn", b"after %d " % index + b"-" * 300)
        received = [kept.receive(0) for _ in range(COUNT - 1)]
        assert [message.body for message in received] == kept_bodies[1:]
        assert [dict(message.properties) for message in received] == [
            {"i": index} if index % 7 == 0 else {} for index in range(1, COUNT)]
    finally:
        broker.close()
