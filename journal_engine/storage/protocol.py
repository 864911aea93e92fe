"""The storage interface the message store writes through: a record store.

`MessageStore` keeps its messages and its queue bindings in two record stores and uses
nothing else of them; any class with these methods can stand behind it. Two implement it:

* `journal_engine.Journal` (the segmented journal, docs/internals/format.md), as it is;
* `journal_engine.storage.lmdb.store.LmdbRecordStore` (one LMDB environment per store).

The conformance suite (tests/store/test_store_conformance.py) runs one body per behaviour on both.

The contract every implementation honours
-----------------------------------------

Records. A record has a u64 id, a user record type (0..255) and a body (bytes). ``add``
makes an id live (DuplicateRecordError if it already is); ``update`` appends a
(record type, body) update to a live record and ``delete`` removes a live record with
all its updates (both raise UnknownRecordError for an id that is not live). Ids outside
0..2**64-1 raise OverflowError, record types outside 0..255 ValueError. After close()
every call raises JournalClosedError; before load() every write does.

Replaceable updates. ``replaceable_types={record_type: key_bytes}`` given at opening:
updates of such a type with the same record id and the same first key_bytes of body
replace each other. The journal keeps every one until compaction drops the older ones;
a store that overwrites in place keeps only the latest from the start. Either way the
latest one is what load() returns, at the position it was written (after every update
written before it), so replaying the updates in order gives the same state.

Record groups. ``append_group(records)`` appends (kind, record_id, record_type, body) records of
kind ADD, UPDATE or DELETE as one unit: a crash keeps all of them or none (the journal appends them
contiguously with no write-out between them; LMDB commits them in one write transaction). A send's
message and references and a rollback's delivery count and scheduled time are written this way.

Transactions. ``add_tx`` / ``update_tx`` / ``delete_tx`` collect records under a tx id
(update_tx and delete_tx need a live record or one added in the same transaction);
``commit`` makes them visible together, ``rollback`` drops them; both raise
UnknownTransactionError for a transaction with no records. A crash before the commit is
durable leaves none of them. Records of a transaction are not live until the commit.

Durability (``sync`` arguments and ``sync_mode``):

* ``sync=True``: the call returns once its record (and everything appended before it) is
  durable; ``sync=False``: it never waits; ``sync=None``: the store's mode decides —
  "always" waits, "group" and "none" do not. ``commit``/``rollback`` with ``sync=None``
  wait unless the mode is "none".
* ``sync()`` returns once everything appended before the call is durable (survives a
  power cut); ``flush()`` once it survives a killed process (it reached the operating
  system), which may cost a sync on a store that cannot do less.
* In "group" mode, writes that did not wait become durable within the store's
  ``buffer_timeout_us`` (a background flusher), and concurrent waiters share syncs.

Recovery. ``load()`` runs once, right after opening, and returns a LoadResult-like object:
``.records`` (dict record id -> RecordInfo-like with ``.record_id``, ``.record_type``,
``.body`` and ``.updates``, a list of (record type, body) in append order), ``.prepared``
(prepared transactions, ``.tx_id .xid .records``) and ``.report`` (a LoadReport:
``.torn_tail_truncated``, ``.corrupt``, ``.files_read``, ``.records_read``,
``.rolled_back``, ``.duration_s``).

Inspection. ``record_type_counts()`` -> {record type: adds and updates of that type that a
load() would return now}; ``stats()`` -> dict; ``compact()`` reclaims space held by dead and
replaced records (a store that overwrites in place may have nothing to do).

Errors a store raises on purpose are JournalError subclasses (journal_engine.errors): a
full disk is StoreFullError (nothing already durable is lost), a failed sync leaves the
store refusing writes (JournalFailedError) until it is reopened.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable



@dataclass
class LoadReport:
    """How a ``load()`` went: what it found at the ends of data, what it read and rolled back."""

    torn_tail_truncated: bool = False
    torn_tail: tuple | None = None                   # (path, offset) where the torn tail began
    corrupt: list = field(default_factory=list)      # (path, offset, reason)
    anomalies: list = field(default_factory=list)    # (path, offset, reason)
    files_read: int = 0
    records_read: int = 0
    rolled_back: list = field(default_factory=list)  # tx ids rolled back because they never completed
    # read-only loads: what a writing load would do but did not (transactions it would roll back)
    incomplete_transactions: list = field(default_factory=list)
    duration_s: float = 0.0
    # data files whose columns came from the checkpoint of the last clean close (their bytes checked
    # whole against it) instead of a decode of every frame: the same records and report either way
    checkpointed_files: int = 0

    @property
    def clean(self) -> bool:
        return not (self.torn_tail_truncated or self.torn_tail or self.corrupt)


@dataclass
class TransactionRecord:
    """One record of a prepared transaction."""

    kind: str            # "add", "update" or "delete"
    record_id: int
    record_type: int
    body: bytes


@dataclass
class PreparedTransaction:
    """A transaction prepared (two-phase commit) and neither committed nor rolled back when the
    journal was last closed: ``load()`` returns it for the caller to commit or roll back by tx_id.

    ``records`` is a list of ``TransactionRecord`` in append order.
    """

    tx_id: int
    xid: bytes
    records: list


@dataclass
class LoadResult:
    """What ``Journal.load()`` recovered.

    ``records``: a read-only mapping {record id: RecordInfo} of the live records (``.record_id``,
    ``.record_type``, ``.body``, ``.updates`` as (record type, body) in append order), in the order
    they were added; the compiled core makes each RecordInfo when it is looked at, from buffers the
    result owns (a fresh object each time; the twin keeps a dict); ``prepared``: the
    ``PreparedTransaction`` list; ``report``: a ``LoadReport`` (``.torn_tail_truncated``,
    ``.corrupt`` as (path, offset, reason), ``.files_read``, ``.rolled_back``, ``.duration_s``).
    """

    records: Mapping
    prepared: list
    report: LoadReport


@runtime_checkable
class RecordStore(Protocol):
    """A store of records with updates, transactions, sync modes and recovery (see the module text)."""

    directory: str
    sync_mode: str          # "always" | "group" | "none"
    # byte positions in the store's order of appends, each <= the one before: appended (accepted),
    # written (reached the operating system: survives a killed process), durable (synced: survives a
    # power cut). The message store compares them to know whether a count it is about to hand out
    # is safe (strict mode) and whether the final sync of close() worked.
    appended_bytes: int
    written_bytes: int
    durable_bytes: int

    def load(self, *, copy: bool = False) -> Any:
        """Once, right after opening: live records, prepared transactions and a report. ``copy=True``:
        the bodies are owned bytes, never views into the store's files (an inspection beside a writer in
        another process, which may reuse those files)."""

    def add(self, record_id: int, record_type: int, body: bytes, *, sync: bool | None = None) -> None:
        """Make a new record live."""

    def update(self, record_id: int, record_type: int, body: bytes, *, sync: bool | None = None) -> None:
        """Append an update to a live record (replaceable types replace the previous one per key)."""

    def delete(self, record_id: int, *, sync: bool | None = None) -> None:
        """Remove a live record and its updates."""

    def append_group(self, records, *, sync: bool | None = None) -> None:
        """Append (kind, record_id, record_type, body) records of kind ADD, UPDATE or DELETE as one
        unit that a crash keeps whole or drops whole; every record is checked before any is written."""

    def add_tx(self, tx_id: int, record_id: int, record_type: int, body: bytes) -> None:
        """Add a record when transaction tx_id commits."""

    def update_tx(self, tx_id: int, record_id: int, record_type: int, body: bytes) -> None:
        """Update a record when transaction tx_id commits."""

    def delete_tx(self, tx_id: int, record_id: int) -> None:
        """Delete a record when transaction tx_id commits."""

    def commit(self, tx_id: int, *, sync: bool | None = None) -> None:
        """Make every record of the transaction visible together."""

    def rollback(self, tx_id: int, *, sync: bool | None = None) -> None:
        """Drop every record of the transaction."""

    def is_live(self, record_id: int) -> bool:
        """Whether a record with this id is live (added or committed, not deleted): the record writer
        checks a new reference's message with it."""

    def sync(self) -> None:
        """Return once everything appended before the call is durable."""

    def flush(self) -> None:
        """Return once everything appended before the call survives a killed process."""

    async def sync_async(self) -> None:
        """``sync()`` for the asyncio face: awaits, without blocking the event loop, until everything
        appended before the call is durable."""

    def compact(self) -> None:
        """Reclaim the space of deleted and replaced records."""

    def add_pin_releaser(self, release) -> None:
        """``release(path)`` is called when the store reclaims a file that views of ``load()`` still
        map, so their holder can copy what it needs and let the file be reused (a store whose loads
        always copy holds no file and never calls it)."""

    def stats(self) -> dict:
        """Counters and sizes, for inspection."""

    def record_type_counts(self) -> dict[int, int]:
        """Adds and updates of each user record type that a load() would return now."""

    def close(self) -> None:
        """Make what was appended durable and release the directory."""


