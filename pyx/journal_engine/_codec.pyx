# cython: language_level=3
"""Compiled frame codec: CRC32C, frame encoding and validation.

The Python twin is ``journal_engine._twin.codec``; both produce the same bytes
(tests/core/test_parity.py). The frame layout is record_format.FRAME_HEADER / FrameField
(docs/internals/format.md); _codec.pxd holds its offsets as constants, checked below.
"""
from libc.string cimport memcpy, memset
from libc.stdint cimport uint8_t, uint32_t, uint64_t

je_crc32c_init()

from journal_engine import limits as _limits, record_format as _format

# the constants of _codec.pxd are compiled in; the record format's home must agree with them
_format.check_compiled("journal_engine._codec", {
    "frame kinds": ({"ADD": KIND_ADD, "UPDATE": KIND_UPDATE, "ADD_TX": KIND_ADD_TX, "UPDATE_TX": KIND_UPDATE_TX,
                     "DELETE_TX": KIND_DELETE_TX, "DELETE": KIND_DELETE, "PREPARE": KIND_PREPARE,
                     "COMMIT": KIND_COMMIT, "ROLLBACK": KIND_ROLLBACK, "PAD": KIND_PAD, "GROUP": KIND_GROUP},
                    {kind.name: int(kind) for kind in _format.RecordKind}),
    "frame checks": ({"VALID": FRAME_VALID, "ZERO": FRAME_ZERO, "FOREIGN": FRAME_FOREIGN, "INVALID": FRAME_INVALID},
                     {check.name: int(check) for check in _format.FrameCheck}),
    "frame header fields": ([FRAME_CRC_AT, FRAME_BODY_LENGTH_AT, FRAME_KIND_AT, FRAME_RECORD_TYPE_AT, FRAME_FLAGS_AT,
                             FRAME_STAMP_AT, FRAME_RECORD_ID_AT, FRAME_TX_ID_AT], [int(f) for f in _format.FrameField]),
    "record group": ((GROUP_MEMBER, GROUP_BODY_SIZE), (_format.GROUP_MEMBER, _format.GROUP_BODY.size)),
    "group member kinds": ({k for k in range(256) if is_group_member_kind(k)},
                           {int(k) for k in _format.GROUP_MEMBER_KINDS}),
    "frame limits": ((FRAME_HEADER_SIZE, FRAME_ALIGNMENT, FILE_HEADER_SIZE),
                     (_limits.FRAME_HEADER_SIZE_BYTES, _limits.FRAME_ALIGNMENT_BYTES, _limits.FILE_HEADER_SIZE_BYTES)),
})


cdef Py_ssize_t write_frame(unsigned char *dst, uint8_t kind, uint8_t user_type, uint32_t stamp,
                            uint64_t record_id, uint64_t tx_id,
                            const unsigned char *body, Py_ssize_t body_len) noexcept nogil:
    return write_flagged_frame(dst, kind, 0, user_type, stamp, record_id, tx_id, body, body_len)


cdef Py_ssize_t write_flagged_frame(unsigned char *dst, uint8_t kind, uint8_t flags, uint8_t user_type,
                                    uint32_t stamp, uint64_t record_id, uint64_t tx_id,
                                    const unsigned char *body, Py_ssize_t body_len) noexcept nogil:
    cdef Py_ssize_t size = frame_size(body_len)
    store_u32(dst + FRAME_BODY_LENGTH_AT, <uint32_t>body_len)
    dst[FRAME_KIND_AT] = kind
    dst[FRAME_RECORD_TYPE_AT] = user_type
    dst[FRAME_FLAGS_AT] = flags
    dst[FRAME_FLAGS_AT + 1] = 0
    store_u32(dst + FRAME_STAMP_AT, stamp)
    store_u64(dst + FRAME_RECORD_ID_AT, record_id)
    store_u64(dst + FRAME_TX_ID_AT, tx_id)
    if body_len and body != dst + FRAME_HEADER_SIZE:
        memcpy(dst + FRAME_HEADER_SIZE, body, body_len)
    if size > FRAME_HEADER_SIZE + body_len:
        memset(dst + FRAME_HEADER_SIZE + body_len, 0, size - FRAME_HEADER_SIZE - body_len)
    store_u32(dst + FRAME_CRC_AT, je_crc32c(0, dst + FRAME_BODY_LENGTH_AT, FRAME_HEADER_SIZE - FRAME_BODY_LENGTH_AT + body_len))
    return size


cdef Py_ssize_t write_group_head(unsigned char *dst, uint32_t stamp, uint32_t count,
                                 Py_ssize_t member_bytes) noexcept nogil:
    """The GROUP frame at `dst` over the `count` member frames written right after it
    (`member_bytes` of them, already in place): their number, length and CRC32C."""
    cdef unsigned char *body = dst + FRAME_HEADER_SIZE
    cdef Py_ssize_t head = frame_size(GROUP_BODY_SIZE)
    store_u32(body, count)
    store_u32(body + 4, <uint32_t>member_bytes)
    store_u32(body + 8, je_crc32c(0, dst + head, member_bytes))
    store_u32(body + 12, 0)
    return write_frame(dst, KIND_GROUP, 0, stamp, 0, 0, body, GROUP_BODY_SIZE)


