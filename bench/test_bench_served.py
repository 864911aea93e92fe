"""The served workloads of issue 40 through `journal-engine bench --served`'s own code
(journal_engine/benchmarking/served_runner.py): our server (`journal-engine serve-stomp`) and the
targets of JOURNAL_BENCH_SERVED_TARGETS, interleaved rounds, a fresh broker for each workload. The
client is journal_engine/benchmarking/served_workload.py: raw STOMP 1.2 on asyncio, producers and
consumers in two child processes, 256-byte persistent messages, consumers ``ack:client-individual``
with a prefetch of 100.

Group "served: compared", one case:
  receipted N    N producers, each waiting for its RECEIPT before the next SEND, and N consumers,
                 SECONDS s: receipted messages/s, p50/p99 send -> RECEIPT, fdatasyncs per message
  ingest         8 producers without receipts, MESSAGES in all (each producer's last SEND receipted)
  drain          that backlog taken by 8 consumers, ACKing each
Sizes from the environment (JOURNAL_BENCH_SERVED_SECONDS, _MESSAGES, _ROUNDS, _PRODUCERS as "1,8,32",
_TARGETS as "served,coilmq", the default: the coilmq-based server our server replaced; rabbitmq and
activemq are the command's, `journal-engine bench --served`). Under --benchmark-disable (CI's smoke run)
0.3 s phases on our server alone, about 5 s. Numbers, command and machine in docs/benchmarks.md,
"The served broker against RabbitMQ and ActiveMQ".
"""
from __future__ import annotations

import os

import pytest

from journal_engine.benchmarking import served_peers, served_runner

FULL = {"SECONDS": 3.0, "MESSAGES": 20000, "ROUNDS": 3, "PRODUCERS": "1,8,32", "TARGETS": "served,coilmq"}
SMOKE = {"SECONDS": 0.3, "MESSAGES": 400, "ROUNDS": 1, "PRODUCERS": "1,8", "TARGETS": "served"}


def size(benchmark, name: str):
    default = (SMOKE if benchmark.disabled else FULL)[name]
    return type(default)(os.environ.get(f"JOURNAL_BENCH_SERVED_{name}", default))


@pytest.mark.benchmark(group="served: compared")
def test_served_workloads_through_the_bench_command(benchmark, case_dir):
    producers = tuple(int(n) for n in size(benchmark, "PRODUCERS").split(","))
    targets = tuple(size(benchmark, "TARGETS").split(","))
    sizes = served_runner.Sizes(rounds=size(benchmark, "ROUNDS"), seconds=size(benchmark, "SECONDS"),
                                messages=size(benchmark, "MESSAGES"), producers=producers, celery=False,
                                celery_tasks=1, targets=targets)
    options = served_runner.Options(directory=case_dir, sizes=sizes, progress=False)
    documents = []
    benchmark.pedantic(lambda: documents.append(served_runner.run(options)), rounds=1, iterations=1)
    document = documents[0]
    failed = [skip for skip in document["skipped"] if skip["reason"].startswith("failed")]
    assert not failed, failed
    table = {f"{r['target']}: {r['workload']}": {key: r[key] for key in ("median_per_s", "min_per_s", "max_per_s",
                                                                          "p50_ms", "p99_ms", "fdatasyncs_per_message")}
             for r in document["results"]}
    ran = {r["target"] for r in document["results"]}
    installed = [t for t in targets if served_peers.BROKERS[t].unavailable() is None]
    assert ran == set(installed), (ran, document["skipped"])
    for target in installed:
        for workload in [f"receipted {n}" for n in producers] + ["ingest", "drain"]:
            assert table[f"{target}: {workload}"]["median_per_s"] > 0
    served = {r["workload"]: r for r in document["results"] if r["target"] == "served"}
    assert all(r["fdatasyncs_per_message"] is not None for r in served.values())
    benchmark.extra_info.update(seconds=sizes.seconds, messages=sizes.messages, rounds=sizes.rounds,
                                producers=list(producers), targets=list(targets), table=table,
                                peers=document["peers"], loadavg=os.getloadavg())
