"""The broker's three inlined fast paths, each run against the general path it copies, on the same input.

``broker.INLINE_SEND`` (PostOffice.store_new + enqueue inline in send, for one direct queue),
``delivery.INLINE_DISPATCH`` (Delivery._dispatch inline in next_delivery) and ``delivery.INLINE_ACK``
(PostOffice.remove inline in an acknowledgement) are switched off one at a time and all together; the
same workload must give the same message ids, deliveries, queue counts, broker statistics and stored
state (what a new MessageStore reads back) as with every copy switched on.
"""
from __future__ import annotations

import random

import pytest

from journal_engine import AddressSettings, Broker, ManualClock, MessageStore
from journal_engine.broker import broker as broker_module
from journal_engine.broker import delivery as delivery_module

NOW = 1_700_000_000_000
SMALL = {"file_size": 256 * 1024}
SWITCHES = [(broker_module, "INLINE_SEND"), (delivery_module, "INLINE_DISPATCH"), (delivery_module, "INLINE_ACK")]


def _workload(directory, seed: int) -> dict:
    """Sends, receives, acks, rollbacks, expiry and a transaction on durable and non-durable queues;
    returns everything observable."""
    clock = ManualClock(NOW)
    broker = Broker(directory, clock=clock, store_options=SMALL, rng=random.Random(seed))
    broker.address_settings.add("work", AddressSettings(max_delivery_attempts=3, dead_letter_address="dead",
                                                        redelivery_delay=5))
    broker.address_settings.add("ttl", AddressSettings(expiry_delay=50, expiry_address="expired"))
    for name, kwargs in [("work", {}), ("plain", {}), ("volatile", {"durable": False}), ("dead", {}),
                         ("expired", {}), ("ttl", {}), ("red", {"address": "colours", "filter": "colour = 'red'"}),
                         ("all-1", {"address": "fan", "routing_type": "multicast"}),
                         ("all-2", {"address": "fan", "routing_type": "multicast"})]:
        broker.create_queue(name, **kwargs)
    pick = random.Random(seed)
    seen: list = []
    consumers = {name: broker.create_consumer(name) for name in ("work", "plain", "volatile", "ttl", "red", "all-1")}
    for step in range(400):
        target = pick.choice(["work", "plain", "volatile", "ttl", "colours", "fan", "nowhere"])
        seen.append(("sent", broker.send(
            target, f"m{step}".encode(), durable=pick.random() < 0.8,
            properties={"colour": pick.choice(["red", "blue"]), "n": step},
            expiration=NOW + 30 if pick.random() < 0.1 else 0,
            scheduled_delivery_time=clock.now_ms() + 3 if pick.random() < 0.1 else 0)))
        name = pick.choice(list(consumers))
        message = consumers[name].receive(0)
        if message is not None:
            seen.append(("got", name, message.message_id, message.body, message.delivery_count,
                         dict(message.properties)))
            (consumers[name].rollback if pick.random() < 0.3 else consumers[name].ack)(message)
        if step % 37 == 0:
            clock.advance(pick.choice([1, 4, 10, 60]))
    session = broker.create_session()
    in_session = session.create_consumer("plain")
    for _ in range(3):
        session.send("plain", b"tx")
        message = in_session.receive(0)
        if message is not None:
            in_session.ack(message)
    session.commit()
    clock.advance(100)
    queues = {name: broker.queue(name) for name in broker.queue_names()}
    stats = broker.stats()
    stats.pop("store")
    broker.close()
    store = MessageStore(directory)
    stored = store.load()
    recovered = (stored.queues, stored.messages, stored.references)
    store.close()
    return {"seen": seen, "queues": queues, "stats": stats, "stored": recovered}


@pytest.mark.parametrize("switched_off", [[0], [1], [2], [0, 1, 2]], ids=["send", "dispatch", "ack", "all"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fast_paths_and_general_paths_give_the_same_outcome(tmp_path, monkeypatch, seed, switched_off):
    fast = _workload(tmp_path / "fast", seed)
    for index in switched_off:
        module, name = SWITCHES[index]
        monkeypatch.setattr(module, name, False)
    general = _workload(tmp_path / "general", seed)
    assert general == fast
    assert any(entry[0] == "got" for entry in fast["seen"])


def test_the_switches_are_on_by_default():
    assert all(getattr(module, name) is True for module, name in SWITCHES)
