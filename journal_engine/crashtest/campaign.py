"""Crash campaigns: drive the workload, crash it, recover, check every invariant, report.

Fault modes (each named in the report with how often it ran):
  * ``kill``: SIGKILL of the workload at a seeded random time; kills chain on one directory (crash,
    recover, continue, crash again), over the three sync modes;
  * ``crash-point``: the workload runs with JOURNAL_ENGINE_CRASH_AT=<point> and dies (exit 137) the
    first time it passes that durability step (journal.durability.CRASH_POINTS: file creation and
    activation, every compaction step); each point is hit on purpose, several times;
  * ``io-error``: the workload runs with JOURNAL_ENGINE_FAIL_AT=<point>: that step fails once with
    EIO; the error must reach the caller as a JournalError and nothing durable may be lost;
  * ``bit-flip`` / ``truncation``: damage at rest in a closed journal: a flipped bit in any frame
    must never surface as a changed record, and a lost record must never go unreported; a file cut
    at (and one byte around) every frame boundary likewise;
  * ``power-loss``: a run recorded system call by system call, then every state a power cut could
    leave rebuilt from the record at thousands of crash points (journal_engine.crashtest.power_loss);
  * ``libfiu``: EIO and ENOSPC from pwrite, EIO from write, writev, fdatasync and fsync, and short
    writes, injected into the system calls of real runs through libfiu's POSIX preload (fiu-run),
    cycle after cycle on one directory, each cycle recovered and checked
    (journal_engine.crashtest.fault_workload);
  * ``full-disk``: runs on a small tmpfs (mounted when the machine allows it, skipped with the reason
    otherwise) until the disk is full: a StoreFullError, never SIGBUS, nothing acknowledged lost;
  * ``broker-kill``: SIGKILL chains of the broker-level workload (sends, deliveries, rollbacks with
    redelivery delays, acknowledgements, dead letters), strict mode on and off, on the journal and
    LMDB, one client or several (journal_engine.crashtest.broker_workload states its invariants);
  * ``takeover``: a live ``serve-stomp`` SIGKILLed under STOMP load while its ``--backup`` waits on the
    directory's lock; the backup takes over, the clients go over to it, producers resend what had no
    RECEIPT under its duplicate id: no receipted message lost, no duplicate id routed twice
    (journal_engine.crashtest.takeover states its invariants);
  * ``outside-file`` / ``second-opener`` / ``live-inspect``: what another process does to the
    directory of a live store: a data file cut, overwritten or deleted, then compacted; a second
    opener; the inspection commands (journal_engine.crashtest.outside states their invariants);
  * ``checkpoint``: the checkpoint of a clean close forged (every field of every entry and row at the
    boundaries of C integers, every checksum recomputed), cut, extended, flipped, and cut by another
    holder of its inode during the load or while its records are in use
    (journal_engine.crashtest.checkpoint_attack states its invariants).

A --ci or --long campaign must also run every mode it plans and reach the figures of ACCEPTANCE
(``Report.missing_modes()``, ``Report.shortfalls()``; the command exits 5 otherwise).

``kill``, ``power-loss`` and ``libfiu`` run on any store (the journal, the LMDB store, a user's
store by import path): they see only the store's calls and its system calls; ``broker-kill``,
``takeover``, ``full-disk``, ``second-opener`` and ``live-inspect`` on the two built in. The others work on the
journal's own steps and file format and are reported not applicable to another store, each with
the reason; a mode the machine cannot run (no libfiu, no mount) is
reported skipped with what is missing.

Every run is reproducible from the campaign's seed: a violation names its context and the command
that replays the campaign. The report times every phase (wall and CPU, with the children of its
processes), so the cost of each mode stays visible.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import multiprocessing
import os
import random
import resource
import shutil
import signal
import subprocess
import time
import warnings
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..storage import durability
from ..storage.journal.journal import Journal
from . import broker_workload, checkpoint_attack, children, fault_workload, outside, power_loss, takeover
from . import scratch as scratch_module
from .checker import matching_prefix, recover_and_check
from .journal_workload import FILE_SIZE
from .model import Model, foreign_bodies, recovered_view
from .stores import BUILT_IN, DEFAULT_STORE

MODES = ("always", "group", "none")
SIZES = {   # kills, crash-point hits per point, io errors per point, bit flips, truncation journals;
            # power loss: recorded runs, crash points per run, states per crash point
            # from outside the process (outside.py): files touched, second openers, inspections of a live store
    "smoke": dict(kills=6, point_hits=1, io_errors=1, bit_flips=60, truncations=1,      # seconds: for test suites
                  power_runs=1, power_points=15, power_states=8, libfiu_runs=1, libfiu_faults=10, full_disks=1, broker_kills=4, takeovers=1,
                  outside_files=3, second_openers=3, live_inspections=2, checkpoint_attacks=30),
    "quick": dict(kills=60, point_hits=2, io_errors=1, bit_flips=300, truncations=1,
                  power_runs=3, power_points=40, power_states=20, libfiu_runs=2, libfiu_faults=40, full_disks=3, broker_kills=20, takeovers=2,
                  outside_files=9, second_openers=6, live_inspections=4, checkpoint_attacks=150),
    "ci": dict(kills=500, point_hits=10, io_errors=4, bit_flips=10_000, truncations=1,
               power_runs=9, power_points=460, power_states=50, libfiu_runs=8, libfiu_faults=260, full_disks=20, broker_kills=100, takeovers=3,
               outside_files=30, second_openers=18, live_inspections=16, checkpoint_attacks=1_500),
    "long": dict(kills=5_000, point_hits=50, io_errors=20, bit_flips=100_000, truncations=4,
                 power_runs=60, power_points=600, power_states=40, libfiu_runs=20, libfiu_faults=1000, full_disks=100, broker_kills=1000, takeovers=20,
                 outside_files=300, second_openers=90, live_inspections=80, checkpoint_attacks=15_000),
}
OUTSIDE_RUNS_PER_TASK = 6      # runs of an outside mode a worker does in one task
OUTSIDE_FILE_CALLS = 800     # calls of the run that writes the journal an outside process then changes: several files
# What a campaign of a size must reach (docs/crash-testing.md, "Figures"), read from its report: a
# figure below its floor fails the run (exit status 5), naming the figure. The figures are the
# journal's: a campaign on another store is held to its modes having run, not to these numbers.
FIGURES = {
    "SIGKILLs": lambda report: report.runs.get("kill", 0),
    "power-loss states": lambda report: report.power_loss.get("states", 0),
    "power-loss crash points": lambda report: report.power_loss.get("crash_points", 0),
    "injected I/O faults": lambda report: report.libfiu.get("faults", 0) + report.runs.get("io-error", 0),
    "hits of each named crash point": lambda report: min(
        [report.crash_points_hit.get(point, 0) for point in durability.CRASH_POINTS], default=0),
    "bit flips": lambda report: report.runs.get("bit-flip", 0),
    "broker kills": lambda report: report.broker.get("kills", 0),
    "backup takeovers": lambda report: report.takeover.get("takeovers", 0),
    "outside-file runs": lambda report: report.runs.get("outside-file", 0),
    "second openers": lambda report: report.runs.get("second-opener", 0),
    "live inspections": lambda report: report.runs.get("live-inspect", 0),
    "checkpoint attacks": lambda report: report.runs.get("checkpoint", 0),
}
ACCEPTANCE = {
    "ci": {"SIGKILLs": 500, "power-loss states": 100_000, "power-loss crash points": 3_000,
           "injected I/O faults": 2_000, "hits of each named crash point": 10, "bit flips": 10_000,
           "broker kills": 100, "backup takeovers": 3, "outside-file runs": 30, "second openers": 18, "live inspections": 16,
           "checkpoint attacks": 1_500},
    "long": {"SIGKILLs": 5_000, "power-loss states": 800_000, "power-loss crash points": 30_000,
             "injected I/O faults": 20_000, "hits of each named crash point": 50, "bit flips": 100_000,
             "broker kills": 1_000, "backup takeovers": 20, "outside-file runs": 300, "second openers": 90, "live inspections": 80,
             "checkpoint attacks": 15_000},
}
# sizes whose every mode must run: a mode skipped for a missing tool fails the run (exit status 5)
COMPLETE_SIZES = ("ci", "long")
FULL_DISK_BYTES = 4 * 1024 * 1024     # the small tmpfs of the full-disk mode
# what fills it, in turn: the journal workload on the journal (append-only files); LMDB through the broker,
# whose queue grows (the journal workload's live set stays small, and LMDB reuses the pages it frees)
FULL_DISK_TARGETS = ("journal", "broker on journal", "broker on lmdb")
FULL_DISK_CALLS = 3_000       # journal workload calls: more than the room a run leaves
FULL_DISK_BROKER_S = 10.0     # the broker workload is killed after this if the disk never filled
POWER_LOSS_CALLS = 600      # calls of each recorded run: a few thousand system calls, several files rolled
CHAIN_LENGTH = 10
FLIPS_PER_TASK = 1_000      # bit flips a worker checks in one task
CHECKPOINT_ATTACKS_PER_TASK = 300     # checkpoint attacks a worker makes in one task (on one pristine journal)


@dataclass
class Report:
    """What a campaign did and found (``as_dict()`` is its JSON)."""

    seed: int
    size: str
    store: str = "journal"
    runs: dict = field(default_factory=dict)          # fault mode -> how many runs
    skipped: dict = field(default_factory=dict)       # fault mode -> what this machine lacks for it
    not_applicable: dict = field(default_factory=dict)   # fault mode -> why it cannot apply to this store
    crash_points_hit: dict = field(default_factory=dict)
    power_loss: dict = field(default_factory=dict)    # crash points, states (by kind), full checks, damage seen
    libfiu: dict = field(default_factory=dict)        # faults injected (by kind), refusals after them
    full_disk: dict = field(default_factory=dict)     # runs on a small tmpfs, how many ended in StoreFullError
    broker: dict = field(default_factory=dict)        # broker-level kills and the calls they made
    takeover: dict = field(default_factory=dict)      # backup takeovers: receipted, resent, delivered, ms
    damage: dict = field(default_factory=dict)        # bit-flip / truncation -> outcome -> how many
    outside: dict = field(default_factory=dict)       # outside-file / second-opener / live-inspect -> outcome -> n
    crash_positions: list = field(default_factory=list)   # power loss: (fraction of the run's log, states)
    calls: int = 0
    acknowledged: int = 0
    lost_unacknowledged: int = 0
    violations: list = field(default_factory=list)
    duration_s: float = 0.0
    cpu_s: float = 0.0                                # CPU of the campaign and every process it started
    workers: int = 0                                  # processes the parts of the campaign ran in
    phases: dict = field(default_factory=dict)        # phase -> tasks, wall_s, busy_s, cpu_s (see add_timing)
    stale_scratch_removed: list = field(default_factory=list)   # scratch of killed campaigns, removed at start

    def count(self, mode: str, n: int = 1) -> None:
        self.runs[mode] = self.runs.get(mode, 0) + n

    def merge(self, part: "Report") -> None:
        """Add what a part of the campaign (run in a worker process) did and found."""
        for mode, n in part.runs.items():
            self.count(mode, n)
        self.skipped.update(part.skipped)
        self.not_applicable.update(part.not_applicable)
        for mine, theirs in ((self.crash_points_hit, part.crash_points_hit), (self.full_disk, part.full_disk),
                             (self.broker, part.broker), (self.takeover, part.takeover),
                             (self.damage, part.damage),
                             (self.outside, part.outside)):
            add_counts(mine, theirs)
        self.crash_positions += part.crash_positions
        self.calls += part.calls
        self.acknowledged += part.acknowledged
        self.lost_unacknowledged += part.lost_unacknowledged
        self.violations += part.violations

    def add_timing(self, phase: str, started: float, ended: float, cpu_s: float) -> None:
        """One task of `phase` ran from `started` to `ended` (time.monotonic(), the same clock in every
        process) using `cpu_s` of CPU with its children: ``wall_s`` is the phase's span from its first
        start to its last end, ``busy_s`` the sum of its tasks' wall times."""
        entry = self.phases.setdefault(phase, {"tasks": 0, "first_start": started, "last_end": ended,
                                               "busy_s": 0.0, "cpu_s": 0.0})
        entry["tasks"] += 1
        entry["first_start"] = min(entry["first_start"], started)
        entry["last_end"] = max(entry["last_end"], ended)
        entry["busy_s"] += ended - started
        entry["cpu_s"] += cpu_s

    def phase_table(self, campaign_start: float | None = None) -> dict:
        """Per phase: tasks, wall_s (span), busy_s, cpu_s, and when it started and ended (seconds
        after the campaign's start, when that is given)."""
        table = {}
        for phase, entry in self.phases.items():
            row = {"tasks": entry["tasks"], "wall_s": round(entry["last_end"] - entry["first_start"], 2),
                   "busy_s": round(entry["busy_s"], 2), "cpu_s": round(entry["cpu_s"], 2)}
            if campaign_start is not None:
                row["from_s"] = round(entry["first_start"] - campaign_start, 2)
                row["to_s"] = round(entry["last_end"] - campaign_start, 2)
            table[phase] = row
        return table

    def shortfalls(self) -> list[str]:
        """The acceptance figures of this size (ACCEPTANCE) the campaign did not reach, as sentences."""
        if self.store != DEFAULT_STORE:
            return []
        return [f"{figure}: {FIGURES[figure](self):,} reached, {floor:,} required"
                for figure, floor in ACCEPTANCE.get(self.size, {}).items() if FIGURES[figure](self) < floor]

    def missing_modes(self) -> dict:
        """The modes a campaign of this size was asked for and did not run (skipped), with why."""
        return dict(self.skipped) if self.size in COMPLETE_SIZES else {}

    def reproduce(self) -> str:
        size = "" if self.size == "quick" else f" --{self.size}"
        store = "" if self.store == DEFAULT_STORE else f" --store {self.store}"
        return f"journal-engine crash-test{size}{store} --seed {self.seed}"

    def as_dict(self) -> dict:
        return {"seed": self.seed, "size": self.size, "store": self.store, "runs": self.runs,
                "skipped": self.skipped, "not_applicable": self.not_applicable,
                "crash_points_hit": self.crash_points_hit,
                "power_loss": self.power_loss, "libfiu": self.libfiu, "full_disk": self.full_disk,
                "broker": self.broker, "takeover": self.takeover, "damage": self.damage, "outside": self.outside,
                "calls": self.calls, "acknowledged": self.acknowledged,
                "lost_unacknowledged": self.lost_unacknowledged, "violations": self.violations,
                "duration_s": round(self.duration_s, 3), "cpu_s": round(self.cpu_s, 3), "workers": self.workers,
                "phases": self.phase_table(self.phases.get("campaign", {}).get("first_start")),
                "stale_scratch_removed": self.stale_scratch_removed, "shortfalls": self.shortfalls(),
                "missing_modes": self.missing_modes(), "reproduce": self.reproduce()}


