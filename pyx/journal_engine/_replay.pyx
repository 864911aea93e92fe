# cython: language_level=3
"""Compiled scan decoder and replay: journal files -> live records.

One decoder serves recovery, compaction and the tools, so the format has a
single reader. The Python twin is journal_engine._twin.replay; the rules are
the table in docs/internals/recovery.md.
"""
cimport cython
from cpython.ref cimport PyObject
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython cimport array
from libc.string cimport memcpy, memset
from libc.stdlib cimport realloc, free
import array
from collections.abc import ItemsView, KeysView, Mapping, ValuesView
from cpython.dict cimport PyDict_SetDefault
from journal_engine._livemap cimport LiveMap, advise_huge_pages, find_sorted
from journal_engine._member_slots cimport expose_as_members
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBuffer_FillInfo, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.slice cimport PySlice_Unpack, PySlice_AdjustIndices
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t
from libc.string cimport memcmp
from libc.errno cimport errno
from posix.mman cimport mmap, munmap, PROT_READ, MAP_SHARED, MAP_POPULATE, MAP_FAILED

from journal_engine._codec cimport (
    FRAME_HEADER_SIZE, FRAME_ALIGNMENT, FrameCheck, FRAME_VALID, FRAME_ZERO, FRAME_FOREIGN, FRAME_INVALID,
    FRAME_BODY_LENGTH_AT, FRAME_KIND_AT, FRAME_RECORD_TYPE_AT, FRAME_FLAGS_AT, FRAME_STAMP_AT, FRAME_RECORD_ID_AT,
    FRAME_TX_ID_AT, is_group_member_kind, validate_frame, load_u32, load_u64,
    KIND_ADD, KIND_UPDATE, KIND_DELETE, KIND_ADD_TX, KIND_UPDATE_TX, KIND_DELETE_TX,
    KIND_PREPARE, KIND_COMMIT, KIND_ROLLBACK, KIND_PAD, KIND_GROUP, GROUP_MEMBER, GROUP_BODY_SIZE,
    frame_size, je_crc32c, je_crc32c_init,
)

je_crc32c_init()    # this module's copy of the CRC32C dispatch (crc32c_impl.h is compiled into each user)

cdef extern from "bus_guard.h":
    int JE_BUS_FAULT
    int je_bus_install()
    int je_bus_guarded(int (*fn)(void *) noexcept nogil, void *arg) nogil
    int je_bus_guarded_copy(void *dst, const void *src, size_t n) nogil
    void *je_bus_fault_address() nogil
    int je_bus_patch_register(const void *start, size_t length, int *cut, int fd)
    void je_bus_patch_remove(int slot)
    int je_bus_flag(const int *cut) nogil
    int JE_PATCHED_MAX

import os
from journal_engine.errors import FileChangedError
from journal_engine.limits import CHECKPOINTS_MAPPED_MAX as _CHECKPOINTS_MAPPED_MAX
from journal_engine.limits import SCAN_DIRECT_ROWS_MAX as _SCAN_DIRECT_ROWS_MAX

# the SIGBUS handler's table of patched regions is compiled in; limits.py states its size
if JE_PATCHED_MAX != _CHECKPOINTS_MAPPED_MAX:
    raise ImportError(f"journal_engine._replay was built with {JE_PATCHED_MAX} checkpoint mappings (bus_guard.h), "
                      f"limits.CHECKPOINTS_MAPPED_MAX is {_CHECKPOINTS_MAPPED_MAX}: rebuild it (pip install -e .)")

cdef Py_ssize_t SCAN_DIRECT_ROWS_MAX = _SCAN_DIRECT_ROWS_MAX

#: scan_columns reads a mapped file under a SIGBUS guard: a file another process cuts short during
#: the scan is a FileChangedError, not a dead interpreter (storage/journal/scan.py maps only where this holds)
GUARDS_MAPPED_READS = je_bus_install() == 0

cdef array.array _LONGS = array.array("q")
cdef array.array _ULONGS = array.array("Q")
cdef array.array _BYTES = array.array("B")
cdef array.array _UINTS = array.array("I")

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


@cython.final
cdef class MappedFile:
    """One data file mapped read-only, whole: what the bodies of ``load()`` point into.

    The mapping lives as long as this object, and every :class:`Body` view into it holds it, so it
    is unmapped when the last view goes (never while one lives). While it lives the file is pinned
    (:func:`is_pinned`): the journal's file pool does not recycle it. MAP_POPULATE maps every page in
    one call instead of a fault per 4 KiB."""
    cdef const unsigned char *_base
    cdef readonly Py_ssize_t size
    cdef readonly object path
    cdef object _key

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


@cython.final
cdef class CheckpointMapping:
    """The checkpoint a load took, mapped read-only, whole: its entries and the images of its files'
    columns are read here in place (docs/internals/format.md, "The checkpoint").

    Its name is gone once a load takes it, but another holder of its inode (a hard link, a
    descriptor opened before) can still cut it. Its pages are then not a SIGBUS: the mapping is a
    patched region of the SIGBUS handler (bus_guard.h), whose lost pages read as zeros and set
    ``cut``; whatever reads the columns checks ``cut`` after the read it hands out, so a cut
    checkpoint is a decode (at load) or FileChangedError naming it (after), never zeros taken for
    columns and never a dead interpreter."""
    cdef const unsigned char *_base
    cdef readonly Py_ssize_t size
    cdef readonly object path
    cdef int _cut                       # set by the SIGBUS handler when it patched a page of this mapping
    cdef int _slot
    cdef int _fd                        # kept open: the handler asks it how long the file is now
    cdef uint64_t _trailer              # what the last 8 bytes held when mapped (zeros once cut before them)

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


