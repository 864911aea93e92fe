"""Journal files through the one columnar decoder, read-only: what recovery, compaction and the tools read.

`scan_data_file` maps a file and decodes every frame into a `FrameColumns`. By default it copies
the bodies into one buffer the result owns and unmaps the file, so nothing refers to a file that
may later be recycled or truncated; with ``copy=False`` (what `Journal.load()` reads) the bodies
stay in the mapping, which the columns keep (a `MappedFile`: while it lives the file is pinned,
and the journal never recycles it). `scan_file` and `scan_directory` are the same for a path and
for a whole journal directory, for readers outside the journal (the CLI, the Spark data source).

Another process may cut a file short while it is read. A read of a mapped page past the new end
raises SIGBUS, which would kill the interpreter: the compiled decoder reads mappings under a SIGBUS
guard (``GUARDS_MAPPED_READS``), the Python twin is given the file's bytes read into memory instead.
Either way a file shorter than when it was listed raises FileChangedError naming it.
"""
from __future__ import annotations

import mmap
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, TypeVar

from ..._impl import (GUARDS_MAPPED_READS, FrameColumns, MappedFile, columns_image, crc32c, file_checksum, is_pinned,
                     scan_columns)
from ...errors import FileChangedError, FileVanishedError, JournalLockedError
from ...limits import LIVE_READ_ATTEMPTS_MAX, SCAN_THREADS_MAX, SCAN_THREADS_MIN_BYTES
from .. import durability
from .format import FileHeader, stamp_of
from .segment_files import DataFile, list_directory, read_header, vanished

T = TypeVar("T")


def _map_for_reading(fd: int) -> mmap.mmap:
    """A read-only mapping, populated up front: one call instead of a page fault per 4 KiB."""
    return mmap.mmap(fd, 0, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0), prot=mmap.PROT_READ)


def _read_whole(fd: int, size: int) -> bytearray:
    """The file's first `size` bytes, read (a short read when the file is shorter now)."""
    data = bytearray(size)
    view = memoryview(data)
    done = 0
    while done < size:
        got = os.preadv(fd, [view[done:]], done)
        if got == 0:
            break
        done += got
    del view
    del data[done:]
    return data


def _cut_while_listed(data: DataFile, size_now: int) -> FileChangedError:
    return FileChangedError(f"the file is {size_now} bytes long, {data.size} when it was listed: it was cut short "
                            f"while it was read", path=data.path, offset=size_now,
                            hint="another process truncated the file; stop it, then read again (what is left "
                                 "is reported as a file cut short)")


def cut_short(data: DataFile) -> bool:
    """A file shorter than it was allocated: damage at rest (a crash never shortens a file, which is
    created full size and fsynced before it is named), so whatever lay past the cut is lost."""
    return 0 < data.size < data.header.file_size


def _map_pinned(fd: int, data: DataFile) -> MappedFile:
    """The file mapped for bodies that outlive the scan: the mapping pins the file while it lives."""
    status = os.fstat(fd)
    return MappedFile(fd, min(status.st_size, data.size), data.path, (status.st_dev, status.st_ino))


