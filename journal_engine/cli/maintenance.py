"""`compact`: the one command that writes to a journal it is given, and only when nobody else holds it.

It opens the journal (or the message store) as its writer would, so the directory lock refuses it
while another process has the journal open (the refusal names that process's id: exit status 4).
"""
from __future__ import annotations

import click

from ..storage.journal import Journal
from ..store.message_store import MessageStore
from .console import EXIT_OK, emit_json, stdout
from .target import locate

__all__ = ["COMMANDS"]


def _summary(stats: dict) -> dict:
    return {key: stats.get(key) for key in ("data_files", "live_records", "live_bytes")}


@click.command("compact")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="before and after as one JSON document")
def compact_command(directory: str, as_json: bool) -> int:
    """Compact the journal(s) of DIRECTORY now (refused while another process holds them)."""
    target = locate(directory)          # never creates a mistyped directory
    if target.backend == "lmdb":
        message = "LMDB stores need no compaction: LMDB reuses freed pages and overwrites delivery counts in place"
        if as_json:
            emit_json({"directory": target.path, "compacted": False, "reason": message})
        else:
            stdout().print(message)
        return EXIT_OK
    results = {}
    if target.store:
        with MessageStore(target.path) as store:
            store.load()
            before = store.stats()
            store.compact()
            after = store.stats()
        results["messages"] = (_summary(before["messages_journal"]), _summary(after["messages_journal"]))
    else:
        with Journal(target.path) as journal:
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