cdef inline bint _mapping_cut(CheckpointMapping mapping) noexcept:
    """Whether a checkpoint's mapping was cut: the handler patched a page of it, or its trailer (last
    8 bytes) no longer reads what it held -- the zeros past a cut inside the last mapped page raise no
    SIGBUS, so the flag alone would miss them. Read after the reads it vouches for."""
    # (the trailer is 8-byte aligned at the mapping's end: one load)
    return ((<const uint64_t *>(mapping._base + mapping.size - 8))[0] != mapping._trailer
            or je_bus_flag(&mapping._cut))


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


@cython.final
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
    cdef object _owner                  # the MappedFile (or bytes) the view points into
    cdef const unsigned char *_data
    cdef Py_ssize_t _size
    cdef Py_hash_t _hash
    cdef bint _hashed

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


cdef extern from "Python.h":
    Py_ssize_t _borrowed_refcount "Py_REFCNT" (PyObject *o)


cdef inline bint _held_here_only(PyObject *o) noexcept:
    """Whether the one reference to ``o`` is the caller's own (a borrowed look: no reference taken)."""
    return _borrowed_refcount(o) == 1


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


@cython.no_gc
@cython.freelist(64)
cdef class RecordInfo:
    """A live record after replay: its add, then its updates in append order.

    Not tracked by the garbage collector (it cannot form a cycle: ints, bodies -- bytes, or Body
    views that hold only their mapped file -- and a list of (int, body)), so loading a million of
    them triggers no collections.
    """
    cdef readonly unsigned long long record_id
    cdef readonly int record_type
    cdef readonly object body           # bytes, or a Body view into a mapped file (load())
    cdef list _updates

    def __init__(self, unsigned long long record_id, int record_type, body, updates=None):
        self.record_id = record_id
        self.record_type = record_type
        self.body = body
        self._updates = list(updates) if updates else None

    @property
    def updates(self):
        if self._updates is None:
            self._updates = []
        return self._updates

    def __eq__(self, other):
        if not isinstance(other, RecordInfo):
            return NotImplemented
        return (self.record_id == other.record_id and self.record_type == other.record_type
                and self.body == other.body and self.updates == other.updates)

    def __repr__(self):
        return (f"RecordInfo(record_id={self.record_id}, record_type={self.record_type}, "
                f"body={self.body!r}, updates={self.updates!r})")

    def __reduce__(self):
        return (RecordInfo, (self.record_id, self.record_type, self.body, self.updates))


# ``rec.body`` is read once per record by whoever reads a load(): a member descriptor, as a slot's
# (_member_slots.pxd), never NULL once a RecordInfo is made
cdef list _member_names = []
_marker = object()
expose_as_members(RecordInfo, ("body",), RecordInfo(0, 0, _marker), (_marker,), True, _member_names)
del _marker


cdef inline RecordInfo _new_record(uint64_t record_id, int record_type, object body):
    cdef RecordInfo rec = RecordInfo.__new__(RecordInfo)
    rec.record_id = record_id
    rec.record_type = record_type
    rec.body = body
    return rec


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


DEF ROW_BITS = 32
cdef uint64_t ROW_MASK = 0xFFFFFFFF    # typed: a DEF of this literal made every use a Python int operation
cdef uint64_t NO_LOCATION = 0xFFFFFFFFFFFFFFFF
# set in an entry's add location once the record has an update: only then are its first and last
# update written or read (whose pages a journal without updates never touches)
cdef uint64_t UPDATED = 0x8000000000000000

# What a step of the replay on a plain (not transactional) frame did. Steps run without the GIL and
# change nothing unless they return APPLIED; what needs Python (growing a table, making a file's
# chain of updates, an anomaly's message) is done by their callers with the GIL, then the step again.
DEF APPLIED = 0
DEF NEEDS_ROOM = 1       # the entries or the id table are full
DEF ALREADY_LIVE = 2     # an add of an id that is live: an anomaly (or a transaction's re-add)
DEF NOT_LIVE = 3         # an update of an id that is not live: an anomaly
DEF NEEDS_CHAIN = 4      # the record's last update lies in a file whose chain of updates is not made yet
DEF NEEDS_TABLE = 5      # an add whose id is not above the last one: ids are found through the table from here on


cdef struct PlainRows:
    # one file's columns as a run of the replay reads them without the GIL
    const uint8_t *check
    const uint8_t *kind
    const uint8_t *record_type
    const uint64_t *record_id
    const long long *size
    Py_ssize_t count
    Py_ssize_t file_index


cdef inline uint64_t _location(Py_ssize_t file_index, Py_ssize_t row) noexcept nogil:
    """Where a frame lies: (file index << ROW_BITS) | row."""
    return (<uint64_t>file_index << ROW_BITS) | <uint64_t>row


