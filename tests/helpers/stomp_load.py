"""A STOMP load on a broker at a loopback port, shared by the load test (tests/integrations/
test_serve_stomp_load.py) and the benchmark (bench/test_bench_stomp_load.py).

``connections`` connections for ``duration_s`` seconds, one thread each in this process: half
producers, half consumers, spread over ``queues`` queues. A producer sends one SEND at a time with a
receipt and waits for the RECEIPT (a message is *receipted* once it came); a consumer subscribes with
``ack: client`` and answers each MESSAGE with a receipted ACK (a message is *acknowledged* once that
RECEIPT came). Each body starts with the message's id, so a message is known however it travels.
``kill`` (a callable that SIGKILLs the server, restarts it on the same directory and port and returns
that port) runs at ``kill_at_s``; every client then reconnects, and the load goes on for the rest of
``duration_s`` after the restart (the send phase is ``duration_s`` plus the time the server was down). After the send phase the consumers go
on until every receipted message was received or ``drain_timeout_s`` passed.

What the result checks (:meth:`LoadResult.violations`): every receipted message was received (at
least once); a message came again only if its ACK had not been receipted before (a receipted ACK is on
disk: that message must never come back, across the kill or not), and then with ``redelivered:true``;
no client got an ERROR frame.

``duplicate_ids=True``: each SEND carries its message's id as ``_AMQ_DUPL_ID``, and a producer whose
connection went away before a RECEIPT sends that message again first when it reconnects (what a
client does after a lost reply): with the server's duplicate detection the copy is not routed, so a
message that comes twice without ``redelivered:true`` (a violation) is a resend the server let through.

``flow="kombu"`` runs the same flow through kombu's API on the journal-engine transport (no kill):
``Producer.publish`` to the queue's name and ``message.ack()``: with the transport's default windows
each returns once written, and the connection's release waits for every RECEIPT (a refused or lost
one raises there).

Connections are threads, not processes: the clients' CPU is part of what a run measures (the
result carries this process's CPU seconds beside the wall time).
"""
from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from pathlib import Path

from locations import ROOT
from stomp_server import START_TIMEOUT_S, LoggedChild, RawClient, Server, frame_bytes, has_traceback

BODY_BYTES = 256
ID_END = b"|"
RECONNECT_PAUSE_S = 0.05
READ_SLICE_S = 0.5
RECEIPT_TIMEOUT_S = 30.0


def body_of(message_id: str) -> bytes:
    head = message_id.encode() + ID_END
    return head + b"." * max(0, BODY_BYTES - len(head))


def id_of(body: bytes) -> str:
    return bytes(body).split(ID_END, 1)[0].decode()


def queue_name(index: int) -> str:
    return f"load-{index}"


@dataclass
class LoadResult:
    connections: int
    duration_s: float
    receipted: set[str] = field(default_factory=set)
    received: Counter = field(default_factory=Counter)
    acknowledged: set[str] = field(default_factory=set)
    again_after_ack: list[str] = field(default_factory=list)   # received again after its ACK's RECEIPT
    again_unflagged: list[str] = field(default_factory=list)   # received again without redelivered:true
    errors: list[str] = field(default_factory=list)            # ERROR frames and unexpected frames
    reconnects: int = 0
    resent: int = 0                      # SENDs sent again under their duplicate id after a lost RECEIPT
    killed_at_s: float | None = None
    down_s: float | None = None          # from the kill to the restarted server's port answering
    backlog_at_kill: int = 0             # receipted and not yet received when the kill came: only the store has them
    # one entry a kill: (receipted, backlog) when it came; the receipted counts grow from kill to kill only if
    # the load went on after each takeover
    at_kills: list[tuple[int, int]] = field(default_factory=list)
    send_phase_s: float = 0.0
    last_receive_s: float = 0.0
    client_cpu_s: float = 0.0

    @property
    def lost(self) -> list[str]:
        return sorted(self.receipted - set(self.received))

    @property
    def duplicates(self) -> int:
        return sum(count - 1 for count in self.received.values() if count > 1)

    @property
    def sent_per_s(self) -> float:
        return len(self.receipted) / self.send_phase_s

    @property
    def received_per_s(self) -> float:
        return len(self.received) / self.last_receive_s if self.last_receive_s else 0.0

    def violations(self) -> list[str]:
        found = []
        if self.lost:
            found.append(f"{len(self.lost)} receipted messages never received, e.g. {self.lost[:5]}")
        if self.again_after_ack:
            found.append(f"{len(self.again_after_ack)} messages received again after their ACK was receipted, "
                         f"e.g. {self.again_after_ack[:5]}")
        if self.again_unflagged:
            found.append(f"{len(self.again_unflagged)} messages received again without redelivered:true, "
                         f"e.g. {self.again_unflagged[:5]}")
        if self.errors:
            found.append(f"{len(self.errors)} errors, e.g. {self.errors[:3]}")
        return found

    def summary(self) -> str:
        kill = (f", SIGKILL at {self.killed_at_s:.1f} s with {self.backlog_at_kill} queued, down {self.down_s:.2f} s, "
                f"{self.reconnects} reconnects"
                if self.killed_at_s is not None else "")
        return (f"{self.connections} connections, {self.send_phase_s:.1f} s: {len(self.receipted)} receipted "
                f"({self.sent_per_s:.0f}/s), {len(self.received)} received ({self.received_per_s:.0f}/s), "
                f"{self.duplicates} duplicates, {len(self.lost)} lost{kill}; client CPU {self.client_cpu_s:.1f} s")


