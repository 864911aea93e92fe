"""What every benchmark writes, and the shapes of work measured: the one place a workload is defined.

Both `journal-engine bench` (journal_engine.benchmarking.runner) and the developers' pytest-benchmark
suite in bench/ take their records from here: fixed random bytes, so that no store gains from
compression, and 8-byte big-endian keys (the record id) for the key-value peers.

Work shapes:

* ``AppendCell``: one cell of the append matrix — record size x records per sync x sync mode x
  threads. Each thread writes its own ids in commits of ``records_per_sync`` records; in the
  ``"durable"`` mode a commit returns once its records are on the disk (one fdatasync or the store's
  own equivalent), in ``"none"`` once they are handed over (to the OS, or to the journal's buffer).
* ``QueueCell``: the broker's loops — send -> receive -> ack, and receive -> rollback -> redeliver.
* ``RecoveryCell``: open a store holding ``records`` records and read every one back.

How a cell's threads wait for their commits is a ``WAITER_KINDS`` entry. Asyncio waiters are not
there yet: see the marked place below.
"""
from __future__ import annotations

import random
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

RECORD_BYTES = 256                       # the bench/ suite's record, and the command's default size
BODY = random.Random(2024).randbytes(RECORD_BYTES)
KEY = struct.Struct(">Q")                # the key-value peers' key: the record id, big-endian
USER_TYPE = 1                            # the user record type the journal and the LMDB store write

SYNC_DURABLE = "durable"
SYNC_NONE = "none"
SYNC_MODES = (SYNC_DURABLE, SYNC_NONE)


def body_of(record_bytes: int) -> bytes:
    """The body of a record of `record_bytes` bytes: the same seeded random bytes for every store."""
    if record_bytes == RECORD_BYTES:
        return BODY
    return random.Random(2024).randbytes(record_bytes)


@dataclass(frozen=True)
class AppendCell:
    """One cell of the append matrix; `records` is the round's total over all threads."""

    record_bytes: int
    records_per_sync: int
    sync: str
    threads: int
    records: int

    def __post_init__(self) -> None:
        if self.sync not in SYNC_MODES:
            raise ValueError(f"sync={self.sync!r}: use one of {', '.join(SYNC_MODES)}")
        if self.records % (self.threads * self.records_per_sync):
            raise ValueError(f"{self.records} records do not split into {self.threads} threads "
                             f"x commits of {self.records_per_sync}")

    @property
    def key(self) -> str:
        return f"{self.record_bytes}B x{self.records_per_sync}/sync {self.sync} {self.threads}t"

    @property
    def commits_per_thread(self) -> int:
        return self.records // (self.threads * self.records_per_sync)


@dataclass(frozen=True)
class QueueCell:
    """A broker loop: `operation` is "send-receive-ack" or "rollback-redeliver"."""

    operation: str
    messages: int
    record_bytes: int = RECORD_BYTES
    in_flight: int = 100                 # rollback-redeliver: messages delivered before each rollback pass
    peer_messages: int = 0               # per round for the peers (a sync per call: slow); 0: `messages`

    def messages_for(self, ours: bool) -> int:
        return self.messages if ours or not self.peer_messages else self.peer_messages

    @property
    def key(self) -> str:
        return f"{self.operation} {self.record_bytes}B"


@dataclass(frozen=True)
class RecoveryCell:
    records: int
    record_bytes: int = RECORD_BYTES

    @property
    def key(self) -> str:
        return f"recovery of {self.records} x {self.record_bytes}B"


@dataclass
class Commits:
    """What one timed round of an append cell did: per-commit latencies in seconds (durable cells)."""

    latencies_s: list[float] = field(default_factory=list)


Commit = Callable[[int, int, bytes], object]     # commit(first_id, count, body)


def run_commits_in_threads(commit: Commit, cell: AppendCell, *, timed: bool) -> "ThreadGang":
    """Starts the cell's threads (untimed); ThreadGang.run() releases them and waits (timed)."""
    return ThreadGang(commit, cell, record_latency=timed)


class ThreadGang:
    """`cell.threads` threads started in the untimed set-up, released together by run().

    Each thread commits its own ids, `records_per_sync` at a time, and keeps the latency of each
    commit when asked (a perf_counter pair per commit: well under a microsecond against a sync).
    """

    def __init__(self, commit: Commit, cell: AppendCell, *, record_latency: bool = True) -> None:
        self._go = threading.Event()
        self.errors: list[BaseException] = []
        self.latencies_s: list[list[float]] = [[] for _ in range(cell.threads)]
        body = body_of(cell.record_bytes)
        per_thread = cell.records // cell.threads
        self._threads = [threading.Thread(target=self._work, daemon=True,
                                          args=(index, commit, index * per_thread, cell.commits_per_thread,
                                                cell.records_per_sync, body, record_latency))
                         for index in range(cell.threads)]
        for thread in self._threads:
            thread.start()

    def _work(self, index: int, commit: Commit, first: int, commits: int, per_commit: int, body: bytes,
              record_latency: bool) -> None:
        self._go.wait()
        latencies = self.latencies_s[index]
        clock = time.perf_counter
        try:
            for first_id in range(first, first + commits * per_commit, per_commit):
                if record_latency:
                    started = clock()
                    commit(first_id, per_commit, body)
                    latencies.append(clock() - started)
                else:
                    commit(first_id, per_commit, body)
        except BaseException as exc:   # raised again by run(), inside the timed region's caller
            self.errors.append(exc)

    def run(self) -> None:
        self._go.set()
        for thread in self._threads:
            thread.join()
        if self.errors:
            raise self.errors[0]

    def commits(self) -> Commits:
        return Commits([latency for per_thread in self.latencies_s for latency in per_thread])


