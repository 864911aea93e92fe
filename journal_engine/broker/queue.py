"""Queues, their references, the addresses that route to them, and QueueInfo snapshots.

A queue keeps its deliverable references in a deque (head = next to deliver); a recovered queue in a
ReadyQueue, which makes them from the recovery's columns a chunk at a time; a queue holding messages
of more than one priority level in PriorityLevels (priority.py), a deque or ReadyQueue per level.
Scheduled references (sent with a delivery time, or waiting for a redelivery delay) sit in the
broker's timer heap until due, then go to the head of their queue (of their level), as Artemis's
ScheduledDeliveryHandler does. A reference that
leaves the deque by another way than a delivery (the expiry reaper) is only marked DONE and skipped
when reached: removing it from the middle of the deque would cost O(n).
"""
from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from .._impl import ACKED_IN_TX, DELIVERING, DONE, READY, SCHEDULED, ReadyQueue, Reference
from ..limits import PRIORITY_DEFAULT
from .message import HEADER_NAMES, MessageData
from .priority import ALL_PRIORITIES, PriorityLevels, add_sorted
from .selector import Selector

__all__ = ["QueueInfo", "Reference", "QueueState", "AutoDelete", "AddressState", "READY", "SCHEDULED", "DELIVERING", "DONE",
           "ACKED_IN_TX", "NORMAL", "KILLED", "EXPIRED"]

# why a reference left its queue (Artemis AckReason); the queue counts each kind
NORMAL = "normal"
KILLED = "killed"          # dead-lettered: moved to the dead-letter address, or dropped
EXPIRED = "expired"


class AutoDelete(NamedTuple):
    """An auto-deleting queue's two thresholds, fixed when it was created and kept with its binding
    (Artemis's autoDeleteDelay and autoDeleteMessageCount); a tuple, as the store keeps it."""

    delay_ms: int
    message_count: int          # -1: any number


