"""A prepared transaction as the ``prepared`` database holds it (format.py): its xid and its records.

Little-endian, lengths before what they measure::

    xid length u32, xid, record count u32,
    then per record: kind u8 (TX_ADD, TX_UPDATE, TX_DELETE), record id u64, record type u8,
                     body length u32, body

A record is ``(kind, record id, record type, body)``, as the store keeps a pending transaction's
records in memory; decoding checks every length and kind, so bytes another program wrote are a
CorruptRecordError naming the transaction, never a wrong transaction.
"""
from __future__ import annotations

import struct

from ...errors import CorruptRecordError

# a transaction's record kinds (as the journal's PreparedTransaction names them)
TX_ADD, TX_UPDATE, TX_DELETE = 1, 2, 3
TX_KIND_NAMES = {TX_ADD: "add", TX_UPDATE: "update", TX_DELETE: "delete"}

_U32 = struct.Struct("<I")
_TX_OP = struct.Struct("<BQBI")                  # kind, record id, record type, body length


def encode_prepared(xid: bytes, ops: list) -> bytes:
    """The value of a prepared transaction with this xid and these records."""
    parts = [_U32.pack(len(xid)), xid, _U32.pack(len(ops))]
    for kind, record_id, record_type, body in ops:
        parts.append(_TX_OP.pack(kind, record_id, record_type, len(body)))
        parts.append(body)
    return b"".join(parts)


def decode_prepared(tx_id: int, data: bytes, path: str) -> tuple[bytes, list]:
    """The xid and the records of prepared transaction `tx_id` (CorruptRecordError at `path` unless
    `data` is exactly one encoded transaction)."""
    try:
        (xid_len,) = _U32.unpack_from(data, 0)
        position = 4 + xid_len
        xid = data[4:position]
        (count,) = _U32.unpack_from(data, position)
        position += 4
        ops = []
        for _ in range(count):
            kind, record_id, record_type, length = _TX_OP.unpack_from(data, position)
            position += _TX_OP.size
            body = data[position:position + length]
            if len(body) != length or kind not in TX_KIND_NAMES:
                raise ValueError("truncated record")
            position += length
            ops.append((kind, record_id, record_type, body))
        if position != len(data) or len(xid) != xid_len:
            raise ValueError("unexpected bytes")
    except (struct.error, ValueError) as exc:
        raise CorruptRecordError(f"prepared transaction {tx_id} does not decode ({exc})", path=path,
                                 field="prepared", hint="the LMDB store was written by another program") from None
    return xid, ops
