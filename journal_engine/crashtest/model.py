"""The oracle's side of the crash harness: the state the workload's calls define (a model), what
recovery returned, and the check between them (journal_engine.crashtest.checker)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .bodies import check_body, make_body, xid_of


@dataclass
class Model:
    """The journal's state as the calls the worker made define it."""

    records: dict = field(default_factory=dict)   # id -> (type, body, [(type, body)])
    pending: dict = field(default_factory=dict)   # tx -> [xid or None, [(kind, id, type, body)]]

    def apply(self, op: list[str]) -> None:
        seq, name, args = int(op[0]), op[1], op[2:]
        if name == "add":
            record_id, record_type, size = int(args[0]), int(args[1]), int(args[2])
            self.records[record_id] = (record_type, make_body(record_id, seq, size), [])
        elif name == "upd":
            record_id, record_type, size = int(args[0]), int(args[1]), int(args[2])
            self.records[record_id][2].append((record_type, make_body(record_id, seq, size)))
        elif name == "del":
            del self.records[int(args[0])]
        elif name in ("atx", "utx"):
            tx_id, record_id, record_type, size = (int(a) for a in args[:4])
            kind = "add" if name == "atx" else "update"
            self.pending.setdefault(tx_id, [None, []])[1].append(
                (kind, record_id, record_type, make_body(record_id, seq, size)))
        elif name == "dtx":
            tx_id, record_id = int(args[0]), int(args[1])
            self.pending.setdefault(tx_id, [None, []])[1].append(("delete", record_id, 0, b""))
        elif name == "prp":
            tx_id = int(args[0])
            self.pending[tx_id][0] = xid_of(tx_id)
        elif name == "cmt":
            _xid, ops = self.pending.pop(int(args[0]))
            for kind, record_id, record_type, body in ops:
                if kind == "add":
                    self.records[record_id] = (record_type, body, [])
                elif kind == "update":
                    if record_id in self.records:
                        self.records[record_id][2].append((record_type, body))
                else:
                    self.records.pop(record_id, None)
        elif name == "rbk":
            self.pending.pop(int(args[0]))
        elif name == "grp":
            # as replay applies a group: an update or delete of a record that is not live is passed
            # over (recovery reports it as an anomaly). Only a power cut that kept the group and lost
            # the record's own earlier add, never written durably, makes that happen.
            for kind, record_id, record_type, size in group_members(op):
                if kind == "add":
                    self.records[record_id] = (record_type, make_body(record_id, seq, size), [])
                elif kind == "upd":
                    if record_id in self.records:
                        self.records[record_id][2].append((record_type, make_body(record_id, seq, size)))
                else:
                    self.records.pop(record_id, None)
        elif name not in ("syn", "cpt"):
            raise ValueError(f"unknown call in the workload's oracle: {op}")

    def copy(self) -> "Model":
        """A copy deep enough for apply(), which appends to update lists and transaction entries (bodies
        and the tuples holding them never change): far cheaper than copy.deepcopy."""
        return Model({rid: (rec[0], rec[1], list(rec[2])) for rid, rec in self.records.items()},
                     {tx: [entry[0], list(entry[1])] for tx, entry in self.pending.items()})

    def after_recovery(self) -> "Model":
        """What load() leaves: prepared transactions kept, incomplete ones rolled back."""
        copied = self.copy()
        return Model(copied.records, {tx: entry for tx, entry in copied.pending.items() if entry[0] is not None})


def group_members(op: list[str]) -> list[tuple[str, int, int, int]]:
    """The records of a record-group call ``<seq> grp <sync> <kind>:<id>:<type>:<size> ...`` (kind: add,
    upd or del), as (kind, record id, record type, body size)."""
    members = []
    for member in op[3:]:
        kind, record_id, record_type, size = member.split(":")
        members.append((kind, int(record_id), int(record_type), int(size)))
    return members


def durable_ids(model: Model, ops: list, acked: int) -> set:
    """The records whose add was durable: live in ``model`` (the state the run began from) or added by a
    call of ``ops`` acknowledged (seq <= ``acked``), directly, in a group, or by a transaction whose
    COMMIT is acknowledged. A transaction's record is live from its commit on, not from its ADD_TX: a
    kill that keeps a prepared transaction and loses its commit leaves the record absent, as a later
    group's delete of it would (a CI campaign took that for a group recovered in part)."""
    ids = set(model.records)
    added_in = {tx_id: [op[1] for op in entry[1] if op[0] == "add"] for tx_id, entry in model.pending.items()}
    for op in ops:
        if int(op[0]) > acked:
            break
        if op[1] == "add":
            ids.add(int(op[2]))
        elif op[1] == "atx":
            added_in.setdefault(int(op[2]), []).append(int(op[3]))
        elif op[1] == "cmt":
            ids.update(added_in.pop(int(op[2]), ()))
        elif op[1] == "grp":
            ids.update(member[1] for member in group_members(op) if member[0] == "add")
    return ids


