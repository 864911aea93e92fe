"""The broker's timers: references scheduled for a later delivery, READY references that will expire,
and the periodic scans (``PeriodicScan``; on the wall clock a ``BackgroundScanner`` thread runs them).

A scheduled reference (sent with a delivery time, or waiting for its redelivery delay) waits in a heap
until due, then goes to the HEAD of its queue, earliest first, as Artemis's ScheduledDeliveryHandler
adds them. A READY reference with an expiration is watched in a second heap so the reaper finds it
without scanning queues. Why one object: enqueueing, redelivery and the reaper all put references on
these heaps, and the heaps and their tiebreak (the order of equal times) belong to nobody else.
Not thread-safe on its own: every method runs with the broker's lock held.
"""
from __future__ import annotations

import heapq
import itertools
import threading
import weakref
from collections.abc import Callable

from ..limits import I64_MAX
from .queue import READY, SCHEDULED, QueueState, Reference

__all__ = ["DeliveryTimers", "PeriodicScan", "BackgroundScanner", "NEVER_MS", "SCAN_PERIOD_MS_DEFAULT"]

#: a time no scan reaches (Java's Long.MAX_VALUE, past any epoch ms)
NEVER_MS = I64_MAX
#: Artemis's DEFAULT_MESSAGE_EXPIRY_SCAN_PERIOD and DEFAULT_ADDRESS_QUEUE_SCAN_PERIOD (ms); Classic's
#: BaseDestination.EXPIRE_MESSAGE_PERIOD is the same 30 s (classic.config.EXPIRE_MESSAGES_PERIOD_MS_DEFAULT)
SCAN_PERIOD_MS_DEFAULT = 30_000


class DeliveryTimers:
    """The scheduled-delivery heap and the expiry heap. ``wake_waiters``: a newly scheduled reference
    wakes the sleeping receivers of its queue so they recompute their wait (not with a manual clock,
    whose moves wake them instead). ``watch_expiry=False`` (no expiry scan): expiring references are not
    watched, a consumer meeting them expires them. ``scan_time``: a watched reference is due for the
    expiry scan at ``scan_time(ref)`` (None: never) instead of at its expiration (a seed system whose
    destinations scan at their own periods: classic.expiry_scans)."""

    __slots__ = ("_scheduled", "_expiring", "_tiebreak", "_wake_waiters", "_watch_expiry", "pending",
                 "on_first_expiry", "_scan_time")

    def __init__(self, *, wake_waiters: bool, watch_expiry: bool = True,
                 scan_time: Callable[[Reference], int | None] | None = None) -> None:
        self._watch_expiry = watch_expiry
        self._scan_time = scan_time
        # called (lock held) when a reference is watched while none was: the wall clock's scanner, which
        # sleeps past the expiry scans while there is nothing to expire, looks again
        self.on_first_expiry: Callable[[], None] | None = None
        self._scheduled: list = []          # heap of (due ms, tiebreak, reference)
        self._expiring: list = []           # heap of (expiration or scan_time ms, tiebreak, reference), READY
        self._tiebreak = itertools.count()
        self._wake_waiters = wake_waiters
        # Is anything scheduled or watched for expiry? A plain attribute, because every receive reads it:
        # read it freely; every method below that changes a heap keeps it current.
        self.pending = False

    def clear(self) -> None:
        """Forget every scheduled and watched reference (a closed broker's)."""
        self._scheduled.clear()
        self._expiring.clear()
        self.pending = False

    def next_due_ms(self) -> int | None:
        """The earliest scheduled time (epoch ms; stale entries included), or None."""
        scheduled = self._scheduled
        return scheduled[0][0] if scheduled else None

    def schedule(self, ref: Reference, due_ms: int) -> None:
        """Keep ``ref`` out of reach until ``due_ms`` (its state becomes SCHEDULED)."""
        queue = ref.queue
        ref.schedule()
        queue.scheduled += 1
        heapq.heappush(self._scheduled, (due_ms, next(self._tiebreak), ref))
        self.pending = True
        if queue.waiters and self._wake_waiters:
            queue.condition.notify_all()        # a sooner due time: sleeping receivers recompute their wait

    def watch_expiry(self, ref: Reference) -> None:
        """Watch a READY reference whose message has an expiration, for the reaper."""
        if not self._watch_expiry:
            return
        if self._scan_time is None:
            due_ms = ref.data.expiration
        else:
            due_ms = self._scan_time(ref)
            if due_ms is None:
                return
        expiring = self._expiring
        first = not expiring
        heapq.heappush(expiring, (due_ms, next(self._tiebreak), ref))
        self.pending = True
        if first and self.on_first_expiry is not None:
            self.on_first_expiry()

    def release_due(self, now: int) -> None:
        """Scheduled references due by ``now`` go to the head of their queues, earliest first; those with
        an expiration are watched; one receiver per released reference is woken."""
        heap = self._scheduled
        if heap and heap[0][0] <= now:
            due: dict[QueueState, list[Reference]] = {}
            while heap and heap[0][0] <= now:
                ref = heapq.heappop(heap)[2]
                if ref.state != SCHEDULED:
                    continue
                ref.fall_due()
                ref.queue.scheduled -= 1
                due.setdefault(ref.queue, []).append(ref)
            for queue, refs in due.items():
                queue.put_back(refs)
                for ref in refs:
                    if ref.data.expiration:
                        self.watch_expiry(ref)
                if queue.waiters:
                    queue.condition.notify(len(refs))
            self.pending = bool(heap or self._expiring)

    def next_event_ms(self) -> int | None:
        """The earliest time anything watched may happen (a scheduled delivery falls due, a watched
        reference expires; stale entries included), or None."""
        scheduled = self._scheduled
        expiring = self._expiring
        if scheduled:
            return min(scheduled[0][0], expiring[0][0]) if expiring else scheduled[0][0]
        return expiring[0][0] if expiring else None

    def next_expiration_ms(self) -> int | None:
        """The earliest watched expiration (stale entries included), or None."""
        expiring = self._expiring
        return expiring[0][0] if expiring else None

    def pop_expired(self, now: int) -> Reference | None:
        """The next watched reference that is still READY and expired by ``now`` (taken off the heap), or
        None. Entries of references that left READY meanwhile are dropped on the way."""
        expiring = self._expiring
        ref = None
        while expiring and expiring[0][0] <= now:
            candidate = heapq.heappop(expiring)[2]
            if candidate.state == READY:
                ref = candidate
                break
        self.pending = bool(self._scheduled or expiring)
        return ref

    def scheduled_on(self, queue: QueueState) -> list[Reference]:
        """The references of ``queue`` that are scheduled now."""
        return [entry[2] for entry in self._scheduled if entry[2].queue is queue and entry[2].state == SCHEDULED]

    def scheduled_page(self, queue: QueueState, limit: int, scan_max: int) -> tuple[list[tuple[int, Reference]], bool]:
        """At most ``limit`` scheduled references of ``queue`` with their due times, soonest first, found
        among the first ``scan_max`` entries of the heap (any queue's); and whether entries were left
        unread (the operator's console lists them so, without holding the lock for a long heap)."""
        found = []
        for due_ms, _tiebreak, ref in itertools.islice(self._scheduled, scan_max):
            if ref.queue is queue and ref.state == SCHEDULED:
                found.append((due_ms, ref))
        found.sort(key=lambda entry: entry[0])
        return found[:limit], len(self._scheduled) > scan_max


