"""One open store per directory: an exclusive, non-blocking flock on the directory itself.

The lock is on the directory's inode (an ``O_DIRECTORY`` descriptor), not on a file inside it: a
lock file can be deleted, and a second opener would then lock a new file at the same name and
write beside the first. The directory cannot be deleted while it holds files, and a directory
moved or replaced under an open store is caught by ``check()``, which the writers call before
each step that writes a new file into the path (a file switch, a compaction).

One directory, one lock, whatever opens it: a Journal, an LMDB store and a MessageStore (on its
top directory, before it creates ``messages/`` and ``bindings/``) all take this lock, so two
backends started at once on one directory cannot both write it.

The lock goes with the process (a killed process releases it), so a crash never leaves a
directory locked. The holder writes its process id into a lock file (``lock_name``) as well; it
only serves the refusal message on systems without ``/proc/locks``, which names the holder of the
flock itself (a pid file may be deleted, or left stale by a killed holder).

An inspection that must keep a writer out while it reads (LMDB read without its reader table)
takes the lock shared (``DirectoryLock.shared``): writers are refused meanwhile, other
inspections are not, and nothing is written.
"""
from __future__ import annotations

import fcntl
import os

from ..errors import JournalLockedError
from .durability import io_error

_PID_BYTES_MAX = 32
_PROC_LOCKS = "/proc/locks"


def _flock_holder(stat: os.stat_result) -> tuple[int, bool] | None:
    """(process id, exclusive) of a holder of an flock on this inode, from /proc/locks (Linux);
    None when unknown. A line reads ``1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF``."""
    inode = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    try:
        with open(_PROC_LOCKS, encoding="ascii", errors="replace") as locks:
            lines = locks.readlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == inode and fields[4].isdigit():
            pid = int(fields[4])
            if pid > 0:                 # 0 or -1: a holder outside this pid namespace
                return pid, fields[3] == "WRITE"
    return None


def _pid_in_file(path: str) -> int | None:
    """The process id a holder wrote into its lock file, None when absent or unreadable."""
    try:
        with open(path, "rb") as handle:
            text = handle.read(_PID_BYTES_MAX).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _refusal(directory: str, holder: str, fd: int, lock_path: str | None) -> JournalLockedError:
    """The error a refused opener gets, naming the holding process when it can be found."""
    found = _flock_holder(os.fstat(fd))
    pid, exclusive = found if found is not None else (_pid_in_file(lock_path) if lock_path else None, True)
    if not exclusive:
        error = JournalLockedError(f"{directory} is being inspected by process {pid}",
                                   hint="open it again once the inspection (print, stats, verify...) ends")
    elif pid is not None:
        error = JournalLockedError(f"{directory} is in use by another {holder} in process {pid}",
                                   hint=f"stop process {pid} (or close its {holder}) first")
    else:
        error = JournalLockedError(f"{directory} is in use by another {holder}",
                                   hint=f"close the other {holder} (or process) first")
    error.holder_pid = pid
    return error


def _open_directory(directory: str) -> int:
    try:
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise io_error(exc, directory, "opening the directory to lock it") from exc


class DirectoryLock:
    """Held from construction until release(); JournalLockedError (with ``holder_pid``) when another
    holder exists. ``lock_name``: the file inside the directory the holder's process id is written
    to (None: none, e.g. a message store's top directory, which holds only its two stores)."""

    def __init__(self, directory: str, lock_name: str | None, holder: str, *, exclusive: bool = True) -> None:
        self.directory = directory
        self.path = os.path.join(directory, lock_name) if lock_name is not None else None
        self._fd = _open_directory(directory)
        try:
            fcntl.flock(self._fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            error = _refusal(directory, holder, self._fd, self.path)
            self.release()
            raise error from None
        except OSError as exc:
            self.release()
            raise io_error(exc, directory, "locking the directory") from exc
        stat = os.fstat(self._fd)
        self._identity = (stat.st_dev, stat.st_ino)
        if self.path is not None and exclusive:
            self._write_pid()

    @classmethod
    def shared(cls, directory: str) -> "DirectoryLock | None":
        """The lock taken shared, for an inspection: None when a writer holds it (then the caller
        must read in a way that is safe beside a writer, or refuse)."""
        try:
            return cls(directory, None, "inspection", exclusive=False)
        except JournalLockedError:
            return None

    def _write_pid(self) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError:
            return          # the id only helps the message of a refused opener; the flock is what counts
        try:
            os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        except OSError:
            pass
        finally:
            os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def check(self) -> None:
        """Raise JournalLockedError unless the directory's path still names the directory locked
        (one stat): after a move or a replacement, files written by path would land in a directory
        another opener may hold."""
        try:
            stat = os.stat(self.directory)
            identity = (stat.st_dev, stat.st_ino)
        except OSError:
            identity = None
        if identity != self._identity:
            raise JournalLockedError(
                f"{self.directory} is no longer the directory this store locked (moved, deleted or replaced)",
                hint="close this store and open the directory again where it now is")

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)          # closing the only descriptor releases the flock
            self._fd = -1
