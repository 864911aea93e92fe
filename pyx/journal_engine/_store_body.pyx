# cython: language_level=3
"""Compiled reader of the message store's record bodies, for the compiled modules that read many.

The Spark columns (_message_columns) and the message store's recovery (_message_recovery) both walk
store bodies in C, without a Python object per field; the walk is written here once, and given to
them through _store_body.pxd. It accepts exactly the bodies record_format's decoders accept. The
layouts are record_format's: the record types, versions, flags, fixed body sizes, property tags and
head sizes are read from it at import (the head layouts are checked against the struct formats
compiled in). The Python twin, journal_engine._twin.store_body, has the public names only: the
twins read bodies through record_format itself.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t

import journal_engine.record_format as _format

# the layouts compiled into the parsers below; record_format is their home
_format.check_compiled("journal_engine._store_body", {
    "message head": ("<BBBBq", _format.MESSAGE_HEAD.format), "queue head": ("<BBBx", _format.QUEUE_HEAD.format)})


(TYPE_QUEUE_BINDING, TYPE_ADD_MESSAGE, TYPE_ADD_REF, TYPE_ACKNOWLEDGE_REF, TYPE_DELIVERY_COUNT, TYPE_SCHEDULED_TIME,
 TYPE_DUPLICATE_ID) = (_format.RecordType[name] for name in (
    "QUEUE_BINDING_RECORD", "ADD_MESSAGE", "ADD_REF", "ACKNOWLEDGE_REF", "UPDATE_DELIVERY_COUNT",
    "SET_SCHEDULED_DELIVERY_TIME", "DUPLICATE_ID"))
QUEUE_ID_BYTES = len(_format.encode_queue_id(0))
DELIVERY_COUNT_BYTES = _format.DELIVERY_COUNT_BODY_BYTES
SCHEDULED_TIME_BYTES = _format.SCHEDULED_TIME_BODY_BYTES
MESSAGE_HEAD_BYTES = _format.MESSAGE_HEAD.size
QUEUE_HEAD_BYTES = _format.QUEUE_HEAD.size
MESSAGE_VERSION = _format.MESSAGE_FORMAT_VERSION
MESSAGE_WITH_PRIORITY_VERSION = _format.MESSAGE_WITH_PRIORITY_FORMAT_VERSION
PRIORITY_DEFAULT = _format.PRIORITY_DEFAULT
PRIORITY_MAX = _format.PRIORITY_MAX
QUEUE_VERSION = _format.QUEUE_FORMAT_VERSION
QUEUE_WITH_ARGUMENTS_VERSION = _format.QUEUE_WITH_ARGUMENTS_FORMAT_VERSION
FLAG_DURABLE = _format.FLAG_DURABLE
ROUTING_CODE_MAX = max(_format.ROUTING_TYPES.values())
QUEUE_ROUTING_MIN = min(_format.ROUTING_TYPES[name] for name in _format.QUEUE_ROUTING_TYPES)
QUEUE_ROUTING_MAX = max(_format.ROUTING_TYPES[name] for name in _format.QUEUE_ROUTING_TYPES)
TAG_NONE, TAG_STR, TAG_INT, TAG_FLOAT, TAG_FALSE, TAG_TRUE, TAG_BYTES = (_format.PropertyTag[name] for name in (
    "NONE", "STR", "INT", "FLOAT", "FALSE", "TRUE", "BYTES"))

#: routing type codes as the columns give them (record_format.ROUTING_TYPES; 0 is "none": a null)
ROUTING_NAMES = {code: name for name, code in _format.ROUTING_TYPES.items() if name is not None}
ROUTING_NAME_OF_CODE = tuple(ROUTING_NAMES.get(code) for code in range(ROUTING_CODE_MAX + 1))


# a growable byte buffer (the data of a string column)
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


cdef void _free(Bytes *buf) noexcept:
    PyMem_Free(buf.data)
    buf.data = NULL
    buf.size = buf.capacity = 0


cdef bytes _take(Bytes *buf):
    cdef bytes out = PyBytes_FromStringAndSize(buf.data, buf.size) if buf.size else b""
    _free(buf)
    return out

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
        return _sized(body, pos, size, &prop.value, &prop.value_size)
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
