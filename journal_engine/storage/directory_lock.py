"""One open store per directory: an exclusive, non-blocking flock on a lock file inside it.

The lock goes with the process (a killed process releases it), so a crash never leaves a
directory locked; two stores writing one directory would interleave their appends. The holder
writes its process id into the lock file, so the refusal a second opener gets names the process
to close (a stale id left by a killed holder is never read: the flock is free then).
"""
from __future__ import annotations

import fcntl
import os

from ..errors import JournalLockedError
from .durability import io_error

_PID_BYTES_MAX = 32


def _holder_pid(fd: int) -> int | None:
    """The process id the current holder wrote, None when unreadable (it may be writing it now)."""
    try:
        text = os.pread(fd, _PID_BYTES_MAX, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class DirectoryLock:
    """Held from construction until release(); JournalLockedError (with ``holder_pid``) when another
    holder exists."""

    def __init__(self, directory: str, lock_name: str, holder: str) -> None:
        self.path = os.path.join(directory, lock_name)
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise io_error(exc, self.path, "opening the lock file") from exc
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder_pid(self._fd)
            os.close(self._fd)
            self._fd = -1
            by = f"another {holder} in process {pid}" if pid is not None else f"another {holder}"
            error = JournalLockedError(f"{directory} is in use by {by}",
                                       hint=f"stop process {pid} (or close its {holder}) first" if pid is not None
                                       else f"close the other {holder} (or process) first")
            error.holder_pid = pid
            raise error from None
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError:
            pass            # the id only helps the message of a refused opener; the lock is what counts

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1
