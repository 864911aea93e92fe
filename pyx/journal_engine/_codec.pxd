# The frame codec shared by the compiled modules: CRC32C, frame encoding and
# single-frame validation. Layout and constants: docs/internals/format.md.
from libc.stdint cimport uint8_t, uint32_t, uint64_t

cdef extern from "crc32c_impl.h":
    void je_crc32c_init() noexcept nogil
    uint32_t je_crc32c(uint32_t crc, const unsigned char *p, size_t n) noexcept nogil
    uint32_t je_crc32c_software(uint32_t crc, const unsigned char *p, size_t n) noexcept nogil
    int je_crc32c_uses_hardware() noexcept nogil

cdef enum:
    FRAME_HEADER_SIZE = 32
    FRAME_ALIGNMENT = 8
    FILE_HEADER_SIZE = 64

# where each field of the frame header starts: record_format.FrameField (its home, the one statement of
# the layout), checked against these when _codec is imported. FLAGS is a u16: its high byte is always 0
cdef enum:
    FRAME_CRC_AT = 0
    FRAME_BODY_LENGTH_AT = 4
    FRAME_KIND_AT = 8
    FRAME_RECORD_TYPE_AT = 9
    FRAME_FLAGS_AT = 10
    FRAME_STAMP_AT = 12
    FRAME_RECORD_ID_AT = 16
    FRAME_TX_ID_AT = 24

cdef enum FrameKind:
    KIND_ADD = 11
    KIND_UPDATE = 12
    KIND_ADD_TX = 13
    KIND_UPDATE_TX = 14
    KIND_DELETE_TX = 15
    KIND_DELETE = 16
    KIND_PREPARE = 17
    KIND_COMMIT = 18
    KIND_ROLLBACK = 19
    KIND_PAD = 20
    KIND_GROUP = 21

# a record group (record_format.GROUP_MEMBER, GROUP_BODY): the member flag and the GROUP frame's body
cdef enum:
    GROUP_MEMBER = 1
    GROUP_BODY_SIZE = 16

# what validate_frame found at an offset
cdef enum FrameCheck:
    FRAME_VALID = 0
    FRAME_ZERO = 1        # an all-zero header: nothing was ever written here
    FRAME_FOREIGN = 2     # stamped for another file id: left over from a recycled file
    FRAME_INVALID = 3     # stamped for this file but damaged (bad length, kind or crc)

cdef inline Py_ssize_t frame_size(Py_ssize_t body_len) noexcept nogil:
    return (FRAME_HEADER_SIZE + body_len + FRAME_ALIGNMENT - 1) & ~(<Py_ssize_t>FRAME_ALIGNMENT - 1)

cdef Py_ssize_t write_frame(unsigned char *dst, uint8_t kind, uint8_t user_type, uint32_t stamp,
                            uint64_t record_id, uint64_t tx_id,
                            const unsigned char *body, Py_ssize_t body_len) noexcept nogil

cdef Py_ssize_t write_flagged_frame(unsigned char *dst, uint8_t kind, uint8_t flags, uint8_t user_type,
                                    uint32_t stamp, uint64_t record_id, uint64_t tx_id,
                                    const unsigned char *body, Py_ssize_t body_len) noexcept nogil

cdef Py_ssize_t write_group_head(unsigned char *dst, uint32_t stamp, uint32_t count,
                                 Py_ssize_t member_bytes) noexcept nogil

cdef Py_ssize_t write_pad(unsigned char *dst, uint32_t stamp, Py_ssize_t total) noexcept nogil

cdef FrameCheck validate_frame(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t limit,
                               uint32_t stamp, Py_ssize_t *size_out) noexcept nogil

cdef inline uint32_t load_u32(const unsigned char *p) noexcept nogil:
    return (<uint32_t>p[0]) | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)

cdef inline uint64_t load_u64(const unsigned char *p) noexcept nogil:
    return (<uint64_t>load_u32(p)) | (<uint64_t>load_u32(p + 4) << 32)

cdef inline void store_u32(unsigned char *p, uint32_t v) noexcept nogil:
    p[0] = v & 0xff; p[1] = (v >> 8) & 0xff; p[2] = (v >> 16) & 0xff; p[3] = (v >> 24) & 0xff

cdef inline void store_u64(unsigned char *p, uint64_t v) noexcept nogil:
    store_u32(p, <uint32_t>(v & 0xffffffffu)); store_u32(p + 4, <uint32_t>(v >> 32))


cdef inline bint is_group_member_kind(uint8_t kind) noexcept nogil:
    """Whether a frame of this kind may be a record group's member (record_format.GROUP_MEMBER_KINDS)."""
    return kind == KIND_ADD or kind == KIND_UPDATE or kind == KIND_DELETE
