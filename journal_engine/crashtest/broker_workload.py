"""The broker-level workload of the crash harness, run in a child process until it is killed, and the
check of what a recovered broker holds against what the child said it did.

The child opens a broker on a journal (recovering it), with strict mode
(``persist_delivery_count_before_delivery``) on or off, and makes a random mix of sends, deliveries,
acknowledgements, rollbacks (with the address's redelivery delay, or a delay of its own) and
rollbacks past ``max_delivery_attempts`` that dead-letter, advancing its manual clock so that delayed
messages come due. Up to five delivered messages are held a while before they are settled (a consumer
still working on them), so a kill finds deliveries in flight. It streams its oracle as it goes, one write per line:

  ``O <seq> send <id>`` / ``O <seq> ack <id>`` / ``O <seq> rbk <id> <count>`` / ``O <seq> dlq <id>``
      before each call (a rollback names the delivery count it makes durable); every send carries the
      duplicate id ``m-<id>``, and ``O <seq> resend <id>`` is a send again of an earlier message with
      its id (of this life, or one recovery brought back), which the broker must refuse: the child
      fails if it routes it;
  ``D <id> <count>`` after a delivery returned (in strict mode its count is on disk by then);
  ``A <seq>`` after ``broker.sync()`` returned: every call up to seq is durable;
  ``T <ms>`` the clock; ``R`` once recovery is done.

The invariants, checked after every recovery (``check_broker``):
  * acknowledged sends survive: a message sent before the last ``A`` is in its queue, or dead-lettered,
    unless an acknowledgement or dead-lettering of it had begun;
  * deleted (acknowledged) messages never return, and dead-lettered ones are in the dead-letter queue;
  * delivery counts never go backwards: not below the count of the last recovery, nor below the count
    of a rollback acknowledged by a sync;
  * with strict mode, every message delivered before the crash comes back with at least that count
    (so its next delivery is marked redelivered);
  * nothing never sent appears, and every body is the one sent;
  * no message is dead-lettered twice (the dead-letter queue holds one copy of each);
  * no duplicate id is routed twice: every message in the queue came back with its duplicate id in
    the address's cache (a message and its id are one atomic group), every send acknowledged by a sync
    has its id there, and the cache holds no id that was never sent.

The concurrent flavour (``run_concurrent``) makes the same calls as several clients do: consumer
threads, transacted sessions committed or rolled back, consumers closed with messages in hand, the
wall clock; its ``A <seq>`` covers only calls that had returned when the sync began, and
``U <id> <count>`` marks a message a closed consumer gave back uncounted (the broker writes its
lowered count, so that delivery no longer sets a floor for strict mode).

    python -m journal_engine.crashtest.broker_workload DIRECTORY SYNC STRICT SEED CLOCK_MS [STORE [concurrent]]
"""
from __future__ import annotations

import os
import random
import sys
import threading
import time
import traceback

from ..limits import ID_CACHE_SIZE_DEFAULT
from .children import error_line
from .stores import FILE_SIZE

QUEUE, DEAD_LETTER_QUEUE, DEAD_LETTER_ADDRESS = "orders", "DLQ", "DLA"
MAX_DELIVERY_ATTEMPTS = 3
CONSUMER_THREADS = 3       # the concurrent flavour's consumer threads (every other one transacted)
ORIGINAL_ID = "_AMQ_ORIG_MESSAGE_ID"
DUPLICATE_ID = "_AMQ_DUPL_ID"
RESEND_CHANCE = 0.05       # of a step: send an earlier message again with its duplicate id


def duplicate_id_of(message_id: int) -> str:
    return f"m-{message_id}"


def send_new(broker, message_id: int):
    """The workload's send of message ``message_id``, with its duplicate id."""
    return broker.send(QUEUE, body_of(message_id), properties={DUPLICATE_ID: duplicate_id_of(message_id)})


def resend(broker, message_id: int) -> None:
    """An earlier message sent again with its duplicate id, as a client does after a lost reply: the
    broker must not route it (AssertionError, which fails the child, if it does)."""
    if send_new(broker, message_id) is not None:
        raise AssertionError(f"the duplicate id of message {message_id} was routed a second time")


def body_of(message_id: int) -> bytes:
    return b"broker-message-%d" % message_id


