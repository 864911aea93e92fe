"""The skips CI accepts, each with the part of CI it may happen in and why; every other skip fails a CI run.

A skip is allowed when its test id matches `test` (fnmatch), the run is the `part` named ("compiled": the
suite on the compiled core, "twin": JOURNAL_ENGINE_IMPLEMENTATION=python, "any": both) and pytest's skip
message contains `says` (so that a test allowed to skip for one reason still fails CI when it skips for
another). tests/conftest.py registers `SkipGate` (and `-p skips_allowed` does, for bench/ in .ci/run), which
is on when the environment variable CI is true (.ci/run sets it): the session then exits non-zero listing
each skip that matched no entry.
"""
from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass

import pytest

import journal_engine

PARTS = ("compiled", "twin", "any")


@dataclass(frozen=True)
class AllowedSkip:
    test: str     # an fnmatch pattern of test ids (tests/core/test_x.py::test_name[param])
    part: str     # one of PARTS
    says: str     # a part of the skip message that must appear in it
    reason: str   # why CI loses nothing by this skip

    def __post_init__(self) -> None:
        if self.part not in PARTS:
            raise ValueError(f"AllowedSkip {self.test!r}: part {self.part!r} is not one of {PARTS}")
        if not self.says.strip() or not self.reason.strip():
            raise ValueError(f"AllowedSkip {self.test!r}: an allowed skip names its message and its reason")

    def allows(self, test_id: str, part: str, message: str) -> bool:
        return (self.part in ("any", part) and fnmatch.fnmatchcase(test_id, self.test)
                and self.says in message)


ALLOWED: tuple[AllowedSkip, ...] = (
    AllowedSkip("tests/faults/test_fuzz.py::test_the_decoder_survives_a_bounded_fuzz_run", "twin",
                "the fuzz run is for the compiled decoder",
                "the fuzz target is the compiled decoder's pointer arithmetic; the main suite runs it"),
    AllowedSkip("tests/faults/test_fuzz.py::test_the_checkpoint_reader_survives_a_bounded_fuzz_run", "twin",
                "the fuzz run is for the compiled checks",
                "the fuzz target is the compiled checks' pointer arithmetic; the main suite runs it"),
    AllowedSkip("tests/store/test_delivery_shadow.py::*", "twin", "needs the compiled writer",
                "the compiled writer's cases; the twin's own cases run beside them, the main suite runs these"),
    AllowedSkip("tests/faults/test_file_cut_under_a_reader.py::test_a_mapping_cut_by_another_process_mid_scan_*", "twin",
                "the SIGBUS guard is the compiled decoder's",
                "the twin maps no file (the next test covers it); the main suite runs the compiled guard"),
    AllowedSkip("tests/faults/test_file_cut_under_a_reader.py::test_a_body_view_of_a_file_cut_and_grown_again_*",
                "twin", "the twin's bodies are bytes read before the cut",
                "the twin's loads return owned bytes, never views: there is no view to notice the cut; the main "
                "suite runs the compiled views"),
    AllowedSkip("tests/store/test_message_store_parity.py::*", "twin", "needs the compiled writers",
                "parity of the compiled writers with the twin: the main suite runs it"),
    AllowedSkip("tests/broker/test_message_objects_parity.py::test_compiled_*", "twin", "needs the compiled core",
                "the compiled per-message objects against their twin: the main suite runs it"),
    AllowedSkip("tests/faults/test_inspection_beside_a_recycling_writer.py::*", "twin",
                "needs the compiled core (the twin's loads always copy)",
                "the twin's loads return owned bytes, never views: nothing a recycled file could change; "
                "the main suite runs the compiled views"),
    AllowedSkip("tests/integrations/test_kombu_suite.py::test_kombu_integration_suite[[]BasePriority.test_publish_*[]]",
                "any", "one drain_events() is expected to hand over every waiting message",
                "the transport hands over one MESSAGE a drain_events() call (docs/integrations.md, kombu's suite); "
                "the priority order itself passes in BasePriority's simple-queue and simple-buffer cases"),
)


def gate_is_on() -> bool:
    """CI is true on every CI service and in .ci/run; a developer's run lists skips and passes."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _message(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:   # (path, line, "Skipped: message")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


class SkipGate:
    """Collects every skip of the session (at collection and at each phase of a test), lists each with its
    message at the end, and on CI turns the exit status into a failure when one matched no allowed entry."""

    def __init__(self, part: str, allowed: tuple[AllowedSkip, ...] = ALLOWED, enforce: bool | None = None) -> None:
        self.part = part
        self.allowed = allowed
        self.enforce = gate_is_on() if enforce is None else enforce
        self.skips: list[tuple[str, str, AllowedSkip | None]] = []

    def _record(self, report: pytest.CollectReport | pytest.TestReport) -> None:
        if not report.skipped or hasattr(report, "wasxfail"):   # an xfail is a failure expected, not a skip
            return
        message = _message(report)
        match = next((entry for entry in self.allowed if entry.allows(report.nodeid, self.part, message)), None)
        self.skips.append((report.nodeid, message, match))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._record(report)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._record(report)

    def refused(self) -> list[tuple[str, str]]:
        return [(test_id, message) for test_id, message, match in self.skips if match is None]

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.enforce and self.refused() and session.exitstatus in (pytest.ExitCode.OK,
                                                                      pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.skips:
            return
        refused = self.refused()
        terminalreporter.section(f"skips ({self.part} part): {len(self.skips)}, {len(refused)} not allowed")
        for test_id, message, match in self.skips:
            verdict = f"allowed: {match.reason}" if match else "NOT ALLOWED (tests/helpers/skips_allowed.py)"
            terminalreporter.line(f"SKIP {test_id}: {message} -- {verdict}")
        if refused and self.enforce:
            terminalreporter.line(f"CI fails: {len(refused)} skip(s) not in tests/helpers/skips_allowed.py "
                                  f"for the {self.part} part", red=True, bold=True)


def pytest_configure(config: pytest.Config) -> None:
    """The gate of a session: this part of CI found from the implementation the session runs on."""
    part = "compiled" if journal_engine.IMPLEMENTATION == "cython" else "twin"
    config.pluginmanager.register(SkipGate(part), "journal_engine_skip_gate")
