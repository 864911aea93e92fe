"""Python twin of the compiled frame codec (pyx/journal_engine/_codec.pyx).

Same bytes, same checks; used when JOURNAL_ENGINE_IMPLEMENTATION=python and by the
parity tests. Layout: docs/internals/format.md.
"""
from __future__ import annotations

import struct

from ..limits import FRAME_ALIGNMENT_BYTES, FRAME_HEADER_SIZE_BYTES
from ..record_format import FRAME_HEADER, GROUP_BODY, GROUP_MEMBER, GROUP_MEMBER_KINDS, FrameCheck, FrameField, RecordKind

_POLY = 0x82F63B78
_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ _POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)
_TABLE = tuple(_TABLE)
_CRC = struct.Struct("<I")


def crc32c(data, crc: int = 0) -> int:
    """CRC32C of a bytes-like object, continuing from `crc`. Trailing zero bytes -- most of a journal
    file past its last frame, which a checkpoint checksums whole -- are applied in O(log n) steps."""
    data = bytes(data)
    used = len(data.rstrip(b"\0"))
    crc ^= 0xFFFFFFFF
    table = _TABLE
    for byte in data[:used]:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return _after_zeros(crc, len(data) - used) ^ 0xFFFFFFFF


def _gf2_times(matrix: list, vector: int) -> int:
    out, column = 0, 0
    while vector:
        if vector & 1:
            out ^= matrix[column]
        vector >>= 1
        column += 1
    return out


def _zero_byte_operators() -> list:
    """The CRC state's linear map over one zero byte, then over 2, 4, 8, ... zero bytes (squares)."""
    bit = [_POLY] + [1 << n for n in range(31)]     # one zero bit, reflected
    square = bit
    for _ in range(3):                               # 2, 4, 8 bits: a byte
        square = [_gf2_times(square, column) for column in square]
    operators = [square]
    for _ in range(63):
        square = [_gf2_times(square, column) for column in square]
        operators.append(square)
    return operators


_ZERO_BYTES = _zero_byte_operators()


def _after_zeros(state: int, count: int) -> int:
    """The CRC state (before the final inversion) after `count` zero bytes."""
    power = 0
    while count:
        if count & 1:
            state = _gf2_times(_ZERO_BYTES[power], state)
        count >>= 1
        power += 1
    return state


crc32c_software = crc32c


def crc32c_uses_hardware() -> bool:
    return False


def frame_size(body_len: int) -> int:
    return (FRAME_HEADER_SIZE_BYTES + body_len + FRAME_ALIGNMENT_BYTES - 1) & ~(FRAME_ALIGNMENT_BYTES - 1)


def encode_frame(kind: int, user_type: int, stamp: int, record_id: int, tx_id: int, body, flags: int = 0) -> bytes:
    body = bytes(body)
    size = frame_size(len(body))
    tail = FRAME_HEADER.pack(0, len(body), kind, user_type, flags, stamp, record_id, tx_id)[FrameField.BODY_LENGTH:] + body
    tail += bytes(size - FRAME_HEADER_SIZE_BYTES - len(body))
    return _CRC.pack(crc32c(tail[: FRAME_HEADER_SIZE_BYTES - FrameField.BODY_LENGTH + len(body)])) + tail


def encode_group_head(stamp: int, count: int, members: bytes) -> bytes:
    """The GROUP frame over `count` member frames whose bytes are `members`."""
    return encode_frame(RecordKind.GROUP, 0, stamp, 0, 0, GROUP_BODY.pack(count, len(members), crc32c(members), 0))


def encode_group(stamp: int, records) -> bytes:
    """A record group as bytes: its GROUP frame, then each ``(kind, user_type, record_id, body)`` as a
    member frame (for tools and tests; the journal writes groups in place)."""
    members = [encode_frame(kind, user_type, stamp, record_id, 0, body, GROUP_MEMBER)
               for kind, user_type, record_id, body in records]
    joined = b"".join(members)
    return encode_group_head(stamp, len(members), joined) + joined


def pad_frame(stamp: int, total: int) -> bytes:
    return encode_frame(RecordKind.PAD, 0, stamp, 0, 0, bytes(total - FRAME_HEADER_SIZE_BYTES))


def check_frame(buffer, pos: int, stamp: int) -> tuple[int, int]:
    """(check, size) for the frame at `pos`; check is a FrameCheck value."""
    limit = len(buffer)
    if pos + FRAME_HEADER_SIZE_BYTES > limit:
        return FrameCheck.ZERO, 0
    header = bytes(buffer[pos:pos + FRAME_HEADER_SIZE_BYTES])
    crc, body_len, kind, _user, flags, frame_stamp, _rid, _tx = FRAME_HEADER.unpack(header)
    if frame_stamp != stamp:
        return (FrameCheck.FOREIGN if any(header) else FrameCheck.ZERO), 0
    if kind < RecordKind.ADD or kind > RecordKind.GROUP or flags & ~0xFF:
        return FrameCheck.INVALID, 0
    if flags and (flags != GROUP_MEMBER or kind not in GROUP_MEMBER_KINDS):
        return FrameCheck.INVALID, 0
    size = frame_size(body_len)
    if body_len > limit - pos or pos + size > limit:
        return FrameCheck.INVALID, 0
    if crc != crc32c(buffer[pos + FrameField.BODY_LENGTH:pos + FRAME_HEADER_SIZE_BYTES + body_len]):
        return FrameCheck.INVALID, 0
    return FrameCheck.VALID, size


def is_group_member(buffer, pos: int) -> bool:
    """Whether the frame at `pos` (checked valid) is flagged as a member of a record group."""
    return buffer[pos + FrameField.FLAGS] == GROUP_MEMBER


def decode_header(buffer, pos: int) -> tuple[int, int, int, int, int, int]:
    """(body_len, kind, user_type, stamp, record_id, tx_id) of a frame already checked valid."""
    _crc, body_len, kind, user_type, _flags, stamp, record_id, tx_id = FRAME_HEADER.unpack_from(buffer, pos)
    return body_len, kind, user_type, stamp, record_id, tx_id
