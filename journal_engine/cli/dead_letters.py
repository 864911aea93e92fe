"""`dlq list` (read-only) and `dlq redrive` (through the broker, ``Broker.redrive``).

A dead letter is a message whose properties say where it came from: the dialect's ``_AMQ_ORIG_*``
(``_HQ_ORIG_*``) and the ``_JE_DEAD_LETTER_*`` / ``_JE_DELIVERY_HISTORY`` properties the broker
gives every dead-letter copy (broker/dead_letter.py); a redriven message carries ``_JE_REDRIVE_*``
(broker/redrive.py) and is no dead letter again until ``_JE_DEAD_LETTER_COUNT`` passes its
``_JE_REDRIVE_COUNT``. docs/cli.md lists them.
"""
from __future__ import annotations

import click
from rich.table import Table

from ..broker.broker import Broker
from ..broker.dead_letter import (DEAD_LETTER_COUNT, DEAD_LETTER_REASON, DEAD_LETTER_TIME, DELIVERY_HISTORY,
                                  ORIG_DELIVERY_COUNT, decode_history)
from ..broker.dialects import DIALECTS
from ..broker.redrive import REDRIVE_COUNT, REDRIVE_SOURCE, REDRIVE_TIME, dead_letter_origin
from ..errors import UnknownQueueError
from ..limits import REDRIVES_MAX_DEFAULT
from .console import EXIT_OK, emit_json, stdout
from .damage import damage_in, damage_status
from .target import NoJournalError, Target, locate

__all__ = ["COMMANDS", "dead_letters"]


def _store_target(directory: str) -> Target:
    target = locate(directory)
    if not target.store:
        raise NoJournalError(target.path, "not a broker directory (dead letters live in a message store: "
                                          "messages/ and bindings/)")
    return target


def _check_queue(directory: str, name: str, names) -> None:
    """UnknownQueueError (a usage error: exit status 2) naming the queue and the directory's queues."""
    if name not in names:
        raise UnknownQueueError(name, hint=f"the queues of {directory}: {', '.join(sorted(names)) or 'none'}")


def _load(target: Target):
    """The store's state, read-only."""
    with target.open_store() as store:
        return store.load()


def dead_letters(target: Target, address: str | None = None, queue: str | None = None) -> list[dict]:
    """Every dead-lettered message of a broker directory, read-only, in queue then store order."""
    return _rows(_load(target), address, queue)


def _rows(state, address: str | None, queue: str | None) -> list[dict]:
    rows = []
    for queue_id, references in sorted(state.references.items()):
        binding = state.queues[queue_id]
        if queue is not None and binding.name != queue:
            continue
        for reference in references:
            message = state.messages[reference.message_id]
            properties = message.properties
            origin = dead_letter_origin(properties)
            if origin is None:
                continue        # no dead letter, or redriven since it was last dead-lettered: back in service
            orig_address, orig_queue, orig_id = origin
            if address is not None and address not in (binding.address, orig_address):
                continue
            rows.append({
                "queue": binding.name, "address": binding.address, "message_id": message.message_id,
                "original_address": orig_address, "original_queue": orig_queue, "original_message_id": orig_id,
                "delivery_count": properties.get(ORIG_DELIVERY_COUNT),
                "reason": properties.get(DEAD_LETTER_REASON), "dead_lettered_at": properties.get(DEAD_LETTER_TIME),
                "dead_letter_count": properties.get(DEAD_LETTER_COUNT),
                "history": decode_history(properties.get(DELIVERY_HISTORY)),
                "redrive_count": properties.get(REDRIVE_COUNT, 0), "last_redrive_at": properties.get(REDRIVE_TIME),
                "last_redrive_source": properties.get(REDRIVE_SOURCE),
                "body_size": len(message.body)})
    return rows


def _history_text(history: list[dict]) -> str:
    return "; ".join(f"{entry.get('time')} {entry.get('reason')}" for entry in history) or "-"


