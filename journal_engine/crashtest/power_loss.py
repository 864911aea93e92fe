"""Simulated power loss, ALICE / CrashMonkey's method: record every write and sync of one workload run,
then rebuild from the record the states a power cut at any moment could leave on disk, and recover
and check each one.

Recording: the workload runs under the LD_PRELOAD library built from ``iorecord.c`` (setup.py builds
it next to this module), which logs each open, write (with its bytes), ftruncate, the start and the
return of each fsync / fdatasync, rename, unlink and close on the journal's directory, and the
workload's oracle lines, all in one order.

The model of a disk after a power cut (each assumption the states honour):
  * a file's bytes are durable up to its last sync that RETURNED, covering what was written before
    that sync BEGAN (a write made while another thread's sync runs is not covered);
  * of the writes since, any subset may be on disk: none, all, a prefix, a random set of sectors at
    512 B or at 4 KiB granularity (which covers reordering and writes torn between sectors);
    a sector itself is written whole or not at all;
  * a name (a file's creation, a rename, an unlink) is durable only once its directory was
    fsynced after it; of the directory operations since, any prefix may be on disk (metadata is
    journaled in order), so a rename not followed by a directory fsync may be lost;
  * a file whose creation is not durable is gone, whatever its data.

Each state is written into a scratch directory and recovered with a read-only load (the same
analysis a writing load makes, nothing changed on disk); one state per crash point also gets the
whole check of the kill modes (a writing load, a second load, no temporary file left). The oracle
says which calls had begun and which had returned acknowledged at the crash point, and the recovered
state must be the state after some prefix of the calls begun, at least as long as the acknowledged
ones (journal_engine.crashtest.checker's rule): only records whose sync returned before the crash
must survive. One relaxation, for what a process crash cannot do: where unsynced sectors reached the
disk out of order, so that a later call survived an earlier one, recovery must report the damage
(``report.corrupt``) and the state must be the acknowledged one with some of the later calls applied,
each whole (a transaction by its commit, a record group by its GROUP frame: whole or not at all);
nothing acknowledged may be missing. A record group is one call here as in the kill modes, and a
state holding part of one is reported as such (model.split_groups).
"""
from __future__ import annotations

import glob
import logging
import os
import random
import shutil
import struct
import subprocess
import sys
import warnings
from dataclasses import dataclass, field

from .checker import repeatable_and_tidy
from .children import bound_to_parent
from .model import Model, foreign_bodies, group_members, model_view, recovered_view, split_groups
from .stores import FILE_SIZE, built_in, open_store, volatile_files

SECTOR_SIZES = (512, 4096)
_HEAD = struct.Struct("<IiQQII")
OP_OPEN, OP_CLOSE, OP_WRITE, OP_SYNC_BEGIN, OP_SYNC_END, OP_RENAME, OP_UNLINK, OP_TRUNCATE, OP_MARK, OP_MAP = range(1, 11)
_SYNCED_WRITES = os.O_DSYNC | os.O_SYNC     # a write to a descriptor opened so is durable when it returns
LOG_ENV, DIR_ENV, MARK_ENV, SKIP_ENV = ("JOURNAL_ENGINE_IOLOG", "JOURNAL_ENGINE_IOLOG_DIR",
                                        "JOURNAL_ENGINE_IOLOG_MARK_FD", "JOURNAL_ENGINE_IOLOG_SKIP")


def recorder_library() -> str | None:
    """The built LD_PRELOAD library, or None when this install has none (a checkout never built)."""
    found = sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_iorecord*.so")))
    return found[0] if found else None


@dataclass
class Entry:
    op: int
    fd: int
    a: int
    b: int
    path: str
    data: bytes


def read_log(path: str) -> list[Entry]:
    with open(path, "rb") as handle:
        raw = handle.read()
    entries = []
    pos = 0
    while pos + _HEAD.size <= len(raw):
        op, fd, a, b, len1, len2 = _HEAD.unpack_from(raw, pos)
        pos += _HEAD.size
        first = raw[pos:pos + len1].decode(errors="surrogateescape")
        second = raw[pos + len1:pos + len1 + len2]
        pos += len1 + len2
        entries.append(Entry(op, fd, a, b, first, second))
    if pos != len(raw):
        raise ValueError(f"system-call log {path} ends inside an entry at byte {pos}")
    return entries