def split_groups(ops: list, records: dict, durable: set = frozenset()) -> list[str]:
    """Record groups are all-or-nothing: of each group call's records that no later call touches, the
    recovered ones (``records``: id -> (type, body, updates)) show the group's effect on all or on
    none. A sentence for each group recovered in part.

    A record's absence, or the lack of the group's update in it, is evidence only for a record in
    ``durable`` (its add was durable before the group was written): a record whose add was never
    acknowledged may have been lost before the group (a power cut keeps sectors out of order), which
    leaves it absent and the group's update of it passed over. A record id is added once, so a
    durable one absent after recovery was deleted by the group (no later call touches it)."""
    problems = []
    for index, op in enumerate(ops):
        if op[1] != "grp":
            continue
        seq = int(op[0])
        later = _touched(ops[index + 1:])
        shown, missing = [], []
        for kind, record_id, _type, _size in group_members(op):
            if record_id in later:
                continue
            if kind == "add" or record_id in durable:
                (shown if _shows(kind, record_id, seq, records) else missing).append(record_id)
            elif kind == "upd" and _shows(kind, record_id, seq, records):
                shown.append(record_id)     # the group's own body, whatever became of the record's add
        if shown and missing:
            problems.append(f"the record group of call {seq} was recovered in part: records {shown} hold it, "
                            f"records {missing} do not")
    return problems


def _touched(ops: list) -> set:
    """The record ids the calls ``ops`` write."""
    touched = set()
    for op in ops:
        if op[1] in ("add", "upd", "del"):
            touched.add(int(op[2]))
        elif op[1] in ("atx", "utx", "dtx"):
            touched.add(int(op[3]))
        elif op[1] == "grp":
            touched.update(member[1] for member in group_members(op))
    return touched


def _shows(kind: str, record_id: int, seq: int, records: dict) -> bool:
    """Whether the recovered ``records`` hold the effect of call ``seq`` on ``record_id``."""
    record = records.get(record_id)
    if kind == "del":
        return record is None
    if record is None:
        return False
    bodies = [record[1]] if kind == "add" else [body for _type, body in record[2]]
    return any(_call_of(body) == seq for body in bodies)


def _call_of(body: bytes) -> int | None:
    try:
        return check_body(body)[1]
    except ValueError:
        return None


def recovered_view(result) -> tuple[dict, dict, set]:
    records = {rid: (rec.record_type, rec.body, list(rec.updates)) for rid, rec in result.records.items()}
    prepared = {tx.tx_id: [tx.xid, [(op.kind, op.record_id, op.record_type, op.body) for op in tx.records]]
                for tx in result.prepared}
    return records, prepared, set(getattr(result.report, "rolled_back", ()))


def model_view(model: Model) -> tuple[dict, dict, set]:
    prepared = {tx: entry for tx, entry in model.pending.items() if entry[0] is not None}
    incomplete = {tx for tx, entry in model.pending.items() if entry[0] is None}
    return model.records, prepared, incomplete


def foreign_bodies(records: dict, prepared: dict) -> list[str]:
    """Nothing never written may appear: every body must be one a call wrote for that record."""
    problems = []
    for record_id, (_type, body, updates) in records.items():
        for what, data in [("body", body)] + [(f"update {i}", u[1]) for i, u in enumerate(updates)]:
            try:
                named_id, _seq = check_body(data)
            except ValueError as exc:
                problems.append(f"record {record_id} {what} was never written: {exc}")
                continue
            if named_id != record_id:
                problems.append(f"record {record_id} {what} belongs to record {named_id}")
    for tx_id, (_xid, ops) in prepared.items():
        for kind, record_id, _type, body in ops:
            if kind == "delete":
                continue
            try:
                if check_body(body)[0] != record_id:
                    problems.append(f"prepared transaction {tx_id} holds a body of another record")
            except ValueError as exc:
                problems.append(f"prepared transaction {tx_id} holds a body never written: {exc}")
    return problems
