"""The message store's redelivery writers and the price of strict delivery counts.

Groups (numbers in docs/message-store.md, "Benchmarks"):
  store-writers   UPDATE_DELIVERY_COUNT (34) / SET_SCHEDULED_DELIVERY_TIME (36) records per second
                  through the batch entry point and through one call per record, sync="none",
                  automatic compaction off (it is measured with the journal); target >= 5M/s batched.
  store-strict    a send -> deliver -> ack loop with group commit, without and with
                  persist_delivery_count_before_delivery (and strict_delivery_sync);
  store-strict-paired  the same loop, default and strict rounds interleaved; extra_info
                  "cost_percent" is the price of the strict mode; target: <= 10%.
Every round checks afterwards (untimed) that what it wrote is there.
"""
from __future__ import annotations

import statistics
import threading
import time
from array import array

import pytest

import journal_engine
from journal_engine import MessageStore, RecordType

REFERENCES = 10_000                 # live references the writers update, round-robin
BATCHES_PER_ROUND = 50              # 500k records per round
FILE_SIZE = 64 * 1024 * 1024
LOOP_MESSAGES = 400                 # send -> deliver -> ack iterations per round, one thread
LOOP_THREADS = 8
LOOP_MESSAGES_PER_THREAD = 100


def _store(directory, **options) -> MessageStore:
    options.setdefault("file_size", FILE_SIZE)
    store = MessageStore(directory, **options)
    store.load()
    return store


def _fill(store: MessageStore, queue_id: int = 1, references: int = REFERENCES) -> tuple[array, array]:
    store.store_queue(queue_id, "bench", "bench")
    for message_id in range(1, references + 1):
        store.store_message(message_id, "bench", b"m")
        store.store_reference(queue_id, message_id)
    store.sync()
    return array("Q", [queue_id]) * references, array("Q", range(1, references + 1))


def _run(benchmark, target, *, records: int, case: str, rounds: int = 3) -> None:
    benchmark.extra_info.update({"case": case, "records_per_round": records,
                                 "implementation": journal_engine.IMPLEMENTATION})
    benchmark.pedantic(target, rounds=rounds, warmup_rounds=1, iterations=1)
    if benchmark.disabled:   # --benchmark-disable: one untimed pass, its checks and nothing to measure
        return
    stats = benchmark.stats.stats
    benchmark.extra_info["records_per_s"] = round(records / stats.median)
    benchmark.extra_info["records_per_s_best"] = round(records / stats.min)


# ----- store-writers ------------------------------------------------------------------------------------------

@pytest.mark.benchmark(group="store-writers")
@pytest.mark.parametrize("record_type", ["delivery-count-34", "scheduled-time-36"])
def test_writers_batch_no_sync(benchmark, case_dir, record_type):
    store = _store(case_dir, sync="none", max_redelivery_records=-1, compact_min_files=0)
    queues, messages = _fill(store)
    state = {"round": 0}
    records = REFERENCES * BATCHES_PER_ROUND

    def one_round():
        state["round"] += 1
        first = state["round"] * BATCHES_PER_ROUND
        written = 0
        for count in range(first, first + BATCHES_PER_ROUND):
            counts = array("I", [count]) * REFERENCES
            if record_type == "delivery-count-34":
                written += store.update_delivery_counts(queues, messages, counts)
            else:
                written += store.update_scheduled_delivery_times(queues, messages, array("Q", [count]) * REFERENCES,
                                                                 counts)
        assert written == records

    try:
        _run(benchmark, one_round, records=records, case=f"{record_type} batch of {REFERENCES}, sync none")
        if record_type == "delivery-count-34":
            assert store.persisted_delivery_count(1, REFERENCES) == state["round"] * BATCHES_PER_ROUND \
                + BATCHES_PER_ROUND - 1
    finally:
        store.close()


@pytest.mark.benchmark(group="store-writers")
def test_writers_one_call_per_record_no_sync(benchmark, case_dir):
    store = _store(case_dir, sync="none", max_redelivery_records=-1, compact_min_files=0)
    _fill(store)
    state = {"round": 0}
    rounds_of_references = 10
    update = store.update_delivery_count

    def one_round():
        state["round"] += 1
        first = state["round"] * rounds_of_references
        for count in range(first, first + rounds_of_references):
            for message_id in range(1, REFERENCES + 1):
                update(1, message_id, count)

    try:
        _run(benchmark, one_round, records=REFERENCES * rounds_of_references,
             case="delivery-count-34, one call per record, sync none")
        assert store.persisted_delivery_count(1, 1) == (state["round"] + 1) * rounds_of_references - 1
    finally:
        store.close()


# ----- store-strict -------------------------------------------------------------------------------------------

STRICT_MODES = {
    "default": {},
    "strict": {"persist_delivery_count_before_delivery": True},
    "strict-sync": {"persist_delivery_count_before_delivery": True, "strict_delivery_sync": True},
}


def _loop(store: MessageStore, queue_id: int, first_id: int, n: int) -> None:
    """A broker's life of n durable messages: the send waits for the disk (group commit), the
    delivery calls before_delivery, the ack and delete do not wait (Artemis: not synced)."""
    for message_id in range(first_id, first_id + n):
        store.store_message(message_id, "bench", b"x" * 256)
        store.store_reference(queue_id, message_id, sync=True)
        store.before_delivery(queue_id, message_id, 1)
        store.store_acknowledge(queue_id, message_id)
        store.delete_message(message_id)


