"""Python twin of the compiled scan decoder and replay (pyx/journal_engine/_replay.pyx).

The rules are the table in docs/internals/recovery.md.
"""
from __future__ import annotations

import array
import os
import struct

from ..limits import FRAME_ALIGNMENT_BYTES, FRAME_HEADER_SIZE_BYTES
from .codec import check_frame, crc32c, decode_header, frame_size, is_group_member
from ..record_format import FRAME_HEADER, GROUP_BODY, GROUP_MEMBER, GROUP_MEMBER_KINDS, FrameCheck, FrameField, RecordKind
from .livemap import LiveMap

#: what a reader reports of damage (a FrameCheck other than VALID) followed by valid frames
#: Python cannot survive a SIGBUS: storage/journal/scan.py reads files into owned bytes for the twin, never maps them
GUARDS_MAPPED_READS = False

GAP_REASONS = {
    FrameCheck.ZERO: "unwritten gap followed by valid records",
    FrameCheck.FOREIGN: "bytes of another file id followed by valid records",
    FrameCheck.INVALID: "damaged frame (bad checksum, length or kind) followed by valid records",
}
_TX_KINDS = (RecordKind.ADD_TX, RecordKind.UPDATE_TX, RecordKind.DELETE_TX)

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


class RecordInfo:
    """A live record after replay: its add, then its updates in append order."""

    __slots__ = ("record_id", "record_type", "body", "_updates")

    def __init__(self, record_id: int, record_type: int, body: bytes, updates=None):
        self.record_id = record_id
        self.record_type = record_type
        self.body = body
        self._updates = list(updates) if updates else None

    @property
    def updates(self) -> list[tuple[int, bytes]]:
        if self._updates is None:
            self._updates = []
        return self._updates

    def __eq__(self, other):
        if not hasattr(other, "record_id") or not hasattr(other, "updates"):
            return NotImplemented
        return (self.record_id == other.record_id and self.record_type == other.record_type
                and self.body == other.body and self.updates == other.updates)

    def __repr__(self):
        return (f"RecordInfo(record_id={self.record_id}, record_type={self.record_type}, "
                f"body={self.body!r}, updates={self.updates!r})")

    def __reduce__(self):
        return (RecordInfo, (self.record_id, self.record_type, self.body, self.updates))


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


ROW_BITS = 32   # a location packs (file index << ROW_BITS) | row: where a record's body lies


