"""`compact`: the one command that writes to a journal it is given, and only when nobody else holds it.

It opens the journal (or the message store) as its writer would, so the directory lock refuses it
while another process has the journal open (the refusal names that process's id: exit status 4).
Holding the lock, and before the load that recovery makes, it judges the directory as ``verify``
does and refuses damage (exit status 1): a compaction rewrites the live records into new files and
deletes the old ones, so damaged records would be gone for good.
"""
from __future__ import annotations

import click

from ..errors import CorruptRecordError
from ..storage.journal.journal import Journal
from ..message_store.message_store import MessageStore
from .console import EXIT_OK, emit_json, stdout
from .damage import Damage, report_damage
from .inspection import verify_part
from .target import Target, locate

__all__ = ["COMMANDS", "CompactionRefusedError"]


class CompactionRefusedError(CorruptRecordError):
    """``compact`` met damage (exit status 1; each damaged place is on stderr before it)."""

    def __init__(self, directory: str, count: int) -> None:
        super().__init__(f"{directory}: {count} damaged place{'s' if count > 1 else ''}: compact refuses to "
                         f"rewrite a damaged store",
                         hint=f"`journal-engine verify {directory}` lists the damage; copy the directory aside "
                              f"first, or export --allow-damage and import the export into a new directory")


def _refuse_damage(target: Target) -> None:
    """CompactionRefusedError when verify would find damage (an LMDB file that is no LMDB store included)."""
    problems: list = []
    for part in target.parts:
        verify_part(part, problems, [])
    if problems:
        report_damage([Damage(**problem) for problem in problems])
        raise CompactionRefusedError(target.path, len(problems))


def _summary(stats: dict) -> dict:
    return {key: stats.get(key) for key in ("data_files", "live_records", "live_bytes")}


@click.command("compact")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="before and after as one JSON document")
def compact_command(directory: str, as_json: bool) -> int:
    """Compact the journal(s) of DIRECTORY now (refused while another process holds them, exit status 4,
    and when they are damaged, exit status 1)."""
    target = locate(directory)          # never creates a mistyped directory
    if not target.backend.compacts:
        _refuse_damage(target)
        message = target.backend.compaction_note
        if as_json:
            emit_json({"directory": target.path, "compacted": False, "reason": message})
        else:
            stdout().print(message)
        return EXIT_OK
    results = {}
    if target.store:
        with MessageStore(target.path) as store:
            _refuse_damage(target)      # the lock is held: no writer changes the files under the judgement
            store.load()
            before = store.stats()
            store.compact()
            after = store.stats()
        results["messages"] = (_summary(before["messages_journal"]), _summary(after["messages_journal"]))
    else:
        with Journal(target.path) as journal:
            _refuse_damage(target)
            journal.load()
            before = journal.stats()
            journal.compact()
            after = journal.stats()
        results["journal"] = (_summary(before), _summary(after))
    if as_json:
        emit_json({"directory": target.path, "compacted": True,
                   "journals": {name: {"before": b, "after": a} for name, (b, a) in results.items()}})
        return EXIT_OK
    console = stdout()
    for name, (b, a) in results.items():
        console.print(f"{name}: compacted {b['data_files']} data files ({b['live_bytes']} live bytes, "
                      f"{b['live_records']} live records) -> {a['data_files']} data files, including the new "
                      f"active file")
    return EXIT_OK


COMMANDS = [compact_command]
