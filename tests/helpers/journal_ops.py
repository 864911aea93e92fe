"""Replays a fixed list of journal operations, for the parity and golden-file tests.

An op list is plain JSON, so the same list can be run by the compiled core in
this process and by the Python twin in a child process
(JOURNAL_ENGINE_IMPLEMENTATION=python), and the resulting files compared byte
for byte. Bodies are either a hex string or ``[seed, length]`` (deterministic
pseudo-random bytes), so large records stay small in the list.

    python tests/helpers/journal_ops.py DIRECTORY OPS_JSON_FILE   # prints the summary of every load as JSON

Ops: ["add", id, type, body], ["update", id, type, body], ["delete", id],
["add_tx", tx, id, type, body], ["update_tx", tx, id, type, body], ["delete_tx", tx, id],
["prepare", tx, xid], ["commit", tx], ["rollback", tx], ["sync"], ["reopen"], and a record group
["group", [kind, id, type, body], ...] with kind "add", "update" or "delete".
"""
from __future__ import annotations

import json
import os
import random
import sys
from typing import Any

LIMITS_HEADER_BYTES = 64
_GROUP_KINDS = {"add": 11, "update": 12, "delete": 16}     # record_format.RecordKind (tests/ import no engine here)


def body_of(spec: Any) -> bytes:
    """The bytes a body spec stands for."""
    if isinstance(spec, str):
        return bytes.fromhex(spec)
    seed, length = spec
    return random.Random(seed).randbytes(length)


def summarize(result) -> dict:
    """A JSON-able picture of a LoadResult: what a load recovered, independent of the implementation."""
    records = {}
    for record_id, rec in sorted(result.records.items()):
        records[str(record_id)] = {
            "type": rec.record_type,
            "body": rec.body.hex(),
            "updates": [[user_type, body.hex()] for user_type, body in rec.updates],
        }
    prepared = []
    for tx in sorted(result.prepared, key=lambda t: t.tx_id):
        prepared.append({"tx": tx.tx_id, "xid": tx.xid.hex(),
                         "records": [[r.kind, r.record_id, r.record_type, r.body.hex()] for r in tx.records]})
    return {"records": records, "prepared": prepared, "rolled_back": sorted(result.report.rolled_back),
            "corrupt": len(result.report.corrupt), "torn_tail_truncated": result.report.torn_tail_truncated}


def apply_ops(directory: str, options: dict, ops: list) -> list[dict]:
    """Open, load, run `ops` (reopening on "reopen"), close; the summary of every load, in order."""
    from journal_engine import Journal

    loads = []
    journal = Journal(directory, **options)
    loads.append(summarize(journal.load()))
    try:
        for op in ops:
            name, args = op[0], op[1:]
            if name == "add":
                journal.add(args[0], args[1], body_of(args[2]))
            elif name == "update":
                journal.update(args[0], args[1], body_of(args[2]))
            elif name == "delete":
                journal.delete(args[0])
            elif name == "add_tx":
                journal.add_tx(args[0], args[1], args[2], body_of(args[3]))
            elif name == "update_tx":
                journal.update_tx(args[0], args[1], args[2], body_of(args[3]))
            elif name == "delete_tx":
                journal.delete_tx(args[0], args[1])
            elif name == "prepare":
                journal.prepare(args[0], body_of(args[1]))
            elif name == "commit":
                journal.commit(args[0])
            elif name == "rollback":
                journal.rollback(args[0])
            elif name == "group":    # ["group", [kind name, record id, type, body], ...]
                journal.append_group([(_GROUP_KINDS[kind], record_id, user_type, body_of(body))
                                      for kind, record_id, user_type, body in args])
            elif name == "sync":
                journal.sync()
            elif name == "reopen":
                journal.close()
                journal = Journal(directory, **options)
                loads.append(summarize(journal.load()))
            else:
                raise ValueError(f"unknown op {name!r}")
    finally:
        journal.close()
    return loads


def data_files(directory: str) -> dict[str, bytes]:
    """Every data file (.jej) that holds a frame, by name.

    Empty files the background pool activated ahead of the writer are left out:
    whether one exists at close depends on thread timing, not on the ops.
    """
    out = {}
    for name in sorted(os.listdir(directory)):
        if name.startswith("journal-") and name.endswith(".jej"):
            with open(os.path.join(directory, name), "rb") as handle:
                raw = handle.read()
            if any(raw[LIMITS_HEADER_BYTES:]):
                out[name] = raw
    return out


def model_of(ops: list, loads_at_reopen: bool = True) -> dict:
    """What a journal must load after `ops`, computed without the engine (the summary format).

    Transactions neither committed, rolled back nor prepared at a reopen are rolled back by it.
    """
    live: dict[int, dict] = {}
    pending: dict[int, dict] = {}

    def reopen() -> list[int]:
        dropped = sorted(tx for tx, state in pending.items() if state["xid"] is None)
        for tx in dropped:
            del pending[tx]
        return dropped

    for op in ops:
        name, args = op[0], op[1:]
        if name == "add":
            live[args[0]] = {"type": args[1], "body": body_of(args[2]).hex(), "updates": []}
        elif name == "update":
            live[args[0]]["updates"].append([args[1], body_of(args[2]).hex()])
        elif name == "delete":
            del live[args[0]]
        elif name == "group":
            for kind, record_id, user_type, body in args:
                if kind == "add":
                    live[record_id] = {"type": user_type, "body": body_of(body).hex(), "updates": []}
                elif kind == "update":
                    live[record_id]["updates"].append([user_type, body_of(body).hex()])
                else:
                    del live[record_id]
        elif name in ("add_tx", "update_tx", "delete_tx"):
            tx = pending.setdefault(args[0], {"ops": [], "xid": None})
            if name == "delete_tx":
                tx["ops"].append(["delete", args[1], 0, ""])
            else:
                tx["ops"].append([name[:-3], args[1], args[2], body_of(args[3]).hex()])
        elif name == "prepare":
            pending[args[0]]["xid"] = body_of(args[1]).hex()
        elif name == "commit":
            for kind, record_id, user_type, body in pending.pop(args[0])["ops"]:
                if kind == "add":
                    live[record_id] = {"type": user_type, "body": body, "updates": []}
                elif kind == "update":
                    if record_id in live:
                        live[record_id]["updates"].append([user_type, body])
                else:
                    live.pop(record_id, None)
        elif name == "rollback":
            del pending[args[0]]
        elif name == "reopen" and loads_at_reopen:
            reopen()
    rolled_back = reopen()
    return {
        "records": {str(k): live[k] for k in sorted(live)},
        "prepared": [{"tx": tx, "xid": pending[tx]["xid"], "records": pending[tx]["ops"]} for tx in sorted(pending)],
        "rolled_back": rolled_back,
        "corrupt": 0,
        "torn_tail_truncated": False,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    directory, ops_path = argv
    with open(ops_path) as handle:
        spec = json.load(handle)
    import journal_engine

    loads = apply_ops(directory, spec["options"], spec["ops"])
    json.dump({"implementation": journal_engine.IMPLEMENTATION, "loads": loads}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
