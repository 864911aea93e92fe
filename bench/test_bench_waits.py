"""How long the broker's waits and its selector take: the figures tests/ used to assert with wall-clock
bounds (a bound on speed fails on a busy machine and proves nothing on a quiet one; the tests keep what
the code must do, the figures live here, in docs/benchmarks.md, "Waits and selectors").

Groups:
  selector        a compiled selector (three conditions) matched against 20,000 property dicts
  receive-now     receive(0) on an empty queue with a ManualClock, which must never sleep
  receive-wakeup  a receive(5.0) woken by a send from another thread, and a receive(3.0) woken when a
                  rolled-back message's redelivery delay (the wall clock) falls due: how late after
                  the send, or after the due time, each receive returned
  stomp-redelivery  `journal-engine serve-stomp` with a 200 ms redelivery delay: a NACKed message comes
                  back to its live subscriber; how late after its due time (a poller every 100 ms, what
                  serve-stomp had until 2026-11-27, made it ~60 ms late)
Every round checks what it received.
"""
from __future__ import annotations

import threading
import time

import pytest
from workload import percentiles

from journal_engine import AddressSettings, Broker, ManualClock
from journal_engine.broker.selector import compile_selector

SELECTED_MESSAGES = 20_000
EMPTY_RECEIVES = 100_000
WAKEUPS_PER_ROUND = 50
REDELIVERY_DELAY_MS = 20
SELECTOR = "color = 'red' AND weight BETWEEN 10 AND 20 AND kind IN ('a', 'b')"


@pytest.mark.benchmark(group="selector")
def test_selector_matches(rate):
    selector = compile_selector(SELECTOR)
    messages = [{"color": "red" if i % 2 else "blue", "weight": i % 30, "kind": "ab"[i % 2]}
                for i in range(SELECTED_MESSAGES)]
    expected = sum(1 for m in messages if m["color"] == "red" and 10 <= m["weight"] <= 20 and m["kind"] in "ab")
    matches = selector.matches

    def one_round() -> None:
        assert sum(1 for message in messages if matches(message)) == expected

    rate(one_round, records=SELECTED_MESSAGES, case="compiled selector, three conditions",
         settings="property dicts of three keys", rounds=5)


@pytest.mark.benchmark(group="receive-now")
def test_receive_zero_with_a_manual_clock_on_an_empty_queue(rate):
    broker = Broker(clock=ManualClock(1_700_000_000_000))
    broker.create_queue("q")
    consumer = broker.create_consumer("q")
    receive = consumer.receive

    def one_round() -> None:
        assert all(receive(0) is None for _ in range(EMPTY_RECEIVES))

    try:
        rate(one_round, records=EMPTY_RECEIVES, case="receive(0), empty queue, ManualClock",
             settings="in-memory broker, 1 thread", rounds=5)
    finally:
        broker.close()


def _woken_by_a_send(broker: Broker, consumer) -> float:
    """Seconds from a send on another thread (made while the receive waits) to the receive's return."""
    sent_at = []

    def send() -> None:
        sent_at.append(time.perf_counter())
        broker.send("q", b"late")

    timer = threading.Timer(0.002, send)
    timer.start()
    message = consumer.receive(5.0)
    returned = time.perf_counter()
    timer.join()
    assert message is not None and message.body == b"late"
    consumer.ack(message)
    return returned - sent_at[0]


def _woken_by_a_due_redelivery(broker: Broker, consumer) -> float:
    """Seconds from the due time of a rolled-back message's redelivery to the receive that returns it."""
    broker.send("r", b"again")
    message = consumer.receive(0)
    consumer.rollback(message)
    due = time.perf_counter() + REDELIVERY_DELAY_MS / 1e3
    message = consumer.receive(3.0)
    returned = time.perf_counter()
    assert message is not None and message.delivery_count == 2
    consumer.ack(message)
    return returned - due


@pytest.mark.benchmark(group="receive-wakeup")
@pytest.mark.parametrize("woken_by", ["send-from-another-thread", "redelivery-due"])
def test_receive_wakeup(benchmark, woken_by):
    broker = Broker()
    broker.address_settings.add("r", AddressSettings(redelivery_delay=REDELIVERY_DELAY_MS))
    queue = "q" if woken_by == "send-from-another-thread" else "r"
    broker.create_queue(queue)
    consumer = broker.create_consumer(queue)
    wake = _woken_by_a_send if woken_by == "send-from-another-thread" else _woken_by_a_due_redelivery
    late: list[float] = []

    def one_round() -> None:
        late.extend(wake(broker, consumer) for _ in range(WAKEUPS_PER_ROUND))

    try:
        benchmark.pedantic(one_round, rounds=3, iterations=1)
    finally:
        broker.close()
    benchmark.extra_info.update({"case": f"receive woken by a {woken_by}", "samples": len(late),
                                 "late_ms": percentiles([seconds * 1e3 for seconds in late])})


STOMP_REDELIVERY_DELAY_MS = 200
STOMP_NACKS_PER_ROUND = 10


@pytest.mark.benchmark(group="stomp-redelivery")
def test_stomp_redelivery_comes_when_due(benchmark, tmp_path):
    pytest.importorskip("coilmq", reason="coilmq is not installed (pip install 'journal_engine[coilmq]')")
    from stomp_server import Server, frame_bytes, send, subscriber      # tests/helpers, on the path in CI
    server = Server(tmp_path / "store", tmp_path / "server.log", "--redelivery-delay-ms",
                    str(STOMP_REDELIVERY_DELAY_MS), "--max-delivery-attempts", "-1")
    late_ms: list[float] = []
    try:
        worker = subscriber(server.port, "/queue/work", "client-individual")
        send(server.port, "/queue/work", b"again")
        headers = worker.read_frame()[1]

        def one_round() -> None:
            nonlocal headers
            for _ in range(STOMP_NACKS_PER_ROUND):
                time.sleep(0.037)       # off any 100 ms beat the arrivals could fall into step with
                worker.send_raw(frame_bytes("NACK", {"id": headers["ack"]}))
                nacked = time.monotonic()
                command, headers, body = worker.read_frame(STOMP_REDELIVERY_DELAY_MS / 1e3 + 5.0)
                assert (command, body, headers.get("redelivered")) == ("MESSAGE", b"again", "true")
                late = 1e3 * (time.monotonic() - nacked) - STOMP_REDELIVERY_DELAY_MS
                assert late >= -STOMP_REDELIVERY_DELAY_MS * 0.1, late      # never (much) before it is due
                late_ms.append(late)

        benchmark.pedantic(one_round, rounds=3, iterations=1)
    finally:
        server.stop()
    benchmark.extra_info.update({"case": "serve-stomp: a NACKed message back to its live subscriber, "
                                         f"{STOMP_REDELIVERY_DELAY_MS} ms redelivery delay",
                                 "samples": len(late_ms), "late_ms": percentiles(late_ms)})
