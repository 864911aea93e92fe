"""Bodies that name their record and the call that wrote them, and carry a CRC: the crash harness's
way to tell a recovered body that was really written from one that was never written or was changed."""
from __future__ import annotations

import hashlib
import struct
import zlib

_BODY_HEAD = struct.Struct("<QQI")      # record id, sequence of the writing call, payload length
_BODY_CRC = struct.Struct("<I")
BODY_OVERHEAD = _BODY_HEAD.size + _BODY_CRC.size


def make_body(record_id: int, seq: int, payload_len: int) -> bytes:
    """The one body the call `seq` writes for `record_id`; the parent rebuilds it to compare."""
    head = _BODY_HEAD.pack(record_id, seq, payload_len)
    seed = hashlib.blake2b(head, digest_size=32).digest()
    payload = (seed * (payload_len // len(seed) + 1))[:payload_len]
    return head + payload + _BODY_CRC.pack(zlib.crc32(head + payload))


def check_body(body: bytes) -> tuple[int, int]:
    """(record id, seq) of a body made by make_body; ValueError if it was never written so."""
    if len(body) < BODY_OVERHEAD:
        raise ValueError(f"body of {len(body)} bytes is shorter than any written body")
    record_id, seq, payload_len = _BODY_HEAD.unpack_from(body)
    if len(body) != BODY_OVERHEAD + payload_len:
        raise ValueError(f"body length {len(body)} does not match its payload length {payload_len}")
    if body != make_body(record_id, seq, payload_len):
        raise ValueError(f"body of record {record_id} seq {seq} differs from the one written")
    return record_id, seq


def xid_of(tx_id: int) -> bytes:
    return b"xid-%d" % tx_id
