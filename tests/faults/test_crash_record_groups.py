"""The crash harness's record-group invariant (journal_engine.crashtest): the journal workload appends
record groups (append_group) and announces each as one call; after a crash the checker fails when a
part of a group is recovered without the rest -- after a killed process and after a power cut alike.
Here on hand-made journals: half a group is caught (a group's delete alone too, when the deleted
record's add was durable before the group), a whole group and a lost one are not."""
from __future__ import annotations

import pytest

from journal_engine import Journal
from journal_engine.crashtest.bodies import make_body
from journal_engine.crashtest.checker import recover_and_check
from journal_engine.crashtest.journal_workload import FILE_SIZE
from journal_engine.crashtest import power_loss
from journal_engine.crashtest.model import Model, durable_ids, model_view, split_groups
from journal_engine.record_format import RecordKind

# the oracle of a run: two records acknowledged, then a group (an add, an update, a delete) nobody waited for
ORACLE = ["R", "O 1 add 1 1 10 True", "A 1", "O 2 add 2 1 10 True", "A 2",
          "O 3 grp None add:3:2:20 upd:1:3:30 del:2:0:0"]
GROUP = [(RecordKind.ADD, 3, 2, make_body(3, 3, 20)), (RecordKind.UPDATE, 1, 3, make_body(1, 3, 30)),
         (RecordKind.DELETE, 2, 0, b"")]


def _journal(directory, group) -> None:
    """The acknowledged records, then ``group`` appended record by record as a crash could leave it."""
    with Journal(directory, file_size=FILE_SIZE) as journal:
        journal.load()
        journal.add(1, 1, make_body(1, 1, 10), sync=True)
        journal.add(2, 1, make_body(2, 2, 10), sync=True)
        for kind, record_id, record_type, body in group:
            if kind == RecordKind.ADD:
                journal.add(record_id, record_type, body)
            elif kind == RecordKind.UPDATE:
                journal.update(record_id, record_type, body)
            else:
                journal.delete(record_id)
        journal.sync()


@pytest.mark.parametrize("part", [GROUP[:1], GROUP[:2], GROUP[1:], GROUP[2:]],
                         ids=["add", "add+update", "update+delete", "delete"])
def test_the_checker_catches_a_record_group_recovered_in_part(tmp_path, part):
    _journal(tmp_path / "j", part)
    check = recover_and_check(str(tmp_path / "j"), Model(), ORACLE, "hand-made", file_size=FILE_SIZE)
    split = [violation for violation in check.violations if "record group of call 3 was recovered in part" in violation]
    assert split, check.violations


@pytest.mark.parametrize("part", [GROUP, []], ids=["whole", "none"])
def test_a_whole_group_or_none_of_it_is_no_violation(tmp_path, part):
    _journal(tmp_path / "j", part)
    check = recover_and_check(str(tmp_path / "j"), Model(), ORACLE, "hand-made", file_size=FILE_SIZE)
    assert check.violations == []
    assert check.next_id == 4                        # the group's new record counts among the ids used


def test_the_model_applies_a_group_whole():
    ops = [line.split()[1:] for line in ORACLE if line.startswith("O ")]
    model = Model()
    for op in ops:
        model.apply(op)
    records = model_view(model)[0]
    assert records == {1: (1, make_body(1, 1, 10), [(3, make_body(1, 3, 30))]), 3: (2, make_body(3, 3, 20), [])}


def test_a_groups_delete_counts_as_evidence_only_for_a_record_whose_add_was_durable():
    ops = [line.split()[1:] for line in ORACLE if line.startswith("O ")]
    assert durable_ids(Model(), ops, 2) == {1, 2} and durable_ids(Model(), ops, 1) == {1}
    delete_alone = {1: (1, make_body(1, 1, 10), [])}           # record 2 gone, nothing else of the group
    assert split_groups(ops, delete_alone, {1, 2})
    assert split_groups(ops, delete_alone, {1}) == []           # record 2's add may have been lost itself


def _power_cut_check(directory) -> power_loss.ReplayResult:
    """The power-loss replay's check of one crash state (``directory``) against ORACLE's calls, with
    records 1 and 2 acknowledged and the group begun: read-only and writing loads, as the replay makes."""
    ops = [line.split()[1:] for line in ORACLE if line.startswith("O ")]
    allowed = power_loss._Views().between(ops, 2)
    result = power_loss.ReplayResult()
    recover = power_loss._Recovery("journal")
    power_loss._check_state(str(directory), allowed, "hand-made", result, recover, read_only=True, full=False)
    power_loss._check_state(str(directory), allowed, "hand-made", result, recover, read_only=False, full=True)
    return result


@pytest.mark.parametrize("part", [GROUP[:1], GROUP[:2], GROUP[2:]], ids=["add", "add+update", "delete"])
def test_power_loss_replay_reports_a_group_recovered_in_part(tmp_path, part):
    """A crash state holding part of the group (as a power cut tearing the group's write left it on
    the format before group frames) is no state the calls allow, and it is named as a split group.
    The replay once took a group's records as separate calls and let such a state pass."""
    _journal(tmp_path / "j", part)
    result = _power_cut_check(tmp_path / "j")
    assert any("record group of call 3 was recovered in part" in v for v in result.violations), result.violations


@pytest.mark.parametrize("part", [GROUP, []], ids=["whole", "none"])
def test_power_loss_replay_takes_a_group_whole_or_lost(tmp_path, part):
    _journal(tmp_path / "j", part)
    assert _power_cut_check(tmp_path / "j").violations == []


def test_a_lost_group_whose_deleted_record_was_lost_too_is_no_violation(tmp_path):
    """Nobody waited for record 2's add nor for the group: both lost, record 2 absent as the group
    would leave it, yet the group is not in part."""
    oracle = ["R", "O 1 add 1 1 10 True", "A 1", "O 2 add 2 1 10 None", "O 3 grp None add:3:2:20 del:2:0:0"]
    with Journal(tmp_path / "j", file_size=FILE_SIZE) as journal:
        journal.load()
        journal.add(1, 1, make_body(1, 1, 10), sync=True)
    check = recover_and_check(str(tmp_path / "j"), Model(), oracle, "hand-made", file_size=FILE_SIZE)
    assert check.violations == []


def test_a_groups_update_of_a_record_whose_add_a_power_cut_lost_is_no_split():
    """Sectors kept out of order: the group survived, the earlier add of a record it updates (never
    acknowledged) did not, so replay passes the update over. Neither the split check nor the model
    counts that against the group; a durable record's missing update still is."""
    ops = [["1", "add", "1", "1", "10", "True"], ["2", "add", "2", "1", "10", "None"],
           ["3", "grp", "None", "add:3:2:20", "upd:2:3:30", "upd:1:3:30"]]
    records = {1: (1, make_body(1, 1, 10), [(3, make_body(1, 3, 30))]), 3: (2, make_body(3, 3, 20), [])}
    assert split_groups(ops, records, durable_ids(Model(), ops, 1)) == []
    assert split_groups(ops, {1: (1, make_body(1, 1, 10), []), 3: (2, make_body(3, 3, 20), [])},
                        durable_ids(Model(), ops, 1))
    model = Model()
    for op in ops[:1] + ops[2:]:        # the add of record 2 lost
        model.apply(op)
    assert model.records == records