def pinned(path: str) -> bool:
    """True while a body view (a mapping of `scan_data_file(copy=False)`) holds the file at `path`."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise durability.io_error(exc, path, "checking") from exc
    return is_pinned((status.st_dev, status.st_ino))


#: what a checkpoint gives a scan for one file: ``saved(view)`` -> the columns it saved of the file
#: whose bytes `view` holds, or None when they no longer match (storage/journal/checkpoint.py)
SavedColumns = Callable[[object], Optional[FrameColumns]]


def scan_data_file(data: DataFile, copy: bool = True, groups: bool = True,
                   saved: SavedColumns | None = None) -> FrameColumns:
    """Every frame of one listed data file, from its data start, as columns; FileChangedError when
    another process cuts it short before or during the read. ``copy=False``: the bodies stay in the
    file's mapping, which the columns keep (the twin reads the file into memory either way).
    ``groups=False``: no row for a GROUP frame (a replay's read: see scan_columns). ``saved``: the
    columns a checkpoint holds of this file (copy=False, groups=False), used when the file's bytes
    still CRC32C to what they were then, instead of decoding every frame."""
    stamp, start = stamp_of(data.header.file_id), data.header.data_start

    def decode(view, mapped: bool) -> FrameColumns:
        if saved is not None:
            columns = saved(view)
            if columns is not None:
                return columns
        return scan_columns(view, stamp, start, copy=not mapped, groups=groups)
    return _read_file(data, not copy, decode)


def _read_file(data: DataFile, keep: bool, read: Callable[[object, bool], T]) -> T:
    """``read(view, mapped)`` of a listed data file's bytes. ``keep``: the result may keep the view, a
    MappedFile that pins the file (compiled core: ``mapped``); else the file is mapped for the call
    only. The twin is given the file read into memory. A file shorter than when it was listed, or cut
    under the read (the SIGBUS guard's FileChangedError), raises FileChangedError naming it."""
    mapped = GUARDS_MAPPED_READS and keep
    try:
        with open(data.path, "rb") as handle:
            if mapped:
                view = _map_pinned(handle.fileno(), data)
            elif GUARDS_MAPPED_READS:
                view = _map_for_reading(handle.fileno())
            else:
                view = _read_whole(handle.fileno(), data.size)
            try:
                if len(view) < data.size:
                    raise _cut_while_listed(data, len(view))
                return read(view, mapped)
            except FileChangedError as cut:     # the guard met the cut mid-read: name the file
                if cut.path is not None:
                    raise
                raise _cut_while_listed(data, cut.offset if cut.offset is not None
                                        else os.fstat(handle.fileno()).st_size) from None
            finally:
                if GUARDS_MAPPED_READS and not mapped:
                    view.close()
    except FileNotFoundError as exc:
        raise vanished(data.path) from exc
    except OSError as exc:
        raise durability.io_error(exc, data.path, "reading") from exc


def read_while_live(directory: str, read: Callable[[], T]) -> T:
    """``read()`` -- a listing of `directory` and a read of the files it listed -- done again when a file
    it listed vanished meanwhile: a live writer beside a read-only view compacts or recycles files
    (renames them) between the two. After LIVE_READ_ATTEMPTS_MAX tries JournalLockedError says the
    journal is in use, rather than a view of files that never were the journal together."""
    for attempt in range(LIVE_READ_ATTEMPTS_MAX):
        try:
            return read()
        except FileVanishedError as gone:
            last = gone
            time.sleep(0.01 * attempt)     # the writer's compaction or recycling step is short
    raise JournalLockedError(f"{directory} changed under {LIVE_READ_ATTEMPTS_MAX} reads in a row ({last.path} "
                             f"vanished): a writer is compacting it", hint="read it again, or stop the writer first")


def scan_data_files(files: list[DataFile], copy: bool = True, groups: bool = True) -> list[FrameColumns]:
    """`scan_data_file` of each file, in order (see `scan_data_files_in_order`)."""
    return list(scan_data_files_in_order(files, copy, groups))


def scan_data_files_in_order(files: list[DataFile], copy: bool = True, groups: bool = True,
                             saved: Callable[[DataFile], SavedColumns | None] | None = None) -> Iterator[FrameColumns]:
    """`scan_data_file` of each file, yielded in order as soon as it is decoded. Files are decoded on
    several threads at once (the decoder runs without the GIL), which is what makes recovery of a
    large journal memory-bound, and the caller works on one file -- a replay, which runs without
    the GIL too -- while the threads decode the next ones. A small journal is read on this thread,
    where a pool of threads would cost more than it saves."""
    def scan(data: DataFile) -> FrameColumns:
        return scan_data_file(data, copy, groups, saved(data) if saved is not None else None)
    yield from in_threads(scan, files)


def in_threads(work: Callable[[DataFile], T], files: list[DataFile]) -> Iterator[T]:
    """``work(file)`` of each file, yielded in order, on several threads when the files are large
    enough to repay them (the compiled decoder and checksum run without the GIL)."""
    if len(files) < 2 or (os.cpu_count() or 1) < 2 or sum(data.size for data in files) < SCAN_THREADS_MIN_BYTES:
        yield from (work(data) for data in files)
        return
    with ThreadPoolExecutor(max_workers=min(len(files), os.cpu_count() or 1, SCAN_THREADS_MAX),
                            thread_name_prefix="journal-scan") as pool:
        yield from pool.map(work, files)


@dataclass(frozen=True)
class ColumnsImage:
    """What a checkpoint saves of one data file: the image of its columns (as a replay reads them:
    ``copy=False, groups=False``) and its CRC32C, where they end, and the CRC32C of every byte of the
    file."""
    count: int
    groups_skipped: int
    end_offset: int
    end_check: int
    file_crc: int
    image: bytes
    image_crc: int


def image_of(data: DataFile) -> ColumnsImage:
    """One listed data file decoded for a checkpoint (FileChangedError naming it when it is cut)."""
    stamp, start = stamp_of(data.header.file_id), data.header.data_start

    def image(view, mapped: bool) -> ColumnsImage:
        columns = scan_columns(view, stamp, start, copy=not mapped, groups=False)
        saved = columns_image(columns)
        return ColumnsImage(columns.count, columns.groups_skipped, columns.end_offset, columns.end_check,
                            file_checksum(view), saved, crc32c(saved))
    return _read_file(data, True, image)


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
    interrupted compaction is read as the journal will be once it is finished; a file a live writer
    renames meanwhile makes it read the directory again: read_while_live)."""
    def read() -> list[FileScan]:
        files = list_directory(directory, as_if_compacted=True).data
        return [FileScan(data, columns) for data, columns in zip(files, scan_data_files(files))]
    return read_while_live(directory, read)
