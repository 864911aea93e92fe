"""I/O faults injected into the system calls of real runs through libfiu (the crash harness's `libfiu`
mode, journal_engine.crashtest.fault_workload), and the two bugs its first campaign found:
a short write of a new file's image (a compaction output: header and records) left the file synced
and named with records missing, and a failed write-out at a file roll reached the caller as a bare
OSError."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from journal_engine import Journal
from journal_engine.crashtest import fault_workload
from journal_engine.storage import durability

FIU = shutil.which("fiu-run")
needs_fiu = pytest.mark.skipif(not FIU, reason="libfiu's fiu-run is not installed (Debian: fiu-utils)")


@needs_fiu
def test_injected_io_errors_surface_as_journal_errors_and_lose_nothing_acknowledged(tmp_path):
    summary = fault_workload.fault_task(str(tmp_path), 0, 21, 30)
    assert summary["violations"] == []
    assert summary["faults"] >= 30 and len(summary["faults_by_kind"]) >= 4, summary
    assert summary["refused_after"] > 0 and summary["short_write_cycles"] > 0
    assert summary["acknowledged"] > 0


def test_a_short_write_never_leaves_a_new_file_short(tmp_path, monkeypatch):
    """pwrite may write fewer bytes than asked; the file's image must still land whole."""
    real_pwrite = os.pwrite
    monkeypatch.setattr(durability.os, "pwrite", lambda fd, data, offset: real_pwrite(fd, bytes(data[:100]), offset))
    image = bytes(range(256)) * 40           # a header and records, as a compaction output's
    path = str(tmp_path / "file")
    durability.create_zero_filled(path, 64 * 1024, image)
    with open(path, "rb") as handle:
        assert handle.read() == image + bytes(64 * 1024 - len(image))
    durability.write_header_durably(path, b"\xab" * 300)
    with open(path, "rb") as handle:
        assert handle.read(300) == b"\xab" * 300


ROLL_FAILS = textwrap.dedent('''
    import ctypes, sys
    from journal_engine import Journal, JournalError, JournalFailedError
    fiu = ctypes.CDLL("libfiu.so.0")
    fiu.fiu_enable.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint]
    journal = Journal(sys.argv[1], sync="none", file_size=64 * 1024)
    journal.load()
    for record_id in range(20):
        journal.add(record_id, 1, b"x" * 300)          # buffered: "none" writes them out at the roll
    fiu.fiu_enable(b"posix/io/rw/pwrite", 1, ctypes.c_void_p(5), 0)
    try:
        journal.compact()                              # rolls to a fresh file: the write-out fails
    except BaseException as exc:
        fiu.fiu_disable(b"posix/io/rw/pwrite")
        print(type(exc).__name__, isinstance(exc, JournalError), isinstance(exc, OSError), exc.errno)
    try:
        journal.add(99, 1, b"y", sync=True)
        print("accepted")
    except JournalFailedError:
        print("refused")
''')


@needs_fiu
def test_a_failed_write_out_at_a_file_roll_is_a_journal_error_and_stops_the_journal(tmp_path):
    done = subprocess.run(["fiu-run", "-x", "-f", "", sys.executable, "-c", ROLL_FAILS, str(tmp_path / "j")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["JournalFailedError True True 5", "refused"], done.stdout + done.stderr
    with Journal(tmp_path / "j", file_size=64 * 1024) as journal:
        assert journal.load().report.corrupt == []


@needs_fiu
def test_injected_io_errors_in_the_lmdb_store_surface_as_journal_errors_and_lose_nothing_acknowledged(tmp_path):
    summary = fault_workload.fault_task(str(tmp_path), 0, 21, 30, store="lmdb")
    assert summary["violations"] == []
    assert summary["faults"] >= 30 and {"pwrite-eio", "fdatasync-eio"} <= set(summary["faults_by_kind"]), summary
    assert summary["refused_after"] > 0 and summary["acknowledged"] > 0