COILMQ_STORES = ("memory", "dbm", "sqlalchemy")


def coilmq_config(store: str, directory: Path, port: int) -> str:
    """coilmq's configuration file for one of the stores coilmq 1.1.0 ships (``COILMQ_STORES``)."""
    lines = ["[coilmq]", "listen_addr = 127.0.0.1", f"listen_port = {port}"]
    if store == "memory":
        lines.append("qstore.factory = coilmq.store.memory.MemoryQueue")
    elif store == "dbm":
        lines += ["qstore.factory = coilmq.store.dbm:make_dbm", f"qstore.dbm.data_dir = {directory}"]
    elif store == "sqlalchemy":
        lines += ["qstore.factory = coilmq.store.sa:make_sa",
                  f"qstore.sqlalchemy.url = sqlite:///{directory / 'coilmq.sqlite'}"]
    else:
        raise ValueError(f"coilmq store {store!r}: one of {COILMQ_STORES}")
    return "\n".join(lines) + "\n"


# coilmq's start with TCP_NODELAY on each connection: coilmq writes the next MESSAGE and an ACK's RECEIPT
# as two small writes, and Nagle's algorithm holds the second until the client's delayed TCP ACK
_COILMQ_NODELAY = """
import socket, sys
from coilmq.server.socket_server import StompRequestHandler
from coilmq.start import main
setup = StompRequestHandler.setup
def setup_without_nagle(self):
    self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return setup(self)
StompRequestHandler.setup = setup_without_nagle
sys.argv[0] = "coilmq"
main()
"""


class CoilmqServer(LoggedChild):
    """coilmq 1.1.0's own server, ``python -m coilmq.start -c FILE``, on one of its stores at ``port``
    (``nodelay``: with TCP_NODELAY set on its connections); ready once the port accepts a STOMP connection."""

    def __init__(self, store: str, directory: Path, log: Path, port: int, *, nodelay: bool = False) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        config = directory / "coilmq.cfg"
        config.write_text(coilmq_config(store, directory, port))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        start = ["-c", _COILMQ_NODELAY] if nodelay else ["-m", "coilmq.start"]
        super().__init__([sys.executable, *start, "-c", str(config)], log, env=env)
        self.port = port
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                RawClient(port).connect("1.1")
                return
            except (OSError, EOFError, AssertionError):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.kill()
                    raise AssertionError(f"coilmq ({store}) did not start: {self.stderr()[-2000:]}") from None
                time.sleep(RECONNECT_PAUSE_S)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class KilledServer:
    """A server on a fixed port whose :meth:`kill` SIGKILLs it and starts it again on the same
    directory and port. ``start(port, log)`` starts one life (each logs to a file of its own in ``logs``)."""

    def __init__(self, start: Callable[[int, Path], LoggedChild], logs: Path) -> None:
        self.port = free_port()
        self.start, self.logs = start, logs
        self.lives: list[LoggedChild] = []
        self.lives.append(self._start())

    @classmethod
    def serve_stomp(cls, data: Path, logs: Path, *extra: str) -> KilledServer:
        """`journal-engine serve-stomp --data DATA ...extra`."""
        return cls(lambda port, log: Server(data, log, *extra, "--port", str(port)), logs)

    @classmethod
    def coilmq(cls, store: str, directory: Path, *, nodelay: bool = False) -> KilledServer:
        """coilmq's own server on its ``store`` in ``directory``."""
        return cls(lambda port, log: CoilmqServer(store, directory, log, port, nodelay=nodelay), directory)

    def _start(self) -> LoggedChild:
        return self.start(self.port, self.logs / f"server-{len(self.lives) + 1}.log")

    def kill(self) -> int:
        self.lives[-1].kill()
        self.lives.append(self._start())
        return self.port

    def tracebacks(self) -> list[str]:
        """The output of each life that holds a traceback."""
        return [life.stderr()[-3000:] for life in self.lives if has_traceback(life.stderr())]

    def stop(self) -> int:
        return self.lives[-1].stop()


