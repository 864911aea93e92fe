"""Crash campaigns: drive the workload, crash it, recover, check every invariant, report.

Fault modes (each named in the report with how often it ran):
  * ``kill``: SIGKILL of the workload at a seeded random time; kills chain on one directory (crash,
    recover, continue, crash again), over the three sync modes;
  * ``crash-point``: the workload runs with JOURNAL_ENGINE_CRASH_AT=<point> and dies (exit 137) the
    first time it passes that durability step (storage.durability.CRASH_POINTS: file creation and
    activation, every compaction step); each point is hit on purpose, several times;
  * ``io-error``: the workload runs with JOURNAL_ENGINE_FAIL_AT=<point>: that step fails once with
    EIO; the error must reach the caller as a JournalError and nothing durable may be lost;
  * ``bit-flip`` / ``truncation``: damage at rest in a closed journal: a flipped bit in any frame
    must never surface as a changed record, and a lost record must never go unreported; a file cut
    at (and one byte around) every frame boundary likewise;
  * ``power-loss``: a run recorded system call by system call, then every state a power cut could
    leave rebuilt from the record at thousands of crash points (journal_engine.crashtest.power_loss),
    in worker processes while the other modes run;
  * ``libfiu``: EIO and ENOSPC from pwrite, EIO from write, fdatasync and fsync, and short writes,
    injected into the system calls of real runs through libfiu's POSIX preload (fiu-run), cycle after
    cycle on one directory, each cycle recovered and checked (journal_engine.crashtest.fault_workload);
  * ``full-disk``: runs on a small tmpfs (mounted when the machine allows it, skipped with the reason
    otherwise) until the disk is full: a StoreFullError, never SIGBUS, nothing acknowledged lost;
  * ``broker-kill``: SIGKILL chains of the broker-level workload (sends, deliveries, rollbacks with
    redelivery delays, acknowledgements, dead letters), strict mode on and off
    (journal_engine.crashtest.broker_workload states its invariants).

Every run is reproducible from the campaign's seed: a violation names its context and the command
that replays the campaign.
"""
from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from ..storage import durability
from ..storage.journal import Journal
from . import broker_workload, fault_workload, power_loss
from .checker import recover_and_check
from .journal_workload import FILE_SIZE
from .model import Model, foreign_bodies, recovered_view

MODES = ("always", "group", "none")
SIZES = {   # kills, crash-point hits per point, io errors per point, bit flips, truncation journals;
            # power loss: recorded runs, crash points per run, states per crash point
    "smoke": dict(kills=6, point_hits=1, io_errors=1, bit_flips=60, truncations=1,      # seconds: for test suites
                  power_runs=1, power_points=15, power_states=8, libfiu_runs=1, libfiu_faults=10, full_disks=1, broker_kills=4),
    "quick": dict(kills=60, point_hits=2, io_errors=1, bit_flips=300, truncations=1,
                  power_runs=3, power_points=40, power_states=20, libfiu_runs=2, libfiu_faults=40, full_disks=3, broker_kills=20),
    "ci": dict(kills=500, point_hits=10, io_errors=4, bit_flips=10_000, truncations=1,
               power_runs=9, power_points=400, power_states=50, libfiu_runs=8, libfiu_faults=260, full_disks=20, broker_kills=100),
    "long": dict(kills=5_000, point_hits=50, io_errors=20, bit_flips=100_000, truncations=4,
                 power_runs=60, power_points=600, power_states=40, libfiu_runs=20, libfiu_faults=1000, full_disks=100, broker_kills=1000),
}
FULL_DISK_BYTES = 4 * 1024 * 1024     # the small tmpfs of the full-disk mode
POWER_LOSS_CALLS = 600      # calls of each recorded run: a few thousand system calls, several files rolled
CHAIN_LENGTH = 10


