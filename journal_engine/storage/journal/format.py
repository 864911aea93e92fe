"""On-disk names, numbers and the file header (docs/internals/format.md)."""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from ...errors import CorruptRecordError, IncompatibleFormatError
from ...limits import (DATA_START_BYTES, FILE_HEADER_SIZE_BYTES, FILE_ID_MAX, FILE_SIZE_MAX_BYTES, FILE_SIZE_MIN_BYTES,
                      SECTOR_SIZE_BYTES)

MAGIC = b"\x89JEJRNL\n"
# Version 2 starts the first frame on the sector after the header (so no write ever touches the
# synced header's sector again: a torn first batch cannot take the header with it) and records
# the size the file was allocated at (so a file cut short is damage that load() reports).
# Version 1 files (frames right after the header, no size) are still read.
# Version 3 writes record groups under a GROUP frame, their members flagged (record_format.GROUP_MEMBER):
# a reader of version 2 would take the flagged frames for damage and apply a torn group's surviving
# part, so it must refuse the file instead; its header and layout are version 2's.
FORMAT_VERSION = 3
READABLE_FORMAT_VERSIONS = (1, 2, 3)
_DATA_START_OF_VERSION = {1: FILE_HEADER_SIZE_BYTES, 2: DATA_START_BYTES, 3: DATA_START_BYTES}
HEADER_FLAG_COMPACTED = 1   # written by compaction
HEADER_FLAG_RECYCLED = 2    # reused a reclaimed file: bytes past the data may be an earlier life's frames
HEADER_FLAG_FRESH = 4       # never held anything but zeros before this life

DATA_SUFFIX = ".jej"
FREE_SUFFIX = ".jef"
COMPACT_SUFFIX = ".jec"
TMP_SUFFIX = ".tmp"
CONTROL_FILE = "compaction.ctl"
LOCK_FILE = "journal.lock"
CHECKPOINT_FILE = "journal.jck"      # every data file's columns, saved at a clean close (storage/journal/checkpoint.py)
DATA_NAME = re.compile(r"^journal-([0-9a-f]{16})\.jej$")
FREE_NAME = re.compile(r"^journal-([0-9a-f]{16})\.jef$")
COMPACT_NAME = re.compile(r"^journal-([0-9a-f]{16})\.jec$")
#: every file of records a journal may hold (data, free, compaction output), as a glob: a directory with
#: any of them holds a journal (storage/directory_kind.py)
FILES_GLOB = "journal-*.je[jfc]"


def data_name(file_id: int) -> str:
    return f"journal-{file_id:016x}{DATA_SUFFIX}"


def free_name(file_id: int) -> str:
    return f"journal-{file_id:016x}{FREE_SUFFIX}"


def compact_name(file_id: int) -> str:
    return f"journal-{file_id:016x}{COMPACT_SUFFIX}"


def stamp_of(file_id: int) -> int:
    """The 32 bits of the file id written into every frame of the file."""
    return file_id & 0xFFFFFFFF


# magic, version, header size, file id, sequence, flags, allocated size (v2; 0 in v1), reserved, crc
_HEADER = struct.Struct("<8sIIQQII20sI")
assert _HEADER.size == FILE_HEADER_SIZE_BYTES


@dataclass(frozen=True)
class FileHeader:
    """The first 64 bytes of every journal file."""

    file_id: int
    sequence: int   # replay order; a compacted file takes the sequence of a file it replaces
    flags: int = 0
    file_size: int = 0            # the size the file was allocated at; 0: not recorded (version 1)
    version: int = FORMAT_VERSION

    @property
    def data_start(self) -> int:
        """Where the first frame of the file lies."""
        return _DATA_START_OF_VERSION[self.version]

    def encode(self, crc32c) -> bytes:
        body = _HEADER.pack(MAGIC, self.version, FILE_HEADER_SIZE_BYTES, self.file_id,
                            self.sequence, self.flags, self.file_size, b"\0" * 20, 0)
        return body[:-4] + struct.pack("<I", crc32c(body[:-4]))

    @classmethod
    def decode(cls, raw: bytes, path: str, crc32c) -> "FileHeader":
        if len(raw) < FILE_HEADER_SIZE_BYTES:
            raise CorruptRecordError(f"file header truncated to {len(raw)} bytes", path=path, offset=0,
                                     field="header",
                                     hint="a journal file is never shorter than its preallocated size; "
                                          "move this file out of the journal directory")
        magic, version, header_size, file_id, sequence, flags, file_size, _, crc = _HEADER.unpack_from(raw)
        if magic != MAGIC:
            raise CorruptRecordError("not a journal_engine file (bad magic)", path=path, offset=0,
                                     field="magic",
                                     hint="move foreign files out of the journal directory")
        if crc != crc32c(raw[:FILE_HEADER_SIZE_BYTES - 4]):
            raise CorruptRecordError("file header checksum mismatch", path=path,
                                     offset=FILE_HEADER_SIZE_BYTES - 4, field="header_crc",
                                     hint="the header is damaged; restore the file from a copy")
        if version not in READABLE_FORMAT_VERSIONS:
            raise IncompatibleFormatError(
                f"format version {version}, this journal_engine reads versions "
                f"{', '.join(map(str, READABLE_FORMAT_VERSIONS))}",
                path=path, offset=8, field="format_version",
                hint="open it with the journal_engine release that wrote it")
        if header_size != FILE_HEADER_SIZE_BYTES:
            raise CorruptRecordError(f"header size {header_size}, expected {FILE_HEADER_SIZE_BYTES}", path=path,
                                     offset=12, field="header_size",
                                     hint="not a file this format version wrote; move it out of the journal directory")
        # every number read from a file is checked before use (a hostile file must not reach struct.error)
        for name, value, offset in (("file_id", file_id, 16), ("sequence", sequence, 24)):
            if value > FILE_ID_MAX:
                raise CorruptRecordError(f"{name} {value} is past the largest this format uses ({FILE_ID_MAX})",
                                         path=path, offset=offset, field=name,
                                         hint="the header is damaged or forged; move the file out of the "
                                              "journal directory")
        if version >= 2 and not (FILE_SIZE_MIN_BYTES <= file_size <= FILE_SIZE_MAX_BYTES
                                 and file_size % SECTOR_SIZE_BYTES == 0):
            raise CorruptRecordError(f"allocated size {file_size} is not a journal file size", path=path,
                                     offset=36, field="file_size",
                                     hint="the header is damaged or forged; move the file out of the journal directory")
        return cls(file_id=file_id, sequence=sequence, flags=flags, file_size=file_size, version=version)

