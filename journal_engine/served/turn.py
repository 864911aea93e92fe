"""The group-commit turn: one durability point for everything the connections asked in one turn of
the event loop, with the disk's wait off the loop.

While the loop reads its sockets, each connection handles its frames at once: a SEND is appended to
the broker on its non-waiting path, an ACK or NACK settles its message, and every answer (RECEIPT,
MESSAGE, ERROR) goes into that connection's outgoing buffer, not to the socket. The first frame of a
turn asks for the turn's end (``loop.call_soon``: it runs after the callbacks of every socket that
was ready together). There, in this order:

1. the destinations that received SENDs are dispatched (MESSAGE frames into their subscribers'
   buffers; ``subscriptions.py``);
2. when a RECEIPT is to go out, the turn asks the store for a future that is done once everything
   appended so far is durable (``Destinations.durable``: the journal's flusher thread runs **one**
   fdatasync for the SENDs, ACKs and NACKs of every connection of the turn, and of every turn that
   ended while the previous fdatasync was on the disk). The loop does not wait: it reads and
   handles the next frames meanwhile. A turn with no RECEIPT waits for nothing of its own:
   what it appended reaches the disk within the store's group-commit window, as nothing promised
   otherwise;
3. each connection's buffer is taken out (``StompConnection.detach``) and written, one
   ``transport.write`` per connection per turn, once the turn's future is done **and** every
   earlier turn's buffers are written: turns are released in the order they ended.

So a RECEIPT still means durable, a MESSAGE never leaves before the receipted SEND that made it is
durable (it was appended in its turn or an earlier one), each connection's frames go out in the
order they were made, and the fdatasyncs per message fall as more connections share a sync. A sync
that fails (a full disk) is an operating error: every connection waiting on the turn gets an ERROR
frame naming it and is closed (nothing it sent is receipted); the server goes on.
"""
from __future__ import annotations

import asyncio
import logging
from collections import deque

from ..errors import JournalError

__all__ = ["Turn"]

_log = logging.getLogger(__name__)


class Turn:
    """The end of the loop's current turn. ``durable()`` returns a future done once what the turn
    appended is durable (None when nothing waits for the disk: sync "none")."""

    def __init__(self, loop, dispatcher, durable) -> None:
        self._loop = loop
        self._dispatcher = dispatcher
        self._durable = durable
        self._waiting: dict = {}         # connections with bytes to write at the end of the turn (ordered)
        self._held: deque = deque()      # ended turns not yet written: (their future or None, [(connection, out)])
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

    @property
    def held(self) -> int:
        """Ended turns whose frames wait for their sync (or for an earlier turn's)."""
        return len(self._held)

    def run(self) -> None:
        self._scheduled = False
        self.turns += 1
        self._dispatcher.dispatch_marked()
        waiting, self._waiting = self._waiting, {}
        durable = None
        if self.promised:
            self.promised = False
            durable = self._durable()
        if durable is None and not self._held:
            for connection in waiting:      # nothing to wait for: written now
                connection.write_out()
            return
        self._held.append((durable, [(connection, connection.detach()) for connection in waiting]))
        if durable is not None:
            self.syncs += 1
            durable.add_done_callback(self._release)

    def _release(self, _future=None) -> None:
        """Write the ended turns whose sync is done, in the order they ended."""
        held = self._held
        while held:
            durable, outputs = held[0]
            if durable is not None and not durable.done():
                return
            held.popleft()
            error = None if durable is None or durable.cancelled() else durable.exception()
            if error is not None:
                if not isinstance(error, JournalError):
                    _log.error("serve-stomp: the store's sync raised %r", error)
                else:                       # an operating error of the store (disk full, closed)
                    _log.warning("serve-stomp: the store failed to sync: %s", error)
                for connection, _ in outputs:
                    connection.fail(f"the store could not make this turn's frames durable: {error}")
                continue
            for connection, (data, closing) in outputs:
                connection.write_detached(data, closing)

    async def drained(self) -> None:
        """Return once every ended turn is written (a stop waits for the RECEIPTs of its last syncs)."""
        while self._held:
            pending = [durable for durable, _ in self._held if durable is not None and not durable.done()]
            if pending:
                await asyncio.wait(pending)
            self._release()
