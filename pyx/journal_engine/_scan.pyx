# cython: language_level=3
"""Compiled scan decoder: one journal file's frames -> columns, and the mapped files they point into.

One decoder serves recovery, compaction, the checkpoint and the tools, so the format has a single
reader (docs/internals/format.md). It also owns the mapped files: the data files whose bodies
``load()`` hands out as views (MappedFile, Body), the checkpoint a load took (CheckpointMapping), and
the SIGBUS guard every read of them goes through (guarded_call in _scan.pxd). _replay replays the
columns, _image keeps them in a checkpoint. The Python twin is journal_engine._twin.scan.
"""
cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython cimport array
from libc.string cimport memcpy, memset
from libc.stdlib cimport realloc, free
import array
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBuffer_FillInfo, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.slice cimport PySlice_Unpack, PySlice_AdjustIndices
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.errno cimport errno
from posix.mman cimport mmap, munmap, PROT_READ, MAP_SHARED, MAP_POPULATE, MAP_FAILED

from journal_engine._codec cimport (
    FRAME_HEADER_SIZE, FRAME_ALIGNMENT, FrameCheck, FRAME_VALID, FRAME_ZERO, FRAME_FOREIGN, FRAME_INVALID,
    FRAME_BODY_LENGTH_AT, FRAME_KIND_AT, FRAME_RECORD_TYPE_AT, FRAME_FLAGS_AT, FRAME_STAMP_AT, FRAME_RECORD_ID_AT,
    FRAME_TX_ID_AT, is_group_member_kind, validate_frame, load_u32, load_u64,
    KIND_GROUP, GROUP_MEMBER, GROUP_BODY_SIZE, frame_size, je_crc32c, je_crc32c_init,
)

je_crc32c_init()    # this module's copy of the CRC32C dispatch (crc32c_impl.h is compiled into each user)

cdef extern from "bus_guard.h":
    int je_bus_install()
    int je_bus_guarded(int (*fn)(void *) noexcept nogil, void *arg) nogil
    int je_bus_guarded_copy(void *dst, const void *src, size_t n) nogil
    void *je_bus_fault_address() nogil
    int je_bus_patch_register(const void *start, size_t length, int *cut, int fd)
    void je_bus_patch_remove(int slot)
    int JE_PATCHED_MAX

import os
from journal_engine.errors import FileChangedError
from journal_engine.limits import CHECKPOINTS_MAPPED_MAX as _CHECKPOINTS_MAPPED_MAX
from journal_engine.limits import SCAN_DIRECT_ROWS_MAX as _SCAN_DIRECT_ROWS_MAX

# the SIGBUS handler's table of patched regions is compiled in; limits.py states its size
if JE_PATCHED_MAX != _CHECKPOINTS_MAPPED_MAX:
    raise ImportError(f"journal_engine._scan was built with {JE_PATCHED_MAX} checkpoint mappings (bus_guard.h), "
                      f"limits.CHECKPOINTS_MAPPED_MAX is {_CHECKPOINTS_MAPPED_MAX}: rebuild it (pip install -e .)")

cdef Py_ssize_t SCAN_DIRECT_ROWS_MAX = _SCAN_DIRECT_ROWS_MAX

#: scan_columns reads a mapped file under a SIGBUS guard: a file another process cuts short during
#: the scan is a FileChangedError, not a dead interpreter (storage/journal/scan.py maps only where this holds)
GUARDS_MAPPED_READS = je_bus_install() == 0

cdef array.array _LONGS = array.array("q")
cdef array.array _ULONGS = array.array("Q")
cdef array.array _BYTES = array.array("B")

#: what a reader reports of damage (a FrameCheck other than VALID) followed by valid frames
GAP_REASONS = {
    FRAME_ZERO: "unwritten gap followed by valid records",
    FRAME_FOREIGN: "bytes of another file id followed by valid records",
    FRAME_INVALID: "damaged frame (bad checksum, length or kind) followed by valid records",
}


# ----- bodies as views into mapped files ----------------------------------------------------------------

# (st_dev, st_ino) -> how many MappedFile objects map that file now: the pins the file pool reads
# (storage/journal/segment_files.py) before it recycles a file, so no view ever sees a recycled file's new life
cdef dict _pins = {}


