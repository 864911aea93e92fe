"""One writer per directory, whatever a second opener does (issue 23, items 3-5), driven as users
drive it: the second opener, the holder and the inspections are real processes
(tests/helpers/directory_lock_worker.py, `python -m journal_engine ...`).

* The lock is on the directory itself: deleting ``journal.lock`` (``store.lock``) lets no second
  writer in, and a directory moved or replaced under an open journal is not written by path at its
  next file switch or compaction.
* A message store takes one lock on its top directory before it creates ``messages/`` and
  ``bindings/``, so two brokers of different backends started at once leave one store, the winner's.
* An LMDB store inspected (verify, stats, print) while another process writes it is read through
  LMDB's reader table: never a traceback, never an LMDB assertion; a writer does not start under an
  inspection of an idle store, which reads without that table.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from journal_engine import Journal, JournalLockedError, MessageStore, limits
from journal_engine.storage.journal.format import LOCK_FILE as JOURNAL_LOCK_FILE
from journal_engine.storage.directory_kind import stored_backend
from locations import HELPERS

lmdb_store = pytest.importorskip("journal_engine.storage.lmdb.store", reason="the LMDB backend needs pip install lmdb")
LmdbRecordStore = lmdb_store.LmdbRecordStore

WORKER = str(HELPERS / "directory_lock_worker.py")
LOCK_FILES = {"journal": JOURNAL_LOCK_FILE, "lmdb": lmdb_store.LOCK_FILE}
SMALL_FILE = 64 * 1024
CHILD_TIMEOUT_S = 120


class Child:
    """A worker process (see tests/helpers/directory_lock_worker.py) spoken to line by line."""

    def __init__(self, *arguments: str) -> None:
        self.process = subprocess.Popen([sys.executable, WORKER, *arguments], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        self.pid = self.process.pid

    def line(self) -> str:
        return self.process.stdout.readline().strip()

    def tell(self, line: str = "") -> None:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def finish(self) -> None:
        """Let it close what it holds (or kill a writer looping forever) and wait for its end."""
        if self.process.poll() is None:
            try:
                self.process.communicate("\n", timeout=CHILD_TIMEOUT_S)
            except (subprocess.TimeoutExpired, BrokenPipeError, ValueError):
                self.process.kill()
                self.process.wait()


def holder(kind: str, backend: str, directory: Path) -> Child:
    """A child that has opened `directory` and written one record naming `backend`."""
    child = Child("hold", kind, backend, str(directory))
    assert child.line() == "waiting"
    child.tell("go")
    assert child.line() == "opened"
    return child


def cli(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "journal_engine", *map(str, argv)], capture_output=True,
                          text=True, timeout=CHILD_TIMEOUT_S)


def open_record_store(backend: str, directory: Path, **options):
    return (Journal(directory, file_size=SMALL_FILE, **options) if backend == "journal"
            else LmdbRecordStore(directory, **options))


# ----- item 3: a lock a second opener cannot sidestep -------------------------------------------------------

@pytest.mark.parametrize("backend", ["journal", "lmdb"])
def test_deleting_the_lock_file_lets_no_second_writer_in(backend, tmp_path):
    directory = tmp_path / "records"
    first = holder("record", backend, directory)
    try:
        (directory / LOCK_FILES[backend]).unlink()
        with pytest.raises(JournalLockedError) as refused:
            open_record_store(backend, directory)
        assert refused.value.holder_pid == first.pid and str(directory) in str(refused.value)
        if backend == "journal":                   # a user's tool, in a third process (LMDB needs no compact)
            done = cli("compact", directory)
            assert done.returncode == 4, done.stderr
            assert f"process {first.pid}" in done.stderr and "Traceback" not in done.stderr
    finally:
        first.finish()
    with open_record_store(backend, directory) as store:     # released when the holder closes
        assert store.load().records[1].body == f"written by the {backend} record".encode()


def test_a_journal_moved_away_writes_no_new_file_into_the_directory_now_at_its_path(tmp_path):
    """The directory is renamed and a second process opens a new journal at the old path: the
    first journal's next file switch refuses, where it used to put its next file into the path."""
    directory, moved = tmp_path / "journal", tmp_path / "journal-moved"
    journal = Journal(directory, file_size=SMALL_FILE, sync="none")
    journal.load()
    journal.add(100, 1, b"before the move")
    directory.rename(moved)
    second = holder("record", "journal", directory)
    try:
        with pytest.raises(JournalLockedError, match="no longer the directory"):
            for record_id in range(101, 101 + 4 * SMALL_FILE // 1024):
                journal.add(record_id, 1, b"x" * 1000)
    finally:
        journal.close()
        second.finish()
    with Journal(directory, read_only=True) as reopened:
        assert set(reopened.load().records) == {1}            # the second opener's record alone
    with Journal(moved, read_only=True) as first_again:
        assert 100 in first_again.load().records


def test_a_journal_moved_away_compacts_nothing_into_the_directory_now_at_its_path(tmp_path):
    directory, moved = tmp_path / "journal", tmp_path / "journal-moved"
    journal = Journal(directory, file_size=SMALL_FILE, sync="none", compact_min_files=0)
    journal.load()
    for record_id in range(200):
        journal.add(record_id, 1, b"y" * 1000)
        journal.delete(record_id)
    directory.rename(moved)
    second = holder("record", "journal", directory)
    try:
        with pytest.raises(JournalLockedError, match="no longer the directory"):
            journal.compact()
        assert not [name for name in os.listdir(directory) if name.endswith(".jec") or name == "compaction.ctl"]
    finally:
        journal.close()
        second.finish()
    with Journal(directory, read_only=True) as reopened:
        assert set(reopened.load().records) == {1}            # the second opener's record alone


# ----- item 4: one lock for a directory, whatever the backend ----------------------------------------------

# the lock is taken in Python before either core writes: the twin's writes are the store case's, a broker
# on top of the store only adds the same Python code
@pytest.mark.parametrize("kind", ["store", pytest.param("broker", marks=pytest.mark.same_on_both)])
def test_two_backends_started_at_once_on_an_empty_directory_leave_the_winners_store(kind, tmp_path):
    for round_number in range(4):
        directory = tmp_path / f"broker-{round_number}"
        backends = ("journal", "lmdb") if round_number % 2 else ("lmdb", "journal")
        children = {backend: Child("hold", kind, backend, str(directory)) for backend in backends}
        try:
            for child in children.values():
                assert child.line() == "waiting"
            for child in children.values():
                child.tell("go")
            outcomes = {backend: child.line() for backend, child in children.items()}
            winners = [backend for backend, outcome in outcomes.items() if outcome == "opened"]
            assert len(winners) == 1, outcomes
            (winner,) = winners
            (loser,) = set(backends) - {winner}
            assert outcomes[loser] == f"refused {children[winner].pid}", outcomes
            for sub in ("messages", "bindings"):
                assert stored_backend(directory / sub) == winner
        finally:
            for child in children.values():
                child.finish()
        with MessageStore(directory, backend=winner) as store:
            state = store.load()
            assert [message.body for message in state.messages.values()] == [f"written by the {winner} {kind}"
                                                                             .encode()]
        done = cli("verify", directory)
        assert done.returncode == 0, done.stdout + done.stderr


# ----- item 5: inspecting a live LMDB store --------------------------------------------------------------

@pytest.mark.same_on_both   # LMDB's pages and reader table under the same Python code on either core
@pytest.mark.parametrize("kind, runs", [("store", 21), ("record", 9)])
def test_inspecting_an_lmdb_store_while_another_process_writes_it_never_crashes(kind, runs, tmp_path):
    """The writer deletes as much as it adds, so LMDB reuses pages all the time (and the record
    store's 1 MiB map grows under the inspections): a reader outside LMDB's reader table read
    reused pages and died of a PageNotFoundError traceback or an LMDB assertion (SIGABRT)."""
    directory = tmp_path / kind
    writer = Child("write-lmdb", kind, str(directory))
    try:
        assert writer.line() == "ready"
        commands = ("verify", "stats", "print")
        for run in range(runs):
            done = cli(commands[run % len(commands)], directory)
            assert done.returncode == 0 and "Traceback" not in done.stderr, (
                f"{commands[run % len(commands)]} (run {run}) exited {done.returncode}: {done.stderr[-2000:]}")
        assert writer.process.poll() is None, "the writer died under the inspections"
    finally:
        writer.process.kill()
        writer.process.wait()


def test_a_writer_does_not_start_under_an_inspection_of_an_idle_lmdb_store(tmp_path):
    """An idle store is read without LMDB's reader table (so nothing is written), which is safe
    only while no writer runs: one that starts meanwhile is refused, naming the inspection."""
    directory = tmp_path / "lmdb"
    with LmdbRecordStore(directory) as store:
        store.load()
        store.add(1, 1, b"kept")
    inspection = subprocess.Popen([sys.executable, "-c", (
        "import sys\n"
        "from journal_engine.storage.lmdb.store import LmdbRecordStore\n"
        "store = LmdbRecordStore(sys.argv[1], read_only=True)\n"
        "store.load()\n"
        "print('reading', flush=True)\n"
        "sys.stdin.readline()\n"
        "store.close()\n"), str(directory)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert inspection.stdout.readline().strip() == "reading"
        with pytest.raises(JournalLockedError, match="being inspected") as refused:
            LmdbRecordStore(directory)
        assert refused.value.holder_pid == inspection.pid
    finally:
        inspection.communicate("\n", timeout=CHILD_TIMEOUT_S)
    with LmdbRecordStore(directory) as store:
        assert store.load().records[1].body == b"kept"


def test_an_lmdb_store_open_for_writing_in_this_process_is_not_opened_again_to_inspect_it(tmp_path):
    """LMDB forbids one environment open twice in a process (closing the second drops the first's
    locks on lock.mdb, and the next process to open it would reset the writer's reader table)."""
    directory = tmp_path / "lmdb"
    with LmdbRecordStore(directory) as writer:
        writer.load()
        writer.add(1, 1, b"x", sync=True)
        with pytest.raises(JournalLockedError, match="open for writing in this process"):
            LmdbRecordStore(directory, read_only=True)
        assert writer.get(1).body == b"x"


def test_an_inspection_beside_a_writer_follows_the_map_the_writer_grows(tmp_path):
    """The writer doubles its map while the inspection is open: the inspection's next read found
    MDB_MAP_RESIZED (an lmdb.MapResizedError traceback) and now adopts the new size."""
    directory = tmp_path / "record"
    writer = Child("write-lmdb", "record", str(directory))
    try:
        assert writer.line() == "ready"
        with LmdbRecordStore(directory, read_only=True, map_size=limits.LMDB_MAP_SIZE_MIN_BYTES) as inspection:
            inspection.load()
            map_bytes = inspection.stats()["map_size"]
            data_path = directory / lmdb_store.DATA_FILE
            deadline = time.monotonic() + CHILD_TIMEOUT_S
            while data_path.stat().st_size <= map_bytes:     # the writer's map is larger than ours now
                assert writer.process.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            # the file grows when the writer resizes; its meta page names the new size at its next commit,
            # and the inspection's next read after that adopts it
            inspection.get(1, committed_only=True)
            while inspection.stats()["map_size"] <= map_bytes:
                assert writer.process.poll() is None and time.monotonic() < deadline, "the map never grew"
                time.sleep(0.05)
                inspection.get(1, committed_only=True)
    finally:
        writer.process.kill()
        writer.process.wait()
