"""Journal files through the one columnar decoder, read-only: what recovery, compaction and the tools read.

`scan_data_file` maps a file, decodes every frame into a `FrameColumns` (typed columns and one
bodies buffer the result owns) and unmaps it, so nothing refers to a file that may later be
recycled or truncated. `scan_file` and `scan_directory` are the same for a path and for a whole
journal directory, for readers outside the journal (the CLI, the Spark data source).
"""
from __future__ import annotations

import mmap
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .._impl import FrameColumns, scan_columns
from ..limits import SCAN_THREADS_MAX, SCAN_THREADS_MIN_BYTES
from . import durability
from .format import FileHeader, stamp_of
from .segment_files import DataFile, list_directory, read_header


def _map_for_reading(fd: int) -> mmap.mmap:
    """A read-only mapping, populated up front: one call instead of a page fault per 4 KiB."""
    return mmap.mmap(fd, 0, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0), prot=mmap.PROT_READ)


def cut_short(data: DataFile) -> bool:
    """A file shorter than it was allocated: damage at rest (a crash never shortens a file, which is
    created full size and fsynced before it is named), so whatever lay past the cut is lost."""
    return 0 < data.size < data.header.file_size


def scan_data_file(data: DataFile) -> FrameColumns:
    """Every frame of one listed data file, from its data start, as columns."""
    try:
        with open(data.path, "rb") as handle, _map_for_reading(handle.fileno()) as view:
            return scan_columns(view, stamp_of(data.header.file_id), data.header.data_start)
    except OSError as exc:
        raise durability.io_error(exc, data.path, "reading") from exc


def scan_data_files(files: list[DataFile]) -> list[FrameColumns]:
    """`scan_data_file` of each file, in order; files are decoded on several threads at once (the
    decoder runs without the GIL), which is what makes recovery of a large journal memory-bound --
    but a small journal on this thread, where a pool of threads would cost more than it saves."""
    if len(files) < 2 or (os.cpu_count() or 1) < 2 or sum(data.size for data in files) < SCAN_THREADS_MIN_BYTES:
        return [scan_data_file(data) for data in files]
    with ThreadPoolExecutor(max_workers=min(len(files), os.cpu_count() or 1, SCAN_THREADS_MAX), thread_name_prefix="journal-scan") as pool:
        return list(pool.map(scan_data_file, files))


@dataclass(frozen=True)
class FileScan:
    """One data file decoded: where it is, its header, and its frames as columns."""
    data: DataFile
    columns: FrameColumns

    @property
    def path(self) -> str:
        return self.data.path

    @property
    def header(self) -> FileHeader:
        return self.data.header

    @property
    def cut_short(self) -> bool:
        return cut_short(self.data)


def scan_file(path: str) -> FileScan:
    """Decode one journal data file (``*.jrn``) by path; raises CorruptRecordError for a bad header."""
    data = read_header(path)
    return FileScan(data, scan_data_file(data))


def scan_directory(directory: str) -> list[FileScan]:
    """Decode every data file of one journal directory in replay order, changing nothing (an
    interrupted compaction is read as the journal will be once it is finished)."""
    files = list_directory(directory, as_if_compacted=True).data
    return [FileScan(data, columns) for data, columns in zip(files, scan_data_files(files))]
