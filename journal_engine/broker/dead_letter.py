"""Dead letters and expiry: where a reference goes that cannot be delivered, and the copy that goes there.

A reference is dead-lettered when its delivery count reaches max_delivery_attempts, and expired when
its message's expiration passes (met at dispatch, or by the reaper). ``DeadLetters`` moves a copy to the
dead-letter (or expiry) address in one store transaction (copy 45, its 32s, the original's 33, COMMIT),
auto-creating the address's queue when the settings ask, or drops the reference when the address has
no queue (Artemis sendToDeadLetterAddress, expire, createResources). Why together: both paths share
the copy, the auto-created queues and the move, and differ only in names and counters.

Artemis (QueueImpl.makeCopy + Message.referenceOriginalMessage) copies an undeliverable message with a
new id to the dead-letter (or expiry) address and records where it came from:

* ``_AMQ_ORIG_QUEUE``: the queue it failed on;
* ``_AMQ_ORIG_ADDRESS``: the original message's address;
* ``_AMQ_ORIG_MESSAGE_ID``: the original id, an integer (Artemis stores a Long);
* ``_AMQ_ORIG_ROUTING_TYPE``: the original routing type as Artemis's byte (MULTICAST 0, ANYCAST 1),
  only when the original had one;
* ``_AMQ_ACTUAL_EXPIRY``: on expiry copies, the time it expired (epoch ms).

The copy's expiration is reset to 0. Its routing type is the one recorded in the ORIGINAL's
``_AMQ_ORIG_ROUTING_TYPE`` when the original was itself such a copy (Artemis's move()), else none.
The ORIG properties describe the latest move. HornetQ, Artemis's ancestor, names the same properties
``_HQ_ORIG_ADDRESS``, ``_HQ_ORIG_QUEUE``, ``_HQ_ORIG_MESSAGE_ID`` and ``_HQ_ACTUAL_EXPIRY``, has no
routing types, and keeps the FIRST origin on a copy of a copy (ServerMessageImpl.setOriginalHeaders:
when the original carries ``_HQ_ORIG_MESSAGE_ID`` its ORIG address and id pass to the copy unchanged,
and its ORIG queue when it has one).

Beyond Artemis (in both dialects), every copy says why and how it got there, so an operator can read a
dead-letter queue without the broker's log (docs/cli.md lists the names):

* ``_JE_DEAD_LETTER_REASON``: one of ``DeadLetterReason`` (``max-delivery-attempts``, ``expired``,
  ``poison-ack``, ``no-route``, ...), given by the path that made the copy;
* ``_JE_DEAD_LETTER_TIME``: when the copy was made (epoch ms);
* ``_JE_DEAD_LETTER_COUNT``: how many times the message has been dead-lettered, this time included
  (a redriven message that fails again counts on; broker/redrive.py);
* ``_JE_ORIG_DELIVERY_COUNT``: the original reference's delivery count at that moment;
* ``_JE_DELIVERY_HISTORY``: a JSON list of ``{"time": ms, "reason": ...}``, one per failed delivery
  this broker saw of the reference (attempts before a restart count in the delivery count only).

A poison ack (a consumer whose ClassicRedeliveryPolicy gave up on a message) goes to the address
settings' dead-letter address with its cause recorded on the message as ``dlqDeliveryFailureCause``,
as Artemis's OpenWire AMQConsumer does; a broker run with Classic's rules has its own path
(``classic.dead_letters``).
"""
from __future__ import annotations

import json
import logging
from typing import Iterable

from .artemis.address_settings import AddressSettings
from .artemis.dialect import Dialect
from .message import MessageData
from .post_office import PostOffice
from .queue_reaper import auto_delete_rule
from .queue import EXPIRED, KILLED, NORMAL, AddressState, QueueState, Reference

__all__ = ["ROUTING_TYPE_CODES", "DeadLetterReason", "DEAD_LETTER_REASONS",
           "DEAD_LETTER_REASON", "DEAD_LETTER_TIME", "DEAD_LETTER_COUNT", "ORIG_DELIVERY_COUNT", "DELIVERY_HISTORY",
           "encode_history", "decode_history", "add_account", "make_copy", "resource_queue_name", "origin_filter",
           "DeadLetters", "log_drop", "KILLED", "EXPIRED", "NORMAL", "DLQ_DELIVERY_FAILURE_CAUSE"]

