"""A child process for the record-group crash tests: writes record groups until it is killed.

Usage: ``python group_worker.py DIRECTORY BACKEND``

Opens ``Broker(DIRECTORY, store=BACKEND)`` with an address ``fan`` routed to QUEUES multicast
queues and a redelivery delay of an hour, prints ``ready``, then loops until killed: a send to
``fan`` (a message and QUEUES references: one group), a receive from ``fan-0`` and a rollback of
what it received (the reference's delivery count and scheduled time: one group). Nothing waits for
the disk: the group-commit flusher writes out in the background, between any two records it can.
"""
from __future__ import annotations

import sys

from journal_engine import AddressSettings, Broker

QUEUES = 6
ADDRESS = "fan"
REDELIVERY_DELAY_MS = 3_600_000


def queue_name(index: int) -> str:
    return f"{ADDRESS}-{index}"


def main(directory: str, backend: str) -> None:
    broker = Broker(directory, store=backend)
    broker.address_settings.add(ADDRESS, AddressSettings(redelivery_delay=REDELIVERY_DELAY_MS))
    for index in range(QUEUES):
        broker.create_queue(queue_name(index), address=ADDRESS, routing_type="multicast")
    consumer = broker.create_consumer(queue_name(0))
    broker.sync()
    print("ready", flush=True)
    sent = 0
    while True:
        sent += 1
        broker.send(ADDRESS, b"m%d" % sent)
        message = consumer.receive()
        if message is not None:
            consumer.rollback(message)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
