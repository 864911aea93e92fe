"""Every durability step of the journal: the only module that calls fsync, fdatasync or rename.

Order of a durable file creation (tmp -> fsync -> rename -> fsync(dir)):
  1. write the whole file under a ``.tmp`` name (zeros, then the header),
  2. fsync the file, so its blocks and size are on disk,
  3. rename it to its final name (atomic within a directory),
  4. fsync the directory, so the new name itself is durable.
A crash before 3 leaves a ``.tmp`` file that load() deletes; after 3 the file is
complete. Storage assumptions, each with the step it forces:
  * a rename is atomic but not durable until the directory is synced -> step 4;
  * a sector already on disk can be damaged by a torn rewrite -> appends after a
    sync start on a fresh sector (journal core pads with a PAD frame);
  * writes through a mapping into a sparse file die with SIGBUS on a full disk ->
    files are filled with real zeros, never created sparse or with ftruncate.

``crash_point(name)`` marks the gaps between steps: crash tests set
JOURNAL_ENGINE_CRASH_AT=<name> and the process exits there with status 137.
"""
from __future__ import annotations

import errno
import os

from ..errors import StoreFullError

CRASH_ENV = "JOURNAL_ENGINE_CRASH_AT"
_crash_at = os.environ.get(CRASH_ENV)


def crash_point(name: str) -> None:
    """Exit at once, as a SIGKILL would, when a crash test asked for this point."""
    if _crash_at is not None and _crash_at == name:
        os._exit(137)


def _full(exc: OSError, path: str, what: str) -> Exception:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreFullError(f"disk full while {what} {path}: {exc.strerror}",
                              hint="free disk space; the journal stays loadable and nothing durable was lost")
    return exc


def fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fdatasync_path(path: str) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def rename_durably(source: str, target: str, directory: str) -> None:
    os.rename(source, target)
    fsync_directory(directory)


def create_zero_filled(path: str, size: int, header: bytes, chunk: int = 1 << 20) -> None:
    """Create `path` of `size` bytes of real zeros starting with `header`, via tmp+fsync+rename."""
    tmp = path + ".tmp"
    zeros = bytes(min(chunk, size))
    try:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            written = 0
            while written < size:
                written += os.write(fd, zeros[: min(chunk, size - written)])
            os.pwrite(fd, header, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        crash_point("create-before-rename")
        rename_durably(tmp, path, os.path.dirname(path) or ".")
    except OSError as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise _full(exc, path, "pre-allocating") from exc


def write_header_durably(path: str, header: bytes) -> None:
    """Rewrite a recycled file's header in place and sync it."""
    try:
        fd = os.open(path, os.O_RDWR)
        try:
            os.pwrite(fd, header, 0)
            os.fdatasync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise _full(exc, path, "re-initialising") from exc


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
        raise _full(exc, path, "writing") from exc


def sync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