def record_run(directory: str, log_path: str, mode: str, seed: int, calls: int, *, skip: str | None = None,
               store: str = "journal") -> str:
    """Run the journal workload once under the recorder on `store` (journal_engine.crashtest.stores),
    from an empty `directory` (stderr returned).
    `skip` ("file-sync" or "dir-sync") makes those syncs succeed without syncing: a journal built
    with that step left out, which the replay must catch."""
    library = recorder_library()
    if library is None:
        raise RuntimeError("the system-call recorder is not built (python setup.py build_ext --inplace)")
    os.makedirs(directory, exist_ok=True)
    env = dict(os.environ, LD_PRELOAD=library, **{LOG_ENV: log_path, DIR_ENV: os.path.realpath(directory),
                                                  MARK_ENV: "1"})
    if skip:
        env[SKIP_ENV] = skip
    done = subprocess.run([sys.executable, "-m", "journal_engine.crashtest.journal_workload", directory, mode,
                           str(seed), "1", "1", str(calls), store], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env={**env, **bound_to_parent()}, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the recorded workload failed with exit {done.returncode}: "
                           f"{done.stderr.decode(errors='replace')[-500:]}")
    return done.stderr.decode(errors="replace")


# ----- the file system a log describes ----------------------------------------------------------
class _Inode:
    __slots__ = ("number", "durable", "pending", "version")

    def __init__(self, number: int, content: bytes = b"") -> None:
        self.number = number
        self.durable = bytearray(content)
        self.pending: list[tuple] = []       # (serial, offset, data) writes; (serial, length, None) truncations
        self.version = 0                     # bumped whenever the durable bytes change


def _apply(content: bytearray, offset: int, data: bytes | None) -> None:
    if data is None:                         # a truncation to `offset` bytes
        del content[offset:]
        content.extend(bytes(max(0, offset - len(content))))
        return
    end = offset + len(data)
    if end > len(content):
        content.extend(bytes(end - len(content)))
    content[offset:end] = data


