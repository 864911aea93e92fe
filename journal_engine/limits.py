"""Every limit of the storage core in one place, with the relations between them.

Each is tested at its maximum and one past it (tests/test_limits_and_config.py).
"""
from __future__ import annotations

FILE_HEADER_SIZE_BYTES = 64
FRAME_HEADER_SIZE_BYTES = 32
FRAME_ALIGNMENT_BYTES = 8
# A synced batch ends on a sector boundary, so later appends never rewrite a
# sector that holds records already reported durable (a torn rewrite would lose them).
SECTOR_SIZE_BYTES = 4096
# where the first frame of a file lies (format version 2): the sector after the header, so no write
# ever touches the header's sector once it is synced
DATA_START_BYTES = SECTOR_SIZE_BYTES

FILE_SIZE_MIN_BYTES = 64 * 1024
FILE_SIZE_MAX_BYTES = 1 << 31          # body lengths are u32; one mapping stays well inside
FILE_SIZE_DEFAULT_BYTES = 10 * 1024 * 1024

MIN_FILES_MIN = 2
# file ids grow by one per file and never wrap; a header or name past this is damage (or forged)
FILE_ID_MAX = (1 << 62) - 1
RECORD_ID_MAX = (1 << 64) - 1
TX_ID_MAX = (1 << 64) - 1
RECORD_TYPE_MAX = 255
BUFFER_TIMEOUT_US_MAX = 10_000_000
BUFFER_SIZE_MIN_BYTES = SECTOR_SIZE_BYTES
COMPACT_PERCENTAGE_MAX = 100
# Artemis's JournalImpl.UPDATE_FACTOR: compact when replaceable updates outnumber adds this much
COMPACT_UPDATE_FACTOR = 10
# sealed files whose data is not yet durable, kept open for the next sync
UNSYNCED_OPEN_FILES_MAX = 64

assert FILE_HEADER_SIZE_BYTES % FRAME_ALIGNMENT_BYTES == 0
assert FRAME_HEADER_SIZE_BYTES % FRAME_ALIGNMENT_BYTES == 0
assert SECTOR_SIZE_BYTES % FRAME_ALIGNMENT_BYTES == 0
assert FILE_SIZE_MIN_BYTES % SECTOR_SIZE_BYTES == 0
assert FILE_HEADER_SIZE_BYTES <= DATA_START_BYTES and DATA_START_BYTES % SECTOR_SIZE_BYTES == 0
assert FILE_SIZE_MIN_BYTES > DATA_START_BYTES + FRAME_HEADER_SIZE_BYTES + SECTOR_SIZE_BYTES


def max_frame_bytes(file_size_bytes: int) -> int:
    """The largest frame one file of this size holds."""
    return file_size_bytes - DATA_START_BYTES


def max_body_bytes(file_size_bytes: int) -> int:
    """The largest record body one file of this size holds."""
    return max_frame_bytes(file_size_bytes) - FRAME_HEADER_SIZE_BYTES