@click.group("dlq")
def dlq_group() -> None:
    """Dead-letter queues: list what is in them, move it back."""


@dlq_group.command("list")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--address", help="only dead letters on this dead-letter address, or first sent to this address")
@click.option("--queue", help="only this dead-letter queue")
@click.option("--json", "as_json", is_flag=True, help="one JSON document")
def list_command(directory: str, address, queue, as_json: bool) -> int:
    """Dead-lettered messages of a broker DIRECTORY (read-only): original address and queue, id,
    delivery count, reason and the history of failed deliveries."""
    target = _store_target(directory)
    state = _load(target)
    if queue is not None:       # for a name typed by a user, an empty list would read as "none there"
        _check_queue(target.path, queue, {binding.name for binding in state.queues.values()})
    rows = _rows(state, address, queue)
    damage = [place for name, report in sorted(state.reports.items()) for place in damage_in(name, report)]
    if as_json:
        emit_json({"directory": directory, "dead_letters": rows})
        return _list_status(directory, damage)
    table = Table(title=f"dead letters in {directory}: {len(rows)}")
    for column in ("queue", "id", "original address", "original queue", "deliveries", "reason", "redrives",
                   "history (time ms, reason)"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row["queue"], str(row["message_id"]), str(row["original_address"]), str(row["original_queue"]),
                      str(row["delivery_count"]), str(row["reason"]), str(row["redrive_count"]),
                      _history_text(row["history"]))
    stdout().print(table)
    return _list_status(directory, damage)


def _list_status(directory: str, damage: list) -> int:
    """Exit status 1 after the list when the store's files hold damage (each place on stderr)."""
    return damage_status(directory, damage, "the list holds the dead letters that could be read",
                         f"`journal-engine verify {directory}` lists the damage")


@dlq_group.command("redrive")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--from", "from_queue", required=True, help="the dead-letter queue")
@click.option("--to", "to_queue", help="the queue to move them to (default: each message's original queue)")
@click.option("--filter", "selector", help="a JMS selector over the dead letters, e.g. \"_AMQ_ORIG_ADDRESS = 'orders'\"")
@click.option("--limit", type=click.IntRange(min=0), help="move at most this many")
@click.option("--max-redrives", type=click.IntRange(min=0), default=REDRIVES_MAX_DEFAULT, show_default=True,
              help="refuse a message already redriven this many times (loop protection)")
@click.option("--dialect", type=click.Choice(sorted(DIALECTS)), default="artemis", show_default=True,
              help="the property names the broker used")
@click.option("--json", "as_json", is_flag=True, help="what moved and what was refused, as one JSON document")
def redrive_command(directory: str, from_queue: str, to_queue, selector, limit, max_redrives: int, dialect: str,
                    as_json: bool) -> int:
    """Move dead letters of a broker DIRECTORY back to their original queue (or --to), in one store
    transaction, each with its audit trail (_JE_REDRIVE_COUNT, _JE_REDRIVE_TIME, _JE_REDRIVE_SOURCE).
    Refused while a broker holds the directory (exit status 4)."""
    target = _store_target(directory)
    with Broker(target.path, store=target.backend.name, dialect=dialect) as broker:
        _check_queue(directory, from_queue, broker.queue_names())
        result = broker.redrive(from_queue, to_queue=to_queue, filter=selector, limit=limit,
                                max_redrives=max_redrives)
    if as_json:
        emit_json(result.as_dict())
        return EXIT_OK
    console = stdout()
    table = Table(title=f"redriven from {from_queue}: {len(result.moved)} moved, {len(result.refused)} refused")
    for column in ("id", "new id", "to queue / refused because"):
        table.add_column(column, overflow="fold")
    for old, new, queue_name in result.moved:
        table.add_row(str(old), str(new), queue_name)
    for old, why in result.refused:
        table.add_row(str(old), "-", f"refused: {why}")
    console.print(table)
    return EXIT_OK


COMMANDS = [dlq_group]