cdef class ReplayState:
    """Live records and open transactions, built file by file in replay order from the columns.

    No Python object per record: a record is an entry in C arrays (its id, the location of its
    add, the bytes of its frames, the first and last of its updates, chained through per-file
    arrays). While every add's id is above the last one (a counter's ids: the common case) an entry
    is found by ``find_sorted`` of the ids and no table is filled; from the first id that is not,
    every live entry goes into a LiveMap used as id -> entry. Taking ``live`` ends the replay: the
    rising ids and their bytes become the journal's live set's base where they lie, or that table
    becomes the live set (id -> bytes) in place; ``records`` -- a read-only mapping that makes a
    RecordInfo (and its body) when one is looked at -- finds an entry by ``find_sorted``, or through
    a table of its own made at its first lookup when ids did not rise.
    """
    cdef public dict transactions    # tx_id -> [ops, xid or None, path, offset]
    cdef public list corrupt          # (path, offset, reason)
    cdef public list anomalies        # (path, offset, reason): legal-looking but inconsistent frames
    cdef public Py_ssize_t frames_read
    cdef public Py_ssize_t replaceable_updates
    cdef public Py_ssize_t adds
    cdef readonly list files          # FrameColumns of every file replayed, by file index
    cdef list _next_update            # per file: array 'Q' row -> location of the record's next update
    cdef LiveMap _table               # id -> entry once ids stopped rising; after the replay the live set (``live``)
    cdef bint _ended                  # ``live`` was taken: the replay is over
    cdef LiveMap _entry_of            # id -> entry after the replay, made when ids were not added in order
    cdef array.array _entry_id, _entry_add, _entry_bytes, _entry_first, _entry_last
    cdef Py_ssize_t _entries, _entry_capacity, _live_entries
    cdef uint64_t **_chains           # per file: _next_update's array's data, or NULL (read without the GIL)
    cdef Py_ssize_t _chains_room
    cdef bint _ids_rising             # every entry's id above the one before: found by find_sorted, no table
    cdef unsigned char _replaceable[256]

    def __init__(self, replaceable=(), Py_ssize_t expected=0):
        """``replaceable``: the user record types whose updates ``replaceable_updates`` counts;
        ``expected``: how many records the replay will hold at most (the tables are sized once)."""
        cdef Py_ssize_t capacity = max(1024, expected)
        self._table = LiveMap(expected)
        self._ended = False
        self._entry_of = None
        self.transactions = {}
        self.corrupt = []
        self.anomalies = []
        self.files = []
        self._next_update = []
        self.frames_read = 0
        self.replaceable_updates = 0
        self.adds = 0
        self._entry_id = array.clone(_ULONGS, capacity, False)
        self._entry_add = array.clone(_ULONGS, capacity, False)
        self._entry_bytes = array.clone(_LONGS, capacity, False)
        self._entry_first = array.clone(_ULONGS, capacity, False)
        self._entry_last = array.clone(_ULONGS, capacity, False)
        self._entries = 0
        self._live_entries = 0
        self._ids_rising = True
        self._entry_capacity = capacity
        # written once, front to back: a fault per 2 MiB of them, not per 4 KiB
        for column in (self._entry_id, self._entry_add, self._entry_bytes, self._entry_first, self._entry_last):
            advise_huge_pages((<array.array>column).data.as_voidptr, capacity * sizeof(uint64_t))
        memset(self._replaceable, 0, 256)
        for user_type in replaceable:
            self._replaceable[<uint8_t>user_type] = 1

    def __dealloc__(self):
        free(self._chains)

    @property
    def records(self):
        """Live records by id: a read-only mapping making each RecordInfo when it is looked at."""
        return LiveRecords(self)

    @property
    def live(self):
        """The live set: record id -> bytes of its frames (add + updates), a LiveMap the journal's
        core takes over. Taking it ends the replay: entries whose ids rose become the live set's
        base where they lie (their bytes its values), else the table of entries becomes it in place."""
        cdef Py_ssize_t entry
        cdef int64_t *sizes = <int64_t *>self._entry_bytes.data.as_voidptr
        if not self._ended:
            if self._ids_rising:
                if self._live_entries != self._entries:     # some were deleted
                    for entry in range(self._entries):
                        if self._entry_add.data.as_ulonglongs[entry] == NO_LOCATION:
                            sizes[entry] = -1
                self._table.take((self._entry_id, self._entry_bytes),
                                 <const uint64_t *>self._entry_id.data.as_voidptr, sizes, self._entries, True)
            else:
                self._table.map_values(sizes, self._entries)
            self._ended = True
        return self._table

    cdef int _check_open(self) except -1:
        if self._ended:
            raise RuntimeError("the replay ended when its live set was taken")
        return 0

    cdef int64_t _live_entry(self, uint64_t record_id) noexcept nogil:
        """The live entry of a record id while the replay runs (or ids rose), or -1."""
        cdef Py_ssize_t entry
        if not self._ids_rising:
            return self._table.get_bytes(record_id)
        entry = find_sorted(<const uint64_t *>self._entry_id.data.as_voidptr, self._entries, record_id)
        if entry < 0 or self._entry_add.data.as_ulonglongs[entry] == NO_LOCATION:
            return -1
        return entry

    cdef int64_t _entry_for(self, uint64_t record_id) except -2:
        """The live entry of a record id, or -1."""
        cdef Py_ssize_t middle
        if self._ids_rising or not self._ended:
            return self._live_entry(record_id)
        if self._entry_of is None:
            self._entry_of = LiveMap(self._live_entries)
            for middle in range(self._entries):
                if self._entry_add.data.as_ulonglongs[middle] != NO_LOCATION:
                    self._entry_of.put(self._entry_id.data.as_ulonglongs[middle], middle)
        return self._entry_of.get_bytes(record_id)

    def replay_file(self, buffer, uint32_t stamp, Py_ssize_t start, path):
        """Scan one file's bytes and replay it: :meth:`replay_columns` of :func:`scan_columns`."""
        return self.replay_columns(scan_columns(buffer, stamp, start), path)

    def replay_columns(self, FrameColumns cols, path):
        """Apply one file's rows in order; returns ``(end_offset, end_check)``. Damaged regions
        followed by valid frames go to ``corrupt``.

        Runs of plain adds, updates and deletes are applied without the GIL (``_plain_run``), so a
        recovery replays one file while other threads scan the next; every other row, and a row a
        run stops at, is applied here with it."""
        cdef Py_ssize_t file_index = len(self.files), row = 0, stopped
        cdef uint8_t check
        cdef PlainRows rows
        cdef bint release = True
        self._check_open()
        self._add_file(cols)
        rows.check = cols.c_check
        rows.kind = cols.c_kind
        rows.record_type = cols.c_record_type
        rows.record_id = cols.c_record_id
        rows.size = cols.c_size
        rows.count = cols.count
        rows.file_index = file_index
        while row < rows.count:
            if release:     # a long run is likely after a long one: then the GIL is worth handing over
                with nogil:
                    stopped = self._plain_run(&rows, row)
            else:
                stopped = self._plain_run(&rows, row)
            release = stopped - row >= 256
            row = stopped
            if row == rows.count:
                break
            check = rows.check[row]
            if check:
                self.corrupt.append((path, cols.c_offset[row], GAP_REASONS[check]))
            else:
                self._apply(cols, file_index, row, path)
            row += 1
        return cols.end_offset, cols.end_check

    cdef int _add_file(self, FrameColumns cols) except -1:
        """A file's columns as the next file index: its rows' locations point there."""
        cdef Py_ssize_t file_index = len(self.files)
        cdef void *p
        if file_index == self._chains_room:
            p = realloc(self._chains, (file_index * 2 + 16) * sizeof(uint64_t *))
            if p == NULL:
                raise MemoryError()
            self._chains = <uint64_t **>p
            self._chains_room = file_index * 2 + 16
        self._chains[file_index] = NULL
        self.frames_read += cols.groups_skipped
        self.files.append(cols)
        self._next_update.append(None)
        return 0

    cdef Py_ssize_t _plain_run(self, const PlainRows *rows, Py_ssize_t row) noexcept nogil:
        """Apply valid plain adds, updates and deletes from ``row`` on, as long as each step is
        APPLIED; returns the first row not applied (``rows.count`` when all were)."""
        cdef uint8_t kind
        cdef int outcome
        cdef Py_ssize_t run_end
        while row < rows.count and not rows.check[row]:
            kind = rows.kind[row]
            if kind == KIND_ADD:
                if self._ids_rising:
                    run_end = self._rising_adds(rows, row)
                    if run_end > row:
                        row = run_end
                        continue
                outcome = self._add_step(rows.record_id[row], _location(rows.file_index, row), rows.size[row])
            elif kind == KIND_UPDATE:
                outcome = self._update_step(rows.record_id[row], _location(rows.file_index, row),
                                            rows.record_type[row], rows.size[row])
            elif kind == KIND_DELETE:
                outcome = self._delete_step(rows.record_id[row])
            else:
                break
            if outcome != APPLIED:
                break
            self.frames_read += 1
            row += 1
        return row

    cdef Py_ssize_t _rising_adds(self, const PlainRows *rows, Py_ssize_t row) noexcept nogil:
        """Valid plain adds from ``row`` on whose ids rise above the last entry's (a counter's
        appends: most of a journal), applied as ``_add_step`` applies them, in one loop that keeps
        the columns and the entries in registers; returns the first row that is not such an add
        (or finds the entries full), which ``_add_step`` then takes."""
        cdef Py_ssize_t entry = self._entries, first = self._entries
        cdef Py_ssize_t stop = min(rows.count, row + self._entry_capacity - self._entries)
        cdef unsigned long long *ids = self._entry_id.data.as_ulonglongs
        cdef unsigned long long *adds = self._entry_add.data.as_ulonglongs
        cdef long long *sizes = self._entry_bytes.data.as_longlongs
        cdef uint64_t location = _location(rows.file_index, row)
        cdef uint64_t record_id
        while row < stop and not rows.check[row] and rows.kind[row] == KIND_ADD:
            record_id = rows.record_id[row]
            if entry and record_id <= ids[entry - 1]:
                break
            ids[entry] = record_id
            adds[entry] = location
            sizes[entry] = rows.size[row]
            entry += 1
            location += 1
            row += 1
        self._entries = entry
        self._live_entries += entry - first
        self.adds += entry - first
        self.frames_read += entry - first
        return row

    def body(self, uint64_t location):
        """The body of the frame at a location (file index, row)."""
        return (<FrameColumns>self.files[<Py_ssize_t>(location >> ROW_BITS)]).body(<Py_ssize_t>(location & ROW_MASK))

    cdef int _add_step(self, uint64_t record_id, uint64_t location, Py_ssize_t size) noexcept nogil:
        """An add of a new id: its entry at index ``_entries``; while ids rise an id above the last
        is new, else the id table maps it there (one walk: found, or inserted). ALREADY_LIVE,
        NEEDS_ROOM or NEEDS_TABLE change nothing."""
        cdef Py_ssize_t entry = self._entries
        if entry == self._entry_capacity:
            return NEEDS_ROOM
        if self._ids_rising:
            if entry and record_id <= self._entry_id.data.as_ulonglongs[entry - 1]:
                return NEEDS_TABLE
        elif not self._table.has_room():
            return NEEDS_ROOM
        elif self._table.put_new_in_room(record_id, entry) >= 0:
            return ALREADY_LIVE
        self._entry_id.data.as_ulonglongs[entry] = record_id
        self._entry_add.data.as_ulonglongs[entry] = location
        self._entry_bytes.data.as_longlongs[entry] = size
        self._entries += 1
        self._live_entries += 1
        self.adds += 1
        return APPLIED

    cdef int _update_step(self, uint64_t record_id, uint64_t location, uint8_t user_type,
                          Py_ssize_t size) noexcept nogil:
        """An update chained after its record's last one. NOT_LIVE or NEEDS_CHAIN change nothing."""
        cdef int64_t entry = self._live_entry(record_id)
        cdef uint64_t last
        cdef uint64_t *chain
        if entry < 0:
            return NOT_LIVE
        if _has_updates(self, entry):
            last = self._entry_last.data.as_ulonglongs[entry]
            chain = self._chains[last >> ROW_BITS]
            if chain == NULL:
                return NEEDS_CHAIN
            chain[last & ROW_MASK] = location
        else:
            self._entry_first.data.as_ulonglongs[entry] = location
            self._entry_add.data.as_ulonglongs[entry] |= UPDATED
        self._entry_last.data.as_ulonglongs[entry] = location
        self._entry_bytes.data.as_longlongs[entry] += size
        if self._replaceable[user_type]:
            self.replaceable_updates += 1
        return APPLIED

    cdef int _delete_step(self, uint64_t record_id) noexcept nogil:
        """A delete: the record's entry is no longer live (of an id that is not live: nothing)."""
        cdef int64_t entry = self._live_entry(record_id) if self._ids_rising else self._table.remove(record_id)
        if entry >= 0:
            self._entry_add.data.as_ulonglongs[entry] = NO_LOCATION
            self._live_entries -= 1
        return APPLIED

    cdef int _make_room(self) except -1:
        """Room for one more entry and one more id in the table (NEEDS_ROOM)."""
        if self._entries == self._entry_capacity:
            self._entry_capacity *= 2
            for column in (self._entry_id, self._entry_add, self._entry_bytes, self._entry_first, self._entry_last):
                array.resize(column, self._entry_capacity)
        if not self._ids_rising and not self._table.has_room():
            self._table._grow()
        return 0

    cdef int _index_entries(self) except -1:
        """Ids stopped rising (NEEDS_TABLE): every live entry goes into the id table, which finds
        them from here on."""
        cdef Py_ssize_t entry
        for entry in range(self._entries):
            if self._entry_add.data.as_ulonglongs[entry] != NO_LOCATION:
                self._table.put(self._entry_id.data.as_ulonglongs[entry], entry)
        self._ids_rising = False
        return 0

    cdef int _add(self, uint64_t record_id, uint64_t location, Py_ssize_t size, object path,
                  Py_ssize_t offset, bint transactional) except -1:
        cdef int outcome = self._add_step(record_id, location, size)
        cdef int64_t entry
        while outcome == NEEDS_ROOM or outcome == NEEDS_TABLE:
            if outcome == NEEDS_ROOM:
                self._make_room()
            else:
                self._index_entries()
            outcome = self._add_step(record_id, location, size)
        if outcome == ALREADY_LIVE:
            if not transactional:
                self.anomalies.append((path, offset, f"add of record {record_id}, which is already live"))
            entry = self._live_entry(record_id)
            self._entry_add.data.as_ulonglongs[entry] = location      # replaced where it stands, no update yet
            self._entry_bytes.data.as_longlongs[entry] = size
            self.adds += 1
        return 0

    cdef int _update(self, uint64_t record_id, uint64_t location, uint8_t user_type, Py_ssize_t size,
                     object path, Py_ssize_t offset, bint transactional) except -1:
        cdef int outcome = self._update_step(record_id, location, user_type, size)
        if outcome == NEEDS_CHAIN:
            self._make_chain(<Py_ssize_t>(self._entry_last.data.as_ulonglongs[self._live_entry(record_id)] >> ROW_BITS))
            outcome = self._update_step(record_id, location, user_type, size)
        if outcome == NOT_LIVE:
            self.anomalies.append((path, offset, f"transactional update of record {record_id}, which is not live"
                                   if transactional else f"update of record {record_id}, which is not live"))
        return 0

    cdef int _make_chain(self, Py_ssize_t file_index) except -1:
        """The file's row -> next-update array, made the first time one of its rows is chained."""
        cdef array.array chain = self._next_update[file_index]
        cdef Py_ssize_t rows
        if chain is None:
            rows = (<FrameColumns>self.files[file_index]).count
            chain = array.clone(_ULONGS, rows, False)
            memset(chain.data.as_voidptr, 0xFF, rows * sizeof(uint64_t))
            self._next_update[file_index] = chain
            self._chains[file_index] = <uint64_t *>chain.data.as_voidptr
        return 0

    cdef int _apply(self, FrameColumns cols, Py_ssize_t file_index, Py_ssize_t row, object path) except -1:
        cdef uint8_t kind = cols.c_kind[row]
        cdef uint8_t user_type = cols.c_record_type[row]
        cdef uint64_t record_id = cols.c_record_id[row]
        cdef uint64_t tx_id = cols.c_tx_id[row]
        cdef Py_ssize_t offset = cols.c_offset[row]
        cdef Py_ssize_t size = cols.c_size[row]
        cdef Py_ssize_t body_len
        cdef bytes body         # a transaction boundary's body, copied out (under the guard when mapped)
        cdef uint64_t location = _location(file_index, row)
        self.frames_read += 1
        if kind == KIND_ADD:
            self._add(record_id, location, size, path, offset, False)
        elif kind == KIND_UPDATE:
            self._update(record_id, location, user_type, size, path, offset, False)
        elif kind == KIND_DELETE:
            self._delete_step(record_id)
        elif kind == KIND_ADD_TX or kind == KIND_UPDATE_TX or kind == KIND_DELETE_TX:
            tx = self.transactions.get(tx_id)
            if tx is None:
                tx = [[], None, path, offset]
                self.transactions[tx_id] = tx
            tx[0].append((kind, record_id, user_type, location, size))
        elif kind == KIND_PREPARE:
            tx = self.transactions.get(tx_id)
            if tx is None:
                tx = [[], None, path, offset]
                self.transactions[tx_id] = tx
            body = _row_bytes(cols, row)
            body_len = len(body)
            if body_len < 4:   # the record count is missing: never written so
                self.corrupt.append((path, offset, f"transaction {tx_id} prepared with a {body_len}-byte body, "
                                                   f"shorter than its record count; it is not returned"))
                del self.transactions[tx_id]
                return 0
            expected = load_u32(<const unsigned char *>PyBytes_AS_STRING(body))
            if expected != len(tx[0]):
                self.corrupt.append((path, offset, f"transaction {tx_id} prepared with {expected} records, "
                                                   f"{len(tx[0])} found; it is not returned"))
                del self.transactions[tx_id]
                return 0
            tx[1] = body[4:]
            tx[2] = path
            tx[3] = offset
        elif kind == KIND_COMMIT:
            tx = self.transactions.pop(tx_id, None)
            if tx is None:
                return 0   # its records were compacted away already: legal
            body = _row_bytes(cols, row)
            expected = load_u32(<const unsigned char *>PyBytes_AS_STRING(body)) if len(body) >= 4 else 0
            if expected != len(tx[0]):
                self.corrupt.append((path, offset, f"transaction {tx_id} committed with {expected} records, "
                                                   f"{len(tx[0])} found; the transaction is discarded"))
                return 0
            self.apply_ops(tx[0], path, offset)
        elif kind == KIND_ROLLBACK:
            self.transactions.pop(tx_id, None)
        return 0

    def apply_ops(self, list ops, path=None, Py_ssize_t offset=0):
        """Apply a committed transaction's ``(kind, record_id, user_type, location, frame_bytes)`` in order."""
        self._check_open()
        for kind, record_id, user_type, location, size in ops:
            if kind == KIND_ADD_TX:
                self._add(record_id, location, size, path, offset, True)
            elif kind == KIND_UPDATE_TX:
                self._update(record_id, location, user_type, size, path, offset, True)
            else:
                self._delete_step(record_id)

    cdef RecordInfo _record(self, Py_ssize_t entry, RecordInfo spare=None):
        """The RecordInfo of one live entry, its bodies copied out of the columns (or views into
        them). ``spare``: a RecordInfo nothing else refers to, made again into this one instead of
        a new one (and its body too, when nothing else refers to that)."""
        cdef uint64_t location = _add_location(self, entry)
        cdef uint64_t last
        cdef FrameColumns cols = <FrameColumns>self.files[<Py_ssize_t>(location >> ROW_BITS)]
        cdef Py_ssize_t row = <Py_ssize_t>(location & ROW_MASK)
        cdef RecordInfo rec
        cdef list updates
        if spare is None:
            rec = _new_record(self._entry_id.data.as_ulonglongs[entry], cols.c_record_type[row],
                              _row_body(cols, row))
        else:
            rec = spare
            rec.record_id = self._entry_id.data.as_ulonglongs[entry]
            rec.record_type = cols.c_record_type[row]
            rec._updates = None
            if cols.mapped and type(rec.body) is Body and _held_here_only(<PyObject *>rec.body):
                _point_body(<Body>rec.body, cols.bodies, cols._base + _body_start(cols, row), _body_size(cols, row))
            else:
                rec.body = _row_body(cols, row)
        _columns_whole(cols)
        if _has_updates(self, entry):
            location = self._entry_first.data.as_ulonglongs[entry]
            last = self._entry_last.data.as_ulonglongs[entry]
            updates = []
            while True:
                cols = <FrameColumns>self.files[<Py_ssize_t>(location >> ROW_BITS)]
                row = <Py_ssize_t>(location & ROW_MASK)
                updates.append((cols.c_record_type[row], _row_body(cols, row)))
                _columns_whole(cols)
                if location == last:
                    break
                location = _chained_after(self, location)
            rec._updates = updates
        return rec


