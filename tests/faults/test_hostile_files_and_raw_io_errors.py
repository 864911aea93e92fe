"""What the first attack on the landed journal found, one test per finding (each fails on the code
before its fix): a hostile frame that crashed the interpreter, a hostile header that escaped as
struct.error, an older file cut short that lost records silently, a torn first write that could take
the synced header with it, raw OSErrors escaping from a file roll and from load(), and a compaction
that stayed broken after one failure.
"""
from __future__ import annotations

import errno
import os
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from journal_engine import Broker, CorruptRecordError, Journal, JournalError, MessageStore, RecordKind
from journal_engine._impl import crc32c, encode_frame, scan_frames
from journal_engine.limits import DATA_START_BYTES, FILE_ID_MAX, SECTOR_SIZE_BYTES
from journal_engine.storage import durability
from journal_engine.storage.journal.format import FileHeader, data_name, stamp_of
from journal_engine.storage.journal.segment_files import list_directory
from locations import HELPERS

HERE = HELPERS
FILE_SIZE = 64 * 1024
FIU = shutil.which("fiu-run") and shutil.which("fiu-ctrl")


def body(record_id: int, size: int = 1000) -> bytes:
    return struct.pack("<Q", record_id) * (size // 8)


def build(directory, count: int, *, size: int = 1000) -> dict[int, bytes]:
    expected = {}
    with Journal(directory, file_size=FILE_SIZE, sync="none", compact_min_files=0) as journal:
        journal.load()
        for record_id in range(count):
            expected[record_id] = body(record_id, size)
            journal.add(record_id, 1, expected[record_id])
    return expected


def data_files(directory) -> list:
    return list_directory(os.fspath(directory)).data


def child_env(implementation: str) -> dict:
    env = dict(os.environ, JOURNAL_ENGINE_IMPLEMENTATION=implementation)
    env.pop("JOURNAL_ENGINE_REQUIRE_EXTENSION", None)   # CI requires the extension; a twin child must not
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    return env


def run_child(code: str, implementation: str, *args: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter: a crash of the interpreter is a failed test, not a dead suite."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=child_env(implementation),
                          capture_output=True, text=True, timeout=120, check=False)


# ----- a hostile PREPARE frame: body shorter than its record count ------------------------------
LOAD_AND_SCAN = """
    import mmap, sys
    from journal_engine import Journal
    from journal_engine._impl import scan_frames
    from journal_engine.storage.journal.format import stamp_of
    from journal_engine.storage.journal.segment_files import list_directory
    directory = sys.argv[1]
    for data in list_directory(directory).data:
        with open(data.path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            scan_frames(view, stamp_of(data.header.file_id), data.header.data_start)
    with Journal(directory, file_size=65536) as journal:
        result = journal.load()
    print(sorted(result.records), [(o, r) for _p, o, r in result.report.corrupt], result.prepared)
"""


@pytest.mark.parametrize("body_len", [0, 1, 3])
def test_prepare_frame_shorter_than_its_record_count_is_reported_by_both_implementations(tmp_path, body_len):
    directory = tmp_path / "journal"
    build(directory, 3)
    data = [d for d in data_files(directory) if d.header.file_id][0]
    raw = Path(data.path).read_bytes()
    offset = scan_frames(raw, stamp_of(data.header.file_id), data.header.data_start)[-1][0]   # the clean end
    assert offset > DATA_START_BYTES and not any(raw[offset:offset + 32])
    frame = encode_frame(RecordKind.PREPARE, 0, stamp_of(data.header.file_id), 0, 5, b"\x01" * body_len)
    with open(data.path, "r+b") as handle:
        handle.seek(offset)
        handle.write(frame)
    outputs = []
    for implementation in ("cython", "python"):
        copy = tmp_path / implementation
        shutil.copytree(directory, copy)
        done = run_child(LOAD_AND_SCAN, implementation, str(copy))
        assert done.returncode == 0, f"{implementation}: exit {done.returncode}: {done.stderr[-2000:]}"
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    assert f"prepared with a {body_len}-byte body" in outputs[0] and "[0, 1, 2]" in outputs[0]


# ----- a hostile header: the largest file id --------------------------------------------------
def _forge_header(path, field_offset: int, value: int) -> None:
    raw = bytearray(Path(path).read_bytes()[:64])
    struct.pack_into("<Q", raw, field_offset, value)
    struct.pack_into("<I", raw, 60, crc32c(bytes(raw[:60])))   # a valid CRC: only the bound check can catch it
    with open(path, "r+b") as handle:
        handle.write(raw)


@pytest.mark.parametrize("field_offset", [16, 24])   # file id, sequence
def test_header_with_a_file_id_past_the_bound_is_a_corrupt_record_error(tmp_path, field_offset):
    directory = tmp_path / "journal"
    build(directory, 3)
    data = data_files(directory)[0]
    _forge_header(data.path, field_offset, 2 ** 64 - 1)
    with pytest.raises(CorruptRecordError) as caught:
        with Journal(directory, file_size=FILE_SIZE) as journal:
            journal.load()
    assert caught.value.path == data.path and caught.value.offset == field_offset

    broker_dir = tmp_path / "broker"
    broker = Broker(broker_dir)
    broker.create_queue("q")
    broker.send("q", b"m")
    broker.close()
    forged = sorted(broker_dir.rglob("journal-*.jej"))[0]
    _forge_header(forged, field_offset, 2 ** 64 - 1)
    with pytest.raises(CorruptRecordError):
        Broker(broker_dir)
    with pytest.raises(CorruptRecordError):
        store = MessageStore(broker_dir)
        try:
            store.load()
        finally:
            store.close()


def test_file_named_with_an_id_past_the_bound_is_a_corrupt_record_error(tmp_path):
    directory = tmp_path / "journal"
    build(directory, 3)
    source = data_files(directory)[-1]
    target = directory / data_name(2 ** 64 - 1)
    os.rename(source.path, target)
    with pytest.raises(CorruptRecordError) as caught:
        with Journal(directory, file_size=FILE_SIZE) as journal:
            journal.load()
    assert caught.value.field == "name" and caught.value.path == str(target)
    assert FILE_ID_MAX < 2 ** 63


# ----- an older file cut short at a frame boundary ----------------------------------------------
@pytest.mark.parametrize("cut", [8192, 12288, 24576, 40960])
def test_older_file_cut_short_at_a_sector_boundary_is_reported_not_silent(tmp_path, cut):
    directory = tmp_path / "journal"
    expected = build(directory, 200)
    files = [d for d in data_files(directory)]
    assert len(files) >= 3
    older = files[0]
    with open(older.path, "r+b") as handle:
        handle.truncate(cut)
    with Journal(directory, file_size=FILE_SIZE) as journal:
        with pytest.warns(RuntimeWarning):
            result = journal.load()
    lost = set(expected) - set(result.records)
    assert lost, "the cut removed records"
    assert (older.path, cut) in [(p, o) for p, o, _r in result.report.corrupt]
    assert "cut short" in result.report.corrupt[0][2]
    for record_id, rec in result.records.items():
        assert rec.body == expected[record_id]
    # verify (read-only) says so as well
    done = subprocess.run([sys.executable, "-m", "journal_engine", "verify", str(directory)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1 and "cut short" in done.stdout + done.stderr


# ----- the first write of a file never touches the header's sector ----------------------------
def test_first_batch_of_a_new_file_is_written_past_the_header_sector(tmp_path):
    directory = tmp_path / "journal"
    with Journal(directory, file_size=FILE_SIZE, sync="always") as journal:
        journal.load()
        active = journal.stats()["active_file"]
        header_sector = Path(active).read_bytes()[:SECTOR_SIZE_BYTES]
        assert journal.stats()["active_position"] == DATA_START_BYTES
        for record_id in range(5):
            journal.add(record_id, 1, body(record_id, 100))
        assert Path(active).read_bytes()[:SECTOR_SIZE_BYTES] == header_sector
        raw = Path(active).read_bytes()
        assert raw[DATA_START_BYTES + 8] == RecordKind.ADD   # the first frame's kind byte
    header = FileHeader.decode(raw[:64], active, crc32c)
    assert header.data_start == DATA_START_BYTES and header.file_size == FILE_SIZE


def test_torn_write_into_the_empty_part_of_the_header_sector_loses_nothing(tmp_path):
    """Power loss while the (old) writer rewrote sector 0: garbage between the header and the data
    start of the newest file. Nothing there belongs to any record, so load() reports nothing lost."""
    directory = tmp_path / "journal"
    expected = build(directory, 100)
    newest = data_files(directory)[-1]
    with open(newest.path, "r+b") as handle:
        handle.seek(64)
        handle.write(b"\xa5" * (SECTOR_SIZE_BYTES - 64))
    with Journal(directory, file_size=FILE_SIZE) as journal:
        result = journal.load()
    assert {rid: rec.body for rid, rec in result.records.items()} == expected


# ----- raw OSErrors must not escape ------------------------------------------------------------
def _fiu_enable(pid: int, fifo_prefix: str, points: list[str]) -> None:
    args = ["fiu-ctrl", "-f", fifo_prefix]
    for point in points:
        args += ["-c", f"enable name={point},failinfo={errno.EIO}"]
    done = subprocess.run(args + [str(pid)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def _run_under_fiu(tmp_path, command: str, directory, points: list[str]) -> list[str]:
    fifo_prefix = str(tmp_path / "fiu")
    child = subprocess.Popen(["fiu-run", "-x", "-f", fifo_prefix, sys.executable, str(HERE / "io_fault_worker.py"),
                              command, str(directory)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=child_env("cython"))
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        _fiu_enable(child.pid, fifo_prefix, points)
        child.stdin.write("go\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err[-3000:]
    return out.split("\n")


@pytest.mark.skipif(not FIU, reason="libfiu's fiu-run / fiu-ctrl are not installed (Debian: fiu-utils)")
def test_eio_from_fsync_during_a_file_roll_is_a_journal_error_with_the_errno(tmp_path):
    lines = _run_under_fiu(tmp_path, "roll", tmp_path / "journal", ["posix/io/sync/fsync"])
    errors = [line for line in lines if line.startswith("error")]
    assert errors, lines
    assert errors[0].split()[2:] == ["True", "True", str(errno.EIO)], errors[0]


@pytest.mark.skipif(not FIU, reason="libfiu's fiu-run / fiu-ctrl are not installed (Debian: fiu-utils)")
def test_eio_from_fdatasync_during_load_is_a_journal_error_with_the_errno(tmp_path):
    directory = tmp_path / "journal"
    build(directory, 200)
    lines = _run_under_fiu(tmp_path, "load", directory, ["posix/io/sync/fdatasync", "posix/io/sync/fsync"])
    errors = [line for line in lines if line.startswith("error")]
    assert errors, lines
    assert errors[0].split()[2:] == ["True", "True", str(errno.EIO)], errors[0]


def test_injected_eio_during_a_file_roll_is_a_journal_error(tmp_path):
    with Journal(tmp_path / "journal", file_size=FILE_SIZE, sync="none", min_files=2) as journal:
        journal.load()
        with durability.injected_failure("activate-before-rename", times=100):
            with pytest.raises(JournalError) as caught:
                for record_id in range(1000):
                    journal.add(record_id, 1, body(record_id, 2000))
    assert isinstance(caught.value, OSError) and caught.value.errno == errno.EIO


# ----- one failed compaction must not stop later ones -------------------------------------------
@pytest.mark.parametrize("point", ["compact-outputs-written", "compact-control-written",
                                   "compact-first-output-renamed", "compact-swapped"])
def test_compaction_works_again_after_an_io_error_at_any_step(tmp_path, point):
    directory = tmp_path / "journal"
    expected = {}
    with Journal(directory, file_size=FILE_SIZE, sync="none", compact_min_files=0) as journal:
        journal.load()
        for record_id in range(400):
            expected[record_id] = body(record_id)
            journal.add(record_id, 1, expected[record_id])
            if record_id % 4:
                journal.delete(record_id)
                del expected[record_id]
        with durability.injected_failure(point):
            with pytest.raises(JournalError) as caught:
                journal.compact()
        assert isinstance(caught.value, OSError) and caught.value.errno == errno.EIO
        journal.compact()          # finishes what the failed one committed, then compacts again
        for record_id in range(400, 800):
            expected[record_id] = body(record_id)
            journal.add(record_id, 1, expected[record_id])
            if record_id % 4:
                journal.delete(record_id)
                del expected[record_id]
        journal.compact()
        assert journal.stats()["live_records"] == len(expected)
        files_after = journal.stats()["data_files"]
    assert not (directory / "compaction.ctl").exists()
    with Journal(directory, file_size=FILE_SIZE) as journal:
        result = journal.load()
    assert result.report.corrupt == [] and result.report.anomalies == []
    assert {rid: rec.body for rid, rec in result.records.items()} == expected
    frame = len(encode_frame(RecordKind.ADD, 1, 0, 0, 0, body(0)))
    assert files_after <= -(-len(expected) * frame // (FILE_SIZE - DATA_START_BYTES)) + 2
