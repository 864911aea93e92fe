# cython: language_level=3
"""Compiled batch decoder for the Spark data source: the message store's record bodies, many at once, into columns.

The Spark data source (journal_engine.spark) reads a journal file's frames as columns (the scan
decoder's FrameColumns) and needs the message store's fields of each row — address, queue id,
delivery count, scheduled time, expiration, durable, properties — as Arrow buffers too. Decoding
them one body at a time through record_format's decoders makes a Python object per field; this
module walks every body of a batch in C and fills the buffers Arrow wraps without copying
(fixed-width values with a validity bitmap; strings as int32 offsets + bytes, Arrow's string
layout, which Spark takes; properties as the int32 offsets, keys and values of a map<string, string>).

It accepts exactly the bodies record_format's decoders accept. A body they reject is not decoded
here: its row is listed in ``rejected`` and its fields stay null, and the caller asks record_format
for the error (the one text users see). The bodies are read by _store_body (its .pxd), as the
store's recovery reads them; the layouts are record_format's. The twin is
journal_engine._twin.message_columns; tests/store/test_message_columns.py keeps them equal.

Property values become text, one rule for every type: a str as it is, an int in decimal, a float
as Python's repr, true / false, bytes in hex, None as a null value.
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memset

import journal_engine.record_format as _format
from journal_engine._store_body cimport (
    Bytes, MessageFields, Property, Text, _append, _free, _message_fields, _property, _reserve, _skip_properties,
    _take, _text, _u32, _u64, DELIVERY_COUNT_BYTES, FLAG_DURABLE, QUEUE_HEAD_BYTES, QUEUE_ID_BYTES,
    QUEUE_ROUTING_MAX, QUEUE_ROUTING_MIN, QUEUE_VERSION, QUEUE_WITH_ARGUMENTS_VERSION, SCHEDULED_TIME_BYTES,
    TAG_BYTES, TAG_FALSE, TAG_FLOAT, TAG_INT, TAG_STR, TAG_TRUE, TYPE_ACKNOWLEDGE_REF, TYPE_ADD_MESSAGE,
    TYPE_ADD_REF, TYPE_DELIVERY_COUNT, TYPE_DUPLICATE_ID, TYPE_QUEUE_BINDING, TYPE_SCHEDULED_TIME, _sized,
)

cdef extern from "Python.h":
    char *PyOS_double_to_string(double val, char format_code, int precision, int flags, int *ptype) except NULL
    int Py_DTSF_ADD_DOT_0


cdef int KIND_ADD = _format.RecordKind.ADD
cdef int KIND_UPDATE = _format.RecordKind.UPDATE
cdef int KIND_ADD_TX = _format.RecordKind.ADD_TX
cdef int KIND_UPDATE_TX = _format.RecordKind.UPDATE_TX

cdef Py_ssize_t TEXT_BYTES_MAX = 0x7FFFFFFF   # Arrow's string offsets are int32
cdef const char *HEX_DIGITS = b"0123456789abcdef"


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


cdef inline void _set_bit(uint8_t *bitmap, Py_ssize_t i) noexcept nogil:
    bitmap[i >> 3] |= <uint8_t>(1 << (i & 7))


cdef bytes _zeros(Py_ssize_t n):
    cdef bytes out = PyBytes_FromStringAndSize(NULL, n)
    memset(PyBytes_AS_STRING(out), 0, n)
    return out


cdef inline uint8_t *_data(bytes column):
    """The bytes a column's pointer writes into (the decoder fills the column in place)."""
    return <uint8_t *>PyBytes_AS_STRING(column)


# where a string lies in a body; ``ok`` False when the body ends first or it is not UTF-8
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
    cdef readonly bytes priority, priority_valid
    cdef readonly bytes address_offsets, address_data, address_valid
    cdef readonly bytes queue_name_offsets, queue_name_data, queue_name_valid
    cdef readonly bytes property_offsets, properties_valid
    cdef readonly bytes key_offsets, key_data, value_offsets, value_data, value_valid
    cdef readonly list rejected