cdef inline bint _has_updates(ReplayState state, Py_ssize_t entry) noexcept nogil:
    """Whether a live entry's record has updates (then its first and last are set)."""
    return (state._entry_add.data.as_ulonglongs[entry] & UPDATED) != 0


cdef inline uint64_t _add_location(ReplayState state, Py_ssize_t entry) noexcept:
    """Where a live entry's add lies."""
    return state._entry_add.data.as_ulonglongs[entry] & ~UPDATED


cdef inline uint64_t _chained_after(ReplayState state, uint64_t location) noexcept:
    """The location of the update after the one at ``location``, in its record's chain."""
    return (<array.array>state._next_update[<Py_ssize_t>(location >> ROW_BITS)]).data.as_ulonglongs[location & ROW_MASK]


cdef class LiveRecords:
    """The live records of a replay by id: a read-only Mapping (registered as one) whose values
    are made when looked at. Iterates in the order the records were added, like the dict it
    replaces."""
    cdef ReplayState _state

    def __init__(self, ReplayState state not None):
        self._state = state

    def __len__(self):
        return self._state._live_entries

    def __contains__(self, key):
        if not isinstance(key, int) or key < 0 or key > 0xFFFFFFFFFFFFFFFF:
            return False
        return self._state._entry_for(key) >= 0

    def __getitem__(self, key):
        cdef int64_t entry
        if not isinstance(key, int) or key < 0 or key > 0xFFFFFFFFFFFFFFFF:
            raise KeyError(key)
        entry = self._state._entry_for(key)
        if entry < 0:
            raise KeyError(key)
        return self._state._record(entry)

    def get(self, key, default=None):
        try:
            return self[key]
        except KeyError:
            return default

    def __iter__(self):
        return _EntryIterator(self._state, 0)

    def keys(self):
        return KeysView(self)

    def values(self):
        return _LiveValues(self)

    def items(self):
        return _LiveItems(self)

    def _values(self):
        return _EntryIterator(self._state, 1)

    def _items(self):
        return _EntryIterator(self._state, 2)

    def __eq__(self, other):
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and all(key in other and other[key] == value for key, value in self.items())

    def __repr__(self):
        return f"<LiveRecords: {len(self)} live records>"


