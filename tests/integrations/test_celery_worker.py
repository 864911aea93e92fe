"""Celery end to end on journal_engine: a `journal-engine serve-stomp` server in a child process, Celery
workers started with `celery -A celery_app worker` (tests/helpers/celery_app.py) in child processes,
tasks sent from this process. Each task run appends a line to a file, so runs are counted across
workers, killed ones included.

* A task with acks_late whose worker is SIGKILLed mid-task comes back from the server to the next
  worker with `redelivered` set, and runs there to the end.
* A task that always fails and rejects without requeue ends in the dead-letter queue, naming the
  queue it came from; it is not run again.
* An acknowledged task is never run twice after the server is SIGKILLed and restarted on its data
  directory; the worker reconnects and runs what is sent next.
* A task published again after a SIGKILL took its RECEIPT runs once (the transport's `_AMQ_DUPL_ID`).
* Tasks waiting with different priorities run highest first.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
from locations import HELPERS, ROOT
from stomp_server import LoggedChild, Server

pytest.importorskip("celery", reason="celery is not installed (pip install 'journal_engine[celery]')")
import kombu  # noqa: E402

from celery_app import always_fails, app, hold, work  # noqa: E402

from journal_engine.integrations.kombu import UnconfirmedPublishError  # noqa: E402

WAIT_S = 60.0                   # a bound on a loaded machine; each wait ends as soon as its condition holds
STOP_BOUND_S = 2.0              # an idle worker's stop (test_an_idle_worker_stops_at_once)


class Worker(LoggedChild):
    """`celery -A celery_app worker -P solo` on the server at ``port`` (or ``broker_url``, a failover list);
    its output in ``log``; ``transport_options`` for the kombu transport, ``extra`` more arguments of
    `celery worker`."""

    def __init__(self, port: int, runs: Path, log: Path, name: str, *extra: str,
                 transport_options: dict | None = None, broker_url: str | None = None) -> None:
        env = dict(os.environ, JOURNAL_ENGINE_BROKER_URL=broker_url or f"journal-engine://127.0.0.1:{port}",
                   CELERY_RUNS_FILE=str(runs), JOURNAL_ENGINE_TRANSPORT_OPTIONS=json.dumps(transport_options or {}),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(HELPERS), str(ROOT), os.environ.get("PYTHONPATH")])))
        super().__init__([sys.executable, "-m", "celery", "-A", "celery_app", "worker", "-P", "solo", "-c", "1", "-n",
                          f"{name}@%h", "--without-mingle", "--without-gossip", "--without-heartbeat", "-l", "info",
                          *extra], log, env=env, cwd=log.parent)


def runs_of(runs: Path) -> list[tuple[str, str, bool]]:
    if not runs.exists():
        return []
    return [(task, key, redelivered == "True")
            for task, key, redelivered in (line.split() for line in runs.read_text().splitlines())]


def wait_for(condition, what: str, *workers: Worker) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        for worker in workers:
            assert worker.process.poll() is None, f"the worker ended while waiting for {what}:\n{worker.stderr()[-3000:]}"
        assert time.monotonic() < deadline, f"no {what} within {WAIT_S} s:\n" + "\n".join(
            worker.stderr()[-3000:] for worker in workers)
        time.sleep(0.05)


def send(port: int, task, *args) -> None:
    with app.connection_for_write(f"journal-engine://127.0.0.1:{port}") as connection:
        task.apply_async(args, connection=connection)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_acks_late_task_whose_worker_is_sigkilled_comes_back_redelivered(tmp_path):
    server = Server(tmp_path / "store", tmp_path / "server.log")
    runs = tmp_path / "runs"
    first = Worker(server.port, runs, tmp_path / "worker-1.log", "first")
    second = None
    try:
        send(server.port, hold, "k1")
        wait_for(lambda: ("hold", "k1", False) in runs_of(runs), "run of the task on the first worker", first)
        first.kill()            # mid-task: the task was not acknowledged
        second = Worker(server.port, runs, tmp_path / "worker-2.log", "second")
        wait_for(lambda: len(runs_of(runs)) == 2, "second run of the task", second)
        assert runs_of(runs) == [("hold", "k1", False), ("hold", "k1", True)]
        # it ran to the end on the second worker and was acknowledged: nothing is left in the queue
        with kombu.Connection(f"journal-engine://127.0.0.1:{server.port}") as connection:
            wait_for(lambda: connection.default_channel.queue_declare("celery", passive=True).message_count == 0
                     and kombu.Queue("celery", no_declare=True)(connection.default_channel).get() is None,
                     "the acknowledgement", second)
    finally:
        first.stop()
        if second is not None:
            second.stop()
        server.stop()


def test_a_task_rejected_without_requeue_ends_in_the_dead_letter_queue_with_its_origin(tmp_path):
    server = Server(tmp_path / "store", tmp_path / "server.log")
    runs = tmp_path / "runs"
    worker = Worker(server.port, runs, tmp_path / "worker.log", "only")
    try:
        send(server.port, always_fails, "poison")
        with kombu.Connection(f"journal-engine://127.0.0.1:{server.port}") as connection:
            dead_letters = kombu.Queue("DLQ", no_declare=True)(connection.default_channel)
            found = []
            wait_for(lambda: found.append(dead_letters.get()) or found[-1] is not None,
                     "the task in the dead-letter queue", worker)
            message = found[-1]
            assert message.headers["task"] == "celery_app.always_fails"
            assert message.delivery_info["original_queue"] == "celery"
            assert message.decode()[0] == ["poison"]
            message.ack()
        assert runs_of(runs) == [("always_fails", "poison", False)]     # rejected for good: not run again
    finally:
        worker.stop()
        server.stop()


@pytest.mark.parametrize("ack_window", [1, None], ids=["ack-window-1", "ack-window-default"])
def test_no_acknowledged_task_runs_twice_after_the_server_is_sigkilled_and_restarted(tmp_path, ack_window):
    """Celery acknowledges `work` when it takes it; in its event loop, on the loop's turn after a solo
    pool ran it. Ten tasks run, then a marker task: once it ran, the ten were acknowledged (the
    transport hands over one message a turn, after what the last one scheduled); a request of the
    test's own, once answered, makes the server's disk hold all it was sent before (with
    ack_window=1 each ACK waited for that already). The server SIGKILLed then, none of the ten runs
    again; the marker may (its ACK may not have come), flagged redelivered. The worker reconnects
    and runs what is sent next."""
    port = free_port()
    server = Server(tmp_path / "store", tmp_path / "server.log", "--port", str(port))
    runs = tmp_path / "runs"
    options = {} if ack_window is None else {"ack_window": ack_window}
    worker = Worker(port, runs, tmp_path / "worker.log", "only", transport_options=options)
    try:
        for index in range(10):
            send(port, work, f"before-{index}")
        wait_for(lambda: len(runs_of(runs)) == 10, "ten runs before the kill", worker)
        send(port, work, "marker")
        wait_for(lambda: ("work", "marker", False) in runs_of(runs), "the run of the marker", worker)
        with kombu.Connection(f"journal-engine://127.0.0.1:{port}") as connection:
            connection.default_channel.queue_declare("celery", passive=True)     # answered once durable
        server.kill()
        server = Server(tmp_path / "store", tmp_path / "server-2.log", "--port", str(port))
        for index in range(5):
            send(port, work, f"after-{index}")
        wait_for(lambda: len({key for _, key, _ in runs_of(runs)}) == 16, "five runs after the restart", worker)
        keys = [key for _, key, redelivered in runs_of(runs) if not (key == "marker" and redelivered)]
        expected = {"marker", *(f"before-{i}" for i in range(10)), *(f"after-{i}" for i in range(5))}
        assert sorted(keys) == sorted(expected), runs_of(runs)
    finally:
        worker.stop()
        server.stop()


def test_a_task_with_a_countdown_held_by_the_worker_does_not_hold_up_the_next(tmp_path):
    """With --prefetch-multiplier 1 the worker asks for one message; holding a task until its ETA, Celery
    raises its prefetch count to two, and the transport subscribes again with it: the next task runs
    now. (Each subscription asked for one message whatever the count: it waited for the ETA.)"""
    server = Server(tmp_path / "store", tmp_path / "server.log")
    runs = tmp_path / "runs"
    worker = Worker(server.port, runs, tmp_path / "worker.log", "only", "--prefetch-multiplier", "1")
    try:
        with app.connection_for_write(f"journal-engine://127.0.0.1:{server.port}") as connection:
            work.apply_async(("later",), countdown=600, connection=connection)
            work.apply_async(("now",), connection=connection)
        wait_for(lambda: ("work", "now", False) in runs_of(runs), "the run of the task without a countdown", worker)
        assert ("work", "later", False) not in runs_of(runs)
    finally:
        worker.stop()
        server.stop()


def test_an_idle_worker_stops_at_once(tmp_path):
    """SIGTERM to an idle worker: it took 7.5-8.4 s (issue 40), then about 4 s: Celery's loop waited in
    drain_events(timeout=2.0) through the signal, and once more after it (the transport had no event loop
    support); now the worker's event loop is woken by the signal. The bound is generous for a loaded
    machine; quiet, the stop takes about 0.2 s."""
    server = Server(tmp_path / "store", tmp_path / "server.log")
    runs = tmp_path / "runs"
    worker = Worker(server.port, runs, tmp_path / "worker.log", "only")
    try:
        send(server.port, work, "warm-up")
        wait_for(lambda: len(runs_of(runs)) == 1, "the run of the first task", worker)
        time.sleep(0.5)                 # idle, waiting for the next message
        asked = time.monotonic()
        worker.process.send_signal(signal.SIGTERM)
        exit_code = worker.process.wait(timeout=WAIT_S)
        stop_s = time.monotonic() - asked
        print(f"an idle worker stopped in {stop_s:.2f} s")
        assert exit_code == 0, worker.stderr()[-3000:]
        assert stop_s < STOP_BOUND_S, worker.stderr()[-3000:]
    finally:
        worker.stop()
        server.stop()


class ReceiptDroppingProxy:
    """A TCP relay from a port of its own to ``upstream``: bytes from the client pass; frames from the server
    pass too, except RECEIPTs while ``drop_receipts`` is set, so a publish stays unconfirmed while the
    server has it on disk. ``publish_receipts`` counts the RECEIPTs passed after a SEND. One client at a
    time; a closed side closes the other."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.drop_receipts = False
        self.publish_receipts = 0
        self._sent = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, target: socket.socket, from_server: bool) -> None:
        pending = b""
        try:
            while data := source.recv(65536):
                if not from_server:
                    self._sent = self._sent or b"SEND\n" in data
                    target.sendall(data)
                    continue
                pending += data
                *frames, pending = pending.split(b"\x00")      # a frame ends at NUL (JSON bodies hold none)
                out = []
                for frame in frames:
                    if frame.lstrip(b"\r\n").startswith(b"RECEIPT"):
                        if self.drop_receipts:
                            continue
                        self.publish_receipts += self._sent
                    out.append(frame + b"\x00")
                target.sendall(b"".join(out))
        except OSError:
            pass
        finally:
            for end in (source, target):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                end.close()

    def close(self) -> None:
        self._listener.close()


