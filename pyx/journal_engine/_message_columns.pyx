# cython: language_level=3
"""Compiled batch decoder: the message store's record bodies, many at once, into columns.

The Spark data source (journal_engine.spark) reads a journal file's frames as columns (the scan
decoder's FrameColumns) and needs the message store's fields of each row — address, queue id,
delivery count, scheduled time, expiration, durable, properties — as Arrow buffers too. Decoding
them one body at a time through record_format's decoders makes a Python object per field; this
module walks every body of a batch in C and fills the buffers Arrow wraps without copying
(fixed-width values with a validity bitmap; strings as int32 offsets + bytes, Arrow's string
layout, which Spark takes; properties as the int32 offsets, keys and values of a map<string, string>).

It accepts exactly the bodies record_format's decoders accept. A body they reject is not decoded
here: its row is listed in ``rejected`` and its fields stay null, and the caller asks record_format
for the error (the one text users see). The layouts are record_format's: the record types, versions,
flags, fixed body sizes, property tags and head sizes are read from it at import (the head layouts
are checked against the struct formats compiled in). The twin is journal_engine._twin.message_columns;
tests/store/test_message_columns.py keeps them equal.

Property values become text, one rule for every type: a str as it is, an int in decimal, a float
as Python's repr, true / false, bytes in hex, None as a null value.
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memcmp, memcpy, memmove, memset

from cpython cimport array
import array

from collections.abc import KeysView, Mapping

import journal_engine.record_format as _format
from journal_engine._replay import RecordInfo, record_columns as _record_columns
from journal_engine._livemap cimport LiveMap
from journal_engine.errors import CorruptRecordError, FileChangedError
from journal_engine.limits import ONE_QUEUE_ID_MAX as _ONE_QUEUE_ID_MAX

cdef extern from *:
    void __builtin_prefetch(const void *addr) noexcept nogil

DEF BODY_PREFETCH_AHEAD = 4     # decode_messages_fields: bodies asked for ahead of the one read
DEF CACHE_LINE_BYTES = 64

cdef extern from "bus_guard.h":
    int JE_BUS_FAULT
    int je_bus_install()
    int je_bus_guarded_copy(void *dst, const void *src, size_t n) nogil
    int je_bus_guarded(int (*fn)(void *) noexcept nogil, void *arg) nogil

je_bus_install()    # the recovery's reads of bodies left in mapped journal files are guarded (below)

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(object op)
    char *PyOS_double_to_string(double val, char format_code, int precision, int flags, int *ptype) except NULL
    int Py_DTSF_ADD_DOT_0

# the layouts compiled into the parsers below; record_format is their home
_format.check_compiled("journal_engine._message_columns", {
    "message head": ("<BBBxq", _format.MESSAGE_HEAD.format), "queue head": ("<BBBx", _format.QUEUE_HEAD.format)})

cdef uint64_t ONE_QUEUE_ID_MAX = _ONE_QUEUE_ID_MAX
cdef int KIND_ADD = _format.RecordKind.ADD
cdef int KIND_UPDATE = _format.RecordKind.UPDATE
cdef int KIND_ADD_TX = _format.RecordKind.ADD_TX
cdef int KIND_UPDATE_TX = _format.RecordKind.UPDATE_TX
cdef int TYPE_QUEUE_BINDING = _format.RecordType.QUEUE_BINDING_RECORD
cdef int TYPE_ADD_MESSAGE = _format.RecordType.ADD_MESSAGE
cdef int TYPE_ADD_REF = _format.RecordType.ADD_REF
cdef int TYPE_ACKNOWLEDGE_REF = _format.RecordType.ACKNOWLEDGE_REF
cdef int TYPE_DELIVERY_COUNT = _format.RecordType.UPDATE_DELIVERY_COUNT
cdef int TYPE_SCHEDULED_TIME = _format.RecordType.SET_SCHEDULED_DELIVERY_TIME
cdef Py_ssize_t QUEUE_ID_BYTES = len(_format.encode_queue_id(0))
cdef Py_ssize_t DELIVERY_COUNT_BYTES = _format.DELIVERY_COUNT_BODY_BYTES
cdef Py_ssize_t SCHEDULED_TIME_BYTES = _format.SCHEDULED_TIME_BODY_BYTES
cdef Py_ssize_t MESSAGE_HEAD_BYTES = _format.MESSAGE_HEAD.size
cdef Py_ssize_t QUEUE_HEAD_BYTES = _format.QUEUE_HEAD.size
cdef int MESSAGE_VERSION = _format.MESSAGE_FORMAT_VERSION
cdef int QUEUE_VERSION = _format.QUEUE_FORMAT_VERSION
cdef int QUEUE_WITH_ARGUMENTS_VERSION = _format.QUEUE_WITH_ARGUMENTS_FORMAT_VERSION
cdef int FLAG_DURABLE = _format.FLAG_DURABLE
cdef int ROUTING_CODE_MAX = max(_format.ROUTING_TYPES.values())
cdef int QUEUE_ROUTING_MIN = min(_format.ROUTING_TYPES[name] for name in _format.QUEUE_ROUTING_TYPES)
cdef int QUEUE_ROUTING_MAX = max(_format.ROUTING_TYPES[name] for name in _format.QUEUE_ROUTING_TYPES)
cdef int TAG_NONE = _format.PropertyTag.NONE
cdef int TAG_STR = _format.PropertyTag.STR
cdef int TAG_INT = _format.PropertyTag.INT
cdef int TAG_FLOAT = _format.PropertyTag.FLOAT
cdef int TAG_FALSE = _format.PropertyTag.FALSE
cdef int TAG_TRUE = _format.PropertyTag.TRUE
cdef int TAG_BYTES = _format.PropertyTag.BYTES

#: routing type codes as the columns give them (record_format.ROUTING_TYPES; 0 is "none": a null)
ROUTING_NAMES = {code: name for name, code in _format.ROUTING_TYPES.items() if name is not None}
cdef tuple _ROUTING_NAME = tuple(ROUTING_NAMES.get(code) for code in range(ROUTING_CODE_MAX + 1))

cdef Py_ssize_t TEXT_BYTES_MAX = 0x7FFFFFFF   # Arrow's string offsets are int32
cdef const char *HEX_DIGITS = b"0123456789abcdef"


cdef inline uint16_t _u16(const uint8_t *p) noexcept nogil:
    return p[0] | (<uint16_t>p[1] << 8)


cdef inline uint32_t _u32(const uint8_t *p) noexcept nogil:
    return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline uint64_t _u64(const uint8_t *p) noexcept nogil:
    return _u32(p) | (<uint64_t>_u32(p + 4) << 32)


cdef inline Py_ssize_t _decimal(char *out, int64_t value) noexcept nogil:
    """``value`` in decimal (as Python's str of an int) into ``out`` (20 bytes at least); its length."""
    cdef char digits[20]
    cdef Py_ssize_t n = 0, k = 0
    cdef uint64_t magnitude = <uint64_t>value
    if value < 0:
        magnitude = <uint64_t>0 - magnitude
        out[0] = b'-'
        k = 1
    while True:
        digits[n] = <char>(48 + magnitude % 10)
        n += 1
        magnitude //= 10
        if magnitude == 0:
            break
    while n:
        n -= 1
        out[k] = digits[n]
        k += 1
    return k


cdef bint _utf8_valid(const uint8_t *s, Py_ssize_t n) noexcept nogil:
    """Strict UTF-8 as Python's decoder takes it: no overlong forms, no surrogates, nothing past U+10FFFF."""
    cdef Py_ssize_t i = 0
    cdef uint8_t c, c1
    while i < n:
        c = s[i]
        if c < 0x80:
            i += 1
            continue
        if c < 0xC2:
            return False
        if c < 0xE0:
            if i + 1 >= n or (s[i + 1] & 0xC0) != 0x80:
                return False
            i += 2
            continue
        if c < 0xF0:
            if i + 2 >= n:
                return False
            c1 = s[i + 1]
            if (c1 & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80:
                return False
            if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 >= 0xA0):
                return False
            i += 3
            continue
        if c < 0xF5:
            if i + 3 >= n:
                return False
            c1 = s[i + 1]
            if (c1 & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80 or (s[i + 3] & 0xC0) != 0x80:
                return False
            if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 >= 0x90):
                return False
            i += 4
            continue
        return False
    return True


# a growable byte buffer (the data of a string column)
cdef struct Bytes:
    char *data
    Py_ssize_t size
    Py_ssize_t capacity


cdef int _reserve(Bytes *buf, Py_ssize_t extra) except -1:
    cdef Py_ssize_t wanted = buf.size + extra
    cdef Py_ssize_t capacity = buf.capacity if buf.capacity else 256
    cdef char *grown
    if wanted <= buf.capacity:
        return 0
    while capacity < wanted:
        capacity *= 2
    grown = <char *>PyMem_Realloc(buf.data, capacity)
    if grown == NULL:
        raise MemoryError()
    buf.data = grown
    buf.capacity = capacity
    return 0


cdef inline int _append(Bytes *buf, const void *src, Py_ssize_t n) except -1:
    if buf.size + n > buf.capacity:
        _reserve(buf, n)
    memcpy(buf.data + buf.size, src, n)
    buf.size += n
    return 0


cdef void _free(Bytes *buf) noexcept:
    PyMem_Free(buf.data)
    buf.data = NULL
    buf.size = buf.capacity = 0


cdef bytes _take(Bytes *buf):
    cdef bytes out = PyBytes_FromStringAndSize(buf.data, buf.size) if buf.size else b""
    _free(buf)
    return out


cdef const uint8_t *_address(object buffer) except NULL:
    """The first byte of a buffer of the journal's columns: owned bytes, or a mapped file (a
    MappedFile or a Body view, whose memory stays where it is while the object lives)."""
    cdef Py_buffer view
    cdef const uint8_t *p
    if type(buffer) is bytes:
        return <const uint8_t *>PyBytes_AS_STRING(buffer)
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    p = <const uint8_t *>view.buf
    PyBuffer_Release(&view)
    return p if p != NULL else <const uint8_t *>b""


cdef object _cut_under_read(object buffer):
    """What a read of a body meets when the guard catches a cut: FileChangedError naming the file."""
    return FileChangedError("a journal file was cut short while the message store read a body from it",
                            path=getattr(buffer, "path", None),
                            hint="another process truncated the message journal; stop it, then open the "
                                 "store again")


cdef int _read_guarded(void *dst, const uint8_t *src, Py_ssize_t n, object buffer) except -1:
    """Copy ``n`` bytes of a body out of the journal's buffers under the SIGBUS guard: a mapped file
    another process cut short is a FileChangedError naming it, never a signal."""
    if n > 0 and je_bus_guarded_copy(dst, src, <size_t>n) == JE_BUS_FAULT:
        raise _cut_under_read(buffer)
    return 0


cdef struct FieldsRead:
    const uint8_t *body
    Py_ssize_t size
    MessageFields *fields
    bint ok


cdef int _read_fields(void *arg) noexcept nogil:
    cdef FieldsRead *read = <FieldsRead *>arg
    read.ok = _message_fields(read.body, read.size, read.fields)
    return 0


cdef bint _message_fields_guarded(const uint8_t *body, Py_ssize_t size, MessageFields *fields,
                                  object buffer) except -1:
    """_message_fields of a body where it lies (a mapped file too), under the SIGBUS guard: the parse
    reads the head, the address and the properties, not the payload a copy would move. The Text
    fields point into ``body``: read them under a guard too."""
    cdef FieldsRead read
    read.body = body
    read.size = size
    read.fields = fields
    read.ok = False
    if size > 0 and je_bus_guarded(_read_fields, &read) == JE_BUS_FAULT:
        raise _cut_under_read(buffer)
    return read.ok


cdef const uint8_t *_body_copy(Bytes *scratch, const uint8_t *src, Py_ssize_t n, object buffer) except NULL:
    """A body copied into ``scratch`` (grown as needed, reused): what the parsers read, so that no
    parse touches a mapped page outside the guard."""
    scratch.size = 0
    _reserve(scratch, n + 1)
    _read_guarded(scratch.data, src, n, buffer)
    return <const uint8_t *>scratch.data


cdef inline void _set_bit(uint8_t *bitmap, Py_ssize_t i) noexcept nogil:
    bitmap[i >> 3] |= <uint8_t>(1 << (i & 7))


cdef bytes _zeros(Py_ssize_t n):
    cdef bytes out = PyBytes_FromStringAndSize(NULL, n)
    memset(PyBytes_AS_STRING(out), 0, n)
    return out


# where a string lies in a body; ``ok`` False when the body ends first or it is not UTF-8
cdef struct Text:
    const uint8_t *data
    uint32_t size
    bint ok


cdef inline Text _text(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end) noexcept nogil:
    cdef Text t
    t.ok = False
    t.data = NULL
    t.size = 0
    if pos[0] + 4 > end:
        return t
    t.size = _u32(p + pos[0])
    if <uint64_t>t.size > <uint64_t>(end - pos[0] - 4):
        return t
    t.data = p + pos[0] + 4
    pos[0] += 4 + t.size
    t.ok = _utf8_valid(t.data, t.size)
    return t


cdef struct Property:
    const uint8_t *key
    uint16_t key_size
    uint8_t tag
    const uint8_t *value      # TAG_STR / TAG_BYTES: the bytes; TAG_INT / TAG_FLOAT: the 8 bytes
    uint32_t value_size


cdef bint _property(Property *prop, const uint8_t *body, Py_ssize_t *pos, Py_ssize_t size) noexcept nogil:
    """Read one property at ``pos`` as record_format reads it; False when it would reject it."""
    cdef Text text
    if pos[0] + 2 > size:
        return False
    prop.key_size = _u16(body + pos[0])
    pos[0] += 2
    if prop.key_size > size - pos[0]:
        return False
    prop.key = body + pos[0]
    pos[0] += prop.key_size
    if not _utf8_valid(prop.key, prop.key_size) or pos[0] + 1 > size:
        return False
    prop.tag = body[pos[0]]
    pos[0] += 1
    prop.value = NULL
    prop.value_size = 0
    if prop.tag == TAG_NONE or prop.tag == TAG_TRUE or prop.tag == TAG_FALSE:
        return True
    if prop.tag == TAG_INT or prop.tag == TAG_FLOAT:
        if pos[0] + 8 > size:
            return False
        prop.value = body + pos[0]
        prop.value_size = 8
        pos[0] += 8
        return True
    if prop.tag == TAG_STR:
        text = _text(body, pos, size)
        prop.value = text.data
        prop.value_size = text.size
        return text.ok
    if prop.tag == TAG_BYTES:
        if pos[0] + 4 > size:
            return False
        prop.value_size = _u32(body + pos[0])
        if <uint64_t>prop.value_size > <uint64_t>(size - pos[0] - 4):
            return False
        prop.value = body + pos[0] + 4
        pos[0] += 4 + prop.value_size
        return True
    return False


cdef bint _skip_properties(const uint8_t *body, Py_ssize_t *pos, Py_ssize_t size) noexcept nogil:
    """Read past a property map (a count, then the properties), checking it as record_format does."""
    cdef Property prop
    cdef uint32_t count, k
    if pos[0] + 4 > size:
        return False
    count = _u32(body + pos[0])
    pos[0] += 4
    for k in range(count):
        if not _property(&prop, body, pos, size):
            return False
    return True


# where the fields of a message body (ADD_MESSAGE) lie
cdef struct MessageFields:
    int64_t expiration
    Text address
    Py_ssize_t body_at
    uint32_t body_size
    uint32_t property_count
    Py_ssize_t properties_at        # the first property, after the count


cdef bint _message_fields(const uint8_t *body, Py_ssize_t size, MessageFields *fields) noexcept nogil:
    """Check a message body as record_format.decode_message does and say where its fields lie;
    False when decode_message would reject it."""
    cdef Py_ssize_t pos = MESSAGE_HEAD_BYTES
    cdef uint32_t k
    cdef Property prop
    if size < MESSAGE_HEAD_BYTES or body[0] != MESSAGE_VERSION or body[2] > ROUTING_CODE_MAX:
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


@cython.final
cdef class MessageColumns:
    """The message store's fields of ``count`` rows, as Arrow buffers (see the module docstring).

    Each ``*_valid`` is a validity bitmap (bit i set: row i has the field); values of rows without
    the field are zeros. Strings: ``*_offsets`` (int32, count + 1 entries) into ``*_data``.
    Properties: ``property_offsets`` (int32, count + 1) into the entries; ``key_offsets`` /
    ``value_offsets`` (int32, entries + 1) into ``key_data`` / ``value_data``; ``value_valid``
    per entry (a None value is null). ``rejected``: the rows whose body record_format rejects.
    """
    cdef readonly Py_ssize_t count
    cdef readonly Py_ssize_t property_count
    cdef readonly bytes queue_id, queue_id_valid
    cdef readonly bytes delivery_count, delivery_count_valid
    cdef readonly bytes scheduled_time, scheduled_time_valid
    cdef readonly bytes expiration, expiration_valid
    cdef readonly bytes durable, durable_valid
    cdef readonly bytes message_size, message_size_valid
    cdef readonly bytes routing_type, routing_type_valid
    cdef readonly bytes address_offsets, address_data, address_valid
    cdef readonly bytes queue_name_offsets, queue_name_data, queue_name_valid
    cdef readonly bytes property_offsets, properties_valid
    cdef readonly bytes key_offsets, key_data, value_offsets, value_data, value_valid
    cdef readonly list rejected


cdef class _Decoder:
    """The state of one batch: output pointers, the growable string buffers, the property scratch."""
    cdef MessageColumns out
    cdef int64_t *queue_id
    cdef int64_t *delivery_count
    cdef int64_t *scheduled_time
    cdef int64_t *expiration
    cdef int64_t *message_size
    cdef uint8_t *routing_type
    cdef uint8_t *queue_id_valid
    cdef uint8_t *delivery_count_valid
    cdef uint8_t *scheduled_time_valid
    cdef uint8_t *expiration_valid
    cdef uint8_t *durable
    cdef uint8_t *durable_valid
    cdef uint8_t *message_size_valid
    cdef uint8_t *routing_type_valid
    cdef uint8_t *address_valid
    cdef uint8_t *queue_name_valid
    cdef uint8_t *properties_valid
    cdef int32_t *address_offsets
    cdef int32_t *queue_name_offsets
    cdef int32_t *property_offsets
    cdef Bytes address_data, queue_name_data, key_data, value_data, key_offsets, value_offsets, value_valid
    cdef Py_ssize_t entries
    cdef Property *scratch
    cdef Py_ssize_t scratch_capacity

    def __dealloc__(self):
        PyMem_Free(self.address_data.data)
        PyMem_Free(self.queue_name_data.data)
        PyMem_Free(self.key_data.data)
        PyMem_Free(self.value_data.data)
        PyMem_Free(self.key_offsets.data)
        PyMem_Free(self.value_offsets.data)
        PyMem_Free(self.value_valid.data)
        PyMem_Free(self.scratch)

    cdef int start(self, Py_ssize_t n) except -1:
        cdef MessageColumns out = MessageColumns.__new__(MessageColumns)
        cdef Py_ssize_t bitmap = (n + 7) >> 3
        self.out = out
        out.count = n
        out.rejected = []
        out.queue_id = _zeros(n * 8); self.queue_id = <int64_t *>PyBytes_AS_STRING(out.queue_id)
        out.delivery_count = _zeros(n * 8); self.delivery_count = <int64_t *>PyBytes_AS_STRING(out.delivery_count)
        out.scheduled_time = _zeros(n * 8); self.scheduled_time = <int64_t *>PyBytes_AS_STRING(out.scheduled_time)
        out.expiration = _zeros(n * 8); self.expiration = <int64_t *>PyBytes_AS_STRING(out.expiration)
        out.message_size = _zeros(n * 8); self.message_size = <int64_t *>PyBytes_AS_STRING(out.message_size)
        out.routing_type = _zeros(n); self.routing_type = <uint8_t *>PyBytes_AS_STRING(out.routing_type)
        out.durable = _zeros(bitmap); self.durable = <uint8_t *>PyBytes_AS_STRING(out.durable)
        out.queue_id_valid = _zeros(bitmap); self.queue_id_valid = <uint8_t *>PyBytes_AS_STRING(out.queue_id_valid)
        out.delivery_count_valid = _zeros(bitmap)
        self.delivery_count_valid = <uint8_t *>PyBytes_AS_STRING(out.delivery_count_valid)
        out.scheduled_time_valid = _zeros(bitmap)
        self.scheduled_time_valid = <uint8_t *>PyBytes_AS_STRING(out.scheduled_time_valid)
        out.expiration_valid = _zeros(bitmap)
        self.expiration_valid = <uint8_t *>PyBytes_AS_STRING(out.expiration_valid)
        out.durable_valid = _zeros(bitmap); self.durable_valid = <uint8_t *>PyBytes_AS_STRING(out.durable_valid)
        out.message_size_valid = _zeros(bitmap)
        self.message_size_valid = <uint8_t *>PyBytes_AS_STRING(out.message_size_valid)
        out.routing_type_valid = _zeros(bitmap)
        self.routing_type_valid = <uint8_t *>PyBytes_AS_STRING(out.routing_type_valid)
        out.address_valid = _zeros(bitmap); self.address_valid = <uint8_t *>PyBytes_AS_STRING(out.address_valid)
        out.queue_name_valid = _zeros(bitmap)
        self.queue_name_valid = <uint8_t *>PyBytes_AS_STRING(out.queue_name_valid)
        out.properties_valid = _zeros(bitmap)
        self.properties_valid = <uint8_t *>PyBytes_AS_STRING(out.properties_valid)
        out.address_offsets = _zeros((n + 1) * 4)
        self.address_offsets = <int32_t *>PyBytes_AS_STRING(out.address_offsets)
        out.queue_name_offsets = _zeros((n + 1) * 4)
        self.queue_name_offsets = <int32_t *>PyBytes_AS_STRING(out.queue_name_offsets)
        out.property_offsets = _zeros((n + 1) * 4)
        self.property_offsets = <int32_t *>PyBytes_AS_STRING(out.property_offsets)
        self.entries = 0
        cdef int32_t zero = 0
        _append(&self.key_offsets, &zero, 4)
        _append(&self.value_offsets, &zero, 4)
        return 0

    cdef MessageColumns finish(self):
        cdef MessageColumns out = self.out
        out.property_count = self.entries
        out.key_data = _take(&self.key_data)
        out.value_data = _take(&self.value_data)
        out.key_offsets = _take(&self.key_offsets)
        out.value_offsets = _take(&self.value_offsets)
        out.value_valid = _take(&self.value_valid)
        out.address_data = _take(&self.address_data)
        out.queue_name_data = _take(&self.queue_name_data)
        self.out = None
        return out

    cdef int close_row(self, Py_ssize_t i) except -1:
        if self.address_data.size > TEXT_BYTES_MAX or self.queue_name_data.size > TEXT_BYTES_MAX:
            raise OverflowError("more than 2 GiB of addresses in one batch: decode fewer rows at a time")
        self.address_offsets[i + 1] = <int32_t>self.address_data.size
        self.queue_name_offsets[i + 1] = <int32_t>self.queue_name_data.size
        self.property_offsets[i + 1] = <int32_t>self.entries
        return 0

    cdef bint row(self, Py_ssize_t i, int record_type, const uint8_t *body, Py_ssize_t size) except -1:
        """Decode one body into row i; False when record_format would reject it (nothing written)."""
        if record_type == TYPE_ADD_REF or record_type == TYPE_ACKNOWLEDGE_REF:
            if size != QUEUE_ID_BYTES:
                return False
            self.queue_id[i] = <int64_t>_u64(body)
            _set_bit(self.queue_id_valid, i)
        elif record_type == TYPE_DELIVERY_COUNT:
            if size != DELIVERY_COUNT_BYTES:
                return False
            self.queue_id[i] = <int64_t>_u64(body)
            _set_bit(self.queue_id_valid, i)
            self.delivery_count[i] = _u32(body + 8)
            _set_bit(self.delivery_count_valid, i)
        elif record_type == TYPE_SCHEDULED_TIME:
            if size != SCHEDULED_TIME_BYTES:
                return False
            self.queue_id[i] = <int64_t>_u64(body)
            _set_bit(self.queue_id_valid, i)
            self.scheduled_time[i] = <int64_t>_u64(body + 8)
            _set_bit(self.scheduled_time_valid, i)
        elif record_type == TYPE_ADD_MESSAGE:
            return self.message(i, body, size)
        elif record_type == TYPE_QUEUE_BINDING:
            return self.queue(i, body, size)
        return True

    cdef bint queue(self, Py_ssize_t i, const uint8_t *body, Py_ssize_t size) except -1:
        cdef Py_ssize_t pos = QUEUE_HEAD_BYTES
        cdef Text name, address, filter_text
        if size < QUEUE_HEAD_BYTES or (body[0] != QUEUE_VERSION and body[0] != QUEUE_WITH_ARGUMENTS_VERSION):
            return False
        if not QUEUE_ROUTING_MIN <= body[1] <= QUEUE_ROUTING_MAX or body[2] > 1:
            return False
        name = _text(body, &pos, size)
        if not name.ok:
            return False
        address = _text(body, &pos, size)
        if not address.ok:
            return False
        filter_text = _text(body, &pos, size)
        if not filter_text.ok:
            return False
        if body[0] == QUEUE_WITH_ARGUMENTS_VERSION and not _skip_properties(body, &pos, size):
            return False        # the queue-declare arguments: checked as record_format reads them, not a column
        if pos != size:
            return False
        _append(&self.queue_name_data, name.data, name.size)
        _set_bit(self.queue_name_valid, i)
        _append(&self.address_data, address.data, address.size)
        _set_bit(self.address_valid, i)
        self.routing_type[i] = body[1]
        _set_bit(self.routing_type_valid, i)
        return True

    cdef bint message(self, Py_ssize_t i, const uint8_t *body, Py_ssize_t size) except -1:
        cdef MessageFields fields
        cdef Py_ssize_t pos, k
        cdef Property *prop
        if not _message_fields(body, size, &fields):
            return False
        if fields.property_count > self.scratch_capacity:
            prop = <Property *>PyMem_Realloc(self.scratch, fields.property_count * sizeof(Property))
            if prop == NULL:
                raise MemoryError()
            self.scratch = prop
            self.scratch_capacity = fields.property_count
        pos = fields.properties_at
        for k in range(fields.property_count):
            _property(&self.scratch[k], body, &pos, size)       # checked by _message_fields
        # the body is good: write the row
        self.expiration[i] = fields.expiration
        _set_bit(self.expiration_valid, i)
        if body[1] & FLAG_DURABLE:
            _set_bit(self.durable, i)
        _set_bit(self.durable_valid, i)
        if body[2]:
            self.routing_type[i] = body[2]
            _set_bit(self.routing_type_valid, i)
        self.message_size[i] = fields.body_size
        _set_bit(self.message_size_valid, i)
        _append(&self.address_data, fields.address.data, fields.address.size)
        _set_bit(self.address_valid, i)
        _set_bit(self.properties_valid, i)
        self.properties(fields.property_count)
        return True

    cdef int properties(self, Py_ssize_t count) except -1:
        """Append a message's properties as a dict of them would hold them: a name given twice keeps
        its first place and its last value (record_format.decode_message builds a dict)."""
        cdef Py_ssize_t k, j, last
        cdef Property *prop
        cdef bint seen
        for k in range(count):
            prop = &self.scratch[k]
            seen = False
            for j in range(k):
                if _same_key(&self.scratch[j], prop):
                    seen = True
                    break
            if seen:
                continue
            last = k
            for j in range(k + 1, count):
                if _same_key(&self.scratch[j], prop):
                    last = j
            self.entry(prop, &self.scratch[last])
        return 0

    cdef int entry(self, Property *key, Property *value) except -1:
        cdef char number[32]
        cdef char *text
        cdef uint8_t valid = 1
        cdef Py_ssize_t k
        cdef int32_t end
        cdef uint64_t raw
        cdef double real
        _append(&self.key_data, key.key, key.key_size)
        if value.tag == TAG_STR:
            _append(&self.value_data, value.value, value.value_size)
        elif value.tag == TAG_INT:
            _append(&self.value_data, number, _decimal(number, <int64_t>_u64(value.value)))
        elif value.tag == TAG_FLOAT:
            raw = _u64(value.value)
            memcpy(&real, &raw, 8)
            text = PyOS_double_to_string(real, b'r', 0, Py_DTSF_ADD_DOT_0, NULL)
            try:
                k = 0
                while text[k]:
                    k += 1
                _append(&self.value_data, text, k)
            finally:
                PyMem_Free(text)
        elif value.tag == TAG_TRUE:
            _append(&self.value_data, b"true", 4)
        elif value.tag == TAG_FALSE:
            _append(&self.value_data, b"false", 5)
        elif value.tag == TAG_BYTES:
            _reserve(&self.value_data, 2 * <Py_ssize_t>value.value_size)
            for k in range(value.value_size):
                self.value_data.data[self.value_data.size] = HEX_DIGITS[value.value[k] >> 4]
                self.value_data.data[self.value_data.size + 1] = HEX_DIGITS[value.value[k] & 15]
                self.value_data.size += 2
        else:
            valid = 0
        self.entries += 1
        if self.key_data.size > TEXT_BYTES_MAX or self.value_data.size > TEXT_BYTES_MAX:
            raise OverflowError("more than 2 GiB of property text in one batch: decode fewer rows at a time")
        end = <int32_t>self.key_data.size
        _append(&self.key_offsets, &end, 4)
        end = <int32_t>self.value_data.size
        _append(&self.value_offsets, &end, 4)
        _append(&self.value_valid, &valid, 1)
        return 0


cdef inline bint _same_key(Property *a, Property *b) noexcept nogil:
    return a.key_size == b.key_size and memcmp(a.key, b.key, a.key_size) == 0


def decode_message_columns(const unsigned char[::1] kind not None, const unsigned char[::1] record_type not None,
                           const long long[::1] body_offsets not None, const unsigned char[::1] bodies not None,
                           Py_ssize_t start, Py_ssize_t stop):
    """The message store's fields of rows ``start``..``stop`` of a scan's columns, as a MessageColumns.

    ``kind`` and ``record_type`` per row, ``body_offsets`` (rows + 1 entries) into ``bodies``: the
    FrameColumns layout. Only adds and updates (transactional or not) carry a store body; other
    rows, and record types the message store does not write, get null fields.
    """
    cdef Py_ssize_t rows = kind.shape[0], i, row
    cdef long long begin, end
    cdef int k
    cdef _Decoder decoder = _Decoder()
    if record_type.shape[0] != rows or body_offsets.shape[0] != rows + 1:
        raise ValueError(f"columns of {rows} kinds, {record_type.shape[0]} record types and "
                         f"{body_offsets.shape[0]} body offsets do not describe the same rows")
    if not 0 <= start <= stop <= rows:
        raise ValueError(f"rows {start}..{stop} of {rows}")
    decoder.start(stop - start)
    for row in range(start, stop):
        i = row - start
        k = kind[row]
        if k == KIND_ADD or k == KIND_UPDATE or k == KIND_ADD_TX or k == KIND_UPDATE_TX:
            begin = body_offsets[row]
            end = body_offsets[row + 1]
            if not 0 <= begin <= end <= bodies.shape[0]:
                raise ValueError(f"row {row}: body offsets {begin}..{end} outside the {bodies.shape[0]} bytes of bodies")
            if not decoder.row(i, record_type[row], &bodies[0] + begin if end > begin else NULL, end - begin):
                decoder.out.rejected.append(i)
        decoder.close_row(i)
    return decoder.finish()


# ----- recovery: the message store's live records into per-queue columns ------------------------------

# a queue's recovered references while they are gathered
cdef struct QueueGather:
    Bytes message_ids           # uint64 per reference
    Bytes delivery_counts       # uint32
    Bytes scheduled_times       # uint64
    uint64_t last_message_id
    bint ascending
    bint timed
    bint shared


# a live reference while a message's updates are replayed
cdef struct LiveRef:
    uint64_t queue_id
    uint32_t delivery_count
    uint64_t scheduled_time


@cython.final
cdef class QueueReferences:
    """One queue's recovered references as columns, in store order: ``message_ids`` (array 'Q'),
    ``delivery_counts`` ('I', the last persisted), ``scheduled_times`` ('Q', epoch ms, 0: now).
    ``ascending``: the ids rise; ``timed``: some reference has a scheduled time or its message an
    expiration; ``shared``: some message has a live reference on another queue too."""
    cdef readonly object message_ids
    cdef readonly object delivery_counts
    cdef readonly object scheduled_times
    cdef readonly bint ascending
    cdef readonly bint timed
    cdef readonly bint shared

    def __len__(self):
        return len(self.message_ids)

    def __repr__(self):
        return f"<QueueReferences: {len(self.message_ids)} references>"


@cython.final
cdef class MessageBodies:
    """``MessageRecovery.bodies``: message id -> its ADD_MESSAGE body, a read-only mapping over the
    journal's columns (``RecordColumns``, which it keeps): a body is copied out only when it is looked
    at, and :func:`decode_messages_fields` reads many straight from the columns."""
    cdef LiveMap index          # message id -> its row in columns (a C table: no Python int per message)
    cdef object order           # array 'Q': the message ids in the order recovery found them
    cdef object columns         # RecordColumns
    cdef object bases           # array 'Q': the address of each of the columns' buffers
    cdef Bytes scratch          # a body copied out of a mapped file under the guard, then parsed
    cdef object __weakref__     # the message store's pin releaser refers to it weakly

    def __dealloc__(self):
        PyMem_Free(self.scratch.data)

    cdef Py_ssize_t _row(self, message_id) except -1:
        """The row of `message_id`; KeyError when it is none of the messages (whatever its type)."""
        cdef int64_t row = -1
        if isinstance(message_id, int) and 0 <= message_id <= 0xFFFFFFFFFFFFFFFF:
            row = self.index.get_bytes(<uint64_t>message_id)
        if row < 0:
            raise KeyError(message_id)
        return <Py_ssize_t>row

    cdef void _prefetch(self, Py_ssize_t row) noexcept:
        """Ask the CPU for a row's body ahead of its read (a prefetch never faults, even on a page a
        cut file lost)."""
        cdef object columns = self.columns
        cdef Py_ssize_t start = (<array.array>columns.body_start).data.as_longlongs[row]
        cdef Py_ssize_t end = (<array.array>columns.body_end).data.as_longlongs[row]
        cdef const uint8_t *base = <const uint8_t *><uintptr_t>(<array.array>self.bases).data.as_ulonglongs[
            (<array.array>columns.body_buffer).data.as_uints[row]]
        cdef Py_ssize_t at = start
        while at < end:
            __builtin_prefetch(base + at)
            at += CACHE_LINE_BYTES
        __builtin_prefetch(base + end - 1)

    cdef const uint8_t *_body(self, Py_ssize_t row, Py_ssize_t *size) except NULL:
        """The body of a row copied into ``scratch`` (valid until the next call)."""
        cdef object columns = self.columns
        cdef Py_ssize_t start = (<array.array>columns.body_start).data.as_longlongs[row]
        cdef unsigned int buffer = (<array.array>columns.body_buffer).data.as_uints[row]
        size[0] = (<array.array>columns.body_end).data.as_longlongs[row] - start
        return _body_copy(&self.scratch, <const uint8_t *><uintptr_t>(<array.array>self.bases).data.as_ulonglongs[buffer]
                          + start, size[0], (<list>columns.buffers)[buffer])

    def __getitem__(self, message_id):
        cdef Py_ssize_t size
        cdef const uint8_t *body = self._body(self._row(message_id), &size)
        return PyBytes_FromStringAndSize(<const char *>body, size)

    def release_file(self, path):
        """Copy the bodies that lie in the mapped journal file at ``path`` into one buffer these
        columns own, and let the mapping go: a compaction that reclaims the file (message_store's
        pin releaser) may then recycle it instead of deleting it under a mapping that would hold its
        space until the broker closes. Returns how many bodies moved. Every read of a body copies it
        out in one step that lets no other thread in, so a release between two reads is safe."""
        cdef object columns = self.columns
        cdef list buffers = columns.buffers
        cdef uint32_t *body_buffer = <uint32_t *>(<array.array>columns.body_buffer).data.as_voidptr
        cdef int64_t *body_start = <int64_t *>(<array.array>columns.body_start).data.as_voidptr
        cdef int64_t *body_end = <int64_t *>(<array.array>columns.body_end).data.as_voidptr
        cdef uint32_t *update_buffer = <uint32_t *>(<array.array>columns.update_buffer).data.as_voidptr
        cdef int64_t *update_start = <int64_t *>(<array.array>columns.update_start).data.as_voidptr
        cdef int64_t *update_end = <int64_t *>(<array.array>columns.update_end).data.as_voidptr
        cdef Py_ssize_t rows = len(columns.record_id), updates = len(columns.update_type)
        cdef Py_ssize_t b, row, total, at, size, moved = 0
        cdef const uint8_t *base
        cdef bytes owned
        cdef char *out
        for b in range(len(buffers)):
            if type(buffers[b]) is bytes or getattr(buffers[b], "path", None) != path:
                continue
            base = <const uint8_t *><uintptr_t>(<array.array>self.bases).data.as_ulonglongs[b]
            total = 0
            for row in range(rows):
                if body_buffer[row] == b:
                    total += body_end[row] - body_start[row]
            owned = PyBytes_FromStringAndSize(NULL, total)
            out = PyBytes_AS_STRING(owned)
            at = 0
            for row in range(rows):     # a fault (the file cut meanwhile) leaves every row as it was
                if body_buffer[row] == b:
                    size = body_end[row] - body_start[row]
                    _read_guarded(out + at, base + body_start[row], size, buffers[b])
                    at += size
            at = 0
            for row in range(rows):
                if body_buffer[row] == b:
                    size = body_end[row] - body_start[row]
                    body_start[row] = at
                    body_end[row] = at + size
                    at += size
                    moved += 1
            for row in range(updates):  # read at load only: left empty, never pointing into the old file
                if update_buffer[row] == b:
                    update_start[row] = update_end[row] = 0
            buffers[b] = owned
            (<array.array>self.bases).data.as_ulonglongs[b] = <uintptr_t>PyBytes_AS_STRING(owned)
        return moved

    def get(self, message_id, default=None):
        return self[message_id] if message_id in self else default

    def __contains__(self, message_id):
        return isinstance(message_id, int) and message_id in self.index

    def __iter__(self):
        return iter(self.order)

    def __len__(self):
        return len(self.order)

    def keys(self):
        return KeysView(self)

    def items(self):
        return [(message_id, self[message_id]) for message_id in self.order]

    def values(self):
        return [self[message_id] for message_id in self.order]

    def __eq__(self, other):
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and all(key in other and other[key] == self[key] for key in self.order)

    def __repr__(self):
        return f"<MessageBodies: {len(self.order)} messages>"


Mapping.register(MessageBodies)


@cython.final
cdef class MessageRecovery:
    """What ``recover_messages`` found: every rule of the message store's recovery applied (the
    twin, _twin/message_columns.py, applies the same ones)."""
    cdef readonly object max_record_id
    cdef readonly object bodies             # MessageBodies: message id -> its ADD_MESSAGE body, for messages with a live reference
    cdef readonly LiveMap one_queue         # message id -> the queue id of its one live reference (message_queues.py)
    cdef readonly dict several_queues       # message id -> the tuple of queue ids of its several live references
    cdef readonly dict references           # queue id -> QueueReferences (delivery counts as the journal holds them)
    cdef readonly list unreferenced         # message ids without a live reference, in store order
    cdef readonly list anomalies            # what recovery reports of odd records, never fatal (text)
    cdef readonly list corrupt              # CorruptRecordError of each message record_format rejects (left out)
    cdef readonly list unknown_references   # (queue id, message id, journal count, count, scheduled ms) on queues not given
    cdef readonly list from_shadow          # (queue id, row in its references or -1, message id, count): the shadow's count wins


cdef inline int _put_u64(Bytes *buf, uint64_t value) except -1:
    return _append(buf, &value, 8)


cdef array.array _column(Bytes *buf, str typecode):
    """A finished column as an array (its bytes copied once, straight in; the buffer freed)."""
    cdef array.array column = array.array(typecode)
    try:
        if buf.size:
            array.resize(column, buf.size // column.ob_descr.itemsize)
            memcpy(column.data.as_chars, buf.data, buf.size)
    finally:
        _free(buf)
    return column


cdef struct QueueTable:
    # queue id -> its index among the known queues: an open-addressing table, so that the loop over
    # every message finds a reference's queue without making a Python int (a dict lookup would)
    uint64_t *keys
    Py_ssize_t *index          # -1: an empty slot
    Py_ssize_t mask


cdef inline Py_ssize_t _queue_slot(const QueueTable *table, uint64_t queue_id) noexcept nogil:
    cdef Py_ssize_t i = <Py_ssize_t>(((queue_id * <uint64_t>0x9E3779B97F4A7C15) >> 32) & <uint64_t>table.mask)
    while table.index[i] >= 0 and table.keys[i] != queue_id:
        i = (i + 1) & table.mask
    return i


cdef int _queue_table(QueueTable *table, dict queue_index) except -1:
    """Fill `table` (its arrays allocated here, freed by the caller) from queue id -> index."""
    cdef Py_ssize_t capacity = 8, i
    cdef uint64_t queue_id
    while capacity < 2 * len(queue_index):
        capacity *= 2
    table.keys = <uint64_t *>PyMem_Malloc(capacity * sizeof(uint64_t))
    table.index = <Py_ssize_t *>PyMem_Malloc(capacity * sizeof(Py_ssize_t))
    table.mask = capacity - 1
    if table.keys == NULL or table.index == NULL:
        raise MemoryError()
    for i in range(capacity):
        table.index[i] = -1
    for queue_key, q in queue_index.items():
        queue_id = queue_key
        i = _queue_slot(table, queue_id)
        table.keys[i] = queue_id
        table.index[i] = q
    return 0


cdef object _rejection(decode, tuple args, dict keywords):
    """The CorruptRecordError record_format raises for a record the compiled checks refuse (the one
    text users see); None when record_format reads it after all."""
    try:
        decode(*args, **keywords)
    except CorruptRecordError as error:
        return error
    return None


cdef int _index_messages(MessageBodies bodies, MessageRecovery out, array.array rows, array.array queue_of) except -1:
    """The tables of the recovered messages (``bodies.order``): message id -> its row (``bodies.index``)
    and -> its one queue (``out.one_queue``; -1 in ``queue_of``: on several). Ids that rise, as a
    store's counter hands them out, stay where they lie as both tables' base: no insert, no table of
    a million slots (LiveMap.take)."""
    cdef array.array order = bodies.order
    cdef const uint64_t *ids = <const uint64_t *>order.data.as_voidptr
    cdef Py_ssize_t count = len(order)
    bodies.index.take((order, rows), ids, <int64_t *>rows.data.as_voidptr, count)
    out.one_queue.take((order, queue_of), ids, <int64_t *>queue_of.data.as_voidptr, count)
    return 0


def recover_messages(records, known_queues, long long now_ms, shadow_counts=None, path=None):
    """The message store's recovery of its message journal's live ``records`` (``LoadResult.records``
    or any mapping of record id -> RecordInfo), in one pass without a Python object per reference:
    the rules of replaying a message's references live here and in the twin, nowhere else.

    The journal's own mapping is read as its columns (``_replay.record_columns``): no RecordInfo is
    made. ``known_queues``: the queue ids of the bindings journal, in its order. For every message
    it replays the references (ADD_REF, ACKNOWLEDGE_REF, delivery counts, scheduled times: the last
    in journal order wins) and gathers the live ones per queue; a scheduled time at or before
    ``now_ms`` becomes 0. Odd records are reported in ``anomalies`` and skipped (another record type,
    a second ADD_REF, an update of a reference that is not live or of an unknown type); a message
    whose body or update record_format rejects goes to ``corrupt`` (its error, naming ``path``);
    references on a queue not given go to ``unknown_references``. ``shadow_counts``: (queue id,
    message id) -> the delivery count a killed process left in its shadow; one that differs from
    the journal's is listed in ``from_shadow`` (the references keep the journal's).
    """
    cdef MessageRecovery out = MessageRecovery.__new__(MessageRecovery)
    cdef dict queue_index = {}
    cdef Py_ssize_t queues = 0, q, k, n_live, live_capacity = 0, j, i, n, u, u_end, b, expected_size
    cdef QueueGather *gather = NULL
    cdef QueueTable queue_table
    cdef LiveRef *live = NULL
    cdef LiveRef *grown
    cdef const char **bases = NULL
    cdef MessageFields fields
    cdef uint64_t message_id, queue_id, max_id = 0, scheduled
    cdef const uint8_t *p
    cdef const uint8_t *body
    cdef uint8_t update[32]         # an update's body, copied out under the guard (sizes checked first)
    cdef Py_ssize_t size, body_size
    cdef int user_type
    cdef int64_t expiration
    cdef bint damaged
    cdef object columns, shadowed
    cdef dict several_queues
    cdef list anomalies, corrupt
    cdef Bytes order, rows, queue_of     # per message in `order`: its row, its one queue (or -1)
    cdef MessageBodies bodies
    cdef QueueReferences refs
    out.bodies = bodies = MessageBodies.__new__(MessageBodies)
    bodies.index = LiveMap()
    bodies.order = array.array("Q")
    out.one_queue = LiveMap()
    memset(&order, 0, sizeof(Bytes))
    memset(&rows, 0, sizeof(Bytes))
    memset(&queue_of, 0, sizeof(Bytes))
    out.several_queues = several_queues = {}
    out.references = {}
    out.unreferenced = []
    out.anomalies = anomalies = []
    out.corrupt = corrupt = []
    out.unknown_references = []
    out.from_shadow = []
    out.max_record_id = 0
    shadow_counts = shadow_counts or {}
    columns = _record_columns(records)
    if columns is None:     # bodies of another bytes-like type: as bytes
        columns = _record_columns({record_id: RecordInfo(rec.record_id, rec.record_type, bytes(rec.body),
                                                         [(user_type, bytes(update_body))
                                                          for user_type, update_body in rec.updates])
                                   for record_id, rec in records.items()})
    cdef const uint64_t *ids = <const uint64_t *>(<array.array>columns.record_id).data.as_voidptr
    cdef const uint8_t *types = <const uint8_t *>(<array.array>columns.record_type).data.as_voidptr
    cdef const uint32_t *body_buffer = <const uint32_t *>(<array.array>columns.body_buffer).data.as_voidptr
    cdef const int64_t *body_start = <const int64_t *>(<array.array>columns.body_start).data.as_voidptr
    cdef const int64_t *body_end = <const int64_t *>(<array.array>columns.body_end).data.as_voidptr
    cdef const int64_t *update_first = <const int64_t *>(<array.array>columns.update_first).data.as_voidptr
    cdef const uint8_t *update_type = <const uint8_t *>(<array.array>columns.update_type).data.as_voidptr
    cdef const uint32_t *update_buffer = <const uint32_t *>(<array.array>columns.update_buffer).data.as_voidptr
    cdef const int64_t *update_start = <const int64_t *>(<array.array>columns.update_start).data.as_voidptr
    cdef const int64_t *update_end = <const int64_t *>(<array.array>columns.update_end).data.as_voidptr
    cdef list buffers = columns.buffers
    bodies.columns = columns
    n = len(columns)
    for queue_key in known_queues:
        queue_index[queue_key] = len(queue_index)
    queues = len(queue_index)
    gather = <QueueGather *>PyMem_Malloc(max(queues, 1) * sizeof(QueueGather))
    bases = <const char **>PyMem_Malloc(max(len(buffers), 1) * sizeof(const char *))
    if gather == NULL or bases == NULL:
        PyMem_Free(gather)
        PyMem_Free(bases)
        raise MemoryError()
    memset(gather, 0, max(queues, 1) * sizeof(QueueGather))
    for q in range(queues):
        gather[q].ascending = True
    bodies.bases = array.array("Q", [0]) * len(buffers)
    for b in range(len(buffers)):
        bases[b] = <const char *>_address(buffers[b])
        (<array.array>bodies.bases).data.as_ulonglongs[b] = <uintptr_t>bases[b]
    queue_table.keys = NULL
    queue_table.index = NULL
    try:
        _queue_table(&queue_table, queue_index)
        for i in range(n):
            message_id = ids[i]
            if i == 0 or message_id > max_id:
                max_id = message_id
            if types[i] != TYPE_ADD_MESSAGE:
                anomalies.append(f"message journal record {message_id} has type {types[i]}, not a message "
                                 f"({TYPE_ADD_MESSAGE}); ignored")
                continue
            body_size = body_end[i] - body_start[i]
            body = <const uint8_t *>bases[body_buffer[i]] + body_start[i]
            if _message_fields_guarded(body, body_size, &fields, buffers[body_buffer[i]]):
                expiration = fields.expiration      # the one field recovery needs: no copy of the body
            else:
                raw = _copy_bytes(body, body_size, buffers[body_buffer[i]])
                error = _rejection(_format.decode_message, (message_id, raw), dict(path=path))
                if error is not None:
                    corrupt.append(error)
                    continue
                expiration = _format.decode_message(message_id, raw, path=path).expiration
            n_live = 0
            damaged = False
            u_end = update_first[i + 1]
            for u in range(update_first[i], u_end):
                user_type = update_type[u]
                size = update_end[u] - update_start[u]
                if user_type == TYPE_ADD_REF or user_type == TYPE_ACKNOWLEDGE_REF:
                    expected_size = QUEUE_ID_BYTES
                elif user_type == TYPE_DELIVERY_COUNT:
                    expected_size = DELIVERY_COUNT_BYTES
                elif user_type == TYPE_SCHEDULED_TIME:
                    expected_size = SCHEDULED_TIME_BYTES
                else:
                    anomalies.append(f"message {message_id}: update of unknown type {user_type}; ignored")
                    continue
                if size != expected_size:
                    corrupt.append(_update_rejection(user_type, _copy_bytes(
                        <const uint8_t *>bases[update_buffer[u]] + update_start[u], size, buffers[update_buffer[u]]),
                        message_id, path))
                    damaged = True      # the message is left out, as record_format's reading leaves it
                    break
                _read_guarded(update, <const uint8_t *>bases[update_buffer[u]] + update_start[u], size,
                              buffers[update_buffer[u]])
                p = update
                queue_id = _u64(p)
                k = -1
                for j in range(n_live):
                    if live[j].queue_id == queue_id:
                        k = j
                        break
                if user_type == TYPE_ADD_REF:
                    if k >= 0:
                        anomalies.append(f"message {message_id}: a second ADD_REF on queue {queue_id}; kept one")
                        continue
                    if n_live == live_capacity:
                        live_capacity = max(8, 2 * live_capacity)
                        grown = <LiveRef *>PyMem_Realloc(live, live_capacity * sizeof(LiveRef))
                        if grown == NULL:
                            raise MemoryError()
                        live = grown
                    live[n_live].queue_id = queue_id
                    live[n_live].delivery_count = 0
                    live[n_live].scheduled_time = 0
                    n_live += 1
                elif user_type == TYPE_ACKNOWLEDGE_REF:
                    if k < 0:
                        anomalies.append(f"message {message_id}: acknowledgement on queue {queue_id}, which holds "
                                         "no live reference of it; ignored")
                        continue
                    memmove(&live[k], &live[k + 1], (n_live - k - 1) * sizeof(LiveRef))
                    n_live -= 1
                elif user_type == TYPE_DELIVERY_COUNT:
                    if k < 0:
                        anomalies.append(f"message {message_id}: delivery count {_u32(p + 8)} for queue {queue_id}, "
                                         "which holds no live reference of it; ignored")
                        continue
                    live[k].delivery_count = _u32(p + 8)     # the last record in journal order wins
                else:
                    if k < 0:
                        anomalies.append(f"message {message_id}: scheduled time {_u64(p + 8)} for queue {queue_id}, "
                                         "which holds no live reference of it; ignored")
                        continue
                    live[k].scheduled_time = _u64(p + 8)
            if damaged:
                continue
            if n_live == 0:
                out.unreferenced.append(message_id)
                continue
            for j in range(n_live):
                scheduled = live[j].scheduled_time
                if scheduled and now_ms >= 0 and scheduled <= <uint64_t>now_ms:
                    scheduled = 0       # it fell due while the store was closed: deliver now
                q = queue_table.index[_queue_slot(&queue_table, live[j].queue_id)]
                shadowed = shadow_counts.get((live[j].queue_id, message_id)) if shadow_counts else None
                if shadowed is not None and shadowed == live[j].delivery_count:
                    shadowed = None
                if q < 0:
                    anomalies.append(f"message {message_id} has a reference on queue {live[j].queue_id}, which the "
                                     "bindings journal does not hold; kept, not delivered")
                    out.unknown_references.append((live[j].queue_id, message_id, live[j].delivery_count,
                                                   live[j].delivery_count if shadowed is None else shadowed,
                                                   scheduled))
                    if shadowed is not None:
                        out.from_shadow.append((live[j].queue_id, -1, message_id, shadowed))
                    continue
                if shadowed is not None:
                    out.from_shadow.append((live[j].queue_id, gather[q].message_ids.size // 8, message_id, shadowed))
                if gather[q].message_ids.size and message_id < gather[q].last_message_id:
                    gather[q].ascending = False
                gather[q].last_message_id = message_id
                if scheduled or expiration:
                    gather[q].timed = True
                if n_live > 1:
                    gather[q].shared = True
                _put_u64(&gather[q].message_ids, message_id)
                _append(&gather[q].delivery_counts, &live[j].delivery_count, 4)
                _put_u64(&gather[q].scheduled_times, scheduled)
            _put_u64(&order, message_id)    # its body stays in the journal's buffers, read at its delivery
            _put_u64(&rows, <uint64_t>i)
            if n_live == 1 and live[0].queue_id <= ONE_QUEUE_ID_MAX:     # the common case: no Python object
                _put_u64(&queue_of, live[0].queue_id)
            else:
                _put_u64(&queue_of, <uint64_t>-1)
                several_queues[message_id] = tuple([live[j].queue_id for j in range(n_live)])
        for queue_key, q in queue_index.items():
            refs = QueueReferences.__new__(QueueReferences)
            refs.message_ids = _column(&gather[q].message_ids, "Q")
            refs.delivery_counts = _column(&gather[q].delivery_counts, "I")
            refs.scheduled_times = _column(&gather[q].scheduled_times, "Q")
            refs.ascending = gather[q].ascending
            refs.timed = gather[q].timed
            refs.shared = gather[q].shared
            out.references[queue_key] = refs
        bodies.order = _column(&order, "Q")
        _index_messages(bodies, out, _column(&rows, "q"), _column(&queue_of, "q"))
        out.max_record_id = max_id
        return out
    finally:
        for q in range(queues):
            PyMem_Free(gather[q].message_ids.data)
            PyMem_Free(gather[q].delivery_counts.data)
            PyMem_Free(gather[q].scheduled_times.data)
        PyMem_Free(gather)
        PyMem_Free(live)
        PyMem_Free(bases)
        PyMem_Free(queue_table.keys)
        PyMem_Free(order.data)
        PyMem_Free(rows.data)
        PyMem_Free(queue_of.data)
        PyMem_Free(queue_table.index)


cdef object _update_rejection(int user_type, bytes raw, uint64_t message_id, object path):
    """record_format's CorruptRecordError for a reference update of the wrong size."""
    if user_type == TYPE_DELIVERY_COUNT:
        error = _rejection(_format.decode_delivery_count, (raw,), dict(message_id=message_id, path=path))
    elif user_type == TYPE_SCHEDULED_TIME:
        error = _rejection(_format.decode_scheduled_time, (raw,), dict(message_id=message_id, path=path))
    else:
        error = _rejection(_format.decode_queue_id, (raw,), dict(message_id=message_id, record_type=user_type,
                                                             path=path))
    if error is None:
        raise AssertionError(f"record_format read a {len(raw)}-byte update of type {user_type} the compiled "
                             "check refused")
    return error


cdef bytes _copy_bytes(const uint8_t *src, Py_ssize_t size, object buffer):
    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    _read_guarded(PyBytes_AS_STRING(out), src, size, buffer)
    return out


def decode_message_fields(message_id, body, path=None):
    """(address, body, properties, durable, expiration, routing_type) of one ADD_MESSAGE body, as
    record_format.decode_message reads them: in C for a message without properties (record_format
    reads the others, and gives the error of a body it rejects)."""
    cdef MessageFields fields
    cdef const uint8_t *p
    if type(body) is not bytes:
        body = bytes(body)
    p = <const uint8_t *>PyBytes_AS_STRING(body)
    if not _message_fields(p, len(body), &fields) or fields.property_count:
        stored = _format.decode_message(message_id, body, path=path)
        return (stored.address, stored.body, stored.properties, stored.durable, stored.expiration,
                stored.routing_type)
    return ((<const char *>fields.address.data)[:fields.address.size].decode("utf-8"),
            PyBytes_FromStringAndSize(<const char *>p + fields.body_at, fields.body_size), {},
            bool(p[1] & FLAG_DURABLE), fields.expiration, _ROUTING_NAME[p[2]])


cdef tuple _fields_kept(tuple fields, bint with_bodies):
    """A message's fields, its body None when bodies are not wanted and it has no properties."""
    if with_bodies or fields[2]:
        return fields
    return (fields[0], None) + fields[2:]


def decode_messages_fields(bodies not None, message_ids, path=None, bint with_bodies=True):
    """decode_message_fields of many messages at once: a list of the field tuples of ``message_ids``
    (in their order), each read from ``bodies`` (message id -> ADD_MESSAGE body: a dict, or the
    MessageBodies of a recovery, read straight from the journal's columns). Messages of one address
    share its str. ``with_bodies`` False: the body of a message without properties is None in its
    tuple, not copied (the broker reads it when it delivers the message)."""
    cdef list out = []
    cdef list ids
    cdef MessageBodies columns
    cdef MessageFields fields
    cdef const uint8_t *p
    cdef Py_ssize_t size, i, n
    cdef Py_ssize_t *rows = NULL
    cdef object address = ""           # the str of address_bytes
    cdef bytes address_bytes = b""
    if type(bodies) is not MessageBodies:
        return [_fields_kept(decode_message_fields(message_id, bodies[message_id], path), with_bodies)
                for message_id in message_ids]
    columns = <MessageBodies>bodies
    ids = message_ids if type(message_ids) is list else list(message_ids)
    n = len(ids)
    rows = <Py_ssize_t *>PyMem_Malloc(max(n, 1) * sizeof(Py_ssize_t))
    if rows == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            rows[i] = columns._row(ids[i])
        for i in range(n):
            if i + BODY_PREFETCH_AHEAD < n:     # a queue's messages lie apart in the files: each body is a
                columns._prefetch(rows[i + BODY_PREFETCH_AHEAD])    # miss, overlapped with this one's work
            message_id = ids[i]
            p = columns._body(rows[i], &size)
            if not _message_fields(p, size, &fields) or fields.property_count:
                out.append(_fields_kept(decode_message_fields(message_id, PyBytes_FromStringAndSize(
                    <const char *>p, size), path), with_bodies))
                continue
            if (fields.address.size != len(address_bytes)
                    or memcmp(fields.address.data, PyBytes_AS_STRING(address_bytes), fields.address.size)):
                address_bytes = PyBytes_FromStringAndSize(<const char *>fields.address.data, fields.address.size)
                address = address_bytes.decode("utf-8")
            out.append((address,
                        PyBytes_FromStringAndSize(<const char *>p + fields.body_at, fields.body_size) if with_bodies
                        else None, {}, bool(p[1] & FLAG_DURABLE), fields.expiration, _ROUTING_NAME[p[2]]))
    finally:
        PyMem_Free(rows)
    return out


def release_from_collector(objects):
    """Take ``objects`` out of the cycle collector's view. They are still freed by reference counting;
    the collector's passes no longer visit them, which on a broker holding a million recovered
    messages were most of the time of receiving them. Only for objects that can never be part of a
    reference cycle (a recovered message's data: text, bytes, numbers and a dict of plain
    properties): one in a cycle would never be freed."""
    for obj in objects:
        PyObject_GC_UnTrack(obj)