class ReplayState:
    """Live records and open transactions, built file by file in replay order from the columns.

    Keeps every file's columns (``files``): a transaction's records and the twin's records are
    read from them by location.
    """

    def __init__(self, replaceable=(), expected: int = 0):
        """``expected`` (records at most) sizes the compiled core's tables; the twin's grow."""
        self.records: dict[int, RecordInfo] = {}
        self.transactions: dict[int, list] = {}
        self.corrupt: list[tuple[str, int, str]] = []
        self.anomalies: list[tuple[str, int, str]] = []
        self.frames_read = 0
        self.replaceable_updates = 0
        self.adds = 0
        self.live = LiveMap()      # record id -> bytes of its frames (add + updates)
        self.files: list[FrameColumns] = []
        self._replaceable = frozenset(replaceable)

    def replay_file(self, buffer, stamp: int, start: int, path):
        """Scan one file's bytes and replay it: :meth:`replay_columns` of :func:`scan_columns`."""
        return self.replay_columns(scan_columns(buffer, stamp, start), path)

    def replay_columns(self, cols: FrameColumns, path) -> tuple[int, int]:
        """Apply one file's rows; returns ``(end_offset, end_check)``."""
        file_index = len(self.files)
        self.frames_read += cols.groups_skipped
        self.files.append(cols)
        for row in range(cols.count):
            check = cols._check[row]
            if check:
                self.corrupt.append((path, cols._offset[row], GAP_REASONS[FrameCheck(check)]))
            else:
                self._apply(cols, row, (file_index << ROW_BITS) | row, path)
        return cols.end_offset, cols.end_check

    def body(self, location: int) -> bytes:
        """The body of the frame at a location (file index, row)."""
        return self.files[location >> ROW_BITS].body(location & ((1 << ROW_BITS) - 1))

    def _apply(self, cols: FrameColumns, row: int, location: int, path) -> None:
        kind, user_type, record_id, tx_id = cols._kind[row], cols._record_type[row], cols._record_id[row], cols._tx_id[row]
        offset, size = cols._offset[row], cols._size[row]
        self.frames_read += 1
        if kind == RecordKind.ADD:
            if record_id in self.records:
                self.anomalies.append((path, offset, f"add of record {record_id}, which is already live"))
            self.records[record_id] = RecordInfo(record_id, user_type, cols.body(row))
            self.live.put(record_id, size)
            self.adds += 1
        elif kind == RecordKind.UPDATE:
            rec = self.records.get(record_id)
            if rec is None:
                self.anomalies.append((path, offset, f"update of record {record_id}, which is not live"))
                return
            rec.updates.append((user_type, cols.body(row)))
            self.live.add_bytes(record_id, size)
            if user_type in self._replaceable:
                self.replaceable_updates += 1
        elif kind == RecordKind.DELETE:
            self.records.pop(record_id, None)
            self.live.remove(record_id)
        elif kind in _TX_KINDS:
            tx = self.transactions.setdefault(tx_id, [[], None, path, offset])
            tx[0].append((kind, record_id, user_type, location, size))
        elif kind == RecordKind.PREPARE:
            tx = self.transactions.setdefault(tx_id, [[], None, path, offset])
            body = cols.body(row)
            if len(body) < 4:   # the record count is missing: never written so
                self.corrupt.append((path, offset, f"transaction {tx_id} prepared with a {len(body)}-byte body, "
                                                   f"shorter than its record count; it is not returned"))
                del self.transactions[tx_id]
                return
            expected = struct.unpack_from("<I", body)[0]
            if expected != len(tx[0]):
                self.corrupt.append((path, offset, f"transaction {tx_id} prepared with {expected} records, "
                                                   f"{len(tx[0])} found; it is not returned"))
                del self.transactions[tx_id]
                return
            tx[1] = body[4:]
            tx[2] = path
            tx[3] = offset
        elif kind == RecordKind.COMMIT:
            tx = self.transactions.pop(tx_id, None)
            if tx is None:
                return
            body = cols.body(row)
            expected = struct.unpack_from("<I", body)[0] if len(body) >= 4 else 0
            if expected != len(tx[0]):
                self.corrupt.append((path, offset, f"transaction {tx_id} committed with {expected} records, "
                                                   f"{len(tx[0])} found; the transaction is discarded"))
                return
            self.apply_ops(tx[0], path, offset)
        elif kind == RecordKind.ROLLBACK:
            self.transactions.pop(tx_id, None)

    def apply_ops(self, ops, path=None, offset: int = 0) -> None:
        """Apply a committed transaction's ``(kind, record_id, user_type, location, frame_bytes)`` in order."""
        for kind, record_id, user_type, location, size in ops:
            if kind == RecordKind.ADD_TX:
                self.records[record_id] = RecordInfo(record_id, user_type, self.body(location))
                self.live.put(record_id, size)
                self.adds += 1
            elif kind == RecordKind.UPDATE_TX:
                rec = self.records.get(record_id)
                if rec is None:
                    self.anomalies.append((path, offset, f"transactional update of record {record_id}, "
                                                         f"which is not live"))
                    continue
                rec.updates.append((user_type, self.body(location)))
                self.live.add_bytes(record_id, size)
                if user_type in self._replaceable:
                    self.replaceable_updates += 1
            else:
                self.records.pop(record_id, None)
                self.live.remove(record_id)


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


def _image_slices(count: int) -> list:
    """(attribute, typecode, byte start, rows) of each column in the image of ``count`` rows: the
    compiled core's layout (int64/uint64 columns first, then bytes; 43 bytes a row and 8 more)."""
    return [("_offset", "q", 0, count), ("_size", "q", 8 * count, count),
            ("_body_offsets", "q", 16 * count, count + 1), ("_record_id", "Q", 24 * count + 8, count),
            ("_tx_id", "Q", 32 * count + 8, count), ("_check", "B", 40 * count + 8, count),
            ("_kind", "B", 41 * count + 8, count), ("_record_type", "B", 42 * count + 8, count)]


def image_size(count: int) -> int:
    """The bytes of the image of ``count`` rows' columns."""
    return 43 * count + 8


def columns_image(cols: FrameColumns) -> bytes:
    """One file's columns as the bytes a checkpoint holds: their image."""
    return b"".join(getattr(cols, name).tobytes() for name, _code, _at, _rows in _image_slices(cols.count))


def file_checksum(data) -> int:
    """The CRC32C of every byte of a file's contents (the twin reads files into memory)."""
    return crc32c(data)


def _image_fits(cols: FrameColumns, start: int, end_offset: int, data_size: int) -> bool:
    """Every row within the file and in order, and each body within its frame (the compiled check
    avoids any sum a forged field could overflow; Python's integers cannot, so the tests read alike)."""
    if not 0 <= start <= end_offset <= data_size or cols._body_offsets[0] != 0:
        return False
    at = start
    for row in range(cols.count):
        offset, size, check = cols._offset[row], cols._size[row], cols._check[row]
        if offset < at or size <= 0 or size > end_offset or offset > end_offset - size:
            return False
        if cols._body_offsets[row + 1] < cols._body_offsets[row] or check > FrameCheck.INVALID:
            return False
        body = cols._body_offsets[row + 1] - cols._body_offsets[row]
        if check == FrameCheck.VALID and (size < FRAME_HEADER_SIZE_BYTES or body > size - FRAME_HEADER_SIZE_BYTES):
            return False
        if check != FrameCheck.VALID and body:
            return False
        at = offset + size
    return True