class _Run:
    """The shared state of one load: what was receipted, received and acknowledged, under one lock."""

    def __init__(self, port: int, connections: int, duration_s: float, ack_receipts: bool,
                 backlog_max: int | None, redelivered_flag: bool, failover_ports: tuple[int, ...] = ()) -> None:
        self.port = port
        self.ports = (port, *(other for other in failover_ports if other != port))
        self.redelivered_flag = redelivered_flag   # the server marks a message that may have been delivered before
        self.ack_receipts = ack_receipts
        self.backlog_max = backlog_max
        self.lock = threading.Condition()
        self.result = LoadResult(connections=connections, duration_s=duration_s)
        self.sending = threading.Event()         # cleared: producers stop
        self.consuming = threading.Event()       # cleared: consumers stop
        self.started = time.monotonic()
        self.opened = 0                          # connections made, the first ones included
        self.duplicate_ids = False               # SENDs carry _AMQ_DUPL_ID; an unreceipted one is sent again

    def now_s(self) -> float:
        return time.monotonic() - self.started

    def receipted(self, message_id: str) -> None:
        with self.lock:
            self.result.receipted.add(message_id)

    def received(self, message_id: str, redelivered: bool | None = None) -> None:
        """``redelivered``: the MESSAGE's flag where the flow sees it (None: it does not)."""
        with self.lock:
            if message_id in self.result.acknowledged:
                self.result.again_after_ack.append(message_id)
            if message_id in self.result.received and redelivered is False:
                self.result.again_unflagged.append(message_id)
            self.result.received[message_id] += 1
            self.result.last_receive_s = self.now_s()
            if self.backlog_max is not None:
                self.lock.notify()

    def may_send(self) -> bool:
        """Waits while ``backlog_max`` receipted messages are not yet received; False once sending stops."""
        if self.backlog_max is None:
            return self.sending.is_set()
        with self.lock:
            while len(self.result.receipted) - len(self.result.received) >= self.backlog_max:
                if not self.sending.is_set():
                    return False
                self.lock.wait(READ_SLICE_S)
        return self.sending.is_set()

    def acknowledged(self, message_id: str) -> None:
        with self.lock:
            self.result.acknowledged.add(message_id)

    def error(self, text: str) -> None:
        with self.lock:
            self.result.errors.append(text)

    def all_received(self) -> bool:
        with self.lock:
            return self.result.receipted <= self.result.received.keys()

    def connect(self, running: threading.Event) -> RawClient | None:
        """A STOMP 1.1 connection to the server, retried while it is down (a kill); None once ``running``
        is cleared. Every connection after the clients' first ones counts as a reconnect."""
        tries = 0
        while running.is_set():
            # with a failover list, each refusal moves to its next port (a client's host list); else the port
            # the last kill() returned
            port = self.ports[tries % len(self.ports)] if len(self.ports) > 1 else self.port
            tries += 1
            try:
                client = RawClient(port)
                client.connect("1.1")
                with self.lock:
                    self.opened += 1
                    self.result.reconnects = max(0, self.opened - self.result.connections)
                return client
            except (OSError, EOFError, AssertionError):
                if tries % len(self.ports) == 0:
                    time.sleep(RECONNECT_PAUSE_S)
        return None