cdef class MappedFile:
    """One data file mapped read-only, whole: what the bodies of ``load()`` point into.

    The mapping lives as long as this object, and every :class:`Body` view into it holds it, so it
    is unmapped when the last view goes (never while one lives). While it lives the file is pinned
    (:func:`is_pinned`): the journal's file pool does not recycle it. MAP_POPULATE maps every page in
    one call instead of a fault per 4 KiB."""

    def __init__(self, int fd, Py_ssize_t size, path, key):
        """Map ``size`` bytes of ``fd`` (opened for reading); ``key``: the file's (st_dev, st_ino)."""
        cdef void *p
        if self._key is not None:
            raise TypeError("a MappedFile maps one file once")
        self.path = path
        if size > 0:
            with nogil:
                p = mmap(NULL, <size_t>size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0)
            if p == MAP_FAILED:
                raise OSError(errno, os.strerror(errno), path)
            self._base = <const unsigned char *>p
            self.size = size
        self._key = tuple(key)
        _pins[self._key] = _pins.get(self._key, 0) + 1

    def __dealloc__(self):
        if self._base != NULL:
            munmap(<void *>self._base, <size_t>self.size)
            self._base = NULL
        if self._key is not None and _pins is not None:
            left = _pins.get(self._key, 1) - 1
            if left > 0:
                _pins[self._key] = left
            else:
                _pins.pop(self._key, None)

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("a mapped journal file is read-only")
        PyBuffer_FillInfo(buffer, self, <void *>self._base, self.size, 1, flags)

    def __len__(self):
        return self.size

    def __repr__(self):
        return f"MappedFile({self.path!r}, size={self.size})"


cdef class CheckpointMapping:
    """The checkpoint a load took, mapped read-only, whole: its entries and the images of its files'
    columns are read here in place (docs/internals/format.md, "The checkpoint").

    Its name is gone once a load takes it, but another holder of its inode (a hard link, a
    descriptor opened before) can still cut it. Its pages are then not a SIGBUS: the mapping is a
    patched region of the SIGBUS handler (bus_guard.h), whose lost pages read as zeros and set
    ``cut``; whatever reads the columns checks ``cut`` after the read it hands out, so a cut
    checkpoint is a decode (at load) or FileChangedError naming it (after), never zeros taken for
    columns and never a dead interpreter."""

    def __init__(self, int fd, Py_ssize_t size, path, bytes trailer not None):
        """Map ``size`` bytes of ``fd`` (opened for reading), whose last 8 bytes should be ``trailer``
        (a checkpoint cut anywhere before them then reads zeros there: ``cut``)."""
        cdef void *p
        if self._base != NULL:
            raise TypeError("a CheckpointMapping maps one file once")
        self.path = path
        self._slot = -1
        self._fd = -1
        if size <= 0:
            raise ValueError(f"a checkpoint of {size} bytes has nothing to map")
        with nogil:
            p = mmap(NULL, <size_t>size, PROT_READ, MAP_SHARED, fd, 0)
        if p == MAP_FAILED:
            raise OSError(errno, os.strerror(errno), path)
        self._base = <const unsigned char *>p
        self.size = size
        self._fd = os.dup(fd)
        self._slot = je_bus_patch_register(self._base, <size_t>size, &self._cut, self._fd)
        if self._slot < 0:
            raise OSError(0, f"too many checkpoints mapped at once (limits.CHECKPOINTS_MAPPED_MAX, "
                             f"{_CHECKPOINTS_MAPPED_MAX})", path)
        if len(trailer) != 8 or size < 8:
            raise ValueError("a checkpoint's trailer is 8 bytes, at its end")
        memcpy(&self._trailer, PyBytes_AS_STRING(trailer), 8)

    def __dealloc__(self):
        je_bus_patch_remove(self._slot)
        if self._base != NULL:
            munmap(<void *>self._base, <size_t>self.size)
            self._base = NULL
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @property
    def cut(self):
        """Whether another process cut the file under the mapping (a page of it read as zeros)."""
        return _mapping_cut(self)

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("a checkpoint is read-only")
        PyBuffer_FillInfo(buffer, self, <void *>self._base, self.size, 1, flags)

    def __len__(self):
        return self.size

    def __repr__(self):
        return f"CheckpointMapping({self.path!r}, size={self.size}{', cut' if self.cut else ''})"


cdef int _raise_checkpoint_cut(object mapping) except -1:
    raise FileChangedError("the checkpoint the load took was cut by another process while its columns were in use "
                           "(a hard link or a descriptor to it)", path=(<CheckpointMapping>mapping).path,
                           hint="load the journal again: with the checkpoint gone it decodes every file")


