# The contract of _replay for the message store's recovery (_message_recovery): a replay's live
# records as columns, read without a Python object per record.
cimport cython
from cpython cimport array


@cython.final
cdef class RecordColumns:
    cdef readonly array.array record_id, record_type, body_buffer, body_start, body_end
    cdef readonly array.array update_first, update_type, update_buffer, update_start, update_end
    cdef readonly list buffers


# record_columns of ``records``, bodies of another bytes-like type first copied as bytes: never None
cdef RecordColumns records_as_columns(records)
