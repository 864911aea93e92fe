"""Python twin of the compiled scan decoder (pyx/journal_engine/_scan.pyx): one file's frames -> columns.

The twin never maps a file: its bodies are bytes it owns, so it has no SIGBUS guard and pins nothing.
"""
from __future__ import annotations

import array
import os
import struct

from ..limits import FRAME_ALIGNMENT_BYTES, FRAME_HEADER_SIZE_BYTES
from .codec import check_frame, crc32c, decode_header, frame_size, is_group_member
from ..record_format import FRAME_HEADER, GROUP_BODY, GROUP_MEMBER, GROUP_MEMBER_KINDS, FrameCheck, FrameField, RecordKind


#: what a reader reports of damage (a FrameCheck other than VALID) followed by valid frames
#: Python cannot survive a SIGBUS: storage/journal/scan.py reads files into owned bytes for the twin, never maps them
GUARDS_MAPPED_READS = False

GAP_REASONS = {
    FrameCheck.ZERO: "unwritten gap followed by valid records",
    FrameCheck.FOREIGN: "bytes of another file id followed by valid records",
    FrameCheck.INVALID: "damaged frame (bad checksum, length or kind) followed by valid records",
}

#: the twin's bodies are bytes: it never maps a file, so no body is a view (the compiled core's Body)
Body = bytes


class MappedFile:
    """The compiled core maps a data file for its body views; the twin never does (storage/journal/scan.py
    reads the file into memory for it), so making one is a bug."""

    def __init__(self, fd: int, size: int, path, key) -> None:
        raise NotImplementedError("the Python twin never maps a journal file (GUARDS_MAPPED_READS is False)")


def is_pinned(key) -> bool:
    """No body of the twin pins a file: they are bytes it owns."""
    return False


def _next_valid(buffer, pos: int, stamp: int) -> tuple[int, bool]:
    """(the first offset >= pos holding a valid frame of this file that can start a reading again,
    or -1; whether a record group's member was passed over on the way: a torn group's data)."""
    limit = len(buffer)
    stamp_bytes = struct.pack("<I", stamp)
    member_skipped = False
    while pos + FRAME_HEADER_SIZE_BYTES <= limit:
        if buffer[pos + FrameField.STAMP:pos + FrameField.STAMP + 4] == stamp_bytes:
            check, size = check_frame(buffer, pos, stamp)
            if check == FrameCheck.VALID:
                if not is_group_member(buffer, pos):
                    return pos, member_skipped
                member_skipped = True
                pos += size
                continue
        pos += FRAME_ALIGNMENT_BYTES
    return -1, member_skipped


def _group_end(buffer, pos: int, size: int, stamp: int) -> int:
    """Where the record group headed by the valid GROUP frame at `pos` ends, or -1 when it is not
    whole (count, length, stamps, member flags and CRC32C as the compiled decoder checks them)."""
    body_len = decode_header(buffer, pos)[0]
    if body_len != GROUP_BODY.size:
        return -1
    count, member_bytes, crc, zero = GROUP_BODY.unpack_from(buffer, pos + FRAME_HEADER_SIZE_BYTES)
    start = pos + size
    if zero or count == 0 or member_bytes % FRAME_ALIGNMENT_BYTES or member_bytes > len(buffer) - start:
        return -1
    end = start + member_bytes
    if crc != crc32c(buffer[start:end]):
        return -1
    at, found = start, 0
    while at < end:
        if at + FRAME_HEADER_SIZE_BYTES > end:
            return -1
        _crc, body_len, kind, _user, flags, frame_stamp, _record_id, _tx_id = FRAME_HEADER.unpack_from(buffer, at)
        if frame_stamp != stamp or flags != GROUP_MEMBER or kind not in GROUP_MEMBER_KINDS:
            return -1
        at += frame_size(body_len)
        found += 1
    return end if at == end and found == count else -1


