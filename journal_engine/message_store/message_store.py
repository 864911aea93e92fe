"""MessageStore: messages, queue references, acknowledgements, delivery counts and scheduled
redeliveries in journals, with Artemis's record types and rules (docs/message-store.md).

Layout of a store directory (as Artemis keeps a bindings journal beside its message journal):

    <directory>/messages/   a Journal of messages (45) and their reference updates (32, 33, 34, 36),
                            every record keyed by the message id
    <directory>/bindings/   a Journal of queue bindings (21), keyed by the queue id

so queue ids and message ids are separate spaces and never collide.
The hot writes (45 + 32 at a send, 33 at an ack, 34, 36) go through the compiled RecordWriter
(journal_engine._record_writer, Python twin journal_engine._twin.record_writer), which enforces max_redelivery_records.
"""
from __future__ import annotations

import errno
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace as replaced
from typing import NamedTuple

from .. import _impl
from ..errors import (ConfigError, DuplicateRecordError, JournalClosedError, JournalError, JournalIOError,
                      UnknownRecordError)
from ..limits import (BINDINGS_FILE_SIZE_MAX_BYTES, BUFFER_SIZE_DEFAULT_BYTES, BUFFER_TIMEOUT_DEFAULT_US,
                      COMPACT_MIN_FILES_DEFAULT, COMPACT_PERCENTAGE_DEFAULT, FILE_SIZE_DEFAULT_BYTES,
                      MAX_REDELIVERY_RECORDS_DEFAULT, MIN_FILES_DEFAULT, PRIORITY_DEFAULT, SYNC_MODE_DEFAULT, U64_MAX,
                      check_max_redelivery_records)
from ..record_format import (REPLACEABLE_TYPES, cached_message_head, RecordKind, RecordType, StoredMessage, StoredQueue,
                             decode_duplicate_id, decode_id_counter, decode_queue, encode_duplicate_id,
                             encode_id_counter, encode_message, encode_plain_message, encode_queue, encode_queue_id,
                             encode_scheduled_time)
from ..storage.directory_lock import DirectoryLock
from ..storage.backends import BACKENDS as STORAGE_BACKENDS, open_record_store
from ..storage.protocol import RecordStore
from ..storage.sync_mode import SyncMode
from .delivery_shadow import FILE_NAME as SHADOW_FILE_NAME
from .delivery_shadow import DeliveryShadow
from .delivery_shadow import boot_id as shadow_boot_id
from .delivery_shadow import read_counts as read_shadow_counts
from .delivery_shadow import void as void_shadow
from .message_queues import MessageQueues

log = logging.getLogger(__name__)

MESSAGES_DIRECTORY = "messages"
BINDINGS_DIRECTORY = "bindings"
#: the bindings journal's record id of the ID counter: the one id no queue is ever given
ID_COUNTER_RECORD_ID = U64_MAX
BACKENDS = tuple(STORAGE_BACKENDS)     # the record-store backends by name (storage/backends.py)


@dataclass(frozen=True, slots=True)
class RecoveredReference:
    """A message's reference on a queue as recovery restored it.

    delivery_count is the last persisted count (0 if none was written): the next delivery
    has delivery_count + 1 and is redelivered when that is > 1. scheduled_delivery_time is
    an epoch ms in the future, or 0 for "deliver now" (a time that passed while the store
    was closed also comes back as 0, as Artemis's PostOfficeJournalLoader does).
    """

    message_id: int
    delivery_count: int = 0
    scheduled_delivery_time: int = 0


class DuplicateIdEntry(NamedTuple):
    """One entry of an address's duplicate-id cache as the store keeps it (DUPLICATE_ID, 37): its own
    record id (from the message ids' counter), the address and the id. (A tuple: one is made at every
    send that carries an id, where a frozen dataclass's set-up cost a microsecond.)"""

    record_id: int
    address: str
    duplicate_id: bytes


@dataclass
class RecoveredState:
    """What MessageStore.load() found."""

    queues: dict = field(default_factory=dict)          # queue id -> StoredQueue
    messages: dict = field(default_factory=dict)        # message id -> StoredMessage (with a live reference)
    references: dict = field(default_factory=dict)      # queue id -> [RecoveredReference] in store order
    # references whose queue the bindings journal does not hold: kept in the journal, not delivered
    unknown_queue_references: dict = field(default_factory=dict)
    anomalies: list = field(default_factory=list)       # human-readable, one per odd record; never fatal
    deleted_messages: list = field(default_factory=list)    # no live reference left: deleted at load (Artemis)
    corrupt_messages: list = field(default_factory=list)    # CorruptRecordError, with load(skip_corrupt=True)
    reports: dict = field(default_factory=dict)         # "messages" / "bindings" -> the journal's LoadReport
    max_message_id: int = 0
    max_queue_id: int = 0
    # every message id below it may have been handed out (the bindings journal's ID counter; 0: none)
    message_id_floor: int = 0
    counts_from_shadow: int = 0         # delivery counts a killed strict-mode process left in its shadow
    duplicate_ids: list = field(default_factory=list)   # DuplicateIdEntry of every cache entry, oldest first


def _pin_releaser(bodies) -> Callable[[str], int]:
    """What the message journal calls when a compaction reclaims a file the recovered bodies still map
    (Journal.add_pin_releaser): they move into memory the recovery owns, so a recovered queue nobody
    uses does not keep the compacted files' space for as long as the broker runs. Refers to the
    bodies weakly: once every recovered queue is restored they go, and the releaser does nothing."""
    held = weakref.ref(bodies)

    def release(path: str) -> int:
        bodies = held()
        return 0 if bodies is None else bodies.release_file(path)
    return release


class RecoveredMessages(Mapping):
    """``RecoveredState.messages`` of a compiled recovery: message id -> StoredMessage, each decoded
    from the body the mapping holds when it is looked at (a recovered message costs no Python object
    until the broker first needs it). Read-only."""

    __slots__ = ("_bodies", "_path")

    def __init__(self, bodies: dict, path) -> None:
        self._bodies = bodies           # message id -> its ADD_MESSAGE body (checked at load)
        self._path = path

    def __getitem__(self, message_id: int) -> StoredMessage:
        return StoredMessage(message_id, *self.fields(message_id))

    def fields(self, message_id: int) -> tuple:
        """(address, body, properties, durable, expiration, routing_type, priority) of a message: its
        StoredMessage's fields without the object (the broker's first use of a recovered message)."""
        return _impl.decode_message_fields(message_id, self._bodies[message_id], self._path)

    def fields_of(self, message_ids, *, bodies: bool = True) -> list[tuple]:
        """``fields`` of many messages at once, in the order of ``message_ids`` (one compiled call);
        ``bodies`` False: the body of a message without properties is None, read later by ``body``
        (a queue's objects made without a copy of its bodies)."""
        return _impl.decode_messages_fields(self._bodies, message_ids, self._path, bodies)

    def body(self, message_id: int) -> bytes:
        """One message's body, decoded from its stored record (what a recovered message's first read
        of its body asks)."""
        return self.fields(message_id)[1]

    def __contains__(self, message_id) -> bool:
        return message_id in self._bodies

    def __iter__(self):
        return iter(self._bodies)

    def __len__(self) -> int:
        return len(self._bodies)

    def __repr__(self) -> str:
        return f"<RecoveredMessages: {len(self._bodies)} messages>"


