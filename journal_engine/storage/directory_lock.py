"""One open store per directory: an exclusive, non-blocking flock on a lock file inside it.

The lock goes with the process (a killed process releases it), so a crash never leaves a
directory locked; two stores writing one directory would interleave their appends.
"""
from __future__ import annotations

import fcntl
import os

from ..errors import JournalLockedError
from .durability import io_error


class DirectoryLock:
    """Held from construction until release(); JournalLockedError when another holder exists."""

    def __init__(self, directory: str, lock_name: str, holder: str) -> None:
        self.path = os.path.join(directory, lock_name)
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise io_error(exc, self.path, "opening the lock file") from exc
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            self._fd = -1
            raise JournalLockedError(f"{directory} is in use by another {holder}",
                                     hint=f"close the other {holder} (or process) first") from None

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1
