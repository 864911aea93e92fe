"""The checkpoint: every data file's columns, saved at a clean close, so the next load need not decode.

A load decodes every frame of every file into columns (journal/scan.py) and replays them. A clean
close writes what that decoding would give -- each data file's columns as a replay reads them, where
its frames end, and the CRC32C of every byte of the file -- into one file, ``CHECKPOINT_FILE``
(docs/internals/format.md, "The checkpoint"). The next writing ``load()`` takes it: it maps it and
removes its name at once (so no other process can cut it short while its columns are in use, and a
crash after the load leaves no checkpoint that the appends since made stale). For each data file, the
CRC32C of the file's bytes and of the saved columns are checked again, and every row must lie inside
the file; then the saved columns stand in for the decoded ones, so the replay, the damage it reports
and the records it returns are the same as a full decode's. A file whose bytes changed since (another
process wrote to it, or a release that keeps no checkpoint appended to it) is decoded, as is every
file when there is no checkpoint (after a crash) or it cannot be read (it is ignored, with a warning).

The checkpoint is not synced: a checkpoint lost or torn by a power failure is one that does not
check, and the files are decoded. Its size is 43 bytes a frame.
"""
from __future__ import annotations

import logging
import mmap
import os
import struct
from dataclasses import dataclass
from typing import Callable, Iterable

from .._impl import FrameColumns, checkpointed_columns, crc32c, image_size
from ..errors import JournalError
from ..limits import FILE_SIZE_MAX_BYTES
from . import durability
from .format import CHECKPOINT_FILE
from .scan import ColumnsImage, SavedColumns, image_of, in_threads
from .segment_files import DataFile

log = logging.getLogger("journal_engine.journal")

MAGIC = b"\x89JECKPT\n"
VERSION = 1
BYTE_ORDER_PROBE = 0x01020304       # written in native order: a checkpoint of another byte order does not read
# magic, version, byte order probe, entries, reserved, the entry table's CRC32C, this header's CRC32C
_HEADER = struct.Struct("=8sIIIIII")
# per data file: file id, sequence, file size, data start, rows, GROUP frames skipped, end offset, where its
# image lies in the checkpoint, end check, CRC32C of the file's bytes, CRC32C of the image, reserved
_ENTRY = struct.Struct("=QQQQQQQQIIII")
_IMAGE_ALIGNMENT = 8


@dataclass(frozen=True)
class _Entry:
    size: int
    start: int
    count: int
    groups_skipped: int
    end_offset: int
    image_at: int
    end_check: int
    file_crc: int
    image_crc: int

    @property
    def image_size(self) -> int:
        return image_size(self.count)


class Checkpoint:
    """A checkpoint a load took: the saved columns of each data file it names, checked when used.

    It keeps the checkpoint mapped (its name is gone): the columns taken from it read their rows
    there, and the next clean close copies the images of the files nothing wrote since (``kept``)."""

    def __init__(self, path: str, mapping: mmap.mmap, entries: dict) -> None:
        self.path = path
        self._mapping = mapping
        self._view = memoryview(mapping)
        self._entries = entries         # (file id, sequence) -> _Entry
        self._used: dict[str, tuple] = {}    # path -> (file id, sequence) of each file whose columns came from here

    def put_back(self) -> None:
        """Name the checkpoint again, byte for byte (a load that failed took it): never raises, as it
        runs while a load's error propagates; a checkpoint that cannot be put back is only a slower load."""
        try:
            if not os.path.exists(self.path):
                _replace(self.path, lambda fd, temporary: _write_at(fd, self._view, 0, temporary))
        except (OSError, JournalError) as exc:
            log.warning("the checkpoint %s could not be put back (%s): the next load decodes every file",
                        self.path, exc)

    def saved(self, data: DataFile) -> SavedColumns | None:
        """The saved columns of a listed data file, for scan.scan_data_file, or None when the
        checkpoint names no such file."""
        key = (data.header.file_id, data.header.sequence)
        entry = self._entries.get(key)
        if entry is None or entry.size != data.size or entry.start != data.header.data_start:
            return None

        def columns(view) -> FrameColumns | None:
            found = checkpointed_columns(view, self._image(entry), entry.count, entry.start, entry.end_offset,
                                         entry.end_check, entry.groups_skipped, entry.file_crc, entry.image_crc)
            if found is None:
                log.info("the checkpoint's columns of %s no longer match the file: it is decoded", data.path)
            else:
                self._used[data.path] = key
            return found
        return columns

    @property
    def files_used(self) -> int:
        """How many data files took their columns from this checkpoint."""
        return len(self._used)

    def kept(self, data: DataFile) -> ColumnsImage | None:
        """The saved image of a data file whose columns came from here, for the next checkpoint (the
        caller vouches nothing wrote to the file since)."""
        key = self._used.get(data.path)
        if key is None or key != (data.header.file_id, data.header.sequence):
            return None
        entry = self._entries[key]
        return ColumnsImage(entry.count, entry.groups_skipped, entry.end_offset, entry.end_check, entry.file_crc,
                            self._image(entry), entry.image_crc)

    def _image(self, entry: _Entry) -> memoryview:
        """An entry's image of its file's columns, where it lies in the mapping."""
        return self._view[entry.image_at:entry.image_at + entry.image_size]