def add_counts(into: dict, counts: dict) -> None:
    """Add `counts` (numbers, or dicts of them, nested) into `into`."""
    for key, value in counts.items():
        if isinstance(value, dict):
            add_counts(into.setdefault(key, {}), value)
        else:
            into[key] = into.get(key, 0) + value


def cpu_seconds() -> float:
    """CPU used so far by this process and by the children it has reaped."""
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def _run_workload(directory: str, mode: str, seed: int, first_seq: int, first_id: int, *, kill_after: float | None,
                  env: dict | None = None, max_calls: int = 20_000, store: str = "journal",
                  outside: tuple | None = None) -> tuple[list, int, str]:
    """Run the journal workload child; SIGKILL it `kill_after` seconds after its recovery (None: let it
    end); `outside`: (delay, act) for children.run_child."""
    return children.run_child(["journal_engine.crashtest.journal_workload", directory, mode, str(seed),
                               str(first_seq), str(first_id), str(max_calls), store], kill_after=kill_after, env=env,
                              outside=outside)


@dataclass
class _Task:
    """A part of a campaign for a worker process: `function(*args)` there, `absorb(result)` here
    (which may return tasks that follow from it)."""

    phase: str
    units: int                     # what the progress bar counts (kills, runs, flips...)
    function: Callable
    args: tuple
    absorb: Callable


