"""serve-stomp under load (issue 25, item 4): many STOMP connections sending and receiving with receipts,
a SIGKILL of the server in the middle; and the same load, without the kill, on coilmq's own stores and
through kombu. The driver is tests/helpers/stomp_load.py (on the path in CI), which the load test
(tests/integrations/test_serve_stomp_load.py) runs at a small size. Numbers, command and machine in
docs/benchmarks.md, section "serve-stomp under load".

Groups:
  stomp-load: sigkill   CONNECTIONS connections (half producers, half consumers, QUEUES queues) for
                        SECONDS s on `journal-engine serve-stomp`, SIGKILLed at half time and restarted
                        on its directory and port: nothing receipted lost, nothing received again after
                        its ACK's RECEIPT, no traceback in either life
  (both: producers wait while BACKLOG_PER_QUEUE messages a queue are not yet received)
  stomp-load: compared  the same load for COMPARED_SECONDS s, no kill, on each target in turn, ROUNDS
                        rounds interleaved (target order rotated each round), a fresh server each time:
                          journal          serve-stomp on the journal
                          coilmq-memory    coilmq 1.1.0's server on its MemoryQueue (nothing on disk)
                          coilmq-dbm       on its DbmQueue (shelve; never fsyncs)
                          coilmq-sqlalchemy  on its SAQueue, SQLite in a file (an fsync per commit)
                          kombu            kombu Producer.publish / message.ack() with the journal-engine
                                           transport, on serve-stomp on the journal
                        and, ACKs sent without a receipt, journal and coilmq-memory again
                        ("... no ACK receipt"), and coilmq-memory with TCP_NODELAY set on its
                        connections ("..., TCP_NODELAY"): coilmq's server writes the next MESSAGE and
                        an ACK's RECEIPT as two small writes, and Nagle's algorithm holds the second
Sizes from the environment (JOURNAL_BENCH_STOMP_CONNECTIONS, _SECONDS, _COMPARED_SECONDS, _ROUNDS); under
--benchmark-disable (CI's smoke run) each defaults to a tiny load, one round.
"""
from __future__ import annotations

import os
import shutil
import statistics

import pytest

pytest.importorskip("coilmq", reason="coilmq is not installed (pip install 'journal_engine[bench]')")
from stomp_load import KilledServer, queue_name, run_load  # noqa: E402  (tests/helpers, on the path in CI)

FULL = {"CONNECTIONS": 50, "SECONDS": 60.0, "COMPARED_SECONDS": 20.0, "ROUNDS": 3}
SMOKE = {"CONNECTIONS": 4, "SECONDS": 3.0, "COMPARED_SECONDS": 1.5, "ROUNDS": 1}
TARGETS = ["journal", "coilmq-memory", "coilmq-dbm", "coilmq-sqlalchemy", "kombu",
           "journal, no ACK receipt", "coilmq-memory, no ACK receipt", "coilmq-memory, TCP_NODELAY"]


def size(benchmark, name: str) -> float:
    default = (SMOKE if benchmark.disabled else FULL)[name]
    return type(default)(os.environ.get(f"JOURNAL_BENCH_STOMP_{name}", default))


BACKLOG_PER_QUEUE = 200


