"""The main job, end to end: a broker under load is killed, recovers, and its dead letters are redriven.

A child process runs a Broker in a directory with Artemis redelivery and dead-letter settings on the
address ``orders`` (three delivery attempts, a redelivery delay that doubles, a dead-letter address
with auto-created queues). It sends batches of messages and consumes them: most are acknowledged,
some fail once and succeed on redelivery, poison ones fail until they are dead-lettered. After each
batch it waits for the store's sync and then reports what is durable: sends, acknowledgements,
delivery counts, dead letters. The parent kills it with SIGKILL mid-flight and then checks, on
``Broker(directory)`` again:

* every message whose send was reported durable and not acknowledged is back, and none whose
  acknowledgement was reported durable (the child announces each acknowledgement and dead-lettering
  before issuing it, since the group commit may make it durable at once: one announced but not yet
  reported durable is in doubt, the message may be back or not);
* every recovered message's next delivery has a delivery count above the last one reported durable,
  and ``redelivered`` is exactly ``delivery_count > 1``;
* every dead letter reported durable is in the dead-letter queue with its reason and delivery history.

Then it lists the dead-letter queue (as ``journal-engine dlq list``), redrives it with
``Broker.redrive`` and checks each redriven message's audit trail, and draws throughput over time
and the recovery time into a PNG (matplotlib: ``pip install '.[demo]'`` in the checkout).
"""
from __future__ import annotations

import argparse
import datetime
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from . import IMPLEMENTATION, AddressSettings, Broker

ADDRESS = "orders"
DEAD_LETTER_ADDRESS = "DLA"
DEAD_LETTER_QUEUE = "DLQ.orders"
MAX_DELIVERY_ATTEMPTS = 3
BATCH = 50
POISON_EVERY = 25           # every 25th message fails until it is dead-lettered
FLAKY_EVERY = 7             # every 7th fails once, then succeeds
TICK_S = 0.25
CHILD_START_TIMEOUT_S = 60.0


def _settings() -> AddressSettings:
    return AddressSettings(max_delivery_attempts=MAX_DELIVERY_ATTEMPTS, redelivery_delay=5,
                           redelivery_delay_multiplier=2.0, dead_letter_address=DEAD_LETTER_ADDRESS,
                           auto_create_dead_letter_resources=True)


def _open_broker(directory: str) -> Broker:
    broker = Broker(directory)
    broker.address_settings.add(ADDRESS, _settings())
    if ADDRESS not in broker.queue_names():
        broker.create_queue(ADDRESS)
    return broker


def _announce(out, message_id: int) -> None:
    """Say 'doubt' before an acknowledgement or a dead-lettering is issued: in group mode the flusher may
    make it durable at any moment after the call, long before the batch's sync reports it."""
    out.write(f"doubt {message_id}\n")
    out.flush()


def _consume_batch(consumer, out) -> tuple[list[int], list[tuple[int, int]], list[int]]:
    """Receive up to a batch: acknowledge, roll back once (flaky) or until dead-lettered (poison).

    Returns the acknowledged ids, the (id, delivery count) of rollbacks and the dead-lettered ids; an
    acknowledgement or a dead-lettering is announced before it is issued (see `_announce`)."""
    acked: list[int] = []
    counts: list[tuple[int, int]] = []
    dead: list[int] = []
    for _ in range(BATCH):
        message = consumer.receive(0)
        if message is None:
            break
        kind = message.properties["kind"]
        if kind == "poison" or (kind == "flaky" and message.delivery_count == 1):
            if kind == "poison" and message.delivery_count >= MAX_DELIVERY_ATTEMPTS:
                _announce(out, message.message_id)
                consumer.rollback(message)
                dead.append(message.message_id)
            else:
                consumer.rollback(message)
                counts.append((message.message_id, message.delivery_count))
        else:
            _announce(out, message.message_id)
            consumer.ack(message)
            acked.append(message.message_id)
    return acked, counts, dead


def _child(directory: str, seed: int) -> None:
    """Send and consume until killed; after each synced batch report 'sent', 'ack', 'count', 'dead'."""
    rng = random.Random(seed)
    broker = _open_broker(directory)
    consumer = broker.create_consumer(ADDRESS)
    out = sys.stdout
    sequence = 0
    last_tick = time.monotonic()
    sent_total = acked_total = 0
    while True:
        sent = []
        for _ in range(BATCH):
            sequence += 1
            kind = "poison" if sequence % POISON_EVERY == 0 else "flaky" if sequence % FLAKY_EVERY == 0 else "ok"
            sent.append(broker.send(ADDRESS, rng.randbytes(64), properties={"kind": kind, "n": sequence}))
        acked, counts, dead = _consume_batch(consumer, out)
        broker.sync()           # everything above is durable now: report it
        sent_total += len(sent)
        acked_total += len(acked)
        lines = [f"sent {i}" for i in sent] + [f"ack {i}" for i in acked]
        lines += [f"count {i} {c}" for i, c in counts] + [f"dead {i}" for i in dead]
        now = time.monotonic()
        if now - last_tick >= TICK_S:
            lines.append(f"tick {time.time():.3f} {sent_total} {acked_total}")
            last_tick = now
        out.write("\n".join(lines) + "\n")
        out.flush()