def _timed(function: Callable, *args) -> tuple:
    """Run one task in a worker: its result and (started, ended, CPU with its children)."""
    started, cpu = time.monotonic(), cpu_seconds()
    result = function(*args)
    return result, (started, time.monotonic(), cpu_seconds() - cpu)


def _part(scratch_dir: str, size: str, plan: dict, store: str, seed: int, method: str, *args) -> Report:
    """A part of a campaign in a worker: one method of a Campaign seeded for it; its Report."""
    campaign = Campaign(scratch_dir, size=size, seed=seed, store=store, workers=1)
    campaign.plan = plan
    getattr(campaign, method)(*args)
    return campaign.report


@contextlib.contextmanager
def _quiet_load():
    """A load whose damage is judged from its report: its warning and log lines would only be noise
    on the campaign's terminal."""
    logger = logging.getLogger("journal_engine")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _workload_problems(lines: list, returncode: int, stderr: str, context: str, expect_exit: tuple, *,
                       errors_as: tuple = ("True", "True")) -> list[str]:
    """What a journal workload's run broke by itself: an error that reached it as other than a
    JournalError that is also an OSError (`errors_as`: (is a JournalError, is an OSError) as the oracle
    prints them), an exit it was not expected to make (a signal, a crash)."""
    problems = [f"{context}: an error reached the caller as {line.split()[1]}, not as a JournalError"
                f"{' that is also an OSError' if errors_as[1] == 'True' else ''}"
                for line in lines if line.startswith("X ") and line.split()[2:2 + len(errors_as)] != list(errors_as)]
    if returncode not in expect_exit:
        how = f"died of {signal.Signals(-returncode).name}" if returncode < 0 else f"failed with exit {returncode}"
        problems.append(f"{context}: the workload {how}: "
                        f"{stderr.strip().splitlines()[-1:] if stderr.strip() else ''}")
    return problems


