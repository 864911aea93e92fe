"""Damage a command met while reading: one judgement, verify's, for every command that reads a journal.

``verify`` lists it; ``stats``, ``export``, ``dlq list`` and ``analyze`` report it on stderr, one line each,
and exit 1 (docs/cli.md), because a tool that reads past a damaged record and exits 0 hides a lost
message (an export kept as a backup would lack it); ``compact`` refuses to rewrite it away.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Sequence

from ..errors import CorruptRecordError
from ..storage.protocol import LoadReport
from .console import EXIT_DAMAGE, EXIT_OK, fail_line

__all__ = ["Damage", "TORN_TAIL_PROBLEM", "damage_in", "damage_status", "report_damage"]

TORN_TAIL_PROBLEM = "torn tail: a write the crash cut short (recovery erases it)"


@dataclass(frozen=True)
class Damage:
    """One damaged place: the record store's name, the file, the offset (None when unknown) and why."""

    journal: str
    path: str
    offset: int | None
    problem: str

    @classmethod
    def of_error(cls, journal: str, error: CorruptRecordError, path: str) -> "Damage":
        """A store that could not be read at all (``path``: where, when the error names no file)."""
        return cls(journal, error.path or path, error.offset, str(error))

    def as_dict(self) -> dict:
        """What ``--json`` shows (verify's ``problems``, stats' ``damage``)."""
        return {"journal": self.journal, "path": self.path, "offset": self.offset, "problem": self.problem}

    def line(self) -> str:
        where = self.path if self.offset is None else f"{self.path} offset {self.offset}"
        return f"{where}: {self.problem}"


def damage_in(journal: str, report: LoadReport) -> list[Damage]:
    """The damage a load or an analysis reported: frames that failed their check, and a torn tail."""
    found = [Damage(journal, path, offset, reason) for path, offset, reason in report.corrupt]
    if report.torn_tail:
        path, offset = report.torn_tail
        found.append(Damage(journal, path, offset, TORN_TAIL_PROBLEM))
    return found


def report_damage(damage: Sequence[Damage]) -> None:
    """One line on stderr per damaged place (stdout stays the command's output: a table, JSON, an export)."""
    for place in damage:
        print(f"journal-engine: damage: {place.line()}", file=sys.stderr)


def damage_status(directory: str, damage: Sequence[Damage], consequence: str, hint: str, *,
                  allowed: bool = False) -> int:
    """Report ``damage`` and give the exit status of a command that read past it: 1, with a last line
    saying what the damage means for the command's output (``consequence``) and what to do; 0 when
    there is none, or when the user ``allowed`` it knowingly (the damage lines are printed anyway)."""
    report_damage(damage)
    if not damage or allowed:
        return EXIT_OK
    fail_line(f"{directory}: {len(damage)} damaged place{'s' if len(damage) > 1 else ''}: {consequence} "
              f"(hint: {hint})")
    return EXIT_DAMAGE
