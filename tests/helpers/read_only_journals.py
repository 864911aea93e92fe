"""A journal for read-only and inspection tests: records, deletes, a prepared and an unfinished
transaction (build), and a torn tail after it (tear_tail)."""
from __future__ import annotations

from pathlib import Path

from journal_engine import Journal, RecordKind
from journal_engine._impl import encode_frame, scan_frames
from journal_engine.storage.journal.format import stamp_of
from journal_engine.storage.journal.segment_files import list_directory

FILE_SIZE = 64 * 1024


def snapshot(directory: Path) -> dict:
    """Every entry's name, bytes and mtime (ns): what an inspection must leave as it found it."""
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(directory.iterdir())}


def body(record_id: int, size: int = 900) -> bytes:
    return record_id.to_bytes(8, "little") * (size // 8)


def build(directory: Path, count: int = 150) -> dict:
    expected = {}
    with Journal(directory, file_size=FILE_SIZE, sync="none", compact_min_files=0) as journal:
        journal.load()
        for record_id in range(count):
            expected[record_id] = body(record_id)
            journal.add(record_id, 1, expected[record_id])
            if record_id % 3 == 0:
                journal.delete(record_id)
                del expected[record_id]
        journal.add_tx(9, 10_000, 2, b"prepared")
        journal.prepare(9, b"xid-9")
        journal.add_tx(10, 10_001, 2, b"never finished")
    return expected


def tear_tail(directory: Path) -> None:
    """Half a frame after the clean end of the last file with records: a torn tail."""
    data = [d for d in list_directory(str(directory)).data
            if len(scan_frames(Path(d.path).read_bytes(), stamp_of(d.header.file_id), d.header.data_start)) > 1][-1]
    raw = Path(data.path).read_bytes()
    end = scan_frames(raw, stamp_of(data.header.file_id), data.header.data_start)[-1][0]
    frame = encode_frame(RecordKind.ADD, 1, stamp_of(data.header.file_id), 50_000, 0, b"x" * 300)
    with open(data.path, "r+b") as handle:
        handle.seek(end)
        handle.write(frame[: len(frame) // 2])
