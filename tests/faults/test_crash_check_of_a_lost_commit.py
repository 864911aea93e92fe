"""The crash checker's record-group evidence when a kill loses the COMMIT of a prepared transaction.

A group's delete of a record counts as evidence (the record is absent) only when the record's add was
durable. A record added by a transaction is live only once the transaction commits, so its add is
durable when the COMMIT is, not when its ADD_TX or PREPARE is. The checker took the ADD_TX's call for
it: the CI campaign (twin, mode "none", workload seed 736002024) reported "the record group of call
101 was recovered in part: records [21] hold it, records [43, 44] do not" after a kill that lost calls
98 onwards -- call 98 commits the prepared transaction 52 that added record 21 (its PREPARE, call 55,
was durable), call 101 is a group deleting record 21 and adding 43 and 44. Record 21 was absent
because its commit was lost, not because half of the group was kept: a false report."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from journal_engine import Journal
from journal_engine.crashtest.bodies import make_body, xid_of
from journal_engine.crashtest.checker import recover_and_check
from journal_engine.crashtest.journal_workload import FILE_SIZE
from journal_engine.crashtest.model import Model, durable_ids

# The crash harness's journal workload, killed by SIGKILL right after its `steps`-th call returned: a
# kill at an exact point of the calls. Automatic compaction is off so that no background thread writes
# the buffer out at a moment of its own; the workload's explicit compactions still run.
KILLED_AFTER_STEPS = """
import os, random, signal, sys
from journal_engine import Journal
from journal_engine.crashtest.journal_workload import FILE_SIZE, start_workload
directory, mode, seed, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
journal = Journal(directory, file_size=FILE_SIZE, sync=mode, compact_min_files=0)
work = start_workload(journal, journal.load(), random.Random(seed), mode, 1, 1)
for _ in range(steps):
    work.step()
os.kill(os.getpid(), signal.SIGKILL)
"""
CI_SEED = 736002024
CI_STEPS = 66           # the 66th step is call 102: after the group (101), before record 44's delete (109)


def test_a_kill_losing_a_prepared_transactions_commit_is_no_split_of_the_group_deleting_its_record(tmp_path):
    directory = str(tmp_path / "journal")
    child = subprocess.run([sys.executable, "-c", KILLED_AFTER_STEPS, directory, "none", str(CI_SEED),
                            str(CI_STEPS)], capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    lines = child.stdout.splitlines()
    calls = {int(line.split()[1]): line.split()[2:] for line in lines if line.startswith("O ")}
    # the CI run's calls: what makes this kill the case (the workload changing would show here)
    assert calls[55] == ["prp", "52", "None"] and calls[98] == ["cmt", "52", "None"]
    assert calls[54][:3] == ["atx", "52", "21"]
    assert calls[101] == ["grp", "None", "del:21:0:0", "add:43:2:147", "add:44:4:51"]
    assert max(int(line.split()[1]) for line in lines if line.startswith("A ")) == 97
    check = recover_and_check(directory, Model(), lines, "CI seed", file_size=FILE_SIZE)
    assert check.violations == []
    assert check.lost_unacknowledged == 5          # calls 98..102 were in the buffer: record 21 is prepared
    assert 21 not in check.model.records and 52 in check.model.pending


# a transaction adds record 1 and is prepared (acknowledged), then committed (nobody waits), then a
# group deletes record 1 and adds record 2 (nobody waits)
ORACLE = ["R", "O 1 atx 1 1 1 10", "O 2 prp 1 True", "A 2", "O 3 cmt 1 None",
          "O 4 grp None del:1:0:0 add:2:2:20"]


def _prepared(directory, *, committed: bool, deleted: bool) -> None:
    """The journal a kill leaves: the prepared transaction, its commit if it was written out, and a
    delete of record 1 alone (a group split after its first record) if `deleted`."""
    with Journal(directory, file_size=FILE_SIZE) as journal:
        journal.load()
        journal.add_tx(1, 1, 1, make_body(1, 1, 10))
        journal.prepare(1, xid_of(1), sync=True)
        if committed:
            journal.commit(1)
        if deleted:
            journal.delete(1)
        journal.sync()


def test_a_lost_commit_and_a_lost_group_are_no_split(tmp_path):
    _prepared(tmp_path / "j", committed=False, deleted=False)
    check = recover_and_check(str(tmp_path / "j"), Model(), ORACLE, "hand-made", file_size=FILE_SIZE)
    assert check.violations == []
    ops = [line.split()[1:] for line in ORACLE if line.startswith("O ")]
    assert durable_ids(Model(), ops, 2) == set()               # the commit is not acknowledged
    assert durable_ids(Model(), ops, 3) == {1}


@pytest.mark.parametrize("prepared_before_the_run", [False, True], ids=["prepared-in-the-run", "prepared-before-it"])
def test_a_groups_delete_kept_alone_after_an_acknowledged_commit_is_still_a_split(tmp_path, prepared_before_the_run):
    """The evidence is kept where it holds: an acknowledged commit made record 1 durable, so record 1
    absent with record 2 missing is half a group -- also when the transaction was prepared before the
    run (recovered prepared: in the model, not in the run's calls)."""
    _prepared(tmp_path / "j", committed=True, deleted=True)
    model, oracle = Model(), ORACLE[:5] + ["A 3"] + ORACLE[5:]
    if prepared_before_the_run:
        model = Model({}, {1: [xid_of(1), [("add", 1, 1, make_body(1, 1, 10))]]})
        oracle = ["R", "O 3 cmt 1 None", "A 3", "O 4 grp None del:1:0:0 add:2:2:20"]
    check = recover_and_check(str(tmp_path / "j"), model, oracle, "hand-made", file_size=FILE_SIZE)
    assert any("record group of call 4 was recovered in part: records [1] hold it, records [2] do not" in v
               for v in check.violations), check.violations