def is_pinned(key):
    """True while a body view (or a scan's columns) maps the file whose (st_dev, st_ino) is ``key``."""
    return tuple(key) in _pins


cdef _raise_view_cut(object owner):
    """The guard caught a read of a view past its file's end: another process cut the file."""
    cdef const unsigned char *fault = <const unsigned char *>je_bus_fault_address()
    cdef Py_ssize_t offset = -1
    path = None
    if type(owner) is MappedFile:
        path = (<MappedFile>owner).path
        offset = fault - (<MappedFile>owner)._base
    raise FileChangedError(f"the file was cut short under a body read from it: the mapped page at offset "
                           f"{offset} is gone", path=path, offset=offset if offset >= 0 else None,
                           hint="another process truncated a journal file while its bodies were in use; stop "
                                "it, then load the journal again (or load(copy=True) to own the bytes)")


cdef int _guarded_copy(void *dst, const unsigned char *src, Py_ssize_t size, object owner) except -1:
    """memcpy out of a mapping under the SIGBUS guard: FileChangedError naming the file, never a signal."""
    if size > 0 and je_bus_guarded_copy(dst, src, <size_t>size) == JE_BUS_FAULT:
        _raise_view_cut(owner)
    return 0


cdef bytes _copy_out(const unsigned char *src, Py_ssize_t size, object owner):
    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    _guarded_copy(PyBytes_AS_STRING(out), src, size, owner)
    return out


cdef struct ViewCopy:
    void *dst
    const unsigned char *src
    size_t size
    const unsigned char *frame      # the header of the frame whose body the view is
    uint32_t body_length            # what the header says when the copy is done
    uint8_t kind


cdef int _view_copy_call(void *arg) noexcept nogil:
    cdef ViewCopy *call = <ViewCopy *>arg
    memcpy(call.dst, call.src, call.size)
    call.body_length = load_u32(call.frame + FRAME_BODY_LENGTH_AT)
    call.kind = call.frame[FRAME_KIND_AT]
    return 0


cdef bytes _copy_view(object owner, const unsigned char *body, Py_ssize_t body_size, Py_ssize_t start,
                      Py_ssize_t count):
    """``count`` bytes from ``start`` of a body view, copied under the SIGBUS guard, and the header of
    its frame read after the copy: a file cut and grown again under the view (its pages then read as
    zeros) no longer holds the frame, and the copy raises FileChangedError instead of handing out zeros."""
    cdef bytes out = PyBytes_FromStringAndSize(NULL, count)
    cdef ViewCopy call
    cdef Py_ssize_t offset
    if type(owner) is not MappedFile:
        _guarded_copy(PyBytes_AS_STRING(out), body + start, count, owner)
        return out
    call.dst = PyBytes_AS_STRING(out)
    call.src = body + start
    call.size = <size_t>count
    call.frame = body - FRAME_HEADER_SIZE
    if je_bus_guarded(_view_copy_call, &call) == JE_BUS_FAULT:
        _raise_view_cut(owner)
    if call.body_length != <uint64_t>body_size or call.kind == 0:
        offset = call.frame - (<MappedFile>owner)._base
        raise FileChangedError(f"the file was cut and written again under a body read from it: the frame at offset "
                               f"{offset} no longer holds this {body_size}-byte body", path=(<MappedFile>owner).path,
                               offset=offset,
                               hint="another process truncated a journal file while its bodies were in use; stop "
                                    "it, then load the journal again (or load(copy=True) to own the bytes)")
    return out


