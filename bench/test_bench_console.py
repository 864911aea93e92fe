"""What serving the operator's console costs the broker's STOMP throughput (issue 43: under 5 %).

Group console: cost. The load of bench/test_bench_stomp_load.py's compared group (CONNECTIONS
connections, half producing with receipts, half consuming with receipted ACKs, producers held at
BACKLOG_PER_QUEUE a queue) for SECONDS s on a fresh `journal-engine serve-stomp` each time, ROUNDS
rounds, the two variants interleaved (their order swapped each round):

  without console          serve-stomp as it runs without --http
  console, page polled     serve-stomp --http 0, and an HTTP client in a process of its own (as a browser
                           is) that every second loads the Queues page, its live counts (/api/queues,
                           what the page's script asks for) and the Dead letters page on one kept-alive
                           connection with its session cookie, as an operator's open, refreshing page
                           does (the page opened before the load starts)

Reported: messages received a second (median, min, max over the rounds) of each variant and the cost
(1 - median with / median without, and 1 - the median of each round's with / without); the server's CPU time a thousand messages received (user + system,
/proc/PID/stat), which a machine shared with other work disturbs less than a rate; and the pages the
poller loaded. Sizes from the environment
(JOURNAL_BENCH_CONSOLE_CONNECTIONS, _SECONDS, _ROUNDS); under --benchmark-disable (CI's smoke run) a
tiny load, one round, whose checks still hold: nothing receipted lost, the pages answered 200.
Numbers, command and machine in docs/benchmarks.md, section "The console's cost".
"""
from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import urllib.parse

import pytest
from stomp_load import run_load  # noqa: E402  (tests/helpers, on the path in CI)
from stomp_server import Server, has_traceback

FULL = {"CONNECTIONS": 20, "SECONDS": 15.0, "ROUNDS": 5}
SMOKE = {"CONNECTIONS": 4, "SECONDS": 1.5, "ROUNDS": 1}
VARIANTS = ["without console", "console, page polled"]
BACKLOG_PER_QUEUE = 200
POLL_PERIOD_S = 1.0
PAGES = ("/queues", "/api/queues", "/dead-letters")


def size(benchmark, name: str) -> float:
    default = (SMOKE if benchmark.disabled else FULL)[name]
    return type(default)(os.environ.get(f"JOURNAL_BENCH_CONSOLE_{name}", default))


# the poller: a process of its own, as a browser is (in the load's process its HTTP parsing would take
# the GIL from the load's client threads and be counted as the server's cost)
_POLLER = r"""
import http.client, signal, sys, threading, urllib.parse
host, port, period = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
paths = sys.argv[4:]
connection = http.client.HTTPConnection(host, port, timeout=10)
cookie, loaded, failed = None, 0, []
stopped = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stopped.set())
def load_pages():
    global cookie, loaded
    for path in paths:
        try:
            connection.request("GET", path, headers={"Cookie": cookie} if cookie else {})
            answer = connection.getresponse()
            answer.read()
            cookie = cookie or (answer.getheader("Set-Cookie") or "").split(";")[0] or None
            loaded += answer.status == 200
            if answer.status != 200:
                failed.append(f"{path}: {answer.status}")
        except (OSError, http.client.HTTPException) as error:
            failed.append(f"{path}: {error}")
            connection.close()
load_pages()
print("ready", flush=True)
while not stopped.wait(period):
    load_pages()
print(loaded, len(failed), "; ".join(failed[:5]), flush=True)
"""


class Poller:
    """Loads PAGES every POLL_PERIOD_S until stopped, from a process of its own, on one kept-alive
    connection with its session cookie (as a browser's open page does). The first load of each page is
    made before the load starts: the page was open already (its templates compiled)."""

    def __init__(self, base: str) -> None:
        address = urllib.parse.urlsplit(base)
        self.process = subprocess.Popen([sys.executable, "-c", _POLLER, address.hostname, str(address.port),
                                         str(POLL_PERIOD_S), *PAGES], stdout=subprocess.PIPE, text=True)
        assert self.process.stdout.readline().strip() == "ready"
        self.loaded = 0
        self.failed = ""

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        out, _ = self.process.communicate(timeout=30)
        loaded, failures, examples = (out.strip().split(" ", 2) + ["", ""])[:3]
        self.loaded = int(loaded)
        self.failed = f"{failures} failed: {examples}" if int(failures) else ""