#: dropped messages are logged here (WARNING), as Artemis logs them
log = logging.getLogger("journal_engine.broker")

#: Artemis's RoutingType.getType() bytes
ROUTING_TYPE_CODES = {"multicast": 0, "anycast": 1}
_ROUTING_TYPE_NAMES = {code: name for name, code in ROUTING_TYPE_CODES.items()}


class DeadLetterReason:
    """Why a copy went to a dead-letter (or expiry) address: the value of ``_JE_DEAD_LETTER_REASON``."""

    MAX_DELIVERY_ATTEMPTS = "max-delivery-attempts"    # the delivery count reached max_delivery_attempts
    EXPIRED = "expired"                                # the message's expiration passed
    POISON_ACK = "poison-ack"                          # a Classic consumer gave up on it (its redelivery policy)
    NO_ROUTE = "no-route"                              # sent to an address without a queue (send_to_dla_on_no_route)


#: every reason a copy may carry
DEAD_LETTER_REASONS = frozenset(value for name, value in vars(DeadLetterReason).items() if name.isupper())

# the copy's own account of itself (both dialects)
DEAD_LETTER_REASON = "_JE_DEAD_LETTER_REASON"
DEAD_LETTER_TIME = "_JE_DEAD_LETTER_TIME"
DEAD_LETTER_COUNT = "_JE_DEAD_LETTER_COUNT"
ORIG_DELIVERY_COUNT = "_JE_ORIG_DELIVERY_COUNT"
DELIVERY_HISTORY = "_JE_DELIVERY_HISTORY"
#: why a poison ack gave up on a message (ActiveMQ's property, on Classic's DLQ copy and on Artemis's OpenWire)
DLQ_DELIVERY_FAILURE_CAUSE = "dlqDeliveryFailureCause"


def encode_history(failures: Iterable[tuple[int, str]]) -> str:
    """The ``_JE_DELIVERY_HISTORY`` text of (time ms, reason) pairs, oldest first."""
    return json.dumps([{"time": time_ms, "reason": reason} for time_ms, reason in failures], separators=(",", ":"))


def decode_history(text: object) -> list[dict]:
    """The failed attempts a ``_JE_DELIVERY_HISTORY`` value lists; [] for a missing or foreign value."""
    if not isinstance(text, str):
        return []
    try:
        entries = json.loads(text)
    except ValueError:
        return []
    return [entry for entry in entries if isinstance(entry, dict)] if isinstance(entries, list) else []


def add_account(properties: dict, reason: str, now_ms: int, delivery_count: int,
                failures: Iterable[tuple[int, str]]) -> None:
    """Write the copy's own account of itself (reason, time, delivery count, history) into ``properties``."""
    if reason not in DEAD_LETTER_REASONS:
        raise ValueError(f"dead-letter reason {reason!r}: use one of {', '.join(sorted(DEAD_LETTER_REASONS))}")
    properties[DEAD_LETTER_REASON] = reason
    properties[DEAD_LETTER_TIME] = now_ms
    previous = properties.get(DEAD_LETTER_COUNT)
    properties[DEAD_LETTER_COUNT] = previous + 1 if isinstance(previous, int) and not isinstance(previous, bool) else 1
    properties[ORIG_DELIVERY_COUNT] = delivery_count
    properties[DELIVERY_HISTORY] = encode_history(failures)


