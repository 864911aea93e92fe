# cython: language_level=3
"""Compiled replay: one file's columns after another (_scan's FrameColumns) -> live records.

The rules are the table in docs/internals/recovery.md. The live records stay in the columns the
replay keeps: ``records`` makes a RecordInfo when one is looked at, ``record_columns`` hands them to
the message store's recovery as columns. The Python twin is journal_engine._twin.replay.
"""
cimport cython
from cpython.ref cimport PyObject
from cpython.bytes cimport PyBytes_AS_STRING
from cpython cimport array
from libc.string cimport memset
from libc.stdlib cimport realloc, free
import array
from collections.abc import ItemsView, KeysView, Mapping, ValuesView
from journal_engine._livemap cimport LiveMap, advise_huge_pages, find_sorted
from journal_engine._member_slots cimport expose_as_members
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t

from journal_engine._codec cimport (
    KIND_ADD, KIND_UPDATE, KIND_DELETE, KIND_ADD_TX, KIND_UPDATE_TX, KIND_DELETE_TX,
    KIND_PREPARE, KIND_COMMIT, KIND_ROLLBACK, load_u32,
)
from journal_engine._scan cimport (
    Body, FrameColumns, scan_file, _body_start, _body_size, _row_body, _row_bytes, _columns_whole, _point_body,
)
from journal_engine._scan import GAP_REASONS as _GAP_REASONS

cdef array.array _LONGS = array.array("q")
cdef array.array _ULONGS = array.array("Q")
cdef array.array _BYTES = array.array("B")
cdef array.array _UINTS = array.array("I")


cdef extern from "Python.h":
    Py_ssize_t _borrowed_refcount "Py_REFCNT" (PyObject *o)


cdef inline bint _held_here_only(PyObject *o) noexcept:
    """Whether the one reference to ``o`` is the caller's own (a borrowed look: no reference taken)."""
    return _borrowed_refcount(o) == 1


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
        """Scan one file's bytes and replay it: :meth:`replay_columns` of ``_scan.scan_columns``."""
        return self.replay_columns(scan_file(buffer, stamp, start, True, True), path)

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
        rows = PlainRows(check=cols.c_check, kind=cols.c_kind, record_type=cols.c_record_type,
                         record_id=cols.c_record_id, size=cols.c_size, count=cols.count, file_index=file_index)
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
                self.corrupt.append((path, cols.c_offset[row], _GAP_REASONS[check]))
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


cdef class RecordColumns:
    """Live records as columns, in the order they were added, for a reader that wants no Python
    object per record (the message store's recovery). Record ``i``: ``record_id[i]`` (array 'Q'),
    ``record_type[i]`` ('B'), its body ``buffers[body_buffer[i]][body_start[i]:body_end[i]]``
    ('I', 'q', 'q'), and its updates the rows ``update_first[i]`` to ``update_first[i + 1]`` ('q')
    of ``update_type``, ``update_buffer``, ``update_start``, ``update_end``. ``buffers``: bytes
    objects the columns own (a journal's: the bodies of each file it read)."""

    def __len__(self):
        return len(self.record_id)

    def __repr__(self):
        return f"<RecordColumns: {len(self.record_id)} records, {len(self.update_type)} updates>"


cdef tuple _spans(Py_ssize_t rows):
    """Where ``rows`` bodies lie, uninitialised: buffer index ('I'), start and end ('q') columns."""
    return array.clone(_UINTS, rows, False), array.clone(_LONGS, rows, False), array.clone(_LONGS, rows, False)


cdef RecordColumns _empty_columns(Py_ssize_t records, Py_ssize_t updates, list buffers):
    cdef RecordColumns out = RecordColumns.__new__(RecordColumns)
    out.record_id = array.clone(_ULONGS, records, False)
    out.record_type = array.clone(_BYTES, records, False)
    out.body_buffer, out.body_start, out.body_end = _spans(records)
    out.update_first = array.clone(_LONGS, records + 1, False)
    out.update_type = array.clone(_BYTES, updates, False)
    out.update_buffer, out.update_start, out.update_end = _spans(updates)
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
    return _record_columns(records)


cdef RecordColumns records_as_columns(records):
    """record_columns for the message store's recovery: bodies of another bytes-like type as bytes."""
    cdef RecordColumns columns = _record_columns(records)
    if columns is None:     # bodies of another bytes-like type: as bytes
        columns = _record_columns({record_id: RecordInfo(rec.record_id, rec.record_type, bytes(rec.body),
                                                         [(user_type, bytes(update_body))
                                                          for user_type, update_body in rec.updates])
                                   for record_id, rec in records.items()})
    return columns


cdef RecordColumns _record_columns(records):
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
