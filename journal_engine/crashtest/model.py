"""The oracle's side of the crash harness: the state the workload's calls define (a model), what
recovery returned, and the check between them (journal_engine.crashtest.checker)."""
from __future__ import annotations

import copy
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
        elif name not in ("syn", "cpt"):
            raise ValueError(f"unknown call in the workload's oracle: {op}")

    def after_recovery(self) -> "Model":
        """What load() leaves: prepared transactions kept, incomplete ones rolled back."""
        return Model(copy.deepcopy(self.records),
                     {tx: copy.deepcopy(entry) for tx, entry in self.pending.items() if entry[0] is not None})


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
