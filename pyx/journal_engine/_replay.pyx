# cython: language_level=3
"""Compiled scan decoder and replay: journal files -> live records.

One decoder serves recovery, compaction and the tools, so the format has a
single reader. The Python twin is journal_engine.storage.replay; the rules are
the table in docs/internals/recovery.md.
"""
cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython cimport array
from libc.string cimport memcpy
import array
from cpython.dict cimport PyDict_SetDefault
from journal_engine._livemap cimport LiveMap
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.stdint cimport uint8_t, uint32_t, uint64_t

from journal_engine._codec cimport (
    FRAME_HEADER_SIZE, FRAME_ALIGNMENT, FrameCheck, FRAME_VALID, FRAME_ZERO, FRAME_FOREIGN, FRAME_INVALID,
    validate_frame, load_u32, load_u64,
    KIND_ADD, KIND_UPDATE, KIND_DELETE, KIND_ADD_TX, KIND_UPDATE_TX, KIND_DELETE_TX,
    KIND_PREPARE, KIND_COMMIT, KIND_ROLLBACK, KIND_PAD,
)

_GAP_REASONS = {
    FRAME_ZERO: "unwritten gap followed by valid records",
    FRAME_FOREIGN: "bytes of another file id followed by valid records",
    FRAME_INVALID: "damaged frame (bad checksum, length or kind) followed by valid records",
}


@cython.no_gc
@cython.freelist(64)
cdef class RecordInfo:
    """A live record after replay: its add, then its updates in append order.

    Not tracked by the garbage collector (it cannot form a cycle: ints, bytes and a
    list of (int, bytes)), so loading a million of them triggers no collections.
    """
    cdef readonly unsigned long long record_id
    cdef readonly int record_type
    cdef readonly bytes body
    cdef list _updates

    def __init__(self, unsigned long long record_id, int record_type, bytes body, updates=None):
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


cdef inline RecordInfo _new_record(uint64_t record_id, int record_type, bytes body):
    cdef RecordInfo rec = RecordInfo.__new__(RecordInfo)
    rec.record_id = record_id
    rec.record_type = record_type
    rec.body = body
    return rec


cdef Py_ssize_t _next_valid(const unsigned char *base, Py_ssize_t pos, Py_ssize_t limit, uint32_t stamp) noexcept nogil:
    """The first offset >= pos holding a valid frame of this file, or -1."""
    cdef Py_ssize_t size = 0
    while pos + FRAME_HEADER_SIZE <= limit:
        if load_u32(base + pos + 12) == stamp:
            if validate_frame(base, pos, limit, stamp, &size) == FRAME_VALID:
                return pos
        pos += FRAME_ALIGNMENT
    return -1