class Campaign:
    """A campaign of one size over a scratch directory (``run()`` returns the Report).

    ``run()`` cuts the campaign into independent parts (a kill chain, a recorded power-loss run, a
    thousand bit flips...) and runs them in a pool of worker processes, one per core, longest first;
    each part's seed is drawn from the campaign's, so a seed repeats the campaign whatever order the
    parts finish in. The methods named for a fault mode (``kills()``, ``damage_at_rest()``...) run that
    mode here, in this process."""

    def __init__(self, scratch=None, *, size: str = "quick", seed: int | None = None, progress=None,
                 store: str = "journal", workers: int | None = None) -> None:
        if size not in SIZES:
            raise ValueError(f"size={size!r}: use one of {', '.join(SIZES)}")
        self.store = store
        self.scratch = Path(scratch) if scratch is not None else Path(scratch_module.default_parents()[0])
        self.size = size
        self.seed = seed if seed is not None else random.SystemRandom().randrange(1 << 31)
        self.plan = SIZES[size]
        self.rng = random.Random(self.seed)
        self.report = Report(self.seed, size, store)
        self.progress = progress or (lambda mode, done, total: None)
        self.workers = workers or os.cpu_count() or 1
        self._cleanup: list[str] = []
        self._damaged_copy: str | None = None

    def run(self) -> Report:
        started, cpu = time.monotonic(), cpu_seconds()
        parent = self.scratch
        self.report.stale_scratch_removed = scratch_module.sweep_stale([parent] + scratch_module.default_parents())
        self.scratch = Path(scratch_module.make_owned_dir(parent))
        self._cleanup.append(str(self.scratch))
        try:
            with scratch_module.signals_interrupt():
                self._run_tasks(self._tasks())
        finally:
            self.remove_scratch()
            self.scratch = parent
        self.report.duration_s = time.monotonic() - started
        self.report.cpu_s = cpu_seconds() - cpu
        self.report.workers = self.workers
        self.report.add_timing("campaign", started, started + self.report.duration_s, self.report.cpu_s)
        return self.report

    def remove_scratch(self) -> None:
        """Remove every scratch directory this campaign made (run() does at its end)."""
        for directory in self._cleanup:
            scratch_module.remove(directory)
        self._cleanup.clear()

    def _tasks(self) -> list[_Task]:
        """Every part of the campaign, longest first (the pool then ends its two queues close together)."""
        tasks = self.power_loss_tasks() + self.libfiu_tasks()
        plan = self.plan
        for chain in range((plan["kills"] + CHAIN_LENGTH - 1) // CHAIN_LENGTH):
            tasks.append(self._part_task("kill", min(CHAIN_LENGTH, plan["kills"] - chain * CHAIN_LENGTH),
                                         "kill_chain", chain, min(CHAIN_LENGTH, plan["kills"] - chain * CHAIN_LENGTH)))
        if self.store in BUILT_IN:
            tasks.append(self._part_task("full-disk", plan["full_disks"], "full_disk"))
            for chain in range((plan["broker_kills"] + CHAIN_LENGTH - 1) // CHAIN_LENGTH):
                count = min(CHAIN_LENGTH, plan["broker_kills"] - chain * CHAIN_LENGTH)
                tasks.append(self._part_task("broker-kill", count, "broker_chain", chain, count))
            for run in range(plan["takeovers"]):
                tasks.append(self._part_task("takeover", 1, "takeover_run", run))
            tasks += self._outside_tasks("second-opener", "second_openers", "second_opener_runs")
            tasks += self._outside_tasks("live-inspect", "live_inspections", "live_inspect_runs")
        if self.store != DEFAULT_STORE:
            self.report.not_applicable.update(self._not_applicable())
            return tasks
        tasks += self._outside_tasks("outside-file", "outside_files", "outside_file_runs")
        total = plan["checkpoint_attacks"]
        for first in range(0, total, CHECKPOINT_ATTACKS_PER_TASK):
            count = min(CHECKPOINT_ATTACKS_PER_TASK, total - first)
            tasks.append(self._part_task("checkpoint", count, "checkpoint_attack_runs", first, count))
        for index in range(plan["truncations"]):
            tasks.append(self._part_task("damage-build", 1, "damage_build", index,
                                         absorb=functools.partial(self._after_damage_build, index)))
        for point in durability.CRASH_POINTS:
            tasks.append(self._part_task("crash-point", plan["point_hits"], "crash_point_hits", point))
        for point in durability.CRASH_POINTS:
            tasks.append(self._part_task("io-error", plan["io_errors"], "io_error_runs", point))
        return tasks

    def _outside_tasks(self, phase: str, planned: str, method: str) -> list[_Task]:
        total = self.plan[planned]
        return [self._part_task(phase, min(OUTSIDE_RUNS_PER_TASK, total - first), method, first,
                                min(OUTSIDE_RUNS_PER_TASK, total - first))
                for first in range(0, total, OUTSIDE_RUNS_PER_TASK)]

    def _not_applicable(self) -> dict:
        internals = "named crash points and failure points are steps inside the journal's own code"
        unknown = {} if self.store in BUILT_IN else {
            "second-opener": "which lock keeps a second opener of a user's store out is the store's own affair",
            "live-inspect": "the inspection commands read the journal and the LMDB store only",
            "broker-kill": "the broker runs on the journal or the LMDB store",
            "takeover": "serve-stomp serves the journal or the LMDB store",
            "full-disk": "the small disk is filled by the journal, the LMDB store and the broker on either"}
        return {**unknown,
                "outside-file": "the files cut, overwritten or deleted are the journal's data files, and the "
                                "damage is judged by what its recovery reports",
                "crash-point": internals, "io-error": internals,
                "checkpoint": "the checkpoint is the journal's own file, and its attacks are judged against a "
                              "full decode of the journal's files",
                "bit-flip": "damage is placed in the journal's frames, and judged by what its recovery reports",
                "truncation": "cuts are made at the journal's frame boundaries, and judged by what its recovery "
                              "reports"}

    def _part_task(self, phase: str, units: int, method: str, *args, absorb: Callable | None = None) -> _Task:
        seed = self.rng.randrange(1 << 30)
        return _Task(phase, units, _part, (str(self.scratch), self.size, self.plan, self.store, seed, method) + args,
                     absorb or self.report.merge)

    def _run_tasks(self, tasks: list[_Task]) -> None:
        """Run the tasks in the pool, absorbing each result as it comes; on an interrupt, end the
        workers (their children die with them) before the scratch is removed."""
        ours_before = set(multiprocessing.active_children())
        pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=children.die_with_parent, initargs=(os.getpid(),))
        total: dict[str, int] = {}
        done: dict[str, int] = {}
        running: dict = {}

        def submit(task: _Task) -> None:
            running[pool.submit(_timed, task.function, *task.args)] = task
            total[task.phase] = total.get(task.phase, 0) + task.units

        try:
            for task in tasks:
                submit(task)
            while running:
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    task = running.pop(future)
                    try:
                        result, (started, ended, cpu) = future.result()
                    except Exception as exc:     # a part that failed is a finding, not the campaign's end
                        self.report.violations.append(f"{task.phase}: a part of the campaign failed: {exc!r}")
                        continue
                    self.report.add_timing(task.phase, started, ended, cpu)
                    for follow in task.absorb(result) or ():
                        submit(follow)
                    done[task.phase] = done.get(task.phase, 0) + task.units
                    self.progress(task.phase, done[task.phase], total[task.phase])
        except BaseException:
            workers = set(multiprocessing.active_children()) - ours_before
            children.kill_with_descendants({worker.pid for worker in workers})
            for worker in workers:
                worker.join(10)
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)

    def _simulated_scratch(self) -> str:
        """Where the modes whose faults are simulated work: a tmpfs when there is one (their syncs then
        cost nothing; the disk's own behaviour does not enter them), else the scratch directory."""
        shm = scratch_module.SHARED_MEMORY
        if os.path.isdir(shm) and os.access(shm, os.W_OK):
            directory = scratch_module.make_owned_dir(shm)
            self._cleanup.append(directory)
            return directory
        return str(self.scratch)

    # ----- libfiu: faults in the system calls of real runs (journal_engine.crashtest.fault_workload) ---
    def libfiu_tasks(self) -> list[_Task]:
        if shutil.which("fiu-run") is None:
            self.report.skipped["libfiu"] = ("libfiu's fiu-run is not installed (Debian: apt-get install "
                                             "fiu-utils)")
            return []
        directory = self._simulated_scratch()
        return [_Task("libfiu", 1, fault_workload.fault_task,
                      (directory, run, self.rng.randrange(1 << 30), self.plan["libfiu_faults"], self.store),
                      self._add_libfiu)
                for run in range(self.plan["libfiu_runs"])]

    def _add_libfiu(self, summary: dict) -> None:
        self.report.violations += summary.pop("violations", [])
        if "faults" not in summary:
            return
        self.report.count("libfiu", summary["faults"])
        self.report.calls += summary["calls"]
        self.report.acknowledged += summary["acknowledged"]
        add_counts(self.report.libfiu, {"runs": 1, **{key: summary[key] for key in (
            "faults", "faults_by_kind", "short_write_cycles", "refused_after", "accepted_after", "calls",
            "acknowledged")}})

    # ----- simulated power loss (journal_engine.crashtest.power_loss) -----------------------------------
    def power_loss_tasks(self) -> list[_Task]:
        if power_loss.recorder_library() is None:
            self.report.skipped["power-loss"] = ("the system-call recorder is not built "
                                                 "(python setup.py build_ext --inplace builds it)")
            return []
        plan = self.plan
        directory = self._simulated_scratch()
        return [_Task("power-loss", 1, power_loss.power_loss_task,
                      (directory, run, MODES[run % len(MODES)], self.rng.randrange(1 << 30), POWER_LOSS_CALLS,
                       plan["power_points"], plan["power_states"], None, self.store), self._add_power_loss)
                for run in range(plan["power_runs"])]

    def _add_power_loss(self, result) -> None:
        if result.not_applicable:
            self.report.not_applicable["power-loss"] = result.not_applicable
            return
        self.report.violations += result.violations
        self.report.crash_positions += result.positions
        self.report.count("power-loss", result.states)
        add_counts(self.report.power_loss, {
            "recorded_runs": 1, "crash_points": result.crash_points, "states": result.states,
            "full_checks": result.full_checks, "states_by_kind": result.states_by_kind,
            "damage_reported_in_unsynced_tail": result.damage_reported, "reordered_tail": result.reordered_tail,
            "lost_unacknowledged": result.lost_unacknowledged})

    # ----- workload runs checked by the oracle ----------------------------------------------------
    def _chain_step(self, directory: str, state: dict, mode: str, context: str, *, kill_after, env=None,
                    expect_exit=(0, -signal.SIGKILL), max_calls: int | None = None, before_check=None,
                    outside: tuple | None = None, store: str | None = None) -> int:
        seed = self.rng.randrange(1 << 30)
        store = store or self.store
        lines, returncode, stderr = _run_workload(directory, mode, seed, state["seq"], state["id"],
                                                  kill_after=kill_after, env=env, store=store, outside=outside,
                                                  max_calls=max_calls or (20_000 if kill_after is not None else 600))
        if before_check is not None:
            before_check(lines, returncode)
        context = f"{context} (mode {mode}, workload seed {seed})"
        self.report.violations += _workload_problems(lines, returncode, stderr, context, expect_exit)
        check = recover_and_check(directory, state["model"], lines, context, file_size=FILE_SIZE, store=store)
        self.report.violations += check.violations
        self.report.calls += check.calls
        self.report.acknowledged += check.acknowledged
        self.report.lost_unacknowledged += check.lost_unacknowledged
        state.update(model=check.model, seq=max(state["seq"], check.next_seq), id=max(state["id"], check.next_id))
        return returncode

    def kills(self) -> None:
        """Every kill chain of the plan, here."""
        for chain in range((self.plan["kills"] + CHAIN_LENGTH - 1) // CHAIN_LENGTH):
            self.kill_chain(chain, min(CHAIN_LENGTH, self.plan["kills"] - chain * CHAIN_LENGTH))

    def kill_chain(self, chain: int, count: int) -> None:
        """`count` SIGKILLs on one directory: crash, recover and check, continue, crash again."""
        directory = str(self.scratch / f"kill-{chain}")
        state = {"model": Model(), "seq": 1, "id": 1}
        for step in range(count):
            mode = self.rng.choice(MODES)
            delay = self.rng.uniform(0.0, 0.08)
            self._chain_step(directory, state, mode, f"kill chain {chain} step {step}", kill_after=delay)
            self.report.count("kill")
            self.progress("kill", step + 1, count)
        shutil.rmtree(directory, ignore_errors=True)

    def crash_points(self) -> None:
        for point in durability.CRASH_POINTS:
            self.crash_point_hits(point)

    def crash_point_hits(self, point: str) -> None:
        """Runs with JOURNAL_ENGINE_CRASH_AT=`point` until it was hit as often as planned."""
        hits = attempts = 0
        directory = str(self.scratch / f"point-{point}")
        state = {"model": Model(), "seq": 1, "id": 1}
        while hits < self.plan["point_hits"] and attempts < self.plan["point_hits"] * 8:
            attempts += 1
            returncode = self._chain_step(directory, state, self.rng.choice(MODES), f"crash point {point}",
                                          kill_after=None, env={durability.CRASH_ENV: point},
                                          expect_exit=(0, 137))
            if returncode == 137:
                hits += 1
                self.progress("crash-point", hits, self.plan["point_hits"])
        self.report.crash_points_hit[point] = hits
        self.report.count("crash-point", attempts)
        if hits < self.plan["point_hits"]:
            self.report.violations.append(f"crash point {point}: hit {hits} times in {attempts} runs, "
                                          f"{self.plan['point_hits']} planned (the workload no longer reaches it)")
        shutil.rmtree(directory, ignore_errors=True)

    def io_errors(self) -> None:
        for point in durability.CRASH_POINTS:
            self.io_error_runs(point)

    def io_error_runs(self, point: str) -> None:
        directory = str(self.scratch / f"io-{point}")
        state = {"model": Model(), "seq": 1, "id": 1}
        for _ in range(self.plan["io_errors"]):
            # the step fails once with EIO: the workload stops at a JournalError (exit 1, checked below)
            # or never reaches the step (exit 0); either way nothing acknowledged may be lost
            self._chain_step(directory, state, self.rng.choice(MODES), f"io error at {point}",
                             kill_after=None, env={durability.FAIL_ENV: point}, expect_exit=(0, 1))
            self.report.count("io-error")
        shutil.rmtree(directory, ignore_errors=True)

    # ----- broker level: sends, deliveries, rollbacks, acks, dead letters, strict mode ----------------------
    def broker_kills(self) -> None:
        """Kill chains of the broker workload (journal_engine.crashtest.broker_workload), strict mode
        on in every other run; every recovery checked against the oracle and the recovery before."""
        total = self.plan["broker_kills"]
        for chain in range((total + CHAIN_LENGTH - 1) // CHAIN_LENGTH):
            self.broker_chain(chain, min(CHAIN_LENGTH, total - chain * CHAIN_LENGTH))

    def broker_chain(self, chain: int, count: int) -> None:
        """`count` kills of the broker workload on one directory."""
        found = {"kills": 0, "strict_kills": 0, "concurrent_kills": 0, "kills_on_journal": 0, "kills_on_lmdb": 0,
                 "sends": 0, "resends_refused": 0, "deliveries": 0, "rollbacks": 0, "acks": 0, "dead_letters": 0,
                 "returned_by_a_close": 0}
        directory = str(self.scratch / f"broker-{chain}")
        # the chains take the backends in turn (the journal, LMDB), and the flavours in turn: one client
        # on a manual clock, or several (consumer threads, transacted sessions, closes) on the wall clock
        backends = BUILT_IN if self.store == DEFAULT_STORE else (self.store,)
        store = backends[chain % len(backends)]
        concurrent = (chain // len(backends)) % 2 == 1
        state = {"previous": {"queue": {}, "dead": {}},
                 "clock_ms": int(time.time() * 1000) if concurrent else 1_000_000}
        for step in range(count):
            strict = step % 2 == 1           # strict mode is the broker's switch: on and off in turn
            lines = self._broker_step(directory, state, f"broker chain {chain} step {step}", strict=strict,
                                      kill_after=self.rng.uniform(0.0, 0.15), store=store, concurrent=concurrent)
            if lines is None:
                break
            for line in lines:
                parts = line.split()
                if parts[0] == "O":
                    key = {"send": "sends", "resend": "resends_refused", "ack": "acks", "rbk": "rollbacks",
                           "dlq": "dead_letters"}[parts[2]]
                    found[key] += 1
                elif parts[0] == "D":
                    found["deliveries"] += 1
                elif parts[0] == "U":
                    found["returned_by_a_close"] += 1
            found["kills"] += 1
            found[f"kills_on_{store}"] += 1
            found["concurrent_kills"] += concurrent
            found["strict_kills"] += strict
            self.report.count("broker-kill")
            self.progress("broker-kill", step + 1, count)
        shutil.rmtree(directory, ignore_errors=True)
        add_counts(self.report.broker, found)

    def _broker_step(self, directory: str, state: dict, context: str, *, strict: bool, kill_after: float,
                     store: str = "journal", outside_act: tuple | None = None, concurrent: bool = False,
                     expect_exit: tuple = (-signal.SIGKILL,), before_check=None) -> list | None:
        """One run of the broker workload on `directory`, killed `kill_after` s after its recovery, then
        recovered and checked against its oracle and `state` (the previous recovery and the clock, which
        it updates); its oracle lines, or None when the broker did not recover."""
        sync = self.rng.choice(MODES)
        seed = self.rng.randrange(1 << 30)
        context = (f"{context} (store {store}, sync {sync}, strict {'on' if strict else 'off'}, "
                   f"{'concurrent clients, ' if concurrent else ''}workload seed {seed})")
        lines, returncode, stderr = children.run_child(
            ["journal_engine.crashtest.broker_workload", directory, sync, "strict" if strict else "default",
             str(seed), str(state["clock_ms"]), store] + (["concurrent"] if concurrent else []),
            kill_after=kill_after, outside=outside_act)
        if before_check is not None:
            before_check(lines, returncode)
        self.report.violations += _workload_problems(lines, returncode, stderr, context, expect_exit)
        state["clock_ms"] = max([state["clock_ms"]] + [int(line.split()[1]) for line in lines if line.startswith("T ")])
        try:
            recovered = broker_workload.recovered_state(directory, sync, state["clock_ms"], store)
        except Exception as exc:
            self.report.violations.append(f"{context}: the broker failed to recover: {exc!r}")
            return None
        self.report.violations += broker_workload.check_broker(state["previous"], lines, recovered, strict=strict,
                                                               context=context)
        state["previous"] = recovered
        return lines

    # ----- a backup's takeover (journal_engine.crashtest.takeover) -----------------------------------
    def takeover_run(self, run: int) -> None:
        """One live serve-stomp SIGKILLed under load and its --backup taking over; the runs take the
        backends in turn."""
        backends = BUILT_IN if self.store == DEFAULT_STORE else (self.store,)
        store = backends[run % len(backends)]
        directory = self.scratch / f"takeover-{run}"
        logs = self.scratch / f"takeover-{run}-logs"
        logs.mkdir(parents=True, exist_ok=True)
        seed = self.rng.randrange(1 << 30)
        problems, counts = takeover.takeover_run(str(directory), store, seed, str(logs))
        self.report.violations += [f"takeover run {run} (store {store}): {problem}" for problem in problems]
        add_counts(self.report.takeover, {"takeovers": 1, f"on_{store}": 1, **counts})
        self.report.count("takeover")
        self.progress("takeover", 1, 1)
        shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)

    # ----- from outside the process (journal_engine.crashtest.outside) --------------------------------
    def _outcome(self, mode: str, name: str) -> None:
        outcomes = self.report.outside.setdefault(mode, {})
        outcomes[name] = outcomes.get(name, 0) + 1

    def outside_file_runs(self, first: int, count: int) -> None:
        """Runs `first` .. `first + count - 1`: a journal of several files written by one workload run,
        then a second run during which this process truncates, overwrites or deletes one of its data
        files and asks it for a compaction; recovered and checked (outside.py states the invariant)."""
        for n in range(first, first + count):
            action = outside.OUTSIDE_FILE_ACTIONS[n % len(outside.OUTSIDE_FILE_ACTIONS)]
            directory = str(self.scratch / f"outside-{n}")
            state = {"model": Model(), "seq": 1, "id": 1}
            self._chain_step(directory, state, "group", f"outside-file run {n}, the journal before",
                             kill_after=None, max_calls=OUTSIDE_FILE_CALLS)
            mode, seed = self.rng.choice(MODES), self.rng.randrange(1 << 30)
            touched = {"what": ""}
            act_rng = random.Random(seed)

            def act(pid: int) -> None:
                touched["what"] = outside.touch_data_file(directory, action, act_rng)
                outside.ask_compaction(pid)

            # not killed: the act, then the compaction it asks for, run their course (kills are the kill mode's)
            lines, returncode, stderr = _run_workload(directory, mode, seed, state["seq"], state["id"],
                                                      kill_after=None, max_calls=OUTSIDE_FILE_CALLS,
                                                      outside=(self.rng.uniform(0.0, 0.05), act))
            context = (f"outside-file run {n} ({touched['what'] or action + ': no file touched'}; mode {mode}, "
                       f"workload seed {seed})")
            # the workload may stop at a JournalError naming the damage (a CorruptRecordError is no OSError)
            self.report.violations += _workload_problems(lines, returncode, stderr, context,
                                                         (0, 1), errors_as=("True",))
            self._outcome("outside-file", self._check_outside_file(directory, state["model"], lines,
                                                                   touched["what"], context))
            self.report.count("outside-file")
            self.progress("outside-file", n - first + 1, count)
            shutil.rmtree(directory, ignore_errors=True)

    def _check_outside_file(self, directory: str, model: Model, lines: list, touched: str, context: str) -> str:
        """Recover a journal another process changed a file of: every acknowledged call back, or the
        damage reported naming that file, by recovery (or its refusal) or by the workload's journal
        itself (an error naming it: its compaction refusing the file, say). The outcome's name."""
        from ..errors import JournalError
        name = next((word for word in touched.split() if word.startswith("journal-")), "")
        ops = [line.split()[1:] for line in lines if line.startswith("O ")]
        acked = max([int(line.split()[1]) for line in lines if line.startswith("A ")], default=0)
        acked_count = sum(1 for op in ops if int(op[0]) <= acked)
        try:
            with _quiet_load(), Journal(directory, file_size=FILE_SIZE, compact_min_files=0) as journal:
                result = journal.load()
        except JournalError as exc:
            if name and name in f"{exc} {getattr(exc, 'path', '')}":
                return "refused, naming the file"
            self.report.violations.append(f"{context}: recovery refused without naming the file touched: {exc!r}")
            return "refused, not naming the file"
        except Exception as exc:    # noqa: BLE001 -- a crash of recovery is a finding
            self.report.violations.append(f"{context}: recovery failed: {exc!r}")
            return "recovery failed"
        recovered = recovered_view(result)
        self.report.violations += [f"{context}: damaged bytes surfaced as data: {problem}"
                                   for problem in foreign_bodies(recovered[0], recovered[1])]
        named = bool(name) and outside.report_names(result.report, name)
        if matching_prefix(model, ops, acked_count, recovered) is not None:
            return "recovered whole, damage reported" if named else "recovered whole"
        if named:
            return "acknowledged records lost, reported at the file"
        if name and any(line.startswith("X ") and line.split()[-1] == name for line in lines):
            return "acknowledged records lost, reported at the file by the workload's journal"
        torn = f"only a torn tail at {result.report.torn_tail}" if result.report.torn_tail else "nothing"
        self.report.violations.append(f"{context}: acknowledged records lost silently (recovery reported "
                                      f"{result.report.corrupt[:2] or torn} of the file touched)")
        return "acknowledged records lost silently"

    def second_opener_runs(self, first: int, count: int) -> None:
        """Runs in which this process opens the workload's directory a second time while it runs: as it
        is, with the lock file removed, and (a broker) with the other backend. Each must be refused."""
        for n in range(first, first + count):
            variant = outside.SECOND_OPENER_VARIANTS[n % len(outside.SECOND_OPENER_VARIANTS)]
            directory = str(self.scratch / f"second-opener-{n}")
            found = {"problem": None}

            def act(_pid: int, variant=variant, directory=directory) -> None:
                found["problem"] = outside.second_open(self.store, directory, variant)

            delay = self.rng.uniform(0.0, 0.05)
            context = f"second-opener run {n} ({variant})"
            if variant == "other backend":
                state = {"previous": {"queue": {}, "dead": {}}, "clock_ms": 1_000_000}
                self._broker_step(directory, state, context, strict=False, kill_after=delay + 0.05,
                                  store=self.store, outside_act=(delay, act))
            else:
                state = {"model": Model(), "seq": 1, "id": 1}
                self._chain_step(directory, state, self.rng.choice(MODES), context, kill_after=delay + 0.05,
                                 outside=(delay, act))
            if found["problem"] is None:
                self._outcome("second-opener", "workload ended before the second open")
            elif found["problem"]:
                self.report.violations.append(f"{context}: {found['problem']}")
                self._outcome("second-opener", f"{variant}: let in")
            else:
                self._outcome("second-opener", f"{variant}: refused")
            self.report.count("second-opener")
            self.progress("second-opener", n - first + 1, count)
            shutil.rmtree(directory, ignore_errors=True)

    def checkpoint_attack_runs(self, first: int, count: int) -> None:
        """Checkpoint attacks first .. first + count - 1 on a journal of this part's seed
        (journal_engine.crashtest.checkpoint_attack), each outcome counted, each broken invariant a
        violation."""
        directory = self._simulated_scratch()
        try:
            outcomes, violations = checkpoint_attack.attack(
                directory, self.seed, first, count, progress=lambda done: self.progress("checkpoint", done, count))
        finally:
            if directory != str(self.scratch):
                scratch_module.remove(directory)
        self.report.count("checkpoint", sum(outcomes.values()))
        add_counts(self.report.damage.setdefault("checkpoint", {}), outcomes)
        self.report.violations += violations

    def live_inspect_runs(self, first: int, count: int) -> None:
        """Runs in which `journal-engine print / stats / verify / export / dlq list` inspect the
        workload's directory while it writes: the journal and the LMDB store, a record store and a
        broker directory in turn."""
        backends = BUILT_IN if self.store == DEFAULT_STORE else (self.store,)
        for n in range(first, first + count):
            store = backends[n % len(backends)]
            broker = (n // len(backends)) % 2 == 1
            commands = outside.BROKER_INSPECTIONS if broker else outside.STORE_INSPECTIONS
            command = commands[(n // (2 * len(backends))) % len(commands)]
            directory = str(self.scratch / f"live-inspect-{n}")
            started: dict = {}

            def act(_pid: int, command=command, directory=directory):
                started["process"], started["errors"] = outside.start_inspection(directory, command)
                return started["process"]

            delay = self.rng.uniform(0.0, 0.05)
            context = f"live-inspect run {n} (`journal-engine {' '.join(command)}` on a live {store} " \
                      f"{'broker' if broker else 'store'})"
            if broker:
                state = {"previous": {"queue": {}, "dead": {}}, "clock_ms": 1_000_000}
                self._broker_step(directory, state, context, strict=False, kill_after=delay + 0.05, store=store,
                                  outside_act=(delay, act))
            else:
                state = {"model": Model(), "seq": 1, "id": 1}
                self._chain_step(directory, state, self.rng.choice(MODES), context, kill_after=delay + 0.05,
                                 outside=(delay, act), store=store)
            if "process" in started:
                returncode, problems = outside.inspection_problems(started["process"], started["errors"], command,
                                                                   context)
                self.report.violations += problems
                self._outcome("live-inspect", f"{' '.join(command[:2 if command[0] == 'dlq' else 1])} on {store}: "
                                              f"exit {returncode}{', a violation' if problems else ''}")
            else:
                self._outcome("live-inspect", "workload ended before the inspection")
            self.report.count("live-inspect")
            self.progress("live-inspect", n - first + 1, count)
            shutil.rmtree(directory, ignore_errors=True)

    # ----- a real full disk: a small tmpfs --------------------------------------------------------------
    def full_disk(self) -> None:
        """Runs on a small tmpfs, its free space cut by a filler file, until the disk is full: the
        workload must stop at a StoreFullError (never SIGBUS), and once the filler is gone recovery
        must return everything acknowledged. The runs take the targets in turn: the journal workload
        on the journal, and the broker on each backend."""
        mount_point = self.scratch / "small-disk"
        why = mount_small_disk(mount_point, FULL_DISK_BYTES)
        if why:
            self.report.skipped["full-disk"] = why
            return
        targets = [target for target in FULL_DISK_TARGETS if self.store == DEFAULT_STORE or self.store in target]
        found: dict = {"runs": 0, "store_full": 0, "runs_on": {}, "store_full_on": {}}
        try:
            for run in range(self.plan["full_disks"]):
                target = targets[run % len(targets)]
                directory = str(mount_point / f"store-{run}")
                filler = mount_point / "filler"
                usage = shutil.disk_usage(mount_point)
                leave = self.rng.randrange(FILE_SIZE, 6 * FILE_SIZE)
                filler.write_bytes(bytes(max(0, usage.free - leave)))
                context = f"full disk run {run} ({target}, {leave} bytes free)"
                full = {"store_full": False}

                def free_space(lines: list, returncode: int) -> None:
                    full["store_full"] = any(line.startswith("X StoreFullError") for line in lines)
                    filler.unlink()

                if target.startswith("broker"):
                    self._broker_step(directory, {"previous": {"queue": {}, "dead": {}}, "clock_ms": 1_000_000},
                                      context, strict=False, kill_after=FULL_DISK_BROKER_S,
                                      store=target.split()[-1], expect_exit=(1, -signal.SIGKILL),
                                      before_check=free_space)
                else:
                    self._chain_step(directory, {"model": Model(), "seq": 1, "id": 1}, self.rng.choice(MODES),
                                     context, kill_after=None, expect_exit=(0, 1), max_calls=FULL_DISK_CALLS,
                                     before_check=free_space, store=target)
                add_counts(found, {"runs": 1, "store_full": int(full["store_full"]), "runs_on": {target: 1},
                                   "store_full_on": {target: int(full["store_full"])}})
                self.report.count("full-disk")
                self.progress("full-disk", run + 1, self.plan["full_disks"])
                shutil.rmtree(directory, ignore_errors=True)
        finally:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, check=False)
        self.report.full_disk = found
        for target, runs in found["runs_on"].items():
            if not found["store_full_on"].get(target):
                self.report.violations.append(f"full disk on {target}: none of {runs} runs filled the disk "
                                              f"(the mode no longer tests what it is for)")

    # ----- damage at rest ------------------------------------------------------------------------------
    def damage_at_rest(self) -> None:
        """Every bit flip and truncation of the plan, here."""
        for index in range(self.plan["truncations"]):
            self.damage_build(index)
            self.damage_flips(index, 0, self.plan["bit_flips"] // self.plan["truncations"])
            self.damage_cuts(index)
            shutil.rmtree(self._pristine(index), ignore_errors=True)

    def _pristine(self, index: int) -> str:
        return str(self.scratch / f"rest-{index}")

    def damage_build(self, index: int) -> None:
        """The closed journal that bit flips and truncations damage (copies of it)."""
        state = {"model": Model(), "seq": 1, "id": 1}
        self._chain_step(self._pristine(index), state, "always", "building a journal for damage at rest",
                         kill_after=None)

    def _after_damage_build(self, index: int, part: Report) -> list[_Task]:
        self.report.merge(part)
        flips = self.plan["bit_flips"] // self.plan["truncations"]
        return [self._part_task("bit-flip", min(FLIPS_PER_TASK, flips - first), "damage_flips", index, first,
                                min(FLIPS_PER_TASK, flips - first))
                for first in range(0, flips, FLIPS_PER_TASK)] + [self._part_task("truncation", 1, "damage_cuts", index)]

    def _original(self, index: int) -> tuple:
        with Journal(self._pristine(index), read_only=True) as journal:
            return recovered_view(journal.load())

    def damage_flips(self, index: int, first: int, count: int) -> None:
        """Flips `first` .. `first + count - 1` of pristine journal `index`: one bit of a random frame each."""
        pristine = self._pristine(index)
        original = self._original(index)
        frames = outside.frame_bounds(pristine)
        work = str(self.scratch / f"damaged-{index}-flips-{first}")
        for n in range(first, first + count):
            path, start, end = self.rng.choice(frames)
            offset = self.rng.randrange(start, end)
            self._damaged(pristine, work, original, path, f"bit flip {n} in {os.path.basename(path)} at {offset}",
                          flip=(offset, 1 << self.rng.randrange(8)))
            self.report.count("bit-flip")
            if (n - first) % 50 == 0:
                self.progress("bit-flip", n - first + 1, count)
        shutil.rmtree(work, ignore_errors=True)

    def damage_cuts(self, index: int) -> None:
        """Pristine journal `index` cut at, and one byte on each side of, every frame boundary."""
        pristine = self._pristine(index)
        original = self._original(index)
        frames = outside.frame_bounds(pristine)
        work = str(self.scratch / f"damaged-{index}-cuts")
        cuts = sorted({(path, cut) for path, start, _end in frames for cut in (start - 1, start, start + 1)})
        for n, (path, cut) in enumerate(cuts):
            self._damaged(pristine, work, original, path, f"truncation of {os.path.basename(path)} at {cut}", cut=cut)
            self.report.count("truncation")
            if n % 50 == 0:
                self.progress("truncation", n + 1, len(cuts))
        shutil.rmtree(work, ignore_errors=True)

    def _damaged(self, pristine: str, work: str, original: tuple, path: str, context: str, *, flip=None,
                 cut=None) -> None:
        """Damage one file of a copy (`work`) of `pristine`, recover it read-only, check, and put the
        file back (a read-only load writes nothing, so one copy serves every damage)."""
        if self._damaged_copy != work:
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(pristine, work)
            self._damaged_copy = work
        target = os.path.join(work, os.path.basename(path))
        with open(path, "rb") as handle:
            intact = handle.read()
        if flip is not None:
            with open(target, "r+b") as handle:
                handle.seek(flip[0])
                handle.write(bytes([intact[flip[0]] ^ flip[1]]))
        else:
            os.truncate(target, cut)
        try:
            self._check_damaged(work, original, context, "bit-flip" if flip is not None else "truncation")
        finally:
            with open(target, "r+b") as handle:
                handle.write(intact)

    def _check_damaged(self, work: str, original: tuple, context: str, mode: str) -> None:
        outcomes = self.report.damage.setdefault(mode, {})

        def outcome(name: str) -> None:
            outcomes[name] = outcomes.get(name, 0) + 1

        try:
            with Journal(work, read_only=True) as journal:
                result = journal.load()
        except Exception as exc:   # a refusal is fine when it names the damage; a crash of the reader is not
            if not getattr(exc, "path", None):
                self.report.violations.append(f"{context}: load failed without naming the damage: {exc!r}")
            outcome("refused, naming the file")
            return
        records, prepared, _ = recovered_view(result)
        # a damaged frame drops what it held (an add, an update, a delete...); it may never surface as data
        self.report.violations += [f"{context}: damaged bytes surfaced as data: {problem}"
                                   for problem in foreign_bodies(records, prepared)]
        changed = (records, prepared) != original[:2]
        if changed and result.report.clean:
            lost = set(original[0]) - set(records)
            self.report.violations.append(f"{context}: the recovered state changed ({len(lost)} records lost) "
                                          f"and the report says clean")
            outcome("changed, reported clean")
        elif result.report.corrupt or result.report.anomalies:
            outcome("reported as damage")
        elif result.report.torn_tail and changed:
            # a record lost under the verdict "torn write": damage at rest passed off as an unsynced tail
            self.report.violations.append(f"{context}: the recovered state changed and only a torn tail was "
                                          f"reported at {result.report.torn_tail}")
            outcome("changed, reported as a torn tail")
        elif result.report.torn_tail:
            # the seal pad after the last synced frame: its loss loses nothing, and a torn write leaves it so
            outcome("torn tail in the last pad, no record changed")
        else:
            outcome("no record changed" if not changed else "changed, reported")


def mount_small_disk(mount_point: Path, size_bytes: int) -> str | None:
    """Mount a tmpfs of `size_bytes` at `mount_point`; None, or why it cannot be done here."""
    if os.geteuid() != 0:
        return "a real full disk needs a small tmpfs, and mounting one needs root (this run is not root)"
    if shutil.which("mount") is None:
        return "a real full disk needs a small tmpfs, and there is no mount command"
    mount_point.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(mount_point)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return (f"a real full disk needs a small tmpfs, and `mount -t tmpfs` is not permitted here: "
                f"{done.stderr.strip() or done.returncode}")
    return None
