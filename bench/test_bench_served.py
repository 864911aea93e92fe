"""The served workloads of issue 40 on `journal-engine serve-stomp` (journal_engine/served/, one event
loop) and on the coilmq-based server it replaced (journal_engine.integrations.coilmq.serve, threads),
interleaved rounds, a fresh server for each workload. The client is journal_engine/benchmarking/served_workload.py:
raw STOMP 1.2 on asyncio, producers and consumers in two child processes, 256-byte persistent
messages, consumers ``ack:client-individual`` with ``activemq.prefetchSize:100`` (the old server hands
one message at a time whatever the header says).

Group "served: compared", one row per target and workload:
  receipted N    N producers, each waiting for its RECEIPT before the next SEND, and N consumers,
                 SECONDS s: receipted messages/s, p50/p99 send -> RECEIPT, fdatasyncs per message
                 (the served broker's /journal-engine/stats request; the old server has none)
  ingest         8 producers without receipts, MESSAGES in all (each producer's last SEND receipted)
  drain          that backlog taken by 8 consumers, ACKing each
Sizes from the environment (JOURNAL_BENCH_SERVED_SECONDS, _MESSAGES, _ROUNDS, _PRODUCERS as "1,8,32",
_TARGETS as "served,coilmq"); under --benchmark-disable (CI's smoke run) a few seconds on the served
broker alone. Numbers, command and machine in docs/benchmarks.md, "The served broker".
"""
from __future__ import annotations

import os
import queue
import shutil
import statistics
import subprocess
import sys
import threading

import pytest
from stomp_server import START_TIMEOUT_S, LoggedChild

from journal_engine.benchmarking import served_workload

FULL = {"SECONDS": 3.0, "MESSAGES": 20000, "ROUNDS": 3, "PRODUCERS": "1,8,32", "TARGETS": "served,coilmq"}
SMOKE = {"SECONDS": 0.3, "MESSAGES": 400, "ROUNDS": 1, "PRODUCERS": "1,8", "TARGETS": "served"}

# the coilmq-based server, started as `journal-engine serve-stomp` started it until served/ replaced it
_COILMQ_SERVE = "import sys; from journal_engine.integrations.coilmq import serve; sys.exit(serve(sys.argv[1], 0))"


def size(benchmark, name: str):
    default = (SMOKE if benchmark.disabled else FULL)[name]
    return type(default)(os.environ.get(f"JOURNAL_BENCH_SERVED_{name}", default))


class Target(LoggedChild):
    """A server of ``target`` on a free loopback port, in a child process."""

    def __init__(self, target: str, directory, log) -> None:
        data = str(directory / "store")
        if target == "served":
            command = [sys.executable, "-m", "journal_engine", "serve-stomp", "--data", data, "--port", "0"]
        elif target == "coilmq":
            pytest.importorskip("coilmq", reason="coilmq is not installed (pip install 'journal_engine[bench]')")
            command = [sys.executable, "-c", _COILMQ_SERVE, data]
        else:
            raise ValueError(f"target {target!r}: served or coilmq")
        super().__init__(command, log, env=dict(os.environ), stdout=subprocess.PIPE)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: lines.put(self.process.stdout.readline()), daemon=True).start()
        try:
            line = lines.get(timeout=START_TIMEOUT_S).decode()
        except queue.Empty:
            self.kill()
            raise AssertionError(f"{target} did not start: {self.stderr()[-2000:]}") from None
        self.port = int(line.split("listening on 127.0.0.1:")[1].split()[0])


def _row(phase: served_workload.Phase) -> dict:
    return {"per_s": phase.per_s, "p50_ms": phase.p50_ms, "p99_ms": phase.p99_ms,
            "fdatasyncs_per_message": phase.fdatasyncs_per_message}


@pytest.mark.benchmark(group="served: compared")
def test_served_workloads_on_the_served_broker_and_the_coilmq_based_one(benchmark, case_dir):
    seconds, messages, rounds = size(benchmark, "SECONDS"), size(benchmark, "MESSAGES"), size(benchmark, "ROUNDS")
    producers = [int(n) for n in size(benchmark, "PRODUCERS").split(",")]
    targets = size(benchmark, "TARGETS").split(",")
    samples: dict[tuple[str, str], list[dict]] = {}

    def one(target: str, number: int, workload: str, run) -> None:
        directory = case_dir / f"{target}-{workload.replace(' ', '-')}-{number}"
        directory.mkdir()
        server = Target(target, directory, directory / "server.log")
        try:
            rows = run(server.port)
        finally:
            status = server.stop()
        assert status == 0, server.stderr()[-2000:]
        for name, row in rows.items():
            samples.setdefault((target, name), []).append(row)
            print(f"round {number} {target} {name}: {row}")
        shutil.rmtree(directory, ignore_errors=True)

    def ingest_drain(port: int) -> dict:
        ingest, drain = served_workload.ingest_then_drain(port, 8, 8, messages)
        return {"ingest": _row(ingest), "drain": _row(drain)}

    workloads = [(f"receipted {n}", lambda port, n=n: {f"receipted {n}": _row(served_workload.receipted(port, n, n, seconds))})
                 for n in producers] + [("ingest+drain", ingest_drain)]

    def all_rounds() -> None:
        for number in range(rounds):
            for workload, run in workloads:
                order = targets[number % len(targets):] + targets[:number % len(targets)]
                for target in order:
                    one(target, number, workload, run)

    benchmark.pedantic(all_rounds, rounds=1, iterations=1)
    table = {}
    for (target, name), rows in samples.items():
        table[f"{target}: {name}"] = {
            column: round(statistics.median(values), 3)
            for column in rows[0] if (values := [row[column] for row in rows if row[column] is not None])}
        print(f"{target}: {name}: {table[f'{target}: {name}']} (medians of {len(rows)})")
    for target in targets:
        assert all(table[f"{target}: {name}"]["per_s"] > 0 for name in [f"receipted {n}" for n in producers])
    benchmark.extra_info.update(seconds=seconds, messages=messages, rounds=rounds, producers=producers,
                                targets=targets, table=table, loadavg=os.getloadavg())
