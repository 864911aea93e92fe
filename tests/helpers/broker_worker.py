"""A child process for the broker's SIGKILL tests (tests/broker/test_broker_recovery.py).

Commands (each line it prints is one write to the pipe the parent reads):

``deliver-once DIRECTORY MODE``
    MODE "strict" (persist_delivery_count_before_delivery) or "default". Creates queue "orders",
    sends one durable message and syncs, receives it once, prints ``delivered <count>`` and waits to
    be killed without acknowledging or rolling back.

``script DIRECTORY START_MS``
    A fixed redelivery script on a ManualClock starting at START_MS (settings in SETTINGS): six
    messages on "orders" (one filtered out), message 1 rolled back twice, message 2 once, message 3
    rolled back until dead-lettered, message 4 acknowledged. Syncs, prints ``ready <json>`` with the
    clock time, then waits to be killed.

``close-uncounted DIRECTORY STORE``
    Strict mode on the STORE backend ("journal" or "lmdb"): ten durable messages on "orders", synced;
    five times a consumer receives all ten (count 1 each) and closes, handing them back uncounted
    (nothing synced after the sends); prints ``closed`` and waits to be killed.

``scheduled DIRECTORY START_MS``
    The broker configured by broker.xml text (REDELIVERY_XML: ``<redelivery-delays>`` on "orders"),
    on a ManualClock at START_MS: message 1 rolled back twice (the list's delays 300 then 700),
    message 2 rolled back once with ``delay_ms=5000``; synced; prints ``ready <json>`` with the due
    times, then waits to be killed.

``churn DIRECTORY SEED START_MS``
    In a fresh DIRECTORY: the same set-up and twelve messages, then receives, rolls back and
    acknowledges at random; when nothing is deliverable it sends a new message (fewer than six
    live) or advances the clock. Before each operation it prints ``N <json>``,
    the state the operation leads to; after the operation and broker.sync() it prints ``S <json>``.
    A state: {"t": clock ms, "live": {message id: [persisted delivery count, due ms]},
    "dlq": [original ids in the dead-letter queue]}.
"""
from __future__ import annotations

import json
import os
import random
import sys
import time

from journal_engine import AddressSettings, Broker, ManualClock

FILE_SIZE = 256 * 1024
SETTINGS = AddressSettings(redelivery_delay=100, redelivery_delay_multiplier=2.0, max_redelivery_delay=1000,
                           max_delivery_attempts=5, dead_letter_address="DLA")


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def open_broker(directory: str, start_ms: int, **options) -> Broker:
    broker = Broker(directory, clock=ManualClock(start_ms), max_redelivery_records=-1,
                    store_options={"file_size": FILE_SIZE}, **options)
    broker.address_settings.add("orders", SETTINGS)
    if "orders" not in broker.queue_names():
        broker.create_queue("orders", filter="kind <> 'skip'")
        broker.create_queue("DLQ", address="DLA")
    return broker


def wait_to_be_killed() -> None:
    while True:
        time.sleep(60)


def deliver_once(directory: str, mode: str) -> None:
    broker = open_broker(directory, 1_000_000, persist_delivery_count_before_delivery=(mode == "strict"))
    broker.send("orders", b"only", properties={"kind": "order"})
    broker.sync()
    message = broker.create_consumer("orders").receive(0)
    say(f"delivered {message.delivery_count}")
    wait_to_be_killed()


def script(directory: str, start_ms: int) -> None:
    broker = open_broker(directory, start_ms)
    clock = broker.clock
    for index in range(1, 7):
        broker.send("orders", f"m{index}".encode(), properties={"kind": "skip" if index == 6 else "order"})
    consumer = broker.create_consumer("orders")

    def take(message_id: int):
        for message in iter(lambda: consumer.receive(0), None):
            if message.message_id == message_id:
                return message
            raise AssertionError(f"expected message {message_id} at the head, got {message.message_id}")
        raise AssertionError(f"message {message_id} is not deliverable")

    consumer.rollback(take(1))              # count 1, due start + 100
    clock.advance(100)
    consumer.rollback(take(1))              # count 2, due start + 100 + 200
    consumer.rollback(take(2))              # count 1, due start + 200
    for _ in range(5):                      # count 5 = max_delivery_attempts: dead-lettered
        message = take(3)
        consumer.rollback(message, delay_ms=0)
    consumer.ack(take(4))
    broker.sync()
    say("ready " + json.dumps({"t": clock.now_ms()}))
    wait_to_be_killed()


