"""Which queues hold a live reference of each stored message: the message store's bookkeeping.

A million recovered messages must not cost a million Python sets (each tracked by the garbage
collector, whose full passes then walk them all): a message on one queue, the common case, is
held as that queue's id (an int), one on no queue or on several as a tuple of ids. Neither is
tracked by the collector, so the table of a recovered store costs no collection at all.
"""
from __future__ import annotations

from collections.abc import Iterator

__all__ = ["MessageQueues"]


class MessageQueues:
    """Live message id -> the ids of the queues holding a live reference of it (in the order the
    references were made). Not thread-safe: the message store's lock guards it."""

    __slots__ = ("_queues",)

    def __init__(self, queues: dict | None = None) -> None:
        """``queues``: message id -> a queue id (one reference) or a tuple of queue ids, as the
        compiled recovery (``MessageRecovery.message_queues``) gives it; kept, not copied."""
        self._queues: dict[int, int | tuple] = {} if queues is None else queues

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._queues

    def __len__(self) -> int:
        return len(self._queues)

    def add_message(self, message_id: int, queue_ids=()) -> None:
        """A new message with live references on ``queue_ids`` (none: its references come later)."""
        self._queues[message_id] = queue_ids[0] if len(queue_ids) == 1 else tuple(queue_ids)

    def add_message_on(self, message_id: int, queue_id: int) -> None:
        """A new message with one live reference (the common send, kept cheap)."""
        self._queues[message_id] = queue_id

    def queues(self, message_id: int) -> tuple | None:
        """The queue ids of the message's live references; None when it is not stored."""
        held = self._queues.get(message_id)
        if held is None or type(held) is tuple:
            return held
        return (held,)

    def holds(self, message_id: int, queue_id: int) -> bool:
        """Whether the message has a live reference on the queue."""
        held = self._queues.get(message_id)
        if held is None:
            return False
        return held == queue_id if type(held) is not tuple else queue_id in held

    def add(self, message_id: int, queue_id: int) -> None:
        """One more live reference of a stored message (the caller checked it is not live yet)."""
        held = self._queues[message_id]
        if type(held) is not tuple:
            self._queues[message_id] = (held, queue_id)
        elif held:
            self._queues[message_id] = held + (queue_id,)
        else:
            self._queues[message_id] = queue_id

    def remove(self, message_id: int, queue_id: int) -> int:
        """Drop a live reference (nothing when it is not live); how many the message has left."""
        held = self._queues.get(message_id)
        if held is None:
            return 0
        if type(held) is not tuple:
            if held != queue_id:
                return 1
            self._queues[message_id] = ()
            return 0
        left = tuple(other for other in held if other != queue_id)
        self._queues[message_id] = left[0] if len(left) == 1 else left
        return len(left)

    def delete(self, message_id: int) -> None:
        """Forget a deleted message."""
        del self._queues[message_id]

    def items(self) -> Iterator[tuple[int, tuple]]:
        """(message id, its queue ids) of every stored message, a snapshot safe to change under."""
        for message_id, held in list(self._queues.items()):
            yield message_id, held if type(held) is tuple else (held,)