Mapping.register(LiveRecords)


@cython.final
cdef class _EntryIterator:
    """Walks the live entries in the order they were added: ids (0), RecordInfos (1) or pairs (2).

    A RecordInfo it made that nobody holds any more when a later one is due (a pass that reads
    each record and lets it go) is made again into that one, its Body too, instead of both freed
    and made anew -- as CPython's dict items iterator reuses its tuple: nothing can tell, since
    nothing refers to it. Whatever the caller keeps is never touched. It keeps the last two it
    made and offers the older: a ``for`` loop's variable still holds the one before while the
    next is made."""
    cdef ReplayState _state
    cdef Py_ssize_t _entry
    cdef int _what
    cdef RecordInfo _older, _newer

    def __cinit__(self, ReplayState state, int what):
        self._state = state
        self._entry = 0
        self._what = what

    def __iter__(self):
        return self

    def __next__(self):
        cdef ReplayState state = self._state
        cdef Py_ssize_t entry = self._entry
        cdef RecordInfo rec
        while entry < state._entries and state._entry_add.data.as_ulonglongs[entry] == NO_LOCATION:
            entry += 1
        if entry >= state._entries:
            self._entry = entry
            raise StopIteration
        self._entry = entry + 1
        if self._what == 0:
            return state._entry_id.data.as_ulonglongs[entry]
        if self._older is not None and _held_here_only(<PyObject *>self._older):
            rec = state._record(entry, self._older)
        else:
            rec = state._record(entry)
        self._older = self._newer
        self._newer = rec
        if self._what == 1:
            return rec
        return (rec.record_id, rec)