def open_broker(directory: str, sync: str, strict: bool, clock_ms: int, store: str = "journal", *,
                wall_clock: bool = False):
    """The workload's broker on `store` ("journal" or "lmdb"), its queues created on first use; on a
    manual clock at `clock_ms`, or (`wall_clock`) the system's."""
    from .. import AddressSettings, Broker, ManualClock, WallClock
    broker = Broker(directory, clock=WallClock() if wall_clock else ManualClock(clock_ms), max_redelivery_records=-1,
                    sync=sync,
                    persist_delivery_count_before_delivery=strict, store=store,
                    store_options={"file_size": FILE_SIZE})     # small files where the backend has files
    broker.address_settings.add(QUEUE, AddressSettings(
        redelivery_delay=100, redelivery_delay_multiplier=2.0, max_redelivery_delay=800,
        max_delivery_attempts=MAX_DELIVERY_ATTEMPTS, dead_letter_address=DEAD_LETTER_ADDRESS))
    if QUEUE not in broker.queue_names():
        broker.create_queue(QUEUE)
        broker.create_queue(DEAD_LETTER_QUEUE, address=DEAD_LETTER_ADDRESS)
    return broker


def recovered_state(directory: str, sync: str, clock_ms: int, store: str = "journal") -> dict:
    """{"queue": {id: (delivery count, body)}, "dead": {original id: body}, "dead_copies": {original
    id: copies}, "ids": the queue address's cached duplicate ids, "queue_ids": {id: its duplicate id}}
    of the recovered broker: every message received once, with the clock a day on (so
    delayed ones are due), and none acknowledged. Strict mode stays off here, so that looking writes
    no delivery count; a message's recovered count is the one its next delivery shows, less one.
    Dead letters are keyed by original id, so their copies are counted apart: a second copy of one
    message would otherwise be invisible."""
    broker = open_broker(directory, sync, False, clock_ms + 86_400_000, store)
    try:
        consumer = broker.create_consumer(QUEUE)
        received = list(iter(lambda: consumer.receive(0), None))
        queue = {m.message_id: (m.delivery_count - 1, m.body) for m in received}
        queue_ids = {m.message_id: (m.properties or {}).get(DUPLICATE_ID) for m in received}
        ids = {key.decode() for key in broker.duplicate_ids(QUEUE)}
        dead: dict = {}
        copies: dict = {}
        for message in broker.browse(DEAD_LETTER_QUEUE):
            original = int(message.properties[ORIGINAL_ID])
            dead[original] = message.body
            copies[original] = copies.get(original, 0) + 1
    finally:
        broker.close()
    return {"queue": queue, "dead": dead, "dead_copies": copies, "ids": ids, "queue_ids": queue_ids}


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def run(directory: str, sync: str, strict: bool, seed: int, clock_ms: int, store: str = "journal") -> None:
    rng = random.Random(seed)
    broker = open_broker(directory, sync, strict, clock_ms, store)
    clock = broker.clock
    sent_before = [message.message_id for message in broker.browse(QUEUE)]     # recovered: their ids cached
    consumer = broker.create_consumer(QUEUE)
    say("R")
    seq = 0

    def intent(*fields) -> int:
        nonlocal seq
        seq += 1
        say("O " + " ".join(str(f) for f in (seq,) + fields))
        return seq

    held: list = []                  # delivered and not yet settled: a consumer still working on them

    def settle(message) -> None:
        choice = rng.random()
        if choice < 0.35:
            intent("ack", message.message_id)
            consumer.ack(message)
        elif message.delivery_count >= MAX_DELIVERY_ATTEMPTS:
            intent("dlq", message.message_id)
            consumer.rollback(message)
        else:
            intent("rbk", message.message_id, message.delivery_count)
            consumer.rollback(message, delay_ms=rng.choice((None, None, 0, 50)))

    while True:
        r = rng.random()
        if held and rng.random() < 0.3:
            settle(held.pop(0))
        elif sent_before and rng.random() < RESEND_CHANCE:
            message_id = rng.choice(sent_before)
            intent("resend", message_id)
            resend(broker, message_id)
        elif r < 0.35 or len(broker.browse(QUEUE)) < 3:
            message_id = broker.stats()["next_message_id"]
            intent("send", message_id)
            sent = send_new(broker, message_id)
            if sent != message_id:
                raise AssertionError(f"send returned id {sent}, {message_id} announced")
            sent_before.append(message_id)
        elif r < 0.85:
            message = consumer.receive(0)
            if message is None:
                clock.advance(rng.choice((100, 300, 800)))
                say(f"T {clock.now_ms()}")
                continue
            say(f"D {message.message_id} {message.delivery_count}")
            if len(held) < 5 and rng.random() < 0.3:
                held.append(message)
            else:
                settle(message)
        if rng.random() < 0.3:
            broker.sync()
            say(f"A {seq}")


