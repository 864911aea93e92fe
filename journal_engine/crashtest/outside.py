"""Faults from outside the process: what another process does to a store's directory while a
workload holds it open (an operator's tool, a backup gone wrong, an attacker), and the invariant each
must keep. The campaign (``outside-file``, ``second-opener``, ``live-inspect``) acts from its worker
process, a real second process, at a random moment of a workload child's run
(children.run_child's ``outside``), then recovers and checks:

  * ``outside-file``: a data file of the open journal truncated, overwritten or deleted, then a
    compaction asked of the workload (SIGUSR1). The interpreter never dies of a signal (a SIGBUS of
    a mapping whose file was cut short); no acknowledged record is lost silently: recovery returns
    every acknowledged call, or reports damage naming the file touched (or refuses, naming it);
  * ``second-opener``: the store opened a second time while the workload holds it, as it is, with its
    lock file removed first, and (a broker directory) by a broker of the other backend: each
    second opener is refused, and the workload's store still checks out after;
  * ``live-inspect``: the inspection commands (``journal-engine print / stats / verify / export /
    dlq list``) run against the live store, journal and LMDB: each exits 0, 1 or 4, with no
    traceback and no signal, and the store still checks out after.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from ..storage.journal.format import DATA_NAME

OUTSIDE_FILE_ACTIONS = ("truncate", "overwrite", "delete")
SECOND_OPENER_VARIANTS = ("lock held", "lock file removed", "other backend")
OVERWRITE_BYTES = 64           # what an outside process writes over a data file: a sector's worth of garbage
INSPECTION_EXIT_STATUSES = (0, 1, 4)       # done, damage found, in use (docs/cli.md)
# the inspection commands per directory layout (docs/cli.md): a record store, a broker directory
STORE_INSPECTIONS = (("print",), ("stats", "--json"), ("verify", "--json"), ("export",))
BROKER_INSPECTIONS = (("dlq", "list", "--json"), ("verify", "--json"), ("stats", "--json"), ("print",))
INSPECTION_TIMEOUT_S = 120


def frame_bounds(directory: str) -> list:
    """(path, start, end) of every valid frame of every data file of a journal: where damage is placed."""
    from .._impl import scan_frames
    from ..storage.journal.format import stamp_of
    from ..storage.journal.segment_files import list_directory
    bounds = []
    for data in list_directory(directory).data:
        raw = Path(data.path).read_bytes()
        rows = scan_frames(raw, stamp_of(data.header.file_id), data.header.data_start)
        for index, row in enumerate(rows[:-1]):
            if row[1] == 0:
                bounds.append((data.path, row[0], rows[index + 1][0]))
    return bounds


def touch_data_file(directory: str, action: str, rng: random.Random) -> str:
    """Truncate, overwrite or delete a data file of the live journal in `directory`, at a frame it
    holds where one is found (the files change under us: a compaction may remove one meanwhile);
    what was done, naming the file, or "" when there was no data file to touch."""
    try:
        frames = frame_bounds(directory)
    except Exception:        # noqa: BLE001 -- a file renamed or cut while we read: place it blindly
        frames = []
    if frames:
        path, start, end = rng.choice(frames)
    else:
        names = sorted(name for name in os.listdir(directory) if DATA_NAME.match(name))
        if not names:
            return ""
        path = os.path.join(directory, rng.choice(names))
        start = end = None
    try:
        size = os.path.getsize(path)
        if action == "delete":
            os.unlink(path)
            return f"deleted {os.path.basename(path)}"
        offset = rng.randrange(start, end) if start is not None else rng.randrange(max(1, size))
        if action == "truncate":
            os.truncate(path, offset)
            return f"truncated {os.path.basename(path)} to {offset} bytes (of {size})"
        with open(path, "r+b") as handle:
            handle.seek(offset)
            handle.write(rng.randbytes(OVERWRITE_BYTES))
        return f"overwrote {OVERWRITE_BYTES} bytes of {os.path.basename(path)} at {offset}"
    except FileNotFoundError:
        return ""              # compacted away between the listing and the act


def ask_compaction(pid: int) -> None:
    """Ask the journal workload `pid` to compact at its next call (journal_workload.COMPACT_SIGNAL)."""
    from .journal_workload import COMPACT_SIGNAL
    try:
        os.kill(pid, COMPACT_SIGNAL)
    except ProcessLookupError:
        pass


def report_names(report, name: str) -> bool:
    """Whether a load report places damage (corrupt, anomalies) in the file `name`. A torn tail does
    not count: it is the verdict for an unsynced write, which loses nothing acknowledged."""
    return any(name in str(place) for place in list(report.corrupt) + list(report.anomalies))


def second_open(store: str, directory: str, variant: str) -> str:
    """Open `directory` a second time as `variant` says, from this process, while another holds it:
    "" when refused as it must be, else what happened (the opener is closed at once)."""
    from ..errors import JournalError
    from .stores import BUILT_IN, lock_file, open_store
    if variant == "other backend":
        from .broker_workload import open_broker
        other = next(name for name in BUILT_IN if name != store)
        opener = lambda: open_broker(directory, "always", False, 0, other)     # noqa: E731
    else:
        if variant == "lock file removed":
            try:
                os.unlink(os.path.join(directory, lock_file(store)))
            except FileNotFoundError:
                pass
        opener = lambda: open_store(store, directory, "always", for_recovery=True)     # noqa: E731
    try:
        second = opener()
    except JournalError:
        return ""
    except Exception as exc:    # noqa: BLE001 -- refused, but not as the error hierarchy says
        return f"the second opener ({variant}) failed with {exc!r}, not a JournalError"
    second.close()
    return f"a second opener ({variant}) was let in while the workload held the directory"


def start_inspection(directory: str, command: tuple) -> tuple[subprocess.Popen, object]:
    """`journal-engine COMMAND DIRECTORY` in a child process, as a user would run it; (process,
    the temporary file its stderr goes to)."""
    errors = tempfile.TemporaryFile()
    process = subprocess.Popen([sys.executable, "-m", "journal_engine", *command, directory],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors,
                               env={**os.environ, "JOURNAL_ENGINE_NO_PROGRESS": "1"})
    return process, errors


def inspection_problems(process: subprocess.Popen, errors, command: tuple, context: str) -> tuple[int, list[str]]:
    """An inspection of a live store's exit status, and what it did wrong: a signal, an exit status
    outside 0/1/4, a traceback."""
    try:
        returncode = process.wait(timeout=INSPECTION_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        returncode = process.wait()
    errors.seek(0)
    stderr = errors.read().decode(errors="replace")
    errors.close()
    name = " ".join(command)
    problems = []
    if returncode < 0:
        problems.append(f"{context}: `journal-engine {name}` died of {signal.Signals(-returncode).name}")
    elif returncode not in INSPECTION_EXIT_STATUSES:
        problems.append(f"{context}: `journal-engine {name}` exited {returncode}: {stderr.strip()[-300:]}")
    if "Traceback" in stderr:
        problems.append(f"{context}: `journal-engine {name}` printed a traceback: "
                        f"{stderr.strip().splitlines()[-1][:200]}")
    return returncode, problems
