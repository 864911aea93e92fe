"""The checkpoint: every data file's columns, saved at a clean close, so the next load need not decode.

A load decodes every frame of every file into columns (storage/journal/scan.py) and replays them. A clean
close writes what that decoding would give -- each data file's columns as a replay reads them, where
its frames end, and the CRC32C of every byte of the file -- into one file, ``CHECKPOINT_FILE``
(docs/internals/format.md, "The checkpoint"). The next writing ``load()`` takes it: it maps it and
removes its name at once (a crash after the load leaves no checkpoint that the appends since made
stale). Another holder of its inode (a hard link, a descriptor opened before) can still cut it: the
mapping is a CheckpointMapping, whose lost pages read as zeros and set its ``cut`` flag instead of
killing the process with SIGBUS, and every read of its columns that is handed out is checked against
that flag (a cut during the load: the load decodes every file again; after it: FileChangedError
naming the checkpoint). Every field of every entry is checked in Python's integers before anything
reaches the compiled checks; for each data file, the CRC32C of the file's bytes and of the saved
columns are checked again, every row must lie inside the file (with arithmetic no forged value can
overflow) and be what the file holds where it lies; then the saved columns stand in for the decoded
ones, so the replay, the damage it reports and the records it returns are the same as a full
decode's. A file whose bytes changed since (another process wrote to it, or a release that keeps no
checkpoint appended to it) is decoded, as is every file when there is no checkpoint (after a crash)
or it cannot be read (it is ignored, with a warning). A checkpoint in which anything did not check --
a damaged, forged, cut or stale part -- is never put back by a load that fails: it costs one decode,
and does not outlive that load.

The checkpoint is not synced: a checkpoint lost or torn by a power failure is one that does not
check, and the files are decoded. Its size is 43 bytes a frame.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import struct
from typing import Callable, Iterable

from ..._impl import CheckpointMapping, FrameColumns, checkpointed_columns, crc32c, image_is_sound, image_size
from ...errors import JournalError
from ...limits import FILE_SIZE_MAX_BYTES, FRAME_ALIGNMENT_BYTES
from ...record_format import FrameCheck
from .. import durability
from .format import CHECKPOINT_FILE, stamp_of
from .scan import ColumnsImage, SavedColumns, image_of, in_threads
from .segment_files import DataFile

log = logging.getLogger("journal_engine.storage.journal")

MAGIC = b"\x89JECKPT\n"
VERSION = 2     # 2: the trailer
# the last 8 bytes: where the file was cut anywhere before them, they read as zeros (a patched page, or
# the zeroed rest of the page the cut falls in), which is how a reader of the mapping notices a cut
# that raised no SIGBUS (CheckpointMapping.cut)
TRAILER = b"\x89JECKEND"
BYTE_ORDER_PROBE = 0x01020304       # written in native order: a checkpoint of another byte order does not read
# magic, version, byte order probe, entries, reserved, the entry table's CRC32C, this header's CRC32C
_HEADER = struct.Struct("=8sIIIIII")
# per data file: file id, sequence, file size, data start, rows, GROUP frames skipped, end offset, where its
# image lies in the checkpoint, end check, CRC32C of the file's bytes, CRC32C of the image, reserved
_ENTRY = struct.Struct("=QQQQQQQQIIII")
_IMAGE_ALIGNMENT = 8


@dataclasses.dataclass(frozen=True)
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
    there, and the next clean close copies the images of the files nothing wrote since (``kept``).
    Its pages cannot be a SIGBUS (CheckpointMapping); ``cut`` says another process cut it."""

    def __init__(self, path: str, mapping: CheckpointMapping, entries: dict) -> None:
        self.path = path
        self._mapping = mapping
        self._view = memoryview(mapping)
        self._entries = entries         # (file id, sequence) -> _Entry
        self._used: dict[str, tuple] = {}    # path -> (file id, sequence) of each file whose columns came from here
        self._refused = False           # a part of it did not check: it is not put back

    @property
    def cut(self) -> bool:
        """Whether another holder of its inode cut it since it was taken (its columns may have read zeros)."""
        return self._mapping.cut

    def put_back(self) -> None:
        """Name the checkpoint again, byte for byte (a load that failed took it), unless a part of it
        did not check, or it was cut: never raises, as it runs while a load's error propagates; a
        checkpoint that cannot be put back is only a slower load."""
        if self._refused or self.cut:
            log.warning("the checkpoint %s is not put back: %s", self.path,
                        "it was cut while the load held it" if self.cut else "a part of it did not check")
            return
        if not self._sound():
            log.warning("the checkpoint %s is not put back: a file's columns in it do not check", self.path)
            return
        try:
            if not os.path.exists(self.path):
                _replace(self.path, lambda fd, temporary: _write_at(fd, self._view, 0, temporary))
                if self.cut:       # cut while it was written back: what was written may hold zeros
                    durability.unlink(self.path, missing_ok=True)
        except (OSError, JournalError) as exc:
            log.warning("the checkpoint %s could not be put back (%s): the next load decodes every file",
                        self.path, exc)

    def _sound(self) -> bool:
        """Whether every image checks without its data file: the images a failed load did not reach
        are checked before the checkpoint is named again."""
        return all(image_is_sound(self._image(entry), entry.count, entry.start, entry.end_offset, entry.image_crc)
                   for entry in self._entries.values()) and not self.cut

    def saved(self, data: DataFile) -> SavedColumns | None:
        """The saved columns of a listed data file, for scan.scan_data_file, or None when the
        checkpoint names no such file."""
        key = (data.header.file_id, data.header.sequence)
        entry = self._entries.get(key)
        if entry is None or entry.size != data.size or entry.start != data.header.data_start:
            return None

        def columns(view) -> FrameColumns | None:
            found = checkpointed_columns(view, self._image(entry), entry.count, entry.start, entry.end_offset,
                                         entry.end_check, entry.groups_skipped, entry.file_crc, entry.image_crc,
                                         stamp_of(data.header.file_id), self._mapping)
            if found is None:
                self._refused = True
                log.info("the checkpoint's columns of %s no longer match the file%s: it is decoded", data.path,
                         " (the checkpoint was cut)" if self.cut else "")
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
        caller vouches nothing wrote to the file since); None once the checkpoint was cut."""
        key = self._used.get(data.path)
        if key is None or key != (data.header.file_id, data.header.sequence) or self.cut:
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
        mapping = CheckpointMapping(fd, size, path, TRAILER)
    except (OSError, JournalError) as exc:
        log.warning("the checkpoint %s cannot be read (%s): every file is decoded", path, exc)
        return None
    finally:
        os.close(fd)
    problem, entries = _read_entries(mapping)
    if not problem and mapping.cut:
        problem = "it was cut while it was read"
    if problem:
        log.warning("the checkpoint %s is not usable (%s): every file is decoded", path, problem)
        return None
    return Checkpoint(path, mapping, entries)


def _read_entries(mapping) -> tuple[str, dict]:
    """('', entries) of a checkpoint's mapping, or (what is wrong, {}). Every field of every entry is
    checked against the checkpoint and the file it describes, in Python's integers (no forged value
    overflows them), before anything reaches the compiled checks that take C integers."""
    view = memoryview(mapping)
    size = len(view)
    if size < _HEADER.size:
        return f"{size} bytes, shorter than its header", {}
    head = bytes(view[:_HEADER.size])
    magic, version, probe, count, _reserved, table_crc, header_crc = _HEADER.unpack(head)
    if magic != MAGIC:
        return "not a checkpoint (bad magic)", {}
    if header_crc != crc32c(head[:-4]):
        return "header checksum mismatch", {}
    if version != VERSION:
        return f"version {version}, this release reads version {VERSION}", {}
    if probe != BYTE_ORDER_PROBE:
        return "written on a machine of another byte order", {}
    if bytes(view[size - len(TRAILER):]) != TRAILER:
        return "its trailer is missing (cut short)", {}
    size -= len(TRAILER)        # what the images may use
    table_end = _HEADER.size + count * _ENTRY.size
    if table_end > size:
        return f"{count} entries do not fit its {size} bytes", {}
    table = bytes(view[_HEADER.size:table_end])
    if crc32c(table) != table_crc:
        return "entry table checksum mismatch", {}
    entries = {}
    for index in range(count):
        (file_id, sequence, file_size, start, rows, groups_skipped, end_offset, image_at, end_check, file_crc,
         image_crc, _pad) = _ENTRY.unpack_from(table, index * _ENTRY.size)
        problem = _entry_problem(size, table_end, file_size, start, rows, groups_skipped, end_offset, image_at,
                                 end_check)
        if problem:
            return f"the entry of file id {file_id} (entry {index}) {problem}", {}
        if (file_id, sequence) in entries:
            return f"file id {file_id}, sequence {sequence} has two entries", {}
        entries[(file_id, sequence)] = _Entry(file_size, start, rows, groups_skipped, end_offset, image_at,
                                              end_check, file_crc, image_crc)
    return "", entries


def _entry_problem(size: int, table_end: int, file_size: int, start: int, rows: int, groups_skipped: int,
                   end_offset: int, image_at: int, end_check: int) -> str:
    """What in one entry no journal file or this checkpoint can hold, or ''."""
    if not start <= end_offset <= file_size <= FILE_SIZE_MAX_BYTES:
        return (f"names offsets no journal file has (data start {start}, end {end_offset}, "
                f"file size {file_size})")
    if rows > (end_offset - start) // FRAME_ALIGNMENT_BYTES or groups_skipped > file_size:
        return f"counts more frames ({rows} rows, {groups_skipped} groups) than its file can hold"
    if not FrameCheck.VALID <= end_check <= FrameCheck.INVALID:
        return f"ends on a check {end_check} no reader gives"
    if image_at < table_end or image_at % _IMAGE_ALIGNMENT or image_at > size - image_size(rows):
        return f"has its columns ({image_size(rows)} bytes at {image_at}) outside the checkpoint"
    return ""


def save(directory: str, files: list[DataFile], taken: Checkpoint | None, written: Iterable[str]) -> None:
    """Write the checkpoint of `files` (a clean close, the journal locked and idle): a file whose
    columns the load took from `taken` and whose path is not in `written` (the files appended to
    since) keeps its saved image; every other file is decoded now, on threads. Written under a
    temporary name, then renamed over the old one; not synced (see the module docstring). Raises
    JournalIOError / StoreFullError."""
    written = set(written)

    def image(data: DataFile) -> ColumnsImage:
        kept = taken.kept(data) if taken is not None and data.path not in written else None
        if kept is not None:
            # copied out of the taken checkpoint's mapping first: another holder may cut it now, and
            # a cut under the copy reads zeros (a patched page) that the look at ``cut`` after it finds
            kept = dataclasses.replace(kept, image=bytes(kept.image))
            if taken.cut:
                kept = None
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
        _write_at(fd, TRAILER, at, temporary)
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

