"""SyncMode (storage/sync_mode.py): the one answer to "does this call wait for the disk?"."""
from __future__ import annotations

import pickle

import pytest

from journal_engine import ConfigError, Journal
from journal_engine.storage.sync_mode import SyncMode

pytestmark = pytest.mark.same_on_both   # Python on either core; the cores' use of it: test_sync_modes.py


@pytest.mark.parametrize("mode, records_wait, boundaries_wait", [
    ("always", True, True), ("group", False, True), ("none", False, False)])
def test_sync_none_takes_the_modes_answer_and_true_or_false_override_it(mode, records_wait, boundaries_wait):
    rule = SyncMode.named(mode)
    assert rule == mode and str(rule) == mode and rule is SyncMode.named(mode)
    assert rule.record_waits(None) is records_wait and rule.boundary_waits(None) is boundaries_wait
    assert rule.record_waits(True) and rule.boundary_waits(True)
    assert not rule.record_waits(False) and not rule.boundary_waits(False)
    assert pickle.loads(pickle.dumps(rule)).record_waits(None) is records_wait


@pytest.mark.parametrize("bad", ["sometimes", "", None, 1])
def test_any_other_mode_is_a_config_error_naming_sync(bad):
    with pytest.raises(ConfigError, match="sync"):
        SyncMode.named(bad)


def test_a_store_s_sync_mode_is_its_rule_and_still_its_name(tmp_path):
    with Journal(tmp_path, sync="none") as journal:
        assert journal.sync_mode == "none" and isinstance(journal.sync_mode, SyncMode)
        assert not journal.sync_mode.boundary_waits(None)