@cython.no_gc
@cython.freelist(256)
cdef class Body:
    """A record's body as a read-only view into its mapped journal file (what ``load()`` returns).

    Bytes-like: ``==`` and ordering with bytes (and other views), ``len``, indexing and slicing (which
    give bytes), ``bytes(body)``, ``hash`` (equal to the bytes' hash, so a view finds a bytes key), the
    buffer protocol (read-only: ``memoryview``, ``struct.unpack_from``, ``bytes.join``), pickled as
    bytes. The view may be kept: it holds its file mapped, and the file pinned (never recycled by the
    journal's pool) until the last view into it goes. Every copy out of it (``bytes()``, slicing,
    comparison, hashing) reads under the SIGBUS guard, so a file another process cuts short meanwhile
    gives FileChangedError naming it, and so does a file cut and grown again (the frame's header is read
    after the copy); a read through the buffer protocol has no such guard (docs/internals/recovery.md,
    row X5)."""

    def __init__(self, *args):
        raise TypeError("a Body is made by Journal.load(); bytes(body) copies one")

    @property
    def path(self):
        """The journal file the view points into (None when it points into bytes)."""
        return (<MappedFile>self._owner).path if type(self._owner) is MappedFile else None

    def __bytes__(self):
        return _copy_view(self._owner, self._data, self._size, 0, self._size)

    def tobytes(self):
        """``bytes(self)``: an owned copy."""
        return _copy_view(self._owner, self._data, self._size, 0, self._size)

    def __len__(self):
        return self._size

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("a journal body is read-only")
        PyBuffer_FillInfo(buffer, self, <void *>self._data, self._size, 1, flags)

    def __getitem__(self, index):
        cdef Py_ssize_t start, stop, step, count, i
        if isinstance(index, slice):
            PySlice_Unpack(index, &start, &stop, &step)
            count = PySlice_AdjustIndices(self._size, &start, &stop, step)
            if step == 1:
                return _copy_view(self._owner, self._data, self._size, start, count)
            return bytes(self)[index]
        i = index
        if i < 0:
            i += self._size
        if not 0 <= i < self._size:
            raise IndexError("index out of range")
        return _copy_view(self._owner, self._data, self._size, i, 1)[0]

    def __iter__(self):
        return iter(bytes(self))

    def __contains__(self, item):
        return item in bytes(self)

    def __hash__(self):
        if not self._hashed:
            self._hash = hash(bytes(self))
            self._hashed = True
        return self._hash

    def __eq__(self, other):
        if type(other) is Body and (<Body>other)._size != self._size:
            return False
        if type(other) is bytes and len(<bytes>other) != self._size:
            return False
        return bytes(self) == (bytes(other) if type(other) is Body else other)

    def __ne__(self, other):
        return not self == other

    def __lt__(self, other):
        return bytes(self) < (bytes(other) if type(other) is Body else other)

    def __le__(self, other):
        return bytes(self) <= (bytes(other) if type(other) is Body else other)

    def __gt__(self, other):
        return bytes(self) > (bytes(other) if type(other) is Body else other)

    def __ge__(self, other):
        return bytes(self) >= (bytes(other) if type(other) is Body else other)

    def __add__(self, other):
        return bytes(self) + other

    def __radd__(self, other):
        return other + bytes(self)

    def decode(self, encoding="utf-8", errors="strict"):
        return bytes(self).decode(encoding, errors)

    def hex(self, *args):
        return bytes(self).hex(*args)

    def startswith(self, *args):
        return bytes(self).startswith(*args)

    def endswith(self, *args):
        return bytes(self).endswith(*args)

    def find(self, *args):
        return bytes(self).find(*args)

    def __repr__(self):
        return f"Body({bytes(self)!r})"

    def __reduce__(self):
        return (bytes, (bytes(self),))


cdef inline bint _zero_64(const unsigned char *p) noexcept nogil:
    """Whether the 64 bytes at ``p`` are all zero."""
    return (load_u64(p) | load_u64(p + 8) | load_u64(p + 16) | load_u64(p + 24) | load_u64(p + 32)
            | load_u64(p + 40) | load_u64(p + 48) | load_u64(p + 56)) == 0


cdef Py_ssize_t _next_valid(const unsigned char *base, Py_ssize_t pos, Py_ssize_t limit, uint32_t stamp,
                            bint *member_skipped) noexcept nogil:
    """The first offset >= pos holding a valid frame of this file that can start a reading again,
    or -1. A record group's member is passed over (one outside the GROUP frame that checks it is
    a torn group's), and ``member_skipped`` says one was: data of a torn write lies there."""
    cdef Py_ssize_t size = 0
    while pos + FRAME_HEADER_SIZE <= limit:
        if stamp and pos + FRAME_STAMP_AT + 64 <= limit and _zero_64(base + pos + FRAME_STAMP_AT):
            pos += 64       # no stamp of the 8 frame starts here: the zeros of a file's unwritten rest
            continue
        if load_u32(base + pos + FRAME_STAMP_AT) == stamp:
            if validate_frame(base, pos, limit, stamp, &size) == FRAME_VALID:
                if base[pos + FRAME_FLAGS_AT] != GROUP_MEMBER:
                    return pos
                member_skipped[0] = True
                pos += size
                continue
        pos += FRAME_ALIGNMENT
    return -1