class FrameColumns:
    """Every frame of one file from ``start``, decoded into column arrays (twin of the compiled one).

    One row per valid frame and one per damaged region followed by valid frames (``check`` not
    VALID, its other fields 0); where valid data ends is ``end_offset`` / ``end_check``, not a row.
    """

    def __init__(self):
        self._offset, self._size = array.array("q"), array.array("q")
        self._check, self._kind, self._record_type = array.array("B"), array.array("B"), array.array("B")
        self._record_id, self._tx_id = array.array("Q"), array.array("Q")
        self._body_offsets = array.array("q", [0])
        self.bodies = b""
        self.count = self.end_offset = self.end_check = self.groups_skipped = 0

    offset = property(lambda self: memoryview(self._offset))
    size = property(lambda self: memoryview(self._size))
    check = property(lambda self: memoryview(self._check))
    kind = property(lambda self: memoryview(self._kind))
    record_type = property(lambda self: memoryview(self._record_type))
    record_id = property(lambda self: memoryview(self._record_id))
    tx_id = property(lambda self: memoryview(self._tx_id))
    body_offsets = property(lambda self: memoryview(self._body_offsets))

    def body(self, row: int) -> bytes:
        """The body of one row (empty for a damaged region)."""
        if not 0 <= row < self.count:
            raise IndexError(f"row {row} of {self.count}")
        return self.bodies[self._body_offsets[row]:self._body_offsets[row + 1]]

    def __len__(self):
        return self.count

    def __repr__(self):
        return f"FrameColumns(count={self.count}, end_offset={self.end_offset}, end_check={self.end_check})"

    def _append(self, offset, size, check, kind, record_type, record_id, tx_id, body_len):
        self._offset.append(offset)
        self._size.append(size)
        self._check.append(check)
        self._kind.append(kind)
        self._record_type.append(record_type)
        self._record_id.append(record_id)
        self._tx_id.append(tx_id)
        self._body_offsets.append(self._body_offsets[-1] + body_len)


def scan_columns(buffer, stamp: int, start: int, copy: bool = True, groups: bool = True) -> FrameColumns:
    """Decode every frame of one file from ``start`` into a :class:`FrameColumns`. The twin's
    bodies are always copied (``copy=False`` leaves them in the buffer in the compiled core);
    ``groups=False``: a valid GROUP frame makes no row, only a count (``groups_skipped``)."""
    cols = FrameColumns()
    bodies = []
    pos = start
    group_end = start   # [.., group_end): members of a record group checked whole
    while True:
        check, size = check_frame(buffer, pos, stamp)
        if check == FrameCheck.VALID:
            if buffer[pos + FrameField.KIND] == RecordKind.GROUP:
                end = _group_end(buffer, pos, size, stamp)
                if end < 0:
                    check = FrameCheck.INVALID      # a torn group: damage from its GROUP frame on
                else:
                    group_end = end
            elif is_group_member(buffer, pos) and pos >= group_end:
                check = FrameCheck.INVALID          # a member whose GROUP frame was lost: a torn group
        if check == FrameCheck.VALID:
            if not groups and buffer[pos + FrameField.KIND] == RecordKind.GROUP:
                cols.groups_skipped += 1
                pos += size
                continue
            body_len, kind, user_type, _stamp, record_id, tx_id = decode_header(buffer, pos)
            body_start = pos + FRAME_HEADER_SIZE_BYTES
            cols._append(pos, size, 0, kind, user_type, record_id, tx_id, body_len)
            bodies.append(bytes(buffer[body_start:body_start + body_len]))
            pos += size
            continue
        nxt, member_skipped = _next_valid(buffer, pos + FRAME_ALIGNMENT_BYTES, stamp)
        if nxt < 0:
            if member_skipped:
                check = FrameCheck.INVALID      # past the end lies a torn group's part: a torn write
            break
        cols._append(pos, nxt - pos, int(check), 0, 0, 0, 0, 0)
        pos = nxt
    cols.bodies = b"".join(bodies)
    cols.count, cols.end_offset, cols.end_check = len(cols._offset), pos, int(check)
    return cols


def scan_frames(buffer, stamp: int, start: int):
    """Every frame of one file as (offset, check, kind, user_type, record_id, tx_id, body), from
    :func:`scan_columns`; the last row says where data ends."""
    cols = scan_columns(buffer, stamp, start)
    out = []
    for i in range(cols.count):
        if cols._check[i]:
            out.append((cols._offset[i], cols._check[i], None, None, None, None, None))
        else:
            out.append((cols._offset[i], 0, cols._kind[i], cols._record_type[i], cols._record_id[i],
                        cols._tx_id[i], cols.body(i)))
    out.append((cols.end_offset, cols.end_check, None, None, None, None, None))
    return out


class CheckpointMapping(bytes):
    """The checkpoint a load took (twin of the compiled mapping): the file read into memory, which
    nobody can cut afterwards (``cut`` is always False)."""

    def __new__(cls, fd: int, size: int, path: str, trailer: bytes) -> "CheckpointMapping":
        parts, at = [], 0
        while at < size:
            part = os.pread(fd, size - at, at)
            if not part:
                break
            parts.append(part)
            at += len(part)
        mapping = super().__new__(cls, b"".join(parts))
        mapping.path = path
        return mapping

    @property
    def size(self) -> int:
        return len(self)

    @property
    def cut(self) -> bool:
        return False
