"""Workload children: start one, read its oracle as it runs, SIGKILL it on cue, reap it.

A campaign starts over a thousand children. A fresh interpreter costs its start-up and the imports
of the whole engine (about a third of a second of CPU each on a busy machine: more than most runs
themselves); a process that has those modules imported and runs a single thread forks instead (the
campaign's pool workers do), so a child costs a fork. A process with other threads (a test runner,
the campaign's coordinating process) starts a fresh interpreter, since a fork copies locks other
threads may hold.

Every child dies with the process that started it (Linux ``PR_SET_PDEATHSIG``), so a campaign
killed outright leaves no workload writing into its scratch.
"""
from __future__ import annotations

import ctypes
import importlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Callable

from ..storage import durability

_PR_SET_PDEATHSIG = 1
PARENT_ENV = "JOURNAL_ENGINE_CRASH_TEST_PARENT"     # a pid the workload is to die with
READY_TIMEOUT_S = 30.0        # a child that never finishes its recovery is killed after this
RUN_TIMEOUT_S = 120.0         # and any child after this
HELPER_TIMEOUT_S = 60.0       # the kill waits this long at most for an outside action's process to end


def die_with_parent(parent_pid: int | None = None) -> None:
    """Ask the kernel to SIGKILL this process when its parent ends (and end now if it already did)."""
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(137)


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (its children, theirs, ...), from /proc; empty where there is none."""
    parents = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    parents[int(entry)] = int(handle.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def kill_with_descendants(pids: set[int]) -> None:
    """SIGKILL the processes `pids` and every process below them (a campaign's workers, their
    workloads, recorded runs and fiu-run children) all at once, so none is left writing into the
    scratch (a child that outlived its worker would no longer be below it)."""
    for pid in set(pids).union(*(descendants(pid) for pid in pids)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def forking_is_safe() -> bool:
    return threading.active_count() == 1 and hasattr(os, "fork")


def bound_to_parent() -> dict:
    """Environment for a workload started as a new program: it calls die_with_parent_as_told() first
    thing, so it dies with this process (a preexec_fn would do it earlier, but is unsafe in a process
    with threads, which a worker has after some recoveries)."""
    return {PARENT_ENV: str(os.getpid())}


def die_with_parent_as_told() -> None:
    """In a workload's main(): die with the process that started it, when that one asked."""
    parent = os.environ.get(PARENT_ENV)
    if parent:
        die_with_parent(int(parent))


def run_child(module_and_args: list[str], *, kill_after: float | None, env: dict | None = None,
              outside: tuple[float, Callable] | None = None) -> tuple[list[str], int, str]:
    """Run ``python -m module args...`` (forked from this process where that is safe), reading its
    oracle; SIGKILL it `kill_after` seconds after its ``R`` line (None: let it end).
    `outside` = (delay_s, act): ``act(pid)`` runs here `delay_s` after the ``R`` line, while the child
    runs, as another process acting on the child's files would; when it returns a process (a Popen:
    an inspection tool), the kill waits for that process to end (HELPER_TIMEOUT_S at most). A child
    that ends first never sees the act.
    Returns the complete lines it printed, its exit status (negative: the signal) and its stderr."""
    with tempfile.TemporaryFile() as errors:
        if forking_is_safe():
            pid, out = _fork(module_and_args, env or {}, errors.fileno())
            process = None
        else:
            process = subprocess.Popen([sys.executable, "-m"] + module_and_args, stdout=subprocess.PIPE,
                                       stderr=errors, env={**os.environ, **(env or {}), **bound_to_parent()})
            pid, out = process.pid, process.stdout.fileno()
        try:
            lines = _read_oracle(pid, out, kill_after, outside)
        finally:
            if process is None:
                os.close(out)
                returncode = _reap(pid)
            else:
                process.stdout.close()
                if process.poll() is None:
                    process.kill()
                returncode = process.wait()
        errors.seek(0)
        return lines, returncode, errors.read().decode(errors="replace")


def error_line(exc: BaseException) -> str:
    """The oracle line a workload ends with after an error: ``X <type> <is a JournalError> <is an
    OSError> <errno> <file named>`` (the name of the error's path, "-" when it names none)."""
    from ..errors import JournalError
    named = os.path.basename(getattr(exc, "path", None) or "-")
    return (f"X {type(exc).__name__} {isinstance(exc, JournalError)} {isinstance(exc, OSError)} "
            f"{getattr(exc, 'errno', None)} {named}")


def _fork(module_and_args: list[str], env: dict, errors_fd: int) -> tuple[int, int]:
    read_end, write_end = os.pipe()
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        os.close(write_end)
        return pid, read_end
    code = 1
    try:     # the child: never returns into the caller's code
        os.close(read_end)
        os.dup2(write_end, 1)
        os.dup2(errors_fd, 2)
        os.close(write_end)
        die_with_parent(parent)
        os.environ.update(env)
        durability.arm_from_environment()
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        name = module_and_args[0]
        code = importlib.import_module(name).main([name] + module_and_args[1:])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:   # noqa: B902 -- as an interpreter would: the traceback on stderr, exit 1
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 0)


def _read_oracle(pid: int, fd: int, kill_after: float | None, outside: tuple[float, Callable] | None = None
                 ) -> list[str]:
    """Every complete line the child prints until it ends; a line cut by the kill is no acknowledgement."""
    started = time.monotonic()
    lines: list[str] = []
    pending = b""
    kill_at = None if kill_after is not None else started + RUN_TIMEOUT_S
    act_at = None
    helper, helper_deadline = None, 0.0
    killed = False
    while True:
        now = time.monotonic()
        if kill_at is None and now - started > READY_TIMEOUT_S:
            kill_at = now
        if outside is not None and act_at is not None and now >= act_at:
            helper, helper_deadline = outside[1](pid), now + HELPER_TIMEOUT_S
            outside = act_at = None
        helper_running = helper is not None and helper.poll() is None and now < helper_deadline
        if not killed and kill_at is not None and now >= kill_at and not helper_running:
            os.kill(pid, signal.SIGKILL)
            killed = True
        if killed:
            wait = 10.0
        else:
            due = [moment for moment in (kill_at, act_at) if moment is not None]
            wait = max(0.0, min(due, default=started + READY_TIMEOUT_S) - now)
            if helper_running:      # poll it (a kill already due waits for it)
                wait = 0.02
        readable, _, _ = select.select([fd], [], [], wait)
        if not readable:
            if killed:
                break      # the pipe outlives the child only in a grandchild: nothing more to read
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for raw in complete:
            line = raw.decode()
            lines.append(line)
            if line == "R" and kill_after is not None and kill_at is None:
                kill_at = time.monotonic() + kill_after
            if line == "R" and outside is not None and act_at is None:
                act_at = time.monotonic() + outside[0]
    return lines


def _reap(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)
