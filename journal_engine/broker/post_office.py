"""The post office: addresses and the queues bound to them, message and queue ids, and every way a
reference enters or leaves a queue, with the store writes that go with it.

Artemis splits the same work between PostOfficeImpl (bindings, routing, the address settings) and
QueueImpl (adding and acknowledging references). Why an object of its own here: the broker's sends,
the redelivery path and the dead-letter path all create and remove references; each of those moves is
written once, in this class, and the registries change only through its methods. Not thread-safe on
its own: every method runs with the broker's lock held (the lock is passed in only to give each queue
its condition variable).
"""
from __future__ import annotations

import gc
import sys
import threading
from array import array
from collections.abc import Callable
from operator import length_hint

from .._impl import ReadyQueue, ready_references, recovered_datas, release_from_collector, split_by_level
from ..errors import QueueExistsError
from ..limits import MESSAGE_ID_BLOCK, PRIORITY_DEFAULT
from ..message_store.message_store import MessageStore, RecoveredReferences
from .artemis.address_settings import AddressSettingsRepository
from .message import MessageData
from .priority import ALL_PRIORITIES, PriorityLevels
from .queue import KILLED, NORMAL, READY, AddressState, AutoDelete, QueueState, Reference
from .timers import DeliveryTimers

__all__ = ["PostOffice"]

#: where the message-id range ends (exclusive): 2**63 - 1 on a 64-bit build, the largest end that keeps the
#: range iterator the fast one (see PostOffice._start_message_ids)
_MESSAGE_IDS_END = sys.maxsize


