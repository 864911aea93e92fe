"""The crash harness's libfiu campaign: I/O faults injected into the system calls of a real run.

Run under libfiu's POSIX preload (``fiu-run -x -f "" python -m journal_engine.crashtest.fault_workload
...``), the child turns faults on and off itself through libfiu's C API (ctypes on libfiu.so.0, the
library the preload already loaded). Each cycle:

  1. with no fault on, open the journal, recover it, and check the recovery against the oracle of
     the cycle before (journal_engine.crashtest.checker: everything acknowledged byte-exact, a prefix
     of the calls, repeatable, nothing never written);
  2. turn one fault on at random -- EIO or ENOSPC from pwrite, EIO from write (and, on a store
     that makes gathered writes, from writev), EIO from fdatasync or fsync, or short writes (pwrite
     returning fewer bytes than asked) -- with a probability per call, and run the journal
     workload until an error escapes (or 200 calls pass);
  3. turn it off; the error must be a JournalError that is also an OSError carrying the errno
     injected (a JournalFailedError may carry an earlier one: the journal stopped at that), and the
     store must then refuse a synced write with a JournalError, or make it durable (the checker then
     holds it to that);
  4. close the journal and go on with the next cycle on the same directory.

Nothing is printed while a fault is on (a failing write() would hit the output too); the summary is
one JSON line on stdout at the end. Exit 0 with the summary, whatever it found.

    python -m journal_engine.crashtest.fault_workload DIRECTORY SEED FAULTS MAX_CYCLES [STORE]
"""
from __future__ import annotations

import ctypes
import errno as errnos
import io
import json
import os
import random
import shutil
import subprocess
import sys

from ..errors import JournalError, JournalFailedError
from .bodies import make_body
from .checker import recover_and_check
from .children import bound_to_parent, die_with_parent_as_told
from .journal_workload import start_workload
from .model import Model
from .stores import FILE_SIZE, built_in, open_store

MODES = ("always", "group", "none")
# kind -> (libfiu failure point, errno it fails with (0: not an error), probability per call)
FAULTS = {
    "pwrite-eio": ("posix/io/rw/pwrite", errnos.EIO, 0.05),
    "pwrite-enospc": ("posix/io/rw/pwrite", errnos.ENOSPC, 0.05),
    "write-eio": ("posix/io/rw/write", errnos.EIO, 0.5),
    "fdatasync-eio": ("posix/io/sync/fdatasync", errnos.EIO, 0.05),
    "fsync-eio": ("posix/io/sync/fsync", errnos.EIO, 0.3),
    "short-pwrite": ("posix/io/rw/pwrite/reduce", 0, 0.3),
    "writev-eio": ("posix/io/rw/writev", errnos.EIO, 0.3),
}
GATHERED = {"writev-eio"}     # faults in gathered writes, which only a backend with gathered_writes makes


def fault_kinds(store: str) -> list[str]:
    """The faults a campaign injects into `store`: every one, but none the store's writes never meet."""
    backend = built_in(store)
    return sorted(set(FAULTS) - (GATHERED if backend is not None and not backend.gathered_writes else set()))
CALLS_PER_CYCLE = 200


