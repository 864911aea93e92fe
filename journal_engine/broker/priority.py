"""Message priority on a queue: which level each priority (0-9) takes, and the ready references of a
queue that holds more than one level.

A queue keeps its ready references in one deque (or a recovered queue's ReadyQueue) while they are
all of one level: the common queue never pays for priorities. The first reference of another level
turns the queue's ready references into PriorityLevels, a deque (or ReadyQueue) per level, the
highest delivered first and each in FIFO order: Artemis's PriorityLinkedList, where a reference
that comes back (a rollback, a scheduled one falling due) goes to the head of its own level.

Which priorities share a level is the queue's rule (``levels_of``): Artemis orders all ten, ActiveMQ
Classic only where the destination policy says ``prioritizedMessages`` (else one level: FIFO), and
Qpid Broker-J a queue declared with ``x-qpid-priorities`` N, mapped as its PriorityQueueList maps
them: level = priority - (5 - (N + 1) // 2), clamped to 0..N-1 (N = 10: the priority itself; N = 2:
0-4 low, 5-9 high).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from ..errors import ConfigError
from ..limits import PRIORITY_DEFAULT, PRIORITY_MAX, PRIORITY_MIN

__all__ = ["ALL_PRIORITIES", "PriorityLevels", "add_sorted", "check_priority", "qpid_levels"]

#: Artemis's rule: each priority its own level
ALL_PRIORITIES = tuple(range(PRIORITY_MAX + 1))


def check_priority(priority) -> int:
    """``priority`` when it is an int from 0 to 9 (JMS's range), else ConfigError naming it."""
    if type(priority) is not int or not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ConfigError("priority", priority, f"an int from {PRIORITY_MIN} to {PRIORITY_MAX} (JMS; higher first)")
    return priority


def qpid_levels(priorities: int) -> tuple[int, ...]:
    """The level of each priority 0-9 on a Qpid queue of ``priorities`` levels (Broker-J's
    PriorityQueueList: an offset centres the levels on the default priority, clamped at both ends)."""
    offset = 5 - (priorities + 1) // 2
    return tuple(min(max(priority - offset, 0), priorities - 1) for priority in range(PRIORITY_MAX + 1))


class PriorityLevels:
    """A queue's ready references in levels (``level_of[priority]``), the highest level first, FIFO in
    each. Has the deque operations the broker uses on a queue's ready references: ``append`` to the
    tail of a reference's level, ``appendleft``/``extendleft`` to its head, ``popleft`` the head of
    the highest level holding one; iteration and indexes in delivery order."""

    __slots__ = ("level_of", "levels")

    def __init__(self, level_of: tuple[int, ...], held=None) -> None:
        """``held``: the ready references so far (a deque or a recovered ReadyQueue), all of the level
        of the default priority: they become that level, unchanged."""
        self.level_of = level_of
        self.levels: list = [deque() for _ in range(max(level_of) + 1)]
        if held is not None:
            self.levels[level_of[PRIORITY_DEFAULT]] = held

    @classmethod
    def of_levels(cls, level_of: tuple[int, ...], held: dict) -> "PriorityLevels":
        """Levels given whole (recovery: level -> a ReadyQueue of its rows)."""
        out = cls(level_of)
        for level, ready in held.items():
            out.levels[level] = ready
        return out

    def _top(self):
        for ready in reversed(self.levels):
            if ready:
                return ready
        raise IndexError("pop from an empty PriorityLevels")

    def __len__(self) -> int:
        return sum(len(ready) for ready in self.levels)

    def __bool__(self) -> bool:
        return any(self.levels)

    def popleft(self):
        return self._top().popleft()

    def append(self, ref) -> None:
        self.levels[self.level_of[ref.data.priority]].append(ref)

    def appendleft(self, ref) -> None:
        self.levels[self.level_of[ref.data.priority]].appendleft(ref)

    def extendleft(self, refs) -> None:
        for ref in refs:
            self.appendleft(ref)

    def clear(self) -> None:
        for ready in self.levels:
            ready.clear()

    def add_sorted(self, ref) -> None:
        """Back into its level in message order (Artemis's addSorted): usually the level's head."""
        add_sorted(self.levels[self.level_of[ref.data.priority]], ref)

    def __getitem__(self, index: int):
        if index == 0:
            return self._top()[0]
        if index == -1:
            for ready in self.levels:
                if ready:
                    return ready[-1]
            raise IndexError("PriorityLevels index out of range")
        return list(self)[index]

    def __iter__(self) -> Iterator:
        for ready in reversed(self.levels):
            yield from ready

    def __repr__(self) -> str:
        return f"PriorityLevels({[len(ready) for ready in self.levels]})"


def add_sorted(ready, ref) -> None:
    """Put a returned reference back in message order into ``ready`` (one level): usually the head."""
    sequence = ref.data.message_id
    if not ready or sequence < ready[0].data.message_id:
        ready.appendleft(ref)
    elif sequence > ready[-1].data.message_id:
        ready.append(ref)
    else:
        for index, other in enumerate(ready):
            if other.data.message_id > sequence:
                ready.insert(index, ref)
                break
        else:
            ready.append(ref)