@cython.final
cdef class RecordColumns:
    """Live records as columns, in the order they were added, for a reader that wants no Python
    object per record (the message store's recovery). Record ``i``: ``record_id[i]`` (array 'Q'),
    ``record_type[i]`` ('B'), its body ``buffers[body_buffer[i]][body_start[i]:body_end[i]]``
    ('I', 'q', 'q'), and its updates the rows ``update_first[i]`` to ``update_first[i + 1]`` ('q')
    of ``update_type``, ``update_buffer``, ``update_start``, ``update_end``. ``buffers``: bytes
    objects the columns own (a journal's: the bodies of each file it read)."""
    cdef readonly array.array record_id, record_type, body_buffer, body_start, body_end
    cdef readonly array.array update_first, update_type, update_buffer, update_start, update_end
    cdef readonly list buffers

    def __len__(self):
        return len(self.record_id)

    def __repr__(self):
        return f"<RecordColumns: {len(self.record_id)} records, {len(self.update_type)} updates>"


cdef RecordColumns _empty_columns(Py_ssize_t records, Py_ssize_t updates, list buffers):
    cdef RecordColumns out = RecordColumns.__new__(RecordColumns)
    out.record_id = array.clone(_ULONGS, records, False)
    out.record_type = array.clone(_BYTES, records, False)
    out.body_buffer = array.clone(_UINTS, records, False)
    out.body_start = array.clone(_LONGS, records, False)
    out.body_end = array.clone(_LONGS, records, False)
    out.update_first = array.clone(_LONGS, records + 1, False)
    out.update_type = array.clone(_BYTES, updates, False)
    out.update_buffer = array.clone(_UINTS, updates, False)
    out.update_start = array.clone(_LONGS, updates, False)
    out.update_end = array.clone(_LONGS, updates, False)
    out.buffers = buffers
    return out