@dataclass
class Report:
    """What a campaign did and found (``as_dict()`` is its JSON)."""

    seed: int
    size: str
    store: str = "journal"
    runs: dict = field(default_factory=dict)          # fault mode -> how many runs
    skipped: dict = field(default_factory=dict)       # fault mode -> why it did not run
    crash_points_hit: dict = field(default_factory=dict)
    power_loss: dict = field(default_factory=dict)    # crash points, states (by kind), full checks, damage seen
    libfiu: dict = field(default_factory=dict)        # faults injected (by kind), refusals after them
    full_disk: dict = field(default_factory=dict)     # runs on a small tmpfs, how many ended in StoreFullError
    broker: dict = field(default_factory=dict)        # broker-level kills and the calls they made
    damage: dict = field(default_factory=dict)        # bit-flip / truncation -> outcome -> how many
    crash_positions: list = field(default_factory=list)   # power loss: (fraction of the run's log, states)
    calls: int = 0
    acknowledged: int = 0
    lost_unacknowledged: int = 0
    violations: list = field(default_factory=list)
    duration_s: float = 0.0

    def count(self, mode: str, n: int = 1) -> None:
        self.runs[mode] = self.runs.get(mode, 0) + n

    def reproduce(self) -> str:
        size = "" if self.size == "quick" else f" --{self.size}"
        store = "" if self.store == "journal" else f" --store {self.store}"
        return f"journal-engine crash-test{size}{store} --seed {self.seed}"

    def as_dict(self) -> dict:
        return {"seed": self.seed, "size": self.size, "store": self.store, "runs": self.runs,
                "skipped": self.skipped, "crash_points_hit": self.crash_points_hit,
                "power_loss": self.power_loss, "libfiu": self.libfiu, "full_disk": self.full_disk,
                "broker": self.broker, "damage": self.damage,
                "calls": self.calls, "acknowledged": self.acknowledged,
                "lost_unacknowledged": self.lost_unacknowledged, "violations": self.violations,
                "duration_s": round(self.duration_s, 3), "reproduce": self.reproduce()}


class _OracleReader(threading.Thread):
    """Reads the workload's oracle until EOF, so the pipe never fills and no line is lost."""

    def __init__(self, stream) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.lines: list[str] = []
        self.ready = threading.Event()

    def run(self) -> None:
        for raw in self.stream:
            if not raw.endswith(b"\n"):
                break   # a line cut by the kill is not an acknowledgement
            line = raw.decode().rstrip("\n")
            self.lines.append(line)
            if line == "R":
                self.ready.set()
        self.ready.set()


def _run_workload(directory: str, mode: str, seed: int, first_seq: int, first_id: int, *, kill_after: float | None,
                  env: dict | None = None, max_calls: int = 20_000, store: str = "journal") -> tuple[list, int, str]:
    """Run the journal workload child; SIGKILL it `kill_after` seconds after its recovery (None: let it end)."""
    return _run_child(["journal_engine.crashtest.journal_workload", directory, mode, str(seed), str(first_seq),
                       str(first_id), str(max_calls), store], kill_after=kill_after, env=env)


