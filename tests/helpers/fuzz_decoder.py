"""A coverage-guided fuzz target (atheris) for the scan decoder, replay and the file header.

Each input becomes a journal file's bytes: a valid header (its file id taken from the input), then
the input, frames or garbage. Every reader of the format runs on it — FileHeader.decode, scan_frames,
ReplayState.replay_file, and a whole load() of a directory holding it — and may raise only the
errors the format promises (CorruptRecordError and the like); a crash of the interpreter, a hang or
any other exception is a finding. Seeds: frames of every kind, including the short PREPARE bodies
that once read 4 GiB past a mapping, and record groups.

    python tests/helpers/fuzz_decoder.py -runs=20000 -max_len=8192      # bounded, as tests/faults/test_fuzz.py runs it
"""
from __future__ import annotations

import os
import struct
import sys
import tempfile

import atheris

with atheris.instrument_imports():
    from journal_engine import Journal, JournalError
    from journal_engine._impl import ReplayState, crc32c, encode_frame, encode_group, scan_frames
    from journal_engine.record_format import RecordKind
    from journal_engine.storage.journal.format import FileHeader, data_name, stamp_of

FILE_SIZE = 64 * 1024
SCRATCH = tempfile.mkdtemp(prefix="journal-engine-fuzz-")


def journal_bytes(data: bytes) -> tuple[bytes, int]:
    provider = atheris.FuzzedDataProvider(data)
    file_id = provider.ConsumeIntInRange(1, 1 << 20)
    body = provider.ConsumeBytes(FILE_SIZE - 4096)
    header = FileHeader(file_id, file_id, 4, FILE_SIZE).encode(crc32c)
    raw = header.ljust(4096, b"\0") + body
    return raw.ljust(FILE_SIZE, b"\0"), file_id


def test_one_input(data: bytes) -> None:
    raw, file_id = journal_bytes(data)
    try:
        FileHeader.decode(raw[:64], "fuzz", crc32c)
    except JournalError:
        pass
    scan_frames(raw, stamp_of(file_id), 4096)
    ReplayState({34: 8}).replay_file(raw, stamp_of(file_id), 4096, "fuzz")
    directory = os.path.join(SCRATCH, "journal")
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        os.unlink(os.path.join(directory, name))
    with open(os.path.join(directory, data_name(file_id)), "wb") as handle:
        handle.write(raw)
    try:
        with Journal(directory, file_size=FILE_SIZE, read_only=True) as journal:
            journal.load()
    except JournalError:
        pass


def seeds() -> list[bytes]:
    out = []
    for kind in RecordKind:
        for body in (b"", b"\x01", b"\x01\x00\x00", b"\x01\x00\x00\x00xid", b"x" * 40):
            frame = encode_frame(kind, 7, stamp_of(5), 42, 9 if kind >= 13 else 0, body)
            out.append(struct.pack(">I", 5) + frame * 3)
    group = encode_group(stamp_of(5), [(RecordKind.ADD, 7, 42, b"x" * 40), (RecordKind.UPDATE, 7, 42, b"u"),
                                       (RecordKind.DELETE, 0, 42, b"")])
    out.append(struct.pack(">I", 5) + group + encode_frame(RecordKind.ADD, 7, stamp_of(5), 43, 0, b"after") + group)
    return out


if __name__ == "__main__":
    corpus = os.path.join(SCRATCH, "corpus")
    os.makedirs(corpus, exist_ok=True)
    for index, seed in enumerate(seeds()):
        with open(os.path.join(corpus, f"seed-{index}"), "wb") as handle:
            handle.write(seed)
    atheris.Setup(sys.argv + [corpus], test_one_input)
    atheris.Fuzz()
