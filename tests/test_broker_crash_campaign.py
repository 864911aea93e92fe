"""The crash harness's broker-level workload (journal_engine.crashtest.broker_workload): SIGKILL chains
of sends, deliveries, rollbacks with redelivery delays, acknowledgements and dead letters, strict mode
on and off, find no violation; and the check catches a broker whose strict mode does not persist the
delivery count before delivering."""
from __future__ import annotations

from journal_engine.crashtest import Campaign, broker_workload
from journal_engine.crashtest.children import run_child as _run_child


def test_broker_kill_chains_keep_every_invariant(tmp_path):
    campaign = Campaign(tmp_path / "scratch", size="smoke", seed=8)
    campaign.plan = dict(campaign.plan, broker_kills=10)
    campaign.scratch.mkdir(parents=True)
    campaign.broker_kills()
    assert campaign.report.violations == []
    found = campaign.report.broker
    assert found["kills"] == 10 and found["strict_kills"] == 5
    assert min(found["sends"], found["deliveries"], found["rollbacks"], found["acks"]) > 0


def test_the_check_catches_deliveries_whose_count_was_not_persisted_first(tmp_path):
    """A run with strict mode off, checked as if it were on: a message delivered before the kill comes
    back with a lower count (what a strict mode that forgot its write would do)."""
    caught = []
    for seed in range(6):
        directory = str(tmp_path / f"broker-{seed}")
        lines, returncode, _ = _run_child(["journal_engine.crashtest.broker_workload", directory, "group", "default",
                                           str(seed), "1000000"], kill_after=0.1)
        assert returncode == -9
        recovered = broker_workload.recovered_state(directory, "group", 1_000_000)
        caught += [v for v in broker_workload.check_broker({"queue": {}, "dead": {}}, lines, recovered, strict=True,
                                                           context=f"seed {seed}") if "strict mode" in v]
        if caught:
            break
    assert caught, "the check did not notice a delivery whose count was not persisted"