cdef Py_ssize_t _group_end(const unsigned char *base, Py_ssize_t pos, Py_ssize_t size, Py_ssize_t limit,
                           uint32_t stamp) noexcept nogil:
    """Where the record group headed by the valid GROUP frame at `pos` (of `size` bytes) ends, or -1
    when the group is not whole: its member frames must fill exactly the length the GROUP frame
    gives, be as many as it says, carry this file's stamp and the member flag, and their bytes
    match its CRC32C. A group a power cut tore (a sector of it never written, or an older one
    left in place) fails here, and no record of it is applied."""
    cdef const unsigned char *body = base + pos + FRAME_HEADER_SIZE
    cdef Py_ssize_t start = pos + size, end, at
    cdef uint32_t count, found = 0, member_bytes
    if load_u32(base + pos + FRAME_BODY_LENGTH_AT) != GROUP_BODY_SIZE or load_u32(body + 12) != 0:
        return -1
    count = load_u32(body)
    member_bytes = load_u32(body + 4)
    if count == 0 or member_bytes % FRAME_ALIGNMENT or member_bytes > <uint64_t>(limit - start):
        return -1
    end = start + member_bytes
    if load_u32(body + 8) != je_crc32c(0, base + start, member_bytes):
        return -1
    at = start
    while at < end:
        if (at + FRAME_HEADER_SIZE > end or load_u32(base + at + FRAME_STAMP_AT) != stamp
                or base[at + FRAME_FLAGS_AT] != GROUP_MEMBER or base[at + FRAME_FLAGS_AT + 1]
                or not is_group_member_kind(base[at + FRAME_KIND_AT])):
            return -1
        at += frame_size(load_u32(base + at + FRAME_BODY_LENGTH_AT))
        found += 1
    if at != end or found != count:
        return -1
    return end


cdef class FrameColumns:
    """Every frame of one file from ``start``, decoded into column buffers the object owns.

    One row per valid frame and one per damaged region followed by valid frames (``check`` not
    VALID, its other fields 0); where valid data ends is ``end_offset`` / ``end_check``, not a row.
    No Python object per row: the columns are typed arrays (exposed as memoryviews), so a file of a
    million records costs a few allocations -- or, made by :func:`checkpointed_columns`, typed views
    of the checkpoint's mapping, which cost no memory of the process's own. The bodies are one bytes object the columns own (a
    scan with ``copy=True``: nothing refers to the scanned buffer afterwards) or, ``mapped``, the
    scanned buffer itself (a :class:`MappedFile`: body ``i`` lies at ``offset[i] +`` the frame
    header's size, and ``body(i)`` is a :class:`Body` view that keeps the file mapped and pinned).
    """

    @property
    def offset(self): return memoryview(self._offset)
    @property
    def size(self): return memoryview(self._size)
    @property
    def check(self): return memoryview(self._check)
    @property
    def kind(self): return memoryview(self._kind)
    @property
    def record_type(self): return memoryview(self._record_type)
    @property
    def record_id(self): return memoryview(self._record_id)
    @property
    def tx_id(self): return memoryview(self._tx_id)
    @property
    def body_offsets(self): return memoryview(self._body_offsets)

    def body(self, Py_ssize_t row):
        """The body of one row (empty for a damaged region)."""
        if row < 0 or row >= self.count:
            raise IndexError(f"row {row} of {self.count}")
        body = _row_body(self, row)
        _columns_whole(self)
        return body

    def __len__(self):
        return self.count

    def __repr__(self):
        return f"FrameColumns(count={self.count}, end_offset={self.end_offset}, end_check={self.end_check})"


cdef bytes _row_bytes(FrameColumns cols, Py_ssize_t row):
    """A row's body as bytes, copied (under the SIGBUS guard when mapped)."""
    return _copy_out(cols._base + _body_start(cols, row), _body_size(cols, row), cols.bodies)


cdef int _grow_rows(RowBuffers *rows) noexcept nogil:
    """Double the room of every column; 0 on success, -1 when memory ran out (nothing is lost)."""
    cdef Py_ssize_t capacity = rows.capacity * 2 if rows.capacity else 4096
    cdef void *p
    if rows.fixed:      # arrays the columns own, sized for every row there can be: never reached
        return -1
    p = realloc(rows.offset, capacity * sizeof(long long))
    if p == NULL: return -1
    rows.offset = <long long *>p
    p = realloc(rows.size, capacity * sizeof(long long))
    if p == NULL: return -1
    rows.size = <long long *>p
    p = realloc(rows.body_offsets, (capacity + 1) * sizeof(long long))
    if p == NULL: return -1
    rows.body_offsets = <long long *>p
    p = realloc(rows.record_id, capacity * sizeof(uint64_t))
    if p == NULL: return -1
    rows.record_id = <uint64_t *>p
    p = realloc(rows.tx_id, capacity * sizeof(uint64_t))
    if p == NULL: return -1
    rows.tx_id = <uint64_t *>p
    p = realloc(rows.check, capacity)
    if p == NULL: return -1
    rows.check = <uint8_t *>p
    p = realloc(rows.kind, capacity)
    if p == NULL: return -1
    rows.kind = <uint8_t *>p
    p = realloc(rows.record_type, capacity)
    if p == NULL: return -1
    rows.record_type = <uint8_t *>p
    rows.capacity = capacity
    return 0


