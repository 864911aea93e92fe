"""kill -9 of a writing process at random times, then recovery (issue 2, item "kill -9").

tests/crash_worker.py appends a random mix of records and transactions and
prints, after every call whose durability promise RETURNED, the sequence number
it acknowledged. The parent kills it with SIGKILL at a seeded random time,
recovers the directory and checks:
  * every acknowledged call is in the recovered state, byte-exact (bodies and
    updates; an acknowledged delete means the record is absent);
  * nothing that was never written appears (every body names its record and
    call and carries a CRC);
  * transactions are all-or-nothing: committed ones fully applied, prepared ones
    returned whole, the others rolled back;
  * the recovered state is exactly the state after some prefix of the calls the
    worker began, at least as long as the acknowledged ones (a kill may lose
    calls nobody waited for: "none" mode and unsynced appends promise nothing).
Iterations run in chains on one directory (crash, recover, continue, crash
again). JOURNAL_ENGINE_CRASH_ITERATIONS sets the number (default 100).
"""
from __future__ import annotations

import copy
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import pytest

from journal_engine import Journal

import crash_worker
from crash_worker import FILE_SIZE, check_body, make_body, xid_of

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crash_worker.py")
ITERATIONS = int(os.environ.get("JOURNAL_ENGINE_CRASH_ITERATIONS", "100"))
CHAIN_LENGTH = 10          # kills in a row on the same directory
SEED = int(os.environ.get("JOURNAL_ENGINE_CRASH_SEED", "20240611"))
MODES = ("always", "group", "none")


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
            raise AssertionError(f"unknown call in the worker's output: {op}")

    def after_recovery(self) -> "Model":
        """What load() leaves: prepared transactions kept, incomplete ones rolled back."""
        return Model(copy.deepcopy(self.records),
                     {tx: copy.deepcopy(entry) for tx, entry in self.pending.items() if entry[0] is not None})


def recovered_view(result) -> tuple[dict, dict, set]:
    records = {rid: (rec.record_type, rec.body, list(rec.updates)) for rid, rec in result.records.items()}
    prepared = {tx.tx_id: [tx.xid, [(op.kind, op.record_id, op.record_type, op.body) for op in tx.records]]
                for tx in result.prepared}
    return records, prepared, set(result.report.rolled_back)


def model_view(model: Model) -> tuple[dict, dict, set]:
    prepared = {tx: entry for tx, entry in model.pending.items() if entry[0] is not None}
    incomplete = {tx for tx, entry in model.pending.items() if entry[0] is None}
    return model.records, prepared, incomplete


def check_bodies(records: dict, prepared: dict) -> None:
    """Nothing never written appears: every body is one a call wrote for that record."""
    for record_id, (_type, body, updates) in records.items():
        for what, data in [("body", body)] + [(f"update {i}", u[1]) for i, u in enumerate(updates)]:
            try:
                named_id, _seq = check_body(data)
            except ValueError as exc:
                raise AssertionError(f"record {record_id} {what} was never written: {exc}") from None
            assert named_id == record_id, f"record {record_id} {what} belongs to record {named_id}"
    for tx_id, (_xid, ops) in prepared.items():
        for kind, record_id, _type, body in ops:
            if kind != "delete":
                assert check_body(body)[0] == record_id, f"prepared tx {tx_id} holds a foreign body"


class Reader(threading.Thread):
    """Reads the worker's stdout until EOF, so the pipe never fills and no line is lost."""

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


