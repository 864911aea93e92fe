"""The queues' counts over the last minutes: a ring of samples a queue, taken on the event loop.

Every CONSOLE_SAMPLE_PERIOD_S the sampler reads each queue's QueueInfo (one ``Broker.queue`` call a
queue: counts only, no message is touched) and keeps the last CONSOLE_SAMPLES_KEPT samples. A rate is
the difference of two samples' cumulative counts (messages added, acknowledged, killed: sent,
acknowledged, dead-lettered) over their time; the Queues page draws the rings and its script asks
``/api/queues`` for the newest figures.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass

from ..limits import CONSOLE_SAMPLE_PERIOD_S, CONSOLE_SAMPLES_KEPT

__all__ = ["Sample", "Rates"]


@dataclass(frozen=True)
class Sample:
    at: float           # time.time()
    depth: int
    added: int
    acknowledged: int
    killed: int


class Rates:
    """The rings of every queue the source lists (a queue gone is dropped at the next sample)."""

    def __init__(self, source, *, period_s: float = CONSOLE_SAMPLE_PERIOD_S, kept: int = CONSOLE_SAMPLES_KEPT) -> None:
        self.source = source
        self.period_s = period_s
        self.kept = kept
        self.rings: dict[str, deque[Sample]] = {}
        self._task: asyncio.Task | None = None

    def sample(self) -> None:
        now = time.time()
        seen = set()
        for row in self.source.queues():
            seen.add(row.name)
            ring = self.rings.get(row.name)
            if ring is None:
                ring = self.rings[row.name] = deque(maxlen=self.kept)
            ring.append(Sample(now, row.depth, row.added, row.acknowledged, row.killed))
        for gone in set(self.rings) - seen:
            del self.rings[gone]

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.period_s)

    def rates(self, name: str) -> dict:
        """Sends, acknowledgements and dead letters a second between the last two samples, and over the
        whole ring; 0.0 with fewer than two samples."""
        ring = self.rings.get(name)
        result = {"send": 0.0, "ack": 0.0, "dead": 0.0, "send_avg": 0.0, "ack_avg": 0.0, "dead_avg": 0.0}
        if ring is None or len(ring) < 2:
            return result
        for suffix, first in (("", ring[-2]), ("_avg", ring[0])):
            last = ring[-1]
            seconds = max(last.at - first.at, 1e-6)
            result["send" + suffix] = (last.added - first.added) / seconds
            result["ack" + suffix] = (last.acknowledged - first.acknowledged) / seconds
            result["dead" + suffix] = (last.killed - first.killed) / seconds
        return result

    def series(self, name: str) -> dict[str, list[float]]:
        """Per interval between samples: sends, acks and dead letters a second, and the depth."""
        ring = list(self.rings.get(name, ()))
        send, ack, dead, depth = [], [], [], []
        for first, last in zip(ring, ring[1:]):
            seconds = max(last.at - first.at, 1e-6)
            send.append((last.added - first.added) / seconds)
            ack.append((last.acknowledged - first.acknowledged) / seconds)
            dead.append((last.killed - first.killed) / seconds)
            depth.append(float(last.depth))
        return {"send": send, "ack": ack, "dead": dead, "depth": depth}