def test_a_task_published_again_after_a_kill_took_its_receipt_runs_once(tmp_path):
    """The server has the task on disk, its RECEIPT is lost (the relay drops it), the server is SIGKILLed:
    the publish is unconfirmed (UnconfirmedPublishError names the task), so the application publishes it
    again under its task id to the restarted server. The transport sends `celery:<task id>:<retries>` as
    `_AMQ_DUPL_ID`; the server recovered that id with the message and refuses the copy, so the task runs
    once (docs/integrations.md, "Duplicate ids")."""
    port = free_port()
    server = Server(tmp_path / "store", tmp_path / "server.log", "--port", str(port))
    proxy = ReceiptDroppingProxy(port)
    runs = tmp_path / "runs"
    worker = None
    try:
        with pytest.raises(UnconfirmedPublishError, match="task-once"), \
                app.connection_for_write(f"journal-engine://127.0.0.1:{proxy.port}") as connection:
            # the first publish declares the queue (requests answered in RECEIPTs) and is confirmed
            work.apply_async(("warm",), connection=connection)
            wait_for(lambda: proxy.publish_receipts > 0, "the first publish's RECEIPT")
            proxy.drop_receipts = True
            work.apply_async(("once",), task_id="task-once", connection=connection)
            with kombu.Connection(f"journal-engine://127.0.0.1:{port}") as direct:     # answered once durable
                wait_for(lambda: direct.default_channel.queue_declare("celery", passive=True).message_count == 2,
                         "the task on the server's disk")
            server.kill()
        server = Server(tmp_path / "store", tmp_path / "server-2.log", "--port", str(port))
        send(port, work, "marker")
        with app.connection_for_write(f"journal-engine://127.0.0.1:{port}") as connection:
            work.apply_async(("once",), task_id="task-once", connection=connection)      # the application's resend
        send(port, work, "last")
        worker = Worker(port, runs, tmp_path / "worker.log", "only")
        wait_for(lambda: ("work", "last", False) in runs_of(runs), "the run of the last task", worker)
        assert sorted(key for _, key, _ in runs_of(runs)) == ["last", "marker", "once", "warm"], runs_of(runs)
    finally:
        if worker is not None:
            worker.stop()
        proxy.close()
        server.stop()


def test_waiting_tasks_run_highest_priority_first(tmp_path):
    """Celery's `priority` (kombu's message priority, the STOMP `priority` header): a queue delivers its
    highest priority first, FIFO within one (docs/broker.md, "Priority"), so a worker started after the
    sends runs them in that order. A task sent without one has kombu's default, 0 (Producer.publish's
    priority=0, as AMQP reads a message without a priority), so it runs last."""
    server = Server(tmp_path / "store", tmp_path / "server.log")
    runs = tmp_path / "runs"
    worker = None
    try:
        with app.connection_for_write(f"journal-engine://127.0.0.1:{server.port}") as connection:
            for key, priority in [("low-a", 1), ("high", 9), ("default", None), ("low-b", 1), ("mid", 6)]:
                options = {} if priority is None else {"priority": priority}
                work.apply_async((key,), connection=connection, **options)
        worker = Worker(server.port, runs, tmp_path / "worker.log", "only", "--prefetch-multiplier", "1")
        wait_for(lambda: len(runs_of(runs)) == 5, "five runs", worker)
        assert [key for _, key, _ in runs_of(runs)] == ["high", "mid", "low-a", "low-b", "default"], runs_of(runs)
    finally:
        if worker is not None:
            worker.stop()
        server.stop()