def run_one(directory: str, mode: str, seed: int, first_seq: int, first_id: int, rng: random.Random):
    """Start the worker, SIGKILL it at a random time, return (lines, returncode, stderr)."""
    proc = subprocess.Popen([sys.executable, WORKER, "workload", directory, mode, str(seed), str(first_seq),
                             str(first_id)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reader = Reader(proc.stdout)
    reader.start()
    try:
        if rng.random() < 0.1:
            time.sleep(rng.uniform(0.0, 0.25))      # sometimes during start-up and recovery
        else:
            reader.ready.wait(10)
            time.sleep(rng.uniform(0.0, 0.08))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    stderr = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    return reader.lines, proc.returncode, stderr


def verify(directory: str, model: Model, lines: list[str], context: str) -> tuple[Model, int, int, int]:
    """Recover the directory and check it against the calls in `lines`; returns the recovered model,
    the next free sequence number and record id, and how many unacknowledged calls were lost."""
    warnings = [line for line in lines if line.startswith("W ")]
    assert not warnings, f"{context}: {warnings}"
    ops = [line.split()[1:] for line in lines if line.startswith("O ")]
    acked = max([int(line.split()[1]) for line in lines if line.startswith("A ")], default=0)
    acked_count = sum(1 for op in ops if int(op[0]) <= acked)   # calls covered by the last acknowledgement

    with Journal(directory, file_size=FILE_SIZE, compact_min_files=0) as journal:
        result = journal.load()
        report = result.report
        assert not report.corrupt, f"{context}: a process kill left damage: {report.corrupt}"
        assert not report.anomalies, f"{context}: {report.anomalies}"
        recovered = recovered_view(result)
    leftovers = [n for n in os.listdir(directory) if n.endswith((".tmp", ".jec")) or n == "compaction.ctl"]
    assert not leftovers, f"{context}: recovery (and a clean close) left {leftovers}"
    check_bodies(recovered[0], recovered[1])

    # the state after every prefix of the calls, from the last acknowledged one on
    states = Model(copy.deepcopy(model.records), copy.deepcopy(model.pending))
    for op in ops[:acked_count]:
        states.apply(op)
    matched = None
    for n in range(acked_count, len(ops) + 1):
        if n > acked_count:
            states.apply(ops[n - 1])
        if model_view(states) == recovered:
            matched = n
    if matched is None:
        expected_records = model_view(states)[0] if not ops else None
        missing = _missing_acknowledged(model, ops[:acked_count], recovered[0])
        raise AssertionError(
            f"{context}: the recovered state is no prefix of the calls from the last acknowledged one "
            f"(seq {acked}, {acked_count} of {len(ops)} calls); acknowledged records missing or different: "
            f"{missing[:5]}; recovered {len(recovered[0])} records, {len(recovered[1])} prepared, "
            f"rolled back {sorted(recovered[2])}" + (f"; expected {len(expected_records)}" if expected_records
                                                     is not None else ""))
    final = Model(copy.deepcopy(model.records), copy.deepcopy(model.pending))
    for op in ops[:matched]:
        final.apply(op)
    next_seq = max([int(op[0]) for op in ops], default=0) + 1
    next_id = 1 + max([int(op[2]) for op in ops if op[1] in ("add",)]
                      + [int(op[3]) for op in ops if op[1] == "atx"], default=0)
    return final.after_recovery(), next_seq, next_id, len(ops) - matched


def _missing_acknowledged(model: Model, acked_ops: list, recovered_records: dict) -> list:
    state = Model(copy.deepcopy(model.records), copy.deepcopy(model.pending))
    for op in acked_ops:
        state.apply(op)
    return [(rid, "missing" if rid not in recovered_records else "different")
            for rid, rec in state.records.items() if recovered_records.get(rid) != rec]


def test_kill9_at_random_times_recovers_every_acknowledged_record(tmp_path):
    rng = random.Random(SEED)
    chains = max(1, (ITERATIONS + CHAIN_LENGTH - 1) // CHAIN_LENGTH)
    done = 0
    kills = {mode: 0 for mode in MODES}
    calls_total = acks_total = lost_total = 0
    started = time.monotonic()
    for chain in range(chains):
        directory = str(tmp_path / f"chain-{chain}")
        model = Model()
        next_seq, next_id = 1, 1
        for step in range(min(CHAIN_LENGTH, ITERATIONS - done)):
            mode = rng.choice(MODES)
            seed = rng.randrange(1 << 30)
            context = (f"chain {chain} kill {step} (mode {mode}, worker seed {seed}, "
                       f"JOURNAL_ENGINE_CRASH_SEED={SEED})")
            lines, returncode, stderr = run_one(directory, mode, seed, next_seq, next_id, rng)
            assert returncode in (-signal.SIGKILL, 0), f"{context}: worker failed ({returncode}):\n{stderr}"
            if returncode == -signal.SIGKILL:
                kills[mode] += 1
            calls_total += sum(1 for line in lines if line.startswith("O "))
            acks_total += sum(1 for line in lines if line.startswith("A "))
            model, seq_after, id_after, lost = verify(directory, model, lines, context)
            lost_total += lost
            next_seq, next_id = max(next_seq, seq_after), max(next_id, id_after)
            done += 1
    elapsed = time.monotonic() - started
    print(f"\n{done} kills ({kills}), {calls_total} calls, {acks_total} acknowledged, "
          f"{lost_total} unacknowledged calls lost, {elapsed:.1f} s")
    assert done == ITERATIONS
    assert acks_total > 0, "no call was ever acknowledged: the workload never reached a sync"
    assert sum(kills.values()) >= done * 0.9, f"too few iterations ended in a kill: {kills}"


def test_model_matches_the_worker_bodies():
    """The parent rebuilds exactly the bytes the worker writes (else every comparison is moot)."""
    body = make_body(7, 42, 100)
    assert check_body(body) == (7, 42)
    damaged = bytearray(body)
    damaged[30] ^= 1
    with pytest.raises(ValueError):
        check_body(bytes(damaged))
    model = Model()
    model.apply(["1", "add", "7", "3", "100", "None"])
    model.apply(["2", "atx", "9", "8", "1", "5"])
    model.apply(["3", "prp", "9", "None"])
    model.apply(["4", "atx", "10", "11", "1", "5"])
    records, prepared, incomplete = model_view(model)
    assert records == {7: (3, make_body(7, 1, 100), [])}
    assert prepared == {9: [xid_of(9), [("add", 8, 1, make_body(8, 2, 5))]]}
    assert incomplete == {10}
    assert crash_worker.FILE_SIZE == 256 * 1024
