"""The crash-recovery harness: workloads that stream their oracle, faults, invariants, campaigns.

    from journal_engine.crashtest import Campaign
    report = Campaign("/tmp/scratch", size="quick", seed=7).run()
    assert report.violations == []

The command line is ``journal-engine crash-test`` (``--ci``, ``--long``, ``--seed N``, ``--json FILE``).
See docs/crash-testing.md for what each fault mode does and which invariants are checked.
"""
from .campaign import SIZES, Campaign, Report
from .checker import Check, recover_and_check
from .model import Model

__all__ = ["Campaign", "Report", "SIZES", "Check", "recover_and_check", "Model"]
