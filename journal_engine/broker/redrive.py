"""Redrive: dead-lettered messages back to their queue, with an audit trail and loop protection.

SQS's DLQ redrive and Artemis's ``retryMessages`` give a dead letter another chance; neither says on
the message that it happened, so a message that fails for good can circle between its queue and the
dead-letter queue for ever. Here each redriven message is a new message (a new id, the copy's body
and properties, delivery count 0) put straight on its target queue: the queue its dead-letter copy
names in ``_AMQ_ORIG_QUEUE`` (``_HQ_ORIG_QUEUE``), or the one the caller names. It carries:

* ``_JE_REDRIVE_COUNT``: how many times the message has been redriven, this one included;
* ``_JE_REDRIVE_TIME``: when (epoch ms);
* ``_JE_REDRIVE_SOURCE``: the dead-letter queue it came from.

Its dead-letter properties (``_AMQ_ORIG_*``, ``_JE_DEAD_LETTER_*``, the delivery history) stay as
they were, so the trail of the last failure is still on it. When it fails again, its next
dead-letter copy keeps ``_JE_REDRIVE_COUNT``; a message whose count reached ``max_redrives`` is
refused, and stays in the dead-letter queue. Every move of one call is one store transaction
(the new messages, their references, the acknowledgements of the dead-letter copies, COMMIT):
all of them happen, or none.

Deleting (``Broker.delete_messages``, the operator's console's "delete") removes chosen messages of a
queue for good, also in one store transaction (their acknowledgements, COMMIT), counted as
acknowledged. What a deletion removed is gone from the store; the console lists each one it made.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ConfigError
from ..limits import REDRIVES_MAX_DEFAULT
from .artemis.dialect import Dialect
from .dead_letter import DEAD_LETTER_COUNT, DEAD_LETTER_REASON
from .dialects import DIALECTS
from .message import HEADER_NAMES, MessageData
from .post_office import PostOffice
from .queue import NORMAL, READY, QueueState, Reference
from .selector import Selector

__all__ = ["REDRIVE_COUNT", "REDRIVE_TIME", "REDRIVE_SOURCE", "RedriveResult", "Redrive", "redrive_count",
           "dead_letter_origin"]

REDRIVE_COUNT = "_JE_REDRIVE_COUNT"
REDRIVE_TIME = "_JE_REDRIVE_TIME"
REDRIVE_SOURCE = "_JE_REDRIVE_SOURCE"


@dataclass
class RedriveResult:
    """What one redrive did: ``moved`` (dead-letter copy id, new message id, target queue) and
    ``refused`` (dead-letter copy id, why), both in queue order."""

    source: str
    moved: list[tuple[int, int, str]] = field(default_factory=list)
    refused: list[tuple[int, str]] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"source": self.source,
                "moved": [{"message_id": old, "new_message_id": new, "queue": queue} for old, new, queue in self.moved],
                "refused": [{"message_id": old, "reason": why} for old, why in self.refused]}


def redrive_count(properties) -> int:
    """How many times a message was redriven (0 when never, or when the property is not an integer)."""
    value = properties.get(REDRIVE_COUNT) if properties else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def dead_letter_origin(properties) -> tuple[str | None, str | None, int | None] | None:
    """(original address, original queue, original message id) of a dead-letter copy, in whichever dialect
    made it; None for a message that is no dead letter, or one redriven since it was last dead-lettered
    (back in service until ``_JE_DEAD_LETTER_COUNT`` passes its redrive count). What `dlq list` and the
    console's dead-letter pages list."""
    properties = properties or {}
    origin: tuple[str | None, str | None, int | None] = (None, None, None)
    for dialect in DIALECTS.values():
        if dialect.orig_address in properties:
            origin = (properties.get(dialect.orig_address), properties.get(dialect.orig_queue),
                      properties.get(dialect.orig_message_id))
            break
    if origin[0] is None and DEAD_LETTER_REASON not in properties:
        return None
    dead_letter_count = properties.get(DEAD_LETTER_COUNT)
    if isinstance(dead_letter_count, int) and dead_letter_count <= redrive_count(properties):
        return None
    return origin


