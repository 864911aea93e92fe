"""Python twin of the compiled replay (pyx/journal_engine/_replay.pyx): files' columns -> live records.

The rules are the table in docs/internals/recovery.md.
"""
from __future__ import annotations

import struct

from ..record_format import FrameCheck, RecordKind
from .livemap import LiveMap
from .scan import GAP_REASONS, FrameColumns, scan_columns

_TX_KINDS = (RecordKind.ADD_TX, RecordKind.UPDATE_TX, RecordKind.DELETE_TX)


class RecordInfo:
    """A live record after replay: its add, then its updates in append order."""

    __slots__ = ("record_id", "record_type", "body", "_updates")

    def __init__(self, record_id: int, record_type: int, body: bytes, updates=None):
        self.record_id = record_id
        self.record_type = record_type
        self.body = body
        self._updates = list(updates) if updates else None

    @property
    def updates(self) -> list[tuple[int, bytes]]:
        if self._updates is None:
            self._updates = []
        return self._updates

    def __eq__(self, other):
        if not hasattr(other, "record_id") or not hasattr(other, "updates"):
            return NotImplemented
        return (self.record_id == other.record_id and self.record_type == other.record_type
                and self.body == other.body and self.updates == other.updates)

    def __repr__(self):
        return (f"RecordInfo(record_id={self.record_id}, record_type={self.record_type}, "
                f"body={self.body!r}, updates={self.updates!r})")

    def __reduce__(self):
        return (RecordInfo, (self.record_id, self.record_type, self.body, self.updates))


ROW_BITS = 32   # a location packs (file index << ROW_BITS) | row: where a record's body lies


class ReplayState:
    """Live records and open transactions, built file by file in replay order from the columns.

    Keeps every file's columns (``files``): a transaction's records and the twin's records are
    read from them by location.
    """

    def __init__(self, replaceable=(), expected: int = 0):
        """``expected`` (records at most) sizes the compiled core's tables; the twin's grow."""
        self.records: dict[int, RecordInfo] = {}
        self.transactions: dict[int, list] = {}
        self.corrupt: list[tuple[str, int, str]] = []
        self.anomalies: list[tuple[str, int, str]] = []
        self.frames_read = 0
        self.replaceable_updates = 0
        self.adds = 0
        self.live = LiveMap()      # record id -> bytes of its frames (add + updates)
        self.files: list[FrameColumns] = []
        self._replaceable = frozenset(replaceable)

    def replay_file(self, buffer, stamp: int, start: int, path):
        """Scan one file's bytes and replay it: :meth:`replay_columns` of :func:`scan_columns`."""
        return self.replay_columns(scan_columns(buffer, stamp, start), path)

    def replay_columns(self, cols: FrameColumns, path) -> tuple[int, int]:
        """Apply one file's rows; returns ``(end_offset, end_check)``."""
        file_index = len(self.files)
        self.frames_read += cols.groups_skipped
        self.files.append(cols)
        for row in range(cols.count):
            check = cols._check[row]
            if check:
                self.corrupt.append((path, cols._offset[row], GAP_REASONS[FrameCheck(check)]))
            else:
                self._apply(cols, row, (file_index << ROW_BITS) | row, path)
        return cols.end_offset, cols.end_check

    def body(self, location: int) -> bytes:
        """The body of the frame at a location (file index, row)."""
        return self.files[location >> ROW_BITS].body(location & ((1 << ROW_BITS) - 1))

    def _apply(self, cols: FrameColumns, row: int, location: int, path) -> None:
        kind, user_type, record_id, tx_id = cols._kind[row], cols._record_type[row], cols._record_id[row], cols._tx_id[row]
        offset, size = cols._offset[row], cols._size[row]
        self.frames_read += 1
        if kind == RecordKind.ADD:
            if record_id in self.records:
                self.anomalies.append((path, offset, f"add of record {record_id}, which is already live"))
            self.records[record_id] = RecordInfo(record_id, user_type, cols.body(row))
            self.live.put(record_id, size)
            self.adds += 1
        elif kind == RecordKind.UPDATE:
            rec = self.records.get(record_id)
            if rec is None:
                self.anomalies.append((path, offset, f"update of record {record_id}, which is not live"))
                return
            rec.updates.append((user_type, cols.body(row)))
            self.live.add_bytes(record_id, size)
            if user_type in self._replaceable:
                self.replaceable_updates += 1
        elif kind == RecordKind.DELETE:
            self.records.pop(record_id, None)
            self.live.remove(record_id)
        elif kind in _TX_KINDS:
            tx = self.transactions.setdefault(tx_id, [[], None, path, offset])
            tx[0].append((kind, record_id, user_type, location, size))
        elif kind == RecordKind.PREPARE:
            tx = self.transactions.setdefault(tx_id, [[], None, path, offset])
            body = cols.body(row)
            if len(body) < 4:   # the record count is missing: never written so
                self.corrupt.append((path, offset, f"transaction {tx_id} prepared with a {len(body)}-byte body, "
                                                   f"shorter than its record count; it is not returned"))
                del self.transactions[tx_id]
                return
            expected = struct.unpack_from("<I", body)[0]
            if expected != len(tx[0]):
                self.corrupt.append((path, offset, f"transaction {tx_id} prepared with {expected} records, "
                                                   f"{len(tx[0])} found; it is not returned"))
                del self.transactions[tx_id]
                return
            tx[1] = body[4:]
            tx[2] = path
            tx[3] = offset
        elif kind == RecordKind.COMMIT:
            tx = self.transactions.pop(tx_id, None)
            if tx is None:
                return
            body = cols.body(row)
            expected = struct.unpack_from("<I", body)[0] if len(body) >= 4 else 0
            if expected != len(tx[0]):
                self.corrupt.append((path, offset, f"transaction {tx_id} committed with {expected} records, "
                                                   f"{len(tx[0])} found; the transaction is discarded"))
                return
            self.apply_ops(tx[0], path, offset)
        elif kind == RecordKind.ROLLBACK:
            self.transactions.pop(tx_id, None)

    def apply_ops(self, ops, path=None, offset: int = 0) -> None:
        """Apply a committed transaction's ``(kind, record_id, user_type, location, frame_bytes)`` in order."""
        for kind, record_id, user_type, location, size in ops:
            if kind == RecordKind.ADD_TX:
                self.records[record_id] = RecordInfo(record_id, user_type, self.body(location))
                self.live.put(record_id, size)
                self.adds += 1
            elif kind == RecordKind.UPDATE_TX:
                rec = self.records.get(record_id)
                if rec is None:
                    self.anomalies.append((path, offset, f"transactional update of record {record_id}, "
                                                         f"which is not live"))
                    continue
                rec.updates.append((user_type, self.body(location)))
                self.live.add_bytes(record_id, size)
                if user_type in self._replaceable:
                    self.replaceable_updates += 1
            else:
                self.records.pop(record_id, None)
                self.live.remove(record_id)