@pytest.mark.benchmark(group="console: cost")
def test_serving_the_console_with_a_page_polled_costs_the_stomp_load_little(benchmark, case_dir):
    connections, seconds = int(size(benchmark, "CONNECTIONS")), size(benchmark, "SECONDS")
    rounds = int(size(benchmark, "ROUNDS"))
    queues = max(1, connections // 10)
    rates: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    cpu_ms: dict[str, list[float]] = {variant: [] for variant in VARIANTS}    # server CPU ms a 1,000 received
    loaded: list[int] = []

    def all_rounds() -> None:
        for number in range(rounds):
            for variant in (VARIANTS if number % 2 == 0 else VARIANTS[::-1]):
                directory = case_dir / f"{variant.split(',')[0].replace(' ', '-')}-{number}"
                directory.mkdir()
                extra = ("--http", "0") if variant != "without console" else ()
                server = Server(directory / "store", directory / "server.log", *extra)
                poller = Poller(server.console_url) if server.console_url else None
                try:
                    cpu_before_s = cpu_s(server.process.pid)
                    result = run_load(server.port, connections=connections, queues=queues, duration_s=seconds,
                                      backlog_max=BACKLOG_PER_QUEUE * queues)
                    server_cpu_s = cpu_s(server.process.pid) - cpu_before_s
                finally:
                    if poller is not None:
                        poller.stop()
                    status = server.stop()
                assert status == 0 and not has_traceback(server.stderr()), server.stderr()[-3000:]
                assert not result.violations(), (variant, result.violations())
                if poller is not None:
                    assert not poller.failed, poller.failed[:5]
                    assert poller.loaded >= len(PAGES), poller.loaded
                    loaded.append(poller.loaded)
                rates[variant].append(result.received_per_s)
                cpu_ms[variant].append(1e6 * server_cpu_s / max(1, len(result.received)))
                print(f"{variant}, round {number}: {result.summary()}")

    benchmark.pedantic(all_rounds, rounds=1, iterations=1)
    table = {variant: {"median": round(statistics.median(samples)), "min": round(min(samples)),
                       "max": round(max(samples))} for variant, samples in rates.items()}
    cpu_table = {variant: {"median": round(statistics.median(samples), 1), "min": round(min(samples), 1),
                           "max": round(max(samples), 1)} for variant, samples in cpu_ms.items()}
    cost = 1 - statistics.median(rates["console, page polled"]) / statistics.median(rates["without console"])
    cpu_cost = statistics.median(cpu_ms["console, page polled"]) / statistics.median(cpu_ms["without console"]) - 1
    # each round's two runs were next to each other in time: their ratio is less disturbed by the machine's
    # other work, which changes over minutes, than the medians of all rounds
    paired = 1 - statistics.median(with_ / without for with_, without in zip(rates["console, page polled"],
                                                                            rates["without console"]))
    print(f"received/s: {table}; cost of the console {cost:.1%} (medians), {paired:.1%} (median of the rounds' "
          f"ratios); server CPU ms a 1,000 received: {cpu_table} ({cpu_cost:+.1%}); pages loaded a run {loaded}")
    benchmark.extra_info.update(connections=connections, seconds=seconds, rounds=rounds, table=table,
                                cost_percent=round(100 * cost, 1), paired_cost_percent=round(100 * paired, 1),
                                server_cpu_ms_per_1000=cpu_table,
                                cpu_cost_percent=round(100 * cpu_cost, 1), pages_loaded=loaded,
                                loadavg=os.getloadavg())


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
