"""The crash harness's ``takeover`` mode (journal_engine.crashtest.takeover): a live serve-stomp SIGKILLed
under STOMP load while its --backup waits; its check catches what it exists for, on what clients saw.
The smoke campaigns of tests/tools/test_crash_campaign.py run the mode itself, on the journal and on LMDB."""
from __future__ import annotations

import pytest

from journal_engine.crashtest.takeover import violations


@pytest.mark.same_on_both       # the check alone, over made-up observations
def test_the_check_catches_a_lost_receipted_message_an_id_routed_twice_and_a_stranger():
    sent = {"p0-1", "p0-2", "p1-1"}
    assert violations({"p0-1", "p1-1"}, sent, [("p0-1", False), ("p1-1", False), ("p0-1", True)], "ok") == []
    lost, twice, foreign = (violations({"p0-1", "p1-1"}, sent, [("p0-1", False)], "x"),
                            violations({"p0-1"}, sent, [("p0-1", False), ("p0-1", False)], "x"),
                            violations(set(), sent, [("p9-1", False)], "x"))
    assert len(lost) == 1 and "never delivered" in lost[0] and "p1-1" in lost[0]
    assert len(twice) == 1 and "routed twice" in twice[0] and "p0-1" in twice[0]
    assert len(foreign) == 1 and "never sent" in foreign[0]