class QueueState:
    """A queue's references and counters (the broker's lock guards all of it)."""

    __slots__ = ("name", "queue_id", "address", "routing_type", "filter", "selector", "needs_headers", "durable",
                 "auto_created", "ready", "count", "scheduled", "delivering", "consumers", "waiters", "condition",
                 "messages_added", "messages_acknowledged", "messages_killed", "messages_expired",
                 "messages_dropped", "messages_delivered", "messages_redelivered", "messages_rolled_back",
                 "dead_letters", "pending_sends", "deleted", "id_list", "qpid_policy",
                 "redelivery_rules", "auto_delete", "consumer_removed_ms", "swept", "created_ms", "level_of")

    def __init__(self, name: str, queue_id: int, address: str, routing_type: str, filter: str | None,
                 durable: bool, lock: threading.Lock, *, auto_created: bool = False,
                 auto_delete: AutoDelete | None = None, created_ms: int = -1) -> None:
        self.name = name
        self.queue_id = queue_id
        self.address = address
        self.routing_type = routing_type
        self.filter = filter
        self.selector = Selector(filter) if filter else None
        self.needs_headers = bool(self.selector is not None and self.selector.identifiers & HEADER_NAMES)
        self.durable = durable
        self.auto_created = auto_created
        self.ready: deque[Reference] | ReadyQueue | PriorityLevels = deque()
        self.level_of: tuple[int, ...] | None = ALL_PRIORITIES   # priority -> level (None: FIFO); priority.py
        self.count = 0                  # live references: ready + scheduled + delivering
        self.scheduled = 0
        self.delivering = 0
        self.consumers = 0
        self.waiters = 0                # receive() calls sleeping on the condition
        self.condition = threading.Condition(lock)
        self.messages_added = 0
        self.messages_acknowledged = 0
        self.messages_killed = 0        # dead-lettered (moved or dropped), as Artemis counts KILLED acks
        self.messages_expired = 0       # expired (moved or dropped)
        self.messages_dropped = 0       # killed or expired with nowhere to go
        # the counts behind the metrics (journal_engine/metrics), kept as plain ints so that a scrape
        # reads them and the hot path pays one increment, never a metrics library's call
        self.messages_delivered = 0     # deliveries handed to consumers (redeliveries included)
        self.messages_redelivered = 0   # ... of them, those with a delivery count above 1
        self.messages_rolled_back = 0   # failed deliveries (rollbacks, sessions rolled back, lost consumers)
        self.dead_letters: dict[str, int] = {}   # messages_killed by DeadLetterReason (dead_letter.py)
        self.pending_sends = 0          # references waiting in open transactions for commit
        self.deleted = False
        self.id_list = [queue_id]       # what the store's send call takes for this queue alone
        self.qpid_policy = None         # a qpid.QpidQueuePolicy: Qpid's maximum delivery count and DLQ rule
        self.redelivery_rules = None    # rules of its own for failed deliveries (Qpid's), before any other
        self.auto_delete = auto_delete  # an AutoDelete when the queue goes once unused (Artemis, queue_reaper)
        self.created_ms = created_ms    # made, or recovered, then (epoch ms): the skip-usage-check delay's start
        self.consumer_removed_ms = -1   # when its last consumer went away (-1: never had one that did)
        self.swept = False              # seen deletable by the previous scan of the queue reaper

    def restore_later(self, make_references: Callable[[int, int], list], rows: int) -> None:
        """Recovery: the queue's ``rows`` READY references wait as the recovery's columns, and
        ``make_references(start, stop)`` makes those of rows ``start`` to ``stop``, a chunk at a time
        as deliveries reach them (a ReadyQueue): a recovered queue costs no object per message until
        then, and its first receive costs one chunk, not the whole queue."""
        self.ready = ReadyQueue(make_references, rows)

    def release_references(self) -> None:
        """Drop the ready references (a closed broker's): the References and this queue refer to each
        other, so only this frees them at once. Recovered references not made yet are dropped unmade."""
        self.ready = deque()

    def set_qpid_policy(self, policy, rules) -> None:
        """Qpid's maximum delivery count and DLQ rule for this queue (a qpid.QpidQueuePolicy, or None),
        and the redelivery rules that apply it (the broker's qpid.QpidRedeliveryRules): the queue's own
        while it has a policy, none without."""
        self.qpid_policy = policy
        self.redelivery_rules = rules if policy is not None else None

    def accepts(self, data: MessageData) -> bool:
        """Does the queue's filter take this message?"""
        selector = self.selector
        if selector is None:
            return True
        return selector.matches(data.properties, data.headers() if self.needs_headers else None)

    def ready_for(self, data: MessageData):
        """The ready references a reference of ``data`` joins: the queue's PriorityLevels, made here when
        it is the first of a level other than the default priority's (until then one deque holds all)."""
        ready = self.ready
        level_of = self.level_of
        if (data.priority != PRIORITY_DEFAULT and level_of is not None and type(ready) is not PriorityLevels
                and level_of[data.priority] != level_of[PRIORITY_DEFAULT]):
            ready = self.ready = PriorityLevels(level_of, ready)
        return ready

    def set_levels(self, level_of: tuple[int, ...] | None) -> None:
        """Give the queue another priority rule (priority.py; None: FIFO). Ready references held under
        the old one are put back in message order under the new one."""
        if level_of == self.level_of:
            return
        ready = self.ready
        regroup = type(ready) is PriorityLevels or (self.level_of is None and bool(ready))
        self.level_of = level_of
        if regroup:
            held = sorted(ready, key=lambda ref: ref.data.message_id)
            self.ready = deque()
            for ref in held:
                self.ready_for(ref.data).append(ref)

    def add_sorted(self, ref: Reference) -> None:
        """Put a returned reference back in message order (Artemis's addSorted) within its priority
        level: usually the level's head."""
        ready = self.ready_for(ref.data)
        if type(ready) is PriorityLevels:
            ready.add_sorted(ref)
        else:
            add_sorted(ready, ref)

    def put_back(self, refs: list[Reference]) -> None:
        """References due again (scheduled ones falling due) at the head of their levels, in ``refs``'s
        order (Artemis's ScheduledDeliveryHandler: addHead)."""
        ready = self.ready
        if type(ready) is not PriorityLevels and all(ref.data.priority == PRIORITY_DEFAULT for ref in refs):
            ready.extendleft(reversed(refs))
            return
        for ref in reversed(refs):
            self.ready_for(ref.data).appendleft(ref)

    def info(self) -> "QueueInfo":
        return QueueInfo(self.name, self.address, self.filter, self.routing_type, self.durable, self.count,
                         self.scheduled, self.delivering, self.consumers, self.messages_added,
                         self.messages_acknowledged, self.messages_killed, self.messages_expired,
                         self.messages_dropped, self.auto_created, self.queue_id, self.messages_delivered,
                         self.messages_redelivered, self.messages_rolled_back, dict(self.dead_letters))

    def __repr__(self) -> str:
        return f"QueueState({self.name!r}, address={self.address!r}, count={self.count})"