class _Reports:
    """What the child said was durable, read from its stdout on a thread."""

    def __init__(self) -> None:
        self.sent: set[int] = set()
        self.acked: set[int] = set()
        self.counts: dict[int, int] = {}
        self.dead: set[int] = set()
        self.doubted: set[int] = set()      # acknowledged or dead-lettered, durable or not yet: either is right
        self.ticks: list[tuple[float, int, int]] = []
        self.spawned_at = 0.0           # wall time of the child's start: the chart's zero
        self.killed_at = 0.0            # wall time of the SIGKILL: the chart's red line

    def read(self, stream) -> None:
        for line in stream:
            word, *values = line.split()
            if word == "sent":
                self.sent.add(int(values[0]))
            elif word == "ack":
                self.acked.add(int(values[0]))
            elif word == "count":
                self.counts[int(values[0])] = int(values[1])
            elif word == "dead":
                self.dead.add(int(values[0]))
            elif word == "doubt":
                self.doubted.add(int(values[0]))
            elif word == "tick":
                self.ticks.append((float(values[0]), int(values[1]), int(values[2])))


def _run_child(directory: str, seconds: float, seed: int, rng: random.Random, show) -> tuple[_Reports, float]:
    # the child starts in the demo's directory: `python -m` puts the working directory first on
    # sys.path, and a source checkout there would shadow the installed (compiled) package
    child = subprocess.Popen([sys.executable, "-m", "journal_engine.demo", "--child", directory, "--seed", str(seed)],
                             stdout=subprocess.PIPE, text=True, bufsize=1, cwd=directory)
    reports = _Reports()
    reports.spawned_at = time.time()
    reader = threading.Thread(target=reports.read, args=(child.stdout,), daemon=True)
    reader.start()
    kill_after = seconds * rng.uniform(0.8, 1.0)
    deadline = time.monotonic() + CHILD_START_TIMEOUT_S
    while not reports.sent and child.poll() is None and time.monotonic() < deadline:
        show(0.0, kill_after, "starting the child broker")      # the clock runs from its first durable batch
        time.sleep(0.05)
    started = time.monotonic()
    while time.monotonic() - started < kill_after and child.poll() is None:
        time.sleep(0.1)
        show(min(time.monotonic() - started, kill_after), kill_after,
             f"child broker under load: {len(reports.sent)} sent, {len(reports.acked)} acked, "
             f"{len(reports.dead)} dead-lettered")
    if child.poll() is not None:
        raise RuntimeError(f"the child broker exited by itself (status {child.returncode}) before the kill")
    if not reports.sent:
        child.kill()
        raise RuntimeError(f"the child broker reported nothing within {CHILD_START_TIMEOUT_S:.0f} s")
    reports.killed_at = time.time()     # kill_after counts from the first durable batch, the chart from the spawn
    child.send_signal(signal.SIGKILL)
    child.wait()
    reader.join(timeout=10)
    return reports, kill_after


def _check_recovery(broker: Broker, reports: _Reports) -> dict:
    """Drain the recovered queue and compare every message with what the child reported durable."""
    present: dict[int, object] = {}
    consumer = broker.create_consumer(ADDRESS)
    wrong_counts, wrong_flags = [], []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        message = consumer.receive(timeout=0.2)      # redeliveries wait out their delay
        if message is None:
            if broker.queue(ADDRESS).message_count == 0:     # nothing scheduled either: drained
                break
            continue
        present[message.message_id] = message
        reported = reports.counts.get(message.message_id, 0)
        if message.delivery_count < reported + 1:
            wrong_counts.append((message.message_id, reported, message.delivery_count))
        if message.redelivered != (message.delivery_count > 1):
            wrong_flags.append(message.message_id)
        consumer.ack(message)
    consumer.close()
    expected = reports.sent - reports.acked - reports.dead
    # a message dead-lettered or acknowledged after the last report is legitimately gone
    copies = {m.properties.get("_AMQ_ORIG_MESSAGE_ID"): m for m in broker.browse(DEAD_LETTER_QUEUE)} \
        if DEAD_LETTER_QUEUE in broker.queue_names() else {}
    in_doubt = reports.doubted - reports.acked - reports.dead
    missing = sorted(i for i in expected if i not in present and i not in copies and i not in in_doubt)
    back_after_ack = sorted(i for i in reports.acked if i in present)
    dead_missing = sorted(i for i in reports.dead if i not in copies)
    without_trail = sorted(i for i, m in copies.items()
                           if m.properties.get("_JE_DEAD_LETTER_REASON") != "max-delivery-attempts"
                           or not m.properties.get("_JE_DELIVERY_HISTORY"))
    return {"recovered": len(present), "in_doubt": len(in_doubt), "redelivered": sum(1 for m in present.values() if m.redelivered),
            "expected": len(expected), "missing": missing, "back_after_ack": back_after_ack,
            "wrong_counts": wrong_counts, "wrong_flags": wrong_flags, "dead_letters": len(copies),
            "dead_missing": dead_missing, "without_trail": without_trail}


