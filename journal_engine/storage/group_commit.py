"""Group commit's leader rule, the one Python copy: the twin core and the LMDB store both use it
(the compiled core has its own, in pyx/journal_engine/_core.pyx, without the GIL). A leaf, beside
errors, limits and record_format: it imports only the standard library, so the twins and the stores
may both take it (it is no twin: the LMDB store runs it whichever core is in use).

A thread that wants its records durable joins the batch that is filling; the thread that commits
(the leader) first waits, at most the window, until as many waiters have joined as the last batch
served, so concurrent callers share one commit instead of trickling into the next one by one.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..errors import ConfigError
from ..limits import BUFFER_SIZE_MIN_BYTES, BUFFER_TIMEOUT_US_MAX
from .sync_mode import SyncMode


def check_durability_settings(sync: str, buffer_timeout_us: int, buffer_size: int) -> None:
    """ConfigError unless the sync mode and the group commit's window and buffer are valid: the
    settings every record store with group commit takes (the journal's and the LMDB store's)."""
    SyncMode.named(sync)
    if not isinstance(buffer_timeout_us, int) or not 0 <= buffer_timeout_us <= BUFFER_TIMEOUT_US_MAX:
        raise ConfigError("buffer_timeout_us", buffer_timeout_us, f"must be within 0..{BUFFER_TIMEOUT_US_MAX}")
    if not isinstance(buffer_size, int) or buffer_size < BUFFER_SIZE_MIN_BYTES:
        raise ConfigError("buffer_size", buffer_size, f"must be an integer >= {BUFFER_SIZE_MIN_BYTES}")


class BatchGathering:
    """The waiters of the batch that is filling, and how many the last commit served.

    Every method is called with the owner's `lock` held; wait() releases it while it sleeps, so
    appenders can join meanwhile.
    """

    __slots__ = ("_joined", "window_us", "waiting", "last_batch")

    def __init__(self, lock, window_us: int) -> None:
        self._joined = threading.Condition(lock)
        self.window_us = window_us
        self.waiting = 0        # waiters with records in the batch that is filling
        self.last_batch = 0     # how many the last commit served: the next leader waits for as many

    def join(self) -> None:
        """A caller with records in the filling batch now waits for its commit."""
        self.waiting += 1
        if self.waiting >= self.last_batch:
            self._joined.notify()

    def wait(self, still_gathering: Callable[[], bool] = lambda: True) -> None:
        """The leader's wait before it takes the batch: until as many have joined as last time, the
        window has passed, or `still_gathering()` says to stop (a full buffer, a closing store)."""
        if self.last_batch <= 1 or self.window_us <= 0 or self.waiting >= self.last_batch:
            return
        deadline = time.monotonic() + self.window_us / 1e6
        while self.waiting < self.last_batch and still_gathering():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._joined.wait(remaining)

    def take(self) -> int:
        """The leader takes the batch: how many waiters it serves."""
        batch, self.waiting = self.waiting, 0
        return batch

    def served(self, batch: int) -> None:
        """A commit served `batch` waiters: the next leader gathers for as many."""
        self.last_batch = max(1, batch)
