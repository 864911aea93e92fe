"""Python twin of the compiled scan decoder and replay (pyx/journal_engine/_replay.pyx).

The rules are the table in docs/internals/recovery.md.
"""
from __future__ import annotations

import struct

from ..limits import FRAME_ALIGNMENT_BYTES, FRAME_HEADER_SIZE_BYTES
from .codec import check_frame, decode_header
from ..record_format import FrameCheck, RecordKind
from .livemap import LiveMap

_GAP_REASONS = {
    FrameCheck.ZERO: "unwritten gap followed by valid records",
    FrameCheck.FOREIGN: "bytes of another file id followed by valid records",
    FrameCheck.INVALID: "damaged frame (bad checksum, length or kind) followed by valid records",
}
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


def _next_valid(buffer, pos: int, stamp: int) -> int:
    limit = len(buffer)
    stamp_bytes = struct.pack("<I", stamp)
    while pos + FRAME_HEADER_SIZE_BYTES <= limit:
        if buffer[pos + 12:pos + 16] == stamp_bytes and check_frame(buffer, pos, stamp)[0] == FrameCheck.VALID:
            return pos
        pos += FRAME_ALIGNMENT_BYTES
    return -1


class ReplayState:
    """Live records and open transactions, built file by file in replay order."""

    def __init__(self, replaceable=()):
        self.records: dict[int, RecordInfo] = {}
        self.transactions: dict[int, list] = {}
        self.corrupt: list[tuple[str, int, str]] = []
        self.anomalies: list[tuple[str, int, str]] = []
        self.frames_read = 0
        self.replaceable_updates = 0
        self.adds = 0
        self.live = LiveMap()      # record id -> bytes of its frames (add + updates)
        self._replaceable = frozenset(replaceable)

    def replay_file(self, buffer, stamp: int, start: int, path):
        pos = start
        while True:
            check, size = check_frame(buffer, pos, stamp)
            if check == FrameCheck.VALID:
                self._apply(buffer, pos, size, path)
                pos += size
                continue
            nxt = _next_valid(buffer, pos + FRAME_ALIGNMENT_BYTES, stamp)
            if nxt < 0:
                return pos, int(check)
            self.corrupt.append((path, pos, _GAP_REASONS[check]))
            pos = nxt

    def _apply(self, buffer, offset: int, size: int, path) -> None:
        body_len, kind, user_type, _stamp, record_id, tx_id = decode_header(buffer, offset)
        start = offset + FRAME_HEADER_SIZE_BYTES
        self.frames_read += 1
        if kind == RecordKind.ADD:
            if record_id in self.records:
                self.anomalies.append((path, offset, f"add of record {record_id}, which is already live"))
            self.records[record_id] = RecordInfo(record_id, user_type, bytes(buffer[start:start + body_len]))
            self.live.put(record_id, size)
            self.adds += 1
        elif kind == RecordKind.UPDATE:
            rec = self.records.get(record_id)
            if rec is None:
                self.anomalies.append((path, offset, f"update of record {record_id}, which is not live"))
                return
            rec.updates.append((user_type, bytes(buffer[start:start + body_len])))
            self.live.add_bytes(record_id, size)
            if user_type in self._replaceable:
                self.replaceable_updates += 1
        elif kind == RecordKind.DELETE:
            self.records.pop(record_id, None)
            self.live.remove(record_id)
        elif kind in _TX_KINDS:
            tx = self.transactions.setdefault(tx_id, [[], None, path, offset])
            tx[0].append((kind, record_id, user_type, bytes(buffer[start:start + body_len]), size))
        elif kind == RecordKind.PREPARE:
            tx = self.transactions.setdefault(tx_id, [[], None, path, offset])
            if body_len < 4:   # the record count is missing: never written so
                self.corrupt.append((path, offset, f"transaction {tx_id} prepared with a {body_len}-byte body, "
                                                   f"shorter than its record count; it is not returned"))
                del self.transactions[tx_id]
                return
            expected = struct.unpack_from("<I", buffer, start)[0]
            if expected != len(tx[0]):
                self.corrupt.append((path, offset, f"transaction {tx_id} prepared with {expected} records, "
                                                   f"{len(tx[0])} found; it is not returned"))
                del self.transactions[tx_id]
                return
            tx[1] = bytes(buffer[start + 4:start + body_len])
            tx[2] = path
            tx[3] = offset
        elif kind == RecordKind.COMMIT:
            tx = self.transactions.pop(tx_id, None)
            if tx is None:
                return
            expected = struct.unpack_from("<I", buffer, start)[0] if body_len >= 4 else 0
            if expected != len(tx[0]):
                self.corrupt.append((path, offset, f"transaction {tx_id} committed with {expected} records, "
                                                   f"{len(tx[0])} found; the transaction is discarded"))
                return
            self.apply_ops(tx[0], path, offset)
        elif kind == RecordKind.ROLLBACK:
            self.transactions.pop(tx_id, None)

    def apply_ops(self, ops, path=None, offset: int = 0) -> None:
        for kind, record_id, user_type, body, size in ops:
            if kind == RecordKind.ADD_TX:
                self.records[record_id] = RecordInfo(record_id, user_type, body)
                self.live.put(record_id, size)
                self.adds += 1
            elif kind == RecordKind.UPDATE_TX:
                rec = self.records.get(record_id)
                if rec is None:
                    self.anomalies.append((path, offset, f"transactional update of record {record_id}, "
                                                         f"which is not live"))
                    continue
                rec.updates.append((user_type, body))
                self.live.add_bytes(record_id, size)
                if user_type in self._replaceable:
                    self.replaceable_updates += 1
            else:
                self.records.pop(record_id, None)
                self.live.remove(record_id)


def scan_frames(buffer, stamp: int, start: int):
    """Every frame of one file as (offset, check, kind, user_type, record_id, tx_id, body)."""
    out = []
    pos = start
    while True:
        check, size = check_frame(buffer, pos, stamp)
        if check == FrameCheck.VALID:
            body_len, kind, user_type, _stamp, record_id, tx_id = decode_header(buffer, pos)
            body_start = pos + FRAME_HEADER_SIZE_BYTES
            out.append((pos, 0, kind, user_type, record_id, tx_id, bytes(buffer[body_start:body_start + body_len])))
            pos += size
            continue
        nxt = _next_valid(buffer, pos + FRAME_ALIGNMENT_BYTES, stamp)
        out.append((pos, int(check), None, None, None, None, None))
        if nxt < 0:
            return out
        pos = nxt