class _Oracle:
    """The concurrent workload's oracle: sequence numbers shared by its threads, and the calls begun and
    not yet returned, so that ``A <seq>`` after a sync never covers a call another thread is still in."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seq = 0
        self.in_flight: set[int] = set()

    def begin(self, *fields) -> int:
        with self.lock:
            self.seq += 1
            self.in_flight.add(self.seq)
            say("O " + " ".join(str(f) for f in (self.seq,) + fields))
            return self.seq

    def done(self, *seqs: int) -> None:
        with self.lock:
            self.in_flight.difference_update(seqs)

    def returned_up_to(self) -> int:
        """The highest seq with every call up to it returned."""
        with self.lock:
            return min(self.in_flight) - 1 if self.in_flight else self.seq


def run_concurrent(directory: str, sync: str, strict: bool, seed: int, store: str = "journal") -> None:
    """The workload as several clients make it: a producer (this thread) that sends and syncs on the
    wall clock, and CONSUMER_THREADS consumer threads, every other one in a transacted session that
    commits or rolls back what it received; a consumer now and then closed with messages in hand
    (they go back uncounted: ``U <id> <count>`` before the close) and opened again. A thread that
    fails ends the process (exit 1, its error on stderr): the campaign reports it."""
    rng = random.Random(seed)
    broker = open_broker(directory, sync, strict, 0, store, wall_clock=True)
    oracle = _Oracle()
    ids = threading.Lock()      # a send announces its id before the call: no other call may take an id meanwhile

    def settle(consumer, message, thread_rng) -> None:
        if thread_rng.random() < 0.35:
            seq = oracle.begin("ack", message.message_id)
            consumer.ack(message)
        else:
            with ids:           # a rollback may dead-letter: the copy takes an id
                if message.delivery_count >= MAX_DELIVERY_ATTEMPTS:
                    seq = oracle.begin("dlq", message.message_id)
                else:
                    seq = oracle.begin("rbk", message.message_id, message.delivery_count)
                consumer.rollback(message)
        oracle.done(seq)

    def end_session(session, consumer, received, thread_rng) -> None:
        if thread_rng.random() < 0.5:
            seqs = [oracle.begin("ack", message.message_id) for message in received]
            for message in received:
                consumer.ack(message)
            session.commit()
        else:
            with ids:
                seqs = [oracle.begin("dlq", message.message_id) if message.delivery_count >= MAX_DELIVERY_ATTEMPTS
                        else oracle.begin("rbk", message.message_id, message.delivery_count) for message in received]
                session.rollback()
        oracle.done(*seqs)

    def consume(number: int) -> None:
        thread_rng = random.Random(seed * 31 + number)
        transacted = number % 2 == 1
        session = broker.create_session(transacted=True) if transacted else None
        consumer = session.create_consumer(QUEUE) if transacted else broker.create_consumer(QUEUE)
        held: list = []          # delivered, not yet settled (in a session: not yet committed or rolled back)
        try:
            while True:
                if thread_rng.random() < 0.03:       # the client goes away with messages in hand
                    for message in held:
                        say(f"U {message.message_id} {message.delivery_count}")
                    with ids:       # a close dead-letters a message whose lowered count is still at the
                        (session or consumer).close()   # limit (recovered above it): the copy takes an id
                    held = []
                    session = broker.create_session(transacted=True) if transacted else None
                    consumer = session.create_consumer(QUEUE) if transacted else broker.create_consumer(QUEUE)
                    continue
                message = consumer.receive(0.005)
                if message is not None:
                    say(f"D {message.message_id} {message.delivery_count}")
                    held.append(message)
                if transacted and held and (len(held) >= 3 or message is None):
                    end_session(session, consumer, held, thread_rng)
                    held = []
                elif not transacted and held and (len(held) > 3 or thread_rng.random() < 0.6):
                    settle(consumer, held.pop(0), thread_rng)
        except BaseException as exc:        # noqa: B902 -- a client thread's failure is the run's
            say(error_line(exc))
            traceback.print_exc()
            os._exit(1)

    say("R")
    for number in range(CONSUMER_THREADS):
        threading.Thread(target=consume, args=(number,), daemon=True).start()
    while True:
        if rng.random() < 0.5 or len(broker.browse(QUEUE)) < 3:
            with ids:
                message_id = broker.stats()["next_message_id"]
                seq = oracle.begin("send", message_id)
                sent = send_new(broker, message_id)
            oracle.done(seq)
            if sent != message_id:
                raise AssertionError(f"send returned id {sent}, {message_id} announced")
        elif rng.random() < 0.5:
            upto = oracle.returned_up_to()
            broker.sync()
            say(f"A {upto}")
        else:
            time.sleep(0.001)
            say(f"T {broker.clock.now_ms()}")


def check_broker(previous: dict, lines: list[str], recovered: dict, *, strict: bool, context: str) -> list[str]:
    """The invariants of the module docstring, as violations."""
    problems = []
    acked = max([int(line.split()[1]) for line in lines if line.startswith("A ")], default=0)
    began: dict[int, list] = {}       # message id -> [(seq, op, args)] begun in this run
    delivered: dict[int, int] = {}    # message id -> the highest count delivered
    for line in lines:
        parts = line.split()
        if parts[0] == "O":
            seq, op, message_id = int(parts[1]), parts[2], int(parts[3])
            began.setdefault(message_id, []).append((seq, op, parts[4:]))
        elif parts[0] == "D":
            delivered[int(parts[1])] = max(delivered.get(int(parts[1]), 0), int(parts[2]))
        elif parts[0] == "U" and delivered.get(int(parts[1])) == int(parts[2]):
            # a closed consumer's message goes back uncounted: the broker writes the lowered count
            # (Artemis's cancelRefs then checkRedelivery), so that delivery sets no floor for strict mode
            delivered[int(parts[1])] = int(parts[2]) - 1
    queue, dead = recovered["queue"], recovered["dead"]
    known = set(previous["queue"]) | set(previous["dead"]) | {m for m, ops in began.items()
                                                               if any(op == "send" for _s, op, _a in ops)}
    for message_id, (count, body) in queue.items():
        if message_id not in known:
            problems.append(f"{context}: message {message_id} was never sent")
        elif body != body_of(message_id):
            problems.append(f"{context}: message {message_id} has a body it was never sent with")
    for message_id, body in dead.items():
        if body != body_of(message_id):
            problems.append(f"{context}: the dead letter of {message_id} has a body it was never sent with")
    for message_id, copies in recovered.get("dead_copies", {}).items():
        if copies > 1:
            problems.append(f"{context}: message {message_id} is in the dead-letter queue {copies} times")
    problems += _duplicate_id_problems(recovered, began, acked, context)
    for message_id in known:
        ops = began.get(message_id, [])
        removing = [s for s, op, _a in ops if op in ("ack", "dlq")]
        sent_acked = message_id in previous["queue"] or any(op == "send" and s <= acked for s, op, _a in ops)
        if message_id in previous["dead"] and message_id not in dead:
            problems.append(f"{context}: the dead letter of message {message_id} was lost")
        if sent_acked and not removing and message_id not in queue and message_id not in dead:
            problems.append(f"{context}: message {message_id}, sent and synced, is lost")
        for s, op, _a in ops:
            if s <= acked and op == "ack" and message_id in queue:
                problems.append(f"{context}: message {message_id} returned after its acknowledgement was synced")
            if s <= acked and op == "dlq" and (message_id in queue or message_id not in dead):
                problems.append(f"{context}: message {message_id} was dead-lettered and synced, but is "
                                f"{'still queued' if message_id in queue else 'not in the dead-letter queue'}")
        if message_id not in queue:
            continue
        count = queue[message_id][0]
        floor = previous["queue"].get(message_id, (0, b""))[0]
        if count < floor:
            problems.append(f"{context}: message {message_id}'s delivery count went back from {floor} to {count}")
        for s, op, args in ops:
            if op == "rbk" and s <= acked and count < int(args[0]):
                problems.append(f"{context}: message {message_id}'s delivery count {count} is below the "
                                f"{args[0]} of its synced rollback")
        if strict and message_id in delivered and count < delivered[message_id]:
            problems.append(f"{context}: strict mode: message {message_id} was delivered with count "
                            f"{delivered[message_id]} before the crash and came back with {count} "
                            f"(its next delivery would not show it redelivered)")
    return problems


def _duplicate_id_problems(recovered: dict, began: dict, acked: int, context: str) -> list[str]:
    """The invariant "no duplicate id routed twice" (module docstring), as violations."""
    if "ids" not in recovered:
        return []
    problems = []
    ids = recovered["ids"]
    for message_id, key in recovered["queue_ids"].items():
        if key is not None and key not in ids:
            problems.append(f"{context}: message {message_id} came back without its duplicate id {key} "
                            "in the cache: a resend would route it twice")
    synced = [message_id for message_id, ops in began.items() if any(op == "send" and s <= acked for s, op, _a in ops)]
    if len(synced) <= ID_CACHE_SIZE_DEFAULT:      # more would have pushed the first ones out of the ring
        for message_id in synced:
            if duplicate_id_of(message_id) not in ids:
                problems.append(f"{context}: the duplicate id of message {message_id}, sent and synced, is lost")
    return problems


def main(argv: list[str]) -> int:
    from .children import die_with_parent_as_told

    die_with_parent_as_told()
    directory, sync, strict, seed, clock_ms = argv[1], argv[2], argv[3] == "strict", int(argv[4]), int(argv[5])
    store = argv[6] if len(argv) > 6 else "journal"
    try:
        if len(argv) > 7 and argv[7] == "concurrent":
            run_concurrent(directory, sync, strict, seed, store)
        else:
            run(directory, sync, strict, seed, clock_ms, store)
    except Exception as exc:       # a full disk ends a run so: the campaign reads the error's line
        say(error_line(exc))
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
