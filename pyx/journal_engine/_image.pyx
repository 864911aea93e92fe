# cython: language_level=3
"""Compiled checkpoint images: one file's columns (_scan's FrameColumns) as a checkpoint holds them.

A checkpoint (storage/journal/checkpoint.py) saves each data file's columns as their "image"; a later load
takes them back instead of decoding the file again, once the image is shown to describe the file
still, byte for byte (docs/internals/format.md, "The checkpoint"). The checks run without the GIL
under _scan's SIGBUS guard. The Python twin is journal_engine._twin.image.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.string cimport memcpy
from libc.stdint cimport uint8_t, uint32_t, uint64_t

from journal_engine._codec cimport (
    FRAME_HEADER_SIZE, FRAME_ALIGNMENT, FRAME_VALID, FRAME_INVALID,
    FRAME_BODY_LENGTH_AT, FRAME_KIND_AT, FRAME_RECORD_TYPE_AT, FRAME_FLAGS_AT, FRAME_STAMP_AT, FRAME_RECORD_ID_AT,
    FRAME_TX_ID_AT, validate_frame, load_u32, load_u64, KIND_GROUP, GROUP_MEMBER, frame_size, je_crc32c,
    je_crc32c_init,
)
from journal_engine._scan cimport (
    JE_BUS_FAULT, MappedFile, CheckpointMapping, FrameColumns, RowBuffers, guarded_call, _next_valid, _point,
    _raise_cut,
)

je_crc32c_init()    # this module's copy of the CRC32C dispatch (crc32c_impl.h is compiled into each user)



# A file's columns as a checkpoint holds them (its "image"), native byte order, no padding: offset,
# size and body_offsets (one more row) as int64, record_id and tx_id as uint64, then check, kind and
# record_type as bytes -- 43 bytes a row and 8 more (docs/internals/format.md, "The checkpoint").

cdef inline Py_ssize_t _image_size(Py_ssize_t count) noexcept nogil:
    return 43 * count + 8


def image_size(Py_ssize_t count):
    """The bytes of the image of ``count`` rows' columns."""
    return _image_size(count)


cdef void _image_rows(const unsigned char *image, Py_ssize_t n, RowBuffers *rows) noexcept nogil:
    """The column pointers into an image of ``n`` rows."""
    rows.offset = <long long *>image
    rows.size = <long long *>(image + 8 * n)
    rows.body_offsets = <long long *>(image + 16 * n)
    rows.record_id = <uint64_t *>(image + 24 * n + 8)
    rows.tx_id = <uint64_t *>(image + 32 * n + 8)
    rows.check = <uint8_t *>(image + 40 * n + 8)
    rows.kind = <uint8_t *>(image + 41 * n + 8)
    rows.record_type = <uint8_t *>(image + 42 * n + 8)


def columns_image(FrameColumns cols):
    """One file's columns as the bytes a checkpoint holds: their image."""
    cdef Py_ssize_t n = cols.count
    cdef bytes out = PyBytes_FromStringAndSize(NULL, _image_size(n))
    cdef RowBuffers rows
    _image_rows(<const unsigned char *>PyBytes_AS_STRING(out), n, &rows)
    memcpy(rows.offset, cols.c_offset, n * 8)
    memcpy(rows.size, cols.c_size, n * 8)
    memcpy(rows.body_offsets, cols.c_body_offsets, (n + 1) * 8)
    memcpy(rows.record_id, cols.c_record_id, n * 8)
    memcpy(rows.tx_id, cols.c_tx_id, n * 8)
    memcpy(rows.check, cols.c_check, n)
    memcpy(rows.kind, cols.c_kind, n)
    memcpy(rows.record_type, cols.c_record_type, n)
    return out


cdef struct ImageCheck:
    const unsigned char *data       # the data file, mapped whole
    Py_ssize_t data_size
    const unsigned char *image      # its columns, read out of the checkpoint into owned memory
    Py_ssize_t count, start, end_offset, groups_skipped
    uint32_t data_crc, image_crc, stamp
    int verdict                     # 0: the image is the file's columns; else what did not match


