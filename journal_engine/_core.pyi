"""Type stub of the compiled append path (pyx/journal_engine/_core.pyx, its contract _core.pxd;
twin: _twin/core.py).

``JournalCore`` is the base of ``journal.journal.Journal``: the record API below is what users call
on a Journal. Appends run with the GIL held and never release it, so the GIL is the append lock
and every method may be called from several threads at once; write-out and fdatasync release it,
and every thread waiting for durability is served by one shared fdatasync (group commit).

Errors of the record API (all ``JournalError`` subclasses unless said):
``JournalClosedError`` before ``load()`` or after ``close()``; ``JournalFailedError`` once a write
or sync failed (the journal stops accepting writes; reopen it); ``DuplicateRecordError`` /
``UnknownRecordError`` for an add of a live id / an update or delete of one that is not live;
``UnknownTransactionError`` for a prepare, commit or rollback of a transaction with no records;
``RecordTooLargeError`` when a frame would not fit one file; ``StoreFullError`` when no next file
can be created (the journal stays usable); ``ValueError`` for a record type outside 0..255 and
``OverflowError`` for an id outside 0..2**64-1.
"""
from collections.abc import Callable, Iterable
from typing import Any

from _typeshed import ReadableBuffer, StrPath
from typing_extensions import Self, disjoint_base

from journal_engine._livemap import LiveMap
from journal_engine.storage.sync_mode import SyncMode

"""Sync mode name ("always", "group", "none") -> the core's mode number."""

@disjoint_base
class Segment:
    """One journal file open for appending at ``position``.

    Offsets are bytes from the start of the file: ``[0, synced)`` is durable, ``[0, written)``
    handed to the operating system, ``[0, position)`` appended; appends stop at ``limit``.
    """

    limit: int
    """Where appends stop: ``size``, or the position once the file is sealed."""
    position: int
    """End of the appended frames."""
    written: int
    """``[0, written)`` is with the operating system (survives a killed process)."""
    synced: int
    """``[0, synced)`` is durable (fdatasync'ed)."""

    def __new__(cls, path: StrPath, file_id: int, sequence: int, size: int, position: int) -> Self:
        """Open ``path`` (which must exist, ``size`` bytes long) for appending at ``position``.

        Raises ``JournalIOError`` (with errno, path and a hint) when the file cannot be opened.
        """
    @property
    def path(self) -> StrPath: ...
    @property
    def file_id(self) -> int:
        """The file's id (u64); frames carry its low 32 bits as their stamp."""
    @property
    def sequence(self) -> int:
        """The file's place in replay order (compaction outputs take the sequence of what they replace)."""
    @property
    def stamp(self) -> int:
        """``file_id & 0xFFFFFFFF``: tells this file's frames from a recycled file's leftovers."""
    @property
    def size(self) -> int:
        """The file's length in bytes (preallocated)."""
    @property
    def is_open(self) -> bool: ...
    def close(self) -> None:
        """Close the file descriptor; idempotent."""

@disjoint_base
class RecordSink:
    """Where a compiled record writer puts its records: the journal's core, or a store taken through
    the record-store protocol (``_record_writer.ProtocolSink``). Its methods are C-level only."""

