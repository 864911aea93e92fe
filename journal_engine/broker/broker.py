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

Where the work is done: ``post_office`` (addresses, queues, references in and out, with their store
writes), ``delivery`` (dispatch, ack, rollback, close: the consumers' side), ``transactions`` (the
sessions' side), ``redelivery`` (a failed delivery), ``dead_letter`` (dead letters and expiry),
``timers`` (scheduled deliveries, expiry watch), ``config`` (the configuration files), ``arguments``
(checks of what users pass). This module builds them, holds the public API and sends.
All state is guarded by one lock (``gate``); receivers wait on a condition variable per queue.

A send is written once: ``PostOffice.store_new`` (the store's one-call send; a single queue without a
list built) and ``PostOffice.enqueue``, for one queue as for many.
"""
from __future__ import annotations

import asyncio
import logging
import os
import random
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any

from ..errors import (ConfigError, DuplicateIdError, JournalClosedError, MessageStateError, QueueExistsError,
                      UnknownQueueError)
from ..message_store.message_store import MessageStore
from ..limits import (ASYNC_RECEIVE_POLL_FIRST_S, ASYNC_RECEIVE_POLL_LAST_S, ID_CACHE_SIZE_DEFAULT,
                      MAX_REDELIVERY_RECORDS_DEFAULT, PERSIST_ID_CACHE_DEFAULT, PRIORITY_DEFAULT,
                      REDRIVES_MAX_DEFAULT, CONSOLE_BROWSE_SCAN_MAX, CONSOLE_PAGE_MESSAGES_DEFAULT)
from ..limits import check_max_redelivery_records as check_cap
from .artemis.address_settings import AddressSettings, AddressSettingsRepository
from .artemis.redelivery_rules import ArtemisRedeliveryRules
from .arguments import ROUTING_TYPES, STORE_BACKENDS, SYNC_MODES, check_name, check_time, checked_properties
from .config.safe_xml import check_scan_period
from .config.systems import load as load_config, merged_switch
from .clock import Clock, WallClock
from .classic.dead_letters import ClassicDeadLetters
from .classic.destinations import QUEUE, TOPIC, ClassicDestination, destination_of_queue
from .classic.config import ClassicBrokerConfig
from .classic.expiry_scans import DestinationExpiryScans
from .classic.policy import ClassicRedeliveryPolicy
from .classic.producer_audit import MESSAGE_ID_PROPERTY, ProducerAudit, message_key
from .classic.redelivery_rules import ClassicRedeliveryRules, ConsumerPolicyRules
from .consumer import Consumer
from .dead_letter import DeadLetters
from .dialects import dialect_named
from .duplicate_ids import DuplicateIds, check_id_cache_size
from .delivery import Delivery
from .gate import Gate
from .message import HEADER_NAMES, Message, MessageData
from .operations import SessionOperations
from .post_office import PostOffice
from .priority import ALL_PRIORITIES, check_priority, qpid_levels
from .qpid.queue_policy import (DLQ_ENABLED_ARGUMENT, MAXIMUM_DELIVERY_COUNT_ARGUMENT, QpidQueuePolicy,
                                QpidVirtualHostContext, dead_letter_exchange_name, dead_letter_queue_name,
                                storable_arguments)
from .qpid.redelivery_rules import QpidRedeliveryRules
from .queue import READY, QueueInfo, QueueState
from .redelivery import BrokerRedeliveryRules, Redelivery
from .selector import Selector
from .redrive import Redrive, RedriveResult, check_redrive_arguments
from .session import CLIENT_DEFAULT, ClientDefault, Session
from .queue_reaper import auto_delete_rule, reap_queues
from .timers import NEVER_MS, SCAN_PERIOD_MS_DEFAULT, BackgroundScanner, DeliveryTimers, PeriodicScan
from .transactions import Transactions

__all__ = ["Broker"]

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class BrowsePage:
    """What :meth:`Broker.browse_page` found: ``messages`` as (position in the queue, Message), the
    position ``next_start`` after the last reference it looked at, and whether references follow it."""

    queue: str
    start: int
    messages: list
    next_start: int
    more: bool


def _message_ids(message_ids) -> frozenset[int] | None:
    """``message_ids`` as a frozenset of ints (None stays None); ConfigError for anything else."""
    if message_ids is None:
        return None
    try:
        chosen = frozenset(message_ids)
    except TypeError:
        raise ConfigError("message_ids", message_ids, "must be an iterable of message ids, or None") from None
    if not all(isinstance(value, int) and not isinstance(value, bool) for value in chosen):
        raise ConfigError("message_ids", sorted(map(repr, chosen))[:5], "message ids are integers")
    return chosen


class Broker:
    """A message broker in the process, durable in ``directory`` (None: nothing is persisted).

    ``clock``: a Clock (default: the wall clock); a ManualClock makes time deterministic.
    ``max_redelivery_records`` (-1 = no cap) and ``persist_delivery_count_before_delivery`` are
    Artemis's two broker-wide switches; ``config`` (a path to, or the text of, an Artemis broker.xml, a
    HornetQ configuration, a Classic activemq.xml or a Qpid Broker-J virtual host's JSON; or a
    ``journal_engine.config.load`` result) may set them and the address
    settings (a HornetQ file also sets the dialect). ``dialect="hornetq"`` names the dead-letter properties
    as HornetQ did (``_HQ_ORIG_ADDRESS`` ...) and, with ``jms_queue_names=True``, creates queues as
    ``jms.queue.<name>`` and accepts the short name wherever a queue or address is named.
    ``rng`` (a random.Random) draws the redelivery collision avoidance; seed it for repeatable runs.
    ``sync`` is the message store's sync mode ("group": writes become durable within the group-commit
    window without the caller waiting; ``sync()`` waits). ``store_options`` go to MessageStore
    (file_size, buffer_timeout_us, ...). ``qpid_context``: a Qpid Broker-J virtual host's context
    variables (``queue.deadLetterQueueEnabled``, ``queue.maximumDeliveryAttempts``,
    ``queue.defaultExpiryPolicy``): every queue declared then follows Qpid's rules, these its defaults;
    ``config`` may give them instead: a Broker-J virtual host's JSON (or config.json), its ``context``.
    ``message_expiry_scan_period``: every that many ms the expiry reaper moves or drops the messages
    that expired meanwhile (Artemis's default 30,000; -1: never, a consumer meeting one expires it);
    ``address_queue_scan_period``: every that many ms unused auto-deleting queues are deleted
    (``queue_reaper``). With the wall clock a daemon thread runs the scans; with a ManualClock they run
    at their times as the clock moves. A broker.xml may set both.
    ``id_cache_size`` (Artemis's default 20,000; 0: none) and ``persist_id_cache`` (default True):
    duplicate detection (broker/duplicate_ids.py): a message whose ``_AMQ_DUPL_ID`` (``_HQ_DUPL_ID``
    in the HornetQ dialect) its address saw among its last ``id_cache_size`` ids is not routed, and
    with ``persist_id_cache`` the ids survive any crash; a broker.xml's ``<id-cache-size>`` and
    ``<persist-id-cache>`` set them. With a Classic activemq.xml there is none (Classic has no such
    property); its producer audit takes the place: a message whose ``JMSMessageID`` (Classic's MessageId
    text, ``ID:...:<producer>:<sequence>``) its destination's audit window already holds is not routed
    (classic/producer_audit.py; the window from the policy entry's ``enableAudit``,
    ``maxQueueAuditDepth`` / ``maxAuditDepth`` and ``maxProducersToAudit``; in memory, as Classic's).

    Bad arguments or configuration raise ConfigError (a ValueError) naming the field; the store's
    errors (JournalLockedError, CorruptRecordError, ...) propagate from opening and recovery.
    Thread-safe: every method may be called from any thread; one lock serialises the work.
    """

    def __init__(self, directory: str | os.PathLike | None = None, *, clock: Clock | None = None,
                 max_redelivery_records: int = MAX_REDELIVERY_RECORDS_DEFAULT,
                 persist_delivery_count_before_delivery: bool = False,
                 store: str = "journal", dialect: str = "artemis", config: Any = None,
                 rng: random.Random | None = None, sync: str = "group", jms_queue_names: bool = False,
                 store_options: dict | None = None, qpid_context: Mapping | None = None,
                 message_expiry_scan_period: int = SCAN_PERIOD_MS_DEFAULT,
                 address_queue_scan_period: int = SCAN_PERIOD_MS_DEFAULT,
                 id_cache_size: int = ID_CACHE_SIZE_DEFAULT, persist_id_cache: bool = PERSIST_ID_CACHE_DEFAULT) -> None:
        dialect_named(dialect)              # an unknown dialect is refused before the configuration is read
        self._qpid_context = QpidVirtualHostContext.from_variables(qpid_context) if qpid_context is not None else None
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
        if store not in STORE_BACKENDS:
            raise ConfigError("store", store, f"use one of {', '.join(STORE_BACKENDS)}")
        if sync not in SYNC_MODES:
            raise ConfigError("sync", sync, f"use one of {', '.join(SYNC_MODES)}")
        if not isinstance(jms_queue_names, bool):
            raise ConfigError("jms_queue_names", jms_queue_names, "must be True or False")
        check_cap(max_redelivery_records)
        check_scan_period("message_expiry_scan_period", message_expiry_scan_period)
        check_scan_period("address_queue_scan_period", address_queue_scan_period)
        check_id_cache_size(id_cache_size)
        if not isinstance(persist_id_cache, bool):
            raise ConfigError("persist_id_cache", persist_id_cache, "must be True or False")
        if not isinstance(persist_delivery_count_before_delivery, bool):
            raise ConfigError("persist_delivery_count_before_delivery", persist_delivery_count_before_delivery,
                              "must be True or False")
        settings = AddressSettingsRepository()
        classic_config = config if isinstance(config, ClassicBrokerConfig) else None
        if config is not None and classic_config is None:
            parsed = load_config(config)
            classic_config = parsed.classic
            if parsed.qpid_context is not None:
                if self._qpid_context is not None:
                    raise ConfigError("qpid_context", qpid_context, f"conflicts with the virtual host of {parsed.source}",
                                      hint="set the virtual host's defaults in one place only")
                self._qpid_context = parsed.qpid_context
            settings = parsed.address_settings

            def merged(name: str, argument: Any, default: Any) -> Any:
                """The switch ``name`` as the file sets it, unless the argument sets it otherwise."""
                return merged_switch(name, argument, default, getattr(parsed, name), parsed.source)
            dialect = merged("dialect", dialect, "artemis")
            max_redelivery_records = merged("max_redelivery_records", max_redelivery_records,
                                            MAX_REDELIVERY_RECORDS_DEFAULT)
            persist_delivery_count_before_delivery = merged("persist_delivery_count_before_delivery",
                                                            persist_delivery_count_before_delivery, False)
            message_expiry_scan_period = merged("message_expiry_scan_period", message_expiry_scan_period,
                                                SCAN_PERIOD_MS_DEFAULT)
            address_queue_scan_period = merged("address_queue_scan_period", address_queue_scan_period,
                                               SCAN_PERIOD_MS_DEFAULT)
            id_cache_size = merged("id_cache_size", id_cache_size, ID_CACHE_SIZE_DEFAULT)
            persist_id_cache = merged("persist_id_cache", persist_id_cache, PERSIST_ID_CACHE_DEFAULT)
        expiry_grid_ms = message_expiry_scan_period     # how often the expiry scan may run
        scan_time = None
        if classic_config is not None:
            if message_expiry_scan_period != SCAN_PERIOD_MS_DEFAULT:
                raise ConfigError("message_expiry_scan_period", message_expiry_scan_period,
                                  "is Artemis's; a Classic broker scans each destination at its policy entry's "
                                  "expireMessagesPeriod", hint='set <policyEntry expireMessagesPeriod="...">')
            expiry_grid_ms = 1          # each destination's scans at their own times (classic.expiry_scans)
            scan_time = DestinationExpiryScans(classic_config)
        self._dialect = dialect_named(dialect)
        self.max_redelivery_records = max_redelivery_records
        self.persist_delivery_count_before_delivery = persist_delivery_count_before_delivery
        self.jms_queue_names = jms_queue_names
        self.directory = os.fspath(directory) if directory is not None else None

        self._gate = Gate()
        self._sessions: weakref.WeakSet = weakref.WeakSet()
        self._store: MessageStore | None = None
        if directory is not None:
            self._store = MessageStore(directory, backend=store, max_redelivery_records=max_redelivery_records,
                                       persist_delivery_count_before_delivery=persist_delivery_count_before_delivery,
                                       sync=sync, clock=clock, **(store_options or {}))
        self.message_expiry_scan_period = message_expiry_scan_period
        self.address_queue_scan_period = address_queue_scan_period
        self._timers = DeliveryTimers(wake_waiters=not self._manual_clock, watch_expiry=expiry_grid_ms > 0,
                                      scan_time=scan_time)
        self._post_office = PostOffice(self._store, self._timers, self._gate.lock, settings)
        # the seed system whose dead-letter path and redelivery rules the broker follows, picked once
        rules: BrokerRedeliveryRules
        # a session's consumer without a policy of its own: Classic's client default (ActiveMQConnection's
        # RedeliveryPolicy), none on Artemis, whose rules are the address settings'
        self._client_default_policy: ClassicRedeliveryPolicy | None = None
        if classic_config is not None:
            self._dead_letters = ClassicDeadLetters(self._post_office, self._dialect, classic_config, rng)
            rules = ClassicRedeliveryRules(self._dead_letters)
            self._client_default_policy = ClassicRedeliveryPolicy()
        else:
            self._dead_letters = DeadLetters(self._post_office, self._dialect)
            rules = ArtemisRedeliveryRules(self._post_office, self._dead_letters, rng)
        self.classic_config = classic_config
        self._qpid_rules = QpidRedeliveryRules(self._dead_letters)     # a Qpid queue's own
        self._redelivery = Redelivery(self._post_office, rules, ConsumerPolicyRules(self._dead_letters, rng))
        self._redrive = Redrive(self._post_office, self._dialect)
        post_office = self._post_office
        self._duplicates = DuplicateIds(0 if classic_config is not None else id_cache_size, persist_id_cache,
                                        self._dialect.duplicate_id, self._store,
                                        lambda: next(post_office.message_ids, 0) or post_office.new_message_id())
        # ActiveMQ Classic's producer audit in its place (Classic has no duplicate-id property)
        self._audit = ProducerAudit(classic_config.audit_entry_for) if classic_config is not None else None
        if self._audit is not None:
            post_office.on_address_removed = self._audit.forget
        post_office.priority_rule = lambda queue, arguments: self._priority_levels(queue, self._qpid_policy(arguments))
        self._recovery_seconds: float | None = None    # the store's load and the queues' rebuild (stats())
        if self._store is not None:
            started = time.perf_counter()
            try:
                recovered = self._store.load()
                self._post_office.load(recovered, clock.now_ms())
                self._store.forget_duplicate_ids(self._duplicates.load(recovered.duplicate_ids))
                for stored in recovered.queues.values():   # Qpid's rules, kept with their bindings
                    if stored.arguments or self._qpid_context is not None:
                        self._post_office.queues_by_id[stored.queue_id].set_qpid_policy(
                            self._qpid_policy(stored.arguments), self._qpid_rules)
            except BaseException:
                self._store.close()
                raise
            self._recovery_seconds = time.perf_counter() - started
        self._delivery = Delivery(self._gate, clock, self._post_office, self._dead_letters, self._redelivery,
                                  strict=self._store is not None and persist_delivery_count_before_delivery,
                                  manual_clock=self._manual_clock, close_keeps_count=rules.close_keeps_count,
                                  expiry_scan=PeriodicScan(expiry_grid_ms, clock.now_ms()),
                                  queue_scan=PeriodicScan(address_queue_scan_period, clock.now_ms()))
        self._transactions = Transactions(self._gate, clock, self._post_office, self._redelivery, self._delivery,
                                          self._duplicates)
        with self._gate.lock:       # Artemis's start-up pass (startAddressQueueScanner: reapAddresses(true))
            reap_queues(self._post_office, clock.now_ms(), initial=True)
        if self._manual_clock:
            clock.subscribe(self._on_clock_moved)
        self._scanner: BackgroundScanner | None = None
        if not self._manual_clock and self._delivery.next_scan_ms < NEVER_MS:
            self._scanner = BackgroundScanner(self._next_scan_ms, self._run_scans, clock.now_ms)
            self._timers.on_first_expiry = self._scanner.look_again

    @property
    def address_settings(self) -> AddressSettingsRepository:
        """The address settings (an AddressSettingsRepository); queues look theirs up by address.
        Assigning another repository applies from the next lookup on; TypeError for anything else."""
        return self._post_office.address_settings

    @address_settings.setter
    def address_settings(self, repository: AddressSettingsRepository) -> None:
        if not isinstance(repository, AddressSettingsRepository):
            raise TypeError(f"address_settings must be an AddressSettingsRepository, not {type(repository).__name__}")
        self._post_office.use_address_settings(repository)

    # ------------------------------------------------------------------------------- queues
    def _jms_name(self, name: str) -> str:
        prefix = self._dialect.jms_queue_prefix
        return name if name.startswith(prefix) else prefix + name

    def create_queue(self, name: str, *, address: str | None = None, routing_type: str = "anycast",
                     filter: str | None = None, durable: bool = True, arguments: Mapping | None = None) -> QueueInfo:
        """Create a queue bound to ``address`` (default: the queue's name).

        ``filter`` is a JMS selector over the message's properties (and the AMQAddress, AMQDurable,
        AMQExpiration, AMQSize, AMQMessageID headers); a selector that does not parse raises
        SelectorError with the column and token. A durable queue is kept by the store (its messages
        survive a restart); a non-durable one is not. QueueExistsError when the name is taken;
        ConfigError for a bad routing type or a bad argument.

        ``arguments``: Qpid Broker-J's queue-declare arguments (``x-qpid-maximum-delivery-count``,
        ``x-qpid-dlq-enabled``, ``alternateExchange`` and the attributes ``maximumDeliveryAttempts``,
        ``alternateBinding``, ``expiryPolicy``; see ``journal_engine.broker.qpid.queue_policy``). With a DLQ
        the queue's dead-letter exchange ``<name>_DLE`` and queue ``<name>_DLQ`` are created with it
        (kept if they exist).
        """
        check_name(name, "name")
        if address is not None:
            check_name(address, "address")
        if routing_type not in ROUTING_TYPES:
            raise ConfigError("routing_type", routing_type, "use 'anycast' or 'multicast'")
        if filter is not None and not isinstance(filter, str):
            raise TypeError(f"filter must be a str (a JMS selector) or None, not {type(filter).__name__}")
        if not isinstance(durable, bool):
            raise ConfigError("durable", durable, "must be True or False")
        qpid_policy = self._qpid_policy(arguments)
        if self.jms_queue_names:
            name = self._jms_name(name)
            address = self._jms_name(address) if address is not None else name
        elif address is None:
            address = name
        if filter is not None and not filter.strip():
            filter = None
        if filter is not None:
            Selector(filter)            # parse now: a bad filter raises before anything is created
        with self._gate.lock:
            self._gate.check_open()
            post_office = self._post_office
            if qpid_policy is not None and name in post_office.queues:
                raise QueueExistsError("name", name, "a queue of that name exists",
                                       hint="broker.set_queue_arguments(name, arguments) changes its arguments")
            queue = post_office.create_queue(name, address, routing_type, filter, durable,
                                             arguments=storable_arguments(arguments) if arguments else None,
                                             auto_delete=auto_delete_rule(post_office.address_settings.get(address),
                                                                          False), now_ms=self._clock.now_ms())
            self._apply_qpid_policy(queue, qpid_policy)
            return queue.info()

    def set_queue_arguments(self, name: str, arguments: Mapping | None) -> QueueInfo:
        """Give an existing queue Qpid's queue-declare ``arguments`` (None or {}: none), as ``create_queue``
        does; a durable queue keeps them with its binding, so a restarted broker applies them again.
        UnknownQueueError, ConfigError as create_queue."""
        qpid_policy = self._qpid_policy(arguments)
        with self._gate.lock:
            self._gate.check_open()
            queue = self._queue_named(name)
            if queue.durable and self._store is not None:
                self._store.update_queue_arguments(queue.queue_id, storable_arguments(arguments) if arguments else None)
            self._apply_qpid_policy(queue, qpid_policy)
            return queue.info()

    def _qpid_policy(self, arguments: Mapping | None) -> QpidQueuePolicy | None:
        """The Qpid rule of queue-declare ``arguments`` with the virtual host's defaults (None for none: no
        arguments and no ``qpid_context``); TypeError, ConfigError."""
        if arguments is not None and not isinstance(arguments, Mapping):
            raise TypeError(f"arguments must be a mapping, not {type(arguments).__name__}")
        if not arguments and self._qpid_context is None:
            return None
        return QpidQueuePolicy.from_arguments(arguments or {}, self._qpid_context)

    def _priority_levels(self, queue: QueueState, qpid_policy: QpidQueuePolicy | None) -> tuple[int, ...] | None:
        """A queue's priority rule (priority.py): a Qpid queue's levels only when declared with
        x-qpid-priorities; with a Classic configuration, priority order only where the destination's
        policy entry says prioritizedMessages; else Artemis's, every priority a level of its own."""
        if qpid_policy is not None:
            return qpid_levels(qpid_policy.priorities) if qpid_policy.priorities else None
        if self.classic_config is not None:
            destination = destination_of_queue(queue.address, queue.routing_type)
            return ALL_PRIORITIES if self.classic_config.prioritized_messages_for(destination) else None
        return ALL_PRIORITIES

    def _apply_qpid_policy(self, queue: QueueState, qpid_policy: QpidQueuePolicy | None) -> None:
        """Set the queue's Qpid rule; with a DLQ, create ``<name>_DLQ`` on ``<name>_DLE`` unless it exists."""
        if qpid_policy is not None and qpid_policy.dlq_enabled:
            dlq = dead_letter_queue_name(queue.name)
            if dlq not in self._post_office.queues:
                # on a virtual host with defaults the DLQ says it has no DLQ and no maximum of its own
                arguments = None if self._qpid_context is None else {DLQ_ENABLED_ARGUMENT: False,
                                                                     MAXIMUM_DELIVERY_COUNT_ARGUMENT: 0}
                dead = self._post_office.create_queue(dlq, dead_letter_exchange_name(queue.name), "anycast", None,
                                                      queue.durable, arguments=arguments)
                if arguments is not None:
                    dead.set_qpid_policy(QpidQueuePolicy.from_arguments(arguments), self._qpid_rules)
        queue.set_qpid_policy(qpid_policy, self._qpid_rules)
        queue.set_levels(self._priority_levels(queue, qpid_policy))

    def delete_queue(self, name: str) -> int:
        """Delete a queue and its messages; returns how many messages it held.

        Refused (MessageStateError) while the queue has consumers or messages in delivery, or while an
        open transaction has sends waiting for it. UnknownQueueError for an unknown name.
        """
        with self._gate.lock:
            self._gate.check_open()
            queue = self._queue_named(name)
            if queue.consumers or queue.delivering or queue.pending_sends:
                raise MessageStateError(f"queue {queue.name!r} has {queue.consumers} consumers, {queue.delivering} "
                                        f"messages in delivery and {queue.pending_sends} pending transactional "
                                        "sends; close and commit them first")
            return self._post_office.delete_queue(queue)

    def _queue_named(self, name: str) -> QueueState:
        queues = self._post_office.queues
        queue = queues.get(name)
        if queue is None and self.jms_queue_names and isinstance(name, str):
            queue = queues.get(self._jms_name(name))
        if queue is None:
            if not isinstance(name, str):
                raise TypeError(f"a queue name is a str, not {type(name).__name__}")
            raise UnknownQueueError(name)
        return queue

    def queue(self, name: str) -> QueueInfo:
        """A snapshot of the queue's counts (after releasing what fell due and running the scans that fell due).
        UnknownQueueError for an unknown name."""
        with self._gate.lock:
            self._gate.check_open()
            self._delivery.pump_now()
            return self._queue_named(name).info()

    def queue_infos(self) -> list[QueueInfo]:
        """A snapshot of every queue's counts, sorted by name, taken under one hold of the lock (so the
        queues' counts are of one moment: a metrics scrape reads them this way)."""
        with self._gate.lock:
            self._gate.check_open()
            self._delivery.pump_now()
            queues = self._post_office.queues
            return [queues[name].info() for name in sorted(queues)]

    def queue_names(self) -> list[str]:
        """The names of every queue, sorted."""
        with self._gate.lock:
            return sorted(self._post_office.queues)

    def browse(self, queue_name: str) -> list[Message]:
        """The queue's deliverable messages in delivery order, without consuming them (delivery_count 0).
        Scheduled messages and messages in delivery are not listed. UnknownQueueError for an unknown name."""
        with self._gate.lock:
            self._gate.check_open()
            self._delivery.pump_now()
            queue = self._queue_named(queue_name)
            return [Message(ref.data, 0, queue.name) for ref in queue.ready if ref.state == READY]

    def browse_page(self, queue_name: str, *, start: int = 0, limit: int = CONSOLE_PAGE_MESSAGES_DEFAULT,
                    filter: str | None = None, scan_max: int = CONSOLE_BROWSE_SCAN_MAX) -> BrowsePage:
        """A page of the queue's deliverable messages in delivery order, not consumed, each with its
        reference's delivery count: at most ``limit`` of those from position ``start`` on that
        ``filter`` (a JMS selector) accepts, looking at no more than ``scan_max`` references, so that
        one call holds the broker's lock briefly whatever the queue's length (the operator's console
        runs it on the served broker's event loop) -- except once: a queue recovered from the store whose
        references are still made a chunk at a time as deliveries reach them (ReadyQueue) makes all of
        them at its first browse (about 0.08 s a 100k messages). The page's ``next_start`` continues
        the walk.
        UnknownQueueError, SelectorError for a bad filter, ConfigError for a bad start or limit."""
        for name, value, low in (("start", start, 0), ("limit", limit, 1), ("scan_max", scan_max, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(name, value, f"must be an integer >= {low}")
        selector = Selector(filter) if filter is not None and filter.strip() else None
        with self._gate.lock:
            self._gate.check_open()
            self._delivery.pump_now()
            queue = self._queue_named(queue_name)
            messages: list[tuple[int, Message]] = []
            position = start
            walked = 0
            ready = queue.ready
            for ref in islice(ready, start, None):
                if len(messages) >= limit or walked >= scan_max:
                    break
                walked += 1
                position += 1
                if ref.state != READY:
                    continue
                data = ref.data
                if selector is not None and not selector.matches(
                        data.properties, data.headers() if selector.identifiers & HEADER_NAMES else None):
                    continue
                messages.append((position - 1, Message(data, ref.delivery_count, queue.name)))
            return BrowsePage(queue.name, start, messages, position, position < len(ready))

    def browse_scheduled(self, queue_name: str, *, limit: int = CONSOLE_PAGE_MESSAGES_DEFAULT,
                         scan_max: int = CONSOLE_BROWSE_SCAN_MAX) -> tuple[list, bool]:
        """The queue's scheduled messages, not consumed: at most ``limit`` (scheduled time in epoch ms,
        Message with its reference's delivery count), soonest first, among the first ``scan_max``
        entries of the broker's schedule (every queue's), so that a call holds the lock briefly; and
        whether the schedule holds entries not looked at. UnknownQueueError, ConfigError for a bad bound."""
        for name, value in (("limit", limit), ("scan_max", scan_max)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, value, "must be an integer >= 1")
        with self._gate.lock:
            self._gate.check_open()
            self._delivery.pump_now()
            queue = self._queue_named(queue_name)
            found, more = self._timers.scheduled_page(queue, limit, scan_max)
            return [(due_ms, Message(ref.data, ref.delivery_count, queue.name)) for due_ms, ref in found], more

    def redrive(self, from_queue: str, *, to_queue: str | None = None, filter: str | None = None,
                limit: int | None = None, max_redrives: int = REDRIVES_MAX_DEFAULT,
                message_ids=None) -> RedriveResult:
        """Move dead letters from ``from_queue`` back to their original queue (``to_queue``: to that
        queue instead), with an audit trail, in one store transaction (broker/redrive.py).

        ``filter``: a JMS selector over the dead letters (e.g. ``"_AMQ_ORIG_ADDRESS = 'orders'"``);
        ``message_ids``: only these (the ids consumers see); ``limit``: at most this many; a message
        already redriven ``max_redrives`` times is refused and stays. Scheduled messages and messages
        in delivery are not moved. UnknownQueueError for an unknown queue, SelectorError for a bad
        filter, ConfigError for a bad limit.
        """
        check_redrive_arguments(limit, max_redrives)
        selector = Selector(filter) if filter is not None and filter.strip() else None
        chosen = _message_ids(message_ids)
        with self._gate.lock:
            self._gate.check_open()
            self._delivery.pump_now()
            source = self._queue_named(from_queue)
            target = self._queue_named(to_queue) if to_queue is not None else None
            return self._redrive.run(source, target, selector, limit, max_redrives, self._clock.now_ms(), chosen)

    def delete_messages(self, queue_name: str, *, message_ids=None, filter: str | None = None,
                        limit: int | None = None) -> list[int]:
        """Remove deliverable messages of a queue for good, in one store transaction: those whose id is
        in ``message_ids`` (None: any) that ``filter`` accepts (None: all), at most ``limit``; their
        ids in queue order (counted as acknowledged). Scheduled messages and messages in delivery stay.
        UnknownQueueError, SelectorError, ConfigError as :meth:`redrive`."""
        check_redrive_arguments(limit, REDRIVES_MAX_DEFAULT)
        selector = Selector(filter) if filter is not None and filter.strip() else None
        chosen = _message_ids(message_ids)
        with self._gate.lock:
            self._gate.check_open()
            self._delivery.pump_now()
            return self._redrive.delete(self._queue_named(queue_name), selector, limit, chosen)

    # ------------------------------------------------------------------------------- sending
    def send(self, address: str, body, *, properties: Mapping | None = None, durable: bool = True,
             expiration: int = 0, scheduled_delivery_time: int = 0, routing_type: str | None = None,
             priority: int = PRIORITY_DEFAULT) -> int | None:
        """Send a message to an address; returns its message id, or None for a duplicate: a message
        whose duplicate id (property ``_AMQ_DUPL_ID``, bytes or str; ``_HQ_DUPL_ID`` in the HornetQ
        dialect) the address saw among its last ``id_cache_size`` ids is not routed and stores nothing;
        with a Classic configuration, a message whose ``JMSMessageID`` (``ID:...:<producer>:<sequence>``)
        its destination's producer audit holds, likewise (ConfigError for a ``JMSMessageID`` Classic
        cannot parse).

        expiration and scheduled_delivery_time are epoch ms (0 = none). routing_type None reaches
        both the anycast and the multicast queues of the address; "anycast" or "multicast" only
        those. A message no queue accepts goes to the dead-letter address when the address's settings
        say ``send_to_dla_on_no_route``, else is dropped (counted in stats()["unrouted"]).
        priority 0-9 (JMS): a queue delivers its highest priority first, FIFO within one (Artemis; a
        Classic destination only with ``prioritizedMessages``, a Qpid queue with ``x-qpid-priorities``).
        In "group" sync mode a durable send returns before the disk has it (durable within the
        group-commit window); ``sync()`` waits for everything sent before it.
        Raises TypeError for a body that is not bytes-like, ValueError (ConfigError) for bad arguments,
        JournalClosedError when the broker is closed; store errors (StoreFullError, ...) propagate.
        """
        return self._send(address, body, properties, durable, expiration, scheduled_delivery_time, routing_type,
                          None, priority)

    def _send(self, address, body, properties, durable, expiration, scheduled_delivery_time, routing_type,
              session: Session | None, priority: int = PRIORITY_DEFAULT) -> int:
        if type(body) is not bytes:
            if not isinstance(body, (bytes, bytearray, memoryview)):
                raise TypeError(f"body must be bytes, not {type(body).__name__}")
            body = bytes(body)
        if type(address) is not str:
            check_name(address, "address")
        if properties is not None:
            properties = checked_properties(properties)
        if durable is not True and durable is not False:
            raise ConfigError("durable", durable, "must be True or False")
        if expiration or type(expiration) is not int:
            check_time(expiration, "expiration")
        if scheduled_delivery_time or type(scheduled_delivery_time) is not int:
            check_time(scheduled_delivery_time, "scheduled_delivery_time")
        if routing_type is not None and routing_type not in ROUTING_TYPES:
            raise ConfigError("routing_type", routing_type, "use None, 'anycast' or 'multicast'")
        if priority is not PRIORITY_DEFAULT:    # the default's own object skips the check; any other is checked
            check_priority(priority)
        transacted = session is not None and session.transacted
        post_office = self._post_office
        gate = self._gate
        lock = gate.lock
        lock.acquire()
        try:
            if gate.closed:
                raise JournalClosedError("the broker is closed")
            if session is not None and session.closed:
                raise MessageStateError("the session is closed")
            message_id = next(post_office.message_ids, 0) or post_office.new_message_id()
            route = post_office.addresses.get(address)
            if route is None and self.jms_queue_names:
                route = post_office.addresses.get(self._jms_name(address))
                if route is not None:
                    address = route.name
            duplicate_id = None
            if properties is not None and self._duplicates.size:
                duplicate_id = self._duplicates.id_of(properties)
                if duplicate_id is not None and self._refuses_duplicate(address, duplicate_id, session):
                    return None
            if self._audit is not None and properties is not None and self._audit_refuses(
                    address, route, routing_type, properties, session):
                return None
            now = 0
            repository = post_office.address_settings
            cached = repository.cached      # an attribute, not a method: loaded first, then called
            settings = cached(address) or repository.get(address)
            if settings.changes_expiration:     # Artemis applyExpiryDelay (no-expiry, expiry-delay, bounds)
                now = self._clock.now_ms()
                expiration = settings.expiration_for(expiration, now)
            data = MessageData(message_id, address, body, properties, durable, expiration, routing_type, priority)
            if route is None:
                self._no_route(data, settings, scheduled_delivery_time, session)
                if duplicate_id is not None and not transacted:
                    self._store_duplicate_id(address, duplicate_id, None, [], 0)
                return message_id
            targets = route.direct
            if targets is None or routing_type == "multicast":
                targets = route.route(data, routing_type)
                if not targets:
                    self._no_route(data, settings, scheduled_delivery_time, session)
                    if duplicate_id is not None and not transacted:
                        self._store_duplicate_id(address, duplicate_id, None, [], 0)
                    return message_id
            if scheduled_delivery_time:
                now = now or self._clock.now_ms()
                if scheduled_delivery_time <= now:
                    scheduled_delivery_time = 0
            if transacted:
                self._add_routed(data, targets, scheduled_delivery_time, session)
                return message_id
            if duplicate_id is not None:
                self._store_duplicate_id(address, duplicate_id, data, targets, scheduled_delivery_time)
                post_office.enqueue(data, targets, scheduled_delivery_time)
                return message_id
            if durable and self._store is not None:
                post_office.store_new(data, targets, scheduled_delivery_time, None)
            post_office.enqueue(data, targets, scheduled_delivery_time)
            return message_id
        finally:
            lock.release()

    def _refuses_duplicate(self, address: str, duplicate_id: bytes, session: Session | None) -> bool:
        """Whether a send with ``duplicate_id`` is a duplicate (counted in stats()["duplicates"]); in a
        transacted session a duplicate makes the transaction rollback-only, any other id waits there for
        the commit. Lock held."""
        duplicates = self._duplicates
        transacted = session is not None and session.transacted
        if duplicates.seen(address, duplicate_id) or (transacted and session.sent_duplicate_id(address, duplicate_id)):
            duplicates.refused += 1
            log.info("duplicate id %r on address %r: the message is not routed", duplicate_id, address)
            if transacted:
                session.refuse(DuplicateIdError(address, duplicate_id))
            return True
        if transacted:
            session.add_duplicate_id(address, duplicate_id)
        return False

    def _audit_refuses(self, address: str, route, routing_type: str | None, properties: Mapping,
                       session: Session | None) -> bool:
        """Whether ActiveMQ Classic's producer audit drops the send: its ``JMSMessageID``'s producer and
        sequence are in its destination's window (a queue, or a topic when only multicast queues take it;
        the window is recorded now, as the cursor's recordUniqueId). In a transacted session the window is
        asked now and recorded at commit (a rolled-back send never reached Classic's cursor), and a
        duplicate is dropped without failing the transaction, as Classic's cursor drops it after the
        commit. Counted in stats()["duplicates"]. Lock held."""
        key = message_key(properties)
        if key is None:
            return False
        multicast = routing_type == "multicast" or (
            routing_type is None and route is not None and route.multicast and not route.anycast)
        audit = self._audit.audit_for(ClassicDestination(TOPIC if multicast else QUEUE, address))
        if audit is None:
            return False
        producer, sequence = key
        if session is not None and session.transacted:
            if not audit.seen(producer, sequence) and not session.sent_audited(audit, key):
                session.add_audited(audit, key)
                return False
        elif not audit.is_duplicate(producer, sequence):
            return False
        self._audit.refused += 1
        log.info("duplicate message %r on %r (the producer audit's window holds it): the message is not routed",
                 properties.get(MESSAGE_ID_PROPERTY), address)
        return True

    def _store_duplicate_id(self, address: str, duplicate_id: bytes, data: MessageData | None,
                            targets: list[QueueState], scheduled_delivery_time: int) -> None:
        """A new duplicate id into its address's cache, journaled with its message when that is stored
        (``data``, routed to ``targets``), alone otherwise (no durable queue took it). Lock held."""
        duplicates = self._duplicates
        entry, replaces = duplicates.entry(address, duplicate_id)
        stored = False
        if data is not None and data.durable and self._store is not None:
            stored = self._post_office.store_new(data, targets, scheduled_delivery_time, None,
                                                 (entry, replaces) if entry is not None else None)
        if entry is not None and not stored:
            self._store.store_duplicate_id(entry, replaces=replaces)
        duplicates.remember(address, duplicate_id, entry)

    def _add_routed(self, data: MessageData, targets: list[QueueState], scheduled_delivery_time: int,
                    session: Session | None) -> None:
        """A routed message into its queues (stored when durable), or into the session's transaction
        when it is transacted. Lock held."""
        post_office = self._post_office
        store = self._store
        if session is not None and session.transacted:
            if data.durable and store is not None:
                post_office.store_new(data, targets, scheduled_delivery_time, session.transaction(store))
            session.add_send(data, targets, scheduled_delivery_time)
            return
        if data.durable and store is not None:
            post_office.store_new(data, targets, scheduled_delivery_time, None)
        post_office.enqueue(data, targets, scheduled_delivery_time)

    def _no_route(self, data: MessageData, settings: AddressSettings, scheduled_delivery_time: int,
                  session: Session | None) -> None:
        """A message no queue takes (no binding, or every filter refuses it): Artemis's maybeSendToDLA.
        With ``send_to_dla_on_no_route`` and a dead-letter address it goes there (same message id, the
        ORIG properties, reason no-route, its expiration reset then the DLA's expiry rules); otherwise it
        is dropped and counted in stats()["unrouted"]. Lock held."""
        post_office = self._post_office
        target = self._dead_letters.no_route(data, settings, self._clock.now_ms())
        if target is None:
            post_office.count_unrouted()
            return
        copy, targets = target
        if scheduled_delivery_time and scheduled_delivery_time <= self._clock.now_ms():
            scheduled_delivery_time = 0
        self._add_routed(copy, targets, scheduled_delivery_time, session)

    # ------------------------------------------------------------------------------- consumers
    def create_consumer(self, queue_name: str, *, redelivery_policy: ClassicRedeliveryPolicy | None = None) -> Consumer:
        """A consumer on the queue, acknowledging on its own (no transaction). UnknownQueueError for an
        unknown queue.

        ``redelivery_policy``: an ActiveMQ Classic ClassicRedeliveryPolicy; the consumer's rollbacks
        then follow it (its delays, its maximum) and end in a poison ack, which dead-letters the message
        with ``dlqDeliveryFailureCause`` naming the delivery and the policy (docs/broker.md, "ActiveMQ
        Classic"). TypeError for anything else.
        """
        return self._create_consumer(queue_name, None, redelivery_policy)

    def _create_consumer(self, queue_name: str, session: Session | None,
                         redelivery_policy: ClassicRedeliveryPolicy | ClientDefault | None) -> Consumer:
        if redelivery_policy is CLIENT_DEFAULT:
            redelivery_policy = self._client_default_policy
        elif redelivery_policy is not None and not isinstance(redelivery_policy, ClassicRedeliveryPolicy):
            raise TypeError(f"redelivery_policy must be a ClassicRedeliveryPolicy, not {type(redelivery_policy).__name__}")
        with self._gate.lock:
            self._gate.check_open()
            if session is not None and session.closed:
                raise MessageStateError("the session is closed")
            queue = self._queue_named(queue_name)
            consumer = Consumer(self._delivery.operations(), queue, session, redelivery_policy)
            queue.consumers += 1
            if session is not None:
                session.add_consumer(consumer)
            return consumer

    def create_session(self, transacted: bool = True) -> Session:
        """A session: transacted, its acknowledgements and sends take effect at commit().
        ConfigError unless ``transacted`` is a bool."""
        if not isinstance(transacted, bool):
            raise ConfigError("transacted", transacted, "must be True or False")
        with self._gate.lock:
            self._gate.check_open()
            transactions = self._transactions
            operations = SessionOperations(self._create_consumer, self._send, transactions.commit,
                                           transactions.rollback, transactions.close)
            session = Session(operations, transacted)
            self._sessions.add(session)
            return session

    # ------------------------------------------------------------------------------- life cycle
    def _next_scan_ms(self) -> int | None:
        """When the background scanner runs next (None: never again: the broker is closed): the next scan,
        but the expiry scan only while a message may expire (a new one wakes the scanner)."""
        with self._gate.lock:
            if self._gate.closed:
                return None
            return self._delivery.next_scan_ms_watched()

    def _run_scans(self) -> None:
        """The background scanner's turn: the scans due by now run."""
        with self._gate.lock:
            if not self._gate.closed:
                self._delivery.pump(self._clock.now_ms())

    def _on_clock_moved(self, now: int) -> None:
        """A ManualClock moved: release what fell due, expire what expired, wake receivers."""
        with self._gate.lock:
            if not self._gate.closed:
                self._delivery.pump(now)

    @property
    def closed(self) -> bool:
        """True once close() ran."""
        return self._gate.closed

    @property
    def clock(self) -> Clock:
        """The clock the broker reads time from."""
        return self._clock

    @property
    def dialect(self) -> str:
        """"artemis" or "hornetq": how dead-letter and expiry copies name their properties."""
        return self._dialect.name

    @property
    def store(self) -> MessageStore | None:
        """The message store (None for a non-persistent broker); for inspection."""
        return self._store

    def sync(self) -> None:
        """Return once everything sent, acknowledged or rolled back before the call is durable.
        JournalClosedError when the broker is closed."""
        with self._gate.lock:
            self._gate.check_open()
            store = self._store
        if store is not None:
            store.sync()

    # ------------------------------------------------------------------------------- asyncio
    # Thread and loop safety: the broker may be used from several threads and event loops at once;
    # these coroutines call the synchronous methods (which never block on the disk in "group" mode)
    # and wait for durability on the message store's futures, one hand-over per sync and loop.
    async def send_async(self, address: str, body, **options) -> int:
        """``send()`` (same arguments), returning once the message is durable; its id. With
        sync="always" the send itself waits for the disk, as ``send()`` does: use "group"."""
        message_id = self.send(address, body, **options)
        await self.sync_async()
        return message_id

    async def sync_async(self) -> None:
        """``sync()`` for coroutines: returns, without blocking the event loop, once everything sent,
        acknowledged or rolled back before the call is durable."""
        with self._gate.lock:
            self._gate.check_open()
            store = self._store
        if store is not None:
            await store.sync_async()

    async def receive_async(self, consumer: Consumer, timeout: float | None = None) -> Message | None:
        """``consumer.receive(timeout)`` for coroutines: the next deliverable message, or None once
        ``timeout`` seconds passed (None: wait until one comes). While none is deliverable it looks
        again after pauses doubling from ASYNC_RECEIVE_POLL_FIRST_S to ASYNC_RECEIVE_POLL_LAST_S
        (limits.py), so a waiting consumer needs no thread."""
        message = consumer.receive(0)
        if message is not None or timeout == 0:
            return message
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        pause = ASYNC_RECEIVE_POLL_FIRST_S
        while True:
            await asyncio.sleep(pause if deadline is None else max(0.0, min(pause, deadline - loop.time())))
            message = consumer.receive(0)
            if message is not None or (deadline is not None and loop.time() >= deadline):
                return message
            pause = min(2 * pause, ASYNC_RECEIVE_POLL_LAST_S)

    def duplicate_ids(self, address: str) -> list[bytes]:
        """The duplicate ids ``address`` remembers (its cache's ring, oldest first; empty when it has
        none): what a send's ``_AMQ_DUPL_ID`` is checked against. JournalClosedError when closed."""
        with self._gate.lock:
            self._gate.check_open()
            return self._duplicates.ids(address)

    def stats(self) -> dict:
        """Broker-wide counts (and the store's statistics when there is one). JournalClosedError when closed."""
        with self._gate.lock:
            self._gate.check_open()
            self._delivery.pump_now()
            post_office = self._post_office
            queues = list(post_office.queues.values())
            result = {
                "queues": len(queues),
                "addresses": len(post_office.addresses),
                "messages": sum(q.count for q in queues),
                "scheduled": sum(q.scheduled for q in queues),
                "delivering": sum(q.delivering for q in queues),
                "unrouted": post_office.unrouted,
                "duplicates": self._duplicates.refused + (self._audit.refused if self._audit is not None else 0),
                "next_message_id": post_office.next_message_id,
                "dialect": self._dialect.name,
                "recovery_seconds": self._recovery_seconds,
            }
            if self._store is not None:
                result["store"] = self._store.stats()
            return result

    def close(self) -> None:
        """Close the broker: open transactions are rolled back, the store synced and closed.
        Unacknowledged durable messages are delivered again by the next Broker(directory).
        Closing twice is harmless."""
        with self._gate.lock:
            if not self._gate.close():
                return
            for session in list(self._sessions):
                tx = session.end_transaction()
                if tx is not None and tx.state == "open":
                    tx.rollback(sync=False)
            for queue in self._post_office.queues.values():
                queue.condition.notify_all()
            self._post_office.release()
            store = self._store
            scanner = self._scanner
        if scanner is not None:
            scanner.stop()
        if store is not None:
            store.close()

    def __enter__(self) -> "Broker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        where = repr(self.directory) if self.directory is not None else "in memory"
        return (f"Broker({where}, queues={len(self._post_office.queues)}, dialect={self._dialect.name!r}, "
                f"closed={self._gate.closed})")
