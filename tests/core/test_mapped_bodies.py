"""load() returns bodies as read-only views into the mapped data files (compiled core; the twin's are
bytes): bytes-like, hashable, equal to bytes, kept as long as the user likes. A view pins its file:
a compaction deletes a pinned file instead of recycling it, so the view reads what load() read even
after the pool has reused every free file. load(copy=True) returns owned bytes.

The checks on a running process (its anonymous memory, another process cutting a file under a view)
run in child processes, as users run them."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import pytest

from journal_engine import Journal
from journal_engine._impl import IMPLEMENTATION, Body

SMALL = 64 * 1024


def _write(directory, count: int = 400, size: int = 200, **options) -> dict:
    bodies = {record_id: bytes([record_id % 251]) * size + b"#%d" % record_id for record_id in range(1, count + 1)}
    with Journal(directory, file_size=SMALL, sync="none", **options) as journal:
        journal.load()
        for record_id, body in bodies.items():
            journal.add(record_id, 7, body)
        journal.update(3, 9, b"an update")
    return bodies


def test_load_returns_views_that_behave_as_the_bytes_they_hold(tmp_path):
    bodies = _write(tmp_path)
    with Journal(tmp_path, file_size=SMALL) as journal:
        records = journal.load().records
        body = records[5].body
        expected = bodies[5]
        assert type(body) is (Body if IMPLEMENTATION == "cython" else bytes)
        assert body == expected and expected == body and not body != expected
        assert body != expected[:-1] and body != b"other" and body != "text"
        assert len(body) == len(expected) and bytes(body) == expected
        assert body[0] == expected[0] and body[-1] == expected[-1] and body[2:9] == expected[2:9]
        assert body[::3] == expected[::3] and list(body) == list(expected)
        assert hash(body) == hash(expected) and {expected: "found"}[body] == "found" and body in {expected}
        assert body == records[5].body and hash(body) == hash(records[5].body)
        assert memoryview(body).tobytes() == expected and memoryview(body).readonly
        assert b"".join([body, b"!"]) == expected + b"!" and body + b"!" == expected + b"!"
        assert body.decode("latin-1") == expected.decode("latin-1") and body.hex() == expected.hex()
        assert body.startswith(expected[:4]) and (body < expected + b"\0") and (body >= expected)
        assert pickle.loads(pickle.dumps(body)) == expected
        assert type(pickle.loads(pickle.dumps(records[5])).body) in (bytes, Body)
        assert records[3].updates == [(9, b"an update")]
        with pytest.raises(TypeError):
            memoryview(body)[0] = 1             # read-only: the file is never written through a view
        kept = [records[record_id].body for record_id in (1, 200, 400)]
    # the journal is closed: the views it handed out still read what load() read
    assert kept == [bodies[1], bodies[200], bodies[400]]


def test_load_copy_true_returns_owned_bytes(tmp_path):
    bodies = _write(tmp_path)
    with Journal(tmp_path, file_size=SMALL) as journal:
        records = journal.load(copy=True).records
        assert all(type(rec.body) is bytes and rec.body == bodies[record_id] for record_id, rec in records.items())
        assert type(records[3].updates[0][1]) is bytes


@pytest.mark.parametrize("copy", [False, True])
def test_what_an_iteration_hands_out_and_is_kept_stays_what_it_was(tmp_path, copy):
    """An iteration over the records makes a record nobody holds any more into the next one (and
    its view): whatever the caller keeps -- the record, its body, a memoryview of the body, the
    pairs of items() -- still reads what it read when it was handed out, and what is let go each
    step reads right (ids, types, bodies, their hashes, updates), on every path of the loop."""
    bodies = _write(tmp_path)
    with Journal(tmp_path, file_size=SMALL) as journal:
        records = journal.load(copy=copy).records
        seen, kept_records, kept_bodies, kept_views, kept_pairs = [], {}, {}, {}, []
        for index, rec in enumerate(records.values()):
            assert (rec.record_id, rec.record_type, rec.body) == (index + 1, 7, bodies[index + 1])
            assert hash(rec.body) == hash(bodies[rec.record_id])
            assert rec.updates == ([(9, b"an update")] if rec.record_id == 3 else [])
            seen.append(rec.record_id)
            if index % 7 == 0:
                kept_records[rec.record_id] = rec
            elif index % 7 == 1:
                kept_bodies[rec.record_id] = rec.body
            elif index % 7 == 2:
                kept_views[rec.record_id] = memoryview(rec.body)
        for index, pair in enumerate(records.items()):
            record_id, rec = pair
            assert record_id == rec.record_id == index + 1 and rec.body == bodies[record_id]
            if index % 5 == 0:
                kept_pairs.append(pair)
        assert seen == list(bodies)
        assert all(rec.record_id == record_id and rec.body == bodies[record_id] for record_id, rec in kept_records.items())
        assert all(body == bodies[record_id] for record_id, body in kept_bodies.items())
        assert all(view.tobytes() == bodies[record_id] for record_id, view in kept_views.items())
        assert all(rec.record_id == record_id and rec.body == bodies[record_id] for record_id, rec in kept_pairs)
        assert [rec.body for rec in records.values()] == list(bodies.values())     # every body kept
        assert len({id(rec) for rec in list(records.values())}) == len(bodies)      # every record kept
        del kept_views


def test_read_only_load_returns_the_same_views(tmp_path):
    bodies = _write(tmp_path)
    with Journal(tmp_path, read_only=True) as journal:
        records = journal.load().records
        assert {record_id: rec.body for record_id, rec in records.items()} == bodies


def _directory_inodes(directory) -> set[int]:
    return {os.stat(os.path.join(directory, name)).st_ino for name in os.listdir(directory)}


def test_a_view_held_across_a_compaction_reads_its_body_after_the_pool_reused_every_file(tmp_path):
    """The file a view maps is replaced by compaction; the pool would recycle it (pool_files is large)
    and the appends after it overwrite every free file. The view still reads what load() read, and
    its file never went back to the pool."""
    bodies = _write(tmp_path, count=1200, size=400)
    options = dict(file_size=SMALL, sync="none", compact_min_files=0, pool_files=100)
    with Journal(tmp_path, **options) as journal:
        records = journal.load().records
        held = {record_id: records[record_id].body for record_id in (1, 2, 150)}   # the first files
        del records
        first_files = [data.path for data in journal.data_files()[:3]]
        # the files the views map (the twin's bodies are bytes: it pins none)
        pinned = {body.path for body in held.values()} if IMPLEMENTATION == "cython" else set()
        assert pinned <= set(first_files) and len(pinned) == (2 if IMPLEMENTATION == "cython" else 0)
        inodes = {os.stat(path).st_ino for path in pinned}
        for record_id in range(1, 1201):
            if record_id not in held:
                journal.delete(record_id)
        journal.compact()
        assert not any(os.path.exists(path) for path in first_files)
        assert not inodes & _directory_inodes(tmp_path), "a pinned file went back to the file pool"
        for record_id in range(10_000, 10_600):             # every free file is taken and written over
            journal.add(record_id, 7, b"\xee" * 400)
        journal.sync()
        assert held == {record_id: bodies[record_id] for record_id in held}
    assert held == {record_id: bodies[record_id] for record_id in held}
    with Journal(tmp_path, **options) as journal:
        records = journal.load().records
        assert {record_id: records[record_id].body for record_id in held} == {r: bodies[r] for r in held}


def test_files_no_view_pins_go_back_to_the_pool(tmp_path):
    """Without views (copy=True), a compaction recycles the files it replaced, as before."""
    _write(tmp_path, count=1200, size=400)
    with Journal(tmp_path, file_size=SMALL, sync="none", compact_min_files=0, pool_files=100) as journal:
        journal.load(copy=True)
        first_files = [data.path for data in journal.data_files()[:3]]
        inodes = {os.stat(path).st_ino for path in first_files}
        for record_id in range(1, 1201):
            journal.delete(record_id)
        journal.compact()
        assert inodes <= _directory_inodes(tmp_path)


def _run_child(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=300)


# the compiled core's case needs 40 MB of bodies, so that RssAnon tells the page cache from copies; the
# twin copies every body, however many, and writes and loads some thirty times slower: a tenth of them
ANON_RECORDS = 160_000 if IMPLEMENTATION == "cython" else 16_000


def test_load_keeps_bodies_out_of_anonymous_memory(tmp_path):
    """RssAnon after load() of 40 MB of 256-byte bodies, less than half the body bytes: they stay in
    the page cache (the twin and copy=True copy them: they are measured for the record)."""
    directory = tmp_path / "journal"
    with Journal(directory, file_size=8 << 20, sync="none") as journal:
        journal.load()
        body = b"b" * 256
        for record_id in range(1, ANON_RECORDS + 1):
            journal.add(record_id, 45, body)
    code = """
        import sys
        from journal_engine import Journal
        def anon_kib():
            for line in open("/proc/self/status"):
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
        journal = Journal(sys.argv[1], read_only=True)
        before = anon_kib()
        records = journal.load(copy=sys.argv[2] == "copy").records
        total = sum(len(rec.body) for rec in records.values())
        print(total, (anon_kib() - before) * 1024)
        """
    total, grown = map(int, _run_child(code, str(directory), "views").stdout.split())
    _total_copied, grown_copied = map(int, _run_child(code, str(directory), "copy").stdout.split())
    assert total == ANON_RECORDS * 256
    if IMPLEMENTATION == "cython":
        assert grown < total / 2, (grown, total, grown_copied)
        assert grown_copied > total, (grown, total, grown_copied)
    else:
        assert grown_copied > total and grown > total, (grown, total)
