"""The served broker's queues, exchanges and dead letters, on one :class:`~journal_engine.Broker`.

Every STOMP destination but ``/topic/...`` is one anycast queue of the same name, created by the
first SEND, SUBSCRIBE or binding that names it. The broker's address settings for ``#`` carry the
server's options: ``max_delivery_attempts`` (Artemis's; -1 unlimited), ``redelivery_delay_ms``, and
the dead-letter queue, which is also the expiry address; the dead-letter queue itself keeps what
reaches it (no limit). Exchanges and bindings (kombu's routing model) are kept in the data
directory by ``integrations/exchanges.py``.

The event loop owns this object: nothing here takes a lock of its own or waits for the disk (sends
are appended on the broker's non-waiting path; the turn syncs once for all of them, ``turn.py``).
"""
from __future__ import annotations

import os

from ..broker import Broker
from ..errors import ConfigError
from ..limits import SERVED_STORE_BUFFER_TIMEOUT_US
from ..integrations.exchanges import ROUTING_KEY_HEADER, ExchangeTable, answer_control
from ..integrations.server_rules import add_server_rules
from .messages import ORIGINAL_ADDRESS_PROPERTIES, expiration_of, priority_of, properties_of

__all__ = ["Destinations", "DEFAULT_DEAD_LETTER_QUEUE", "DEFAULT_MAX_DELIVERY_ATTEMPTS"]

DEFAULT_DEAD_LETTER_QUEUE = "/queue/DLQ"
DEFAULT_MAX_DELIVERY_ATTEMPTS = 10      # Artemis's default max-delivery-attempts


class Destinations:
    """The broker in ``data_dir`` (created if missing) with the server's dead-letter rules, and the
    exchange table beside it. ``sync``: the store's mode ("group", "always", "none")."""

    def __init__(self, data_dir: str | os.PathLike, *, backend: str = "journal", sync: str = "group",
                 max_delivery_attempts: int = DEFAULT_MAX_DELIVERY_ATTEMPTS,
                 dead_letter_queue: str | None = DEFAULT_DEAD_LETTER_QUEUE, redelivery_delay_ms: int = 0,
                 store_options: dict | None = None) -> None:
        if dead_letter_queue is not None and (not isinstance(dead_letter_queue, str) or not dead_letter_queue):
            raise ConfigError("dead_letter_queue", dead_letter_queue, "a destination name such as /queue/DLQ, or None")
        self.data_dir = os.fspath(data_dir)
        self.dead_letter_queue = dead_letter_queue
        self.waits_for_disk = sync != "none"
        os.makedirs(self.data_dir, exist_ok=True)
        # the delivery count is persisted before a MESSAGE leaves (into the store's shadow: no system
        # call), so a message a crash cut off mid-delivery comes back redelivered and counted; expiry
        # copies are made when the message expires (the broker's scanner runs then)
        # what no RECEIPT waits for is written within SERVED_STORE_BUFFER_TIMEOUT_US (limits.py says why)
        store_options = {"buffer_timeout_us": SERVED_STORE_BUFFER_TIMEOUT_US, **(store_options or {})}
        self.broker = Broker(self.data_dir, store=backend, sync=sync, persist_delivery_count_before_delivery=True,
                             store_options=store_options, message_expiry_scan_period=1)
        try:
            self._queues: set[str] = set(self.broker.queue_names())
            self.exchanges = ExchangeTable(self.data_dir)
            add_server_rules(self.broker.address_settings, max_delivery_attempts=max_delivery_attempts,
                             redelivery_delay_ms=redelivery_delay_ms, dead_letter_queue=dead_letter_queue)
            if dead_letter_queue is not None:
                self.ensure_queue(dead_letter_queue)
        except BaseException:
            self.broker.close()
            raise

    # ------------------------------------------------------------------------------ queues
    def ensure_queue(self, destination: str) -> None:
        if destination not in self._queues:
            self.broker.create_queue(destination, address=destination, routing_type="anycast")
            self._queues.add(destination)

    def has_queue(self, destination: str) -> bool:
        return destination in self._queues

    def waiting_count(self, destination: str) -> int:
        """Messages of ``destination`` not handed out (scheduled redeliveries included)."""
        if destination not in self._queues:
            return 0
        info = self.broker.queue(destination)
        return info.message_count - info.delivering_count

    def create_consumer(self, destination: str):
        self.ensure_queue(destination)
        return self.broker.create_consumer(destination)

    # ------------------------------------------------------------------------------ sending
    def send(self, destination: str, headers: dict[str, str], body: bytes) -> None:
        """Append a SEND to the queue ``destination`` (not waiting for the disk)."""
        expiration, priority = expiration_of(headers), priority_of(headers)
        self.ensure_queue(destination)
        self.broker.send(destination, body, properties=properties_of(headers), routing_type="anycast",
                         expiration=expiration, priority=priority)

    def send_to_exchange(self, exchange: str, headers: dict[str, str], body: bytes) -> list[str]:
        """A copy in each queue ``exchange`` routes the ``routing-key`` header to (exchanges.py); the
        destinations, none when nothing is bound (AMQP drops it)."""
        expiration, priority = expiration_of(headers), priority_of(headers)
        destinations = self.exchanges.route(exchange, headers.get(ROUTING_KEY_HEADER, ""))
        for destination in destinations:
            self.ensure_queue(destination)
            self.broker.send(destination, body, properties=properties_of(headers), routing_type="anycast",
                             expiration=expiration, priority=priority)
        return destinations

    def dead_letter(self, consumer, message) -> str | None:
        """``message`` (delivered to ``consumer``) refused for good (kombu's ``reject(requeue=False)``):
        a copy goes to the dead-letter queue naming its origin, then the original is acknowledged (a
        crash between the two leaves it in both: at least once). Without a dead-letter queue it is
        dropped. The dead-letter queue, or None."""
        if self.dead_letter_queue is not None:
            properties = dict(message.properties or {})
            properties[ORIGINAL_ADDRESS_PROPERTIES[0]] = message.queue
            self.broker.send(self.dead_letter_queue, message.body, properties=properties, routing_type="anycast")
        consumer.ack(message)
        return self.dead_letter_queue

    # ------------------------------------------------------------------------------ the kombu transport's requests
    def control(self, operation: str, headers: dict[str, str]) -> dict[str, str]:
        """A request of the kombu transport (a SEND to ``/journal-engine/<operation>``); returns the
        headers of its RECEIPT (``exchanges.answer_control`` says which)."""
        return answer_control(operation, headers, self.exchanges, self)

    def queue_exists(self, destination: str) -> bool:
        return destination in self._queues

    def purge(self, destination: str) -> int:
        """Acknowledge every deliverable message of ``destination``; how many."""
        removed = 0
        consumer = self.broker.create_consumer(destination)
        try:
            while (message := consumer.receive(0)) is not None:
                consumer.ack(message)
                removed += 1
        finally:
            consumer.close()
        return removed

    # ------------------------------------------------------------------------------ life cycle
    def sync(self) -> None:
        """Wait until everything appended so far is on disk (not with sync="none")."""
        if self.waits_for_disk:
            self.broker.sync()

    def fdatasyncs(self) -> int:
        """The fdatasyncs (LMDB: durable commits) the message store made so far, for the counters."""
        store = self.broker.stats()["store"]["messages_journal"]
        return int(store.get("syncs", 0))

    def close(self) -> None:
        """Close the broker: messages handed out and not acknowledged are delivered again after reopening."""
        self.broker.close()