def _chart_series(reports: _Reports) -> tuple[list[float], list[float], list[float], float]:
    """Seconds since the spawn of each tick, sends/s and acks/s between ticks, and the SIGKILL's second on
    the same clock."""
    ticks = reports.ticks
    start = reports.spawned_at
    times = [t - start for t, _s, _a in ticks[1:]]
    sends = [(s1 - s0) / max(t1 - t0, 1e-6) for (t0, s0, _), (t1, s1, _) in zip(ticks, ticks[1:])]
    acks = [(a1 - a0) / max(t1 - t0, 1e-6) for (t0, _, a0), (t1, _, a1) in zip(ticks, ticks[1:])]
    return times, sends, acks, reports.killed_at - start


def _history_text(history: list[dict]) -> str:
    """A dead letter's delivery history as times of day (UTC, to the millisecond) and reasons."""
    return "; ".join(f"{_time_of_day(h['time'])} {h['reason']}" for h in history)


def _time_of_day(epoch_ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.timezone.utc)
    return moment.strftime("%H:%M:%S.") + f"{epoch_ms % 1000:03d}"


def _dlq_title(directory: str, kept: bool, shown: int, total: int) -> str:
    """The table's title: the command that lists the same, when its directory outlives the demo."""
    if kept:
        return f"journal-engine dlq list {directory} --queue {DEAD_LETTER_QUEUE} (first {shown} of {total})"
    return (f"{DEAD_LETTER_QUEUE}, as journal-engine dlq list shows it (first {shown} of {total}; the directory "
            "is deleted at the end, --keep DIR keeps it)")


def _dlq_table(rows: list[dict], title: str):
    from rich.table import Table
    table = Table(title=title)
    for column in ("id", "original id", "deliveries"):
        table.add_column(column, no_wrap=True)
    table.add_column("reason", overflow="fold")     # a reason is read whole, folded rather than cut
    table.add_column("history (UTC, reason)", overflow="fold")
    for row in rows:
        table.add_row(str(row["message_id"]), str(row["original_message_id"]), str(row["delivery_count"]),
                      str(row["reason"]), _history_text(row["history"]) or "(before the restart)")
    return table


def _default_png(directory: str, kept: bool) -> str:
    """--keep DIR: in DIR; else one file in the temporary folder, replaced by the next run (none pile up)."""
    return os.path.join(directory if kept else tempfile.gettempdir(), "journal-engine-demo.png")


PNG_HELP = ("where the chart goes (default: journal-engine-demo.png in the --keep directory, else in the "
            "temporary folder, replaced by the next run)")


