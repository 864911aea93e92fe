"""Python twin of the compiled checkpoint images (pyx/journal_engine/_image.pyx): one file's columns as a
checkpoint holds them, and the checks that they still describe the file.
"""
from __future__ import annotations

import array

from ..limits import FRAME_ALIGNMENT_BYTES, FRAME_HEADER_SIZE_BYTES
from .codec import check_frame, crc32c, decode_header, frame_size, is_group_member
from ..record_format import FrameCheck, FrameField, RecordKind
from .scan import CheckpointMapping, FrameColumns, _next_valid


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
