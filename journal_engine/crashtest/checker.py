"""The invariants checked after every recovery, as violations (a product reports; tests assert none).

For a journal-level run, after a crash and recovery:
  * every call whose durability promise returned is in the recovered state, byte-exact (bodies and
    updates; an acknowledged delete means the record is absent: deleted records never return);
  * nothing that was never written appears (every body names its record and call, with a CRC);
  * transactions are all-or-nothing: committed ones applied whole, prepared ones returned whole,
    the others rolled back;
  * record groups (append_group) are all-or-nothing: never a part of one recovered without the rest;
  * the recovered state is the state after some prefix of the calls begun, at least as long as
    the acknowledged ones;
  * a process crash leaves no damage (damage would be reported, never hidden) and recovery leaves
    no temporary files;
  * recovery is repeatable: a second load returns the same state.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from .model import Model, durable_ids, foreign_bodies, group_members, model_view, recovered_view, split_groups
from .stores import built_in, open_store


@dataclass
class Check:
    """One recovery checked: what it found and what it broke."""

    violations: list = field(default_factory=list)   # sentences, each naming the invariant broken
    model: Model | None = None                       # the state recovery left, for the next round
    next_seq: int = 1
    next_id: int = 1
    calls: int = 0
    acknowledged: int = 0
    lost_unacknowledged: int = 0                     # calls begun but not durable, lost: allowed


def recover_and_check(directory: str, model: Model, lines: list[str], context: str, *,
                      file_size: int, store: str = "journal") -> Check:
    """Recover `directory` and check it against the oracle `lines` of one workload run."""
    check = Check(model=model)
    warnings = [line for line in lines if line.startswith("W ")]
    check.violations += [f"{context}: the workload saw damage at its own load: {w}" for w in warnings]
    ops = [line.split()[1:] for line in lines if line.startswith("O ")]
    acked = max([int(line.split()[1]) for line in lines if line.startswith("A ")], default=0)
    acked_count = sum(1 for op in ops if int(op[0]) <= acked)
    check.calls, check.acknowledged = len(ops), acked_count

    with _open(store, directory, file_size) as journal:
        result = journal.load()
        recovered = recovered_view(result)
        report = result.report
    if getattr(report, "corrupt", None):
        check.violations.append(f"{context}: a crash left damage: {report.corrupt[:3]}")
    if getattr(report, "anomalies", None):
        check.violations.append(f"{context}: recovery found inconsistent records: {report.anomalies[:3]}")
    check.violations += repeatable_and_tidy(directory, recovered, context, lambda: _open(store, directory, file_size))
    check.violations += [f"{context}: {problem}" for problem in foreign_bodies(recovered[0], recovered[1])]
    check.violations += [f"{context}: {problem}"
                         for problem in split_groups(ops, recovered[0], durable_ids(model, ops, acked))]

    matched = matching_prefix(model, ops, acked_count, recovered)
    if matched is None:
        missing = _missing_acknowledged(model, ops[:acked_count], recovered[0])
        check.violations.append(
            f"{context}: the recovered state is no prefix of the calls from the last acknowledged one (seq "
            f"{acked}, {acked_count} of {len(ops)} calls); acknowledged records missing or different: "
            f"{missing[:5]}")
        matched = len(ops)          # go on from the calls' state so one violation is not reported twice
        final_records, final_pending = recovered[0], {tx: entry for tx, entry in recovered[1].items()}
        check.model = Model(final_records, final_pending).copy()
    else:
        final = model.copy()
        for op in ops[:matched]:
            final.apply(op)
        check.model = final.after_recovery()
    check.next_seq = max([int(op[0]) for op in ops], default=0) + 1
    check.next_id = 1 + max([int(op[2]) for op in ops if op[1] == "add"]
                            + [int(op[3]) for op in ops if op[1] == "atx"]
                            + [member[1] for op in ops if op[1] == "grp" for member in group_members(op)], default=0)
    check.lost_unacknowledged = len(ops) - matched
    return check


def matching_prefix(model: Model, ops: list, acked_count: int, recovered: tuple) -> int | None:
    """The longest n >= `acked_count` whose first n calls of `ops`, applied to `model`, give the
    `recovered` view; None when no such prefix does (something acknowledged is lost or changed)."""
    states = model.copy()
    for op in ops[:acked_count]:
        states.apply(op)
    matched = None
    for n in range(acked_count, len(ops) + 1):
        if n > acked_count:
            states.apply(ops[n - 1])
        if model_view(states) == recovered:
            matched = n
    return matched


def repeatable_and_tidy(directory: str, recovered: tuple, context: str, reopen) -> list[str]:
    """A second load (of the store `reopen()` opens) returns the same state, and recovery left no
    temporary file behind."""
    problems = []
    with reopen() as journal:
        again = recovered_view(journal.load())
    if again[:2] != recovered[:2]:
        problems.append(f"{context}: a second load returned another state (recovery is not repeatable)")
    leftovers = [n for n in os.listdir(directory) if n.endswith((".tmp", ".jec")) or n == "compaction.ctl"]
    if leftovers:
        problems.append(f"{context}: recovery left {leftovers}")
    return problems


def _open(store: str, directory: str, file_size: int):
    """The store recovered as a writer opens it, with automatic compaction off (a user's factory as it is)."""
    backend = built_in(store)
    if backend is None:
        return open_store(store, directory, "always", for_recovery=True)
    return backend.open(directory, sync="always", file_size=file_size, compact_min_files=0)


def _missing_acknowledged(model: Model, acked_ops: list, recovered_records: dict) -> list:
    state = model.copy()
    for op in acked_ops:
        state.apply(op)
    return [(rid, "missing" if rid not in recovered_records else "different")
            for rid, rec in state.records.items() if recovered_records.get(rid) != rec]