cdef bint _rows_fit(const RowBuffers *rows, Py_ssize_t n, Py_ssize_t start, Py_ssize_t end_offset) noexcept nogil:
    """Every row within [start, end_offset) and in order, each body within its frame. No sum is formed
    that a forged field could overflow: a frame's end is compared as ``offset <= end - size`` with
    ``0 < size <= end``, and a body's length is taken only between rising offsets from 0."""
    cdef Py_ssize_t i, at = start
    cdef long long offset, size, body
    if rows.body_offsets[0] != 0:
        return False
    for i in range(n):
        offset = rows.offset[i]
        size = rows.size[i]
        if offset < at or size <= 0 or size > end_offset or offset > end_offset - size:
            return False
        if rows.body_offsets[i + 1] < rows.body_offsets[i] or rows.check[i] > FRAME_INVALID:
            return False
        body = rows.body_offsets[i + 1] - rows.body_offsets[i]      # both >= 0: no overflow
        if rows.check[i] == FRAME_VALID and (size < FRAME_HEADER_SIZE or body > size - FRAME_HEADER_SIZE):
            return False
        if rows.check[i] != FRAME_VALID and body != 0:
            return False
        at = offset + size      # <= end_offset
    return True


cdef inline bint _header_is_row(const ImageCheck *call, const RowBuffers *rows, Py_ssize_t i) noexcept nogil:
    """Whether the frame header where valid row ``i`` lies carries this file's stamp and the row's
    size, kind, type, ids and body length (the frame's bytes are vouched for by the file's CRC32C)."""
    cdef const unsigned char *frame = call.data + rows.offset[i]
    cdef long long body = rows.body_offsets[i + 1] - rows.body_offsets[i]     # (0 <= body <= size: _rows_fit)
    # every field's difference or-ed into one word: no branch per field on this loop of every row
    cdef uint64_t differs = ((load_u32(frame + FRAME_STAMP_AT) ^ call.stamp)
                             | (frame[FRAME_KIND_AT] ^ rows.kind[i])
                             | (frame[FRAME_RECORD_TYPE_AT] ^ rows.record_type[i])
                             | (load_u64(frame + FRAME_RECORD_ID_AT) ^ rows.record_id[i])
                             | (load_u64(frame + FRAME_TX_ID_AT) ^ rows.tx_id[i])
                             | (<uint64_t>load_u32(frame + FRAME_BODY_LENGTH_AT) ^ <uint64_t>body)
                             | (<uint64_t>frame_size(<Py_ssize_t>body) ^ <uint64_t>rows.size[i]))
    return differs == 0


cdef bint _damage_is_row(const ImageCheck *call, const RowBuffers *rows, Py_ssize_t i) noexcept nogil:
    """Whether damaged row ``i`` is what a decode finds there: no valid frame at its start, and none that
    could start a reading again before its end (its end is the next valid frame)."""
    cdef Py_ssize_t size = 0, found
    cdef bint member_skipped = False
    if validate_frame(call.data, rows.offset[i], call.data_size, call.stamp, &size) == FRAME_VALID:
        if call.data[rows.offset[i] + FRAME_FLAGS_AT] != GROUP_MEMBER and call.data[rows.offset[i] + FRAME_KIND_AT] != KIND_GROUP:
            return False        # (a member or a torn group's head is damage a decode reports too)
    found = _next_valid(call.data, rows.offset[i] + FRAME_ALIGNMENT, call.data_size, call.stamp, &member_skipped)
    return found == rows.offset[i] + rows.size[i]


