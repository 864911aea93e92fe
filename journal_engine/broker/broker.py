"""The Broker: addresses, queues, consumers and sessions with Artemis's redelivery, dead-letter and
expiry semantics, its durable state kept in a MessageStore (docs/broker.md).

What happens, case by case, as in Artemis (the reference notes name the Java methods):

* send: the address routes the message (anycast queues share it, every multicast queue gets a copy,
  filters decide); a durable message reaching durable queues is stored (ADD 45 + ADD_REF 32 each);
  a non-durable one never touches the store. ``scheduled_delivery_time`` in the future keeps it
  out of reach until then (SET_SCHEDULED_DELIVERY_TIME 36).
* receive (dispatch): the delivery count goes up by one (the first delivery has count 1); with
  ``persist_delivery_count_before_delivery`` the count reaches the store before the message is
  handed out. An expired message met at dispatch is expired instead of delivered.
* ack: ACKNOWLEDGE_REF 33; the message is deleted when no stored reference is left.
* rollback (QueueImpl.checkRedelivery): persist the count (34); if max_delivery_attempts > 0 and
  count >= max -> dead-letter; else if a redelivery delay applies -> scheduled at now + delay (36),
  back to the HEAD of its queue when due while other messages keep flowing; else back at once, in
  message order (addSorted).
* close of a consumer: unacknowledged messages go back without counting a failed delivery.
* dead-letter (sendToDeadLetterAddress): auto-create the dead-letter queue if asked; if the
  dead-letter address has queues, move a copy there (one store transaction: copy 45, its 32s, the
  original's 33, COMMIT), else drop the message. Expiry likewise with the expiry address.

All state is guarded by one lock; receivers wait on a condition variable per queue.
"""
from __future__ import annotations

import heapq
import itertools
import os
import random
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any

from ..errors import (ConfigError, JournalClosedError, MessageStateError, QueueExistsError, UnknownQueueError)
from ..store.message_store import MessageStore
from ..store.redelivery_writer import check_cap
from .clock import Clock, WallClock
from .consumer import Consumer
from .dead_letter import EXPIRED, KILLED, NORMAL, dialect_named, make_copy, origin_filter, resource_queue_name
from .message import Message, MessageData
from .queue import ACKED_IN_TX, DELIVERING, DONE, READY, SCHEDULED, AddressState, QueueInfo, QueueState, Reference
from .session import Session
from .address_settings import AddressSettingsRepository
from .broker_xml import merged_switch, read_broker_config
from .selector import Selector

__all__ = ["Broker"]

ROUTING_TYPES = ("anycast", "multicast")
STORE_BACKENDS = ("journal", "lmdb")
SYNC_MODES = ("always", "group", "none")
I64_MAX = (1 << 63) - 1
NAME_LENGTH_MAX = 0xFFFF            # queue and address names (the store keeps them as u32-length strings)
_PROPERTY_TYPES = (str, int, float, bool, bytes, type(None))