cdef Py_ssize_t write_pad(unsigned char *dst, uint32_t stamp, Py_ssize_t total) noexcept nogil:
    """A PAD frame of exactly `total` bytes (a multiple of 8, at least 32)."""
    memset(dst + FRAME_HEADER_SIZE, 0, total - FRAME_HEADER_SIZE)
    return write_frame(dst, KIND_PAD, 0, stamp, 0, 0, dst + FRAME_HEADER_SIZE, total - FRAME_HEADER_SIZE)


cdef FrameCheck validate_frame(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t limit,
                               uint32_t stamp, Py_ssize_t *size_out) noexcept nogil:
    cdef const unsigned char *p = buf + pos
    cdef uint32_t body_len
    cdef Py_ssize_t size
    cdef int i
    if pos + FRAME_HEADER_SIZE > limit:
        return FRAME_ZERO
    if load_u32(p + FRAME_STAMP_AT) != stamp:
        for i in range(FRAME_HEADER_SIZE):
            if p[i]:
                return FRAME_FOREIGN
        return FRAME_ZERO
    body_len = load_u32(p + FRAME_BODY_LENGTH_AT)
    if p[FRAME_KIND_AT] < KIND_ADD or p[FRAME_KIND_AT] > KIND_GROUP or p[FRAME_FLAGS_AT + 1]:
        return FRAME_INVALID
    if p[FRAME_FLAGS_AT] and (p[FRAME_FLAGS_AT] != GROUP_MEMBER or not is_group_member_kind(p[FRAME_KIND_AT])):
        return FRAME_INVALID
    size = frame_size(body_len)
    if body_len > <uint32_t>(limit - pos) or pos + size > limit:
        return FRAME_INVALID
    if load_u32(p + FRAME_CRC_AT) != je_crc32c(0, p + FRAME_BODY_LENGTH_AT, FRAME_HEADER_SIZE - FRAME_BODY_LENGTH_AT + body_len):
        return FRAME_INVALID
    size_out[0] = size
    return FRAME_VALID


def crc32c(data, uint32_t crc=0):
    """CRC32C of a bytes-like object, continuing from `crc`."""
    cdef const unsigned char[::1] view = memoryview(data).cast("B")
    if view.shape[0] == 0:
        return je_crc32c(crc, NULL, 0)
    return je_crc32c(crc, &view[0], view.shape[0])


def crc32c_software(data, uint32_t crc=0):
    """The table-driven path, for tests that compare it with the hardware path."""
    cdef const unsigned char[::1] view = memoryview(data).cast("B")
    if view.shape[0] == 0:
        return je_crc32c_software(crc, NULL, 0)
    return je_crc32c_software(crc, &view[0], view.shape[0])


def crc32c_uses_hardware():
    return bool(je_crc32c_uses_hardware())


def encode_frame(int kind, int user_type, uint32_t stamp, uint64_t record_id, uint64_t tx_id, body):
    """One frame as bytes (for tools and tests; the journal writes in place)."""
    cdef const unsigned char[::1] view = memoryview(body).cast("B")
    cdef Py_ssize_t n = view.shape[0]
    cdef bytearray out = bytearray(frame_size(n))
    cdef unsigned char *dst = out
    write_frame(dst, <uint8_t>kind, <uint8_t>user_type, stamp, record_id, tx_id,
                &view[0] if n else <unsigned char *>dst, n)
    return bytes(out)


def encode_group(uint32_t stamp, records):
    """A record group as bytes: its GROUP frame, then each ``(kind, user_type, record_id, body)`` as a
    member frame (for tools and tests; the journal writes groups in place)."""
    cdef list members = [(kind, user_type, record_id, bytes(body)) for kind, user_type, record_id, body in records]
    cdef Py_ssize_t head = frame_size(GROUP_BODY_SIZE), total = head, pos
    cdef bytes body_bytes
    for member in members:
        total += frame_size(len(member[3]))
    cdef bytearray out = bytearray(total)
    cdef unsigned char *dst = out
    pos = head
    for kind, user_type, record_id, body_bytes in members:
        pos += write_flagged_frame(dst + pos, <uint8_t>kind, GROUP_MEMBER, <uint8_t>user_type, stamp, record_id, 0,
                                   <const unsigned char *>body_bytes, len(body_bytes))
    write_group_head(dst, stamp, <uint32_t>len(members), total - head)
    return bytes(out)


def check_frame(buffer, Py_ssize_t pos, uint32_t stamp):
    """(check, size) for the frame at `pos`; check is a FrameCheck value."""
    cdef const unsigned char[::1] view = memoryview(buffer).cast("B")
    cdef Py_ssize_t size = 0
    cdef FrameCheck result
    if view.shape[0] == 0:
        return FRAME_ZERO, 0
    result = validate_frame(&view[0], pos, view.shape[0], stamp, &size)
    return <int>result, size