cdef void _free_rows(RowBuffers *rows) noexcept nogil:
    free(rows.offset); free(rows.size); free(rows.body_offsets); free(rows.record_id); free(rows.tx_id)
    free(rows.check); free(rows.kind); free(rows.record_type)


cdef int _scan_rows(const unsigned char *base, Py_ssize_t limit, uint32_t stamp, Py_ssize_t start,
                    RowBuffers *rows, Py_ssize_t *end_offset, FrameCheck *end_check) noexcept nogil:
    """Every frame from ``start`` into ``rows`` (bodies not yet copied); -1 when memory ran out."""
    cdef Py_ssize_t pos = start, size = 0, nxt, n = 0
    cdef Py_ssize_t group_end = start  # [.., group_end): members of a record group checked whole
    cdef bint member_skipped
    cdef long long body_total = 0
    cdef const unsigned char *p
    cdef FrameCheck check
    while True:
        if n == rows.capacity and _grow_rows(rows) < 0:
            rows.count = n
            return -1
        check = validate_frame(base, pos, limit, stamp, &size)
        if check == FRAME_VALID:
            if base[pos + FRAME_KIND_AT] == KIND_GROUP:
                nxt = _group_end(base, pos, size, limit, stamp)
                if nxt < 0:
                    check = FRAME_INVALID      # a torn group: damage from its GROUP frame on
                else:
                    group_end = nxt
            elif base[pos + FRAME_FLAGS_AT] == GROUP_MEMBER and pos >= group_end:
                check = FRAME_INVALID          # a member whose GROUP frame was lost: a torn group
        if check == FRAME_VALID:
            p = base + pos
            if rows.skip_groups and p[FRAME_KIND_AT] == KIND_GROUP:
                rows.groups_skipped += 1
                pos += size
                continue
            rows.offset[n] = pos
            rows.size[n] = size
            rows.check[n] = 0
            rows.kind[n] = p[FRAME_KIND_AT]
            rows.record_type[n] = p[FRAME_RECORD_TYPE_AT]
            rows.record_id[n] = load_u64(p + FRAME_RECORD_ID_AT)
            rows.tx_id[n] = load_u64(p + FRAME_TX_ID_AT)
            rows.body_offsets[n] = body_total
            body_total += load_u32(p + FRAME_BODY_LENGTH_AT)
            n += 1
            pos += size
            continue
        member_skipped = False
        nxt = _next_valid(base, pos + FRAME_ALIGNMENT, limit, stamp, &member_skipped)
        if nxt < 0:
            if member_skipped:
                check = FRAME_INVALID          # past the end lies a torn group's part: a torn write
            break
        rows.offset[n] = pos
        rows.size[n] = nxt - pos
        rows.check[n] = <uint8_t>check
        rows.kind[n] = 0
        rows.record_type[n] = 0
        rows.record_id[n] = 0
        rows.tx_id[n] = 0
        rows.body_offsets[n] = body_total
        n += 1
        pos = nxt
    rows.body_offsets[n] = body_total
    rows.count = n
    end_offset[0] = pos
    end_check[0] = check
    return 0


cdef void _rows_in(RowBuffers *rows, FrameColumns cols) noexcept:
    """Point the scan's row buffers at the columns' own arrays (fixed: written in place)."""
    rows.offset = <long long *>(<array.array>cols._offset).data.as_voidptr
    rows.size = <long long *>(<array.array>cols._size).data.as_voidptr
    rows.body_offsets = <long long *>(<array.array>cols._body_offsets).data.as_voidptr
    rows.record_id = <uint64_t *>(<array.array>cols._record_id).data.as_voidptr
    rows.tx_id = <uint64_t *>(<array.array>cols._tx_id).data.as_voidptr
    rows.check = <uint8_t *>(<array.array>cols._check).data.as_voidptr
    rows.kind = <uint8_t *>(<array.array>cols._kind).data.as_voidptr
    rows.record_type = <uint8_t *>(<array.array>cols._record_type).data.as_voidptr