cdef RecordColumns _live_columns(ReplayState state):
    """The live entries of a replay as RecordColumns, pointing into the bodies of its files."""
    cdef Py_ssize_t entry, n = 0, updates = 0, i = 0, u = 0, row
    cdef uint64_t location, last
    cdef FrameColumns cols
    cdef RecordColumns out
    for entry in range(state._entries):     # first pass: how many records and updates
        if state._entry_add.data.as_ulonglongs[entry] == NO_LOCATION:
            continue
        n += 1
        if _has_updates(state, entry):
            location = state._entry_first.data.as_ulonglongs[entry]
            last = state._entry_last.data.as_ulonglongs[entry]
            while True:
                updates += 1
                if location == last:
                    break
                location = _chained_after(state, location)
    out = _empty_columns(n, updates, [(<FrameColumns>cols).bodies for cols in state.files])
    # a body of the columns: buffers[file][start:end], start where the file's columns hold it
    for entry in range(state._entries):
        if state._entry_add.data.as_ulonglongs[entry] == NO_LOCATION:
            continue
        location = _add_location(state, entry)
        cols = <FrameColumns>state.files[<Py_ssize_t>(location >> ROW_BITS)]
        row = <Py_ssize_t>(location & ROW_MASK)
        out.record_id.data.as_ulonglongs[i] = state._entry_id.data.as_ulonglongs[entry]
        out.record_type.data.as_uchars[i] = cols.c_record_type[row]
        out.body_buffer.data.as_uints[i] = <unsigned int>(location >> ROW_BITS)
        out.body_start.data.as_longlongs[i] = _body_start(cols, row)
        out.body_end.data.as_longlongs[i] = _body_start(cols, row) + _body_size(cols, row)
        out.update_first.data.as_longlongs[i] = u
        if _has_updates(state, entry):
            location = state._entry_first.data.as_ulonglongs[entry]
            last = state._entry_last.data.as_ulonglongs[entry]
            while True:
                cols = <FrameColumns>state.files[<Py_ssize_t>(location >> ROW_BITS)]
                row = <Py_ssize_t>(location & ROW_MASK)
                out.update_type.data.as_uchars[u] = cols.c_record_type[row]
                out.update_buffer.data.as_uints[u] = <unsigned int>(location >> ROW_BITS)
                out.update_start.data.as_longlongs[u] = _body_start(cols, row)
                out.update_end.data.as_longlongs[u] = _body_start(cols, row) + _body_size(cols, row)
                u += 1
                if location == last:
                    break
                location = _chained_after(state, location)
        i += 1
    out.update_first.data.as_longlongs[n] = u
    for cols in state.files:
        _columns_whole(cols)
    return out