cdef class ReplayState:
    """Live records and open transactions, built file by file in replay order."""
    cdef public dict records
    cdef public dict transactions    # tx_id -> [ops, xid or None, path, offset]
    cdef public list corrupt          # (path, offset, reason)
    cdef public list anomalies        # (path, offset, reason): legal-looking but inconsistent frames
    cdef public Py_ssize_t frames_read
    cdef public Py_ssize_t replaceable_updates
    cdef public Py_ssize_t adds
    cdef readonly LiveMap live        # record id -> bytes of its frames (add + updates)
    cdef object _replaceable

    def __init__(self, replaceable=()):
        self.live = LiveMap()
        self.records = {}
        self.transactions = {}
        self.corrupt = []
        self.anomalies = []
        self.frames_read = 0
        self.replaceable_updates = 0
        self.adds = 0
        self._replaceable = frozenset(replaceable)

    def replay_file(self, buffer, uint32_t stamp, Py_ssize_t start, path):
        """Apply every valid frame of one file; returns (end_offset, end_check).

        end_offset is where valid data ends (the append position); end_check says
        what lies there (ZERO, FOREIGN or INVALID). Damage followed by valid frames
        is recorded in `corrupt` and skipped over, never treated as the end.
        """
        cdef Py_buffer view
        cdef const unsigned char *base
        cdef Py_ssize_t limit, pos = start, size = 0, nxt
        cdef FrameCheck check
        PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
        try:
            base = <const unsigned char *>view.buf
            limit = view.len
            while True:
                check = validate_frame(base, pos, limit, stamp, &size)
                if check == FRAME_VALID:
                    self._apply(base + pos, size, path, pos)
                    pos += size
                    continue
                with nogil:
                    nxt = _next_valid(base, pos + FRAME_ALIGNMENT, limit, stamp)
                if nxt < 0:
                    return pos, <int>check
                self.corrupt.append((path, pos, _GAP_REASONS[<int>check]))
                pos = nxt
        finally:
            PyBuffer_Release(&view)

    cdef int _apply(self, const unsigned char *p, Py_ssize_t size, object path, Py_ssize_t offset) except -1:
        cdef uint8_t kind = p[8]
        cdef int user_type = p[9]
        cdef uint32_t body_len = load_u32(p + 4)
        cdef uint64_t record_id = load_u64(p + 16)
        cdef uint64_t tx_id = load_u64(p + 24)
        cdef RecordInfo rec
        cdef object obj
        cdef bytes body
        self.frames_read += 1
        if kind == KIND_ADD:
            body = PyBytes_FromStringAndSize(<const char *>p + FRAME_HEADER_SIZE, body_len)
            key = record_id
            rec = _new_record(record_id, user_type, body)
            if <object>PyDict_SetDefault(self.records, key, rec) is not rec:
                self.anomalies.append((path, offset, f"add of record {record_id}, which is already live"))
                self.records[key] = rec
            self.live.put(record_id, size)
            self.adds += 1
        elif kind == KIND_UPDATE:
            obj = self.records.get(record_id)
            if obj is None:
                self.anomalies.append((path, offset, f"update of record {record_id}, which is not live"))
                return 0
            rec = <RecordInfo>obj
            body = PyBytes_FromStringAndSize(<const char *>p + FRAME_HEADER_SIZE, body_len)
            if rec._updates is None:
                rec._updates = [(user_type, body)]
            else:
                rec._updates.append((user_type, body))
            self.live.add_bytes(record_id, size)
            if user_type in self._replaceable:
                self.replaceable_updates += 1
        elif kind == KIND_DELETE:
            self.records.pop(record_id, None)
            self.live.remove(record_id)
        elif kind == KIND_ADD_TX or kind == KIND_UPDATE_TX or kind == KIND_DELETE_TX:
            body = PyBytes_FromStringAndSize(<const char *>p + FRAME_HEADER_SIZE, body_len)
            tx = self.transactions.get(tx_id)
            if tx is None:
                tx = [[], None, path, offset]
                self.transactions[tx_id] = tx
            tx[0].append((kind, record_id, user_type, body, size))
        elif kind == KIND_PREPARE:
            tx = self.transactions.get(tx_id)
            if tx is None:
                tx = [[], None, path, offset]
                self.transactions[tx_id] = tx
            if body_len < 4:   # the record count is missing: never written so (and body_len - 4 would wrap)
                self.corrupt.append((path, offset, f"transaction {tx_id} prepared with a {body_len}-byte body, "
                                                   f"shorter than its record count; it is not returned"))
                del self.transactions[tx_id]
                return 0
            expected = load_u32(p + FRAME_HEADER_SIZE)
            if expected != len(tx[0]):
                self.corrupt.append((path, offset, f"transaction {tx_id} prepared with {expected} records, "
                                                   f"{len(tx[0])} found; it is not returned"))
                del self.transactions[tx_id]
                return 0
            tx[1] = PyBytes_FromStringAndSize(<const char *>p + FRAME_HEADER_SIZE + 4, body_len - 4)
            tx[2] = path
            tx[3] = offset
        elif kind == KIND_COMMIT:
            tx = self.transactions.pop(tx_id, None)
            if tx is None:
                return 0   # its records were compacted away already: legal
            expected = load_u32(p + FRAME_HEADER_SIZE) if body_len >= 4 else 0
            if expected != len(tx[0]):
                self.corrupt.append((path, offset, f"transaction {tx_id} committed with {expected} records, "
                                                   f"{len(tx[0])} found; the transaction is discarded"))
                return 0
            self.apply_ops(tx[0], path, offset)
        elif kind == KIND_ROLLBACK:
            self.transactions.pop(tx_id, None)
        return 0

    def apply_ops(self, list ops, path=None, Py_ssize_t offset=0):
        """Apply a committed transaction's records, in order."""
        cdef RecordInfo rec
        for kind, record_id, user_type, body, size in ops:
            if kind == KIND_ADD_TX:
                self.records[record_id] = _new_record(record_id, user_type, body)
                self.live.put(record_id, size)
                self.adds += 1
            elif kind == KIND_UPDATE_TX:
                obj = self.records.get(record_id)
                if obj is None:
                    self.anomalies.append((path, offset, f"transactional update of record {record_id}, "
                                                         f"which is not live"))
                    continue
                rec = <RecordInfo>obj
                rec.updates.append((user_type, body))
                self.live.add_bytes(record_id, size)
                if user_type in self._replaceable:
                    self.replaceable_updates += 1
            else:
                self.records.pop(record_id, None)
                self.live.remove(record_id)


cdef class FrameColumns:
    """Every frame of one file from ``start``, decoded into column buffers the object owns.

    One row per valid frame and one per damaged region followed by valid frames (``check`` not
    VALID, its other fields 0); where valid data ends is ``end_offset`` / ``end_check``, not a row.
    No Python object per row: the columns are typed arrays (exposed as memoryviews) and the bodies
    one bytes object, so a file of a million records costs a few allocations. Nothing refers to the
    scanned buffer afterwards, so the file may be recycled or truncated.
    """
    cdef readonly Py_ssize_t count
    cdef readonly Py_ssize_t end_offset
    cdef readonly int end_check
    cdef readonly bytes bodies
    cdef array.array _offset, _size, _check, _kind, _record_type, _record_id, _tx_id, _body_offsets

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
        return self.bodies[self._body_offsets.data.as_longlongs[row]:self._body_offsets.data.as_longlongs[row + 1]]

    def __len__(self):
        return self.count

    def __repr__(self):
        return f"FrameColumns(count={self.count}, end_offset={self.end_offset}, end_check={self.end_check})"


