"""Celery tasks per second on one broker: ``tasks_per_s(broker_url, scratch, tasks=5000, concurrency=2)``.

A `celery worker` (prefork, ``concurrency`` processes, no gossip, mingle, heartbeat or remote control)
runs in a child process and is waited for (its ``worker_ready`` signal writes a file); then a second
child calls ``add.delay(i, i)`` ``tasks`` times from one connection. ``add`` is ``acks_late``
(acknowledged once it ran) and records each run by appending one line, ``"<i> <time.time()>"``, to a
runs file with a single O_APPEND write, so the runs of every worker process are counted; there is no
result backend. The rate is ``tasks`` over the time from the first ``delay`` to the last run (wall
clock, one machine), once every ``i`` ran; the publish rate (``delay`` calls per second) comes with it.

Each broker with Celery's defaults for it: ours (``journal-engine://``, journal_engine.integrations.kombu)
waits for a RECEIPT, on disk, for each publish and ACK; RabbitMQ (``amqp://``) publishes persistent
messages to a durable queue without waiting for a confirm (Celery's ``confirm_publish`` is off); Redis
(``redis://``) keeps them in memory.

Run as a program it is one of the two children: ``python -m journal_engine.benchmarking.celery_workload
produce N`` (the worker imports the module as its app: ``celery -A journal_engine.benchmarking.celery_workload``).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

BROKER_ENV = "JOURNAL_BENCH_CELERY_BROKER"
RUNS_ENV = "JOURNAL_BENCH_CELERY_RUNS"
READY_ENV = "JOURNAL_BENCH_CELERY_READY"
MODULE = "journal_engine.benchmarking.celery_workload"
WORKER_READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
RUNS_TIMEOUT_MIN_S = 120.0        # every task must have run within max(this, tasks / 20) s of the first delay


def make_app(broker_url: str):
    """The bench's Celery app on ``broker_url`` (no result backend)."""
    from celery import Celery
    if broker_url.startswith("journal-engine://"):
        import journal_engine.integrations.kombu  # noqa: F401  (registers the journal-engine:// scheme)
    celery_app = Celery("journal_engine_bench", broker=broker_url)
    celery_app.conf.update(
        task_ignore_result=True,                # the runs file is the record
        worker_enable_remote_control=False,     # no pidbox queue per worker
        worker_send_task_events=False,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    return celery_app


def _record(number: int) -> None:
    line = f"{number} {time.time():.6f}\n".encode()
    fd = os.open(os.environ[RUNS_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


# the worker's and the producer's processes; imported anywhere else, the module needs no Celery
if os.environ.get(BROKER_ENV):
    app = make_app(os.environ[BROKER_ENV])

    @app.task(name="journal_engine_bench.add", acks_late=True)
    def add(x: int, y: int) -> int:
        _record(x)
        return x + y

    from celery.signals import worker_ready

    @worker_ready.connect
    def _ready(**_) -> None:
        Path(os.environ[READY_ENV]).write_text(str(os.getpid()))


@dataclass
class CeleryResult:
    tasks: int
    seconds: float                   # first delay -> last run
    publish_seconds: float           # first delay -> last delay returned

    @property
    def per_s(self) -> float:
        return self.tasks / self.seconds if self.seconds else 0.0

    @property
    def publish_per_s(self) -> float:
        return self.tasks / self.publish_seconds if self.publish_seconds else 0.0


def unavailable(broker_url: str) -> str | None:
    """None when Celery and the broker's client import, else why not."""
    modules = ["celery"] + (["redis"] if broker_url.startswith("redis") else
                            ["amqp"] if broker_url.startswith("amqp") else ["stomp"])
    for module in modules:
        try:
            __import__(module)
        except ImportError as error:
            return f"{module} does not import ({error}); pip install '.[bench]' in the journal_engine checkout"
    return None


def _env(broker_url: str, scratch: Path) -> dict:
    package_parent = str(Path(__file__).resolve().parents[2])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")])),
                **{BROKER_ENV: broker_url, RUNS_ENV: str(scratch / "runs"), READY_ENV: str(scratch / "ready")})


def _runs(path: Path) -> dict[int, float]:
    """Task number -> the time it (last) ran."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    runs = {}
    for line in text.splitlines():
        number, when = line.split()
        runs[int(number)] = float(when)
    return runs


def _stop(process: subprocess.Popen, log) -> None:
    """SIGTERM (Celery's warm shutdown), a wait, then SIGKILL to what is left of its session."""
    try:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        process.wait(timeout=30)
    finally:
        log.close()


def tasks_per_s(broker_url: str, scratch: Path, tasks: int = 5000, concurrency: int = 2) -> CeleryResult:
    """One measurement (module text); RuntimeError, with the worker's log, when it fails."""
    from .served_peers import _die_with_parent
    scratch = Path(scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    env = _env(broker_url, scratch)
    log = open(scratch / "worker.log", "ab")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", MODULE, "worker", "--pool", "prefork", "--concurrency", str(concurrency),
         "--loglevel", "WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat",
         "--hostname", f"bench-{os.getpid()}@localhost"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(scratch),
        start_new_session=True, preexec_fn=_die_with_parent)

    def failure(what: str) -> RuntimeError:
        log.flush()
        tail = (scratch / "worker.log").read_text(errors="replace")[-3000:]
        return RuntimeError(f"celery on {broker_url}: {what}; the worker's log ends:\n{tail}")

    try:
        deadline = time.monotonic() + WORKER_READY_TIMEOUT_S
        while not (scratch / "ready").exists():
            if worker.poll() is not None:
                raise failure(f"the worker exited with status {worker.returncode} before it was ready")
            if time.monotonic() > deadline:
                raise failure(f"the worker was not ready within {WORKER_READY_TIMEOUT_S:.0f} s")
            time.sleep(0.05)
        producer = subprocess.run([sys.executable, "-m", MODULE, "produce", str(tasks)], env=env, cwd=str(scratch),
                                  capture_output=True, text=True, timeout=max(RUNS_TIMEOUT_MIN_S, tasks / 20))
        if producer.returncode:
            raise failure(f"the producer failed ({producer.returncode}): {producer.stderr[-2000:]}")
        published = json.loads(producer.stdout.strip().splitlines()[-1])
        deadline = published["first_delay"] + max(RUNS_TIMEOUT_MIN_S, tasks / 20)
        while len(runs := _runs(scratch / "runs")) < tasks:
            if worker.poll() is not None:
                raise failure(f"the worker exited with status {worker.returncode} after {len(runs)} of {tasks} runs")
            if time.time() > deadline:
                raise failure(f"{len(runs)} of {tasks} tasks ran within {deadline - published['first_delay']:.0f} s")
            time.sleep(0.02)
    finally:
        _stop(worker, log)
    return CeleryResult(tasks, max(runs.values()) - published["first_delay"],
                        published["last_delay"] - published["first_delay"])


def _produce(tasks: int) -> None:
    first = time.time()
    for number in range(tasks):
        add.delay(number, number)
    print(json.dumps({"first_delay": first, "last_delay": time.time()}), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] != ["produce"]:
        sys.exit(f"usage: {BROKER_ENV}=URL {RUNS_ENV}=FILE python -m {MODULE} produce N")
    _produce(int(sys.argv[2]))