class RecoveredReferences(Sequence):
    """``RecoveredState.references[queue_id]`` of a compiled recovery: the queue's references in
    store order, held as columns (``columns``: message ids, delivery counts, scheduled times, and
    whether the ids rise, any is timed, any message is on another queue too); a RecoveredReference
    is made when one is looked at. Equal to a list of the same RecoveredReferences."""

    __slots__ = ("columns",)

    def __init__(self, columns) -> None:
        self.columns = columns

    def __len__(self) -> int:
        return len(self.columns.message_ids)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        columns = self.columns
        return RecoveredReference(columns.message_ids[index], columns.delivery_counts[index],
                                  columns.scheduled_times[index])

    def __eq__(self, other) -> bool:
        if isinstance(other, (list, tuple, RecoveredReferences)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None     # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(list(self))


def _recover_shadow_counts(recovery) -> None:
    """The delivery counts a killed process left in its shadow win over the journal's in the recovered
    references (after the record writer took the journal's: it writes each shadow count as a record)."""
    for queue_id, row, _message_id, count in recovery.from_shadow:
        if row >= 0:
            recovery.references[queue_id].delivery_counts[row] = count


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _refuse_stored(what: str, record_id: int, *stored) -> None:
    """DuplicateRecordError when ``record_id`` is already in one of ``stored`` (ids, or a map by id):
    a record id is written once (lock held)."""
    for ids in stored:
        if record_id in ids:
            raise DuplicateRecordError(f"{what} {record_id} is already stored")


class MessageStore:
    """A broker's durable state: queues, messages, references, acks, delivery counts, scheduled times.

    Every write takes ``sync=None``: None lets the journal's mode decide ("always" waits for the
    disk, "group" and "none" do not), True waits for a (shared) fdatasync, False never waits.
    Writes that do not wait are durable within ``buffer_timeout_us`` in "group" mode.

    Arguments (keyword-only after ``directory``; a bad value raises ``ConfigError``):

    * ``directory``: the store's directory (its ``messages/`` and ``bindings/`` record stores).
    * ``backend``: ``"journal"`` (default) or ``"lmdb"``; opening a directory written by the other
      backend raises ``IncompatibleFormatError``.
    * ``max_redelivery_records``: Artemis's cap: delivery-count and scheduled-time records stop past
      this count (-1: no cap); default 10.
    * ``persist_delivery_count_before_delivery``: ``before_delivery()`` makes the count survive a
      killed process before the message is handed out; default False.
    * ``strict_delivery_sync``: with the previous option, wait for a shared fdatasync instead, so a
      power cut loses nothing either; default False.
    * ``sync``: the journals' mode, ``"always"``, ``"group"`` (default) or ``"none"``.
    * ``read_only``: an inspection (the tools): the record stores open read-only, load() returns
      what a writing load would and changes nothing (no deletes, no shadow), every write raises
      ``JournalClosedError``; JournalIOError when the directory is absent. Default False.
    * ``clock``: an object with ``now_ms()`` (e.g. ``ManualClock``) for scheduled times at load;
      default the wall clock.
    * ``file_size`` (bytes, default 10 MiB), ``min_files`` (2), ``buffer_timeout_us`` (µs, 500),
      ``buffer_size`` (bytes, 490 KiB), ``compact_min_files`` (10), ``compact_percentage`` (30): both
      journals', as ``Journal`` takes them (the bindings journal's files are at most 1 MiB).

    Call ``load()`` once after opening, then write; ``close()`` at the end. Thread safety: every
    method may be called from several threads at once (a lock guards the store's bookkeeping and
    the journals serialise appends) except ``load()`` and ``close()``, which run once each while no
    other thread uses the store. A ``StoreTransaction`` belongs to one thread at a time.
    """

    def __init__(self, directory, *, backend: str = "journal",
                 max_redelivery_records: int = MAX_REDELIVERY_RECORDS_DEFAULT,
                 persist_delivery_count_before_delivery: bool = False, strict_delivery_sync: bool = False,
                 sync: str = SYNC_MODE_DEFAULT, clock=None, file_size: int = FILE_SIZE_DEFAULT_BYTES,
                 min_files: int = MIN_FILES_DEFAULT, buffer_timeout_us: int = BUFFER_TIMEOUT_DEFAULT_US,
                 buffer_size: int = BUFFER_SIZE_DEFAULT_BYTES, compact_min_files: int = COMPACT_MIN_FILES_DEFAULT,
                 compact_percentage: int = COMPACT_PERCENTAGE_DEFAULT, read_only: bool = False) -> None:
        if backend not in BACKENDS:
            raise ConfigError("backend", backend, f"use one of {', '.join(BACKENDS)}")
        check_max_redelivery_records(max_redelivery_records)
        if not isinstance(persist_delivery_count_before_delivery, bool):
            raise ConfigError("persist_delivery_count_before_delivery", persist_delivery_count_before_delivery,
                              "must be True or False")
        if not isinstance(strict_delivery_sync, bool):
            raise ConfigError("strict_delivery_sync", strict_delivery_sync, "must be True or False")
        if strict_delivery_sync and not persist_delivery_count_before_delivery:
            raise ConfigError("strict_delivery_sync", strict_delivery_sync,
                              "only applies with persist_delivery_count_before_delivery=True")
        self.directory = os.fspath(directory)
        self.backend = backend
        self.read_only = bool(read_only)
        self.max_redelivery_records = max_redelivery_records
        self.persist_delivery_count_before_delivery = persist_delivery_count_before_delivery
        self.strict_delivery_sync = strict_delivery_sync
        self.sync_mode = SyncMode.named(sync)
        self._clock = clock
        options = dict(min_files=min_files, sync=sync, buffer_timeout_us=buffer_timeout_us,
                       buffer_size=buffer_size, compact_min_files=compact_min_files,
                       compact_percentage=compact_percentage, read_only=self.read_only)
        if self.read_only:
            if not os.path.isdir(self.directory):
                raise JournalIOError(f"no message store at {self.directory}", errno=errno.ENOENT,
                                     path=self.directory, hint="check the path; read_only=True creates nothing")
            self._directory_lock = None
        else:
            os.makedirs(self.directory, exist_ok=True)
            # one lock for the whole directory, whatever the backend, taken before messages/ and
            # bindings/ exist: of two stores started at once (one per backend) one is refused, and it
            # leaves the directory as the other makes it
            self._directory_lock = DirectoryLock(self.directory, None, "MessageStore")
        try:
            self._open_record_stores(backend, file_size, options)
        except BaseException:
            self._release_directory()
            raise
        self._writer = _impl.RecordWriter(self._message_records, max_redelivery_records)
        self._records_sync = SyncMode.named(self._message_records.sync_mode)
        # its answer for a record, kept here: send() and acknowledge() apply SyncMode.record_waits inline,
        # a Python call there cost 500 instructions a message (callgrind), as the compiled core keeps it in C
        self._records_wait = self._records_sync.records_wait
        self._lock = threading.Lock()          # the Python-side bookkeeping below; the writer needs none
        self._shadow: DeliveryShadow | None = None     # strict mode: dispatch counts in shared memory
        # the journal's appended_bytes after the last reference added: a count put in the shadow must
        # not outlive a killed process whose reference was still in the write buffer
        self._referenced_upto = 0
        self._queues: dict[int, StoredQueue] = {}
        self._message_queues = MessageQueues()     # live message id -> queue ids of its live references
        self._duplicate_id_records: set[int] = set()   # record ids of the live DUPLICATE_ID entries
        self._id_counter_stored = False             # the bindings journal holds an ID counter record
        self._state = "new"

    def _open_record_stores(self, backend: str, file_size: int, options: dict) -> None:
        """``messages/`` and ``bindings/``, each a record store of `backend` (the directory is locked);
        the bindings' files are kept small (a backend without files ignores ``file_size``)."""
        messages = os.path.join(self.directory, MESSAGES_DIRECTORY)
        bindings = os.path.join(self.directory, BINDINGS_DIRECTORY)
        self._message_records = open_record_store(backend, messages, replaceable_types=REPLACEABLE_TYPES,
                                                  file_size=file_size, **options)
        try:
            self._bindings = open_record_store(backend, bindings, file_size=min(file_size, BINDINGS_FILE_SIZE_MAX_BYTES),
                                               **options)
        except BaseException:
            self._message_records.close()
            raise

    def _release_directory(self) -> None:
        if self._directory_lock is not None:
            self._directory_lock.release()
            self._directory_lock = None

    # ----- life cycle ----------------------------------------------------------------------------------
    def __enter__(self) -> "MessageStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"MessageStore({self.directory!r}, max_redelivery_records={self.max_redelivery_records}, "
                f"persist_delivery_count_before_delivery={self.persist_delivery_count_before_delivery}, "
                f"state={self._state})")

    def close(self) -> None:
        """Sync and close both journals; the store can be opened again with MessageStore(directory)."""
        if self._state == "closed":
            return
        self._state = "closed"
        durable = False
        try:
            self._message_records.close()
            durable = self._message_records.durable_bytes >= self._message_records.appended_bytes   # its final sync worked
        finally:
            try:
                self._bindings.close()
            finally:
                if self._shadow is not None:
                    self._writer.detach_shadow()
                    self._shadow.close(void=durable)    # the journal holds every count durably now
                self._writer.clear()
                self._message_queues = MessageQueues()     # a table per message: freed now, not by the collector
                self._release_directory()

    def check_loaded(self) -> None:
        """JournalClosedError unless the store is open and loaded (what every write and read needs)."""
        if self._state != "loaded":
            raise JournalClosedError("the message store is closed" if self._state == "closed"
                                     else "the message store is not loaded; call load() after opening")

    def _now_ms(self) -> int:
        return self._clock.now_ms() if self._clock is not None else _wall_clock_ms()

    @staticmethod
    def _wait(journal: RecordStore, sync) -> None:
        """Wait for durability when asked, or when the journal's mode has a record wait."""
        if SyncMode.named(journal.sync_mode).record_waits(sync):
            journal.sync()

    def _settle_bindings(self, sync: bool) -> None:
        """A bindings write made durable when `sync`, else written out: never left in this process
        alone, where a killed process would lose it under messages the journal wrote out."""
        if sync:
            self._bindings.sync()
        else:
            self._bindings.flush()

    # ----- recovery -------------------------------------------------------------------------------------
    def load(self, *, now_ms: int | None = None, skip_corrupt: bool = False) -> RecoveredState:
        """Recover queues, messages and every live reference's delivery count and scheduled time.

        Runs once, after opening. Odd records (an ack of a reference that is not live, a
        reference to an unknown queue, ...) are reported in `.anomalies`, never fatal. A
        message body that does not decode raises CorruptRecordError naming the record, or with
        skip_corrupt=True is left in the journal and listed in `.corrupt_messages`. Messages
        with no live reference are deleted, as Artemis does.
        """
        if self._state != "new":
            raise JournalError("load() runs once, right after opening" if self._state == "loaded"
                               else "the message store is closed")
        now = self._now_ms() if now_ms is None else now_ms
        state = RecoveredState()
        bindings_path = self._bindings.directory
        messages_path = self._message_records.directory
        bindings = self._bindings.load()
        state.reports["bindings"] = bindings.report
        for queue_id, rec in bindings.records.items():
            if queue_id == ID_COUNTER_RECORD_ID and rec.record_type == RecordType.ID_COUNTER:
                last = rec.updates[-1][1] if rec.updates else rec.body      # (record type, body)
                state.message_id_floor = decode_id_counter(last, record_id=queue_id, path=bindings_path)
                self._id_counter_stored = True
                continue
            state.max_queue_id = max(state.max_queue_id, queue_id)
            if rec.record_type != RecordType.QUEUE_BINDING_RECORD:
                state.anomalies.append(f"bindings record {queue_id} has type {rec.record_type}, not a queue "
                                       f"binding ({int(RecordType.QUEUE_BINDING_RECORD)}); ignored")
                continue
            if rec.updates:
                state.anomalies.append(f"queue {queue_id} has {len(rec.updates)} updates; queue bindings "
                                       "are never updated; ignored")
            state.queues[queue_id] = decode_queue(queue_id, rec.body, path=bindings_path)
            state.references[queue_id] = []
        if bindings.prepared:
            state.anomalies.append(f"{len(bindings.prepared)} prepared transactions in the bindings journal; "
                                   "the store writes none; left as they are")

        # an inspection keeps owned bytes: beside a live writer, which may recycle a compacted file
        # under a view, a view would read the file's next life
        loaded = self._message_records.load(copy=self.read_only)
        state.reports["messages"] = loaded.report
        if loaded.prepared:
            state.anomalies.append(f"{len(loaded.prepared)} prepared transactions in the message journal; "
                                   "the store writes none; left as they are")
        shadow_path = os.path.join(self.directory, SHADOW_FILE_NAME)
        this_boot = shadow_boot_id()
        shadow_counts = read_shadow_counts(shadow_path, this_boot) if this_boot is not None else {}
        # every rule of replaying references is the compiled pass's (and its twin's): one call
        recovery = _impl.recover_messages(loaded.records, state.queues, now, shadow_counts, messages_path)
        if recovery.corrupt and not skip_corrupt:
            raise recovery.corrupt[0]
        state.corrupt_messages = list(recovery.corrupt)
        state.anomalies.extend(recovery.anomalies)
        unreferenced, from_shadow = recovery.unreferenced, recovery.from_shadow
        state.max_message_id = recovery.max_record_id
        self._recover_duplicate_ids(state, recovery.duplicate_ids, messages_path, skip_corrupt)
        state.messages = RecoveredMessages(recovery.bodies, messages_path)
        for queue_id, columns in recovery.references.items():
            state.references[queue_id] = RecoveredReferences(columns)
        restored = []           # (queue id, message id, count) on queues the bindings journal does not hold
        for queue_id, message_id, journal_count, count, scheduled_ms in recovery.unknown_references:
            state.unknown_queue_references.setdefault(queue_id, []).append(
                RecoveredReference(message_id, count, scheduled_ms))
            restored.append((queue_id, message_id, journal_count))
        self._message_queues = MessageQueues(recovery.one_queue, recovery.several_queues)
        if not self.read_only:
            self._message_records.add_pin_releaser(_pin_releaser(recovery.bodies))
        restored_batches = [(queue_id, columns.message_ids, columns.delivery_counts)
                            for queue_id, columns in recovery.references.items() if len(columns)]
        if state.unknown_queue_references:
            # the id of a queue whose binding is gone while references on it live (a process killed in
            # sync mode "none" before its bindings journal was written, when the message journal had
            # been) stays taken: a queue created later with that id would adopt those references at
            # the next load, messages never sent to it
            state.max_queue_id = max(state.max_queue_id, max(state.unknown_queue_references))
        self._queues = dict(state.queues)
        if self.read_only:      # an inspection: what a writing load would do is reported, not done
            self._state = "loaded"
            _recover_shadow_counts(recovery)
            state.counts_from_shadow = len(from_shadow)
            return state
        self._writer.reserve_references(len(restored))
        for queue_id, message_id, count in restored:
            self._writer.add_reference(queue_id, message_id, count)
        for queue_id, message_ids, counts in restored_batches:
            # the journal's counts; a queue's rising ids are held as they lie, not put into a table
            self._writer.add_references(queue_id, message_ids, counts)
        _recover_shadow_counts(recovery)
        self._state = "loaded"
        for queue_id, _row, message_id, count in from_shadow:  # into the journal, durably, before the
            self._writer.update_delivery_count(queue_id, message_id, count, False)     # shadow starts over
        if from_shadow:
            self._message_records.sync()
        state.counts_from_shadow = len(from_shadow)
        if self.persist_delivery_count_before_delivery and not self.strict_delivery_sync and this_boot is not None:
            try:
                self._shadow = DeliveryShadow(shadow_path, self._message_records.flush, this_boot=this_boot)
            except OSError as exc:      # no room (StoreFullError), or no shared mappings on this file system
                log.warning("no delivery-count shadow (%s): each dispatch writes the journal out instead", exc)
            else:
                self._writer.attach_shadow(self._shadow)
        else:
            void_shadow(shadow_path)
        for message_id in unreferenced:
            self._message_records.delete(message_id, sync=False)
        if unreferenced:
            self._wait(self._message_records, None)
        state.deleted_messages = unreferenced
        return state

    def _recover_duplicate_ids(self, state: RecoveredState, records: list, path, skip_corrupt: bool) -> None:
        """The DUPLICATE_ID entries recovery set apart, decoded into ``state.duplicate_ids`` (a malformed
        one is CorruptRecordError, or with skip_corrupt listed in ``corrupt_messages`` and left)."""
        for record_id, body in records:
            try:
                address, duplicate_id = decode_duplicate_id(record_id, body, path=path)
            except JournalError as error:
                if not skip_corrupt:
                    raise
                state.corrupt_messages.append(error)
                continue
            state.duplicate_ids.append(DuplicateIdEntry(record_id, address, duplicate_id))
            self._duplicate_id_records.add(record_id)

    # ----- duplicate ids -----------------------------------------------------------------------------------
    def _duplicate_id_records_of(self, entry: DuplicateIdEntry, replaces: int | None) -> list:
        """The group records of a cache entry: its ADD, and the DELETE of the entry it replaces in the
        ring (when that one is stored). Lock held."""
        _refuse_stored("record", entry.record_id, self._duplicate_id_records, self._message_queues)
        records = [(_ADD, entry.record_id, _DUPLICATE_ID, encode_duplicate_id(entry.address, entry.duplicate_id))]
        if replaces is not None and replaces in self._duplicate_id_records:
            records.append((_DELETE, replaces, 0, b""))
        return records

    def _duplicate_id_written(self, entry: DuplicateIdEntry, replaces: int | None) -> None:
        self._duplicate_id_records.add(entry.record_id)
        self._duplicate_id_records.discard(replaces)

    def store_duplicate_id(self, entry: DuplicateIdEntry, *, replaces: int | None = None,
                           sync: bool | None = None) -> None:
        """A duplicate-id cache entry whose message stores nothing (not durable, or no durable queue
        took it), and the DELETE of ``replaces``, the entry the ring overwrites, as one record group."""
        self.check_loaded()
        records = self._message_records
        with self._lock:
            records.append_group(self._duplicate_id_records_of(entry, replaces), sync=False)
            self._duplicate_id_written(entry, replaces)
        self._wait(records, sync)

    def forget_duplicate_ids(self, record_ids, *, sync: bool | None = None) -> None:
        """DELETE of cache entries no ring holds any more (a broker's load finds them when its cache
        was made smaller, or a crash came between an entry and the DELETE of the one it replaced)."""
        self.check_loaded()
        records = self._message_records
        with self._lock:
            stored = [record_id for record_id in dict.fromkeys(record_ids) if record_id in self._duplicate_id_records]
            if not stored:
                return
            records.append_group([(_DELETE, record_id, 0, b"") for record_id in stored], sync=False)
            self._duplicate_id_records.difference_update(stored)
        self._wait(records, sync)

    def duplicate_id_count(self) -> int:
        """How many DUPLICATE_ID entries are live."""
        return len(self._duplicate_id_records)

    # ----- queues ------------------------------------------------------------------------------------------
    def store_queue(self, queue_id: int, name: str, address: str, *, routing_type: str = "anycast",
                    filter: str | None = None, arguments: dict | None = None, auto_created: bool = False,
                    auto_delete: tuple[int, int] | None = None, sync: bool | None = None) -> None:
        """Record a durable queue binding (type 21), with its queue-declare ``arguments`` if any, whether the
        broker made it (``auto_created``) and its auto-delete rule ((delay ms, message count), or None). Waits
        for the disk unless sync=False or sync="none"; written out to the operating system at once
        either way, so that a killed process never keeps messages sent to the queue and loses the
        queue (the message journal writes out, and syncs a full file, on its own schedule)."""
        self.check_loaded()
        if queue_id == ID_COUNTER_RECORD_ID:
            raise ValueError(f"queue id {queue_id} is the bindings journal's ID counter; queues take ids below it")
        body = encode_queue(name, address, routing_type=routing_type, filter=filter, arguments=arguments,
                            auto_created=auto_created, auto_delete=auto_delete)
        with self._lock:
            _refuse_stored("queue", queue_id, self._queues)
            self._bindings.add(queue_id, RecordType.QUEUE_BINDING_RECORD, body, sync=False)
            self._queues[queue_id] = StoredQueue(queue_id, name, address, routing_type, filter, arguments or None,
                                                 auto_created, auto_delete)
        self._settle_bindings(self.sync_mode.boundary_waits(sync))

    def reserve_message_ids(self, below: int) -> None:
        """Record that message ids below ``below`` may be handed out (the ID counter of the bindings
        journal, type 24, as Artemis's BatchingIDGenerator keeps it), so that no restart hands out
        one of them again, also after the messages that had them are deleted and compacted away.
        Durable when it returns, unless the sync mode is "none" (then written out)."""
        self.check_loaded()
        body = encode_id_counter(below)
        with self._lock:
            if self._id_counter_stored:
                self._bindings.update(ID_COUNTER_RECORD_ID, RecordType.ID_COUNTER, body, sync=False)
            else:
                self._bindings.add(ID_COUNTER_RECORD_ID, RecordType.ID_COUNTER, body, sync=False)
                self._id_counter_stored = True
        self._settle_bindings(self.sync_mode.boundaries_wait)

    def update_queue_arguments(self, queue_id: int, arguments: dict | None, *, sync: bool | None = None) -> None:
        """Replace a stored queue's queue-declare ``arguments`` (None or {}: none). The binding is
        rewritten in one bindings transaction (its delete and its new add), so a crash leaves the old
        binding or the new one, never none."""
        self.check_loaded()
        with self._lock:
            stored = self._queues.get(queue_id)
            if stored is None:
                raise UnknownRecordError(f"queue {queue_id} is not stored")
            body = encode_queue(stored.name, stored.address, routing_type=stored.routing_type,
                                filter=stored.filter, arguments=arguments, auto_created=stored.auto_created,
                                auto_delete=stored.auto_delete)
            tx_id = queue_id       # one rewrite of a queue at a time (the lock); committed at once
            self._bindings.delete_tx(tx_id, queue_id)
            self._bindings.add_tx(tx_id, queue_id, RecordType.QUEUE_BINDING_RECORD, body)
            self._bindings.commit(tx_id, sync=False)
            self._queues[queue_id] = replaced(stored, arguments=dict(arguments) if arguments else None)
        self._wait(self._bindings, self.sync_mode.boundary_waits(sync))

    def delete_queue(self, queue_id: int, *, sync: bool | None = None) -> int:
        """Remove a queue binding, acknowledging its live references first (messages left without
        any reference are deleted). Returns how many references were acknowledged."""
        self.check_loaded()
        with self._lock:
            if queue_id not in self._queues:
                raise UnknownRecordError(f"queue {queue_id} is not stored")
            acked = 0
            for message_id, queue_ids in self._message_queues.items():
                if queue_id in queue_ids:
                    acked += 1
                    if not self._acknowledge_locked(queue_id, message_id):
                        self._delete_locked(message_id)
            self._bindings.delete(queue_id, sync=False)
            del self._queues[queue_id]
        if acked:
            self._wait(self._message_records, sync)
        self._wait(self._bindings, self.sync_mode.boundary_waits(sync))
        return acked

    def queues(self) -> dict:
        """Queue id -> StoredQueue of the stored queues."""
        with self._lock:
            return dict(self._queues)

    # ----- messages and references ----------------------------------------------------------------------
    def store_message(self, message_id: int, address: str, body, *, properties: dict | None = None,
                      durable: bool = True, expiration: int = 0, routing_type: str | None = None,
                      sync: bool | None = None, priority: int = PRIORITY_DEFAULT) -> None:
        """Record a message (ADD_MESSAGE, 45). A broker following Artemis stores durable messages only."""
        self.check_loaded()
        data = encode_message(address, body, properties=properties, durable=durable, expiration=expiration,
                              routing_type=routing_type, priority=priority)
        with self._lock:
            _refuse_stored("message", message_id, self._message_queues)
            self._message_records.add(message_id, RecordType.ADD_MESSAGE, data, sync=False)
            self._message_queues.add_message(message_id)
        self._wait(self._message_records, sync)

    def store_reference(self, queue_id: int, message_id: int, *, sync: bool | None = None) -> None:
        """Record that a queue holds the message (ADD_REF, 32); its delivery count starts at 0."""
        self.check_loaded()
        with self._lock:
            if queue_id not in self._queues:
                raise UnknownRecordError(f"queue {queue_id} is not stored; store_queue() it first")
            if message_id not in self._message_queues:
                raise UnknownRecordError(f"message {message_id} is not stored; store_message() it first")
            if self._message_queues.holds(message_id, queue_id):
                raise DuplicateRecordError(f"message {message_id} already has a live reference on queue {queue_id}")
            self._message_records.update(message_id, RecordType.ADD_REF, encode_queue_id(queue_id), sync=False)
            self._writer.add_reference(queue_id, message_id, 0)
            self._message_queues.add(message_id, queue_id)
            self._referenced_upto = self._message_records.appended_bytes
        self._wait(self._message_records, sync)

    def store_acknowledge(self, queue_id: int, message_id: int, *, sync: bool | None = None) -> None:
        """Record an acknowledgement (ACKNOWLEDGE_REF, 33); the reference is no longer live.
        The message stays until delete_message() (Artemis deletes it when no reference is left)."""
        self.check_loaded()
        with self._lock:
            self._acknowledge_locked(queue_id, message_id)
        self._wait(self._message_records, sync)

    def _acknowledge_locked(self, queue_id: int, message_id: int) -> int:
        """ACKNOWLEDGE_REF of a live reference; how many live references the message has left."""
        if not self._message_queues.holds(message_id, queue_id):
            raise UnknownRecordError(f"no live reference of message {message_id} on queue {queue_id}")
        self._message_records.update(message_id, RecordType.ACKNOWLEDGE_REF, encode_queue_id(queue_id), sync=False)
        self._writer.remove_reference(queue_id, message_id)
        return self._message_queues.remove(message_id, queue_id)

    def delete_message(self, message_id: int, *, sync: bool | None = None) -> None:
        """Delete a message and whatever references it still has (Artemis: not synced)."""
        self.check_loaded()
        with self._lock:
            self._delete_locked(message_id)
        self._wait(self._message_records, sync)

    def _delete_locked(self, message_id: int) -> None:
        queue_ids = self._message_queues.queues(message_id)
        if queue_ids is None:
            raise UnknownRecordError(f"message {message_id} is not stored")
        self._message_records.delete(message_id, sync=False)
        for queue_id in queue_ids:
            self._writer.remove_reference(queue_id, message_id)
        self._message_queues.delete(message_id)

    def has_message(self, message_id: int) -> bool:
        """Whether the message is stored and not deleted (with or without live references)."""
        return message_id in self._message_queues

    def reference_queues(self, message_id: int) -> set:
        """The queue ids holding a live reference of the message."""
        with self._lock:
            queue_ids = self._message_queues.queues(message_id)
            if queue_ids is None:
                raise UnknownRecordError(f"message {message_id} is not stored")
            return set(queue_ids)

    # ----- delivery counts and scheduled times (the compiled writers) -----------------------------------
    def update_delivery_count(self, queue_id: int, message_id: int, delivery_count: int, *,
                              sync: bool | None = None) -> bool:
        """Persist a reference's delivery count (UPDATE_DELIVERY_COUNT, 34), as Artemis on a
        cancel/rollback: False (nothing written) when the count equals the last persisted one or
        max_redelivery_records >= 0 and the count exceeds it."""
        if self._state != "loaded":
            self.check_loaded()
        return self._writer.update_delivery_count(queue_id, message_id, delivery_count, sync)

    def update_delivery_count_after_cancel(self, queue_id: int, message_id: int, delivery_count: int) -> bool:
        """Persist a count lowered because a delivery was handed back without failing (a consumer or
        session closed: Artemis's cancelRefs, then checkRedelivery), as update_delivery_count: nothing
        when it equals the persisted one or is above the cap. With persist_delivery_count_before_delivery
        the dispatch's count had reached the operating system, so the lowered one does too (as
        before_delivery, a later entry of the delivery-count shadow included), or recovery would raise
        the count back. True if a record was written."""
        if self.persist_delivery_count_before_delivery:
            return self.before_delivery(queue_id, message_id, delivery_count)
        return self.update_delivery_count(queue_id, message_id, delivery_count)

    def update_scheduled_delivery_time(self, queue_id: int, message_id: int, scheduled_ms: int,
                                       delivery_count: int, *, sync: bool | None = None) -> bool:
        """Persist a reference's scheduled redelivery time (SET_SCHEDULED_DELIVERY_TIME, 36, absolute
        epoch ms): False when max_redelivery_records >= 0 and delivery_count exceeds it."""
        if self._state != "loaded":
            self.check_loaded()
        return self._writer.update_scheduled_delivery_time(queue_id, message_id, scheduled_ms, delivery_count,
                                                           sync)

    def update_redelivery(self, queue_id: int, message_id: int, delivery_count: int, scheduled_ms: int, *,
                          sync: bool | None = None) -> int:
        """A rollback that schedules its redelivery: update_delivery_count and
        update_scheduled_delivery_time (each under its rule) written as one group, so a crash keeps
        both records or neither. Returns how many were written (0..2)."""
        if self._state != "loaded":
            self.check_loaded()
        return self._writer.update_redelivery(queue_id, message_id, delivery_count, scheduled_ms, sync)

    def update_delivery_counts(self, queue_ids, message_ids, delivery_counts, *, sync: bool | None = None) -> int:
        """Batch of update_delivery_count (sequences or arrays of equal length); one wait at the end.
        Every reference is checked first, so an unknown one writes nothing. Returns records written."""
        self.check_loaded()
        return self._writer.update_delivery_counts(queue_ids, message_ids, delivery_counts, sync)

    def update_scheduled_delivery_times(self, queue_ids, message_ids, scheduled_times, delivery_counts, *,
                                        sync: bool | None = None) -> int:
        """Batch of update_scheduled_delivery_time; returns records written."""
        self.check_loaded()
        return self._writer.update_scheduled_delivery_times(queue_ids, message_ids, scheduled_times,
                                                            delivery_counts, sync)

    def before_delivery(self, queue_id: int, message_id: int, delivery_count: int) -> bool:
        """Call at dispatch, after incrementing the count and before handing the message out.

        With persist_delivery_count_before_delivery the count record (capped and deduplicated as
        update_delivery_count) is appended, and the count reaches the operating system before this
        returns, so a killed process loses nothing: as an entry of the delivery-count shadow (a
        shared mapping, message_store/delivery_shadow.py; no system call, except one write-out when a
        reference added since the last write-out is still in the buffer), or where the system has no boot
        id, by writing the journal out. With strict_delivery_sync the record is on disk instead (a
        shared group-commit fdatasync), so a power cut loses nothing either. Without the option it
        does nothing. Returns True if a record was written.
        """
        if not self.persist_delivery_count_before_delivery:
            return False
        if self._state != "loaded":
            self.check_loaded()
        cap = self.max_redelivery_records
        if cap >= 0 and delivery_count > cap:
            return False          # Artemis writes nothing above the cap, so there is nothing to wait for
        if self._shadow is not None:        # the count into the shadow's page cache: no system call
            if self._message_records.written_bytes < self._referenced_upto:
                # ...unless a reference added since the last write-out is still in this process's
                # buffer: a killed process would lose the message it counts, delivered or not
                self._message_records.flush()
            return self._writer.record_dispatch(queue_id, message_id, delivery_count)
        written = self._writer.update_delivery_count(queue_id, message_id, delivery_count, False)
        # also when unchanged: the record that persisted this count may still be in the write buffer
        if self.strict_delivery_sync:
            self._message_records.sync()
        else:
            self._message_records.flush()
        return written

    def before_delivery_batch(self, queue_ids, message_ids, delivery_counts) -> int:
        """before_delivery for many references at once: one write-out (or one sync) for the batch."""
        if not self.persist_delivery_count_before_delivery:
            return 0
        self.check_loaded()
        written = self._writer.update_delivery_counts(queue_ids, message_ids, delivery_counts, False)
        if self.strict_delivery_sync:
            self._message_records.sync()
        else:
            self._message_records.flush()       # one write for the batch: the shadow would not save much here
        return written

    def persisted_delivery_count(self, queue_id: int, message_id: int) -> int:
        """The reference's last persisted delivery count (restored at load, then kept by the writers)."""
        self.check_loaded()
        return self._writer.persisted_count(queue_id, message_id)

    # ----- the asyncio face ---------------------------------------------------------------------------
    # Each write below happens at once (as its synchronous form with sync=False), then the coroutine
    # waits, without blocking its event loop, until it is durable: the journal's flusher resolves the
    # waiting coroutines of each loop with one hand-over per sync (storage/journal/durable_futures.py). On the
    # LMDB backend the wait runs sync() on the loop's default executor instead.
    async def sync_async(self) -> None:
        """``sync()`` for coroutines: returns once everything written before the call is durable."""
        self.check_loaded()
        await self._bindings.sync_async()       # as sync(): no reference durable before its queue
        await self._message_records.sync_async()

    async def store_message_references_async(self, message_id: int, address: str, body, queue_ids,
                                             **options) -> None:
        """``store_message_references()``, returning once the message and its references are durable."""
        self.store_message_references(message_id, address, body, queue_ids, sync=False, **options)
        await self._message_records.sync_async()

    async def acknowledge_async(self, queue_id: int, message_id: int) -> bool:
        """``acknowledge()``, returning once the acknowledgement is durable."""
        deleted = self.acknowledge(queue_id, message_id, sync=False)
        await self._message_records.sync_async()
        return deleted

    async def update_redelivery_async(self, queue_id: int, message_id: int, delivery_count: int,
                                      scheduled_ms: int) -> int:
        """``update_redelivery()``, returning once its records are durable."""
        written = self.update_redelivery(queue_id, message_id, delivery_count, scheduled_ms, sync=False)
        await self._message_records.sync_async()
        return written

    # ----- durability and inspection -------------------------------------------------------------------
    def sync(self) -> None:
        """Return once everything written before the call is durable (both journals): the bindings
        first, so that no reference becomes durable before the queue it names."""
        self.check_loaded()
        self._bindings.sync()
        self._message_records.sync()

    def flush(self) -> None:
        """Return once everything written before the call survives a killed process (not a power cut)."""
        self.check_loaded()
        self._bindings.flush()
        self._message_records.flush()

    def compact(self) -> None:
        """Compact the message journal now: only the latest 34 and 36 per reference survive."""
        self.check_loaded()
        self._message_records.compact()

    def record_count(self, record_type: int) -> int:
        """Records of a user record type (34, 36, ...) held for live records and not yet compacted away
        (type 21 counts queue bindings). Reads the journal files: for inspection and tests."""
        self.check_loaded()
        journal = self._bindings if record_type == RecordType.QUEUE_BINDING_RECORD else self._message_records
        return journal.record_type_counts().get(int(record_type), 0)

    def stats(self) -> dict:
        """Counters for inspection: the store's queues, messages and references and each record
        store's own ``stats()``. JournalClosedError unless loaded."""
        self.check_loaded()
        return {
            "directory": self.directory,
            "backend": self.backend,
            "max_redelivery_records": self.max_redelivery_records,
            "persist_delivery_count_before_delivery": self.persist_delivery_count_before_delivery,
            "strict_delivery_sync": self.strict_delivery_sync,
            "queues": len(self._queues),
            "messages": len(self._message_queues),
            "live_references": len(self._writer),
            "delivery_count_records_written": self._writer.delivery_count_records_written,
            "scheduled_time_records_written": self._writer.scheduled_time_records_written,
            "messages_journal": self._message_records.stats(),
            "bindings_journal": self._bindings.stats(),
        }

    # ----- transactions (added for the broker: dead-letter moves, transacted sessions) --------------------
    def transaction(self) -> "StoreTransaction":
        """Start a journal transaction: its records become visible together at commit(), or never.

        Artemis writes a dead-letter move this way (the copy ADD_TX 45, an UPDATE_TX 32 per queue of
        the dead-letter address, UPDATE_TX 33 for the original, COMMIT) and so does a transacted
        session. Nothing is written until the first record; an empty transaction touches no file.
        """
        self.check_loaded()
        return StoreTransaction(self, next(_TRANSACTION_IDS))

    # ----- the broker's hot path: one call (one lock, one encode) per send and per acknowledgement ----------
    def store_message_references(self, message_id: int, address: str, body, queue_ids, *,
                                 properties: dict | None = None, durable: bool = True, expiration: int = 0,
                                 routing_type: str | None = None, sync: bool | None = None,
                                 duplicate_id: DuplicateIdEntry | None = None, replaces: int | None = None,
                                 priority: int = PRIORITY_DEFAULT) -> None:
        """store_message + store_reference on each of ``queue_ids``, as one call: the same records
        (ADD_MESSAGE 45, then an ADD_REF 32 per queue) for a fraction of the Python overhead. Every
        queue is checked before anything is written. ``duplicate_id``: the message's duplicate-id cache
        entry (37), in the same record group, with the DELETE of ``replaces`` (the entry the ring
        overwrites): a crash keeps the message and its id together or neither."""
        if self._state != "loaded":
            self.check_loaded()
        head = None     # the message record's bytes before the body, when it has no properties
        if (not properties and type(body) is bytes and type(expiration) is int and expiration == 0
                and priority == PRIORITY_DEFAULT):      # cached path
            head = cached_message_head(address, durable, routing_type)
        data = None
        if head is None:
            data = encode_plain_message(address, body, properties, durable, expiration, routing_type, priority)
        records = self._message_records
        lock = self._lock
        lock.acquire()      # not `with`: on this hot path the with-statement costs twice acquire+release
        try:
            message_queues = self._message_queues
            if message_id in message_queues:    # tested here: a call per send would cost the hot path
                _refuse_stored("message", message_id, message_queues)
            if len(queue_ids) == 1 and duplicate_id is None:
                queue_id = queue_ids[0]
                if queue_id not in self._queues:
                    raise UnknownRecordError(f"queue {queue_id} is not stored; store_queue() it first")
                try:
                    if head is not None:       # 45 + 32 in one compiled call, the record assembled there
                        self._writer.store_message_reference(message_id, queue_id, head, body)
                    else:
                        self._writer.store_message_reference(message_id, queue_id, data)
                except BaseException:
                    if records.is_live(message_id):
                        message_queues.add_message(message_id)    # the message record went in, its reference not
                    raise
                message_queues.add_message_on(message_id, queue_id)
                self._referenced_upto = records.appended_bytes
            else:
                stored_queues = self._queues
                for queue_id in queue_ids:
                    if queue_id not in stored_queues:
                        raise UnknownRecordError(f"queue {queue_id} is not stored; store_queue() it first")
                references = set(queue_ids)
                if len(references) != len(queue_ids):
                    raise DuplicateRecordError(f"queue_ids {list(queue_ids)} names a queue twice")
                if data is None:
                    data = encode_plain_message(address, body, properties, durable, expiration, routing_type,
                                                priority)
                # the message and its references as one group: a crash keeps the send whole or not at all
                group = [(_ADD, message_id, _ADD_MESSAGE, data)] + [(_UPDATE, message_id, _ADD_REF, _QUEUE_ID_BYTES(queue_id))
                                                                    for queue_id in queue_ids]
                if duplicate_id is not None:
                    group += self._duplicate_id_records_of(duplicate_id, replaces)
                records.append_group(group, sync=False)
                if duplicate_id is not None:
                    self._duplicate_id_written(duplicate_id, replaces)
                message_queues.add_message(message_id, list(queue_ids))
                writer = self._writer
                for queue_id in queue_ids:
                    writer.add_reference(queue_id, message_id, 0)
                self._referenced_upto = records.appended_bytes
        finally:
            lock.release()
        if sync or (sync is None and self._records_wait):     # SyncMode.record_waits
            records.sync()

    def commit_transaction(self, tx_id: int, messages, references, acknowledgements, duplicate_ids=()) -> None:
        """A StoreTransaction's COMMIT appended, and what it makes true in this store's books: its messages
        stored, its references live (`references`: (queue id, message id) pairs), its acknowledged
        references gone, its duplicate-id entries (``(entry, replaces)``) stored. The caller then settles
        the boundary's sync (``end_transaction``)."""
        records = self._message_records
        with self._lock:
            records.commit(tx_id, sync=False)
            for entry, replaces in duplicate_ids:
                self._duplicate_id_written(entry, replaces)
            for message_id in messages:
                self._message_queues.add_message(message_id)
            for queue_id, message_id in references:
                self._writer.add_reference(queue_id, message_id, 0)
                self._message_queues.add(message_id, queue_id)
            if references:
                self._referenced_upto = records.appended_bytes
            for queue_id, message_id in acknowledgements:
                self._writer.remove_reference(queue_id, message_id)
                self._message_queues.remove(message_id, queue_id)

    # ----- a StoreTransaction's records, checked against this store's books under its lock ---------------
    def append_message_tx(self, tx_id: int, message_id: int, data: bytes, pending_messages: set) -> None:
        """ADD_TX of an encoded message (45) for a StoreTransaction, the message then among
        ``pending_messages`` (the transaction's own); DuplicateRecordError when it is stored or pending."""
        with self._lock:
            _refuse_stored("message", message_id, self._message_queues, pending_messages)
            self._message_records.add_tx(tx_id, message_id, RecordType.ADD_MESSAGE, data)
            pending_messages.add(message_id)

    def append_reference_tx(self, tx_id: int, queue_id: int, message_id: int, pending_messages: set,
                            pending_references: dict) -> None:
        """UPDATE_TX ADD_REF (32) for a StoreTransaction, the reference then among ``pending_references``:
        the queue must be stored, the message stored or pending, the reference neither live nor pending."""
        key = (queue_id, message_id)
        with self._lock:
            if queue_id not in self._queues:
                raise UnknownRecordError(f"queue {queue_id} is not stored; store_queue() it first")
            if message_id not in self._message_queues and message_id not in pending_messages:
                raise UnknownRecordError(f"message {message_id} is not stored; store_message() it first")
            if self._message_queues.holds(message_id, queue_id) or key in pending_references:
                raise DuplicateRecordError(f"message {message_id} already has a live reference on queue {queue_id}")
            self._message_records.update_tx(tx_id, message_id, RecordType.ADD_REF, encode_queue_id(queue_id))
            pending_references[key] = None

    def append_acknowledge_tx(self, tx_id: int, queue_id: int, message_id: int, pending_references: dict,
                              acknowledgements: dict) -> None:
        """UPDATE_TX ACKNOWLEDGE_REF (33) for a StoreTransaction of a reference live or pending in it, then
        among its ``acknowledgements``; DuplicateRecordError when the transaction acknowledged it already."""
        key = (queue_id, message_id)
        with self._lock:
            live = self._message_queues.holds(message_id, queue_id) or key in pending_references
            if not live:
                raise UnknownRecordError(f"no live reference of message {message_id} on queue {queue_id}")
            if key in acknowledgements:
                raise DuplicateRecordError(f"the reference of message {message_id} on queue {queue_id} is already "
                                           f"acknowledged in transaction {tx_id}")
            self._message_records.update_tx(tx_id, message_id, RecordType.ACKNOWLEDGE_REF, encode_queue_id(queue_id))
            acknowledgements[key] = None

    def append_scheduled_time_tx(self, tx_id: int, queue_id: int, message_id: int, scheduled_ms: int,
                                 pending_references: dict) -> None:
        """UPDATE_TX SET_SCHEDULED_DELIVERY_TIME (36) for a StoreTransaction, of a reference live or pending
        in it."""
        with self._lock:
            if not (self._message_queues.holds(message_id, queue_id) or (queue_id, message_id) in pending_references):
                raise UnknownRecordError(f"no live reference of message {message_id} on queue {queue_id}")
            self._message_records.update_tx(tx_id, message_id, RecordType.SET_SCHEDULED_DELIVERY_TIME,
                                    encode_scheduled_time(queue_id, scheduled_ms))

    def append_duplicate_id_tx(self, tx_id: int, entry: DuplicateIdEntry, replaces: int | None,
                               pending: list) -> int:
        """ADD_TX of a duplicate-id cache entry (37) for a StoreTransaction, with DELETE_TX of ``replaces``
        (the entry the ring overwrites) when it is stored and not already deleted in the transaction;
        then among ``pending``. How many records it appended."""
        with self._lock:
            written = self._duplicate_id_records_of(entry, replaces)
            if len(written) == 2 and any(replaces == other for _entry, other in pending):
                written.pop()
            records = self._message_records
            records.add_tx(tx_id, entry.record_id, _DUPLICATE_ID, written[0][3])
            if len(written) == 2:
                records.delete_tx(tx_id, replaces)
            pending.append((entry, replaces))
            return len(written)

    def rollback_transaction(self, tx_id: int) -> None:
        """A StoreTransaction's ROLLBACK appended (its records never touched the books)."""
        with self._lock:
            self._message_records.rollback(tx_id, sync=False)

    def end_transaction(self, sync: bool | None, *, committed: bool) -> None:
        """The sync of a transaction boundary: sync=None follows the journal's rule (a commit waits unless
        the mode is "none", a rollback only in "always"); True waits, False does not."""
        mode = self._records_sync
        if mode.boundary_waits(sync) if committed else mode.record_waits(sync):
            self._message_records.sync()

    def acknowledge(self, queue_id: int, message_id: int, *, sync: bool | None = None) -> bool:
        """store_acknowledge, then delete_message when it was the message's last live reference (what
        Artemis does on an acknowledgement: ACKNOWLEDGE_REF 33, then DELETE). True if it deleted."""
        if self._state != "loaded":
            self.check_loaded()
        records = self._message_records
        lock = self._lock
        lock.acquire()
        try:
            message_queues = self._message_queues
            queue_ids = message_queues.queues(message_id)
            if queue_ids is None or queue_id not in queue_ids:
                raise UnknownRecordError(f"no live reference of message {message_id} on queue {queue_id}")
            deleted = len(queue_ids) == 1
            self._writer.acknowledge_reference(queue_id, message_id, deleted)   # 33 (+ DELETE), compiled
            if deleted:
                message_queues.delete(message_id)
            else:
                message_queues.remove(message_id, queue_id)
        finally:
            lock.release()
        if sync or (sync is None and self._records_wait):     # SyncMode.record_waits
            records.sync()
        return deleted


_ADD, _UPDATE, _DELETE = RecordKind.ADD, RecordKind.UPDATE, RecordKind.DELETE
_ADD_MESSAGE = int(RecordType.ADD_MESSAGE)
_DUPLICATE_ID = int(RecordType.DUPLICATE_ID)
_ADD_REF = int(RecordType.ADD_REF)
_QUEUE_ID_BYTES = encode_queue_id


# Journal transaction ids: unique within the process and, started from the wall clock in ns, larger than
# any a previous run of the store could have used (it would need a transaction per nanosecond).
_TRANSACTION_IDS = itertools.count(time.time_ns())


class StoreTransaction:
    """Messages, references, acknowledgements and scheduled times written in one journal transaction.

    Each call appends its record at once (ADD_TX / UPDATE_TX, as Artemis does at send and ack time);
    the store's view of live references changes only at commit(). rollback() appends a ROLLBACK when
    anything was written. A transaction is used once.
    """

    __slots__ = ("store", "tx_id", "records", "state", "_messages", "_references", "_acknowledgements",
                 "_duplicate_ids")

    def __init__(self, store: MessageStore, tx_id: int) -> None:
        self.store = store
        self.tx_id = tx_id
        self.records = 0                    # records appended so far
        self.state = "open"                 # "open", "committed" or "rolled back"
        self._messages: set = set()         # message ids added in this transaction
        self._references: dict = {}         # (queue id, message id) -> None, in order
        self._acknowledgements: dict = {}   # (queue id, message id) -> None, in order
        self._duplicate_ids: list = []      # (DuplicateIdEntry, the record id it replaces or None)

    def __repr__(self) -> str:
        return f"StoreTransaction({self.tx_id}, records={self.records}, state={self.state})"

    def _check_open(self) -> None:
        if self.state != "open":
            raise JournalError(f"transaction {self.tx_id} is already {self.state}")
        self.store.check_loaded()

    def store_message(self, message_id: int, address: str, body, *, properties: dict | None = None,
                      durable: bool = True, expiration: int = 0, routing_type: str | None = None,
                      priority: int = PRIORITY_DEFAULT) -> None:
        """ADD_TX of a message (45)."""
        self._check_open()
        data = encode_message(address, body, properties=properties, durable=durable, expiration=expiration,
                              routing_type=routing_type, priority=priority)
        self.store.append_message_tx(self.tx_id, message_id, data, self._messages)
        self.records += 1

    def store_reference(self, queue_id: int, message_id: int) -> None:
        """UPDATE_TX ADD_REF (32): the queue holds the message once the transaction commits."""
        self._check_open()
        self.store.append_reference_tx(self.tx_id, queue_id, message_id, self._messages, self._references)
        self.records += 1

    def store_acknowledge(self, queue_id: int, message_id: int) -> None:
        """UPDATE_TX ACKNOWLEDGE_REF (33) of a live reference."""
        self._check_open()
        self.store.append_acknowledge_tx(self.tx_id, queue_id, message_id, self._references, self._acknowledgements)
        self.records += 1

    def update_scheduled_delivery_time(self, queue_id: int, message_id: int, scheduled_ms: int) -> None:
        """UPDATE_TX SET_SCHEDULED_DELIVERY_TIME (36) of a message sent with a delivery time. Artemis's
        transactional variant is not capped by max_redelivery_records."""
        self._check_open()
        self.store.append_scheduled_time_tx(self.tx_id, queue_id, message_id, scheduled_ms, self._references)
        self.records += 1

    def store_duplicate_id(self, entry: DuplicateIdEntry, *, replaces: int | None = None) -> None:
        """ADD_TX of a duplicate-id cache entry (37), and DELETE_TX of ``replaces``, the entry the ring
        overwrites: the id is stored when the transaction's messages are."""
        self._check_open()
        self.records += self.store.append_duplicate_id_tx(self.tx_id, entry, replaces, self._duplicate_ids)

    def commit(self, *, sync: bool | None = None) -> None:
        """Append COMMIT and apply the transaction to the store's live references.

        sync=None: the journal's rule for transaction boundaries (wait for the disk unless its mode
        is "none"); False: do not wait (a later sync() covers it, the journal keeps its order).
        """
        self._check_open()
        store = self.store
        if not self.records:
            self.state = "committed"
            return
        store.commit_transaction(self.tx_id, self._messages, self._references, self._acknowledgements,
                                 self._duplicate_ids)
        self.state = "committed"
        store.end_transaction(sync, committed=True)

    def rollback(self, *, sync: bool | None = None) -> None:
        """Forget the transaction; a ROLLBACK record is appended when anything was written."""
        self._check_open()
        store = self.store
        self.state = "rolled back"
        if not self.records:
            return
        store.rollback_transaction(self.tx_id)
        store.end_transaction(sync, committed=False)

    def __enter__(self) -> "StoreTransaction":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.state == "open":
            if exc_type is None:
                self.commit()
            else:
                self.rollback()
