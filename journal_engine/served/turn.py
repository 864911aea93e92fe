"""The group-commit turn: one durability point for everything the connections asked in one turn of
the event loop.

While the loop reads its sockets, each connection handles its frames at once: a SEND is appended to
the broker on its non-waiting path, an ACK or NACK settles its message, and every answer (RECEIPT,
MESSAGE, ERROR) goes into that connection's outgoing buffer, not to the socket. The first frame of a
turn asks for the turn's end (``loop.call_soon``: it runs after the callbacks of every socket that
was ready together). There, in this order:

1. the destinations that received SENDs are dispatched (MESSAGE frames into their subscribers'
   buffers; ``subscriptions.py``);
2. when a RECEIPT is to go out, **one** ``broker.sync()`` makes everything appended durable: one
   fdatasync covers the SENDs, ACKs and NACKs of every connection of the turn. The sync runs on the
   loop: handing it to the journal's flusher thread and going on meanwhile measured slower on 2
   vCPUs (interleaved rounds: 1 receipted producer -25 %, 8 producers -30 %, 32 producers -8 %; the
   thread hand-overs and the GIL cost more than the overlap gains). A turn with no
   RECEIPT does not wait: what it appended reaches the disk within the store's group-commit window,
   as nothing promised otherwise;
3. each connection writes its buffer: one ``transport.write`` per connection per turn.

So a RECEIPT still means durable, a MESSAGE never leaves before the receipted SEND that made it is
durable, and the fdatasyncs per message fall as more connections share a turn. A sync that fails (a full disk) is
an operating error: every connection waiting on the turn gets an ERROR frame naming it and is closed
(nothing it sent is receipted); the server goes on.
"""
from __future__ import annotations

import logging

from ..errors import JournalError

__all__ = ["Turn"]

_log = logging.getLogger(__name__)


class Turn:
    """The end of the loop's current turn. ``sync()`` makes the turn's appends durable."""

    def __init__(self, loop, dispatcher, sync) -> None:
        self._loop = loop
        self._dispatcher = dispatcher
        self._sync = sync
        self._waiting: dict = {}         # connections with bytes to write at the end of the turn (ordered)
        self._scheduled = False
        self.promised = False            # a RECEIPT of this turn promises what was appended
        self.turns = 0                   # counters, for the tests and the benchmark
        self.syncs = 0

    def wake(self) -> None:
        """Ask for the end of the turn (once however often asked)."""
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.run)

    def waiting(self, connection) -> None:
        """``connection`` has bytes for the end of the turn."""
        self._waiting[connection] = None
        self.wake()

    def forget(self, connection) -> None:
        self._waiting.pop(connection, None)

    def run(self) -> None:
        self._scheduled = False
        self.turns += 1
        self._dispatcher.dispatch_marked()
        waiting, self._waiting = self._waiting, {}
        if self.promised:
            self.promised = False
            try:
                self._sync()
                self.syncs += 1
            except JournalError as error:       # an operating error of the store (disk full, closed)
                _log.warning("serve-stomp: the store failed to sync: %s", error)
                for connection in waiting:
                    connection.fail(f"the store could not make this turn's frames durable: {error}")
                return
        for connection in waiting:
            connection.write_out()
