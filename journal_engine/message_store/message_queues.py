"""Which queues hold a live reference of each stored message: the message store's bookkeeping.

A million recovered messages must cost no Python object each: a message on one queue, the common
case, is held in a C table of message id -> that queue's id (the ``LiveMap`` the journal keeps its
live set in), which makes no Python int per message, and nothing the garbage collector walks. A
message on no queue, or on several, is held as a tuple of ids in a dict beside it; a message is
in one or the other.
"""
from __future__ import annotations

from collections.abc import Iterator

from .. import _impl
from ..limits import ONE_QUEUE_ID_MAX

__all__ = ["MessageQueues"]


class MessageQueues:
    """Live message id -> the ids of the queues holding a live reference of it (in the order the
    references were made). Not thread-safe: the message store's lock guards it."""

    __slots__ = ("_one", "_other")

    def __init__(self, one_queue=None, several_queues: dict | None = None) -> None:
        """``one_queue``: a LiveMap of message id -> the queue id of its one live reference;
        ``several_queues``: message id -> a tuple of queue ids (none, or several), as the
        compiled recovery gives them (``MessageRecovery.one_queue``, ``.several_queues``); kept,
        not copied."""
        self._one = _impl.LiveMap() if one_queue is None else one_queue
        self._other: dict[int, tuple] = {} if several_queues is None else several_queues

    def _one_queue(self, message_id: object) -> int | None:
        """The queue of a message held in the table, else None (also for what is no message id)."""
        try:
            return self._one.get(message_id)
        except (TypeError, OverflowError):      # not an int, or outside 0 .. 2**64 - 1
            return None

    def _set(self, message_id: int, queue_ids: tuple) -> None:
        """Hold ``queue_ids`` for a message held nowhere now."""
        if len(queue_ids) == 1 and queue_ids[0] <= ONE_QUEUE_ID_MAX:
            self._one[message_id] = queue_ids[0]
        else:
            self._other[message_id] = queue_ids

    def __contains__(self, message_id: object) -> bool:
        try:
            return message_id in self._one or message_id in self._other
        except TypeError:       # not an int
            return False

    def __len__(self) -> int:
        return len(self._one) + len(self._other)

    def add_message(self, message_id: int, queue_ids=()) -> None:
        """A new message with live references on ``queue_ids`` (none: its references come later)."""
        self._set(message_id, tuple(queue_ids))

    def add_message_on(self, message_id: int, queue_id: int) -> None:
        """A new message with one live reference (the common send, kept cheap)."""
        if queue_id <= ONE_QUEUE_ID_MAX:
            self._one[message_id] = queue_id
        else:
            self._other[message_id] = (queue_id,)

    def queues(self, message_id: int) -> tuple | None:
        """The queue ids of the message's live references; None when it is not stored."""
        held = self._one_queue(message_id)
        if held is not None:
            return (held,)
        return self._other.get(message_id)

    def holds(self, message_id: int, queue_id: int) -> bool:
        """Whether the message has a live reference on the queue."""
        held = self._one_queue(message_id)
        if held is not None:
            return held == queue_id
        return queue_id in self._other.get(message_id, ())

    def add(self, message_id: int, queue_id: int) -> None:
        """One more live reference of a stored message (the caller checked it is not live yet)."""
        held = self._one_queue(message_id)
        if held is not None:
            del self._one[message_id]
            self._other[message_id] = (held, queue_id)
        else:
            self._set(message_id, self._other.pop(message_id) + (queue_id,))

    def remove(self, message_id: int, queue_id: int) -> int:
        """Drop a live reference (nothing when it is not live); how many the message has left."""
        held = self._one_queue(message_id)
        if held is not None:
            if held != queue_id:
                return 1
            del self._one[message_id]
            self._other[message_id] = ()
            return 0
        several = self._other.get(message_id)
        if several is None:
            return 0
        left = tuple(other for other in several if other != queue_id)
        del self._other[message_id]
        self._set(message_id, left)
        return len(left)

    def delete(self, message_id: int) -> None:
        """Forget a deleted message."""
        if self._one_queue(message_id) is not None:
            del self._one[message_id]
        else:
            del self._other[message_id]

    def items(self) -> Iterator[tuple[int, tuple]]:
        """(message id, its queue ids) of every stored message, a snapshot safe to change under."""
        for message_id, queue_id in list(self._one.items()):
            yield message_id, (queue_id,)
        for message_id, held in list(self._other.items()):
            yield message_id, held
