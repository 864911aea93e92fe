"""A queue read to its end by a test: every ready message received and acknowledged, in delivery order."""
from __future__ import annotations


def drain(broker, queue: str = "q") -> list[bytes]:
    """The bodies of ``queue``'s ready messages, each received and acknowledged; the consumer closed."""
    consumer = broker.create_consumer(queue)
    bodies = []
    while (message := consumer.receive(0)) is not None:
        bodies.append(message.body)
        consumer.ack(message)
    consumer.close()
    return bodies