class _Libfiu:
    """libfiu's C API in this process (the preload initialised it)."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libfiu.so.0")
        self.lib.fiu_enable_random.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint,
                                               ctypes.c_float]
        self.lib.fiu_disable.argtypes = [ctypes.c_char_p]

    def enable(self, point: str, error: int, probability: float) -> None:
        if self.lib.fiu_enable_random(point.encode(), 1, ctypes.c_void_p(error or None), 0, probability) != 0:
            raise RuntimeError(f"libfiu refused to enable {point}")

    def disable(self, point: str) -> None:
        self.lib.fiu_disable(point.encode())


class _Oracle(io.StringIO):
    """The oracle kept in memory: nothing may be written to a file descriptor while a fault is on."""

    def lines(self) -> list[str]:
        return self.getvalue().splitlines()


def run(directory: str, seed: int, faults_wanted: int, max_cycles: int, store: str = "journal") -> dict:
    fiu = _Libfiu()
    rng = random.Random(seed)
    model, seq, next_id = Model(), 1, 1
    summary = {"cycles": 0, "faults": 0, "faults_by_kind": {}, "short_write_cycles": 0, "refused_after": 0,
               "accepted_after": 0, "calls": 0, "acknowledged": 0, "violations": []}
    for cycle in range(max_cycles):
        if summary["faults"] >= faults_wanted:
            break
        kind = rng.choice(fault_kinds(store))
        point, error, probability = FAULTS[kind]
        mode = rng.choice(MODES)
        context = f"libfiu cycle {cycle} ({kind}, mode {mode})"
        oracle = _Oracle()
        journal = open_store(store, directory, mode)
        try:
            work = start_workload(journal, journal.load(), rng, mode, seq, next_id, out=oracle)
        except Exception as exc:   # with no fault on, recovery must open what the last fault left
            summary["violations"].append(f"{context}: recovery with no fault on failed: {exc!r}")
            return summary
        failure = None
        fiu.enable(point, error, probability)
        try:
            for _ in range(CALLS_PER_CYCLE):
                work.step()
        except BaseException as exc:   # noqa: B902 -- whatever escapes is judged below
            failure = exc
        finally:
            fiu.disable(point)
        if error == 0:
            summary["short_write_cycles"] += 1
        if failure is not None:
            summary["faults"] += 1
            summary["faults_by_kind"][kind] = summary["faults_by_kind"].get(kind, 0) + 1
            _judge(failure, error, context, summary)
            _write_after(work, journal, failure, context, summary)
        try:
            journal.close()
        except JournalError:
            pass
        try:
            check = recover_and_check(directory, model, oracle.lines(), context, file_size=FILE_SIZE, store=store)
        except Exception as exc:   # the fault left what recovery cannot open: the store corrupted itself
            summary["violations"].append(f"{context}: recovery with no fault on failed: {exc!r}")
            return summary
        summary["violations"] += check.violations
        summary["calls"] += check.calls
        summary["acknowledged"] += check.acknowledged
        model, seq, next_id = check.model, max(seq, check.next_seq), max(next_id, check.next_id)
        summary["cycles"] += 1
    return summary


def _judge(failure: BaseException, error: int, context: str, summary: dict) -> None:
    """An injected I/O error must reach the caller as a JournalError that is also an OSError."""
    if not (isinstance(failure, JournalError) and isinstance(failure, OSError)):
        summary["violations"].append(f"{context}: the injected I/O error reached the caller as {failure!r}, "
                                     f"not as a JournalError that is also an OSError")
    elif error and failure.errno not in (error, None) and not isinstance(failure, JournalFailedError):
        summary["violations"].append(f"{context}: the injected errno {error} surfaced as {failure!r}")


def _write_after(work, journal, failure: BaseException, context: str, summary: dict) -> None:
    """After the error, a synced write is refused with a JournalError -- always after a failed write or
    sync of the journal's data (JournalFailedError) -- or, after a failed file creation or compaction
    step that left the data as it was, made durable (then acknowledged, and the checker holds it to that)."""
    record_id = work.next_id
    work.next_id += 1
    seq = work.intent("add", record_id, 1, 10, True)
    try:
        journal.add(record_id, 1, make_body(record_id, seq, 10), sync=True)
    except JournalError:
        summary["refused_after"] += 1
        return
    except Exception as exc:
        summary["violations"].append(f"{context}: a write after the I/O error failed with {exc!r}, "
                                     f"not a JournalError")
        return
    work.ack(seq)
    summary["accepted_after"] += 1
    if isinstance(failure, JournalFailedError):
        summary["violations"].append(f"{context}: the journal accepted a write after {failure!r}")


def main(argv: list[str]) -> int:
    die_with_parent_as_told()
    directory, seed, faults, cycles = argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    summary = run(directory, seed, faults, cycles, argv[5] if len(argv) > 5 else "journal")
    sys.stdout.write(json.dumps(summary) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))


def fault_task(scratch: str, run_index: int, seed: int, faults: int, store: str = "journal") -> dict:
    """One child under fiu-run on `store` (a process pool's unit of work); its summary, or a violation."""
    directory = os.path.join(scratch, f"libfiu-{run_index}")
    shutil.rmtree(directory, ignore_errors=True)
    try:
        done = subprocess.run(["fiu-run", "-x", "-f", "", sys.executable, "-m",
                               "journal_engine.crashtest.fault_workload", directory, str(seed), str(faults),
                               str(faults * 4), store], capture_output=True, timeout=1800, check=False,
                              env={**os.environ, **bound_to_parent()})
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    lines = done.stdout.decode(errors="replace").strip().splitlines()
    if done.returncode != 0 or not lines:
        crashed = "SIGBUS" if done.returncode == -7 else f"exit {done.returncode}"
        return {"violations": [f"libfiu run {run_index} (seed {seed}): the workload died ({crashed}): "
                               f"{done.stderr.decode(errors='replace').strip().splitlines()[-1:]}"]}
    return json.loads(lines[-1])
