"""Type stub of the compiled frame codec (pyx/journal_engine/_codec.pyx; twin: _twin/codec.py).

CRC32C and the 32-byte frame header, 8-byte aligned (docs/internals/format.md). The journal writes
frames in place through the ``.pxd`` contract; these Python-visible functions serve tools and tests.
"""
from collections.abc import Iterable

from _typeshed import ReadableBuffer

def crc32c(data: ReadableBuffer, crc: int = 0) -> int:
    """CRC32C (Castagnoli) of ``data``, continuing from ``crc``: the hardware path when the CPU has one."""

def crc32c_software(data: ReadableBuffer, crc: int = 0) -> int:
    """The table-driven CRC32C, so tests can compare it with the hardware path on the same input."""

def crc32c_uses_hardware() -> bool:
    """Whether ``crc32c`` runs on the CPU's SSE4.2 crc32 instruction (else the table-driven path)."""

def encode_frame(kind: int, user_type: int, stamp: int, record_id: int, tx_id: int,
                 body: ReadableBuffer) -> bytes:
    """One frame as bytes: the header (``kind`` a ``RecordKind``, ``user_type`` 0..255, ``stamp``
    the low 32 bits of the file id), ``body``, zero padding to a multiple of 8 bytes."""

def encode_group(stamp: int, records: Iterable[tuple[int, int, int, ReadableBuffer]]) -> bytes:
    """A record group as bytes: the GROUP frame (member count, length, CRC32C of the members), then
    each ``(kind, user_type, record_id, body)`` as a frame flagged ``GROUP_MEMBER``."""

def check_frame(buffer: ReadableBuffer, pos: int, stamp: int) -> tuple[int, int]:
    """``(check, size)`` for the frame at byte offset ``pos``: ``check`` is a ``FrameCheck`` value,
    ``size`` the frame's bytes with padding (0 unless the frame is valid)."""