@disjoint_base
class JournalCore(RecordSink):
    """Appends frames to the active file and makes them durable in groups.

    Counters are bytes of frames (with their padding) since the journal was loaded.
    """

    _flusher_state: int
    """The group-mode flusher's state (0 idle, 1 timing, 2 urgent); the flusher thread resets it to 0."""

    def __init__(self) -> None: ...
    @property
    def appended_bytes(self) -> int:
        """Bytes appended (encoded into the append buffer)."""
    @property
    def written_bytes(self) -> int:
        """Bytes handed to the operating system."""
    @property
    def durable_bytes(self) -> int:
        """Bytes made durable by fdatasync."""
    @property
    def add_count(self) -> int:
        """Records added: those live at load plus every add since (the compaction trigger compares
        replaceable updates with it)."""
    @property
    def replaceable_update_count(self) -> int:
        """Updates of a replaceable record type since the last compaction: what a compaction can drop."""
    @property
    def sync_count(self) -> int:
        """fdatasync batches completed (each may serve many waiting appends)."""
    @property
    def write_count(self) -> int:
        """pwrite calls that handed buffered frames to the operating system."""
    @property
    def append_count(self) -> int:
        """Frames of records appended since opening (GROUP heads and pads not counted)."""
    @property
    def live_bytes(self) -> int:
        """Bytes of frames that live records occupy (adds and their updates)."""

    # ----- set-up by the journal (storage/journal/journal.py), not for users ---------------------------
    def _core_configure(self, mode: SyncMode, buffer_size: int, max_frame: int, replaceable: Iterable[int],
                        gather_us: int = 500) -> None:
        """Set the sync mode, the append buffer (``buffer_size`` bytes, allocated once, plus room for
        the largest frame of ``max_frame`` bytes), the replaceable user record types (0..255) and the
        group-commit gather time in microseconds."""
    def _core_install(self, active: Segment, live: LiveMap, pending_tx: dict[int, list[Any]],
                      add_count: int, replaceable_updates: int,
                      next_segment: Callable[[int], Segment]) -> None:
        """Start appending to ``active`` with the recovered live set and open transactions;
        ``next_segment(needed_bytes)`` supplies the file after a full one (the core calls what it is
        handed, never a method of a subclass)."""
    def _core_force_roll(self, factory: Callable[[], Segment] | None) -> Segment:
        """Write out and seal the active file, continue in ``factory()``'s; returns the new active file."""
    def _core_seal_tail(self) -> None:
        """After recovery: pad to a sector boundary and sync, so appends never touch recovered sectors."""
    def _core_fail(self, exc: BaseException) -> None:
        """Stop accepting writes after an I/O failure (the first failure is kept) and wake every waiter."""
    def _core_close(self) -> None:
        """Stop appends, wait until no write-out or sync uses a file, close the files."""
    def _core_live(self) -> LiveMap: ...
    def _core_pending(self) -> dict[int, list[Any]]:
        """Open transactions: tx_id -> ``[ops, xid or None]``."""
    def _core_active(self) -> Segment | None: ...
    def _core_reset_replaceable(self, count: int) -> None: ...
    def _core_kick(self) -> None:
        """Wake the flusher thread waiting in ``_core_flusher_wait``."""
    def _core_flusher_wait(self, timeout_s: float, without_gil: bool = True) -> None:
        """The flusher thread's loop, without the GIL: for a kick, then (unless urgent or closing)
        until ``timeout_s`` seconds after its last sync began or an urgent kick, then
        (``without_gil``) a sync of what was appended, and again; it returns when the caller must
        sync with the GIL (an urgent kick, sealed files, a record group or another sync in
        progress, a failure, closing)."""
    def _core_trace_syncs(self, capacity: int) -> None:
        """Record each of the next ``capacity`` syncs (the lag benchmark); 0 stops and frees the record."""
    def _core_commit_histograms(self) -> dict[str, dict[str, Any]]:
        """The group commit's histograms, read together: ``{"batch_bytes": h, "lag_ns": h}``, each
        ``{"bounds": tuple of upper bounds, "counts": tuple of a count per bound and one past the
        last, "sum": int}``: one observation per sync that made bytes durable."""
    def _core_sync_trace(self) -> list[tuple[int, int, int, int, int, int]]:
        """The syncs recorded since ``_core_trace_syncs``, in order: ``(durable_bytes, due_ns,
        woken_ns, batch_ns, sync_ns, end_ns)`` on CLOCK_MONOTONIC (the syncer due to run, running,
        batch padded, fdatasync begun, sync published)."""

    # ----- the record API -----------------------------------------------------------------------
    def is_live(self, record_id: int) -> bool:
        """Whether a record with this id is live (added, not deleted) as of the last append."""
    def add(self, record_id: int, record_type: int, body: ReadableBuffer, *, sync: bool | None = None) -> None:
        """Append a new record. ``sync=None``: the journal's mode decides (``"always"`` waits for
        durability, ``"group"`` and ``"none"`` do not); ``True`` waits for a shared fdatasync."""
    def update(self, record_id: int, record_type: int, body: ReadableBuffer, *,
               sync: bool | None = None) -> None:
        """Append an update of a live record; recovery returns it in ``RecordInfo.updates``."""
    def delete(self, record_id: int, *, sync: bool | None = None) -> None:
        """Append a delete: the record and its updates are no longer live."""
    def add_tx(self, tx_id: int, record_id: int, record_type: int, body: ReadableBuffer) -> None:
        """Append an add to transaction ``tx_id`` (never waits); live only once committed."""
    def update_tx(self, tx_id: int, record_id: int, record_type: int, body: ReadableBuffer) -> None:
        """Append an update of a live record (or one added in this transaction) to ``tx_id``."""
    def delete_tx(self, tx_id: int, record_id: int) -> None:
        """Append a delete of a live record (or one added in this transaction) to ``tx_id``."""
    def prepare(self, tx_id: int, xid: ReadableBuffer, *, sync: bool | None = None) -> None:
        """Prepare ``tx_id`` (two-phase commit) under the global id ``xid``: recovery returns it in
        ``LoadResult.prepared``. Transaction boundaries sync unless the mode is ``"none"``."""
    def commit(self, tx_id: int, *, sync: bool | None = None) -> None:
        """Commit ``tx_id``: its records become live at once; durable when the call returns unless
        the mode is ``"none"`` or ``sync=False``."""
    def rollback(self, tx_id: int, *, sync: bool | None = None) -> None:
        """Discard ``tx_id``'s records."""
    def append_group(self, records: Iterable[tuple[int, int, int, ReadableBuffer]], *,
                     sync: bool | None = None) -> None:
        """Append ``records``, each ``(kind, record_id, record_type, body)`` with kind
        ``RecordKind.ADD``, ``UPDATE`` or ``DELETE`` (a DELETE's type and body are ignored), as one
        unit: contiguous in one file, never split by a write-out or a sync, so a crash recovers all of
        them or none. Every record is checked first (against the live set as the group's earlier
        records leave it): an error writes nothing. ``RecordTooLargeError`` when the group's frames
        do not fit one file; ``sync`` as for ``add``, once for the whole group."""
    def sync(self) -> None:
        """Return once everything appended before this call is durable (one fdatasync serves every
        thread waiting at the same time)."""
    def flush(self) -> None:
        """Return once everything appended before this call is with the operating system: it
        survives a killed process, not a power cut."""