cdef void _point(FrameColumns cols, const RowBuffers *rows) noexcept:
    """The columns' read pointers at their final buffers."""
    cols.c_offset = rows.offset
    cols.c_size = rows.size
    cols.c_body_offsets = rows.body_offsets
    cols.c_record_id = rows.record_id
    cols.c_tx_id = rows.tx_id
    cols.c_check = rows.check
    cols.c_kind = rows.kind
    cols.c_record_type = rows.record_type


cdef array.array _column(array.array template, const void *data, Py_ssize_t count, size_t item):
    cdef array.array column = array.clone(template, count, False)
    if count:
        memcpy(column.data.as_voidptr, data, count * item)
    return column


cdef struct ScanCall:
    const unsigned char *base
    Py_ssize_t limit
    uint32_t stamp
    Py_ssize_t start
    RowBuffers *rows
    Py_ssize_t *end_offset
    FrameCheck *end_check
    char *dst                   # the bodies' copy: into here, from the rows' offsets


cdef int _scan_rows_call(void *arg) noexcept nogil:
    cdef ScanCall *call = <ScanCall *>arg
    return _scan_rows(call.base, call.limit, call.stamp, call.start, call.rows, call.end_offset, call.end_check)


cdef int _copy_bodies_call(void *arg) noexcept nogil:
    cdef ScanCall *call = <ScanCall *>arg
    cdef RowBuffers *rows = call.rows
    cdef Py_ssize_t i
    for i in range(rows.count):
        if rows.body_offsets[i + 1] > rows.body_offsets[i]:
            memcpy(call.dst + rows.body_offsets[i], call.base + rows.offset[i] + FRAME_HEADER_SIZE,
                   rows.body_offsets[i + 1] - rows.body_offsets[i])
    return 0


cdef _raise_cut(const unsigned char *base, Py_ssize_t limit):
    """The SIGBUS guard caught a read past the file's end: another process cut the mapped file."""
    cdef Py_ssize_t offset = <const unsigned char *>je_bus_fault_address() - base
    raise FileChangedError(f"the file was cut short while it was read: the mapped page at offset {offset} "
                           f"of {limit} bytes is gone", offset=offset if 0 <= offset < limit else None,
                           hint="another process truncated the file; stop it, then read again (what is left "
                                "is reported as a file cut short)")


cdef int guarded_call(int (*fn)(void *) noexcept nogil, void *arg) noexcept nogil:
    """fn(arg) under this module's guard, whose handler knows the checkpoints' patched regions."""
    return je_bus_guarded(fn, arg)


def scan_columns(buffer, uint32_t stamp, Py_ssize_t start, bint copy=True, bint groups=True):
    """Decode every frame of one file from ``start`` into a :class:`FrameColumns`.

    ``groups=False``: a valid GROUP frame (the head that checks a record group whole) makes no row,
    only a count (``groups_skipped``): what a replay reads, for which it means nothing -- a third of
    the rows of a broker's message journal.

    ``copy``: the bodies are copied into one bytes object the columns own; else (a MappedFile or
    bytes ``buffer``) they stay where they are, and the columns hold ``buffer`` (``mapped``).
    The scan and the copy of the bodies run without the GIL (other threads, another file's scan
    among them, go on meanwhile), under the SIGBUS guard (bus_guard.h): a mapped file that another
    process cuts short meanwhile raises FileChangedError. The row buffers of a scan cut that way are
    left unfreed (a jump out of the scan may have left them half-grown): a rare, bounded leak."""
    return scan_file(buffer, stamp, start, copy, groups)


