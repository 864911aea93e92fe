"""Journal files on disk: naming, headers, pre-allocation and the pool of ready files.

A data file (``journal-<file id>.jej``) holds frames stamped with its file id.
A free file (``.jef``) is pre-allocated zeros or a reclaimed data file; taking it
into use gives it a new file id and header, then renames it to a data file. A
background thread keeps `ready_target` data files activated ahead of the writer,
so a switch to the next file costs no I/O on the append path.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import stat
import threading
from dataclasses import dataclass, field

from ..._impl import Segment, crc32c
from ...errors import CorruptRecordError, FileVanishedError, StoreFullError
from ...limits import FILE_HEADER_SIZE_BYTES, FILE_ID_MAX, FRAME_HEADER_SIZE_BYTES
from .. import durability
from .format import (COMPACT_NAME, CONTROL_FILE, DATA_NAME, FREE_NAME, HEADER_FLAG_FRESH, HEADER_FLAG_RECYCLED, TMP_SUFFIX,
                     FileHeader, data_name, free_name)

log = logging.getLogger("journal_engine.storage.journal")


@dataclass
class DataFile:
    path: str
    header: FileHeader
    size: int


@dataclass
class Listing:
    data: list = field(default_factory=list)      # DataFile, in replay (sequence) order
    free: list = field(default_factory=list)      # paths
    compact_outputs: list = field(default_factory=list)
    max_id: int = 0


# an entry that cannot be opened as a regular file is not a journal file (damage to the directory);
# any other error while reading a header is the disk's
_NOT_A_JOURNAL_FILE_ERRNOS = frozenset({errno.EISDIR, errno.ENOTDIR, errno.ELOOP, errno.ENXIO, errno.ENOENT})


def vanished(path: str) -> FileVanishedError:
    """What a reader raises for a file it listed that is gone when it opens it."""
    return FileVanishedError("the file vanished after the directory was listed: another process renamed or "
                             "deleted it", path=path, offset=0, field="file",
                             hint="if a writer has the journal open, it compacted or recycled the file (read "
                                  "again); otherwise a file of the journal was deleted")


def read_header(path: str) -> DataFile:
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):   # a FIFO would block open(), a directory fail it
            raise IsADirectoryError(21, "not a regular file")
        with open(path, "rb") as handle:
            raw = handle.read(FILE_HEADER_SIZE_BYTES)
            size = os.fstat(handle.fileno()).st_size
    except FileNotFoundError as exc:
        raise vanished(path) from exc
    except OSError as exc:
        if exc.errno not in _NOT_A_JOURNAL_FILE_ERRNOS:   # the disk failed, not the entry: an I/O error
            raise durability.io_error(exc, path, "reading the file header") from exc
        raise CorruptRecordError(f"cannot read a journal file: {exc.strerror}", path=path, offset=0, field="file",
                                 hint="an entry with a journal file name must be a regular journal file; "
                                      "move it out of the journal directory") from exc
    return data_file_of(path, raw, size)


def data_file_of(path: str, raw: bytes, size: int) -> DataFile:
    """A data file from its first bytes and its size, however they were read (a local file, or an object
    in a store pyarrow.fs reads for the Spark source); CorruptRecordError when they are not a journal file's."""
    header = FileHeader.decode(raw, path, crc32c)
    if size < FILE_HEADER_SIZE_BYTES + 4096:
        raise CorruptRecordError(f"journal file is only {size} bytes long", path=path, offset=size,
                                 field="file_size", hint="journal files are pre-allocated; this one was cut short")
    return DataFile(path=path, header=header, size=size)


