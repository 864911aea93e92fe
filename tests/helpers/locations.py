"""Where the suite's parts lie, for tests in any folder of tests/: the checkout, the helpers that run as
child processes, the golden files."""
from __future__ import annotations

from pathlib import Path

HELPERS = Path(__file__).resolve().parent
TESTS = HELPERS.parent
ROOT = TESTS.parent
GOLDEN = TESTS / "golden"
