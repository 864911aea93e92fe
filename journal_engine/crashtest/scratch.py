"""The scratch directories of a campaign: marked with their owner, removed at the campaign's end or
on SIGINT / SIGTERM, and -- when a campaign was killed outright, where no code of it runs again --
by the next campaign's start.

Each directory a campaign makes is named ``journal-engine-crash-test-*`` and holds an owner file
with the campaign's pid and the start time of that process (so a pid reused by another process is
not taken for a live owner). A directory whose owner is gone is stale: a small tmpfs mounted in it
is unmounted, then the directory is removed. Directories without an owner file are left alone (they
are nobody's this code can vouch for).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

PREFIX = "journal-engine-crash-test-"
OWNER_FILE = ".crash-test-owner"
SHARED_MEMORY = "/dev/shm"
# the children of killed workers die with them, but not at once: removal is retried meanwhile
REMOVE_ATTEMPTS = 100
REMOVE_RETRY_S = 0.05


class CampaignInterrupted(BaseException):
    """A campaign stopped by a signal (its scratch removed); ``signum`` names the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


def _process_start(pid: int) -> str | None:
    """The start time of process `pid` (clock ticks since boot), None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return fields[19].decode()


def make_owned_dir(parent: str | os.PathLike) -> str:
    """A new scratch directory in `parent`, marked as this process's."""
    os.makedirs(parent, exist_ok=True)
    path = tempfile.mkdtemp(prefix=PREFIX, dir=parent)
    with open(os.path.join(path, OWNER_FILE), "w", encoding="ascii") as handle:
        handle.write(f"{os.getpid()} {_process_start(os.getpid())}\n")
    return path


def owner_alive(path: str | os.PathLike) -> bool | None:
    """Whether the campaign that made `path` still runs (None: the directory has no owner file)."""
    try:
        pid, start = Path(path, OWNER_FILE).read_text(encoding="ascii").split()
    except (OSError, ValueError):
        return None
    return _process_start(int(pid)) == start


def remove(path: str | os.PathLike) -> None:
    """Remove a scratch directory, unmounting first whatever is mounted beneath it."""
    path = os.path.realpath(path)
    for mount_point in _mounts_beneath(path):
        subprocess.run(["umount", "-l", mount_point], capture_output=True, check=False)
    for _ in range(REMOVE_ATTEMPTS):   # a child killed a moment ago may not have died yet
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            return
        time.sleep(REMOVE_RETRY_S)


def default_parents() -> list[str]:
    """Where campaigns put scratch unless told otherwise: the temporary directory and /dev/shm."""
    parents = [tempfile.gettempdir()]
    if os.path.isdir(SHARED_MEMORY):
        parents.append(SHARED_MEMORY)
    return parents


def sweep_stale(parents: list[str | os.PathLike]) -> list[str]:
    """Remove the scratch directories in `parents` whose campaign is gone; returns what was removed."""
    removed = []
    for parent in dict.fromkeys(os.path.realpath(p) for p in parents):
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            path = os.path.join(parent, name)
            if name.startswith(PREFIX) and os.path.isdir(path) and owner_alive(path) is False:
                remove(path)
                removed.append(path)
    return removed


def _mounts_beneath(path: str) -> list[str]:
    try:
        with open("/proc/self/mounts", encoding="utf-8") as handle:
            points = [line.split()[1].encode().decode("unicode_escape") for line in handle]
    except OSError:
        return []
    return sorted((p for p in points if p.startswith(path + os.sep)), reverse=True)


@contextlib.contextmanager
def signals_interrupt():
    """Within the block SIGTERM (and SIGHUP) raise CampaignInterrupted, as SIGINT raises
    KeyboardInterrupt, so the campaign's clean-up runs (only in the main thread, where Python
    delivers signals; elsewhere the block changes nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, _frame):
        raise CampaignInterrupted(signum)

    previous = {signum: signal.signal(signum, interrupt) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