def _header_is_row(data, cols: FrameColumns, row: int, stamp: int) -> bool:
    """Whether the frame header where a valid row lies carries this file's stamp and the row's size,
    kind, type, ids and body length (the frame's bytes are vouched for by the file's CRC32C)."""
    offset, size = cols._offset[row], cols._size[row]
    if size < FRAME_HEADER_SIZE_BYTES:
        return False
    body_len, kind, user_type, frame_stamp, record_id, tx_id = decode_header(data, offset)
    body = cols._body_offsets[row + 1] - cols._body_offsets[row]
    return ((frame_stamp, kind, user_type, record_id, tx_id, body_len, frame_size(body_len))
            == (stamp, cols._kind[row], cols._record_type[row], cols._record_id[row], cols._tx_id[row], body, size))


def _damage_is_row(data, cols: FrameColumns, row: int, stamp: int) -> bool:
    """Whether a damaged row is what a decode finds there: no valid frame at its start (but a member or
    a torn group's head) and none that could start a reading again before its end."""
    offset = cols._offset[row]
    check, _size = check_frame(data, offset, stamp)
    if (check == FrameCheck.VALID and not is_group_member(data, offset)
            and data[offset + FrameField.KIND] != RecordKind.GROUP):
        return False
    return _next_valid(data, offset + FRAME_ALIGNMENT_BYTES, stamp)[0] == offset + cols._size[row]


def _gap_groups(data, pos: int, until: int, stamp: int) -> int:
    """How many valid GROUP frames fill [pos, until) where no row lies, or -1 when anything else does."""
    groups = 0
    while pos < until:
        check, size = check_frame(data, pos, stamp)
        if check != FrameCheck.VALID or data[pos + FrameField.KIND] != RecordKind.GROUP or size > until - pos:
            return -1
        pos += size
        groups += 1
    return groups


def _rows_are_the_file(data, cols: FrameColumns, start: int, end_offset: int, groups_skipped: int,
                       stamp: int) -> bool:
    """Every row checked against the file it describes, as the compiled check does."""
    pos, groups = start, 0
    for row in range(cols.count):
        found = _gap_groups(data, pos, cols._offset[row], stamp)
        if found < 0:
            return False
        groups += found
        if cols._check[row] == FrameCheck.VALID:
            if not _header_is_row(data, cols, row, stamp):
                return False
        elif not _damage_is_row(data, cols, row, stamp):
            return False
        pos = cols._offset[row] + cols._size[row]
    found = _gap_groups(data, pos, end_offset, stamp)
    return found >= 0 and groups + found == groups_skipped


def image_is_sound(image, count: int, start: int, end_offset: int, image_crc: int) -> bool:
    """Whether an image CRC32Cs to ``image_crc`` and its rows lie in order within [start, end_offset)
    (twin of the compiled one)."""
    image = memoryview(image)
    if count < 0 or len(image) != image_size(count) or crc32c(image) != image_crc:
        return False
    return _image_fits(_columns_of_image(image, count), start, end_offset, end_offset)


def _columns_of_image(image, count: int) -> FrameColumns:
    """The columns an image holds, copied into arrays."""
    cols = FrameColumns()
    for name, code, at, rows in _image_slices(count):
        column = array.array(code)
        column.frombytes(image[at:at + rows * column.itemsize])
        setattr(cols, name, column)
    cols.count = count
    return cols


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


def checkpointed_columns(data, image, count: int, start: int, end_offset: int, end_check: int,
                         groups_skipped: int, data_crc: int, image_crc: int, stamp: int,
                         mapping: CheckpointMapping | None = None) -> FrameColumns | None:
    """The FrameColumns a scan of ``data`` (the file's bytes) with ``groups=False`` would return, from
    the image of them a checkpoint saved, or None when the file's bytes or the image no longer CRC32C
    to what was saved, a row would lie outside the file, or a row is not what the file holds where it
    lies (twin of the compiled one; the bodies are copied out of ``data``, as the twin's scan copies
    them)."""
    if not FrameCheck.VALID <= end_check <= FrameCheck.INVALID or count < 0 or groups_skipped < 0:
        return None
    image = memoryview(image)
    if len(image) != image_size(count) or crc32c(image) != image_crc or crc32c(data) != data_crc:
        return None
    cols = _columns_of_image(image, count)
    if (not _image_fits(cols, start, end_offset, len(data))
            or not _rows_are_the_file(data, cols, start, end_offset, groups_skipped, stamp)):
        return None
    cols.bodies = b"".join(bytes(data[offset + FRAME_HEADER_SIZE_BYTES:offset + FRAME_HEADER_SIZE_BYTES + length])
                           for offset, length in zip(cols._offset, (cols._body_offsets[row + 1] - cols._body_offsets[row]
                                                                    for row in range(count))))
    cols.end_offset, cols.end_check, cols.groups_skipped = end_offset, end_check, groups_skipped
    return cols