def _produce(run: _Run, name: str, destination: str) -> None:
    sequence = 0
    unconfirmed = None      # with duplicate ids: the SEND a lost connection left without its RECEIPT
    while run.sending.is_set():
        client = run.connect(run.sending)
        if client is None:
            return
        try:
            while unconfirmed is not None or run.may_send():
                if unconfirmed is None:
                    message_id = f"{name}-{sequence}"
                    sequence += 1
                else:
                    message_id = unconfirmed        # sent again first, under the same duplicate id
                    with run.lock:
                        run.result.resent += 1
                headers = {"destination": destination, "receipt": message_id}
                if run.duplicate_ids:
                    headers["_AMQ_DUPL_ID"] = unconfirmed = message_id
                client.send_raw(frame_bytes("SEND", headers, body_of(message_id)))
                command, headers, body = client.read_frame(RECEIPT_TIMEOUT_S)
                if command == "RECEIPT" and headers.get("receipt-id") == message_id:
                    unconfirmed = None
                    run.receipted(message_id)
                else:
                    run.error(f"{name}: {command} {headers} {body[:200]!r} instead of RECEIPT {message_id}")
                    break
        except (OSError, EOFError):
            pass                         # the server went away: this SEND is not receipted; reconnect
        finally:
            client.close()


def _consume(run: _Run, name: str, destination: str, ready: threading.Barrier) -> None:
    ack_receipts = run.ack_receipts
    first = True
    while run.consuming.is_set():
        client = run.connect(run.consuming)
        if client is None:
            return
        waiting: dict[str, str] = {}     # ACK receipt id -> message id
        try:
            client.send_raw(frame_bytes("SUBSCRIBE", {"destination": destination, "id": "load", "ack": "client",
                                                      "receipt": "subscribed"}))
            if first:
                first = False
                ready.wait()
            while run.consuming.is_set():
                try:
                    command, headers, body = client.read_frame(READ_SLICE_S)
                except TimeoutError:
                    continue
                if command == "MESSAGE":
                    message_id = id_of(body)
                    run.received(message_id, headers.get("redelivered") == "true" if run.redelivered_flag else None)
                    ack = {"message-id": headers["message-id"], "subscription": "load"}
                    if ack_receipts:
                        ack["receipt"] = f"ack-{headers['message-id']}"
                        waiting[ack["receipt"]] = message_id
                    client.send_raw(frame_bytes("ACK", ack, content_length=False))
                elif command == "RECEIPT" and headers.get("receipt-id") in waiting:
                    run.acknowledged(waiting.pop(headers["receipt-id"]))
                elif command != "RECEIPT" or headers.get("receipt-id") != "subscribed":
                    run.error(f"{name}: {command} {headers} {body[:200]!r}")
                    break
        except (OSError, EOFError):
            pass                         # the server went away: unacknowledged messages come again
        finally:
            client.close()


def _produce_kombu(run: _Run, name: str, destination: str) -> None:
    import kombu

    sequence = 0
    with kombu.Connection(f"journal-engine://127.0.0.1:{run.port}") as connection:
        producer = kombu.Producer(connection.default_channel)
        while run.may_send():
            message_id = f"{name}-{sequence}"
            sequence += 1
            producer.publish(body_of(message_id), routing_key=destination, content_type="application/data",
                             content_encoding="binary")
            run.receipted(message_id)        # publish returns after the RECEIPT


def _consume_kombu(run: _Run, name: str, destination: str, ready: threading.Barrier) -> None:
    import kombu

    def on_message(message) -> None:
        message_id = id_of(message.body)
        run.received(message_id, message.delivery_info["redelivered"] if run.redelivered_flag else None)
        message.ack()                        # returns after the ACK's RECEIPT
        run.acknowledged(message_id)

    with kombu.Connection(f"journal-engine://127.0.0.1:{run.port}") as connection:
        with kombu.Consumer(connection, [kombu.Queue(destination, routing_key=destination)], on_message=on_message):
            ready.wait()
            while run.consuming.is_set():
                try:
                    connection.drain_events(timeout=READ_SLICE_S)
                except TimeoutError:
                    pass


