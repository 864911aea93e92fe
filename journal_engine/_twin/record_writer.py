"""Python twin of the compiled record writer (pyx/journal_engine/_record_writer.pyx).

Writes the message store's hot records: a send (ADD_MESSAGE + ADD_REF), an acknowledgement
(ACKNOWLEDGE_REF, DELETE), and UPDATE_DELIVERY_COUNT (34) and SET_SCHEDULED_DELIVERY_TIME (36)
records as Artemis's AbstractJournalStorageManager does:

* a delivery-count record is skipped when the count equals the reference's last
  persisted count, or when ``max_redelivery_records >= 0`` and the count exceeds it;
* a scheduled-time record is skipped only by the cap (there is no "unchanged" rule).

It keeps every live reference's last persisted count. Both twins produce the same
journal bytes for the same calls (tests/store/test_message_store_parity.py).
"""
from __future__ import annotations

import struct
import threading

from ..errors import DuplicateRecordError, UnknownRecordError
from ..limits import U32_MAX, U64_MAX, check_max_redelivery_records, u32_array, u64_array
from ..storage.sync_mode import SyncMode
from ..record_format import DELIVERY_COUNT_BODY, QUEUE_ID_BODY, SCHEDULED_TIME_BODY, RecordKind, RecordType

ADD_MESSAGE = int(RecordType.ADD_MESSAGE)
ADD_REF = int(RecordType.ADD_REF)
ACKNOWLEDGE_REF = int(RecordType.ACKNOWLEDGE_REF)
UPDATE_DELIVERY_COUNT = int(RecordType.UPDATE_DELIVERY_COUNT)
SET_SCHEDULED_DELIVERY_TIME = int(RecordType.SET_SCHEDULED_DELIVERY_TIME)
_U32_MAX = U32_MAX
_U64_MAX = U64_MAX
_ADD, _UPDATE = RecordKind.ADD, RecordKind.UPDATE
_COUNT = DELIVERY_COUNT_BODY
_TIME = SCHEDULED_TIME_BODY
_QUEUE_ID = QUEUE_ID_BODY
_U32 = struct.Struct("<I")
_NO_PROPERTIES = _U32.pack(0)


def _check_u64(value: int, what: str) -> int:
    if not 0 <= value <= _U64_MAX:
        raise OverflowError(f"{what}={value} is out of range for a u64")
    return value


def _check_count(value: int) -> int:
    if not 0 <= value <= _U32_MAX:
        raise OverflowError(f"delivery_count={value} is out of range for a u32")
    return value