def _check_name(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise ConfigError(what, value, "must not be empty")
    if len(value) > NAME_LENGTH_MAX:
        raise ConfigError(what, value[:40] + "...", f"longer than {NAME_LENGTH_MAX} characters")
    return value


def _check_time(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= I64_MAX:
        raise ValueError(f"{what}={value!r}: an epoch time in milliseconds, an int >= 0 (0 = none)")
    return value


def _checked_properties(properties: Any) -> dict | None:
    """A private copy of the properties (the caller may change its dict afterwards), types checked."""
    if not isinstance(properties, Mapping):
        raise TypeError(f"properties must be a mapping, not {type(properties).__name__}")
    if not properties:
        return None
    copy = {}
    for key, value in properties.items():
        if not isinstance(key, str):
            raise TypeError(f"property names are str, not {type(key).__name__} ({key!r})")
        if not isinstance(value, _PROPERTY_TYPES):
            if isinstance(value, (bytearray, memoryview)):
                value = bytes(value)
            else:
                raise TypeError(f"property {key!r} has a value of type {type(value).__name__}; "
                                "use str, int, float, bool, bytes or None")
        elif isinstance(value, int) and not isinstance(value, bool) and not -(1 << 63) <= value <= I64_MAX:
            raise OverflowError(f"property {key!r}={value}: integers are signed 64-bit")
        copy[key] = value
    return copy


class Broker:
    """A message broker in the process, durable in ``directory`` (None: nothing is persisted).

    ``clock``: a Clock (default: the wall clock); a ManualClock makes time deterministic.
    ``max_redelivery_records`` (-1 = no cap) and ``persist_delivery_count_before_delivery`` are
    Artemis's two broker-wide switches; ``config`` (a path to, or the text of, an Artemis broker.xml)
    may set them and the address settings. ``dialect="hornetq"`` names the dead-letter properties
    as HornetQ did (``_HQ_ORIG_ADDRESS`` ...) and, with ``jms_queue_names=True``, creates queues as
    ``jms.queue.<name>`` and accepts the short name wherever a queue or address is named.
    ``rng`` (a random.Random) draws the redelivery collision avoidance; seed it for repeatable runs.
    ``sync`` is the message store's sync mode ("group": writes become durable within the group-commit
    window without the caller waiting; ``sync()`` waits). ``store_options`` go to MessageStore
    (file_size, buffer_timeout_us, ...).
    """

    def __init__(self, directory: str | os.PathLike | None = None, *, clock: Clock | None = None,
                 max_redelivery_records: int = 10, persist_delivery_count_before_delivery: bool = False,
                 store: str = "journal", dialect: str = "artemis", config: Any = None,
                 rng: random.Random | None = None, sync: str = "group", jms_queue_names: bool = False,
                 store_options: dict | None = None) -> None:
        self._dialect = dialect_named(dialect)
        if clock is None:
            clock = WallClock()
        elif not callable(getattr(clock, "now_ms", None)):
            raise ConfigError("clock", clock, "must have a now_ms() method (a WallClock or ManualClock)")
        self._clock = clock
        self._manual_clock = bool(getattr(clock, "manual", False))
        if rng is None:
            rng = random.Random()
        elif not callable(getattr(rng, "random", None)):
            raise ConfigError("rng", rng, "must be a random.Random (or have its random() method)")
        self._rng = rng
        if store not in STORE_BACKENDS:
            raise ConfigError("store", store, f"use one of {', '.join(STORE_BACKENDS)}")
        if sync not in SYNC_MODES:
            raise ConfigError("sync", sync, f"use one of {', '.join(SYNC_MODES)}")
        if not isinstance(jms_queue_names, bool):
            raise ConfigError("jms_queue_names", jms_queue_names, "must be True or False")
        check_cap(max_redelivery_records)
        if not isinstance(persist_delivery_count_before_delivery, bool):
            raise ConfigError("persist_delivery_count_before_delivery", persist_delivery_count_before_delivery,
                              "must be True or False")
        settings = AddressSettingsRepository()
        if config is not None:
            parsed = read_broker_config(config)
            settings = parsed.address_settings
            max_redelivery_records = merged_switch(
                "max_redelivery_records", max_redelivery_records, 10, parsed.max_redelivery_records, parsed.source)
            persist_delivery_count_before_delivery = merged_switch(
                "persist_delivery_count_before_delivery", persist_delivery_count_before_delivery, False,
                parsed.persist_delivery_count_before_delivery, parsed.source)
        self.address_settings = settings
        self.max_redelivery_records = max_redelivery_records
        self.persist_delivery_count_before_delivery = persist_delivery_count_before_delivery
        self.jms_queue_names = jms_queue_names
        self.directory = os.fspath(directory) if directory is not None else None

        self._lock = threading.Lock()
        self._queues: dict[str, QueueState] = {}
        self._queues_by_id: dict[int, QueueState] = {}
        self._addresses: dict[str, AddressState] = {}
        self._scheduled: list = []          # heap of (due ms, tiebreak, reference)
        self._expiring: list = []           # heap of (expiration ms, tiebreak, reference) of READY references
        self._tiebreak = itertools.count()
        self._sessions: weakref.WeakSet = weakref.WeakSet()
        self._next_message_id = 1
        self._next_queue_id = 1
        self._unrouted = 0
        self._closed = False
        self._store: MessageStore | None = None
        self._strict = False
        if directory is not None:
            self._store = MessageStore(directory, backend=store, max_redelivery_records=max_redelivery_records,
                                       persist_delivery_count_before_delivery=persist_delivery_count_before_delivery,
                                       sync=sync, clock=clock, **(store_options or {}))
            try:
                self._recover(self._store.load())
            except BaseException:
                self._store.close()
                raise
            self._strict = persist_delivery_count_before_delivery
        if self._manual_clock:
            clock.subscribe(self._on_clock_moved)

    # ------------------------------------------------------------------------------- recovery
    def _recover(self, state) -> None:
        """Queues (with filters), messages, delivery counts and scheduled redeliveries from the store."""
        lock = self._lock
        for queue_id in sorted(state.queues):
            stored = state.queues[queue_id]
            queue = QueueState(stored.name, queue_id, stored.address, stored.routing_type, stored.filter, True, lock)
            self._bind(queue)
        self._next_queue_id = state.max_queue_id + 1
        self._next_message_id = state.max_message_id + 1
        datas: dict[int, MessageData] = {}
        for queue_id, references in state.references.items():
            queue = self._queues_by_id[queue_id]
            for recovered in sorted(references, key=lambda r: r.message_id):
                data = datas.get(recovered.message_id)
                if data is None:
                    stored = state.messages[recovered.message_id]
                    data = MessageData(stored.message_id, stored.address, stored.body,
                                       dict(stored.properties) or None, stored.durable, stored.expiration,
                                       stored.routing_type)
                    datas[recovered.message_id] = data
                data.durable_refs += 1
                ref = Reference(data, queue, recovered.delivery_count)
                queue.count += 1
                queue.messages_added += 1
                if recovered.scheduled_delivery_time:
                    self._schedule(ref, recovered.scheduled_delivery_time)
                else:
                    queue.ready.append(ref)
                    if data.expiration:
                        heapq.heappush(self._expiring, (data.expiration, next(self._tiebreak), ref))

    # ------------------------------------------------------------------------------- queues
    def _bind(self, queue: QueueState) -> None:
        self._queues[queue.name] = queue
        self._queues_by_id[queue.queue_id] = queue
        address = self._addresses.get(queue.address)
        if address is None:
            address = self._addresses[queue.address] = AddressState(queue.address)
        address.bind(queue)

    def _jms_name(self, name: str) -> str:
        prefix = self._dialect.jms_queue_prefix
        return name if name.startswith(prefix) else prefix + name

    def create_queue(self, name: str, *, address: str | None = None, routing_type: str = "anycast",
                     filter: str | None = None, durable: bool = True, arguments: Mapping | None = None) -> QueueInfo:
        """Create a queue bound to ``address`` (default: the queue's name).

        ``filter`` is a JMS selector over the message's properties (and the AMQAddress, AMQDurable,
        AMQExpiration, AMQSize, AMQMessageID headers); a selector that does not parse raises
        SelectorError with the column and token. A durable queue is kept by the store (its messages
        survive a restart); a non-durable one is not.
        """
        _check_name(name, "name")
        if address is not None:
            _check_name(address, "address")
        if routing_type not in ROUTING_TYPES:
            raise ConfigError("routing_type", routing_type, "use 'anycast' or 'multicast'")
        if filter is not None and not isinstance(filter, str):
            raise TypeError(f"filter must be a str (a JMS selector) or None, not {type(filter).__name__}")
        if not isinstance(durable, bool):
            raise ConfigError("durable", durable, "must be True or False")
        if arguments:
            raise ConfigError("arguments", dict(arguments), "queue-declare arguments (Qpid) are not supported yet",
                              hint="configure redelivery and dead letters with broker.address_settings")
        if self.jms_queue_names:
            name = self._jms_name(name)
            address = self._jms_name(address) if address is not None else name
        elif address is None:
            address = name
        if filter is not None and not filter.strip():
            filter = None
        if filter is not None:
            Selector(filter)            # parse now: a bad filter raises before anything is created
        with self._lock:
            self._check_open()
            return self._create_queue_locked(name, address, routing_type, filter, durable).info()

    def _create_queue_locked(self, name: str, address: str, routing_type: str, filter: str | None, durable: bool,
                             *, auto_created: bool = False) -> QueueState:
        if name in self._queues:
            raise QueueExistsError("name", name, "a queue of that name exists",
                                   hint="pick another name, or broker.queue(name) to inspect it")
        queue_id = self._next_queue_id
        stored = durable and self._store is not None
        if stored:
            self._store.store_queue(queue_id, name, address, routing_type=routing_type, filter=filter)
        self._next_queue_id = queue_id + 1
        queue = QueueState(name, queue_id, address, routing_type, filter, durable, self._lock,
                           auto_created=auto_created)
        self._bind(queue)
        return queue

    def delete_queue(self, name: str) -> int:
        """Delete a queue and its messages; returns how many messages it held.

        Refused (MessageStateError) while the queue has consumers or messages in delivery, or while an
        open transaction has sends waiting for it.
        """
        with self._lock:
            self._check_open()
            queue = self._queue_named(name)
            if queue.consumers or queue.delivering or queue.pending_sends:
                raise MessageStateError(f"queue {queue.name!r} has {queue.consumers} consumers, {queue.delivering} "
                                        f"messages in delivery and {queue.pending_sends} pending transactional "
                                        "sends; close and commit them first")
            live = [ref for ref in queue.ready if ref.state == READY]
            live += [entry[2] for entry in self._scheduled if entry[2].queue is queue and entry[2].state == SCHEDULED]
            if self._store is not None and queue.durable:
                self._store.delete_queue(queue.queue_id)
            for ref in live:
                ref.state = DONE
                data = ref.data
                if data.durable_refs and queue.durable:
                    data.durable_refs -= 1
            queue.deleted = True
            queue.ready.clear()
            del self._queues[queue.name]
            del self._queues_by_id[queue.queue_id]
            address = self._addresses[queue.address]
            address.unbind(queue)
            if not address.has_queues():
                del self._addresses[queue.address]
            queue.condition.notify_all()
            return len(live)

    def _queue_named(self, name: str) -> QueueState:
        queue = self._queues.get(name)
        if queue is None and self.jms_queue_names and isinstance(name, str):
            queue = self._queues.get(self._jms_name(name))
        if queue is None:
            if not isinstance(name, str):
                raise TypeError(f"a queue name is a str, not {type(name).__name__}")
            raise UnknownQueueError(name)
        return queue

    def queue(self, name: str) -> QueueInfo:
        """A snapshot of the queue's counts (after releasing what fell due and expiring what expired)."""
        with self._lock:
            self._check_open()
            self._pump_now()
            return self._queue_named(name).info()

    def queue_names(self) -> list[str]:
        """The names of every queue, sorted."""
        with self._lock:
            return sorted(self._queues)

    def browse(self, queue_name: str) -> list[Message]:
        """The queue's deliverable messages in delivery order, without consuming them (delivery_count 0).
        Scheduled messages and messages in delivery are not listed."""
        with self._lock:
            self._check_open()
            self._pump_now()
            queue = self._queue_named(queue_name)
            return [Message(ref.data, 0, queue.name) for ref in queue.ready if ref.state == READY]

    # ------------------------------------------------------------------------------- sending
    def send(self, address: str, body, *, properties: Mapping | None = None, durable: bool = True,
             expiration: int = 0, scheduled_delivery_time: int = 0, routing_type: str | None = None) -> int:
        """Send a message to an address; returns its message id.

        expiration and scheduled_delivery_time are epoch ms (0 = none). routing_type None reaches
        both the anycast and the multicast queues of the address; "anycast" or "multicast" only
        those. A message no queue accepts is dropped (counted in stats()["unrouted"]).
        In "group" sync mode a durable send returns before the disk has it (durable within the
        group-commit window); ``sync()`` waits for everything sent before it.
        """
        return self._send(address, body, properties, durable, expiration, scheduled_delivery_time, routing_type,
                          None)

    def _send(self, address, body, properties, durable, expiration, scheduled_delivery_time, routing_type,
              session: Session | None) -> int:
        if type(body) is not bytes:
            if not isinstance(body, (bytes, bytearray, memoryview)):
                raise TypeError(f"body must be bytes, not {type(body).__name__}")
            body = bytes(body)
        if type(address) is not str:
            _check_name(address, "address")
        if properties is not None:
            properties = _checked_properties(properties)
        if durable is not True and durable is not False:
            raise ConfigError("durable", durable, "must be True or False")
        if expiration or type(expiration) is not int:
            _check_time(expiration, "expiration")
        if scheduled_delivery_time or type(scheduled_delivery_time) is not int:
            _check_time(scheduled_delivery_time, "scheduled_delivery_time")
        if routing_type is not None and routing_type not in ROUTING_TYPES:
            raise ConfigError("routing_type", routing_type, "use None, 'anycast' or 'multicast'")
        transacted = session is not None and session.transacted
        lock = self._lock
        lock.acquire()
        try:
            if self._closed:
                raise JournalClosedError("the broker is closed")
            if session is not None and session._closed:
                raise MessageStateError("the session is closed")
            message_id = self._next_message_id
            self._next_message_id = message_id + 1
            route = self._addresses.get(address)
            if route is None and self.jms_queue_names:
                route = self._addresses.get(self._jms_name(address))
                if route is not None:
                    address = route.name
            if route is None:
                self._unrouted += 1
                return message_id
            now = 0
            if not expiration:
                expiry_delay = self._address_settings.lookup(address).expiry_delay
                if expiry_delay >= 0:       # Artemis applyExpiryDelay: only messages without an expiration
                    now = self._clock.now_ms()
                    expiration = now + expiry_delay
            data = MessageData(message_id, address, body, properties, durable, expiration, routing_type)
            targets = route.direct
            if targets is None or routing_type == "multicast":
                targets = route.route(data, routing_type)
                if not targets:
                    self._unrouted += 1
                    return message_id
            if scheduled_delivery_time:
                now = now or self._clock.now_ms()
                if scheduled_delivery_time <= now:
                    scheduled_delivery_time = 0
            if transacted:
                if durable and self._store is not None:
                    self._store_new(data, targets, scheduled_delivery_time, session._transaction(self._store))
                for queue in targets:
                    queue.pending_sends += 1
                session._sends.append((data, targets, scheduled_delivery_time))
                return message_id
            store = self._store
            if targets is route.direct and not scheduled_delivery_time:
                # the common case, inlined: one queue, no routing choice, deliverable now
                queue = targets[0]
                if durable and store is not None and queue.durable:
                    store.store_message_references(message_id, address, body, queue.id_list, properties=properties,
                                                   expiration=expiration, routing_type=routing_type)
                    data.durable_refs = 1
                ref = Reference(data, queue)
                queue.count += 1
                queue.messages_added += 1
                queue.ready.append(ref)
                if expiration:
                    heapq.heappush(self._expiring, (expiration, next(self._tiebreak), ref))
                if queue.waiters:
                    queue.condition.notify()
                return message_id
            if durable and store is not None:
                self._store_new(data, targets, scheduled_delivery_time, None)
            self._enqueue(data, targets, scheduled_delivery_time)
            return message_id
        finally:
            lock.release()

    def _store_new(self, data: MessageData, targets: list[QueueState], scheduled_time: int, tx) -> None:
        """ADD_MESSAGE + an ADD_REF per durable target (+ the scheduled time), directly or in ``tx``."""
        durable_targets = [queue for queue in targets if queue.durable]
        if not durable_targets:
            return
        message_id = data.message_id
        if tx is None:
            store = self._store
            store.store_message_references(message_id, data.address, data.body,
                                           [queue.queue_id for queue in durable_targets], properties=data.properties,
                                           durable=True, expiration=data.expiration, routing_type=data.routing_type)
            if scheduled_time:
                for queue in durable_targets:
                    store.update_scheduled_delivery_time(queue.queue_id, message_id, scheduled_time, 0)
        else:
            tx.store_message(message_id, data.address, data.body, properties=data.properties, durable=True,
                             expiration=data.expiration, routing_type=data.routing_type)
            for queue in durable_targets:
                tx.store_reference(queue.queue_id, message_id)
                if scheduled_time:
                    tx.update_scheduled_delivery_time(queue.queue_id, message_id, scheduled_time)
        data.durable_refs = len(durable_targets)

    @property
    def address_settings(self) -> AddressSettingsRepository:
        """The address settings (an AddressSettingsRepository); queues look theirs up by address."""
        return self._address_settings

    @address_settings.setter
    def address_settings(self, repository: AddressSettingsRepository) -> None:
        if not isinstance(repository, AddressSettingsRepository):
            raise TypeError(f"address_settings must be an AddressSettingsRepository, not {type(repository).__name__}")
        self._address_settings = repository

    def _enqueue(self, data: MessageData, targets: list[QueueState], scheduled_time: int) -> None:
        """A new reference of the message on each target queue (lock held)."""
        for queue in targets:
            ref = Reference(data, queue)
            queue.count += 1
            queue.messages_added += 1
            if scheduled_time:
                self._schedule(ref, scheduled_time)
                continue
            queue.ready.append(ref)
            if data.expiration:
                heapq.heappush(self._expiring, (data.expiration, next(self._tiebreak), ref))
            if queue.waiters:
                queue.condition.notify()

    # ------------------------------------------------------------------------------- consumers
    def create_consumer(self, queue_name: str, *, redelivery_policy: Any = None) -> Consumer:
        """A consumer on the queue, acknowledging on its own (no transaction)."""
        if redelivery_policy is not None:
            raise ConfigError("redelivery_policy", redelivery_policy,
                              "client-side (ActiveMQ Classic) redelivery policies are not supported yet",
                              hint="configure redelivery with broker.address_settings")
        return self._create_consumer(queue_name, None)

    def _create_consumer(self, queue_name: str, session: Session | None) -> Consumer:
        with self._lock:
            self._check_open()
            if session is not None and session._closed:
                raise MessageStateError("the session is closed")
            queue = self._queue_named(queue_name)
            consumer = Consumer(self, queue, session)
            queue.consumers += 1
            if session is not None:
                session._consumers.append(consumer)
            return consumer

    def create_session(self, transacted: bool = True) -> Session:
        """A session: transacted, its acknowledgements and sends take effect at commit()."""
        if not isinstance(transacted, bool):
            raise ConfigError("transacted", transacted, "must be True or False")
        with self._lock:
            self._check_open()
            session = Session(self, transacted)
            self._sessions.add(session)
            return session

    def _receive(self, consumer: Consumer, timeout: float | None) -> Message | None:
        if timeout is not None and timeout != 0:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
                raise ValueError(f"timeout={timeout!r}: seconds >= 0, or None to wait for a message")
            deadline = time.monotonic() + timeout
        else:
            deadline = None
        queue = consumer._queue
        lock = self._lock
        lock.acquire()
        try:
            while True:
                if consumer._closed or self._closed or queue.deleted:
                    self._check_open()
                    if queue.deleted:
                        raise MessageStateError(f"queue {queue.name!r} was deleted")
                    raise JournalClosedError("the consumer is closed")
                if self._scheduled or self._expiring:
                    self._pump(self._clock.now_ms())
                ready = queue.ready
                while ready:
                    ref = ready.popleft()
                    if ref.state != READY:
                        continue            # expired by the reaper while it waited here
                    data = ref.data
                    if data.expiration:
                        now = self._clock.now_ms()
                        if now >= data.expiration:
                            try:
                                self._expire(ref, now)
                            except BaseException:
                                if ref.state == READY:
                                    ready.appendleft(ref)       # the store failed: it stays where it was
                                raise
                            continue
                    if self._strict:
                        return self._dispatch(ref, consumer)
                    count = ref.delivery_count + 1      # _dispatch, inlined for the common case
                    ref.delivery_count = count
                    ref.state = DELIVERING
                    queue.delivering += 1
                    message = Message(data, count, queue.name, ref, consumer)
                    ref.delivery = message
                    consumer._delivering[ref] = None
                    return message
                # nothing deliverable now
                if timeout == 0:
                    return None
                if deadline is not None:
                    wait_s = deadline - time.monotonic()
                    if wait_s <= 0:
                        return None
                else:
                    wait_s = None
                if not self._manual_clock and self._scheduled:
                    due_s = (self._scheduled[0][0] - self._clock.now_ms()) / 1000.0
                    wait_s = due_s if wait_s is None else min(wait_s, due_s)
                    wait_s = max(wait_s, 0.0005)
                queue.waiters += 1
                try:
                    queue.condition.wait(wait_s)
                finally:
                    queue.waiters -= 1
        finally:
            lock.release()

    def _dispatch(self, ref: Reference, consumer: Consumer) -> Message:
        """Hand a reference to a consumer: the delivery count goes up first (lock held)."""
        queue = ref.queue
        count = ref.delivery_count + 1
        ref.delivery_count = count
        ref.state = DELIVERING
        queue.delivering += 1
        data = ref.data
        if self._strict and data.durable_refs and queue.durable:
            try:
                self._store.before_delivery(queue.queue_id, data.message_id, count)
            except BaseException:
                ref.delivery_count = count - 1
                ref.state = READY
                queue.delivering -= 1
                queue.add_sorted(ref)
                raise
        message = Message(data, count, queue.name, ref, consumer)
        ref.delivery = message
        consumer._delivering[ref] = None
        return message

    def _owned(self, consumer: Consumer, message: Message, action: str) -> Reference:
        """The reference of a message this consumer holds undecided; MessageStateError otherwise."""
        if not isinstance(message, Message):
            raise TypeError(f"expected a Message, not {type(message).__name__}")
        ref = message._ref
        if ref is None:
            raise MessageStateError(f"message {message.message_id} was browsed, not delivered; only a received "
                                    f"message can be {action}")
        if message._owner is not consumer:
            raise MessageStateError(f"message {message.message_id} was delivered to another consumer; it can only be "
                                    f"{action} through that consumer")
        if ref.delivery is message and ref.state == ACKED_IN_TX:
            raise MessageStateError(f"message {message.message_id} is already acknowledged in the session's open "
                                    "transaction; commit or roll back the session")
        if ref.delivery is not message or ref.state != DELIVERING:
            if consumer._closed:
                raise MessageStateError(f"message {message.message_id} went back to its queue when the consumer "
                                        "closed; it cannot be " + action)
            raise MessageStateError(f"message {message.message_id} (delivery {message.delivery_count}) was already "
                                    "acknowledged or rolled back")
        return ref

    def _acknowledge(self, consumer: Consumer, message: Message) -> None:
        lock = self._lock
        lock.acquire()
        try:
            ref = message._ref if type(message) is Message else None
            if ref is None or message._owner is not consumer or ref.delivery is not message or ref.state != DELIVERING:
                ref = self._owned(consumer, message, "acknowledged")     # raises, saying why
            session = consumer._session
            if session is not None and session.transacted:
                data = ref.data
                queue = ref.queue
                if data.durable_refs and queue.durable:
                    session._transaction(self._store).store_acknowledge(queue.queue_id, data.message_id)
                del consumer._delivering[ref]
                session._acked[ref] = None
                ref.state = ACKED_IN_TX
                return
            # _remove(ref, NORMAL, True), inlined for the common case
            queue = ref.queue
            data = ref.data
            if data.durable_refs and queue.durable:
                self._store.acknowledge(queue.queue_id, data.message_id)     # + DELETE after the last one
                data.durable_refs -= 1
            ref.state = DONE
            ref.delivery = None
            queue.count -= 1
            queue.messages_acknowledged += 1
            del consumer._delivering[ref]
            queue.delivering -= 1
        finally:
            lock.release()

    def _remove(self, ref: Reference, reason: str, write_store: bool) -> None:
        """The reference leaves its queue for good (lock held). ``write_store``: append its ACK (33)
        here (False when a transaction already holds it). The message is deleted from the store when
        its last stored reference goes (Artemis: a non-transactional, unsynced DELETE)."""
        queue = ref.queue
        data = ref.data
        if data.durable_refs and queue.durable:
            if write_store:
                self._store.acknowledge(queue.queue_id, data.message_id)     # + DELETE after the last one
            elif data.durable_refs == 1:
                self._store.delete_message(data.message_id)
            data.durable_refs -= 1
        ref.state = DONE
        ref.delivery = None
        queue.count -= 1
        if reason is NORMAL:
            queue.messages_acknowledged += 1
        elif reason is KILLED:
            queue.messages_killed += 1
        else:
            queue.messages_expired += 1

    def _rollback(self, consumer: Consumer, message: Message, delay_ms: int | None) -> None:
        if delay_ms is not None and (isinstance(delay_ms, bool) or not isinstance(delay_ms, int)
                                     or not 0 <= delay_ms <= I64_MAX):
            raise ValueError(f"delay_ms={delay_ms!r}: milliseconds, an int >= 0 (or None for the address's delay)")
        lock = self._lock
        lock.acquire()
        try:
            ref = self._owned(consumer, message, "rolled back")
            del consumer._delivering[ref]
            ref.queue.delivering -= 1
            ref.delivery = None
            self._cancel(ref, self._clock.now_ms(), delay_ms)
        finally:
            lock.release()

    def _cancel(self, ref: Reference, now: int, delay_override: int | None) -> None:
        """A failed delivery of a reference that has just left its consumer (Artemis checkRedelivery)."""
        queue = ref.queue
        data = ref.data
        count = ref.delivery_count
        settings = self.address_settings.get(queue.address)
        stored = bool(data.durable_refs) and queue.durable
        try:
            if stored:
                self._store.update_delivery_count(queue.queue_id, data.message_id, count)
            max_attempts = settings.max_delivery_attempts
            if max_attempts > 0 and count >= max_attempts:
                self._dead_letter(ref, settings, now)
                return
            if delay_override is not None:
                delay = delay_override
            elif settings.redelivery_delay > 0 or settings.redelivery_delays:
                delay = settings.redelivery_delay_for(count, self._rng)
            else:
                delay = 0
            if delay > 0:
                due = now + delay
                if stored:
                    self._store.update_scheduled_delivery_time(queue.queue_id, data.message_id, due, count)
                self._schedule(ref, due)
                return
        except BaseException:
            if ref.state == DELIVERING:     # the store failed: the message stays, deliverable again
                ref.state = READY
                queue.add_sorted(ref)
            raise
        ref.state = READY
        queue.add_sorted(ref)
        if data.expiration:
            heapq.heappush(self._expiring, (data.expiration, next(self._tiebreak), ref))
        if queue.waiters:
            queue.condition.notify()

    def _schedule(self, ref: Reference, due_ms: int) -> None:
        queue = ref.queue
        ref.state = SCHEDULED
        queue.scheduled += 1
        heapq.heappush(self._scheduled, (due_ms, next(self._tiebreak), ref))
        if queue.waiters and not self._manual_clock:
            queue.condition.notify_all()        # a sooner due time: sleeping receivers recompute their wait

    def _close_consumer(self, consumer: Consumer) -> None:
        with self._lock:
            self._close_consumer_locked(consumer)

    def _close_consumer_locked(self, consumer: Consumer) -> None:
        if consumer._closed:
            return
        consumer._closed = True
        queue = consumer._queue
        queue.consumers -= 1
        returned = 0
        for ref in consumer._delivering:
            # not a failed delivery: Artemis decrements the count (ServerConsumerImpl.cancelRefs)
            ref.delivery = None
            ref.delivery_count -= 1
            ref.state = READY
            queue.delivering -= 1
            queue.add_sorted(ref)
            if ref.data.expiration:
                heapq.heappush(self._expiring, (ref.data.expiration, next(self._tiebreak), ref))
            returned += 1
        consumer._delivering.clear()
        if queue.waiters:
            queue.condition.notify_all()    # the returned messages, and a receive() of this consumer that waits

    # ------------------------------------------------------------------------------- sessions
    def _commit(self, session: Session) -> None:
        with self._lock:
            self._check_open()
            self._check_transacted(session, "commit")
            tx = session._tx
            wrote = tx is not None and tx.records > 0
            if tx is not None:
                tx.commit(sync=False)
                session._tx = None
            for data, targets, scheduled_time in session._sends:
                live = [queue for queue in targets if not queue.deleted]
                for queue in targets:
                    queue.pending_sends -= 1
                if scheduled_time and scheduled_time <= self._clock.now_ms():
                    scheduled_time = 0
                self._enqueue(data, live, scheduled_time)
            session._sends.clear()
            for ref in session._acked:
                ref.queue.delivering -= 1
                self._remove(ref, NORMAL, False)
            session._acked.clear()
            store = self._store
        if wrote and store.sync_mode != "none":
            store.sync()        # outside the lock: the commit is durable when commit() returns

    def _rollback_session(self, session: Session) -> None:
        with self._lock:
            self._check_open()
            self._check_transacted(session, "roll back")
            self._rollback_session_locked(session, include_delivering=True)

    def _rollback_session_locked(self, session: Session, *, include_delivering: bool) -> None:
        tx = session._tx
        if tx is not None:
            session._tx = None
            tx.rollback(sync=False)
        for _, targets, _ in session._sends:
            for queue in targets:
                queue.pending_sends -= 1
        session._sends.clear()
        now = self._clock.now_ms()
        failed = list(session._acked)
        session._acked.clear()
        for ref in failed:
            ref.state = DELIVERING
            ref.delivery = None
            ref.queue.delivering -= 1
        if include_delivering:
            for consumer in session._consumers:
                for ref in consumer._delivering:
                    ref.delivery = None
                    ref.queue.delivering -= 1
                    failed.append(ref)
                consumer._delivering.clear()
        for ref in failed:
            self._cancel(ref, now, None)

    def _close_session(self, session: Session) -> None:
        with self._lock:
            if session._closed:
                return
            for consumer in session._consumers:
                self._close_consumer_locked(consumer)
            if session.transacted and not self._closed:
                self._rollback_session_locked(session, include_delivering=False)
            session._closed = True

    @staticmethod
    def _check_transacted(session: Session, verb: str) -> None:
        if session._closed:
            raise MessageStateError("the session is closed")
        if not session.transacted:
            raise MessageStateError(f"the session is not transacted; there is nothing to {verb}")

    # ------------------------------------------------------------------------------- time
    def _on_clock_moved(self, now: int) -> None:
        """A ManualClock moved: release what fell due, expire what expired, wake receivers."""
        with self._lock:
            if not self._closed:
                self._pump(now)

    def _pump_now(self) -> None:
        if self._scheduled or self._expiring:
            self._pump(self._clock.now_ms())

    def _pump(self, now: int) -> None:
        """Scheduled references due by ``now`` go to the head of their queues (earliest first, as
        Artemis's ScheduledDeliveryHandler adds them); the expiry reaper expires READY references."""
        heap = self._scheduled
        if heap and heap[0][0] <= now:
            due: dict[QueueState, list[Reference]] = {}
            while heap and heap[0][0] <= now:
                ref = heapq.heappop(heap)[2]
                if ref.state != SCHEDULED:
                    continue
                ref.state = READY
                ref.queue.scheduled -= 1
                due.setdefault(ref.queue, []).append(ref)
            for queue, refs in due.items():
                queue.ready.extendleft(reversed(refs))
                for ref in refs:
                    if ref.data.expiration:
                        heapq.heappush(self._expiring, (ref.data.expiration, next(self._tiebreak), ref))
                if queue.waiters:
                    queue.condition.notify(len(refs))
        expiring = self._expiring
        while expiring and expiring[0][0] <= now:
            ref = heapq.heappop(expiring)[2]
            if ref.state == READY:
                self._expire(ref, now)      # left in its queue's deque as a DONE tombstone

    # ------------------------------------------------------------------------------- dead letters, expiry
    def _auto_create(self, on_address: str, prefix: str, for_address: str, suffix: str) -> None:
        """The dead-letter (or expiry) queue of ``for_address`` on ``on_address``: multicast, durable,
        filtered on the copies' original address (Artemis createResources)."""
        name = resource_queue_name(prefix, for_address, suffix)
        if name not in self._queues:
            self._create_queue_locked(name, on_address, "multicast", origin_filter(self._dialect, for_address), True,
                                      auto_created=True)

    def _dead_letter(self, ref: Reference, settings, now: int) -> None:
        queue = ref.queue
        address = settings.dead_letter_address
        if address is not None:
            if settings.auto_create_dead_letter_resources and address and queue.address != address:
                self._auto_create(address, settings.dead_letter_queue_prefix, queue.address,
                                  settings.dead_letter_queue_suffix)
            target = self._addresses.get(address)
            if target is not None and target.has_queues():
                self._move(ref, target, KILLED, now)
                return
        queue.messages_dropped += 1
        self._remove(ref, KILLED, True)

    def _expire(self, ref: Reference, now: int) -> None:
        """An expired reference (READY): to the expiry address of the MESSAGE's address, else dropped."""
        data = ref.data
        settings = self.address_settings.get(data.address)
        address = settings.expiry_address
        if address:         # None or "" = drop
            if settings.auto_create_expiry_resources and data.address != address:
                self._auto_create(address, settings.expiry_queue_prefix, data.address, settings.expiry_queue_suffix)
            target = self._addresses.get(address)
            if target is not None and target.has_queues():
                self._move(ref, target, EXPIRED, now)
                return
        ref.queue.messages_dropped += 1
        self._remove(ref, EXPIRED, True)

    def _move(self, ref: Reference, target: AddressState, reason: str, now: int) -> None:
        """Copy the message to another address and remove the original, in one store transaction."""
        queue = ref.queue
        original = ref.data
        copy = make_copy(original, self._next_message_id, target.name, queue.name, self._dialect,
                         actual_expiry_ms=now if reason is EXPIRED else None)
        self._next_message_id += 1
        expiry_delay = self.address_settings.get(target.name).expiry_delay
        if expiry_delay >= 0:       # routing applies the expiry delay of the new address (PostOfficeImpl.route)
            copy.expiration = now + expiry_delay
        targets = target.route(copy, copy.routing_type)
        store = self._store
        ack_stored = bool(original.durable_refs) and queue.durable
        if store is not None:
            durable_targets = copy.durable and any(t.durable for t in targets)
            if durable_targets or ack_stored:
                tx = store.transaction()
                try:
                    if durable_targets:
                        self._store_new(copy, targets, 0, tx)
                    if ack_stored:
                        tx.store_acknowledge(queue.queue_id, original.message_id)
                    tx.commit(sync=False)
                except BaseException:
                    if tx.state == "open":
                        tx.rollback(sync=False)
                    raise
        self._remove(ref, reason, False)
        self._enqueue(copy, targets, 0)

    # ------------------------------------------------------------------------------- life cycle
    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError("the broker is closed")

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def dialect(self) -> str:
        return self._dialect.name

    @property
    def store(self) -> MessageStore | None:
        """The message store (None for a non-persistent broker); for inspection."""
        return self._store

    def sync(self) -> None:
        """Return once everything sent, acknowledged or rolled back before the call is durable."""
        with self._lock:
            self._check_open()
            store = self._store
        if store is not None:
            store.sync()

    def stats(self) -> dict:
        """Broker-wide counts (and the store's statistics when there is one)."""
        with self._lock:
            self._check_open()
            self._pump_now()
            queues = list(self._queues.values())
            result = {
                "queues": len(queues),
                "addresses": len(self._addresses),
                "messages": sum(q.count for q in queues),
                "scheduled": sum(q.scheduled for q in queues),
                "delivering": sum(q.delivering for q in queues),
                "unrouted": self._unrouted,
                "next_message_id": self._next_message_id,
                "dialect": self._dialect.name,
            }
            if self._store is not None:
                result["store"] = self._store.stats()
            return result

    def close(self) -> None:
        """Close the broker: open transactions are rolled back, the store synced and closed.
        Unacknowledged durable messages are delivered again by the next Broker(directory)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for session in list(self._sessions):
                tx = session._tx
                session._tx = None
                if tx is not None and tx.state == "open":
                    tx.rollback(sync=False)
            for queue in self._queues.values():
                queue.condition.notify_all()
            store = self._store
        if store is not None:
            store.close()

    def __enter__(self) -> "Broker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        where = repr(self.directory) if self.directory is not None else "in memory"
        return f"Broker({where}, queues={len(self._queues)}, dialect={self._dialect.name!r}, closed={self._closed})"
