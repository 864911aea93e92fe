# The contract of _scan: journal files mapped read-only, the bodies that are views into them, and one
# file's frames decoded into columns. _replay reads the columns row by row to replay them; _image saves
# and checks them as a checkpoint's image. Layout of the frames: docs/internals/format.md.
cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport uint8_t, uint32_t, uint64_t

from journal_engine._codec cimport FRAME_HEADER_SIZE

cdef extern from "bus_guard.h":
    # only what holds no state: the guard itself (its handler, its jump) is _scan's, see guarded_call
    int JE_BUS_FAULT
    int je_bus_flag(const int *cut) nogil


@cython.final
cdef class MappedFile:
    cdef const unsigned char *_base
    cdef readonly Py_ssize_t size
    cdef readonly object path
    cdef object _key


@cython.final
cdef class CheckpointMapping:
    cdef const unsigned char *_base
    cdef readonly Py_ssize_t size
    cdef readonly object path
    cdef int _cut                       # set by the SIGBUS handler when it patched a page of this mapping
    cdef int _slot
    cdef int _fd                        # kept open: the handler asks it how long the file is now
    cdef uint64_t _trailer              # what the last 8 bytes held when mapped (zeros once cut before them)


@cython.final
cdef class Body:
    cdef object _owner                  # the MappedFile (or bytes) the view points into
    cdef const unsigned char *_data
    cdef Py_ssize_t _size
    cdef Py_hash_t _hash
    cdef bint _hashed


cdef class FrameColumns:
    cdef readonly Py_ssize_t count
    cdef readonly Py_ssize_t groups_skipped   # valid GROUP frames a scan with groups=False made no row of
    cdef readonly Py_ssize_t end_offset
    cdef readonly int end_check
    cdef readonly object bodies         # bytes (owned), or the MappedFile when mapped
    cdef readonly bint mapped
    cdef const unsigned char *_base     # the bodies' first byte
    # the columns: typed arrays a scan fills, or (checkpointed_columns) typed memoryviews of a checkpoint
    # file's mapping; read through the pointers below, set once the columns are complete (_point)
    cdef object _offset, _size, _check, _kind, _record_type, _record_id, _tx_id, _body_offsets
    cdef const long long *c_offset
    cdef const long long *c_size
    cdef const long long *c_body_offsets
    cdef const uint64_t *c_record_id
    cdef const uint64_t *c_tx_id
    cdef const uint8_t *c_check
    cdef const uint8_t *c_kind
    cdef const uint8_t *c_record_type
    # columns read in a CheckpointMapping: it is asked whether it was cut after every read handed out
    # (_columns_whole); None for columns of a scan
    cdef CheckpointMapping _checkpoint


cdef struct RowBuffers:
    # the columns while a scan runs without the GIL: the returned columns' own arrays, sized for the
    # most rows the bytes can hold (``fixed``: never grown); for a very large file, grown with
    # realloc and copied out at the end
    Py_ssize_t count, capacity
    bint fixed
    bint skip_groups            # a valid GROUP frame makes no row (recovery's replay has nothing to do with it)
    Py_ssize_t groups_skipped
    long long *offset
    long long *size
    long long *body_offsets      # capacity + 1
    uint64_t *record_id
    uint64_t *tx_id
    uint8_t *check
    uint8_t *kind
    uint8_t *record_type


# fn(arg) under _scan's SIGBUS guard: JE_BUS_FAULT (-2) when a mapped page it read was gone (then
# raise_cut names where). A module that reads mapped files calls this one guard, never a copy of
# bus_guard.h's of its own: the handler that answers a fault must be the one that knows the
# checkpoints' patched regions (CheckpointMapping), which it tries before its jump.
cdef int guarded_call(int (*fn)(void *) noexcept nogil, void *arg) noexcept nogil
cdef _raise_cut(const unsigned char *base, Py_ssize_t limit)
cdef int _raise_checkpoint_cut(object mapping) except -1

# where a scan of one file starts again after damage, or -1 (_image checks a damaged row by it)
cdef Py_ssize_t _next_valid(const unsigned char *base, Py_ssize_t pos, Py_ssize_t limit, uint32_t stamp,
                            bint *member_skipped) noexcept nogil
cdef FrameColumns scan_file(buffer, uint32_t stamp, Py_ssize_t start, bint copy, bint groups)
cdef void _point(FrameColumns cols, const RowBuffers *rows) noexcept
cdef bytes _row_bytes(FrameColumns cols, Py_ssize_t row)


cdef inline bint _mapping_cut(CheckpointMapping mapping) noexcept:
    """Whether a checkpoint's mapping was cut: the handler patched a page of it, or its trailer (last
    8 bytes) no longer reads what it held -- the zeros past a cut inside the last mapped page raise no
    SIGBUS, so the flag alone would miss them. Read after the reads it vouches for."""
    # (the trailer is 8-byte aligned at the mapping's end: one load)
    return ((<const uint64_t *>(mapping._base + mapping.size - 8))[0] != mapping._trailer
            or je_bus_flag(&mapping._cut))


cdef inline int _columns_whole(FrameColumns cols) except -1:
    """After a read of columns that lie in a checkpoint's mapping: FileChangedError naming the
    checkpoint when another process cut it (the read may have seen zeros), else nothing."""
    if cols._checkpoint is not None and _mapping_cut(cols._checkpoint):
        _raise_checkpoint_cut(cols._checkpoint)
    return 0


cdef inline void _point_body(Body body, object owner, const unsigned char *data, Py_ssize_t size) noexcept:
    """Make a Body nothing else refers to a view of other bytes (an iteration's spare: see _EntryIterator)."""
    if body._owner is not owner:
        body._owner = owner
    body._data = data
    body._size = size
    body._hashed = False


cdef inline Body _new_body(object owner, const unsigned char *data, Py_ssize_t size):
    cdef Body body = Body.__new__(Body)
    body._owner = owner
    body._data = data
    body._size = size
    body._hashed = False
    return body


cdef inline long long _body_start(FrameColumns cols, Py_ssize_t row) noexcept:
    """Where a row's body starts in ``cols.bodies``: in the file after its frame header when mapped
    (a damaged region's row has an empty body, wherever it starts)."""
    if cols.mapped:
        return cols.c_offset[row] + FRAME_HEADER_SIZE
    return cols.c_body_offsets[row]


cdef inline Py_ssize_t _body_size(FrameColumns cols, Py_ssize_t row) noexcept:
    return <Py_ssize_t>(cols.c_body_offsets[row + 1] - cols.c_body_offsets[row])


cdef inline object _row_body(FrameColumns cols, Py_ssize_t row):
    """A row's body: a Body view into the mapped file, or bytes copied out of the owned bodies."""
    if cols.mapped:
        return _new_body(cols.bodies, cols._base + _body_start(cols, row), _body_size(cols, row))
    return PyBytes_FromStringAndSize(<const char *>cols._base + _body_start(cols, row), _body_size(cols, row))