cdef inline bint _gap_is_groups(const ImageCheck *call, Py_ssize_t pos, Py_ssize_t until, Py_ssize_t *groups) noexcept nogil:
    """Whether [pos, until), where no row lies, holds only valid GROUP frames (a replay's scan makes
    no row of them), counting them into ``groups``."""
    cdef Py_ssize_t size = 0
    while pos < until:
        if (validate_frame(call.data, pos, call.data_size, call.stamp, &size) != FRAME_VALID
                or call.data[pos + FRAME_KIND_AT] != KIND_GROUP or size > until - pos):
            return False
        pos += size
        groups[0] += 1
    return True


DEF CHECK_CHUNK_BYTES = 262144     # the file's CRC32C and its rows' checks, a chunk at a time: in cache for both


cdef int _check_image_call(void *arg) noexcept nogil:
    """Does an image still describe its file? The CRC32C of the image, every row within the file and
    in order (a forged image must not make a read stray outside the mapping), then the CRC32C of
    every byte of the file as saved and every row against the frames of the file, fused a chunk at a
    time so that the rows read the frame headers the checksum just brought into cache."""
    cdef ImageCheck *call = <ImageCheck *>arg
    cdef RowBuffers rows
    cdef Py_ssize_t i = 0, n = call.count, pos = 0, end, at = call.start, groups = 0
    cdef uint32_t crc = 0
    call.verdict = 1
    if je_crc32c(0, call.image, _image_size(n)) != call.image_crc:
        return 0
    call.verdict = 3
    if not (0 <= call.start <= call.end_offset <= call.data_size):
        return 0
    _image_rows(call.image, n, &rows)
    if not _rows_fit(&rows, n, call.start, call.end_offset):
        return 0
    call.verdict = 4
    while pos < call.data_size:
        end = min(pos + CHECK_CHUNK_BYTES, call.data_size)
        crc = je_crc32c(crc, call.data + pos, end - pos)
        while i < n and rows.offset[i] <= end - FRAME_HEADER_SIZE:
            if not _gap_is_groups(call, at, rows.offset[i], &groups):
                return 0
            if rows.check[i] == FRAME_VALID:
                if not _header_is_row(call, &rows, i):
                    return 0
            elif not _damage_is_row(call, &rows, i):
                return 0
            at = rows.offset[i] + rows.size[i]
            i += 1
        pos = end
    if i < n or not _gap_is_groups(call, at, call.end_offset, &groups) or groups != call.groups_skipped:
        return 0
    call.verdict = 2
    if crc != call.data_crc:
        return 0
    call.verdict = 0
    return 0


def image_is_sound(image, Py_ssize_t count, Py_ssize_t start, Py_ssize_t end_offset, uint32_t image_crc):
    """Whether an image CRC32Cs to ``image_crc`` and its rows lie in order within [start, end_offset):
    what a checkpoint must show, without its data files, before a failed load may name it again."""
    cdef Py_buffer view
    cdef RowBuffers rows
    cdef bint sound = False
    if count < 0 or not 0 <= start <= end_offset:
        return False
    PyObject_GetBuffer(image, &view, PyBUF_SIMPLE)
    try:
        if view.len != _image_size(count):
            return False
        with nogil:
            if je_crc32c(0, <const unsigned char *>view.buf, view.len) == image_crc:
                _image_rows(<const unsigned char *>view.buf, count, &rows)
                sound = _rows_fit(&rows, count, start, end_offset)
        return sound
    finally:
        PyBuffer_Release(&view)


