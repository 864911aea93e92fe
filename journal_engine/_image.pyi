"""Type stub of the compiled checkpoint images (pyx/journal_engine/_image.pyx; twin: _twin/image.py).

One file's columns as a checkpoint holds them (their image, storage/journal/checkpoint.py), and the checks
that an image still describes its file before a load takes it instead of decoding the file.
"""
from _typeshed import ReadableBuffer

from journal_engine._scan import CheckpointMapping, FrameColumns, MappedFile


def image_size(count: int) -> int:
    """The bytes of the image of ``count`` rows' columns (storage/journal/checkpoint.py)."""

def columns_image(cols: FrameColumns) -> bytes:
    """One file's columns as the bytes a checkpoint holds: their image (storage/journal/checkpoint.py)."""

def file_checksum(data: MappedFile) -> int:
    """The CRC32C of every byte of a mapped file, under the SIGBUS guard (FileChangedError when cut)."""

def image_is_sound(image: ReadableBuffer, count: int, start: int, end_offset: int, image_crc: int) -> bool:
    """Whether an image CRC32Cs to ``image_crc`` and its rows lie in order within [start, end_offset)."""

def checkpointed_columns(data: MappedFile, image: ReadableBuffer, count: int, start: int, end_offset: int,
                         end_check: int, groups_skipped: int, data_crc: int, image_crc: int,
                         stamp: int, mapping: CheckpointMapping | None = None) -> FrameColumns | None:
    """The columns a scan of ``data`` (``copy=False, groups=False``) would return, from the image a
    checkpoint saved of them (in memory the caller owns), or None when the file or the image no longer
    CRC32C to what was saved, a row would lie outside the file, or a row is not what the file holds
    where it lies."""
