"""Takeover time of `serve-stomp --backup` (the shared-store failover issue): from the SIGKILL of the
live server to the first RECEIPT the backup sends, with MESSAGES messages waiting in the store.

A live server is filled with MESSAGES messages of BODY_BYTES (pipelined SENDs, the last of each batch
receipted), a backup waits on the same directory; then KILLS times: SIGKILL the live server, and a
client connects to the backup's port (retrying a refused connect every PROBE_PAUSE_S), CONNECTs and
sends one receipted SEND; the time to that RECEIPT is one takeover (the kill's reaping, the backup's
lock, its recovery of the whole store, its bind, the client's connect). A new backup is then started on
the freed port and waits before the next kill. Reported: p50 and p99 (with few kills, p99 is the
slowest), min and max, in ``extra_info``. Afterwards, untimed: the store still holds every message.

Sizes: JOURNAL_BENCH_TAKEOVER_MESSAGES (default 1,000,000; 2,000 under --benchmark-disable, CI's smoke
run), JOURNAL_BENCH_TAKEOVER_KILLS (default 10; 2 under --benchmark-disable). Figures, command and
machine in docs/benchmarks.md, "Takeover of a backup".
Run: ``python -m pytest bench/test_bench_takeover.py --benchmark-only -s``.
"""
from __future__ import annotations

import os
import statistics
import time

import pytest
from failover_pair import FailoverPair  # tests/helpers, on the path in CI
from stomp_server import RawClient, frame_bytes

from journal_engine import Broker

FULL = {"MESSAGES": 1_000_000, "KILLS": 10}
SMOKE = {"MESSAGES": 2_000, "KILLS": 2}
BODY_BYTES = 64
BATCH = 5_000
PROBE_PAUSE_S = 0.001
PROBE_DEADLINE_S = 120.0
WAITING_QUEUE = "/queue/waiting"


def size(benchmark, name: str) -> int:
    default = (SMOKE if benchmark.disabled else FULL)[name]
    return int(os.environ.get(f"JOURNAL_BENCH_TAKEOVER_{name}", default))


def fill(port: int, count: int) -> None:
    """``count`` messages into WAITING_QUEUE, BATCH frames a write, the last of each batch receipted."""
    client = RawClient(port)
    client.connect("1.2")
    body = b"w" * BODY_BYTES
    plain = frame_bytes("SEND", {"destination": WAITING_QUEUE}, body)
    for start in range(0, count, BATCH):
        batch = min(BATCH, count - start)
        last = frame_bytes("SEND", {"destination": WAITING_QUEUE, "receipt": f"b{start}"}, body)
        client.send_raw(plain * (batch - 1) + last)
        command, headers, _ = client.read_frame(60.0)
        assert (command, headers.get("receipt-id")) == ("RECEIPT", f"b{start}"), (command, headers)
    client.close()


def first_receipt(port: int, killed_at: float) -> float:
    """Seconds from ``killed_at`` to the RECEIPT of a SEND to the server at ``port`` (connecting as soon as
    it accepts)."""
    deadline = killed_at + PROBE_DEADLINE_S
    while True:
        try:
            client = RawClient(port)
            break
        except ConnectionRefusedError:
            assert time.monotonic() < deadline, f"the backup did not accept connections in {PROBE_DEADLINE_S} s"
            time.sleep(PROBE_PAUSE_S)
    try:
        client.connect("1.2")
        client.send_raw(frame_bytes("SEND", {"destination": "/queue/probe", "receipt": "probe"}, b"probe"))
        command, headers, _ = client.read_frame(PROBE_DEADLINE_S)
        took = time.monotonic() - killed_at
        assert (command, headers.get("receipt-id")) == ("RECEIPT", "probe"), (command, headers)
        return took
    finally:
        client.close()


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile: with fewer than 100 values, p99 is the largest."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(-(-share * len(ordered) // 1)) - 1))]


@pytest.mark.benchmark(group="takeover")
def test_takeover_time_with_messages_waiting(benchmark, case_dir):
    messages, kills = size(benchmark, "MESSAGES"), size(benchmark, "KILLS")
    pair = FailoverPair(case_dir / "store", case_dir)
    takeovers: list[float] = []
    try:
        fill(pair.live.port, messages)

        def all_kills() -> None:
            for _ in range(kills):
                killed_at = pair.sigkill()
                takeovers.append(first_receipt(pair.backup.port, killed_at))
                pair.backup.listening()
                pair.promote()

        benchmark.pedantic(all_kills, rounds=1, iterations=1)
    finally:
        statuses = pair.stop()
    assert statuses == (0, 0)
    assert not pair.tracebacks(), pair.tracebacks()
    broker = Broker(case_dir / "store")
    try:
        assert broker.queue(WAITING_QUEUE).message_count == messages
        assert broker.queue("/queue/probe").message_count == kills
    finally:
        broker.close()
    figures = dict(messages_waiting=messages, kills=kills, p50_s=round(statistics.median(takeovers), 3),
                   p99_s=round(percentile(takeovers, 0.99), 3), min_s=round(min(takeovers), 3),
                   max_s=round(max(takeovers), 3), takeovers_s=[round(took, 3) for took in takeovers],
                   loadavg=os.getloadavg())
    print(figures)
    benchmark.extra_info.update(figures)