def close_uncounted(directory: str, store: str) -> None:
    broker = Broker(directory, clock=ManualClock(1_000_000), persist_delivery_count_before_delivery=True,
                    store=store, store_options={"file_size": FILE_SIZE} if store == "journal" else None)
    broker.create_queue("orders")
    for index in range(10):
        broker.send("orders", str(index).encode())
    broker.sync()
    for _ in range(5):
        consumer = broker.create_consumer("orders")
        assert [m.delivery_count for m in iter(lambda: consumer.receive(0), None)] == [1] * 10
        consumer.close()
    say("closed")
    wait_to_be_killed()


REDELIVERY_XML = """<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <address-settings>
    <address-setting match="orders">
      <redelivery-delays>300, 700</redelivery-delays>
      <redelivery-delay>1000</redelivery-delay>
    </address-setting>
  </address-settings>
</core></configuration>"""


def scheduled(directory: str, start_ms: int) -> None:
    broker = Broker(directory, clock=ManualClock(start_ms), config=REDELIVERY_XML,
                    store_options={"file_size": FILE_SIZE})
    clock = broker.clock
    broker.create_queue("orders")
    first = broker.send("orders", b"list")
    second = broker.send("orders", b"explicit")
    consumer = broker.create_consumer("orders")
    message = consumer.receive(0)
    assert message.message_id == first
    consumer.rollback(message)                     # count 1: the list's first delay, 300
    clock.advance(300)
    message = consumer.receive(0)
    assert (message.message_id, message.delivery_count) == (first, 2)
    consumer.rollback(message)                     # count 2: the list's second delay, 700
    first_due = clock.now_ms() + 700
    message = consumer.receive(0)
    assert message.message_id == second
    consumer.rollback(message, delay_ms=5000)
    second_due = clock.now_ms() + 5000
    broker.sync()
    say("ready " + json.dumps({"t": clock.now_ms(), "due": {str(first): first_due, str(second): second_due}}))
    wait_to_be_killed()


def churn(directory: str, seed: int, start_ms: int) -> None:
    rng = random.Random(seed)
    broker = open_broker(directory, start_ms)
    clock = broker.clock
    for index in range(12):
        broker.send("orders", f"c{index}".encode(), properties={"kind": "order"})
    broker.sync()
    consumer = broker.create_consumer("orders")
    live = {message.message_id: [0, 0] for message in broker.browse("orders")}
    dlq: list[int] = []

    def state(changes: dict | None = None, dead: int | None = None) -> str:
        view = {str(k): v for k, v in live.items()}
        for key, value in (changes or {}).items():
            if value is None:
                view.pop(str(key), None)
            else:
                view[str(key)] = value
        return json.dumps({"t": clock.now_ms(), "live": view, "dlq": dlq + ([dead] if dead is not None else [])})

    say("S " + state())
    while True:
        message = consumer.receive(0)
        if message is None:
            if len(live) < 6:           # keep the churn going: a new message (ids are sequential)
                next_id = broker.stats()["next_message_id"]
                say("N " + state({next_id: [0, 0]}))
                assert broker.send("orders", b"n%d" % next_id, properties={"kind": "order"}) == next_id
                live[next_id] = [0, 0]
                broker.sync()
                say("S " + state())
            else:
                clock.advance(rng.choice((100, 250, 1000)))
            continue
        message_id = message.message_id
        count = message.delivery_count
        if rng.random() < 0.2:
            say("N " + state({message_id: None}))
            consumer.ack(message)
            del live[message_id]
        elif count >= SETTINGS.max_delivery_attempts:
            say("N " + state({message_id: None}, dead=message_id))
            consumer.rollback(message)
            del live[message_id]
            dlq.append(message_id)
        else:
            due = clock.now_ms() + SETTINGS.redelivery_delay_for(count)
            say("N " + state({message_id: [count, due]}))
            consumer.rollback(message)
            live[message_id] = [count, due]
        broker.sync()
        say("S " + state())


def main(argv: list[str]) -> None:
    command = argv[1]
    if command == "deliver-once":
        deliver_once(argv[2], argv[3])
    elif command == "script":
        script(argv[2], int(argv[3]))
    elif command == "close-uncounted":
        close_uncounted(argv[2], argv[3])
    elif command == "scheduled":
        scheduled(argv[2], int(argv[3]))
    elif command == "churn":
        churn(argv[2], int(argv[3]), int(argv[4]))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv)