def make_copy(original: MessageData, new_id: int, to_address: str, queue_name: str | None, dialect: Dialect, *,
              reason: str, now_ms: int, actual_expiry_ms: int | None = None, delivery_count: int = 0,
              failures: Iterable[tuple[int, str]] = ()) -> MessageData:
    """The copy Artemis routes to a dead-letter or expiry address (see the module docstring).

    ``reason`` is one of DEAD_LETTER_REASONS; ``queue_name`` None: the original was on no queue
    (no ORIG_QUEUE then); ``failures``: the reference's failed deliveries, (time ms, reason) each.
    """
    properties = dict(original.properties) if original.properties else {}
    routing_type = None
    if dialect.orig_routing_type is not None:
        # move(): a copy of a copy keeps the routing type its original recorded
        recorded = properties.get(dialect.orig_routing_type)
        if isinstance(recorded, int) and not isinstance(recorded, bool):
            routing_type = _ROUTING_TYPE_NAMES.get(recorded)
    if dialect.keeps_first_origin and dialect.orig_message_id in properties:
        # HornetQ: the original was itself a copy; its ORIG address and id (and queue, if it had one) stay
        if queue_name is not None and dialect.orig_queue not in properties:
            properties[dialect.orig_queue] = queue_name
    else:
        if queue_name is not None:
            properties[dialect.orig_queue] = queue_name
        properties[dialect.orig_address] = original.address
        properties[dialect.orig_message_id] = original.message_id
    if dialect.orig_routing_type is not None and original.routing_type is not None:
        properties[dialect.orig_routing_type] = ROUTING_TYPE_CODES[original.routing_type]
    if actual_expiry_ms is not None:
        properties[dialect.actual_expiry] = actual_expiry_ms
    add_account(properties, reason, now_ms, delivery_count, failures)
    return MessageData(new_id, to_address, original.body, properties, original.durable, 0, routing_type,
                       original.priority)


def log_drop(code: str, data: MessageData, queue_name: str | None, reason: str, why: str) -> None:
    """Log at WARNING a message dropped for good, naming the queue, the address and the reason, with
    the code of Artemis's message for the same case (the fields also as ``extra``: ``queue``,
    ``address``, ``reason``, ``code``, ``message_id``); counters are kept by the callers."""
    log.warning("%s: message %d on queue %s (address %r) dropped, reason %s: %s", code, data.public_id,
                repr(queue_name) if queue_name is not None else "(none)", data.address, reason, why,
                extra={"code": code, "queue": queue_name, "address": data.address, "reason": reason,
                       "message_id": data.public_id})


def keeping_copy(original: MessageData, new_id: int, to_address: str, properties: dict | None, *,
                 expiration: int) -> MessageData:
    """A persistent copy of ``original`` for ``to_address`` under a new store id that keeps the id
    consumers see (Classic and Qpid move the message itself to a DLQ)."""
    copy = MessageData(new_id, to_address, original.body, properties or None, True, expiration, None,
                       original.priority)
    copy.public_id = original.public_id
    return copy


def resource_queue_name(prefix: str, address: str, suffix: str) -> str:
    """The auto-created dead-letter (or expiry) queue of an address: prefix + address + suffix."""
    return f"{prefix}{address}{suffix}"


def origin_filter(dialect: Dialect, address: str) -> str:
    """The filter of an auto-created queue: only copies of messages first sent to ``address``."""
    quoted = address.replace("'", "''")
    return f"{dialect.orig_address} = '{quoted}'"