def queues_for(connections: int) -> int:
    """One queue per ten connections: 50 connections, 5 queues of 5 producers and 5 consumers."""
    return max(1, connections // 10)


def load(port: int, connections: int, seconds: float, **options):
    """The load of both groups: producers wait while BACKLOG_PER_QUEUE messages a queue are not yet
    received, so sends and receives keep pace and the rate is the slower side's."""
    queues = queues_for(connections)
    return run_load(port, connections=connections, queues=queues, duration_s=seconds,
                    backlog_max=BACKLOG_PER_QUEUE * queues, **options)


@pytest.mark.benchmark(group="stomp-load: sigkill")
def test_load_with_a_sigkill_in_the_middle(benchmark, case_dir):
    connections, seconds = int(size(benchmark, "CONNECTIONS")), size(benchmark, "SECONDS")
    server = KilledServer.serve_stomp(case_dir / "store", case_dir)
    results = []

    def one_run() -> None:
        results.append(load(server.port, connections, seconds, kill=server.kill, kill_at_s=seconds / 2))

    try:
        benchmark.pedantic(one_run, rounds=1, iterations=1)
    finally:
        status = server.stop()
    result = results[0]
    print(result.summary())
    assert not result.violations(), result.violations()
    assert not server.tracebacks(), server.tracebacks()
    assert status == 0
    benchmark.extra_info.update(
        connections=connections, seconds=seconds, queues=queues_for(connections),
        receipted=len(result.receipted), received=len(result.received), duplicates=result.duplicates,
        sent_per_s=round(result.sent_per_s), received_per_s=round(result.received_per_s),
        backlog_at_kill=result.backlog_at_kill, down_s=round(result.down_s, 2), reconnects=result.reconnects,
        client_cpu_s=round(result.client_cpu_s, 1), loadavg=os.getloadavg())


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _server_for(target: str, directory):
    if target.startswith("coilmq-"):
        return KilledServer.coilmq(target.split(",")[0].removeprefix("coilmq-"), directory,
                                   nodelay=target.endswith("TCP_NODELAY"))
    return KilledServer.serve_stomp(directory / "store", directory)


@pytest.mark.benchmark(group="stomp-load: compared")
def test_the_same_load_on_coilmq_stores_and_through_kombu(benchmark, case_dir):
    pytest.importorskip("kombu", reason="kombu is not installed (pip install 'journal_engine[celery]')")
    pytest.importorskip("sqlalchemy", reason="SQLAlchemy 1.x is not installed (coilmq's SQL store needs it)")
    import journal_engine.integrations.kombu  # noqa: F401  (registers journal-engine://)

    connections, seconds = int(size(benchmark, "CONNECTIONS")), size(benchmark, "COMPARED_SECONDS")
    rounds = int(size(benchmark, "ROUNDS"))
    # per round: sent/s, received/s, the server's and the clients' CPU seconds per second
    rates: dict[str, list[tuple[float, float, float, float]]] = {target: [] for target in TARGETS}
    loads: list[tuple[float, float, float]] = []

    def all_rounds() -> None:
        for number in range(rounds):
            for target in TARGETS[number % len(TARGETS):] + TARGETS[:number % len(TARGETS)]:
                directory = case_dir / f"{target.replace(', ', '-').replace(' ', '-')}-{number}"
                directory.mkdir()
                server = _server_for(target, directory)
                pid = server.lives[-1].process.pid
                try:
                    server_cpu_before_s = cpu_s(pid)
                    result = load(server.port, connections, seconds, flow="kombu" if target == "kombu" else "stomp",
                                  ack_receipts="no ACK receipt" not in target,
                                  redelivered_flag=not target.startswith("coilmq-"))
                    server_cpu_s = cpu_s(pid) - server_cpu_before_s
                finally:
                    server.stop()
                print(f"{target}: {result.summary()}")
                assert not result.violations(), (target, result.violations())
                if not target.startswith("coilmq-"):    # coilmq's server prints a traceback for a client's reset
                    assert not server.tracebacks(), (target, server.tracebacks())
                rates[target].append((result.sent_per_s, result.received_per_s, server_cpu_s / result.last_receive_s,
                                      result.client_cpu_s / result.last_receive_s))
                loads.append(os.getloadavg())
                shutil.rmtree(directory, ignore_errors=True)

    benchmark.pedantic(all_rounds, rounds=1, iterations=1)
    table = {}
    for target, samples in rates.items():
        table[target] = {name: [round(f(column), 2) for f in (statistics.median, min, max)]
                         for name, column in zip(("sent_per_s", "received_per_s", "server_cpu_s_per_s",
                                                  "client_cpu_s_per_s"), zip(*samples))}
        print(f"{target}: {table[target]} (median, min, max)")
    benchmark.extra_info.update(connections=connections, seconds=seconds, rounds=rounds,
                                queues=[queue_name(i) for i in range(queues_for(connections))], table=table,
                                loadavg_min=[min(load[0] for load in loads)],
                                loadavg_max=[max(load[0] for load in loads)])
