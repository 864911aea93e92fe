"""Futures that resolve once a journal's appends are durable: the journal's asyncio face.

An ``await journal.add_async(...)`` appends at once (appends never wait for the disk) and then
awaits the future of its event loop's next batch. The journal's flusher thread takes the batch
(every future waiting now) before it starts a sync, so that sync — which covers everything
appended before it began — makes every awaited record durable; then it resolves the batch with ONE
``loop.call_soon_threadsafe`` per event loop, not one per record or per waiter. All the coroutines
of a loop that append while one sync runs share one future and wake together after the next one:
thousands of them confirm durable writes without a thread each.

Thread and loop safety: ``waiter()`` runs in the event loop thread of the awaiting coroutine (the
future belongs to that loop); ``take()``, ``resolve()`` and ``fail()`` run in the flusher (or the
closing) thread and touch a future only through its own loop. Several loops (in several threads)
may wait at once: each has its own future. A loop that closed before its future resolved is skipped.
"""
from __future__ import annotations

import asyncio
import threading


def _set_result(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


def _set_exception(future: asyncio.Future, exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


class DurableFutures:
    """The future each event loop's callers await until the next sync has made their appends durable."""

    __slots__ = ("_lock", "_filling")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._filling: dict[asyncio.AbstractEventLoop, asyncio.Future] = {}    # loop -> its next batch's future

    def __bool__(self) -> bool:
        return bool(self._filling)

    def waiter(self) -> asyncio.Future:
        """The running loop's future for the next batch: call it after the append it waits for."""
        loop = asyncio.get_running_loop()
        future = self._filling.get(loop)
        if future is None:
            with self._lock:
                future = self._filling.get(loop)
                if future is None:
                    future = self._filling[loop] = loop.create_future()
        return future

    def take(self) -> dict:
        """The batch, taken right before a sync starts: the sync covers every append its futures wait for."""
        with self._lock:
            batch, self._filling = self._filling, {}
        return batch

    @staticmethod
    def resolve(batch: dict) -> None:
        """The sync after take() is done: one hand-over per loop wakes every caller of the batch."""
        for loop, future in batch.items():
            try:
                loop.call_soon_threadsafe(_set_result, future)
            except RuntimeError:        # the loop closed: nobody awaits this any more
                pass

    @staticmethod
    def fail(batch: dict, exc: BaseException) -> None:
        """The sync failed (or the journal closed first): every caller of the batch raises `exc`."""
        for loop, future in batch.items():
            try:
                loop.call_soon_threadsafe(_set_exception, future, exc)
            except RuntimeError:
                pass