def record_columns(records):
    """Live records (``LoadResult.records``, or any mapping of id -> RecordInfo) as
    :class:`RecordColumns`: straight from the replay's columns for the journal's own mapping, else
    one buffer per body; None when a body is neither bytes nor a Body view."""
    cdef Py_ssize_t n, updates = 0, i = 0, u = 0
    cdef RecordColumns out
    cdef list buffers = []
    if isinstance(records, LiveRecords):
        return _live_columns((<LiveRecords>records)._state)
    recs = list(records.values())
    for rec in recs:
        updates += len(rec.updates)
    n = len(recs)
    out = _empty_columns(n, updates, buffers)
    for rec in recs:
        body = rec.body
        if type(body) is not bytes and type(body) is not Body:
            return None
        out.record_id.data.as_ulonglongs[i] = rec.record_id
        out.record_type.data.as_uchars[i] = rec.record_type
        out.body_buffer.data.as_uints[i] = len(buffers)
        out.body_start.data.as_longlongs[i] = 0
        out.body_end.data.as_longlongs[i] = len(body)
        out.update_first.data.as_longlongs[i] = u
        buffers.append(body)
        for update_type, update_body in rec.updates:
            if type(update_body) is not bytes and type(update_body) is not Body:
                return None
            out.update_type.data.as_uchars[u] = update_type
            out.update_buffer.data.as_uints[u] = len(buffers)
            out.update_start.data.as_longlongs[u] = 0
            out.update_end.data.as_longlongs[u] = len(update_body)
            buffers.append(update_body)
            u += 1
        i += 1
    out.update_first.data.as_longlongs[n] = u
    return out


class _LiveValues(ValuesView):
    def __iter__(self):
        return self._mapping._values()


class _LiveItems(ItemsView):
    def __iter__(self):
        return self._mapping._items()


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


cdef inline int _columns_whole(FrameColumns cols) except -1:
    """After a read of columns that lie in a checkpoint's mapping: FileChangedError naming the
    checkpoint when another process cut it (the read may have seen zeros), else nothing."""
    if cols._checkpoint is not None and _mapping_cut(cols._checkpoint):
        _raise_checkpoint_cut(cols._checkpoint)
    return 0


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


cdef inline bytes _row_bytes(FrameColumns cols, Py_ssize_t row):
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
        call.base = <const unsigned char *>view.buf
        call.limit = limit
        call.stamp = stamp
        call.start = start
        call.rows = &rows
        call.end_offset = &end_offset
        call.end_check = &end_check
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
    cdef FrameColumns cols = scan_columns(buffer, stamp, start)
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


# ----- a file's columns in a checkpoint (storage/journal/checkpoint.py) --------------------------------------------

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
        call.data = data._base
        call.data_size = data.size
        call.image = <const unsigned char *>view.buf
        call.count = count
        call.start = start
        call.end_offset = end_offset
        call.data_crc = data_crc
        call.image_crc = image_crc
        call.stamp = stamp
        call.groups_skipped = groups_skipped
        with nogil:
            status = je_bus_guarded(_check_image_call, &call)
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
        status = je_bus_guarded(_checksum_call, &call)
    if status == JE_BUS_FAULT:
        _raise_cut(data._base, data.size)
    return call.crc
