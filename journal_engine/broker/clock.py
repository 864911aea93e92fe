"""Clocks for the broker: the wall clock, and a manual clock that makes time deterministic.

The broker reads the time for redelivery delays, scheduled deliveries and expiry through a clock's
``now_ms()`` (epoch milliseconds). With ``ManualClock`` time moves only when ``advance()`` is called:
scheduled redeliveries fall due and the scans that fell due (expiry, queue reaper) run then, and ``receive(0)`` never
sleeps, so tests replay the manual's timelines exactly.
"""
from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable

__all__ = ["Clock", "WallClock", "ManualClock"]


class Clock:
    """The interface the broker uses; ``manual`` clocks call their listeners when time moves."""

    manual = False

    def now_ms(self) -> int:
        raise NotImplementedError

    def subscribe(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(now_ms)`` whenever the clock is moved (manual clocks only)."""


class WallClock(Clock):
    """Epoch milliseconds from the system clock (the default)."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def __repr__(self) -> str:
        return "WallClock()"


class ManualClock(Clock):
    """A clock that stands still until ``advance(ms)`` or ``set(ms)`` moves it forward.

    Brokers using it subscribe (weakly, so a dropped broker is not kept alive): moving the clock
    makes each one release the scheduled deliveries that fell due, expire what expired and wake
    receivers that wait on another thread.
    """

    manual = True

    def __init__(self, start_ms: int = 0) -> None:
        if isinstance(start_ms, bool) or not isinstance(start_ms, int) or start_ms < 0:
            raise ValueError(f"start_ms={start_ms!r}: an epoch time in milliseconds, an int >= 0")
        self._now_ms = start_ms
        self._lock = threading.Lock()
        self._listeners: list = []

    def now_ms(self) -> int:
        return self._now_ms

    def advance(self, ms: int) -> int:
        """Move the clock forward by ``ms`` milliseconds (>= 0); returns the new time."""
        if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
            raise ValueError(f"ms={ms!r}: the clock only moves forward, by an int >= 0 of milliseconds")
        with self._lock:
            self._now_ms += ms
            now = self._now_ms
        self._notify(now)
        return now

    def set(self, now_ms: int) -> int:
        """Move the clock to ``now_ms`` (never backwards: time that ran back would reorder schedules)."""
        if isinstance(now_ms, bool) or not isinstance(now_ms, int):
            raise ValueError(f"now_ms={now_ms!r}: an epoch time in milliseconds, an int")
        with self._lock:
            if now_ms < self._now_ms:
                raise ValueError(f"now_ms={now_ms} is before the clock's time {self._now_ms}; it only moves forward")
            self._now_ms = now_ms
        self._notify(now_ms)
        return now_ms

    def subscribe(self, callback: Callable[[int], None]) -> None:
        reference = weakref.WeakMethod(callback) if hasattr(callback, "__self__") else (lambda: callback)
        with self._lock:
            self._listeners.append(reference)

    def _notify(self, now: int) -> None:
        with self._lock:
            listeners = list(self._listeners)
        dead = []
        for reference in listeners:
            callback = reference()
            if callback is None:
                dead.append(reference)
            else:
                callback(now)
        if dead:
            with self._lock:
                self._listeners = [r for r in self._listeners if r not in dead]

    def __repr__(self) -> str:
        return f"ManualClock(now_ms={self._now_ms})"
