"""Every durability step of the journal's files: the only Python module that calls fsync,
fdatasync, rename or unlink on them. (The compiled core fdatasyncs the files it appends to
itself, without the GIL — pyx/journal_engine/_core.pyx — and so does its twin, _twin/core.py;
tests/project/test_import_rules.py keeps the core off every module above the leaves.)

Order of a durable file creation (tmp -> fsync -> rename -> fsync(dir)):
  1. write the whole file under a ``.tmp`` name (zeros, then the header),
  2. fsync the file, so its blocks and size are on disk,
  3. rename it to its final name (atomic within a directory),
  4. fsync the directory, so the new name itself is durable.
A crash before 3 leaves a ``.tmp`` file that load() deletes; after 3 the file is
complete. Storage assumptions, each with the step it forces:
  * a rename is atomic but not durable until the directory is synced -> step 4;
  * a sector already on disk can be damaged by a torn rewrite -> appends after a
    sync start on a fresh sector (journal core pads with a PAD frame), and the first
    frame of a file starts on the sector after its header (format version 2);
  * writes through a mapping into a sparse file die with SIGBUS on a full disk ->
    files are filled with real zeros, never created sparse or with ftruncate.

Every failure leaves here as a JournalError that is also an OSError with the errno:
StoreFullError for a full disk (ENOSPC, EDQUOT), JournalIOError for anything else (EIO,
EACCES, ...), each naming the path and what was being done.

``crash_point(name)`` marks the gaps between steps: crash tests set
JOURNAL_ENGINE_CRASH_AT=<name> and the process exits there with status 137, and
``injected_failure(name)`` makes the step there fail with an I/O error instead (the
injectable layer the crash harness and the fault tests use; libfiu reaches the system
calls themselves).
"""
from __future__ import annotations

import contextlib
import errno
import os
import threading

from ..errors import JournalIOError, StoreFullError

CRASH_ENV = "JOURNAL_ENGINE_CRASH_AT"
FAIL_ENV = "JOURNAL_ENGINE_FAIL_AT"       # "point[,point...]": each fails once with EIO in this process
_crash_at: str | None = None            # set from the environment by arm_from_environment(), below
# every crash point the storage declares, in the order a journal passes them (the crash harness hits each)
CRASH_POINTS = ("create-before-rename", "activate-before-rename", "compact-outputs-written",
                "compact-control-written", "compact-first-output-renamed", "compact-swapped")


_injected: dict[str, list] = {}          # crash point -> [errno, failures left]
_injected_lock = threading.Lock()


def arm_from_environment() -> None:
    """Read the crash point and the failure points a test asked for from the environment again (they
    are read at import; a process forked to run a workload under another environment calls this)."""
    global _crash_at
    _crash_at = os.environ.get(CRASH_ENV)
    with _injected_lock:
        _injected.clear()
        _injected.update({point: [errno.EIO, 1] for point in filter(None, os.environ.get(FAIL_ENV, "").split(","))})


arm_from_environment()


def crash_point(name: str) -> None:
    """Exit at once, as a SIGKILL would, when a crash test asked for this point; raise the
    I/O error a test injected here."""
    assert name in CRASH_POINTS, f"crash point {name!r} is not declared in CRASH_POINTS"
    if _crash_at is not None and _crash_at == name:
        os._exit(137)
    if _injected:
        with _injected_lock:
            planned = _injected.get(name)
            if planned is None:
                return
            planned[1] -= 1
            if planned[1] <= 0:
                del _injected[name]
        raise io_error(OSError(planned[0], os.strerror(planned[0])), name, "at an injected failure point")


@contextlib.contextmanager
def injected_failure(point: str, error: int = errno.EIO, times: int = 1):
    """Within the block, the next `times` passes through crash point `point` raise `error`."""
    with _injected_lock:
        _injected[point] = [error, times]
    try:
        yield
    finally:
        with _injected_lock:
            _injected.pop(point, None)


def io_error(exc: OSError, path: str, what: str) -> JournalIOError:
    """The JournalError for an OSError that happened while `what` on `path`."""
    if isinstance(exc, JournalIOError):
        return exc
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreFullError(f"disk full while {what} {path}: {exc.strerror}", errno=exc.errno, path=path,
                              hint="free disk space; the journal stays loadable and nothing durable was lost")
    return JournalIOError(f"I/O error while {what} {path}: {exc.strerror or exc}", errno=exc.errno, path=path,
                          hint="check the device and the permissions; everything synced before stays loadable")


def _with_open(path: str, flags: int, what: str, action) -> None:
    """Open `path`, run action(fd), close; an OSError becomes the JournalIOError naming `what`."""
    try:
        fd = os.open(path, flags)
        try:
            action(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise io_error(exc, path, what) from exc


def fsync_directory(directory: str) -> None:
    _with_open(directory, os.O_RDONLY | os.O_DIRECTORY, "syncing the directory", os.fsync)


def fdatasync_path(path: str) -> None:
    _with_open(path, os.O_RDONLY, "syncing", os.fdatasync)


def rename(source: str, target: str) -> None:
    """A rename whose durability a later fsync_directory() provides (batched renames)."""
    try:
        os.rename(source, target)
    except OSError as exc:
        raise io_error(exc, source, f"renaming to {os.path.basename(target)}") from exc


def unlink(path: str, *, missing_ok: bool = False) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        if not missing_ok:
            raise
    except OSError as exc:
        raise io_error(exc, path, "deleting") from exc


def rename_durably(source: str, target: str, directory: str) -> None:
    rename(source, target)
    fsync_directory(directory)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """Every byte of `data` at `offset`: pwrite may write fewer bytes than asked (a short write),
    and a file synced and named with the rest missing would lose what it was to hold."""
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, offset)
        view = view[done:]
        offset += done


def _write_zeros(fd: int, start: int, end: int, chunk: int) -> None:
    """Real zeros over [start, end) of an open file (never a hole: see the storage assumptions)."""
    zeros = bytes(min(chunk, max(end - start, 0)))
    pos = start
    while pos < end:
        length = min(chunk, end - pos)
        _pwrite_all(fd, zeros[:length], pos)
        pos += length


def create_zero_filled(path: str, size: int, header: bytes, chunk: int = 1 << 20) -> None:
    """Create `path` of `size` bytes of real zeros starting with `header`, via tmp+fsync+rename."""
    tmp = path + ".tmp"
    try:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_zeros(fd, 0, size, chunk)
            _pwrite_all(fd, header, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        crash_point("create-before-rename")
        rename_durably(tmp, path, os.path.dirname(path) or ".")
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise io_error(exc, path, "pre-allocating") from exc


def write_header_durably(path: str, header: bytes) -> None:
    """Rewrite a recycled file's header in place and sync it."""
    def rewrite(fd: int) -> None:
        _pwrite_all(fd, header, 0)
        os.fdatasync(fd)

    _with_open(path, os.O_RDWR, "re-initialising", rewrite)


def write_file_durably(path: str, data: bytes) -> None:
    """Small control files: tmp, fsync, rename, fsync(dir)."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        rename_durably(tmp, path, os.path.dirname(path) or ".")
    except OSError as exc:
        raise io_error(exc, path, "writing") from exc


def zero_fill(path: str, start: int, size: int, chunk: int = 1 << 20) -> None:
    """Write real zeros over [start, size) of `path` and fdatasync it: erases a torn tail (and
    fills a file cut short back to its size), so later appends never sit in front of stale damage."""
    def erase(fd: int) -> None:
        _write_zeros(fd, start, size, chunk)
        os.fdatasync(fd)

    _with_open(path, os.O_RDWR, "erasing a torn tail of", erase)