def take(directory: str) -> Checkpoint | None:
    """The checkpoint of `directory`, mapped, its name removed; None when there is none, or (with a
    warning in the log) when it does not read as one: the files are then decoded, nothing is lost."""
    path = os.path.join(directory, CHECKPOINT_FILE)
    try:
        durability.unlink(path + ".tmp", missing_ok=True)     # a close that died while writing one
    except JournalError as exc:
        log.warning("a leftover %s.tmp cannot be removed: %s", path, exc)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("the checkpoint %s cannot be opened (%s): every file is decoded", path, exc)
        return None
    try:
        durability.unlink(path, missing_ok=True)
        size = os.fstat(fd).st_size
        if size < _HEADER.size:
            log.warning("the checkpoint %s is %d bytes, shorter than its header: every file is decoded", path, size)
            return None
        # not populated up front: each file's image is first read by the scan thread that checks it,
        # so its pages are mapped there, in parallel, instead of all of them in this serial first step
        mapping = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    except (OSError, JournalError) as exc:
        log.warning("the checkpoint %s cannot be read (%s): every file is decoded", path, exc)
        return None
    finally:
        os.close(fd)
    problem, entries = _read_entries(mapping)
    if problem:
        log.warning("the checkpoint %s is not usable (%s): every file is decoded", path, problem)
        return None
    return Checkpoint(path, mapping, entries)


def _read_entries(mapping: mmap.mmap) -> tuple[str, dict]:
    """('', entries) of a checkpoint's mapping, or (what is wrong, {})."""
    magic, version, probe, count, _reserved, table_crc, header_crc = _HEADER.unpack_from(mapping, 0)
    if magic != MAGIC:
        return "not a checkpoint (bad magic)", {}
    if header_crc != crc32c(mapping[:_HEADER.size - 4]):
        return "header checksum mismatch", {}
    if version != VERSION:
        return f"version {version}, this release reads version {VERSION}", {}
    if probe != BYTE_ORDER_PROBE:
        return "written on a machine of another byte order", {}
    table_end = _HEADER.size + count * _ENTRY.size
    if table_end > len(mapping):
        return f"{count} entries do not fit its {len(mapping)} bytes", {}
    if crc32c(mapping[_HEADER.size:table_end]) != table_crc:
        return "entry table checksum mismatch", {}
    entries = {}
    for index in range(count):
        (file_id, sequence, size, start, rows, groups_skipped, end_offset, image_at, end_check, file_crc,
         image_crc, _pad) = _ENTRY.unpack_from(mapping, _HEADER.size + index * _ENTRY.size)
        entry = _Entry(size, start, rows, groups_skipped, end_offset, image_at, end_check, file_crc, image_crc)
        if image_at < table_end or image_at + entry.image_size > len(mapping):
            return f"the columns of file id {file_id} lie outside it", {}
        if not start <= end_offset <= size <= FILE_SIZE_MAX_BYTES or groups_skipped > size:
            return f"the entry of file id {file_id} names offsets no journal file has", {}
        entries[(file_id, sequence)] = entry
    return "", entries


def save(directory: str, files: list[DataFile], taken: Checkpoint | None, written: Iterable[str]) -> None:
    """Write the checkpoint of `files` (a clean close, the journal locked and idle): a file whose
    columns the load took from `taken` and whose path is not in `written` (the files appended to
    since) keeps its saved image; every other file is decoded now, on threads. Written under a
    temporary name, then renamed over the old one; not synced (see the module docstring). Raises
    JournalIOError / StoreFullError."""
    written = set(written)

    def image(data: DataFile) -> ColumnsImage:
        kept = taken.kept(data) if taken is not None and data.path not in written else None
        return kept if kept is not None else image_of(data)

    def fill(fd: int, temporary: str) -> None:
        table = bytearray()
        at = _HEADER.size + len(files) * _ENTRY.size
        at += -at % _IMAGE_ALIGNMENT
        for data, made in zip(files, in_threads(image, files)):
            table += _ENTRY.pack(data.header.file_id, data.header.sequence, data.size, data.header.data_start,
                                 made.count, made.groups_skipped, made.end_offset, at, made.end_check, made.file_crc,
                                 made.image_crc, 0)
            _write_at(fd, made.image, at, temporary)
            at += len(made.image)
            at += -at % _IMAGE_ALIGNMENT
        head = _HEADER.pack(MAGIC, VERSION, BYTE_ORDER_PROBE, len(files), 0, crc32c(table), 0)
        head = head[:-4] + struct.pack("=I", crc32c(head[:-4]))
        _write_at(fd, bytes(head) + bytes(table), 0, temporary)
    _replace(os.path.join(directory, CHECKPOINT_FILE), fill)


def _replace(path: str, fill: Callable[[int, str], None]) -> None:
    """The file at `path` written anew: ``fill(fd, temporary name)`` writes a temporary file, which is
    then renamed over it (removed instead when `fill` raises)."""
    temporary = path + ".tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as exc:
        raise durability.io_error(exc, temporary, "creating the checkpoint") from exc
    try:
        fill(fd, temporary)
    except BaseException:
        os.close(fd)
        durability.unlink(temporary, missing_ok=True)
        raise
    os.close(fd)
    durability.rename(temporary, path)


def _write_at(fd: int, data, offset: int, path: str) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.pwrite(fd, view, offset)
        except OSError as exc:
            raise durability.io_error(exc, path, "writing the checkpoint") from exc
        view = view[written:]
        offset += written