RECORD_STORE_METHODS = ("load", "add", "update", "delete", "append_group", "add_tx", "update_tx", "delete_tx", "commit",
                        "rollback", "is_live", "sync", "flush", "sync_async", "compact", "add_pin_releaser", "stats",
                        "record_type_counts", "close")
#: the counters of appended, written and durable bytes every record store keeps (RecordStore)
RECORD_STORE_POSITIONS = ("appended_bytes", "written_bytes", "durable_bytes")


@runtime_checkable
class Backend(Protocol):
    """A backend as the tools see it (storage/backends.py lists them): what it is called, how to open
    it, which files it keeps and what its files let a tool read, so that no tool asks for a backend by
    name. ``storage/journal/backend.py`` and ``storage/lmdb/backend.py`` implement it."""

    name: str                       # what users write: MessageStore(backend=...), --backend, --store
    description: str                # "a journal", "an LMDB store": for messages
    lock_file: str                  # the file a writer holds: a second opener is refused
    volatile_files: tuple[str, ...]     # files holding no data (locks, reader tables): a power cut's leftovers there do not matter
    frames: bool                    # its files hold frames the columnar decoder reads (print, stats, verify, Spark)
    compacts: bool                  # compaction reclaims space (else ``compaction_note`` says why not)
    compaction_note: str
    gathered_writes: bool           # it writes with writev (fault injection into gathered writes meets it)
    read_only_recovers: bool        # a read-only load reports what a writing load would recover, writing nothing

    def open(self, directory: str, *, replaceable_types: dict | None = None, sync: str = "group",
             read_only: bool = False, **tuning: Any) -> RecordStore:
        """A store of this backend on `directory`; `tuning` names the other backend's options too (a
        message store's ``file_size``, say), and each backend takes those it has and ignores the rest."""

    def file_count(self, directory: str) -> int:
        """How many files a full read of the store goes through (a progress bar's total)."""