@pytest.mark.benchmark(group="store-strict")
@pytest.mark.parametrize("mode", list(STRICT_MODES))
def test_strict_mode_send_deliver_ack_one_thread(benchmark, case_dir, mode):
    store = _store(case_dir, sync="group", **STRICT_MODES[mode])
    store.store_queue(1, "bench", "bench")
    state = {"next": 1}

    def one_round():
        _loop(store, 1, state["next"], LOOP_MESSAGES)
        state["next"] += LOOP_MESSAGES

    try:
        _run(benchmark, one_round, records=LOOP_MESSAGES, case=f"send-deliver-ack, 1 thread, {mode}", rounds=5)
        benchmark.extra_info["syncs"] = store.stats()["messages_journal"]["syncs"]
        assert store.stats()["messages"] == 0
    finally:
        store.close()


@pytest.mark.benchmark(group="store-strict")
@pytest.mark.parametrize("mode", list(STRICT_MODES))
def test_strict_mode_send_deliver_ack_threads(benchmark, case_dir, mode):
    store = _store(case_dir, sync="group", **STRICT_MODES[mode])
    for queue_id in range(LOOP_THREADS):
        store.store_queue(queue_id, f"bench-{queue_id}", "bench")
    state = {"next": 1}

    def one_round():
        base = state["next"]
        threads = [threading.Thread(target=_loop, args=(store, index, base + index * LOOP_MESSAGES_PER_THREAD,
                                                        LOOP_MESSAGES_PER_THREAD))
                   for index in range(LOOP_THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        state["next"] += LOOP_THREADS * LOOP_MESSAGES_PER_THREAD

    try:
        _run(benchmark, one_round, records=LOOP_THREADS * LOOP_MESSAGES_PER_THREAD,
             case=f"send-deliver-ack, {LOOP_THREADS} threads, {mode}", rounds=5)
        benchmark.extra_info["syncs"] = store.stats()["messages_journal"]["syncs"]
        assert store.stats()["messages"] == 0
        assert store.record_count(RecordType.ADD_MESSAGE) == 0
    finally:
        store.close()


PAIRED_ROUNDS = 40
PAIRED_MESSAGES = 200               # per store and pair: short rounds, many pairs


@pytest.mark.benchmark(group="store-strict-paired")
@pytest.mark.parametrize("threads", [1, LOOP_THREADS])
@pytest.mark.parametrize("mode", ["strict", "strict-sync"])
def test_strict_mode_cost_paired(benchmark, case_dir, mode, threads):
    """The cost of a strict mode against the default, measured in pairs of short rounds: which store
    goes first alternates from pair to pair, so a drift in the disk's latency hits both alike, and
    the cost is the median over the pairs of (strict time / default time - 1), with its quartiles:
    extra_info["cost_percent"], ["cost_percent_q1"], ["cost_percent_q3"]."""
    stores = {name: _store(case_dir / name, sync="group", **STRICT_MODES[name]) for name in ("default", mode)}
    for store in stores.values():
        for queue_id in range(threads):
            store.store_queue(queue_id, f"bench-{queue_id}", "bench")
    per_thread = PAIRED_MESSAGES // threads
    times = {name: [] for name in stores}
    state = {"next": 1, "pair": 0}

    def timed_round(name):
        store = stores[name]
        base = state["next"]
        workers = [threading.Thread(target=_loop, args=(store, index, base + index * per_thread, per_thread))
                   for index in range(threads)]
        started = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        times[name].append(time.perf_counter() - started)
        state["next"] += threads * per_thread

    def pair():
        order = ("default", mode) if state["pair"] % 2 == 0 else (mode, "default")
        state["pair"] += 1
        for name in order:
            timed_round(name)

    try:
        benchmark.extra_info.update({"case": f"send-deliver-ack, {threads} threads, default vs {mode}",
                                     "records_per_round": 2 * threads * per_thread,
                                     "implementation": journal_engine.IMPLEMENTATION})
        benchmark.pedantic(pair, rounds=PAIRED_ROUNDS, warmup_rounds=1, iterations=1)
        if not benchmark.disabled:   # --benchmark-disable: one pair, no warm-up to leave out, nothing to measure
            costs = [100 * (strict_s / default_s - 1)
                     for default_s, strict_s in zip(times["default"][1:], times[mode][1:])]
            q1, median, q3 = statistics.quantiles(costs, n=4)
            benchmark.extra_info["default_messages_per_s"] = round(
                threads * per_thread / statistics.median(times["default"][1:]))
            benchmark.extra_info[f"{mode}_messages_per_s"] = round(
                threads * per_thread / statistics.median(times[mode][1:]))
            benchmark.extra_info["cost_percent"] = round(median, 1)
            benchmark.extra_info["cost_percent_q1"] = round(q1, 1)
            benchmark.extra_info["cost_percent_q3"] = round(q3, 1)
        for name, store in stores.items():
            benchmark.extra_info[f"{name}_syncs"] = store.stats()["messages_journal"]["syncs"]
            assert store.stats()["messages"] == 0
    finally:
        for store in stores.values():
            store.close()
