# The contract of _store_body: the message store's record bodies as C reads them, shared by the Spark
# columns (_message_columns) and the store's recovery (_message_recovery). The layouts are
# record_format's: every number below is read from it when _store_body is imported.
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

# the record types of the message store's bodies, and their sizes and versions
cdef int TYPE_QUEUE_BINDING, TYPE_ADD_MESSAGE, TYPE_ADD_REF, TYPE_ACKNOWLEDGE_REF
cdef int TYPE_DELIVERY_COUNT, TYPE_SCHEDULED_TIME, TYPE_DUPLICATE_ID
cdef Py_ssize_t QUEUE_ID_BYTES, DELIVERY_COUNT_BYTES, SCHEDULED_TIME_BYTES, MESSAGE_HEAD_BYTES, QUEUE_HEAD_BYTES
cdef int MESSAGE_VERSION, MESSAGE_WITH_PRIORITY_VERSION, PRIORITY_DEFAULT, PRIORITY_MAX, QUEUE_VERSION, QUEUE_WITH_ARGUMENTS_VERSION, FLAG_DURABLE
cdef int ROUTING_CODE_MAX, QUEUE_ROUTING_MIN, QUEUE_ROUTING_MAX
cdef int TAG_NONE, TAG_STR, TAG_INT, TAG_FLOAT, TAG_FALSE, TAG_TRUE, TAG_BYTES
cdef tuple ROUTING_NAME_OF_CODE      # routing code -> its name (ROUTING_NAMES), None for 0 (none)


cdef inline uint16_t _u16(const uint8_t *p) noexcept nogil:
    return p[0] | (<uint16_t>p[1] << 8)


cdef inline uint32_t _u32(const uint8_t *p) noexcept nogil:
    return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline uint64_t _u64(const uint8_t *p) noexcept nogil:
    return _u32(p) | (<uint64_t>_u32(p + 4) << 32)


# inline here: every text of every body is checked, from the modules that cimport this one
cdef inline bint _utf8_valid(const uint8_t *s, Py_ssize_t n) noexcept nogil:
    """Strict UTF-8 as Python's decoder takes it: no overlong forms, no surrogates, nothing past U+10FFFF.
    The Unicode standard's table of well-formed sequences: the lead byte gives the length and the range
    of the second byte; every later byte is a continuation byte."""
    cdef Py_ssize_t i = 0, size, k
    cdef uint8_t c, low, high
    while i < n:
        c = s[i]
        if c < 0x80:
            i += 1
            continue
        if c < 0xC2 or c > 0xF4:
            return False
        low = 0x80
        high = 0xBF
        if c < 0xE0:
            size = 2
        elif c < 0xF0:
            size = 3
            if c == 0xE0:
                low = 0xA0          # below: an overlong form
            elif c == 0xED:
                high = 0x9F         # above: a surrogate
        else:
            size = 4
            if c == 0xF0:
                low = 0x90          # below: an overlong form
            elif c == 0xF4:
                high = 0x8F         # above: past U+10FFFF
        if i + size > n or s[i + 1] < low or s[i + 1] > high:
            return False
        for k in range(2, size):
            if (s[i + k] & 0xC0) != 0x80:
                return False
        i += size
    return True


# a growable byte buffer (the data of a string column, a column while recovery gathers it)
cdef struct Bytes:
    char *data
    Py_ssize_t size
    Py_ssize_t capacity


cdef int _reserve(Bytes *buf, Py_ssize_t extra) except -1
cdef void _free(Bytes *buf) noexcept
cdef bytes _take(Bytes *buf)


cdef inline int _append(Bytes *buf, const void *src, Py_ssize_t n) except -1:
    if buf.size + n > buf.capacity:
        _reserve(buf, n)
    memcpy(buf.data + buf.size, src, n)
    buf.size += n
    return 0


# where a string lies in a body; ``ok`` False when the body ends first or it is not UTF-8
cdef struct Text:
    const uint8_t *data
    uint32_t size
    bint ok


cdef inline bint _sized(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end, const uint8_t **data,
                        uint32_t *size) noexcept nogil:
    """A field of a u32 length and that many bytes at ``pos`` (a string, a bytes property): where its
    bytes lie, ``pos`` moved past it; False when the body ends first."""
    if pos[0] + 4 > end:
        return False
    size[0] = _u32(p + pos[0])
    if <uint64_t>size[0] > <uint64_t>(end - pos[0] - 4):
        return False
    data[0] = p + pos[0] + 4
    pos[0] += 4 + size[0]
    return True


cdef inline Text _text(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end) noexcept nogil:
    cdef Text t
    t.data = NULL
    t.size = 0
    t.ok = _sized(p, pos, end, &t.data, &t.size) and _utf8_valid(t.data, t.size)
    return t


cdef struct Property:
    const uint8_t *key
    uint16_t key_size
    uint8_t tag
    const uint8_t *value      # TAG_STR / TAG_BYTES: the bytes; TAG_INT / TAG_FLOAT: the 8 bytes
    uint32_t value_size


# where the fields of a message body (ADD_MESSAGE) lie
cdef struct MessageFields:
    int64_t expiration
    int priority                    # 0-9 (a version 1 body: the default)
    Text address
    Py_ssize_t body_at
    uint32_t body_size
    uint32_t property_count
    Py_ssize_t properties_at        # the first property, after the count


# each False when record_format would reject what it reads
cdef bint _property(Property *prop, const uint8_t *body, Py_ssize_t *pos, Py_ssize_t size) noexcept nogil
cdef bint _skip_properties(const uint8_t *body, Py_ssize_t *pos, Py_ssize_t size) noexcept nogil


# inline here: the store recovery calls it once a message, from another module
cdef inline bint _message_fields(const uint8_t *body, Py_ssize_t size, MessageFields *fields) noexcept nogil:
    """Check a message body as record_format.decode_message does and say where its fields lie;
    False when decode_message would reject it."""
    cdef Py_ssize_t pos = MESSAGE_HEAD_BYTES
    cdef uint32_t k
    cdef Property prop
    if size < MESSAGE_HEAD_BYTES or body[2] > ROUTING_CODE_MAX:
        return False
    if body[0] == MESSAGE_VERSION:
        fields.priority = PRIORITY_DEFAULT      # byte 3 is padding
    elif body[0] == MESSAGE_WITH_PRIORITY_VERSION and body[3] <= PRIORITY_MAX:
        fields.priority = body[3]
    else:
        return False
    if body[1] & ~FLAG_DURABLE:
        return False
    fields.expiration = <int64_t>_u64(body + 4)
    if fields.expiration < 0:
        return False
    fields.address = _text(body, &pos, size)
    if not fields.address.ok or pos + 4 > size:
        return False
    fields.body_size = _u32(body + pos)
    if <uint64_t>fields.body_size > <uint64_t>(size - pos - 4):
        return False
    fields.body_at = pos + 4
    pos += 4 + fields.body_size
    if pos + 4 > size:
        return False
    fields.property_count = _u32(body + pos)
    pos += 4
    fields.properties_at = pos
    # each property takes at least 3 bytes (name length, tag): a count past that is a damaged body
    if <uint64_t>fields.property_count * 3 > <uint64_t>(size - pos):
        return False
    for k in range(fields.property_count):
        if not _property(&prop, body, &pos, size):
            return False
    return pos == size