class DiskModel:
    """Replays a log entry by entry: what is durable, what is pending, and the names of files."""

    def __init__(self, directory: str) -> None:
        self.directory = os.path.realpath(directory)
        self.serial = 0
        self.inodes = 0
        self.names: dict[str, _Inode] = {}          # the directory as the process saw it
        self.durable_names: dict[str, _Inode] = {}  # what a power cut keeps for certain
        self.pending_names: list[tuple] = []       # (serial, op, name, target or inode) since the last dir fsync
        self.fds: dict[int, _Inode | None] = {}     # None: the directory itself
        self.synced_fds: set[int] = set()           # descriptors opened with O_DSYNC or O_SYNC
        self.syncs: dict[int, tuple] = {}           # sync serial -> (inode or None, serial when it began)
        self.oracle = bytearray()

    def _name(self, path: str) -> str | None:
        parent, name = os.path.split(path)
        return name if parent == self.directory else None

    def step(self, entry: Entry) -> None:
        self.serial += 1
        op = entry.op
        if op == OP_WRITE:
            inode = self.fds.get(entry.fd)
            if inode is not None and entry.fd in self.synced_fds:
                _apply(inode.durable, entry.a, entry.data)
                inode.pending = _superseded(inode.pending, entry.a, entry.a + len(entry.data))
                inode.version += 1
            elif inode is not None:
                inode.pending.append((self.serial, entry.a, entry.data))
        elif op == OP_MARK:
            self.oracle += entry.data
        elif op == OP_SYNC_BEGIN:
            if entry.fd in self.fds:
                self.syncs[entry.a] = (self.fds[entry.fd], self.serial)
        elif op == OP_SYNC_END:
            target, began = self.syncs.pop(entry.a, (False, 0))
            if target is False or not entry.b:
                return
            if target is None:
                while self.pending_names and self.pending_names[0][0] < began:
                    _apply_name(self.durable_names, self.pending_names.pop(0))
            else:
                covered = [p for p in target.pending if p[0] < began]
                if covered:
                    for _serial, offset, data in covered:
                        _apply(target.durable, offset, data)
                    target.pending = [p for p in target.pending if p[0] >= began]
                    target.version += 1
        elif op == OP_OPEN:
            if entry.path == self.directory:
                self.fds[entry.fd] = None
                return
            name = self._name(entry.path)
            if name is None:
                return
            inode = self.names.get(name)
            if inode is None:
                self.inodes += 1
                inode = _Inode(self.inodes)
                self.names[name] = inode
                self.pending_names.append((self.serial, "create", name, inode))
            elif entry.a & os.O_TRUNC:
                inode.pending.append((self.serial, 0, None))
            self.fds[entry.fd] = inode
            if entry.a & _SYNCED_WRITES:
                self.synced_fds.add(entry.fd)
        elif op == OP_CLOSE:
            self.fds.pop(entry.fd, None)
            self.synced_fds.discard(entry.fd)
        elif op == OP_TRUNCATE:
            inode = self.fds.get(entry.fd)
            if inode is not None:
                inode.pending.append((self.serial, entry.a, None))
        elif op == OP_RENAME:
            source, target = self._name(entry.path), self._name(entry.data.decode(errors="surrogateescape"))
            if source is None or target is None:
                raise ValueError(f"a rename across directories is not modelled: {entry.path} -> {entry.data!r}")
            self.names[target] = self.names.pop(source)
            self.pending_names.append((self.serial, "rename", source, target))
        elif op == OP_UNLINK:
            name = self._name(entry.path)
            if name is not None:
                self.names.pop(name, None)
                self.pending_names.append((self.serial, "unlink", name, None))

    def pending_pieces(self, sector: int) -> list[tuple]:
        """Every pending write cut at `sector` boundaries: (inode number, serial, offset, bytes)."""
        pieces = []
        for inode in self.reachable():
            for serial, offset, data in inode.pending:
                if data is None:
                    continue
                pos = offset
                end = offset + len(data)
                while pos < end:
                    cut = min(end, (pos // sector + 1) * sector)
                    pieces.append((inode.number, serial, pos, data[pos - offset:cut - offset]))
                    pos = cut
        return pieces

    def reachable(self) -> list[_Inode]:
        """Every inode a name points at, durably or by a pending create (each once)."""
        seen = {}
        for inode in list(self.durable_names.values()) + [p[3] for p in self.pending_names if p[1] == "create"]:
            seen[inode.number] = inode
        return list(seen.values())

    def names_after(self, kept: int) -> dict[str, _Inode]:
        names = dict(self.durable_names)
        for pending in self.pending_names[:kept]:
            _apply_name(names, pending)
        return names


def _superseded(pending: list, start: int, end: int) -> list:
    """Pending writes with the bytes `start`..`end` cut out: a synced write made them stale, and the
    page cache never writes older bytes over newer ones."""
    kept = []
    for serial, offset, data in pending:
        if data is None or offset + len(data) <= start or offset >= end:
            kept.append((serial, offset, data))
            continue
        if offset < start:
            kept.append((serial, offset, data[:start - offset]))
        if offset + len(data) > end:
            kept.append((serial, end, data[end - offset:]))
    return kept


def mapped_files(entries: list[Entry], directory: str) -> set[str]:
    """The files of `directory` the run mapped shared and writable (their writes are not in the log)."""
    paths: dict[int, str] = {}
    mapped = set()
    for entry in entries:
        if entry.op == OP_OPEN:
            paths[entry.fd] = entry.path
        elif entry.op == OP_MAP and entry.fd in paths:
            mapped.add(os.path.relpath(paths[entry.fd], os.path.realpath(directory)))
    return mapped


def _apply_name(names: dict, pending: tuple) -> None:
    _serial, op, name, other = pending
    if op == "create":
        names[name] = other
    elif op == "rename":
        if name in names:
            names[other] = names.pop(name)
    else:
        names.pop(name, None)


# ----- crash states --------------------------------------------------------------------------------
@dataclass
class CrashState:
    """One state a power cut could leave: how many pending directory operations survive, and which
    pending writes (all of them, a set of sector pieces, or None for none) reach the disk."""

    kind: str
    names_kept: int
    writes: tuple | None          # ((inode number, serial, offset, bytes), ...) in the order written; None: all

    def key(self) -> tuple:
        """The same pieces make the same state (pieces are shared objects: identity is enough)."""
        return (self.names_kept, None if self.writes is None else tuple(map(id, self.writes)))


def crash_states(disk: DiskModel, rng: random.Random, wanted: int) -> list[CrashState]:
    """Up to `wanted` distinct states at the disk's current moment (fewer when fewer exist)."""
    names = len(disk.pending_names)
    states = [CrashState("drop", names, ()), CrashState("keep", names, None)]
    for kept in range(names):
        states.append(CrashState("names-lost", kept, ()))
        states.append(CrashState("names-lost", kept, None))
    fine = disk.pending_pieces(SECTOR_SIZES[0])
    coarse = disk.pending_pieces(SECTOR_SIZES[1])
    writes = [(inode.number, serial) for inode in disk.reachable() for serial, _o, data in inode.pending
              if data is not None]
    for count in range(1, len(writes)):        # a prefix of the writes, in the order they were made
        keep = set(sorted(writes, key=lambda w: w[1])[:count])
        states.append(CrashState("prefix", names, tuple(p for p in coarse if (p[0], p[1]) in keep)))
    if fine:
        last = max(fine, key=lambda p: p[1])[1]
        torn = [p for p in fine if p[1] == last]
        before = [p for p in fine if p[1] != last]
        for cut in range(1, len(torn)):        # the last write torn after `cut` of its sectors
            states.append(CrashState("torn-512", names, tuple(before + torn[:cut])))
    attempts = 0
    seen = {state.key() for state in states}
    while len(states) < wanted and attempts < wanted * 4 and (fine or coarse):
        attempts += 1
        pieces = fine if rng.random() < 0.5 else coarse
        kind = "sectors-512" if pieces is fine else "sectors-4096"
        chosen = tuple(p for p in pieces if rng.random() < rng.choice((0.2, 0.5, 0.8)))
        kept = names if rng.random() < 0.8 else rng.randrange(names + 1)
        state = CrashState(kind, kept, chosen)
        if state.key() not in seen:
            seen.add(state.key())
            states.append(state)
    unique = {}
    for state in states:
        unique.setdefault(state.key(), state)
    return list(unique.values())[:max(wanted, 2)]


class Materialiser:
    """Keeps one scratch directory equal to a crash state, rewriting only what changed."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
        self.present: dict[str, tuple] = {}      # name -> (inode number, version, length)

    def base(self, names: dict[str, _Inode]) -> None:
        """The durable bytes of every named file, and nothing else."""
        for name in list(self.present):
            if name not in names:
                os.unlink(os.path.join(self.directory, name))
                del self.present[name]
        for name, inode in names.items():
            stamp = (inode.number, inode.version, len(inode.durable))
            if self.present.get(name) != stamp:
                with open(os.path.join(self.directory, name), "wb") as handle:
                    handle.write(inode.durable)
                self.present[name] = stamp

    def overlay(self, names: dict[str, _Inode], state: CrashState) -> list[tuple]:
        """Write the state's pending bytes over the base, in place; returns what undo() needs."""
        by_number = {inode.number: name for name, inode in names.items()}
        if state.writes is None:
            pieces = [(by_number[inode.number], offset, data) for inode in names.values()
                      for _serial, offset, data in inode.pending]
        else:
            pieces = [(by_number[number], offset, data) for number, _serial, offset, data in state.writes
                      if number in by_number]
        fds: dict[str, int] = {}
        try:
            for name, offset, data in pieces:
                if name not in fds:
                    fds[name] = os.open(os.path.join(self.directory, name), os.O_RDWR)
                if data is None:
                    os.ftruncate(fds[name], offset)
                else:
                    os.pwrite(fds[name], data, offset)
        finally:
            for fd in fds.values():
                os.close(fd)
        return [(name, offset, len(data) if data is not None else None) for name, offset, data in pieces]

    def undo(self, names: dict[str, _Inode], changed: list) -> None:
        """Put the base back where overlay() wrote."""
        fds: dict[str, int] = {}
        try:
            for name, offset, length in changed:
                durable = names[name].durable
                if name not in fds:
                    fds[name] = os.open(os.path.join(self.directory, name), os.O_RDWR)
                    os.ftruncate(fds[name], len(durable))
                if length is None:
                    os.pwrite(fds[name], durable, 0)
                elif offset < len(durable):
                    os.pwrite(fds[name], durable[offset:offset + length], offset)
        finally:
            for fd in fds.values():
                os.close(fd)


# ----- the oracle at a crash point -----------------------------------------------------------------
class OracleReader:
    """The calls begun and the highest acknowledged seq, from the oracle lines printed so far
    (read on as the crash points move forward)."""

    def __init__(self) -> None:
        self.ops: list = []
        self.acked = 0
        self.read = 0

    def at(self, text: bytearray) -> tuple[list, int]:
        end = text.rfind(b"\n") + 1
        if end > self.read:
            for line in bytes(text[self.read:end]).decode(errors="replace").split("\n")[:-1]:
                if line.startswith("O "):
                    self.ops.append(line.split()[1:])
                elif line.startswith("A "):
                    self.acked = max(self.acked, int(line.split()[1]))
            self.read = end
        return self.ops, self.acked


@dataclass
class ReplayResult:
    crash_points: int = 0
    states: int = 0
    full_checks: int = 0
    states_by_kind: dict = field(default_factory=dict)
    damage_reported: int = 0           # states whose unsynced tail recovery reported as damage (allowed)
    reordered_tail: int = 0            # of those, states where a later unsynced call survived an earlier one
    lost_unacknowledged: int = 0
    violations: list = field(default_factory=list)
    positions: list = field(default_factory=list)   # (log position, states checked) per crash point
    not_applicable: str | None = None  # why the replay cannot model this store's writes (nothing replayed)


class _Views:
    """The states the calls define after n of them, for n from the acknowledged to the begun, built as
    the crash points move forward through the log."""

    def __init__(self) -> None:
        self.model = Model()
        self.applied = 0

    def between(self, ops: list, acked: int) -> "Allowed":
        acked_count = sum(1 for op in ops if int(op[0]) <= acked)
        while self.applied < acked_count:
            self.model.apply(ops[self.applied])
            self.applied += 1
        base = self.model.copy()
        state = base.copy()
        views = [_snapshot(model_view(state))]
        for op in ops[acked_count:]:
            state.apply(op)
            views.append(_snapshot(model_view(state)))
        return Allowed(views, base, ops[acked_count:])


def _snapshot(view: tuple) -> tuple:
    records, prepared, incomplete = view
    return ({rid: (rec[0], rec[1], list(rec[2])) for rid, rec in records.items()},
            {tx: [entry[0], list(entry[1])] for tx, entry in prepared.items()}, set(incomplete))


# calls whose effect a reordered tail can drop on its own: each is one frame, one record group (whole:
# its GROUP frame checks it), or one commit, rollback or prepare record that decides its transaction
# whole (a lost rollback leaves a prepared transaction prepared); the others (transactional writes,
# syncs, compactions) change no record by themselves
_EFFECTS = ("add", "upd", "del", "grp", "cmt", "rbk", "prp")


@dataclass
class Allowed:
    """What a crash at one point may recover: the state after the acknowledged calls and after each
    longer prefix of the calls begun (`views`), or -- where unsynced sectors reached the disk out of
    order -- the acknowledged state with any subset of the later calls applied, each call whole."""

    views: list
    base: Model
    unacknowledged: list

    def explained_by_a_subset(self, view: tuple) -> bool:
        """A depth-first search over keeping or dropping each later call, cut short as soon as a record
        (or a prepared transaction) no later call touches differs from the recovered one."""
        records, prepared = view[0], view[1]
        ops = self.unacknowledged
        tx_records: dict[int, set] = {tx: {op[1] for op in entry[1]} for tx, entry in self.base.pending.items()}
        for op in ops:
            if op[1] in ("atx", "utx", "dtx"):
                tx_records.setdefault(int(op[2]), set()).add(int(op[3]))
        last_record: dict[int, int] = {}
        last_tx: dict[int, int] = {}
        for index, op in enumerate(ops):
            name = op[1]
            if name in ("add", "upd", "del"):
                last_record[int(op[2])] = index
            elif name == "grp":
                for member in group_members(op):
                    last_record[member[1]] = index
            elif name in ("atx", "utx", "dtx", "prp", "cmt", "rbk"):
                tx = int(op[2])
                last_tx[tx] = index
                if name == "cmt":
                    for record_id in tx_records.get(tx, ()):
                        last_record[record_id] = index
        touched = set(last_record)
        untouched = set(self.base.records) | set(records)
        for record_id in untouched - touched:
            if self.base.records.get(record_id) != records.get(record_id):
                return False
        for tx, entry in self.base.pending.items():
            if tx not in last_tx and (entry[0] is not None) and prepared.get(tx) != entry:
                return False
        settled_at: dict[int, list] = {}
        for record_id, index in last_record.items():
            settled_at.setdefault(index, []).append(("record", record_id))
        for tx, index in last_tx.items():
            settled_at.setdefault(index, []).append(("tx", tx))
        small = Model({rid: rec for rid, rec in self.base.records.items() if rid in touched},
                      dict(self.base.pending))
        start = small.copy()

        def settled(state: Model, index: int) -> bool:
            for kind, key in settled_at.get(index, ()):
                if kind == "record":
                    if state.records.get(key) != records.get(key):
                        return False
                else:
                    entry = state.pending.get(key)
                    mine = entry if entry is not None and entry[0] is not None else None
                    if mine != prepared.get(key):
                        return False
            return True

        def search(index: int, state: Model) -> bool:
            while index < len(ops) and ops[index][1] not in _EFFECTS:
                try:
                    state.apply(ops[index])
                except (KeyError, TypeError):
                    return False
                if not settled(state, index):
                    return False
                index += 1
            if index == len(ops):
                return True
            kept = state.copy()
            try:
                kept.apply(ops[index])
                if settled(kept, index) and search(index + 1, kept):
                    return True
            except (KeyError, TypeError):     # an update or delete of a record whose add was dropped
                pass
            return settled(state, index) and search(index + 1, state)

        return search(0, start)


def replay(log_path: str, directory: str, scratch: str, *, seed: int, points: int, states_per_point: int,
           context: str, share: tuple[int, int] = (0, 1), store: str = "journal") -> ReplayResult:
    """Rebuild crash states from the log of a run of `store` on `directory` and check each; `share`
    (i, n) takes every n-th crash point from the i-th, so n processes can split one log."""
    logging.disable(logging.ERROR)    # recovery logs each torn tail it meets: thousands here, all expected
    warnings.simplefilter("ignore", RuntimeWarning)
    entries = read_log(log_path)
    unseen = sorted(mapped_files(entries, directory) - set(volatile_files(store)))
    if unseen:
        return ReplayResult(not_applicable=f"store {store!r} writes {', '.join(unseen)} through a shared "
                                           f"writable mapping, whose writes no system-call log sees")
    recover = _Recovery(store)
    disk = DiskModel(directory)
    candidates = []
    for position, entry in enumerate(entries):   # a crash point: a moment with something not yet durable
        if entry.op in (OP_WRITE, OP_SYNC_BEGIN, OP_RENAME, OP_UNLINK, OP_OPEN):
            candidates.append(position + 1)
    rng = random.Random(seed)
    chosen = sorted(rng.sample(candidates, min(points, len(candidates))))[share[0]::share[1]]
    result = ReplayResult()
    views = _Views()
    oracle = OracleReader()
    state_dir = os.path.join(scratch, "state")
    full_dir = os.path.join(scratch, "full")
    materialiser = Materialiser(state_dir)
    done = 0
    for position in chosen:
        while done < position:
            disk.step(entries[done])
            done += 1
        ops, acked = oracle.at(disk.oracle)
        allowed = views.between(ops, acked)
        where = f"{context}, crash point at log entry {position}"
        point_rng = random.Random(f"{seed}-{position}")
        states = crash_states(disk, point_rng, states_per_point)
        full_index = point_rng.randrange(len(states))
        checked = 0
        for index, state in enumerate(states):
            names = disk.names_after(state.names_kept)
            materialiser.base(names)
            changed = materialiser.overlay(names, state)
            label = f"{where}, state {state.kind} #{index}"
            if recover.read_only:
                _check_state(state_dir, allowed, label, result, recover, read_only=True, full=False)
            if index == full_index or not recover.read_only:
                shutil.rmtree(full_dir, ignore_errors=True)
                shutil.copytree(state_dir, full_dir)
                _check_state(full_dir, allowed, label + " (writing load)", result, recover, read_only=False,
                             full=index == full_index)
                result.full_checks += index == full_index
            materialiser.undo(names, changed)
            result.states += 1
            result.states_by_kind[state.kind] = result.states_by_kind.get(state.kind, 0) + 1
            checked += 1
        result.crash_points += 1
        result.positions.append((position / max(1, len(entries)), checked))
    shutil.rmtree(full_dir, ignore_errors=True)
    shutil.rmtree(state_dir, ignore_errors=True)
    return result


class _Recovery:
    """How a state is recovered: a backend whose read-only load is the analysis a writing load makes
    (``read_only_recovers``: the journal) with a read-only load, nothing written, so one directory serves
    every state, and with a writing load; another store only by opening it (on a copy of the state:
    opening may write)."""

    def __init__(self, store: str) -> None:
        self.store = store
        self.backend = built_in(store)
        self.read_only = self.backend is not None and self.backend.read_only_recovers

    def open(self, directory: str, *, read_only: bool):
        if not self.read_only:
            return open_store(self.store, directory, "always", for_recovery=True)
        if read_only:
            return self.backend.open(directory, read_only=True)
        return self.backend.open(directory, file_size=FILE_SIZE, compact_min_files=0)


def _check_state(directory: str, allowed: Allowed, context: str, result: ReplayResult, recover: _Recovery, *,
                 read_only: bool, full: bool) -> None:
    """Recover one state and check it against what the calls allow; `full`: also a second load and
    no temporary file left."""
    try:
        with recover.open(directory, read_only=read_only) as store:
            loaded = store.load()
        if read_only:
            incomplete = set(loaded.report.incomplete_transactions)
        else:
            incomplete = set(getattr(loaded.report, "rolled_back", ()))
    except Exception as exc:   # recovery must open whatever a power cut leaves
        result.violations.append(f"{context}: recovery failed: {exc!r}")
        return
    records, prepared, _ = recovered_view(loaded)
    view = (records, prepared, incomplete)
    if getattr(loaded.report, "corrupt", None):
        result.damage_reported += 1
    # a group is one unit under power loss too: a torn write must not leave a part of one
    result.violations += [f"{context}: {problem}" for problem in
                          split_groups(allowed.unacknowledged, records, set(allowed.base.records))]
    matched = [n for n, candidate in enumerate(allowed.views) if candidate == view]
    if not matched:   # a state the calls define holds only bodies they wrote; any other is checked body by body
        result.violations += [f"{context}: {problem}" for problem in foreign_bodies(records, prepared)]
    if not matched and getattr(loaded.report, "corrupt", None) and allowed.explained_by_a_subset(view):
        result.reordered_tail += 1    # later unsynced calls reached the disk, an earlier one did not: reported
        return
    if not matched:
        expected = allowed.views[0][0]
        missing = sorted(rid for rid, rec in expected.items() if records.get(rid) != rec)
        result.violations.append(f"{context}: the recovered state is no prefix of the calls from the last "
                                 f"acknowledged one ({len(allowed.views) - 1} unacknowledged calls begun); "
                                 f"acknowledged records missing or different: {missing[:5]}; "
                                 f"report corrupt={loaded.report.corrupt[:2]}")
        return
    result.lost_unacknowledged += len(allowed.views) - 1 - matched[-1]
    if full:
        result.violations += repeatable_and_tidy(directory, view, context,
                                                 lambda: recover.open(directory, read_only=False))


def power_loss_task(scratch: str, run: int, mode: str, seed: int, calls: int, points: int, states: int,
                    skip: str | None = None, store: str = "journal") -> ReplayResult:
    """One recorded run and its crash states (a process pool's unit of work; the run's files removed)."""
    base = os.path.join(scratch, f"power-{run}")
    shutil.rmtree(base, ignore_errors=True)
    directory = os.path.join(base, "store")
    log_path = os.path.join(base, "syscalls.log")
    try:
        record_run(directory, log_path, mode, seed, calls, skip=skip, store=store)
        return replay(log_path, directory, base, seed=seed, points=points, states_per_point=states,
                      context=f"power loss run {run} (mode {mode}, workload seed {seed})", store=store)
    finally:
        shutil.rmtree(base, ignore_errors=True)