def _run_child(module_and_args: list[str], *, kill_after: float | None, env: dict | None = None) -> tuple[list, int, str]:
    """Run a workload module in a child, reading its oracle; SIGKILL it `kill_after` seconds after its ``R``."""
    proc = subprocess.Popen([sys.executable, "-m"] + module_and_args,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
    reader = _OracleReader(proc.stdout)
    reader.start()
    try:
        if kill_after is not None:
            reader.ready.wait(30)
            time.sleep(kill_after)
            proc.send_signal(signal.SIGKILL)
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    stderr = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    return reader.lines, proc.returncode, stderr


class Campaign:
    """A campaign of one size over a scratch directory (``run()`` returns the Report)."""

    def __init__(self, scratch, *, size: str = "quick", seed: int | None = None, progress=None,
                 store: str = "journal", workers: int | None = None) -> None:
        if size not in SIZES:
            raise ValueError(f"size={size!r}: use one of {', '.join(SIZES)}")
        self.store = store
        self.scratch = Path(scratch)
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
        started = time.monotonic()
        self.scratch.mkdir(parents=True, exist_ok=True)
        # power-loss states are rebuilt and checked in worker processes while this one runs the rest
        with ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            power = self.start_power_loss(pool) if self.store == "journal" else []
            faults = self.start_libfiu(pool) if self.store == "journal" else []
            self.kills()
            if self.store == "journal":
                self.crash_points()
                self.io_errors()
                self.damage_at_rest()
                self.full_disk()
                self.broker_kills()
                self.finish_libfiu(faults)
                self.finish_power_loss(power)
            else:   # the other modes work on the journal's own durability steps and file format
                self.report.skipped = {mode: f"needs the journal's files and crash points; store {self.store!r}"
                                       for mode in ("crash-point", "io-error", "bit-flip", "truncation",
                                                    "power-loss", "libfiu", "full-disk", "broker-kill")}
        for directory in self._cleanup:
            if directory != str(self.scratch):
                shutil.rmtree(directory, ignore_errors=True)
        self.report.duration_s = time.monotonic() - started
        return self.report

    def _simulated_scratch(self) -> str:
        """Where the modes whose faults are simulated work: a tmpfs when there is one (their syncs then
        cost nothing; the disk's own behaviour does not enter them), else the scratch directory."""
        shm = "/dev/shm"
        if os.path.isdir(shm) and os.access(shm, os.W_OK):
            return tempfile.mkdtemp(prefix="journal-engine-crash-test-", dir=shm)
        return str(self.scratch)

    # ----- libfiu: faults in the system calls of real runs (journal_engine.crashtest.fault_workload) ---
    def start_libfiu(self, pool) -> list:
        if shutil.which("fiu-run") is None:
            self.report.skipped["libfiu"] = ("libfiu's fiu-run is not installed (Debian: apt-get install "
                                             "fiu-utils)")
            return []
        scratch = self._simulated_scratch()
        self._cleanup.append(scratch)
        return [pool.submit(fault_workload.fault_task, scratch, run, self.rng.randrange(1 << 30),
                            self.plan["libfiu_faults"])
                for run in range(self.plan["libfiu_runs"])]

    def finish_libfiu(self, futures: list) -> None:
        totals = {"runs": 0, "faults": 0, "faults_by_kind": {}, "short_write_cycles": 0, "refused_after": 0,
                  "accepted_after": 0, "calls": 0, "acknowledged": 0}
        for done, future in enumerate(as_completed(futures), 1):
            summary = future.result()
            self.report.violations += summary.pop("violations", [])
            if "faults" not in summary:
                continue
            totals["runs"] += 1
            for key in ("faults", "short_write_cycles", "refused_after", "accepted_after", "calls", "acknowledged"):
                totals[key] += summary[key]
            for kind, count in summary["faults_by_kind"].items():
                totals["faults_by_kind"][kind] = totals["faults_by_kind"].get(kind, 0) + count
            self.progress("libfiu", done, len(futures))
        if futures:
            self.report.libfiu = totals
            self.report.count("libfiu", totals["faults"])
            self.report.calls += totals["calls"]
            self.report.acknowledged += totals["acknowledged"]

    # ----- simulated power loss (journal_engine.crashtest.power_loss) -----------------------------------
    def start_power_loss(self, pool) -> list:
        if power_loss.recorder_library() is None:
            self.report.skipped["power-loss"] = ("the system-call recorder is not built "
                                                 "(python setup.py build_ext --inplace builds it)")
            return []
        plan = self.plan
        scratch = self._simulated_scratch()
        self._cleanup.append(scratch)
        return [pool.submit(power_loss.power_loss_task, scratch, run, MODES[run % len(MODES)],
                            self.rng.randrange(1 << 30), POWER_LOSS_CALLS, plan["power_points"],
                            plan["power_states"])
                for run in range(plan["power_runs"])]

    def finish_power_loss(self, futures: list) -> None:
        totals = {"recorded_runs": 0, "crash_points": 0, "states": 0, "full_checks": 0, "states_by_kind": {},
                  "damage_reported_in_unsynced_tail": 0, "reordered_tail": 0, "lost_unacknowledged": 0}
        for done, future in enumerate(as_completed(futures), 1):
            try:
                result = future.result()
            except Exception as exc:      # a recorded run that failed is a finding, not a crash of the campaign
                self.report.violations.append(f"power loss: a recorded run failed: {exc}")
                continue
            totals["recorded_runs"] += 1
            totals["crash_points"] += result.crash_points
            totals["states"] += result.states
            totals["full_checks"] += result.full_checks
            totals["damage_reported_in_unsynced_tail"] += result.damage_reported
            totals["reordered_tail"] += result.reordered_tail
            totals["lost_unacknowledged"] += result.lost_unacknowledged
            for kind, count in result.states_by_kind.items():
                totals["states_by_kind"][kind] = totals["states_by_kind"].get(kind, 0) + count
            self.report.violations += result.violations
            self.report.crash_positions += result.positions
            self.progress("power-loss", done, len(futures))
        if futures:
            self.report.power_loss = totals
            self.report.count("power-loss", totals["states"])

    # ----- workload runs checked by the oracle ----------------------------------------------------
    def _chain_step(self, directory: str, state: dict, mode: str, context: str, *, kill_after, env=None,
                    expect_exit=(0, -signal.SIGKILL), max_calls: int | None = None, before_check=None) -> int:
        seed = self.rng.randrange(1 << 30)
        lines, returncode, stderr = _run_workload(directory, mode, seed, state["seq"], state["id"],
                                                  kill_after=kill_after, env=env, store=self.store,
                                                  max_calls=max_calls or (20_000 if kill_after is not None else 600))
        if before_check is not None:
            before_check(lines, returncode)
        context = f"{context} (mode {mode}, workload seed {seed})"
        for line in lines:
            if line.startswith("X ") and line.split()[2:4] != ["True", "True"]:
                self.report.violations.append(f"{context}: an I/O failure reached the caller as {line.split()[1]}, "
                                              f"not as a JournalError that is also an OSError")
        if returncode not in expect_exit:
            self.report.violations.append(f"{context}: the workload failed with exit {returncode}: "
                                          f"{stderr.strip().splitlines()[-1:] if stderr.strip() else ''}")
        check = recover_and_check(directory, state["model"], lines, context, file_size=FILE_SIZE, store=self.store)
        self.report.violations += check.violations
        self.report.calls += check.calls
        self.report.acknowledged += check.acknowledged
        self.report.lost_unacknowledged += check.lost_unacknowledged
        state.update(model=check.model, seq=max(state["seq"], check.next_seq), id=max(state["id"], check.next_id))
        return returncode

    def kills(self) -> None:
        total = self.plan["kills"]
        done = 0
        for chain in range((total + CHAIN_LENGTH - 1) // CHAIN_LENGTH):
            directory = str(self.scratch / f"kill-{chain}")
            state = {"model": Model(), "seq": 1, "id": 1}
            for step in range(min(CHAIN_LENGTH, total - done)):
                mode = self.rng.choice(MODES)
                delay = self.rng.uniform(0.0, 0.08)
                self._chain_step(directory, state, mode, f"kill chain {chain} step {step}", kill_after=delay)
                done += 1
                self.report.count("kill")
                self.progress("kill", done, total)
            shutil.rmtree(directory, ignore_errors=True)

    def crash_points(self) -> None:
        points = durability.CRASH_POINTS
        total = len(points) * self.plan["point_hits"]
        done = 0
        for point in points:
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
                    done += 1
                    self.progress("crash-point", done, total)
            self.report.crash_points_hit[point] = hits
            self.report.count("crash-point", attempts)
            if hits < self.plan["point_hits"]:
                self.report.violations.append(f"crash point {point}: hit {hits} times in {attempts} runs, "
                                              f"{self.plan['point_hits']} planned (the workload no longer reaches it)")
            shutil.rmtree(directory, ignore_errors=True)

    def io_errors(self) -> None:
        for point in durability.CRASH_POINTS:
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
        done = 0
        found = {"kills": 0, "strict_kills": 0, "sends": 0, "deliveries": 0, "rollbacks": 0, "acks": 0,
                 "dead_letters": 0}
        for chain in range((total + CHAIN_LENGTH - 1) // CHAIN_LENGTH):
            directory = str(self.scratch / f"broker-{chain}")
            previous = {"queue": {}, "dead": {}}
            clock_ms = 1_000_000
            for step in range(min(CHAIN_LENGTH, total - done)):
                strict = done % 2 == 1           # strict mode is the broker's switch: on and off in turn
                sync = self.rng.choice(MODES)
                seed = self.rng.randrange(1 << 30)
                context = (f"broker chain {chain} step {step} (sync {sync}, strict {'on' if strict else 'off'}, "
                           f"workload seed {seed})")
                lines, returncode, stderr = _run_child(
                    ["journal_engine.crashtest.broker_workload", directory, sync, "strict" if strict else "default",
                     str(seed), str(clock_ms)], kill_after=self.rng.uniform(0.0, 0.15))
                if returncode != -signal.SIGKILL:
                    self.report.violations.append(f"{context}: the workload ended with exit {returncode}: "
                                                  f"{stderr.strip().splitlines()[-1:]}")
                clock_ms = max([clock_ms] + [int(line.split()[1]) for line in lines if line.startswith("T ")])
                try:
                    recovered = broker_workload.recovered_state(directory, sync, clock_ms)
                except Exception as exc:
                    self.report.violations.append(f"{context}: the broker failed to recover: {exc!r}")
                    break
                self.report.violations += broker_workload.check_broker(previous, lines, recovered, strict=strict,
                                                                       context=context)
                previous = recovered
                for line in lines:
                    parts = line.split()
                    if parts[0] == "O":
                        key = {"send": "sends", "ack": "acks", "rbk": "rollbacks", "dlq": "dead_letters"}[parts[2]]
                        found[key] += 1
                    elif parts[0] == "D":
                        found["deliveries"] += 1
                found["kills"] += 1
                found["strict_kills"] += strict
                done += 1
                self.report.count("broker-kill")
                self.progress("broker-kill", done, total)
            shutil.rmtree(directory, ignore_errors=True)
        self.report.broker = found

    # ----- a real full disk: a small tmpfs --------------------------------------------------------------
    def full_disk(self) -> None:
        """Runs on a small tmpfs, its free space cut by a filler file, until the disk is full: the
        workload must stop at a StoreFullError (never SIGBUS), and once the filler is gone recovery
        must return everything acknowledged."""
        mount_point = self.scratch / "small-disk"
        why = mount_small_disk(mount_point, FULL_DISK_BYTES)
        if why:
            self.report.skipped["full-disk"] = why
            return
        found = {"runs": 0, "store_full": 0}
        try:
            for run in range(self.plan["full_disks"]):
                directory = str(mount_point / f"journal-{run}")
                filler = mount_point / "filler"
                usage = shutil.disk_usage(mount_point)
                leave = self.rng.randrange(FILE_SIZE, 6 * FILE_SIZE)
                filler.write_bytes(bytes(max(0, usage.free - leave)))
                state = {"model": Model(), "seq": 1, "id": 1}

                def free_space(lines: list, returncode: int) -> None:
                    if returncode == -signal.SIGBUS:
                        self.report.violations.append(f"full disk run {run}: the workload died of SIGBUS")
                    if any(line.startswith("X StoreFullError") for line in lines):
                        found["store_full"] += 1
                    filler.unlink()

                self._chain_step(directory, state, self.rng.choice(MODES), f"full disk run {run} ({leave} bytes free)",
                                 kill_after=None, expect_exit=(0, 1), max_calls=3_000, before_check=free_space)
                found["runs"] += 1
                self.report.count("full-disk")
                self.progress("full-disk", run + 1, self.plan["full_disks"])
                shutil.rmtree(directory, ignore_errors=True)
        finally:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, check=False)
        self.report.full_disk = found
        if found["runs"] and not found["store_full"]:
            self.report.violations.append(f"full disk: none of {found['runs']} runs filled the disk "
                                          f"(the mode no longer tests what it is for)")

    # ----- damage at rest ------------------------------------------------------------------------------
    def damage_at_rest(self) -> None:
        for index in range(self.plan["truncations"]):
            pristine = str(self.scratch / f"rest-{index}")
            state = {"model": Model(), "seq": 1, "id": 1}
            self._chain_step(pristine, state, "always", "building a journal for damage at rest", kill_after=None)
            with Journal(pristine, read_only=True) as journal:
                original = recovered_view(journal.load())
            frames = _frame_bounds(pristine)
            flips = self.plan["bit_flips"] // self.plan["truncations"]
            for n in range(flips):
                path, start, end = self.rng.choice(frames)
                offset = self.rng.randrange(start, end)
                self._damaged(pristine, original, path, f"bit flip {n} in {os.path.basename(path)} at {offset}",
                              flip=(offset, 1 << self.rng.randrange(8)))
                self.report.count("bit-flip")
                if n % 50 == 0:
                    self.progress("bit-flip", n + 1, flips)
            cuts = sorted({(path, cut) for path, start, _end in frames for cut in (start - 1, start, start + 1)})
            for n, (path, cut) in enumerate(cuts):
                self._damaged(pristine, original, path, f"truncation of {os.path.basename(path)} at {cut}", cut=cut)
                self.report.count("truncation")
                if n % 50 == 0:
                    self.progress("truncation", n + 1, len(cuts))
            shutil.rmtree(pristine, ignore_errors=True)

    def _damaged(self, pristine: str, original: tuple, path: str, context: str, *, flip=None, cut=None) -> None:
        """Damage one file of a copy of `pristine`, recover it read-only, check, and put the file back
        (a read-only load writes nothing, so one copy serves every damage)."""
        work = str(self.scratch / "damaged")
        if self._damaged_copy != pristine:
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(pristine, work)
            self._damaged_copy = pristine
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
        elif result.report.torn_tail:
            # the last frame of the last file damaged looks like a torn write: reported as a torn tail
            outcome("reported as a torn tail")
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


def _frame_bounds(directory: str) -> list:
    """(path, start, end) of every valid frame of every data file: where damage is placed."""
    from .._impl import scan_frames
    from ..storage.format import stamp_of
    from ..storage.segment_files import list_directory
    bounds = []
    for data in list_directory(directory).data:
        raw = Path(data.path).read_bytes()
        rows = scan_frames(raw, stamp_of(data.header.file_id), data.header.data_start)
        for index, row in enumerate(rows[:-1]):
            if row[1] == 0:
                bounds.append((data.path, row[0], rows[index + 1][0]))
    return bounds
