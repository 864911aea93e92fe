"""The serving lock of a store directory: one ``serve-stomp`` serves a directory at a time, and a
backup (``serve-stomp --backup``) blocks on the lock until the live server dies, then takes over.

Why a lock of its own beside the store's (``storage/directory_lock.py``): the store locks its
directory with flock(2) on an ``O_DIRECTORY`` descriptor. That excludes a second opener on this
machine, but not on another one sharing the directory over NFS: Linux's NFS client sends flock to the
server only as a whole-file byte-range lock on a file opened for writing, and a directory can be
neither. The serving lock is therefore a whole-file write lock, taken with fcntl(2) on a regular file
opened read-write (``SERVING_LOCK_FILE`` inside the directory): an open-file-description lock
(``F_OFD_SETLK``) where the system has one, a POSIX record lock otherwise. On NFSv4 such a lock is
held by the server under the client's lease; on a local file system the kernel drops it with the
holder's last descriptor. A killed holder (SIGKILL, OOM kill) thus frees it at once locally, and on
NFS once the server expires the dead client's lease (docs/failover.md).

The holder writes ``PID HOST`` into the file: a waiting backup names who it waits for, also across
machines (where ``/proc/locks`` knows nothing of the holder).

The backup's wait is one blocking fcntl call: no polling, no CPU while it waits. SIGTERM or SIGINT
ends it (their handlers raise out of the interrupted call) and the backup exits with status 0,
having bound no port and opened no store.

Failback (``serve-stomp --failback``, Artemis's ``allow-failback`` of a shared-store backup): a restarted
primary writes ``PID HOST`` into ``FAILBACK_REQUEST_FILE`` and waits for the lock; a backup that serves
looks for that file every ``SERVED_FAILBACK_POLL_S``, stops serving (its clients' connections closed, its
store closed cleanly), releases the lock, and waits until the primary, holding the lock now, has
withdrawn the request; then it waits for the lock again, as a backup. It waits for the withdrawal
because fcntl gives a released lock to no waiter in particular: a backup asking again at once could
take it back. A request whose writer is a dead process of this machine is stale and ignored (removed).
"""
from __future__ import annotations

import errno
import fcntl
import os
import signal
import socket
import struct
import time
from collections.abc import Callable

from ..errors import ConfigError, JournalLockedError
from ..storage.durability import io_error

__all__ = ["SERVING_LOCK_FILE", "FAILBACK_REQUEST_FILE", "ServingLock", "FailbackRequest", "WaitStopped"]

SERVING_LOCK_FILE = "serve-stomp.lock"
FAILBACK_REQUEST_FILE = "serve-stomp.failback"
_HOLDER_BYTES_MAX = 512
# struct flock on Linux and the BSDs' 64-bit layout: type, whence, start, len, pid (and padding)
_FLOCK = "hhqqi4x"
_SET_NOWAIT = getattr(fcntl, "F_OFD_SETLK", fcntl.F_SETLK)
_SET_WAIT = getattr(fcntl, "F_OFD_SETLKW", fcntl.F_SETLKW)


class WaitStopped(Exception):
    """SIGTERM or SIGINT came while a backup waited for the serving lock."""


def _whole_file(kind: int) -> bytes:
    return struct.pack(_FLOCK, kind, os.SEEK_SET, 0, 0, 0)


def _raise_stopped(signum, frame) -> None:
    raise WaitStopped(signal.Signals(signum).name)