def _size_of(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError as exc:
        raise durability.io_error(exc, path, "reading the size of") from exc


def _is_fresh(free_path: str) -> bool:
    """True for a free file that only ever held zeros (so any non-zero byte past the data is damage)."""
    try:
        with open(free_path, "rb") as handle:
            header = FileHeader.decode(handle.read(FILE_HEADER_SIZE_BYTES), free_path, crc32c)
            handle.seek(header.data_start)
            first_frame = handle.read(FRAME_HEADER_SIZE_BYTES)
    except (OSError, CorruptRecordError):
        return False
    # a data file that compaction reclaimed keeps the FRESH flag of its activation; it held frames,
    # and frames always start at the data start, so a used file is never all zeros there
    return (bool(header.flags & HEADER_FLAG_FRESH) and not header.flags & HEADER_FLAG_RECYCLED
            and not any(first_frame))


def _id_in_name(match, path: str) -> int:
    file_id = int(match.group(1), 16)
    if file_id > FILE_ID_MAX:
        raise CorruptRecordError(f"file id {file_id} in the name is past the largest this format uses",
                                 path=path, offset=0, field="name",
                                 hint="journal_engine never names a file so; move it out of the journal directory")
    return file_id


def read_compaction_plan(path: str) -> dict:
    """The committed plan of a compaction control file: {"outputs": [.jec names], "replaced": [.jej names]}."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError as exc:     # a read-only view beside a writer that just finished the swap
        raise vanished(path) from exc
    except OSError as exc:
        raise durability.io_error(exc, path, "reading") from exc
    body, _, crc_text = raw.rpartition(b"\n")
    try:
        ok = int(crc_text) == crc32c(body)
        plan = json.loads(body) if ok else None
    except ValueError:
        ok, plan = False, None
    if not ok or not isinstance(plan, dict) or "outputs" not in plan or "replaced" not in plan:
        raise CorruptRecordError("compaction control file is damaged", path=path, offset=0, field="control",
                                 hint="it was written atomically, so something else changed it; restore it "
                                      "or remove it and the .jec files together")
    return plan


def list_directory(directory: str, *, remove_temporary: bool = False, as_if_compacted: bool = False,
                   unreadable: list | None = None) -> Listing:
    """Classify the directory's files; foreign names are left alone.

    `as_if_compacted`: where a compaction committed but did not finish its swap (a control file),
    list the data files as they will be once load() finishes it — its outputs in, the files they
    replace out — without renaming anything (a read-only view).
    `unreadable`: a reader that reports damage instead of stopping at it (the Spark source) passes a
    list; a data file whose header does not decode is appended to it as its CorruptRecordError and
    left out of the listing, instead of raised."""
    listing = Listing()
    plan = None
    if as_if_compacted and os.path.exists(os.path.join(directory, CONTROL_FILE)):
        plan = read_compaction_plan(os.path.join(directory, CONTROL_FILE))
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise durability.io_error(exc, directory, "listing") from exc
    for name in names:
        path = os.path.join(directory, name)
        if name.endswith(TMP_SUFFIX) and name.startswith("journal-"):
            if remove_temporary:
                durability.unlink(path, missing_ok=True)   # an unfinished creation: never part of the journal
            continue
        match = DATA_NAME.match(name)
        if plan is not None and name in plan["replaced"]:
            continue        # replaced by the committed compaction's outputs
        if plan is not None and name in plan["outputs"]:
            match = COMPACT_NAME.match(name)
        if match:
            try:
                data = read_header(path)
            except FileVanishedError:
                raise
            except CorruptRecordError as damaged:
                if unreadable is None:
                    raise
                unreadable.append(damaged)
                continue
            listing.data.append(data)
            listing.max_id = max(listing.max_id, _id_in_name(match, path), data.header.file_id)
            continue
        match = FREE_NAME.match(name) or COMPACT_NAME.match(name)
        if match:
            listing.max_id = max(listing.max_id, _id_in_name(match, path))
            (listing.free if FREE_NAME.match(name) else listing.compact_outputs).append(path)
    listing.data.sort(key=lambda d: d.header.sequence)
    for before, after in zip(listing.data, listing.data[1:]):
        if before.header.sequence == after.header.sequence:
            raise CorruptRecordError(
                f"two journal files claim replay position {after.header.sequence}: {before.path}",
                path=after.path, offset=24, field="sequence",
                hint="a compaction was interrupted and its control file lost; keep the older file")
    return listing


class FilePool:
    """Allocates file ids and keeps activated data files ready for the writer."""

    def __init__(self, directory: str, file_size: int, next_id: int, free: list, ready_target: int,
                 pool_files: int) -> None:
        self.directory = directory
        self.pool_files = pool_files   # free files kept for reuse at most; reclaimed ones past it are deleted
        self.file_size = file_size
        self._next_id = next_id
        self._free = list(free)
        self._ready: list[Segment] = []
        self._ready_target = max(1, ready_target)
        self._lock = threading.Lock()
        # activations run one at a time and the writer takes files in activation order,
        # so replay order (sequence = file id at activation) is append order
        self._activation_lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._closing = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    # ----- ids and single files -------------------------------------------------------------
    def allocate_id(self) -> int:
        with self._lock:
            file_id = self._next_id
            if file_id > FILE_ID_MAX:
                raise CorruptRecordError(f"no file id left after {FILE_ID_MAX}", path=self.directory,
                                         field="file_id", hint="a file id this large comes from a damaged header")
            self._next_id += 1
            return file_id

    def header(self, file_id: int, sequence: int, flags: int) -> bytes:
        """The encoded header of a file of this pool."""
        return FileHeader(file_id, sequence, flags, self.file_size).encode(crc32c)

    def create_free_file(self) -> str:
        file_id = self.allocate_id()
        path = os.path.join(self.directory, free_name(file_id))
        durability.create_zero_filled(path, self.file_size, self.header(file_id, file_id, HEADER_FLAG_FRESH))
        return path

    def activate(self, free_path: str | None = None) -> Segment:
        """Turn a free file (or a new one) into the next empty data file, mapped."""
        if free_path is None:
            with self._lock:
                free_path = self._free.pop(0) if self._free else None
        if free_path is None:
            free_path = self.create_free_file()
        elif _size_of(free_path) != self.file_size:
            durability.unlink(free_path)   # pre-allocated for another file_size: not reusable as is
            free_path = self.create_free_file()
        file_id = self.allocate_id()
        flags = HEADER_FLAG_FRESH if _is_fresh(free_path) else HEADER_FLAG_RECYCLED
        durability.write_header_durably(free_path, self.header(file_id, file_id, flags))
        durability.crash_point("activate-before-rename")
        path = os.path.join(self.directory, data_name(file_id))
        durability.rename_durably(free_path, path, self.directory)
        return Segment(path, file_id, file_id, self.file_size, FileHeader(file_id, file_id).data_start)

    def add_free(self, path: str) -> None:
        with self._lock:
            self._free.append(path)

    def reclaim(self, data_path: str, file_id: int) -> str | None:
        """A data file compaction no longer needs becomes a free file (its frames keep their old
        stamp), or is deleted when `pool_files` free files are kept already; returns the free path."""
        with self._lock:
            keep = len(self._free) < self.pool_files
        if not keep:
            durability.unlink(data_path)
            return None
        path = os.path.join(self.directory, free_name(file_id))
        durability.rename(data_path, path)
        self.add_free(path)
        return path

    # ----- the ready queue --------------------------------------------------------------------
    def add_ready(self, segment: Segment) -> None:
        with self._lock:
            self._ready.append(segment)

    def take(self) -> Segment:
        """The next data file for the writer; StoreFullError when none can be made."""
        with self._activation_lock:
            with self._lock:
                if self._ready:
                    segment = self._ready.pop(0)
                    self._wake.notify()
                    return segment
                error = self._error
                self._error = None
            if error is not None and not isinstance(error, StoreFullError):
                log.warning("journal file pool: earlier failure %s; trying again", error)
            segment = self.activate()
        with self._lock:
            self._wake.notify()
        return segment

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="journal-file-pool", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._closing and (len(self._ready) >= self._ready_target or self._error is not None):
                    self._wake.wait(1.0)
                    if self._error is not None and not self._closing:
                        break   # retry a failed creation after a pause
                if self._closing:
                    return
                self._error = None
            with self._activation_lock:
                try:
                    segment = self.activate()
                except BaseException as exc:   # kept for take() to report; the writer decides
                    with self._lock:
                        self._error = exc
                    continue
                with self._lock:
                    self._ready.append(segment)

    def ready_count(self) -> int:
        with self._lock:
            return len(self._ready)

    def free_count(self) -> int:
        with self._lock:
            return len(self._free)

    def close(self) -> None:
        with self._lock:
            self._closing = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join()
        for segment in self._ready:
            segment.close()
        self._ready = []