def run_load(port: int, *, connections: int, duration_s: float, queues: int = 1, consumers: int | None = None,
             flow: str = "stomp", ack_receipts: bool = True, backlog_max: int | None = None,
             redelivered_flag: bool = True,
             kill: Callable[[], int] | None = None, kill_at_s: float | None = None, kills: int = 1,
             failover_ports: tuple[int, ...] = (), drain_timeout_s: float = 30.0,
             duplicate_ids: bool = False) -> LoadResult:
    """Drive the load described in the module's docstring; returns what happened (check
    ``violations()``). ``consumers``: how many of the connections consume (default half; fewer than
    the producers leave a backlog in the queues). ``ack_receipts=False``: ACKs without a receipt (the
    stomp flow; nothing is then known acknowledged). ``redelivered_flag``: a message received again
    must carry ``redelivered:true`` (ActiveMQ's header, which serve-stomp sets and coilmq's own server
    does not). ``kill`` returns the restarted server's port; ``kills`` > 1 calls it that many times, spread
    evenly over ``duration_s`` (``kill_at_s`` is then ignored). ``failover_ports``: the clients' host list
    (a refused connection tries the next port), for a live server and its backup. ``duplicate_ids``: see
    the module's docstring."""
    consumers = connections // 2 if consumers is None else consumers
    if queues < 1 or min(consumers, connections - consumers) < queues:
        raise ValueError(f"{connections} connections, {consumers} consuming, cannot give {queues} queues "
                         "a producer and a consumer each")
    if flow not in ("stomp", "kombu"):
        raise ValueError(f"flow {flow!r}: 'stomp' or 'kombu'")
    if kill is not None and flow != "stomp":
        raise ValueError("the kill is driven with the raw STOMP flow")
    produce, consume = (_produce, _consume) if flow == "stomp" else (_produce_kombu, _consume_kombu)
    run = _Run(port, connections, duration_s, ack_receipts, backlog_max, redelivered_flag, failover_ports)
    run.duplicate_ids = duplicate_ids
    run.sending.set()
    run.consuming.set()
    ready = threading.Barrier(consumers + 1)
    threads = [threading.Thread(target=consume, args=(run, f"c{i}", f"/queue/{queue_name(i % queues)}"
                                                      if flow == "stomp" else queue_name(i % queues), ready),
                                daemon=True) for i in range(consumers)]
    threads += [threading.Thread(target=produce, args=(run, f"p{i}", f"/queue/{queue_name(i % queues)}"
                                                       if flow == "stomp" else queue_name(i % queues)), daemon=True)
                for i in range(connections - consumers)]
    cpu_before = os.times()
    for thread in threads[:consumers]:
        thread.start()
    ready.wait(timeout=60)                   # every consumer subscribed: the producers' messages have somewhere to go
    run.started = time.monotonic()
    for thread in threads[consumers:]:
        thread.start()
    end_s = duration_s
    if kill is not None:
        if kills == 1:
            kill_times = [kill_at_s if kill_at_s is not None else duration_s / 2]
        else:
            kill_times = [duration_s * (index + 1) / (kills + 1) for index in range(kills)]
        run.result.down_s = 0.0
        for kill_time in kill_times:
            # each kill's time counts from the load's start, the time the server was down before added
            time.sleep(max(0.0, kill_time + run.result.down_s - run.now_s()))
            killed_at = run.now_s()
            with run.lock:
                backlog = len(run.result.receipted - run.result.received.keys())
                run.result.at_kills.append((len(run.result.receipted), backlog))
            if run.result.killed_at_s is None:
                run.result.killed_at_s, run.result.backlog_at_kill = killed_at, backlog
            run.port = kill()
            run.result.down_s += run.now_s() - killed_at
        end_s += run.result.down_s          # the time after the kill is load on the restarted server
    time.sleep(max(0.0, end_s - run.now_s()))
    run.sending.clear()
    run.result.send_phase_s = run.now_s()
    for thread in threads[consumers:]:
        thread.join(timeout=RECEIPT_TIMEOUT_S + 5)
    deadline = time.monotonic() + drain_timeout_s
    while not run.all_received() and time.monotonic() < deadline:
        time.sleep(0.1)
    run.consuming.clear()
    for thread in threads[:consumers]:
        thread.join(timeout=READ_SLICE_S + 10)
    cpu_after = os.times()
    run.result.client_cpu_s = (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
    stuck = [thread.name for thread in threads if thread.is_alive()]
    if stuck:
        run.error(f"threads still running after the load: {stuck}")
    return run.result