cdef inline bint _duplicate_id_valid(const uint8_t *body, Py_ssize_t size) noexcept nogil:
    """Whether record_format.decode_duplicate_id reads a DUPLICATE_ID body: the address (UTF-8), then
    the id's bytes, and nothing after them. The entry has no column of its own."""
    cdef Py_ssize_t pos = 0
    cdef const uint8_t *data
    cdef uint32_t id_size
    return _text(body, &pos, size).ok and _sized(body, &pos, size, &data, &id_size) and pos == size

cdef class _Decoder:
    """The state of one batch: output pointers, the growable string buffers, the property scratch."""
    cdef MessageColumns out
    cdef int64_t *queue_id
    cdef int64_t *delivery_count
    cdef int64_t *scheduled_time
    cdef int64_t *expiration
    cdef int64_t *message_size
    cdef uint8_t *routing_type
    cdef uint8_t *priority
    cdef uint8_t *queue_id_valid
    cdef uint8_t *delivery_count_valid
    cdef uint8_t *scheduled_time_valid
    cdef uint8_t *expiration_valid
    cdef uint8_t *durable
    cdef uint8_t *durable_valid
    cdef uint8_t *message_size_valid
    cdef uint8_t *routing_type_valid
    cdef uint8_t *priority_valid
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
        cdef Py_ssize_t bitmap = (n + 7) >> 3, offsets = (n + 1) * 4
        self.out = out
        out.count = n
        out.rejected = []
        out.queue_id = _zeros(n * 8); self.queue_id = <int64_t *>_data(out.queue_id)
        out.delivery_count = _zeros(n * 8); self.delivery_count = <int64_t *>_data(out.delivery_count)
        out.scheduled_time = _zeros(n * 8); self.scheduled_time = <int64_t *>_data(out.scheduled_time)
        out.expiration = _zeros(n * 8); self.expiration = <int64_t *>_data(out.expiration)
        out.message_size = _zeros(n * 8); self.message_size = <int64_t *>_data(out.message_size)
        out.routing_type = _zeros(n); self.routing_type = _data(out.routing_type)
        out.priority = _zeros(n); self.priority = _data(out.priority)
        out.durable = _zeros(bitmap); self.durable = _data(out.durable)
        out.queue_id_valid = _zeros(bitmap); self.queue_id_valid = _data(out.queue_id_valid)
        out.delivery_count_valid = _zeros(bitmap); self.delivery_count_valid = _data(out.delivery_count_valid)
        out.scheduled_time_valid = _zeros(bitmap); self.scheduled_time_valid = _data(out.scheduled_time_valid)
        out.expiration_valid = _zeros(bitmap); self.expiration_valid = _data(out.expiration_valid)
        out.durable_valid = _zeros(bitmap); self.durable_valid = _data(out.durable_valid)
        out.message_size_valid = _zeros(bitmap); self.message_size_valid = _data(out.message_size_valid)
        out.routing_type_valid = _zeros(bitmap); self.routing_type_valid = _data(out.routing_type_valid)
        out.priority_valid = _zeros(bitmap); self.priority_valid = _data(out.priority_valid)
        out.address_valid = _zeros(bitmap); self.address_valid = _data(out.address_valid)
        out.queue_name_valid = _zeros(bitmap); self.queue_name_valid = _data(out.queue_name_valid)
        out.properties_valid = _zeros(bitmap); self.properties_valid = _data(out.properties_valid)
        out.address_offsets = _zeros(offsets); self.address_offsets = <int32_t *>_data(out.address_offsets)
        out.queue_name_offsets = _zeros(offsets); self.queue_name_offsets = <int32_t *>_data(out.queue_name_offsets)
        out.property_offsets = _zeros(offsets); self.property_offsets = <int32_t *>_data(out.property_offsets)
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
        elif record_type == TYPE_DUPLICATE_ID:
            return _duplicate_id_valid(body, size)
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
        self.priority[i] = <uint8_t>fields.priority
        _set_bit(self.priority_valid, i)
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
