"""serve-stomp's exchanges and bindings (AMQP's routing model, which kombu and Celery speak), and the
STOMP conventions its kombu transport uses to reach them.

Why in the server: producers and workers are separate processes. kombu's virtual transports keep
the binding table in each process, so a producer that never declared a worker's binding would
route nowhere; here every binding lives in the server's data directory, and a SEND to
``/exchange/<name>`` is routed by the server to each bound queue.

The table is small and changes rarely (a declaration), so it is one JSON file rewritten whole and
durably (tmp, fsync, rename, fsync of the directory) at each change. This module imports neither
coilmq nor kombu: both sides read their names from here.
"""
from __future__ import annotations

import json
import os

from typing import Protocol

from ..errors import ConfigError, CorruptRecordError
from ..storage import durability
from ..wildcard import matches

__all__ = ["ExchangeTable", "ControlQueues", "answer_control", "EXCHANGE_TYPES", "QUEUE_PREFIX", "EXCHANGE_PREFIX", "CONTROL_PREFIX",
           "ROUTING_KEY_HEADER", "REQUEUE_HEADER", "EXCHANGES_FILE"]

#: a destination naming a queue: /queue/<kombu queue name>
QUEUE_PREFIX = "/queue/"
#: a SEND to /exchange/<name> (header routing-key) is routed to the queues bound to that exchange
EXCHANGE_PREFIX = "/exchange/"
#: a SEND to /journal-engine/<operation> is a request to the server (declare, bind, purge...), answered
#: in the headers of its RECEIPT
CONTROL_PREFIX = "/journal-engine/"
ROUTING_KEY_HEADER = "routing-key"
#: on a NACK: "false" sends the message to the dead-letter queue at once (kombu's reject(requeue=False));
#: absent or "true", a failed delivery (delivery count, redelivery delay, dead letter past the limit)
REQUEUE_HEADER = "requeue"
#: direct: the routing key equals the binding's; topic: the binding's key is a pattern of words separated
#: by "." ("*" one word, "#" zero or more: AMQP's rule); fanout: every bound queue
EXCHANGE_TYPES = ("direct", "topic", "fanout")
EXCHANGES_FILE = "exchanges.json"


class ExchangeTable:
    """The exchanges declared on a server and their bindings, kept in ``data_dir/exchanges.json``.
    Not thread-safe: the queue store calls it under its lock."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, EXCHANGES_FILE)
        # name -> {"type": str, "bindings": [[routing_key, destination], ...]}
        self._exchanges: dict[str, dict] = {}
        try:
            with open(self.path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return
        try:
            exchanges = json.loads(data)
            for name, exchange in exchanges.items():
                if exchange["type"] not in EXCHANGE_TYPES or not isinstance(exchange["bindings"], list):
                    raise ValueError(f"exchange {name!r}")
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise CorruptRecordError(f"{self.path}: not a table of exchanges ({error})", path=self.path,
                                     hint="it is written whole at each change; restore it from a backup or "
                                          "remove it and declare the exchanges again") from None
        self._exchanges = exchanges

    def declare(self, name: str, exchange_type: str) -> None:
        """Create exchange ``name``; nothing when it exists with that type. ConfigError for an unknown
        type or one that differs from the existing exchange's (AMQP refuses such a redeclaration)."""
        if exchange_type not in EXCHANGE_TYPES:
            raise ConfigError("exchange-type", exchange_type, f"serve-stomp routes {', '.join(EXCHANGE_TYPES)}")
        existing = self._exchanges.get(name)
        if existing is not None:
            if existing["type"] != exchange_type:
                raise ConfigError("exchange-type", exchange_type,
                                  f"exchange {name!r} exists with type {existing['type']!r}",
                                  hint="delete it first, or declare it with its type")
            return
        self._exchanges[name] = {"type": exchange_type, "bindings": []}
        self._save()

    def exists(self, name: str) -> bool:
        return name in self._exchanges

    def delete(self, name: str) -> None:
        if self._exchanges.pop(name, None) is not None:
            self._save()

    def bind(self, exchange: str, routing_key: str, destination: str) -> None:
        """Route what ``exchange`` matches with ``routing_key`` to ``destination``. ConfigError for an
        exchange not declared (AMQP's 404)."""
        bindings = self._bindings_of(exchange)
        if [routing_key, destination] not in bindings:
            bindings.append([routing_key, destination])
            self._save()

    def unbind(self, exchange: str, routing_key: str, destination: str) -> None:
        entry = self._exchanges.get(exchange)
        if entry is not None and [routing_key, destination] in entry["bindings"]:
            entry["bindings"].remove([routing_key, destination])
            self._save()

    def unbind_destination(self, destination: str) -> None:
        """Every binding to ``destination`` removed (its queue is deleted)."""
        changed = False
        for entry in self._exchanges.values():
            kept = [binding for binding in entry["bindings"] if binding[1] != destination]
            changed |= len(kept) != len(entry["bindings"])
            entry["bindings"] = kept
        if changed:
            self._save()

    def route(self, exchange: str, routing_key: str) -> list[str]:
        """The destinations a message sent to ``exchange`` with ``routing_key`` goes to, each once, in
        the order bound; none for an exchange not declared (AMQP drops an unroutable message)."""
        entry = self._exchanges.get(exchange)
        if entry is None:
            return []
        kind = entry["type"]
        found: list[str] = []
        for key, destination in entry["bindings"]:
            if destination in found:
                continue
            if kind == "fanout" or (kind == "direct" and key == routing_key) or (
                    kind == "topic" and matches(key, routing_key)):
                found.append(destination)
        return found

    def _bindings_of(self, exchange: str) -> list:
        entry = self._exchanges.get(exchange)
        if entry is None:
            raise ConfigError("exchange", exchange, "no such exchange", hint="declare the exchange before binding to it")
        return entry["bindings"]

    def _save(self) -> None:
        durability.write_file_durably(self.path, json.dumps(self._exchanges, sort_keys=True).encode())


