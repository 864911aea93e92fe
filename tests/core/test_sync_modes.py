"""The three sync modes: "always", "group" (shared fdatasyncs, a background flusher) and "none".

Durability is read from stats(): `durable_bytes` counts the bytes a sync has made
durable, `appended_bytes` everything appended; `sync()` must bring one up to the
other before it returns.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from journal_engine.limits import BUFFER_SIZE_DEFAULT_BYTES, SECTOR_SIZE_BYTES, UNSYNCED_OPEN_FILES_MAX

SMALL = 64 * 1024
MODES = ["always", "group", "none"]


def picture(records: dict) -> dict:
    return {rid: (rec.record_type, rec.body, list(rec.updates)) for rid, rec in records.items()}


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_round_trips_records_and_transactions(open_journal, mode):
    journal, _ = open_journal(file_size=SMALL, sync=mode)
    expected = {}
    for rid in range(300):
        body = bytes([rid % 256]) * (rid * 7 % 900)
        journal.add(rid, rid % 256, body)
        expected[rid] = (rid % 256, body, [])
    for rid in range(0, 300, 4):
        journal.update(rid, 9, b"u")
        expected[rid][2].append((9, b"u"))
    for rid in range(1, 300, 5):
        journal.delete(rid)
        del expected[rid]
    journal.add_tx(1, 1000, 2, b"tx")
    journal.commit(1)
    expected[1000] = (2, b"tx", [])
    journal.add_tx(2, 1001, 2, b"prepared")
    journal.prepare(2, b"xid")
    journal.close()
    journal, loaded = open_journal(file_size=SMALL, sync=mode)
    assert picture(loaded.records) == expected
    assert [(t.tx_id, t.xid) for t in loaded.prepared] == [(2, b"xid")]
    assert journal.stats()["sync_mode"] == mode


@pytest.mark.parametrize("mode", MODES)
def test_sync_makes_every_appended_byte_durable(open_journal, mode):
    journal, _ = open_journal(file_size=SMALL, sync=mode, buffer_timeout_us=10_000_000)
    for rid in range(500):   # several files' worth, so sealed files are part of the sync too
        journal.add(rid, 1, bytes(300), sync=False)
    journal.sync()
    stats = journal.stats()
    assert stats["durable_bytes"] == stats["appended_bytes"]
    assert stats["active_position"] % SECTOR_SIZE_BYTES == 0
    journal.sync()   # nothing new: still equal
    stats = journal.stats()
    assert stats["durable_bytes"] == stats["appended_bytes"]


def test_always_mode_syncs_every_call(open_journal):
    journal, _ = open_journal(file_size=SMALL, sync="always")
    base = journal.stats()["syncs"]
    for rid in range(20):
        journal.add(rid, 1, b"x")
        stats = journal.stats()
        assert stats["durable_bytes"] == stats["appended_bytes"], rid
    assert journal.stats()["syncs"] - base == 20


def test_none_mode_never_syncs_on_its_own(open_journal):
    threads_before = set(threading.enumerate())
    journal, _ = open_journal(file_size=SMALL, sync="none")
    # nothing could sync later on its own: the mode starts no flusher (a sleep here would check nothing)
    assert "journal-flusher" not in {thread.name for thread in set(threading.enumerate()) - threads_before}
    base = journal.stats()
    for rid in range(50):
        journal.add(rid, 1, bytes(100))
    stats = journal.stats()
    assert stats["syncs"] == base["syncs"]
    assert stats["durable_bytes"] == base["durable_bytes"] < stats["appended_bytes"]
    journal.add(99, 1, b"explicit", sync=True)   # a per-call sync still waits
    stats = journal.stats()
    assert stats["durable_bytes"] == stats["appended_bytes"] and stats["syncs"] == base["syncs"] + 1


@pytest.mark.parametrize("sealed_files", [UNSYNCED_OPEN_FILES_MAX, UNSYNCED_OPEN_FILES_MAX + 1, 100])
def test_none_mode_over_many_unsynced_files_recovers_everything_after_one_sync(open_journal, sealed_files):
    """At, and past, the number of unsynced sealed files the core keeps open: one sync still covers them all."""
    journal, _ = open_journal(file_size=SMALL, sync="none", compact_min_files=0)
    body = bytes(8000)
    rid = 0
    while journal.stats()["data_files"] < sealed_files + 1:
        journal.add(rid, 1, body)
        rid += 1
    assert journal.stats()["data_files"] == sealed_files + 1
    journal.sync()
    stats = journal.stats()
    assert stats["durable_bytes"] == stats["appended_bytes"]
    journal.close()
    journal, loaded = open_journal(file_size=SMALL, sync="none", compact_min_files=0)
    assert sorted(loaded.records) == list(range(rid))
    assert all(rec.body == body for rec in loaded.records.values())


def test_group_mode_shares_fdatasyncs_among_sixteen_threads(open_journal):
    journal, _ = open_journal(file_size=1024 * 1024, sync="group")
    threads_count, per_thread = 16, 150
    base_syncs = journal.stats()["syncs"]
    errors = []
    start = threading.Barrier(threads_count)

    def appender(thread_index: int) -> None:
        try:
            start.wait()
            for index in range(per_thread):
                rid = thread_index * 1_000_000 + index
                journal.add(rid, thread_index, rid.to_bytes(8, "little") * 4, sync=True)
        except Exception as exc:   # reported below; a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=appender, args=(i,)) for i in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    appends = threads_count * per_thread
    stats = journal.stats()
    syncs = stats["syncs"] - base_syncs
    assert stats["durable_bytes"] == stats["appended_bytes"]
    # a sync=True append returns only after a sync; with 16 waiting at once most share one (about 15
    # per sync on an idle machine; the bound leaves room for a machine busy with other work)
    assert syncs <= appends // 2, f"{syncs} fdatasyncs for {appends} appends: group commit is not shared"
    journal.close()
    journal, loaded = open_journal(file_size=1024 * 1024, sync="group")
    assert len(loaded.records) == appends
    for thread_index in range(threads_count):
        for index in range(per_thread):
            rid = thread_index * 1_000_000 + index
            rec = loaded.records[rid]
            assert rec.record_type == thread_index and rec.body == rid.to_bytes(8, "little") * 4


def test_group_mode_unsynced_appends_become_durable_without_a_sync_call(open_journal):
    journal, _ = open_journal(file_size=SMALL, sync="group", buffer_timeout_us=2000)
    for round_ in range(3):
        for rid in range(round_ * 100, round_ * 100 + 100):
            journal.add(rid, 1, bytes(200), sync=False)
        deadline = time.monotonic() + 5.0
        while True:
            stats = journal.stats()
            if stats["durable_bytes"] == stats["appended_bytes"]:
                break
            assert time.monotonic() < deadline, f"the flusher left {stats['appended_bytes'] - stats['durable_bytes']}" \
                                                f" bytes unsynced for 5 s"
            time.sleep(0.002)


def _flusher_synced_a_first_append(journal) -> None:
    """An append after a quiet spell: the flusher syncs it at once, and its window (buffer_timeout_us
    from that sync's start) begins."""
    journal.add(10_000, 1, b"first")
    deadline = time.monotonic() + 5
    while journal.durable_bytes < journal.appended_bytes:
        assert time.monotonic() < deadline, "the flusher did not sync an append made after a quiet spell"
        time.sleep(0.001)


def test_group_mode_buffer_size_forces_an_early_flush(open_journal):
    """Within a 10 s window only the buffer_size bound can make the flusher sync within 5 s (a bound that
    tells the two causes apart, not a speed: the kick takes milliseconds)."""
    journal, _ = open_journal(file_size=1024 * 1024, sync="group", buffer_timeout_us=10_000_000,
                              buffer_size=SECTOR_SIZE_BYTES * 4)
    _flusher_synced_a_first_append(journal)
    base = journal.stats()["syncs"]
    for rid in range(400):   # ~100 KiB: far past the 16 KiB buffer
        journal.add(rid, 1, bytes(224), sync=False)
    deadline = time.monotonic() + 5.0
    while journal.stats()["syncs"] == base:
        assert time.monotonic() < deadline, "buffer_size did not wake the flusher"
        time.sleep(0.002)


def _wait_durable(journal, what: str) -> None:
    appended = journal.appended_bytes
    deadline = time.monotonic() + 30
    while journal.durable_bytes < appended:
        assert time.monotonic() < deadline, f"the flusher did not sync {what} in 30 s"
        time.sleep(0.001)


def _append_unsynced(journal, first_id: int, frames: int) -> None:
    """`frames` appends of 256-byte frames (a 32-byte header, 224 bytes of body), nobody waiting."""
    for record_id in range(first_id, first_id + frames):
        journal.add(record_id, 1, bytes(224), sync=False)


def test_group_mode_default_buffer_size_is_490_kib_and_more_pending_wakes_the_flusher(open_journal, tmp_path):
    """The README's figure: buffer_size is 490 KiB unless set. Up to it pending, the flusher keeps to its
    window (the appends become durable no earlier than the window after the sync before them); past it,
    it syncs long before its 10 s window ends."""
    assert BUFFER_SIZE_DEFAULT_BYTES == 490 * 1024
    window_s = 1.0
    journal, _ = open_journal(file_size=4 * 1024 * 1024, sync="group", buffer_timeout_us=int(window_s * 1e6))
    before_first_sync = time.monotonic()
    _flusher_synced_a_first_append(journal)
    _append_unsynced(journal, 0, 480 * 1024 // 256)              # 480 KiB pending: under the buffer
    _wait_durable(journal, "480 KiB")
    assert time.monotonic() - before_first_sync >= window_s, "480 KiB pending woke the flusher before its window"
    journal, _ = open_journal(tmp_path / "ten-second-window", file_size=4 * 1024 * 1024, sync="group",
                              buffer_timeout_us=10_000_000)
    _flusher_synced_a_first_append(journal)
    base = journal.stats()["syncs"]
    _append_unsynced(journal, 0, 500 * 1024 // 256)              # 500 KiB pending: past it
    deadline = time.monotonic() + 5.0
    while journal.stats()["syncs"] == base:
        assert time.monotonic() < deadline, "500 KiB pending did not wake the flusher within half its window"
        time.sleep(0.002)


def test_group_mode_sync_true_waits_but_default_does_not(open_journal):
    """An append without sync=True waits for the flusher's window: it becomes durable no earlier than the
    window after the sync before it began (a lower bound, which no slowness of the machine can break;
    a sleep and a look would check nothing on a machine too busy to run an eager flusher in time)."""
    window_s = 0.5
    journal, _ = open_journal(file_size=SMALL, sync="group", buffer_timeout_us=int(window_s * 1e6))
    before_first_sync = time.monotonic()
    _flusher_synced_a_first_append(journal)
    journal.add(1, 1, b"no wait")           # within the flusher's window
    _wait_durable(journal, "an append")
    assert time.monotonic() - before_first_sync >= window_s, "the flusher synced an append inside its window"
    journal.add(2, 1, b"wait", sync=True)
    stats = journal.stats()
    assert stats["durable_bytes"] == stats["appended_bytes"]


def test_transaction_commit_waits_for_durability_unless_mode_is_none(open_journal):
    for mode, waits in (("group", True), ("always", True), ("none", False)):
        journal, _ = open_journal(file_size=SMALL, sync=mode, buffer_timeout_us=10_000_000)
        journal.add_tx(1, 1, 1, b"x")
        journal.commit(1)
        stats = journal.stats()
        assert (stats["durable_bytes"] == stats["appended_bytes"]) is waits, mode
        journal.close()


_SWITCH_WHILE_FLUSHING = """
import faulthandler, sys, tempfile
faulthandler.dump_traceback_later(30, exit=True)   # a deadlock prints every thread's stack and fails
import journal_engine
from journal_engine import Journal
assert journal_engine.IMPLEMENTATION == sys.argv[1], journal_engine.IMPLEMENTATION
for attempt in range(8):
    with Journal(tempfile.mkdtemp(), file_size=64 * 1024, sync="group", buffer_timeout_us=0) as journal:
        journal.load()
        for rid in range(300):
            journal.add(rid, 1, bytes(3000))
print("ok")
"""


@pytest.mark.parametrize("implementation", ["cython", pytest.param("python", marks=pytest.mark.twin)])
def test_group_mode_file_switches_while_the_flusher_syncs_do_not_deadlock(implementation):
    """A writer switching files and the flusher syncing take the same two locks: never in opposite orders."""
    import journal_engine

    env = {k: v for k, v in os.environ.items() if not k.startswith("JOURNAL_ENGINE_")}
    env["JOURNAL_ENGINE_IMPLEMENTATION" if implementation == "python" else "JOURNAL_ENGINE_REQUIRE_EXTENSION"] = \
        "python" if implementation == "python" else "1"
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(journal_engine.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    done = subprocess.run([sys.executable, "-c", _SWITCH_WHILE_FLUSHING, implementation], env=env,
                          capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", f"deadlock or failure:\n{done.stderr[-4000:]}"