cdef int _reserve(FrameColumns cols, Py_ssize_t rows) except -1:
    """Room for ``rows`` rows in every column (the body offsets keep one more)."""
    array.resize(cols._offset, rows)
    array.resize(cols._size, rows)
    array.resize(cols._check, rows)
    array.resize(cols._kind, rows)
    array.resize(cols._record_type, rows)
    array.resize(cols._record_id, rows)
    array.resize(cols._tx_id, rows)
    array.resize(cols._body_offsets, rows + 1)
    return 0


cdef array.array _LONGS = array.array("q")
cdef array.array _ULONGS = array.array("Q")
cdef array.array _BYTES = array.array("B")


def scan_columns(buffer, uint32_t stamp, Py_ssize_t start):
    """Decode every frame of one file from ``start`` into a :class:`FrameColumns`."""
    cdef Py_buffer view
    cdef const unsigned char *base
    cdef const unsigned char *p
    cdef Py_ssize_t limit, pos = start, size = 0, nxt, n = 0, capacity = 1024, body_total = 0, i
    cdef long long *body_at
    cdef char *dst
    cdef FrameCheck check
    cdef FrameColumns cols = FrameColumns.__new__(FrameColumns)
    cols._offset = array.clone(_LONGS, 0, False)
    cols._size = array.clone(_LONGS, 0, False)
    cols._check = array.clone(_BYTES, 0, False)
    cols._kind = array.clone(_BYTES, 0, False)
    cols._record_type = array.clone(_BYTES, 0, False)
    cols._record_id = array.clone(_ULONGS, 0, False)
    cols._tx_id = array.clone(_ULONGS, 0, False)
    cols._body_offsets = array.clone(_LONGS, 0, False)
    _reserve(cols, capacity)
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        base = <const unsigned char *>view.buf
        limit = view.len
        while True:
            if n == capacity:
                capacity *= 2
                _reserve(cols, capacity)
            with nogil:
                check = validate_frame(base, pos, limit, stamp, &size)
                if check != FRAME_VALID:
                    nxt = _next_valid(base, pos + FRAME_ALIGNMENT, limit, stamp)
            if check == FRAME_VALID:
                p = base + pos
                cols._offset.data.as_longlongs[n] = pos
                cols._size.data.as_longlongs[n] = size
                cols._check.data.as_uchars[n] = 0
                cols._kind.data.as_uchars[n] = p[8]
                cols._record_type.data.as_uchars[n] = p[9]
                cols._record_id.data.as_ulonglongs[n] = load_u64(p + 16)
                cols._tx_id.data.as_ulonglongs[n] = load_u64(p + 24)
                cols._body_offsets.data.as_longlongs[n] = body_total
                body_total += load_u32(p + 4)
                n += 1
                pos += size
                continue
            if nxt < 0:
                break
            cols._offset.data.as_longlongs[n] = pos
            cols._size.data.as_longlongs[n] = nxt - pos
            cols._check.data.as_uchars[n] = <uint8_t>check
            cols._kind.data.as_uchars[n] = 0
            cols._record_type.data.as_uchars[n] = 0
            cols._record_id.data.as_ulonglongs[n] = 0
            cols._tx_id.data.as_ulonglongs[n] = 0
            cols._body_offsets.data.as_longlongs[n] = body_total
            n += 1
            pos = nxt
        cols._body_offsets.data.as_longlongs[n] = body_total
        cols.end_offset = pos
        cols.end_check = <int>check
        cols.count = n
        _reserve(cols, n)
        cols.bodies = PyBytes_FromStringAndSize(NULL, body_total)
        dst = PyBytes_AS_STRING(cols.bodies)
        body_at = cols._body_offsets.data.as_longlongs
        with nogil:
            for i in range(n):
                if body_at[i + 1] > body_at[i]:
                    memcpy(dst + body_at[i], base + cols._offset.data.as_longlongs[i] + FRAME_HEADER_SIZE,
                           body_at[i + 1] - body_at[i])
        return cols
    finally:
        PyBuffer_Release(&view)


def scan_frames(buffer, uint32_t stamp, Py_ssize_t start):
    """Every frame of one file as (offset, check, kind, user_type, record_id, tx_id, body), from
    :func:`scan_columns`; a damaged region is a row with check != VALID and kind None, and the last
    row says where data ends (its check, ZERO at a clean end). For tools that print row by row."""
    cdef FrameColumns cols = scan_columns(buffer, stamp, start)
    cdef list out = []
    cdef Py_ssize_t i
    for i in range(cols.count):
        if cols._check.data.as_uchars[i]:
            out.append((cols._offset.data.as_longlongs[i], cols._check.data.as_uchars[i], None, None, None, None, None))
        else:
            out.append((cols._offset.data.as_longlongs[i], 0, cols._kind.data.as_uchars[i],
                        cols._record_type.data.as_uchars[i], cols._record_id.data.as_ulonglongs[i],
                        cols._tx_id.data.as_ulonglongs[i], cols.body(i)))
    out.append((cols.end_offset, cols.end_check, None, None, None, None, None))
    return out