class DeadLetters:
    """Dead-letters and expires references on behalf of the broker (see the module docstring).

    Not thread-safe on its own: every method runs with the broker's lock held. Store errors propagate
    with the reference unchanged (the move is one store transaction, rolled back on failure).
    """

    __slots__ = ("_post_office", "_dialect")

    def __init__(self, post_office: PostOffice, dialect: Dialect) -> None:
        self._post_office = post_office
        self._dialect = dialect

    def dead_letter(self, ref: Reference, settings: AddressSettings, now: int,
                    reason: str = DeadLetterReason.MAX_DELIVERY_ATTEMPTS) -> None:
        """A reference that cannot be delivered (``settings`` are its queue's; ``reason`` one of
        DEAD_LETTER_REASONS, by default it reached max_delivery_attempts): to the dead-letter address,
        else dropped (logged at WARNING as Artemis's AMQ222150 or AMQ222148)."""
        queue = ref.queue
        address = settings.dead_letter_address
        if address is not None:
            if settings.auto_create_dead_letter_resources and address and queue.address != address:
                self._auto_create(address, settings.dead_letter_queue_prefix, queue.address,
                                  settings.dead_letter_queue_suffix, now)
            target = self._post_office.addresses.get(address)
            if target is not None and target.has_queues():
                self._move(ref, target, KILLED, reason, now)
                return
            log_drop("AMQ222148", ref.data, queue.name, reason,
                     f"its dead-letter address {address!r} has no queues")
        else:
            log_drop("AMQ222150", ref.data, queue.name, reason, "no dead-letter address is configured")
        self._post_office.drop(ref, KILLED, reason)

    def poison(self, ref: Reference, cause: str | None, now: int) -> None:
        """A poison ack of a reference that has just left its consumer: to the address settings'
        dead-letter address (reason poison-ack), ``cause`` (when given) recorded on the message itself
        as Artemis's OpenWire AMQConsumer records it."""
        if cause is not None:
            ref.data.set_property(DLQ_DELIVERY_FAILURE_CAUSE, cause)
        settings = self._post_office.address_settings.get(ref.queue.address)
        self.dead_letter(ref, settings, now, DeadLetterReason.POISON_ACK)

    def no_route(self, data: MessageData, settings: AddressSettings, now: int
                 ) -> tuple[MessageData, list[QueueState]] | None:
        """A message that no queue took (``settings`` are its address's): Artemis's maybeSendToDLA. With
        ``send_to_dla_on_no_route`` and a dead-letter address that has a queue taking it: the message
        for that address (the same id; ORIG address, message id and routing type, no ORIG queue; reason
        no-route; its expiration from the DLA's rules) and those queues. Else None: it is dropped,
        logged at WARNING (AMQ222056: no dead-letter address; no queue at the DLA) or, when the
        address does not send unrouted messages to its DLA, at DEBUG as Artemis does."""
        if not settings.send_to_dla_on_no_route:
            log.debug("message %d to address %r reached no queue; dropped", data.message_id, data.address)
            return None
        address = settings.dead_letter_address
        if address is None:
            log_drop("AMQ222056", data, None, DeadLetterReason.NO_ROUTE,
                     "it reached no queue and send-to-dla-on-no-route is true, but no dead-letter address is "
                     "configured")
            return None
        copy = make_copy(data, data.message_id, address, None, self._dialect, reason=DeadLetterReason.NO_ROUTE,
                         now_ms=now)
        settings_there = self._post_office.address_settings.get(address)
        if settings_there.changes_expiration:
            copy.expiration = settings_there.expiration_for(0, now)
        target = self._post_office.addresses.get(address)
        targets = target.route(copy, None) if target is not None else []
        if not targets:
            log_drop("AMQ222056", data, None, DeadLetterReason.NO_ROUTE,
                     f"it reached no queue, nor did it at its dead-letter address {address!r}")
            return None
        return copy, targets

    def route_keeping_id(self, ref: Reference, destination: str | None, now: int, *, expired: bool,
                         system: str) -> None:
        """The message itself (its id, body and properties kept, with the account every dead-letter copy
        carries) to the queues of ``destination``, one store transaction; no destination, or one without
        queues: dropped (logged at WARNING under ``system``). Qpid's QueueEntryImpl.routeToAlternate.
        ``expired``: an expired message, whose copy does not expire again; else one that reached the
        maximum delivery count."""
        post_office = self._post_office
        queue = ref.queue
        data = ref.data
        ack_reason = EXPIRED if expired else KILLED
        reason = DeadLetterReason.EXPIRED if expired else DeadLetterReason.MAX_DELIVERY_ATTEMPTS
        target = post_office.addresses.get(destination) if destination is not None else None
        if target is None or not target.has_queues():
            why = "expired" if expired else f"delivered {ref.delivery_count} times, the maximum delivery count"
            where = (f"its alternate {destination!r} has no queue" if destination is not None
                     else "the queue has no alternate binding (no DLQ)")
            log_drop(system, data, queue.name, reason, f"{why}, and {where}")
            post_office.drop(ref, ack_reason, reason)
            return
        properties = dict(data.properties) if data.properties else {}
        add_account(properties, reason, now, ref.delivery_count, ref.failures or ())
        copy = keeping_copy(data, post_office.new_message_id(), target.name, properties,
                            expiration=0 if expired else data.expiration)
        copy.durable = data.durable
        self.move_copy(ref, copy, target, ack_reason, reason)

    def expire(self, ref: Reference, now: int) -> None:
        """An expired reference (READY): to the expiry address of the MESSAGE's address, else dropped. On a
        Qpid queue its expiry policy decides (AbstractQueue.expireEntry): deleted, or to its alternate."""
        post_office = self._post_office
        data = ref.data
        qpid = ref.queue.qpid_policy        # a Qpid queue's expiryPolicy (AbstractQueue.expireEntry)
        if qpid is not None:
            if qpid.routes_expired_to_alternate:
                self.route_keeping_id(ref, qpid.alternate_of(ref.queue.name), now, expired=True,
                                      system="Qpid Broker-J")
            else:
                log_drop("Qpid Broker-J", data, ref.queue.name, DeadLetterReason.EXPIRED,
                         "expired (the queue's expiryPolicy is DELETE)")
                post_office.drop(ref, EXPIRED, DeadLetterReason.EXPIRED)
            return
        settings = post_office.address_settings.get(data.address)
        address = settings.expiry_address
        if address:         # None or "" = drop
            if settings.auto_create_expiry_resources and data.address != address:
                self._auto_create(address, settings.expiry_queue_prefix, data.address, settings.expiry_queue_suffix,
                                  now)
            target = post_office.addresses.get(address)
            if target is not None and target.has_queues():
                self._move(ref, target, EXPIRED, DeadLetterReason.EXPIRED, now)
                return
            log_drop("AMQ222146", data, ref.queue.name, DeadLetterReason.EXPIRED,
                     f"its expiry address {address!r} has no queues")
        else:
            log_drop("AMQ222147", data, ref.queue.name, DeadLetterReason.EXPIRED, "no expiry address is configured")
        post_office.drop(ref, EXPIRED, DeadLetterReason.EXPIRED)

    def expire_due(self, now: int) -> None:
        """The reaper: expire every watched READY reference whose expiration is ``now`` or earlier (each is
        left in its queue's deque as a DONE tombstone)."""
        pop_expired = self._post_office.timers.pop_expired
        ref = pop_expired(now)
        while ref is not None:
            self.expire(ref, now)
            ref = pop_expired(now)

    def _auto_create(self, on_address: str, prefix: str, for_address: str, suffix: str, now: int) -> None:
        """The dead-letter (or expiry) queue of ``for_address`` on ``on_address``: multicast, durable,
        filtered on the copies' original address (Artemis createResources)."""
        name = resource_queue_name(prefix, for_address, suffix)
        post_office = self._post_office
        if name not in post_office.queues:
            post_office.create_queue(name, on_address, "multicast", origin_filter(self._dialect, for_address), True,
                                     auto_created=True, now_ms=now,
                                     auto_delete=auto_delete_rule(post_office.address_settings.get(on_address), True))

    def _move(self, ref: Reference, target: AddressState, ack_reason: str, reason: str, now: int) -> None:
        """Copy the message to another address and remove the original, in one store transaction
        (``ack_reason``: KILLED or EXPIRED, how the queue counts it; ``reason``: the copy's)."""
        post_office = self._post_office
        copy = make_copy(ref.data, post_office.new_message_id(), target.name, ref.queue.name, self._dialect,
                         reason=reason, now_ms=now, actual_expiry_ms=now if ack_reason is EXPIRED else None,
                         delivery_count=ref.delivery_count, failures=ref.failures or ())
        settings_there = post_office.address_settings.get(target.name)
        if settings_there.changes_expiration:   # routing applies the new address's rules (applyExpiryDelay)
            copy.expiration = settings_there.expiration_for(0, now)
        self.move_copy(ref, copy, target, ack_reason, reason)

    def move_copy(self, ref: Reference, copy: MessageData, target: AddressState, ack_reason: str,
                  cause: str) -> None:
        """Route ``copy`` (of the reference's message, with a new message id) to ``target`` and remove the
        original reference, counted by ``ack_reason`` (KILLED or EXPIRED) and ``cause`` (the copy's
        DeadLetterReason): the copy's records and the original's acknowledgement in one store
        transaction. Store errors propagate with nothing changed."""
        post_office = self._post_office
        queue = ref.queue
        original = ref.data
        targets = target.route(copy, copy.routing_type)
        store = post_office.store
        ack_stored = bool(original.durable_refs) and queue.durable
        if store is not None:
            durable_targets = copy.durable and any(t.durable for t in targets)
            if durable_targets or ack_stored:
                tx = store.transaction()
                try:
                    if durable_targets:
                        post_office.store_new(copy, targets, 0, tx)
                    if ack_stored:
                        tx.store_acknowledge(queue.queue_id, original.message_id)
                    tx.commit(sync=False)
                except BaseException:
                    if tx.state == "open":
                        tx.rollback(sync=False)
                    raise
        post_office.remove(ref, ack_reason, False, cause)
        post_office.enqueue(copy, targets, 0)