def check_redrive_arguments(limit: int | None, max_redrives: int) -> None:
    """ConfigError for a limit or a loop bound that is not an integer >= 0 (None: no limit)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigError("limit", limit, "must be an integer >= 0, or None for every message")
    if isinstance(max_redrives, bool) or not isinstance(max_redrives, int) or max_redrives < 0:
        raise ConfigError("max_redrives", max_redrives,
                          f"must be an integer >= 0 (how often one message may be redriven; "
                          f"default {REDRIVES_MAX_DEFAULT})")


class Redrive:
    """Moves dead letters back for the broker (see the module docstring). Runs with the broker's lock held."""

    __slots__ = ("_post_office", "_dialect")

    def __init__(self, post_office: PostOffice, dialect: Dialect) -> None:
        self._post_office = post_office
        self._dialect = dialect

    def run(self, source: QueueState, target: QueueState | None, selector: Selector | None, limit: int | None,
            max_redrives: int, now: int, message_ids: frozenset[int] | None = None) -> RedriveResult:
        """Redrive the deliverable messages of ``source`` that ``selector`` accepts (all when None) and
        whose id is in ``message_ids`` (all when None), at most ``limit`` of them, to ``target`` (None:
        each one's original queue). Store errors propagate with nothing moved."""
        result = RedriveResult(source.name)
        queues = self._post_office.queues
        moves: list[tuple[Reference, MessageData, QueueState]] = []
        for ref in _chosen(source, selector, message_ids):
            if limit is not None and len(moves) >= limit:
                break
            data = ref.data
            properties = dict(data.properties) if data.properties else {}
            count = redrive_count(properties)
            if count >= max_redrives:
                result.refused.append((data.message_id, f"redriven {count} times already (max_redrives "
                                                        f"{max_redrives}); it stays in {source.name}"))
                continue
            destination = target
            if destination is None:
                original = properties.get(self._dialect.orig_queue)
                destination = queues.get(original) if isinstance(original, str) else None
                if destination is None:
                    result.refused.append((data.message_id, "no original queue to go back to" if original is None
                                           else f"its original queue {original!r} does not exist; name one with to_queue"))
                    continue
            properties[REDRIVE_COUNT] = count + 1
            properties[REDRIVE_TIME] = now
            properties[REDRIVE_SOURCE] = source.name
            copy = MessageData(self._post_office.new_message_id(), destination.address, data.body, properties,
                               data.durable, data.expiration, data.routing_type, data.priority)
            moves.append((ref, copy, destination))
        self._store(source, moves)
        for ref, copy, destination in moves:
            self._post_office.remove(ref, NORMAL, False)
            self._post_office.enqueue(copy, [destination], 0)
            result.moved.append((ref.data.message_id, copy.message_id, destination.name))
        return result

    def delete(self, source: QueueState, selector: Selector | None, limit: int | None,
               message_ids: frozenset[int] | None) -> list[int]:
        """Remove the deliverable messages of ``source`` chosen as :meth:`run` chooses them, in one store
        transaction; their ids, in queue order. Store errors propagate with nothing removed."""
        chosen: list[Reference] = []
        for ref in _chosen(source, selector, message_ids):
            if limit is not None and len(chosen) >= limit:
                break
            chosen.append(ref)
        self._store(source, [(ref, None, None) for ref in chosen])
        for ref in chosen:
            self._post_office.remove(ref, NORMAL, False)
        return [ref.data.public_id for ref in chosen]

    def _store(self, source: QueueState, moves: list) -> None:
        """Every move in one store transaction, durable when this returns."""
        post_office = self._post_office
        store = post_office.store
        if store is None or not moves:
            return
        tx = store.transaction()
        try:
            for ref, copy, destination in moves:
                if copy is not None and copy.durable and destination.durable:
                    post_office.store_new(copy, [destination], 0, tx)
                if ref.data.durable_refs and source.durable:
                    tx.store_acknowledge(source.queue_id, ref.data.message_id)
            tx.commit(sync=True)
        except BaseException:
            if tx.state == "open":
                tx.rollback(sync=False)
            for _ref, copy, _destination in moves:
                if copy is not None:
                    copy.durable_refs = 0
            raise


def _chosen(source: QueueState, selector: Selector | None, message_ids: frozenset[int] | None):
    """The deliverable references of ``source`` that ``selector`` accepts and ``message_ids`` names
    (None: any), in queue order."""
    for ref in source.ready:
        if ref.state != READY:
            continue
        data = ref.data
        if message_ids is not None and data.public_id not in message_ids:
            continue
        if selector is not None and not selector.matches(
                data.properties, data.headers() if selector.identifiers & HEADER_NAMES else None):
            continue
        yield ref