class ServingLock:
    """The serving lock of ``directory``, held from :meth:`take` or :meth:`wait` until :meth:`release`
    (or the process's end)."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = os.fspath(directory)
        self.path = os.path.join(self.directory, SERVING_LOCK_FILE)
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise io_error(exc, self.path, "opening the serving lock file") from exc
        self.held = False

    @classmethod
    def for_backup(cls, directory: str | os.PathLike) -> "ServingLock":
        """The lock a backup waits on; ConfigError when ``directory`` does not exist: a backup waits for
        a live server's store, and a missing directory is more often a shared file system not mounted
        (where serving a new empty store would hide the real one) than a store not made yet."""
        path = os.fspath(directory)
        if not os.path.isdir(path):
            raise ConfigError("--data", path, "does not exist: a backup waits for the store of a live server "
                              "and creates none; nothing was created",
                              hint="start the live server first (it creates the directory), or mount the shared "
                                   "file system that holds it")
        return cls(path)

    def holder(self) -> str:
        """Who holds the lock, as its holder wrote it: ``pid N on HOST`` (or what the file holds)."""
        try:
            text = os.pread(self._fd, _HOLDER_BYTES_MAX, 0).decode("utf-8", "replace").strip()
        except OSError:
            text = ""
        pid, _, host = text.partition(" ")
        if not pid.isdigit():
            return "an unknown process"
        return f"pid {pid} on {host}" if host else f"pid {pid}"

    def _lock(self, command: int) -> bool:
        """True once held; False when another holds it (the non-waiting command only)."""
        try:
            fcntl.fcntl(self._fd, command, _whole_file(fcntl.F_WRLCK))
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise io_error(exc, self.path, "locking the serving lock file") from exc
        self.held = True
        self._write_holder()
        return True

    def take(self) -> None:
        """Take the lock now; JournalLockedError naming the holder when another server has it."""
        if not self._lock(_SET_NOWAIT):
            holder = self.holder()
            self.release()
            error = JournalLockedError(f"{self.directory} is served by another serve-stomp ({holder})",
                                       hint="stop that server first, or start this one with --backup to take "
                                            "over when it dies")
            raise error

    def wait(self, announce: Callable[[str], None]) -> bool:
        """Take the lock, blocking while another holds it (``announce(holder)`` is called once, before
        the wait). False when SIGTERM or SIGINT ended the wait (the lock is then released)."""
        previous = {signum: signal.signal(signum, _raise_stopped) for signum in (signal.SIGTERM, signal.SIGINT)}
        try:
            if self._lock(_SET_NOWAIT):
                return True
            announce(self.holder())
            return self._lock(_SET_WAIT)
        except WaitStopped:
            self.release()
            return False
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _write_holder(self) -> None:
        """``PID HOST`` into the file: only the message of a waiting backup needs it, so a failure is ignored."""
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        except OSError:
            pass

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)          # the lock goes with its open file description
            self._fd = -1
            self.held = False


class FailbackRequest:
    """A restarted primary's request that the backup serving ``directory`` hand it back (see the module
    docstring). Not durable data: a crash loses it, and the primary's wait for the lock goes on."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.path = os.path.join(os.fspath(directory), FAILBACK_REQUEST_FILE)

    def make(self) -> None:
        """Ask: ``PID HOST`` into the request file."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
            finally:
                os.close(fd)
        except OSError as exc:
            raise io_error(exc, self.path, "writing the failback request") from exc

    def withdraw(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise io_error(exc, self.path, "removing the failback request") from exc

    def requester(self) -> str | None:
        """Who asks (``pid N on HOST``), None when nobody does. A request of a dead process of this machine
        is stale: removed, and None."""
        try:
            with open(self.path, "rb") as handle:
                text = handle.read(_HOLDER_BYTES_MAX).decode("utf-8", "replace").strip()
        except FileNotFoundError:
            return None
        except OSError:
            return "an unknown process"
        pid, _, host = text.partition(" ")
        if not pid.isdigit():
            return "an unknown process"     # being written: a request all the same
        if host == socket.gethostname() and not _alive(int(pid)):
            self.withdraw()
            return None
        return f"pid {pid} on {host}" if host else f"pid {pid}"

    def wait_withdrawn(self, timeout_s: float, poll_s: float) -> bool:
        """Wait until the request is gone (the primary took the lock); False after ``timeout_s`` (the request
        is then removed as stale)."""
        deadline = time.monotonic() + timeout_s
        while os.path.exists(self.path):
            if time.monotonic() >= deadline:
                self.withdraw()
                return False
            time.sleep(poll_s)
        return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