class RecordWriter:
    """The message store's record writer for one message journal: sends, acknowledgements, and the
    capped delivery-count and scheduled-time records."""

    def __init__(self, journal, max_redelivery_records: int = 10) -> None:
        check_max_redelivery_records(max_redelivery_records)
        self._journal = journal
        self.max_redelivery_records = max_redelivery_records
        self._sync_mode = SyncMode.named(getattr(journal, "sync_mode", "group"))
        self._persisted: dict[tuple[int, int], int] = {}   # (queue id, message id) -> last persisted count
        self.delivery_count_records_written = 0
        self.scheduled_time_records_written = 0
        self._shadow = None                                 # message_store/delivery_shadow.py, when attached
        self._shadow_lock = threading.Lock()

    # ----- the reference table ---------------------------------------------------------------
    def add_reference(self, queue_id: int, message_id: int, persisted_count: int = 0) -> None:
        """Start tracking a live reference; persisted_count is what recovery restored (0 if none).
        The message must be live in the journal, and stay live until the reference is removed."""
        key = (_check_u64(queue_id, "queue_id"), _check_u64(message_id, "message_id"))
        _check_count(persisted_count)
        if not self._journal.is_live(message_id):
            raise UnknownRecordError.of_message(message_id)
        if key in self._persisted:
            raise DuplicateRecordError(f"message {message_id} already has a live reference on queue {queue_id}")
        self._shadow_reused(key)
        self._persisted[key] = persisted_count

    def reserve_references(self, count: int) -> None:
        """Room for `count` more references: the compiled table rehashes once; a dict needs no hint."""

    def add_references(self, queue_id: int, message_ids, persisted_counts) -> None:
        """add_reference for many messages of one queue (recovery), in order; stops at the first
        reference add_reference refuses, with its error."""
        messages, counts = u64_array(message_ids, "message_ids"), u32_array(persisted_counts, "persisted_counts")
        if len(counts) != len(messages):
            raise ValueError(f"{len(messages)} message ids and {len(counts)} persisted counts")
        for message_id, count in zip(messages, counts):
            self.add_reference(queue_id, message_id, count)

    def remove_reference(self, queue_id: int, message_id: int) -> bool:
        """Stop tracking a reference (acknowledged or its message deleted); False if it was unknown."""
        return self._persisted.pop((queue_id, message_id), None) is not None

    def has_reference(self, queue_id: int, message_id: int) -> bool:
        return (queue_id, message_id) in self._persisted

    def persisted_count(self, queue_id: int, message_id: int) -> int:
        """The reference's last persisted delivery count (0 when none was ever written)."""
        try:
            return self._persisted[(queue_id, message_id)]
        except KeyError:
            raise UnknownRecordError.of_reference(queue_id, message_id) from None

    @property
    def held_references(self) -> int:
        """References held as a recovery gave them, outside the table: none here (the compiled
        writer holds a queue's rising ids until each is first looked up; a dict entry costs the same
        either way)."""
        return 0

    def __len__(self) -> int:
        return len(self._persisted)

    def clear(self) -> None:
        self._persisted.clear()

    # ----- the broker's send and acknowledgement, one call each -------------------------------------
    def store_message_reference(self, message_id: int, queue_id: int, head: bytes, body: bytes | None = None) -> None:
        """ADD_MESSAGE (45), ADD_REF (32) on one queue, and the reference tracked: the records of a
        send to one queue, without sync (the caller decides). The message record is `head` when
        body is None, else head + u32 len(body) + body + u32 0, the layout of a message without
        properties (records.encode_message)."""
        key = (_check_u64(queue_id, "queue_id"), _check_u64(message_id, "message_id"))
        if key in self._persisted:
            raise DuplicateRecordError(f"message {message_id} already has a live reference on queue {queue_id}")
        record = head if body is None else b"".join((head, _U32.pack(len(body)), body, _NO_PROPERTIES))
        self._journal.append_group(((_ADD, message_id, ADD_MESSAGE, record),
                                    (_UPDATE, message_id, ADD_REF, _QUEUE_ID.pack(queue_id))), sync=False)
        self._shadow_reused(key)
        self._persisted[key] = 0

    def acknowledge_reference(self, queue_id: int, message_id: int, delete_message: bool) -> None:
        """ACKNOWLEDGE_REF (33), the reference no longer tracked, and with delete_message the
        message's DELETE: an acknowledgement (of its last reference), without sync."""
        key = (queue_id, message_id)
        if key not in self._persisted:
            raise UnknownRecordError.of_reference(queue_id, message_id)
        self._journal.update(message_id, ACKNOWLEDGE_REF, _QUEUE_ID.pack(queue_id), sync=False)
        self._persisted.pop(key, None)
        if delete_message:
            self._journal.delete(message_id, sync=False)

    # ----- the delivery-count shadow (message_store/delivery_shadow.py) ---------------------------------------
    def attach_shadow(self, shadow) -> None:
        """From now on record_dispatch() puts each dispatch's count into `shadow` as well."""
        if self._shadow is not None:
            raise RuntimeError("a shadow is attached already")
        self._shadow = shadow

    def detach_shadow(self) -> None:
        self._shadow = None

    def record_dispatch(self, queue_id: int, message_id: int, delivery_count: int) -> bool:
        """update_delivery_count without sync, and the count (unless above the cap) in the attached
        shadow: it survives a killed process when this returns, without a system call."""
        key, previous = self._persisted_count_of(queue_id, message_id, delivery_count)
        written = self._write_count(key, previous, delivery_count, False)
        cap = self.max_redelivery_records
        if cap < 0 or delivery_count <= cap:
            with self._shadow_lock:
                self._shadow.record(queue_id, message_id, delivery_count)
        return written

    def _shadow_follow(self, key, count: int) -> None:
        """A count record written by other than a dispatch: if the reference has an entry in this
        epoch, the count is its latest entry too (load prefers an entry to the journal's count)."""
        if self._shadow is not None and key in self._shadow.touched:
            with self._shadow_lock:
                self._shadow.record(key[0], key[1], count)

    def _shadow_reused(self, key) -> None:
        """A reference with the ids of one that has a shadow entry in this epoch: void the entries."""
        if self._shadow is not None and key in self._shadow.touched:
            with self._shadow_lock:
                if key in self._shadow.touched:
                    self._shadow.roll()

    # ----- single records ------------------------------------------------------------------------
    def update_delivery_count(self, queue_id: int, message_id: int, delivery_count: int, sync=None) -> bool:
        """Append an UPDATE_DELIVERY_COUNT unless unchanged or above the cap; True if written."""
        key, previous = self._persisted_count_of(queue_id, message_id, delivery_count)
        if not self._write_count(key, previous, delivery_count, sync):
            return False
        self._shadow_follow(key, delivery_count)
        return True

    def _persisted_count_of(self, queue_id: int, message_id: int, delivery_count: int) -> tuple:
        """The arguments checked: the reference's key and its last persisted count."""
        _check_u64(queue_id, "queue_id")
        _check_u64(message_id, "message_id")
        _check_count(delivery_count)
        key = (queue_id, message_id)
        previous = self._persisted.get(key)
        if previous is None:
            raise UnknownRecordError.of_reference(queue_id, message_id)
        return key, previous

    def update_scheduled_delivery_time(self, queue_id: int, message_id: int, scheduled_ms: int,
                                       delivery_count: int, sync=None) -> bool:
        """Append a SET_SCHEDULED_DELIVERY_TIME unless the count is above the cap; True if written."""
        _check_u64(queue_id, "queue_id")
        _check_u64(message_id, "message_id")
        _check_u64(scheduled_ms, "scheduled_ms")
        _check_count(delivery_count)
        if (queue_id, message_id) not in self._persisted:
            raise UnknownRecordError.of_reference(queue_id, message_id)
        return self._write_time(queue_id, message_id, scheduled_ms, delivery_count, sync)

    def _write_count(self, key, previous: int, count: int, sync, group: list | None = None) -> bool:
        """Write the record, or with `group` add it to the group's records (the caller appends them)."""
        if count == previous:
            return False
        cap = self.max_redelivery_records
        if cap >= 0 and count > cap:
            return False
        self._persisted[key] = count
        if group is not None:
            group.append((_UPDATE, key[1], UPDATE_DELIVERY_COUNT, _COUNT.pack(key[0], count)))
        else:
            try:
                self._journal.update(key[1], UPDATE_DELIVERY_COUNT, _COUNT.pack(key[0], count), sync=sync)
            except BaseException:
                if self._persisted.get(key) == count:
                    self._persisted[key] = previous
                raise
        self.delivery_count_records_written += 1
        return True

    def _write_time(self, queue_id: int, message_id: int, scheduled_ms: int, count: int, sync,
                    group: list | None = None) -> bool:
        cap = self.max_redelivery_records
        if cap >= 0 and count > cap:
            return False
        if group is not None:
            group.append((_UPDATE, message_id, SET_SCHEDULED_DELIVERY_TIME, _TIME.pack(queue_id, scheduled_ms)))
        else:
            self._journal.update(message_id, SET_SCHEDULED_DELIVERY_TIME, _TIME.pack(queue_id, scheduled_ms),
                                 sync=sync)
        self.scheduled_time_records_written += 1
        return True

    def update_redelivery(self, queue_id: int, message_id: int, delivery_count: int, scheduled_ms: int,
                          sync=None) -> int:
        """A rollback's records as one group: update_delivery_count's UPDATE_DELIVERY_COUNT and
        update_scheduled_delivery_time's SET_SCHEDULED_DELIVERY_TIME, each under its own rule, so a
        crash keeps both or neither. Returns how many were written (0..2)."""
        _check_u64(scheduled_ms, "scheduled_ms")
        key, previous = self._persisted_count_of(queue_id, message_id, delivery_count)
        group: list = []
        count_written = self._write_count(key, previous, delivery_count, False, group)
        written = count_written + self._write_time(queue_id, message_id, scheduled_ms, delivery_count, False, group)
        try:
            self._journal.append_group(group, sync=sync)
        except BaseException:
            if self._persisted.get(key) == delivery_count:
                self._persisted[key] = previous
            raise
        if count_written:
            self._shadow_follow(key, delivery_count)
        return written

    # ----- batches ------------------------------------------------------------------------------------
    def update_delivery_counts(self, queue_ids, message_ids, delivery_counts, sync=None) -> int:
        """The batch form of update_delivery_count: one wait for durability at the end; returns records written.

        Every reference is checked before anything is written, so an unknown one writes nothing.
        """
        queues = u64_array(queue_ids, "queue_ids")
        messages = u64_array(message_ids, "message_ids")
        counts = u32_array(delivery_counts, "delivery_counts")
        self._check_batch(queues, messages, len(counts))
        written = 0
        persisted = self._persisted
        for queue_id, message_id, count in zip(queues, messages, counts):
            key = (queue_id, message_id)
            previous = persisted.get(key)
            if previous is None:
                raise UnknownRecordError.of_reference(queue_id, message_id)
            if self._write_count(key, previous, count, False):
                written += 1
                self._shadow_follow(key, count)
        self._finish_batch(written, sync)
        return written

    def update_scheduled_delivery_times(self, queue_ids, message_ids, scheduled_times, delivery_counts,
                                        sync=None) -> int:
        """The batch form of update_scheduled_delivery_time; returns records written."""
        queues = u64_array(queue_ids, "queue_ids")
        messages = u64_array(message_ids, "message_ids")
        times = u64_array(scheduled_times, "scheduled_times")
        counts = u32_array(delivery_counts, "delivery_counts")
        if len(times) != len(counts):
            raise ValueError(f"scheduled_times has {len(times)} entries, delivery_counts {len(counts)}")
        self._check_batch(queues, messages, len(counts))
        written = 0
        for queue_id, message_id, scheduled_ms, count in zip(queues, messages, times, counts):
            if (queue_id, message_id) not in self._persisted:
                raise UnknownRecordError.of_reference(queue_id, message_id)
            if self._write_time(queue_id, message_id, scheduled_ms, count, False):
                written += 1
        self._finish_batch(written, sync)
        return written

    def _check_batch(self, queues, messages, n: int) -> None:
        if len(queues) != len(messages) or len(queues) != n:
            raise ValueError(f"batch arrays differ in length: {len(queues)} queue ids, {len(messages)} message "
                             f"ids, {n} values")
        for queue_id, message_id in zip(queues, messages):
            if (queue_id, message_id) not in self._persisted:
                raise UnknownRecordError.of_reference(queue_id, message_id)

    def _finish_batch(self, written: int, sync) -> None:
        if written and self._sync_mode.record_waits(sync):
            self._journal.sync()
