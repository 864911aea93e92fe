"""A real full disk, and a failed sync (issue 2, bad input: ENOSPC and fsync failures).

Disk full: a 3 MiB tmpfs is mounted (skipped where mounting is not permitted);
appends with sync=True run until StoreFullError. Every acknowledged record must
load afterwards, no temporary file may be left, and once space is freed the
journal appends again.

Failed sync: a child runs under libfiu's fiu-run; the parent turns on failures
of msync and fdatasync (what the journal calls to make data durable) with
fiu-ctrl. The failing sync raises JournalFailedError, and every later write
raises it too, even after the fault is lifted (no retry: after a failed
fsync the page cache may have dropped the dirty data, so a retry that succeeds
would report as durable what is not). A reopen recovers everything synced before.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from journal_engine import Journal, StoreFullError

from crash_worker import FILE_SIZE, SYNC_FAILURE_RECORDS, make_body
from locations import HELPERS

WORKER = str(HELPERS / "crash_worker.py")
FILLER_BYTES = 1024 * 1024


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MiB tmpfs: a disk that really fills up."""
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command: cannot make a real full disk")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"mounting a 3 MiB tmpfs for a real full disk is not permitted here: "
                    f"{mounted.stderr.strip() or mounted.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def bodies(result) -> dict[int, bytes]:
    return {rid: rec.body for rid, rec in result.records.items()}


def test_full_disk_raises_store_full_and_loses_nothing_acknowledged(small_disk):
    filler = small_disk / "filler"
    filler.write_bytes(b"\xff" * FILLER_BYTES)       # freed later to make room again
    directory = small_disk / "journal"
    acknowledged: dict[int, bytes] = {}
    journal = Journal(directory, file_size=FILE_SIZE, min_files=2, sync="group")
    journal.load()
    with pytest.raises(StoreFullError) as caught:
        for record_id in range(10_000):
            body = make_body(record_id, record_id, 3000)
            journal.add(record_id, 1, body, sync=True)
            acknowledged[record_id] = body
    error = caught.value
    assert isinstance(error, OSError)
    assert error.hint and "free disk space" in error.hint, str(error)
    assert "hint" in str(error)
    assert len(acknowledged) > 100, "the disk filled before the journal wrote much: the test proves little"
    journal.close()
    names = os.listdir(directory)
    assert not [n for n in names if n.endswith(".tmp")], f"a temporary file was left: {names}"

    with Journal(directory, file_size=FILE_SIZE, min_files=2, sync="group") as journal:
        result = journal.load()
        assert result.report.corrupt == [] and result.report.anomalies == []
        assert bodies(result) == acknowledged
        filler.unlink()                               # room for four more files
        for record_id in range(20_000, 20_150):       # more than one file's worth: a new file is needed
            body = make_body(record_id, record_id, 3000)
            journal.add(record_id, 1, body, sync=True)
            acknowledged[record_id] = body
    with Journal(directory, file_size=FILE_SIZE, min_files=2) as journal:
        result = journal.load()
        assert result.report.corrupt == []
        assert bodies(result) == acknowledged
    assert not [n for n in os.listdir(directory) if n.endswith(".tmp")]


def test_open_on_a_full_disk_raises_store_full_and_leaves_no_temporary_file(small_disk):
    filler = small_disk / "filler"
    with open(filler, "wb") as handle:               # fill the disk completely
        try:
            while True:
                handle.write(b"\xff" * 65536)
                handle.flush()
        except OSError:
            pass
    directory = small_disk / "journal"
    with pytest.raises(StoreFullError) as caught:
        with Journal(directory, file_size=FILE_SIZE) as journal:
            journal.load()
    assert caught.value.hint
    assert not [n for n in os.listdir(directory) if n.endswith(".tmp")]
    filler.unlink()
    with Journal(directory, file_size=FILE_SIZE) as journal:
        journal.load()
        journal.add(1, 1, b"room again", sync=True)
    with Journal(directory, file_size=FILE_SIZE) as journal:
        assert journal.load().records[1].body == b"room again"


# ----- a failed sync, injected with libfiu ---------------------------------------------------------
FIU_POINTS = ("posix/mm/msync", "posix/io/sync/fdatasync")   # Segment's msync or pwrite + fdatasync


def _fiu_ctrl(pid: int, command: str, fifo_prefix: str) -> None:
    assert os.path.exists(f"{fifo_prefix}-{pid}.in"), "the child has no libfiu control pipe"
    args = ["fiu-ctrl", "-f", fifo_prefix]
    for point in FIU_POINTS:
        args += ["-c", f"{command} name={point}" + (",failinfo=5" if command == "enable" else "")]   # EIO
    done = subprocess.run(args + [str(pid)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"fiu-ctrl failed: {done.stderr}"


@pytest.mark.skipif(shutil.which("fiu-run") is None or shutil.which("fiu-ctrl") is None,
                    reason="libfiu's fiu-run / fiu-ctrl are not installed (Debian: fiu-utils)")
@pytest.mark.parametrize("mode", ["always", "group"])
def test_failed_sync_stops_the_journal_and_reopen_recovers_what_was_synced(tmp_path, mode):
    directory = tmp_path / "journal"
    fifo_prefix = str(tmp_path / "fiu-ctrl")
    child = subprocess.Popen(["fiu-run", "-x", "-f", fifo_prefix, sys.executable, WORKER, "sync-failure", str(directory), mode],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             )
    lines: list[str] = []
    try:
        def read_until(marker: str) -> None:
            for line in child.stdout:
                lines.append(line.strip())
                if line.strip() == marker:
                    return
            raise AssertionError(f"the child ended before {marker!r}: {lines} {child.stderr.read()}")

        read_until("ready")
        _fiu_ctrl(child.pid, "enable", fifo_prefix)
        child.stdin.write("go\n")
        child.stdin.flush()
        read_until("failed")
        _fiu_ctrl(child.pid, "disable", fifo_prefix)
        child.stdin.write("go\n")
        child.stdin.flush()
        read_until("closed")
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, child.stderr.read()
    first = [line for line in lines if line.startswith("first-sync")]
    assert first and first[0].startswith("first-sync JournalFailedError"), (
        f"the failing sync did not raise JournalFailedError: {first}")
    assert "Errno 5" in first[0] or "Input/output" in first[0], first[0]
    later = [line for line in lines if line.startswith("later ")]
    assert len(later) == 6
    not_refused = [line for line in later if not line.endswith("JournalFailedError")]
    assert not_refused == [], f"writes after a failed sync were not refused: {not_refused}"

    with Journal(directory, file_size=FILE_SIZE) as journal:
        result = journal.load()
        assert result.report.corrupt == []
        records = bodies(result)
        for record_id in range(SYNC_FAILURE_RECORDS):
            assert records.get(record_id) == make_body(record_id, record_id, 500), f"synced record {record_id} lost"
        assert set(records) <= set(range(SYNC_FAILURE_RECORDS)) | {100}
        if 100 in records:                      # written, its sync failed: it may or may not be there
            assert records[100] == make_body(100, 100, 500)
        journal.add(200, 1, b"the reopened journal writes", sync=True)