# How a cell's writers wait for their commits. Threads block in the store's call.
WAITER_KINDS: dict[str, Callable[..., ThreadGang]] = {"threads": run_commits_in_threads}
# ---- ASYNCIO WAITERS: not yet. ----------------------------------------------------------------------
# The core-speed issue adds awaitable syncs to the journal. When it lands, add here an entry
# "asyncio": a runner with ThreadGang's interface (run(), commits()) whose writers are coroutines on
# one event loop awaiting each commit; add "asyncio" to the matrices' `waiters` below and give the
# stores that can wait without a thread an async commit in peers.py. Until then the matrix has no
# asyncio axis and prints nothing about it.
# -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Matrix:
    """The cells one run measures, and how many interleaved rounds each gets."""

    name: str
    append: tuple[AppendCell, ...]
    queue: tuple[QueueCell, ...]
    recovery: tuple[RecoveryCell, ...]
    rounds: int
    waiters: tuple[str, ...] = ("threads",)
    limit_samples: int = 2000            # raw fdatasync samples of the machine's limit
    bandwidth_bytes: int = 256 << 20     # bytes written for the sequential bandwidth


def _records_for(record_bytes: int, records_per_sync: int, threads: int, sync: str, *,
                 commits: int, max_bytes: int, max_records: int) -> int:
    """Records per round: `commits` commits (at least one per thread), at most `max_bytes` of payload
    and at most `max_records` records (the slowest peers take ~20 us per record without a sync)."""
    cap = min(max_records, max_bytes // record_bytes)
    if sync == SYNC_NONE:
        records = cap
    else:
        records = min(commits * records_per_sync, max(cap, records_per_sync * threads))
    unit = threads * records_per_sync
    return max(unit, records // unit * unit)


def append_cells(record_sizes: Sequence[int], per_sync: Sequence[int], thread_counts: Sequence[int], *,
                 commits: int, max_bytes: int, max_records: int,
                 no_sync_sizes: Sequence[int] | None = None) -> tuple[AppendCell, ...]:
    """Durable cells over every combination; no-sync cells (one record per commit, one thread) per size."""
    cells = [AppendCell(size, n, SYNC_DURABLE, threads,
                        _records_for(size, n, threads, SYNC_DURABLE, commits=commits, max_bytes=max_bytes,
                                     max_records=max_records))
             for size in record_sizes for n in per_sync for threads in thread_counts]
    for size in (record_sizes if no_sync_sizes is None else no_sync_sizes):
        cells.append(AppendCell(size, 1, SYNC_NONE, 1,
                                _records_for(size, 1, 1, SYNC_NONE, commits=commits, max_bytes=max_bytes,
                                             max_records=max_records)))
    return tuple(cells)


def full_matrix() -> Matrix:
    return Matrix("full",
                  append_cells((64, 256, 4096), (1, 10, 100, 1000), (1, 4, 16),
                               commits=400, max_bytes=32 << 20, max_records=100_000),
                  (QueueCell("send-receive-ack", 20_000, peer_messages=2_000),
                   QueueCell("rollback-redeliver", 20_000, peer_messages=2_000)),
                  (RecoveryCell(200_000),),
                  rounds=5)


def quick_matrix() -> Matrix:
    return Matrix("quick",
                  append_cells((256,), (1, 10, 100), (1, 4), commits=300, max_bytes=16 << 20, max_records=50_000),
                  (QueueCell("send-receive-ack", 3_000, peer_messages=300),
                   QueueCell("rollback-redeliver", 3_000, peer_messages=300)),
                  (RecoveryCell(50_000),),
                  rounds=5, limit_samples=1000, bandwidth_bytes=64 << 20)


def tiny_matrix() -> Matrix:
    """For the test suite: every scenario and store once, as small as still says something."""
    return Matrix("tiny",
                  append_cells((256,), (1, 10), (1, 2), commits=20, max_bytes=1 << 20, max_records=2_000),
                  (QueueCell("send-receive-ack", 60, peer_messages=30),
                   QueueCell("rollback-redeliver", 60, in_flight=10, peer_messages=30)),
                  (RecoveryCell(2_000),),
                  rounds=2, limit_samples=100, bandwidth_bytes=8 << 20)


MATRICES: dict[str, Callable[[], Matrix]] = {"full": full_matrix, "quick": quick_matrix, "tiny": tiny_matrix}
