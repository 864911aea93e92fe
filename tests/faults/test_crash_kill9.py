"""kill -9 of a writing process at random times, then recovery, through the crash harness's own
workload and checker (journal_engine.crashtest).

The workload appends a random mix of records and transactions and
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

import os
import random
import signal
import time

import pytest


from journal_engine.crashtest.bodies import check_body, make_body, xid_of
from journal_engine.crashtest.campaign import _run_workload
from journal_engine.crashtest.checker import recover_and_check
from journal_engine.crashtest.journal_workload import FILE_SIZE
from journal_engine.crashtest.model import Model, model_view
from locations import HELPERS

WORKER = str(HELPERS / "crash_worker.py")
ITERATIONS = int(os.environ.get("JOURNAL_ENGINE_CRASH_ITERATIONS", "100"))
CHAIN_LENGTH = 10          # kills in a row on the same directory
SEED = int(os.environ.get("JOURNAL_ENGINE_CRASH_SEED", "20240611"))
MODES = ("always", "group", "none")


def run_one(directory: str, mode: str, seed: int, first_seq: int, first_id: int, rng: random.Random):
    """Start the workload, SIGKILL it at a random time, return (lines, returncode, stderr)."""
    kill_after = rng.uniform(0.0, 0.08)
    return _run_workload(directory, mode, seed, first_seq, first_id, kill_after=kill_after)


def verify(directory: str, model: Model, lines: list[str], context: str):
    check = recover_and_check(directory, model, lines, context, file_size=FILE_SIZE)
    assert not check.violations, "\n".join(check.violations)
    return check.model, check.next_seq, check.next_id, check.lost_unacknowledged


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
    assert FILE_SIZE == 256 * 1024