cdef FrameColumns scan_file(buffer, uint32_t stamp, Py_ssize_t start, bint copy, bint groups):
    """scan_columns, for the compiled modules (_replay's replay_file) too."""
    cdef Py_buffer view
    cdef Py_ssize_t limit, n, i, bound, end_offset = start
    cdef FrameCheck end_check = FRAME_ZERO
    cdef RowBuffers rows, scanned
    cdef int status
    cdef ScanCall call
    cdef FrameColumns cols = FrameColumns.__new__(FrameColumns)
    if not copy and type(buffer) is not MappedFile and type(buffer) is not bytes:
        raise TypeError(f"scan_columns(copy=False) leaves the bodies in the buffer: a MappedFile or bytes, "
                        f"not {type(buffer).__name__}")
    memset(&rows, 0, sizeof(RowBuffers))
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        limit = view.len
        # a valid frame takes a header at least, and a damaged region is counted only before a valid frame
        bound = 2 * (max(limit - start, 0) // FRAME_HEADER_SIZE) + 2
        if bound <= SCAN_DIRECT_ROWS_MAX:
            cols._offset = array.clone(_LONGS, bound, False)
            cols._size = array.clone(_LONGS, bound, False)
            cols._body_offsets = array.clone(_LONGS, bound + 1, False)
            cols._record_id = array.clone(_ULONGS, bound, False)
            cols._tx_id = array.clone(_ULONGS, bound, False)
            cols._check = array.clone(_BYTES, bound, False)
            cols._kind = array.clone(_BYTES, bound, False)
            cols._record_type = array.clone(_BYTES, bound, False)
            _rows_in(&rows, cols)
            rows.capacity = bound
            rows.fixed = True
        rows.skip_groups = not groups
        call = ScanCall(base=<const unsigned char *>view.buf, limit=limit, stamp=stamp, start=start, rows=&rows,
                        end_offset=&end_offset, end_check=&end_check, dst=NULL)
        with nogil:
            status = je_bus_guarded(_scan_rows_call, &call)
        if status == JE_BUS_FAULT:
            memset(&rows, 0, sizeof(RowBuffers))
            _raise_cut(call.base, limit)
        if status < 0:
            raise MemoryError(f"no memory for the columns of {rows.count} frames")
        n = rows.count
        if rows.fixed:      # the rows are in the columns already: give back the room they did not use
            for column in (cols._offset, cols._size, cols._record_id, cols._tx_id, cols._check, cols._kind,
                           cols._record_type):
                array.resize(<array.array>column, n)
            array.resize(<array.array>cols._body_offsets, n + 1)
            _rows_in(&rows, cols)       # a resize may have moved them
        else:
            cols._offset = _column(_LONGS, rows.offset, n, sizeof(long long))
            cols._size = _column(_LONGS, rows.size, n, sizeof(long long))
            cols._body_offsets = _column(_LONGS, rows.body_offsets, n + 1, sizeof(long long))
            cols._record_id = _column(_ULONGS, rows.record_id, n, sizeof(uint64_t))
            cols._tx_id = _column(_ULONGS, rows.tx_id, n, sizeof(uint64_t))
            cols._check = _column(_BYTES, rows.check, n, 1)
            cols._kind = _column(_BYTES, rows.kind, n, 1)
            cols._record_type = _column(_BYTES, rows.record_type, n, 1)
        _rows_in(&scanned, cols)
        _point(cols, &scanned)
        cols.count = n
        cols.groups_skipped = rows.groups_skipped
        cols.end_offset = end_offset
        cols.end_check = <int>end_check
        if not copy and rows.body_offsets[n] > 0:     # (columns without a body keep no buffer: they pin nothing)
            cols.bodies = buffer
            cols.mapped = True
            cols._base = call.base
            return cols
        cols.bodies = PyBytes_FromStringAndSize(NULL, rows.body_offsets[n])
        cols._base = <const unsigned char *>PyBytes_AS_STRING(cols.bodies)
        call.dst = PyBytes_AS_STRING(cols.bodies)
        with nogil:
            status = je_bus_guarded(_copy_bodies_call, &call)
        if status == JE_BUS_FAULT:
            _raise_cut(call.base, limit)
        return cols
    finally:
        if not rows.fixed:      # (fixed: the columns' own arrays)
            _free_rows(&rows)
        PyBuffer_Release(&view)


def scan_frames(buffer, uint32_t stamp, Py_ssize_t start):
    """Every frame of one file as (offset, check, kind, user_type, record_id, tx_id, body), from
    :func:`scan_columns`; a damaged region is a row with check != VALID and kind None, and the last
    row says where data ends (its check, ZERO at a clean end). For tools that print row by row."""
    cdef FrameColumns cols = scan_file(buffer, stamp, start, True, True)
    cdef list out = []
    cdef Py_ssize_t i
    for i in range(cols.count):
        if cols.c_check[i]:
            out.append((cols.c_offset[i], cols.c_check[i], None, None, None, None, None))
        else:
            out.append((cols.c_offset[i], 0, cols.c_kind[i],
                        cols.c_record_type[i], cols.c_record_id[i],
                        cols.c_tx_id[i], cols.body(i)))
    out.append((cols.end_offset, cols.end_check, None, None, None, None, None))
    return out