class PostOffice:
    """Queues by name and id, addresses by name, the ids to give next, and the reference moves.

    ``store`` is the MessageStore (None: nothing is persisted); ``timers`` the broker's DeliveryTimers.
    ``queues`` and ``addresses`` are for reading; change them through the methods. ``message_ids``
    hands out message ids: ``next(post_office.message_ids, 0) or post_office.new_message_id()`` takes one.
    """

    def __init__(self, store: MessageStore | None, timers: DeliveryTimers, lock: threading.Lock,
                 address_settings: AddressSettingsRepository) -> None:
        self.store = store
        self.timers = timers
        self.address_settings = address_settings
        self._lock = lock
        self.queues: dict[str, QueueState] = {}
        self.queues_by_id: dict[int, QueueState] = {}
        self.addresses: dict[str, AddressState] = {}
        self._start_message_ids(1)
        self._next_queue_id = 1
        self._unrouted = 0
        #: (queue, its queue-declare arguments) -> its priority rule (priority.py): the broker's rule
        #: (Artemis's, Classic's policy entries, a Qpid queue's x-qpid-priorities); set before load
        self.priority_rule: Callable[[QueueState, dict | None], tuple[int, ...] | None] = (
            lambda queue, arguments: ALL_PRIORITIES)
        #: called with an address's name when its last queue is deleted (the broker's: Classic's producer
        #: audits go with their destination); None: nothing to do
        self.on_address_removed: Callable[[str], None] | None = None

    # ------------------------------------------------------------------------------- ids and counts
    def _start_message_ids(self, first: int) -> None:
        """``message_ids`` hands out ids from ``first`` on. A range iterator: ``next()`` on it is one C call
        (the send path takes an id for every message, and a Python method there costs a frame), and what
        is left of the range says which id comes next without taking it. With a store the range is a
        block the store has reserved (``new_message_id`` reserves the next when it runs out: ids are
        never handed out twice, also not after a restart that finds the messages deleted); without one
        it is never used up (ids past half of it get a range as long again: a long-integer iterator,
        slower; no broker gets there by sending)."""
        if self.store is not None:
            self._message_ids_end = first           # nothing reserved yet: the first id reserves a block
        else:
            self._message_ids_end = _MESSAGE_IDS_END if first <= _MESSAGE_IDS_END // 2 else first + _MESSAGE_IDS_END
        self.message_ids = iter(range(first, self._message_ids_end))

    @property
    def next_message_id(self) -> int:
        """The id the next message gets."""
        return self._message_ids_end - length_hint(self.message_ids)

    @property
    def unrouted(self) -> int:
        """Messages sent that no queue took."""
        return self._unrouted

    def new_message_id(self) -> int:
        """A fresh message id (ids are never reused, also not after a restart)."""
        return next(self.message_ids, 0) or self._reserve_message_ids()

    def _reserve_message_ids(self) -> int:
        """The block of ids after the last one, recorded in the store before any is handed out; its
        first id."""
        first = self._message_ids_end
        end = first + MESSAGE_ID_BLOCK
        self.store.reserve_message_ids(end)
        self._message_ids_end = end
        self.message_ids = iter(range(first + 1, end))
        return first

    def count_unrouted(self) -> None:
        self._unrouted += 1

    def use_address_settings(self, repository: AddressSettingsRepository) -> None:
        """Look settings up in ``repository`` from now on (the broker checked its type)."""
        self.address_settings = repository

    # ------------------------------------------------------------------------------- queues
    def load(self, state, now_ms: int) -> None:
        """Queues (with filters and auto-delete rules; ``now_ms`` is their creation time, as Artemis's
        reloaded queues have), messages, delivery counts and scheduled redeliveries from the store's
        RecoveredState (once, before anything else)."""
        timers = self.timers
        for queue_id in sorted(state.queues):
            stored = state.queues[queue_id]
            rule = AutoDelete(*stored.auto_delete) if stored.auto_delete is not None else None
            queue = QueueState(stored.name, queue_id, stored.address, stored.routing_type, stored.filter, True,
                               self._lock, auto_created=stored.auto_created, auto_delete=rule, created_ms=now_ms)
            queue.level_of = self.priority_rule(queue, stored.arguments)
            self._bind(queue)
        self._next_queue_id = state.max_queue_id + 1
        self._start_message_ids(max(state.max_message_id + 1, state.message_id_floor, 1))
        datas: dict[int, MessageData] = {}
        for queue_id, references in state.references.items():
            queue = self.queues_by_id[queue_id]
            columns = references.columns if isinstance(references, RecoveredReferences) else None
            if columns is not None and not columns.timed and not columns.shared:
                # every reference ready, its message on no other queue: made a chunk at a time as it is used
                queue.count += len(columns)
                queue.messages_added += len(columns)
                if columns.priorities is None or queue.level_of is None:
                    queue.restore_later(self._recovered_references(
                        queue, columns.message_ids, columns.delivery_counts, columns.ascending, state.messages),
                        len(columns))
                else:
                    queue.ready = self._recovered_levels(queue, columns, state.messages)
                continue
            references = sorted(references, key=lambda r: r.message_id)
            new_ids = [recovered.message_id for recovered in references if recovered.message_id not in datas]
            datas.update(zip(new_ids, recovered_datas(new_ids, state.messages.fields_of(new_ids, bodies=False), 0,
                                                      state.messages)))
            for recovered in references:
                data = datas[recovered.message_id]
                data.durable_refs += 1
                ref = Reference(data, queue, recovered.delivery_count)
                queue.count += 1
                queue.messages_added += 1
                if recovered.scheduled_delivery_time:
                    timers.schedule(ref, recovered.scheduled_delivery_time)
                else:
                    queue.ready_for(data).append(ref)
                    if data.expiration:
                        timers.watch_expiry(ref)

    def _recovered_levels(self, queue: QueueState, columns, messages) -> PriorityLevels:
        """A recovered queue's ready references of several priorities: a ReadyQueue per level, its rows
        made a chunk at a time as a one-level queue's are. Only the rows per level are counted here
        (in C); the columns are split into levels at the first use of any of them, so a recovered queue
        costs nothing per message until then."""
        level_of = queue.level_of
        raw = columns.priorities.tobytes()
        rows: dict[int, int] = {}
        for priority, level in enumerate(level_of):
            if (count := raw.count(bytes((priority,)))):
                rows[level] = rows.get(level, 0) + count
        makers: dict = {}       # level -> its make(start, stop), all made at the first call of any

        def make_of(level: int) -> Callable[[int, int], list[Reference]]:
            def make(start: int, stop: int) -> list[Reference]:
                if not makers:
                    for each, (ids, counts) in self._split_levels(columns, level_of, rows).items():
                        makers[each] = self._recovered_references(queue, ids, counts, True, messages)
                return makers[level](start, stop)
            return make
        return PriorityLevels.of_levels(level_of, {level: ReadyQueue(make_of(level), count)
                                                   for level, count in sorted(rows.items())})

    @staticmethod
    def _split_levels(columns, level_of: tuple[int, ...], rows: dict[int, int]) -> dict[int, tuple[array, array]]:
        """The message ids and delivery counts of each level's rows, in message order (one pass, in C)."""
        message_ids, counts, priorities = columns.message_ids, columns.delivery_counts, columns.priorities
        if not columns.ascending:
            order = sorted(range(len(message_ids)), key=message_ids.__getitem__)
            message_ids, counts, priorities = (array(column.typecode, [column[i] for i in order])
                                               for column in (message_ids, counts, priorities))
        table = bytes(level_of[priority] if priority < len(level_of) else 255 for priority in range(256))
        return split_by_level(message_ids, counts, priorities, table, rows)

    @staticmethod
    def _recovered_references(queue: QueueState, message_ids, counts, ascending: bool,
                              messages) -> Callable[[int, int], list[Reference]]:
        """What makes the References of a queue's recovered rows (``message_ids`` and their delivery
        ``counts``), rows ``start`` to ``stop`` in message order (as load sorts them): those messages
        decoded in one call of the store (``fields_of``), then their MessageData and References (the
        queue's ReadyQueue calls it a chunk at a time)."""
        in_order = []       # [message ids, delivery counts] (arrays: no tuple per message), sorted at the first call

        def make(start: int, stop: int) -> list[Reference]:
            if not in_order:
                if ascending:
                    in_order[:] = (message_ids, counts)
                else:
                    order = sorted(range(len(message_ids)), key=message_ids.__getitem__)
                    in_order[:] = (array(message_ids.typecode, [message_ids[i] for i in order]),
                                   array(counts.typecode, [counts[i] for i in order]))
            ordered_ids, ordered_counts = in_order
            collecting = gc.isenabled()
            gc.disable()        # objects that are no garbage, a few per message: no collection passes between them
            try:
                ids = ordered_ids[start:stop]
                datas = recovered_datas(ids, messages.fields_of(ids, bodies=False), 1, messages)
                references = ready_references(datas, queue, ordered_counts[start:stop])
                # a message's data refers to nothing that could refer back to it (text, bytes, numbers, a
                # dict of plain properties): the collector's full passes need not visit them
                release_from_collector(datas)
            finally:
                if collecting:
                    gc.enable()
            return references
        return make

    def release(self) -> None:
        """At close: let go of every queue's references, so that their memory is freed at once (a
        reference and its queue refer to each other: left alone, a closed broker's messages wait for
        the cycle collector)."""
        for queue in self.queues.values():
            queue.release_references()
        self.timers.clear()

    def _bind(self, queue: QueueState) -> None:
        self.queues[queue.name] = queue
        self.queues_by_id[queue.queue_id] = queue
        address = self.addresses.get(queue.address)
        if address is None:
            address = self.addresses[queue.address] = AddressState(queue.address)
        address.bind(queue)

    def create_queue(self, name: str, address: str, routing_type: str, filter: str | None, durable: bool,
                     *, auto_created: bool = False, arguments: dict | None = None,
                     auto_delete: AutoDelete | None = None, now_ms: int = -1) -> QueueState:
        """A new queue bound to ``address``, made at ``now_ms`` (stored, with its queue-declare ``arguments``
        and its auto-delete rule, when durable and there is a store). QueueExistsError when the name is taken."""
        if name in self.queues:
            raise QueueExistsError("name", name, "a queue of that name exists",
                                   hint="pick another name, or broker.queue(name) to inspect it")
        queue_id = self._next_queue_id
        if durable and self.store is not None:
            self.store.store_queue(queue_id, name, address, routing_type=routing_type, filter=filter,
                                   arguments=arguments, auto_created=auto_created, auto_delete=auto_delete)
        self._next_queue_id = queue_id + 1
        queue = QueueState(name, queue_id, address, routing_type, filter, durable, self._lock,
                           auto_created=auto_created, auto_delete=auto_delete, created_ms=now_ms)
        queue.level_of = self.priority_rule(queue, arguments)
        self._bind(queue)
        return queue

    def delete_queue(self, queue: QueueState) -> int:
        """Delete a queue and its ready and scheduled references (the caller checked nothing is in
        delivery); returns how many there were. Receivers waiting on it are woken."""
        live = [ref for ref in queue.ready if ref.state == READY]
        live += self.timers.scheduled_on(queue)
        if self.store is not None and queue.durable:
            self.store.delete_queue(queue.queue_id)
        for ref in live:
            ref.leave_queue()
            data = ref.data
            if data.durable_refs and queue.durable:
                data.durable_refs -= 1
        queue.deleted = True
        queue.ready.clear()
        del self.queues[queue.name]
        del self.queues_by_id[queue.queue_id]
        address = self.addresses[queue.address]
        address.unbind(queue)
        if not address.has_queues():
            del self.addresses[queue.address]
            if self.on_address_removed is not None:
                self.on_address_removed(queue.address)
        queue.condition.notify_all()
        return len(live)

    # ------------------------------------------------------------------------------- references
    def store_new(self, data: MessageData, targets: list[QueueState], scheduled_time: int, tx,
                  duplicate: tuple | None = None) -> bool:
        """ADD_MESSAGE + an ADD_REF per durable target, as one record group, or in the store transaction
        ``tx``; with a scheduled time (+ its record per target) always in a transaction. The caller
        checked the message is durable and there is a store. ``duplicate``: (DuplicateIdEntry, the record
        id it replaces) of the message's duplicate id, written with it. Whether anything was stored (no
        durable target: nothing)."""
        if tx is None and not scheduled_time:
            # the common send: ADD_MESSAGE and its ADD_REFs as one record group, the store's one call
            if len(targets) == 1:
                queue = targets[0]
                if not queue.durable:
                    return False
                queue_ids = queue.id_list       # no list built for one queue
            else:
                queue_ids = [queue.queue_id for queue in targets if queue.durable]
                if not queue_ids:
                    return False
            if duplicate is None:
                self.store.store_message_references(data.message_id, data.address, data.body, queue_ids,
                                                    properties=data.stored_properties(), expiration=data.expiration,
                                                    routing_type=data.routing_type, priority=data.priority)
            else:
                self.store.store_message_references(data.message_id, data.address, data.body, queue_ids,
                                                    properties=data.stored_properties(), expiration=data.expiration,
                                                    routing_type=data.routing_type, duplicate_id=duplicate[0],
                                                    replaces=duplicate[1], priority=data.priority)
            data.durable_refs = len(queue_ids)
            return True
        durable_targets = [queue for queue in targets if queue.durable]
        if not durable_targets:
            return False
        if tx is None:
            # scheduled: the message, its references and their time in one unit, so that a crash never
            # brings the message back due at once: a transaction, committed as a send's records are synced
            store = self.store
            tx = store.transaction()
            try:
                self.store_new(data, targets, scheduled_time, tx, duplicate)
                tx.commit(sync=store.sync_mode.records_wait)
            except BaseException:
                if tx.state == "open":
                    tx.rollback(sync=False)
                raise
            return True
        message_id = data.message_id
        tx.store_message(message_id, data.address, data.body, properties=data.stored_properties(), durable=True,
                         expiration=data.expiration, routing_type=data.routing_type, priority=data.priority)
        for queue in durable_targets:
            tx.store_reference(queue.queue_id, message_id)
            if scheduled_time:
                tx.update_scheduled_delivery_time(queue.queue_id, message_id, scheduled_time)
        if duplicate is not None:
            tx.store_duplicate_id(duplicate[0], replaces=duplicate[1])
        data.durable_refs = len(durable_targets)
        return True

    def schedule_again(self, ref: Reference, due_ms: int) -> None:
        """A reference that left its consumer waits until ``due_ms``, then any consumer of its queue may
        take it. When the message is stored, its delivery count (34) and SET_SCHEDULED_DELIVERY_TIME (36)
        are written as one record group (each under the store's rule), so a crash keeps both or neither."""
        data = ref.data
        queue = ref.queue
        if data.durable_refs and queue.durable:
            self.store.update_redelivery(queue.queue_id, data.message_id, ref.delivery_count, due_ms)
        self.timers.schedule(ref, due_ms)

    def enqueue(self, data: MessageData, targets: list[QueueState], scheduled_time: int) -> None:
        """A new reference of the message on each target queue: scheduled when ``scheduled_time`` is
        set, else at the tail, waking one receiver."""
        for queue in targets:
            ref = Reference(data, queue)
            queue.count += 1
            queue.messages_added += 1
            if scheduled_time:
                self.timers.schedule(ref, scheduled_time)
                continue
            (queue.ready if data.priority == PRIORITY_DEFAULT else queue.ready_for(data)).append(ref)
            if data.expiration:
                self.timers.watch_expiry(ref)
            if queue.waiters:
                queue.condition.notify()

    def drop(self, ref: Reference, reason: str, cause: str) -> None:
        """The reference leaves its queue for good with nowhere to go (no dead-letter or expiry
        address with queues, a discarding rule): counted as dropped and as ``reason`` (KILLED, EXPIRED),
        its ACK stored. ``cause``: the dead-letter reason a copy would have carried (see ``remove``)."""
        ref.queue.messages_dropped += 1
        self.remove(ref, reason, True, cause)

    def remove(self, ref: Reference, reason: str, write_store: bool, cause: str | None = None) -> None:
        """The reference leaves its queue for good, counted by ``reason`` (NORMAL, KILLED, EXPIRED).
        ``write_store``: append its ACK (33) here (False when a transaction already holds it). The
        message is deleted from the store when its last stored reference goes (Artemis: a
        non-transactional, unsynced DELETE). Store errors propagate before anything changes.
        ``cause``: for KILLED, the dead-letter reason (dead_letter.DeadLetterReason), which the queue
        counts too (its ``dead_letters``, the metrics' dead letters by reason)."""
        queue = ref.queue
        data = ref.data
        if data.durable_refs and queue.durable:
            if write_store:
                self.store.acknowledge(queue.queue_id, data.message_id)     # + DELETE after the last one
            elif data.durable_refs == 1:
                self.store.delete_message(data.message_id)
            data.durable_refs -= 1
        ref.leave_queue()
        queue.count -= 1
        if reason is NORMAL:
            queue.messages_acknowledged += 1
        elif reason is KILLED:
            queue.messages_killed += 1
            queue.dead_letters[cause] = queue.dead_letters.get(cause, 0) + 1
        else:
            queue.messages_expired += 1
