"""Subscriptions and the flow of messages to them.

A queue subscription holds a broker ``Consumer`` on its queue and the messages it was handed and has
not settled, in delivery order. Its *room* is what it may be handed now:

* ``ack:auto``: messages leave the queue as they are written to the connection; the room is bounded
  only by the connection (back-pressure: nothing more while its outgoing bytes are past
  SERVED_WRITE_BUFFER_HIGH_BYTES) and by SERVED_DISPATCH_BATCH_MAX a turn.
* ``ack:client`` / ``client-individual``: at most ``prefetch`` unacknowledged (the SUBSCRIBE's
  ``activemq.prefetchSize`` header, ActiveMQ's name, or RabbitMQ's ``prefetch-count``; default
  SERVED_PREFETCH_DEFAULT), and the connection's back-pressure too.

The :class:`Dispatcher` hands messages to the subscriptions of a destination in turn, one message
each round, until the queue or their room runs out, so that a slow consumer (no room) never holds up
the others. It runs when something may have become deliverable: a SEND (at the end of the turn),
an ACK or NACK, a SUBSCRIBE, a connection that drained its writes. What becomes deliverable with
nothing sent (a redelivery falling due, an expiry copy, a dead letter) is found by looking again,
every SERVED_IDLE_POLL_S while a subscription has room and its queue had nothing for it.

``/topic/...`` destinations are not stored: a SEND there is written to the subscribers of the moment
(coilmq's topic model, which serve-stomp kept).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..limits import SERVED_DISPATCH_BATCH_MAX, SERVED_IDLE_POLL_S, SERVED_PREFETCH_DEFAULT, SERVED_PREFETCH_MAX
from .stomp import ProtocolError

__all__ = ["Subscription", "Dispatcher", "ACK_MODES", "TOPIC_PREFIX", "prefetch_of"]

ACK_MODES = ("auto", "client", "client-individual")
TOPIC_PREFIX = "/topic/"
#: the SUBSCRIBE headers that set a subscription's prefetch, in the order they are read
PREFETCH_HEADERS = ("activemq.prefetchSize", "prefetch-count")


def prefetch_of(headers: dict[str, str]) -> int:
    """The prefetch a SUBSCRIBE asks for (SERVED_PREFETCH_DEFAULT when it names none); ProtocolError
    naming the header unless it is a whole number from 1 to SERVED_PREFETCH_MAX."""
    for name in PREFETCH_HEADERS:
        value = headers.get(name)
        if value is None:
            continue
        text = value.strip()
        if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= SERVED_PREFETCH_MAX:
            raise ProtocolError(f"SUBSCRIBE: {name}:{value[:40]} must be a whole number from 1 to "
                                f"{SERVED_PREFETCH_MAX} (SERVED_PREFETCH_MAX)")
        return int(text)
    return SERVED_PREFETCH_DEFAULT


@dataclass(slots=True, eq=False)
class Subscription:
    """One SUBSCRIBE of a connection. ``consumer`` is the broker Consumer (None on a topic);
    ``unacked`` the messages handed and not settled, ack id -> Message, in delivery order."""

    id: str
    connection: Any = field(repr=False)
    destination: str
    ack_mode: str
    prefetch: int
    consumer: Any
    unacked: dict[str, object] = field(init=False, repr=False, default_factory=dict)
    active: bool = field(init=False, default=True)     # False once unsubscribed: it only settles what it holds

    @property
    def auto(self) -> bool:
        return self.ack_mode == "auto"

    def room(self) -> int:
        """How many messages it may be handed now."""
        if not self.active or not self.connection.can_take():
            return 0
        if self.ack_mode == "auto":
            return SERVED_DISPATCH_BATCH_MAX
        return self.prefetch - len(self.unacked)

    def settled(self, ack_id: str, *, cumulative: bool) -> list:
        """Take out the message ``ack_id`` (and, ``cumulative``, every one handed before it); the
        messages taken, in delivery order; none when ``ack_id`` is not held."""
        if ack_id not in self.unacked:
            return []
        if not cumulative:
            return [self.unacked.pop(ack_id)]
        taken = []
        for held in list(self.unacked):
            taken.append(self.unacked.pop(held))
            if held == ack_id:
                break
        return taken


class Dispatcher:
    """Hands the messages of each destination to its subscriptions. ``loop`` runs the idle polls;
    ``wake()`` asks for a turn (``turn.py``), at whose end :meth:`dispatch_marked` runs."""

    def __init__(self, loop, wake) -> None:
        self._loop = loop
        self._wake = wake
        self._queues: dict[str, list[Subscription]] = {}     # queue destination -> its subscriptions
        self._topics: dict[str, list[Subscription]] = {}
        self._marked: set[str] = set()       # destinations to dispatch at the end of this turn
        self._starved: dict[str, None] = {}  # destinations whose subscriptions had room and nothing came
        self._poll = None                    # the TimerHandle of the next idle poll
        self._topic_sequence = 0
        self.stopped = False

    # ------------------------------------------------------------------ subscriptions come and go
    def add(self, subscription: Subscription) -> None:
        table = self._topics if subscription.consumer is None else self._queues
        table.setdefault(subscription.destination, []).append(subscription)

    def remove(self, subscription: Subscription) -> None:
        table = self._topics if subscription.consumer is None else self._queues
        subscriptions = table.get(subscription.destination)
        if subscriptions is not None and subscription in subscriptions:
            subscriptions.remove(subscription)
            if not subscriptions:
                del table[subscription.destination]

    # ------------------------------------------------------------------ when to dispatch
    def mark(self, destination: str) -> None:
        """Something may be deliverable on ``destination``: dispatch it at the end of the turn."""
        if destination in self._queues:
            self._marked.add(destination)
            self._wake()

    def dispatch_marked(self) -> None:
        marked, self._marked = self._marked, set()
        for destination in marked:
            self.dispatch(destination)

    def dispatch(self, destination: str, first: Subscription | None = None) -> None:
        """Hand the deliverable messages of ``destination`` to its subscriptions with room, one each
        round (``first`` served first), until the queue or the room runs out. A subscription that
        reached SERVED_DISPATCH_BATCH_MAX in this call gets the rest in the next turn."""
        subscriptions = self._queues.get(destination)
        if not subscriptions:
            return
        if first is not None and first in subscriptions:
            ready = [first] + [s for s in subscriptions if s is not first]
        else:
            ready = list(subscriptions)
            if len(ready) > 1:              # the next call starts with the next subscription
                subscriptions.append(subscriptions.pop(0))
        rooms = {}
        for subscription in ready:
            room = subscription.room()
            if room > 0:
                rooms[subscription] = min(room, SERVED_DISPATCH_BATCH_MAX)
        while rooms:
            for subscription in list(rooms):
                message = subscription.consumer.receive(0)
                if message is None:                 # nothing more for anyone: look again later
                    self._starve(destination)
                    return
                subscription.connection.deliver(subscription, message)
                rooms[subscription] -= 1
                if rooms[subscription] <= 0:
                    del rooms[subscription]
                    if subscription.room() > 0:     # the batch bound, not the room, stopped it
                        self._marked.add(destination)
                        self._wake()
        self._starved.pop(destination, None)

    def _starve(self, destination: str) -> None:
        self._starved[destination] = None
        if self._poll is None and not self.stopped:
            self._poll = self._loop.call_later(SERVED_IDLE_POLL_S, self._look_again)

    def _look_again(self) -> None:
        """The idle poll: dispatch the destinations whose subscriptions found nothing last time."""
        self._poll = None
        starved, self._starved = self._starved, {}
        for destination in starved:
            if destination in self._queues:
                self._marked.add(destination)
        if self._marked:
            self._wake()

    # ------------------------------------------------------------------ topics
    def publish(self, destination: str, headers: dict[str, str], body: bytes) -> None:
        """A SEND to a topic: to each of its subscriptions of the moment (not stored)."""
        for subscription in self._topics.get(destination, ()):
            if subscription.active:
                self._topic_sequence += 1
                subscription.connection.deliver_topic(subscription, headers, body, f"topic-{self._topic_sequence}")

    def stop(self) -> None:
        self.stopped = True
        if self._poll is not None:
            self._poll.cancel()
            self._poll = None