class AddressState:
    """The queues bound to an address: anycast queues share each message (one of them, round-robin,
    the first whose filter accepts it), every multicast queue whose filter accepts it gets a copy."""

    __slots__ = ("name", "anycast", "multicast", "next_anycast", "direct")

    def __init__(self, name: str) -> None:
        self.name = name
        self.anycast: list[QueueState] = []
        self.multicast: list[QueueState] = []
        self.next_anycast = 0
        self.direct: list[QueueState] | None = None    # the routing of every message, when it needs no choice

    def has_queues(self) -> bool:
        return bool(self.anycast or self.multicast)

    def bind(self, queue: "QueueState") -> None:
        (self.anycast if queue.routing_type == "anycast" else self.multicast).append(queue)
        self._refresh()

    def unbind(self, queue: "QueueState") -> None:
        (self.anycast if queue.routing_type == "anycast" else self.multicast).remove(queue)
        self._refresh()

    def _refresh(self) -> None:
        """One anycast queue without a filter and nothing else: every message goes there (the common
        point-to-point case), so send() skips the routing."""
        only = self.anycast[0] if len(self.anycast) == 1 and not self.multicast else None
        self.direct = [only] if only is not None and only.selector is None else None

    def route(self, data: MessageData, routing_type: str | None) -> list[QueueState]:
        """The queues that get a reference of the message (Artemis BindingsImpl: the anycast queues form
        one group, named by the address; each multicast queue is a group of its own)."""
        targets: list[QueueState] = []
        if routing_type != "multicast":
            group = self.anycast
            n = len(group)
            if n == 1:
                if group[0].accepts(data):
                    targets.append(group[0])
            elif n:
                start = self.next_anycast % n
                for step in range(n):
                    queue = group[(start + step) % n]
                    if queue.accepts(data):
                        targets.append(queue)
                        self.next_anycast = (start + step + 1) % n
                        break
        if routing_type != "anycast":
            for queue in self.multicast:
                if queue.accepts(data):
                    targets.append(queue)
        return targets


@dataclass(frozen=True)
class QueueInfo:
    """A snapshot of a queue. ``message_count`` includes scheduled and delivering messages, as in Artemis.

    The ``messages_*`` counts run from the queue's creation (or the broker's start, for a recovered
    queue). ``messages_killed`` are dead-lettered references (moved or dropped), ``dead_letters``
    the same counted by the copy's reason (``DeadLetterReason``: max-delivery-attempts, poison-ack),
    so its values sum to ``messages_killed``; expired references count in ``messages_expired`` only.
    ``messages_delivered`` counts every delivery, ``messages_redelivered`` those whose delivery count
    was above 1, ``messages_rolled_back`` every failed delivery (a rollback, a session rolled back, a
    served connection lost with the message), not a consumer's close, which hands it back uncounted.
    """

    name: str
    address: str
    filter: str | None
    routing_type: str
    durable: bool
    message_count: int
    scheduled_count: int
    delivering_count: int
    consumer_count: int
    messages_added: int
    messages_acknowledged: int
    messages_killed: int
    messages_expired: int
    messages_dropped: int
    auto_created: bool
    queue_id: int
    messages_delivered: int
    messages_redelivered: int
    messages_rolled_back: int
    dead_letters: dict[str, int] = field(hash=False)     # a copy of the queue's; hash=False: a dict has none