class PeriodicScan:
    """A task run every ``period_ms`` from ``start_ms`` (the first run one period after it), as Artemis's
    scheduled components run (the expiry reaper, the address-queue reaper); ``period_ms`` -1 never runs.
    ``next_ms`` is the time of the next run. Why times and not a thread: with a ManualClock the runs
    happen exactly at their times when the clock moves past them; a WallClock broker's BackgroundScanner
    wakes at ``next_ms``."""

    __slots__ = ("period_ms", "start_ms", "next_ms")

    def __init__(self, period_ms: int, start_ms: int) -> None:
        self.period_ms = period_ms
        self.start_ms = start_ms
        self.next_ms = start_ms + period_ms if period_ms > 0 else NEVER_MS

    def rewind_after(self, time_ms: int) -> None:
        """The next run is no later than the first after ``time_ms`` (something changed then)."""
        if self.period_ms > 0:
            first = self.start_ms + ((time_ms - self.start_ms) // self.period_ms + 1) * self.period_ms
            self.next_ms = min(self.next_ms, first)

    def skip_to(self, time_ms: int) -> None:
        """The next run is the first at or after ``time_ms`` (runs before it had nothing to do)."""
        if time_ms > self.next_ms:
            periods = -(-(time_ms - self.next_ms) // self.period_ms)
            self.next_ms += periods * self.period_ms

    def ran(self) -> None:
        """The run at ``next_ms`` is done: the next one is a period later."""
        self.next_ms += self.period_ms

    def catch_up(self, now_ms: int) -> None:
        """Runs missed before ``now_ms`` fold into the last one due by then (a late wall-clock run does
        what they would have done, as a scheduled executor runs a late task once)."""
        if self.next_ms + self.period_ms <= now_ms:
            self.skip_to(now_ms - self.period_ms + 1)


class BackgroundScanner:
    """A daemon thread that calls ``run()`` at the times ``next_ms()`` names (None: stop), for a broker on
    the wall clock. Both are bound methods of the broker, held weakly (``weakref.WeakMethod``), so a
    dropped broker is not kept alive by its scanner; ``stop()`` ends the thread."""

    def __init__(self, next_ms: Callable[[], int | None], run: Callable[[], None],
                 now_ms: Callable[[], int]) -> None:
        self._next_ms = weakref.WeakMethod(next_ms)
        self._run = weakref.WeakMethod(run)
        self._now_ms = now_ms
        self._stopped = False
        self._look_again = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="journal-engine-scans", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def look_again(self) -> None:
        """Something may be due sooner than the thread waits for: it asks ``next_ms()`` again."""
        self._look_again.set()

    def _loop(self) -> None:
        while not self._stopped:
            next_ms = self._next_ms()
            due = next_ms() if next_ms is not None else None
            del next_ms
            if due is None:
                return
            wait_s = max(0.0, (due - self._now_ms()) / 1000.0)
            # at least once a minute: is the broker still there?
            if self._look_again.wait(min(wait_s, 60.0)):
                self._look_again.clear()
                continue
            if self._stopped:
                return
            run = self._run()
            if run is None:
                return
            run()
            del run

    def stop(self) -> None:
        """End the thread (a run in progress finishes first), waiting for it at most 5 s."""
        self._stopped = True
        self._look_again.set()
        if self._thread is not threading.current_thread():
            self._thread.join(5.0)
