"""Damage made on purpose by the tests: a byte of a file flipped in place, as a disk or a stray write
would leave it."""
from __future__ import annotations

import os


def flip_byte(path: str | os.PathLike, offset: int, mask: int = 0xFF) -> None:
    """XOR ``mask`` into the byte at ``offset`` of the file at ``path``, in place."""
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ mask]))