def _chart(path: str, reports: _Reports, recovery_ms: float) -> str | None:
    """Throughput over time and the recovery time, as a PNG; None when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 1]})
    if len(reports.ticks) >= 2:
        times, sends, acks, kill_s = _chart_series(reports)
        left.plot(times, sends, label="sends/s (durable)")
        left.plot(times, acks, label="acks/s (durable)")
        left.axvline(kill_s, color="red", linestyle="--", label="SIGKILL")
        left.legend()
    left.set_xlabel("seconds")
    left.set_title("child broker throughput")
    right.bar(["recovery"], [recovery_ms], color="tab:green")
    right.set_ylabel("ms")
    right.set_title(f"recovery: {recovery_ms:.0f} ms")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return path


def run(*, seconds: float = 4.0, keep: str | None = None, png: str | None = None, seed: int | None = None) -> int:
    """The demo (see the module docstring); 0 when every check passed."""
    from rich.progress import Progress
    from rich.table import Table

    from .cli.console import stdout
    from .cli.dead_letters import dead_letters
    from .cli.target import locate

    console = stdout()              # 160 columns when piped, so the tables are not squeezed to 80
    seed = random.randrange(1 << 30) if seed is None else seed
    rng = random.Random(seed)
    directory = os.path.abspath(keep) if keep else tempfile.mkdtemp(prefix="journal-engine-demo-")
    os.makedirs(directory, exist_ok=True)
    console.print(f"journal_engine demo ({IMPLEMENTATION} core, seed {seed}): broker directory {directory}")
    console.print(f"  address {ADDRESS!r}: max {MAX_DELIVERY_ATTEMPTS} delivery attempts, redelivery delay 5 ms "
                  f"doubling, dead letters to {DEAD_LETTER_ADDRESS!r} (auto-created {DEAD_LETTER_QUEUE!r})")
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("starting the child broker", total=1.0)

        def show(done: float, total: float, text: str) -> None:
            bar.update(task, completed=done, total=total, description=text)

        reports, kill_after = _run_child(directory, seconds, seed, rng, show)
    console.print(f"  SIGKILL after {kill_after:.2f} s: the child had reported durable {len(reports.sent)} sends, "
                  f"{len(reports.acked)} acknowledgements, {len(reports.counts)} delivery counts, "
                  f"{len(reports.dead)} dead letters")
    started = time.perf_counter()
    broker = _open_broker(directory)
    recovery_ms = (time.perf_counter() - started) * 1000
    try:
        result = _check_recovery(broker, reports)
        console.print(f"  recovered in {recovery_ms:.1f} ms: {result['recovered']} messages delivered again "
                      f"({result['redelivered']} redelivered), {result['dead_letters']} in {DEAD_LETTER_QUEUE}; "
                      f"{result['in_doubt']} acknowledged or dead-lettered in the last unreported batch")
    finally:
        broker.close()
    rows = dead_letters(locate(directory), queue=DEAD_LETTER_QUEUE)
    console.print(_dlq_table(rows[:5], _dlq_title(directory, keep is not None, min(5, len(rows)), len(rows))))
    broker = _open_broker(directory)
    try:
        redriven = broker.redrive(DEAD_LETTER_QUEUE) if DEAD_LETTER_QUEUE in broker.queue_names() else None
        if redriven is None or not redriven.moved:
            raise RuntimeError("no dead letter to redrive: run the demo longer (--seconds)")
        trail_ok = True
        by_id = {m.message_id: m for m in broker.browse(ADDRESS)}
        for _old, new, _queue in redriven.moved:
            properties = by_id[new].properties
            trail_ok &= (properties.get("_JE_REDRIVE_COUNT") == 1
                         and properties.get("_JE_REDRIVE_SOURCE") == DEAD_LETTER_QUEUE
                         and isinstance(properties.get("_JE_REDRIVE_TIME"), int))
        sample = by_id[redriven.moved[0][1]].properties
        console.print(f"  redriven {len(redriven.moved)} from {DEAD_LETTER_QUEUE} back to {ADDRESS}; the first "
                      f"carries _JE_REDRIVE_COUNT={sample['_JE_REDRIVE_COUNT']}, "
                      f"_JE_REDRIVE_SOURCE={sample['_JE_REDRIVE_SOURCE']!r}, "
                      f"_JE_REDRIVE_TIME={sample['_JE_REDRIVE_TIME']}")
    finally:
        broker.close()
    chart = _chart(png or _default_png(directory, keep is not None), reports, recovery_ms)
    checks = [
        ("every durable, unacknowledged message recovered", not result["missing"], f"{len(result['missing'])} missing"),
        ("no message back after a durable acknowledgement", not result["back_after_ack"],
         f"{len(result['back_after_ack'])} back"),
        ("every delivery count above the last durable one", not result["wrong_counts"],
         f"{len(result['wrong_counts'])} wrong"),
        ("redelivered == (delivery_count > 1) on every message", not result["wrong_flags"],
         f"{len(result['wrong_flags'])} wrong"),
        ("every durable dead letter in the DLQ with reason and history",
         not result["dead_missing"] and not result["without_trail"],
         f"{len(result['dead_missing'])} missing, {len(result['without_trail'])} without a trail"),
        ("every redriven message carries its audit trail", trail_ok, "a trail is wrong"),
    ]
    summary = Table(title="summary")
    summary.add_column("check")
    summary.add_column("result")
    for name, passed, why in checks:
        summary.add_row(name, "ok" if passed else f"FAILED: {why}")
    console.print(summary)
    console.print(f"  chart (throughput, recovery time): {chart}" if chart else
                  "  chart: skipped, matplotlib is not installed (pip install '.[demo]' in the journal_engine checkout)", markup=False)
    ok = all(passed for _name, passed, _why in checks)
    console.print("verdict: " + ("every acknowledged message, delivery count and dead letter survived the SIGKILL"
                                 if ok else "FAILED (see the summary)"))
    if keep is None:
        shutil.rmtree(directory, ignore_errors=True)
    return 0 if ok else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="journal-engine demo", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--keep", metavar="DIR")
    parser.add_argument("--png", metavar="FILE", help=PNG_HELP)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--child", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.seed or 0)
        return 0
    return run(seconds=args.seconds, keep=args.keep, png=args.png, seed=args.seed)


if __name__ == "__main__":
    sys.exit(main())