def checkpointed_columns(MappedFile data, image, Py_ssize_t count, Py_ssize_t start, Py_ssize_t end_offset,
                         int end_check, Py_ssize_t groups_skipped, uint32_t data_crc, uint32_t image_crc,
                         uint32_t stamp, CheckpointMapping mapping=None):
    """The FrameColumns a scan of ``data`` with ``copy=False, groups=False`` would return, from the
    image of them a checkpoint saved (``image``: a read-only buffer of the columns' image over
    ``count`` rows, which the columns keep and read in place: owned bytes, or a slice of ``mapping``,
    the CheckpointMapping whose cut flag the columns then check after every read they hand out), or
    None when the file's bytes or the image no longer CRC32C to what was saved, a row would lie
    outside the file, a row is not what the file holds where it lies (``stamp``: the file's), or the
    checkpoint was cut under the check. Runs without the GIL under the SIGBUS guard: a data file
    cut meanwhile raises FileChangedError, as a scan does."""
    cdef ImageCheck call
    cdef Py_buffer view
    cdef RowBuffers rows
    cdef int status
    cdef FrameColumns cols
    if end_check < FRAME_VALID or end_check > FRAME_INVALID or count < 0 or groups_skipped < 0:
        return None
    PyObject_GetBuffer(image, &view, PyBUF_SIMPLE)
    try:
        if view.len != _image_size(count):
            return None
        call = ImageCheck(data=data._base, data_size=data.size, image=<const unsigned char *>view.buf, count=count,
                          start=start, end_offset=end_offset, groups_skipped=groups_skipped, data_crc=data_crc,
                          image_crc=image_crc, stamp=stamp, verdict=0)
        with nogil:
            status = guarded_call(_check_image_call, &call)
        if status == JE_BUS_FAULT:
            _raise_cut(data._base, data.size)
        if call.verdict or (mapping is not None and mapping.cut):
            return None
        cols = FrameColumns.__new__(FrameColumns)
        cols._checkpoint = mapping
        _image_rows(call.image, count, &rows)
        _point(cols, &rows)
        whole = memoryview(image)       # the columns' views (what their memoryview properties give), over the same bytes
        cols._offset = _column_view(whole, call.image, rows.offset, count, "q")
        cols._size = _column_view(whole, call.image, rows.size, count, "q")
        cols._body_offsets = _column_view(whole, call.image, rows.body_offsets, count + 1, "q")
        cols._record_id = _column_view(whole, call.image, rows.record_id, count, "Q")
        cols._tx_id = _column_view(whole, call.image, rows.tx_id, count, "Q")
        cols._check = _column_view(whole, call.image, rows.check, count, "B")
        cols._kind = _column_view(whole, call.image, rows.kind, count, "B")
        cols._record_type = _column_view(whole, call.image, rows.record_type, count, "B")
        cols.count = count
        cols.groups_skipped = groups_skipped
        cols.end_offset = end_offset
        cols.end_check = end_check
        if rows.body_offsets[count] > 0:
            cols.bodies = data
            cols.mapped = True
            cols._base = data._base
        else:       # (columns without a body keep no mapping: they pin nothing)
            cols.bodies = b""
            cols._base = <const unsigned char *>PyBytes_AS_STRING(cols.bodies)
        return cols
    finally:
        PyBuffer_Release(&view)


cdef object _column_view(object whole, const unsigned char *image, const void *column, Py_ssize_t rows, str code):
    """A typed memoryview of one column of an image (``whole``: a memoryview of the image at ``image``)."""
    cdef Py_ssize_t at = <const unsigned char *>column - image
    cdef Py_ssize_t size = 1 if code == "B" else 8
    return whole[at:at + rows * size].cast(code)


cdef struct ChecksumCall:
    const unsigned char *data
    Py_ssize_t size
    uint32_t crc


cdef int _checksum_call(void *arg) noexcept nogil:
    cdef ChecksumCall *call = <ChecksumCall *>arg
    call.crc = je_crc32c(0, call.data, call.size)
    return 0


def file_checksum(MappedFile data):
    """The CRC32C of every byte of a mapped file, computed without the GIL under the SIGBUS guard (a
    file cut meanwhile raises FileChangedError): what a checkpoint saves of a file and checks again."""
    cdef ChecksumCall call
    cdef int status
    call.data = data._base
    call.size = data.size
    with nogil:
        status = guarded_call(_checksum_call, &call)
    if status == JE_BUS_FAULT:
        _raise_cut(data._base, data.size)
    return call.crc