class ControlQueues(Protocol):
    """What a server gives :func:`answer_control` of its queues."""

    def queue_exists(self, destination: str) -> bool: ...

    def ensure_queue(self, destination: str) -> None: ...

    def waiting_count(self, destination: str) -> int: ...

    def purge(self, destination: str) -> int: ...


def answer_control(operation: str, headers: dict, exchanges: ExchangeTable, queues: ControlQueues) -> dict[str, str]:
    """The kombu transport's request ``operation`` (a SEND to ``/journal-engine/<operation>``, its
    ``headers``) on a server's exchange table and queues; returns the headers of its RECEIPT.
    ConfigError for an unknown operation or a missing header.

    ``declare-exchange`` (exchange, exchange-type, passive), ``delete-exchange`` (exchange),
    ``declare-queue`` (queue: its destination, passive), ``bind`` / ``unbind`` (exchange,
    routing-key, queue), ``purge`` and ``delete-queue`` (queue): ``exists`` and ``message-count``
    (messages not handed out; for purge and delete-queue, those removed) in the reply.
    """
    def header(name: str) -> str:
        value = headers.get(name)
        if value is None:
            raise ConfigError(name, None, f"the {operation} request needs this header")
        return str(value)

    passive = str(headers.get("passive", "")).lower() == "true"
    if operation in ("declare-exchange", "delete-exchange"):
        exchange = header("exchange")
        if operation == "delete-exchange":
            exchanges.delete(exchange)
        elif not passive:
            exchanges.declare(exchange, header("exchange-type"))
        return {"exists": str(exchanges.exists(exchange)).lower()}
    if operation in ("bind", "unbind"):
        exchange, routing_key, destination = header("exchange"), header(ROUTING_KEY_HEADER), header("queue")
        if operation == "bind":
            queues.ensure_queue(destination)
            exchanges.bind(exchange, routing_key, destination)
        else:
            exchanges.unbind(exchange, routing_key, destination)
        return {}
    if operation in ("declare-queue", "purge", "delete-queue"):
        destination = header("queue")
        exists = queues.queue_exists(destination)
        if operation == "declare-queue":
            if not passive:
                queues.ensure_queue(destination)
            return {"exists": str(exists or not passive).lower(),
                    "message-count": str(queues.waiting_count(destination))}
        removed = queues.purge(destination) if exists else 0
        if operation == "delete-queue":
            exchanges.unbind_destination(destination)
        return {"exists": str(exists).lower(), "message-count": str(removed)}
    raise ConfigError("destination", CONTROL_PREFIX + operation, "no such request of serve-stomp")
