"""Type stub of the compiled replay (pyx/journal_engine/_replay.pyx; twin: _twin/replay.py).

Files' columns (_scan's FrameColumns), replayed one file after another in order, into the live records
and open transactions: the rules of the decision table in docs/internals/recovery.md.
"""
from array import array
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from typing import Any, final

from _typeshed import ReadableBuffer
from typing_extensions import disjoint_base

from journal_engine._livemap import LiveMap
from journal_engine._scan import Body, FrameColumns


@disjoint_base
class RecordInfo:
    """A live record after replay: its add, then its updates in append order (``LoadResult.records``).

    Compares by value and pickles; not tracked by the garbage collector (it cannot form a cycle),
    so loading a million of them triggers no collection.
    """

    def __init__(self, record_id: int, record_type: int, body: bytes | Body,
                 updates: Iterable[tuple[int, bytes | Body]] | None = None) -> None: ...
    @property
    def record_id(self) -> int: ...
    @property
    def record_type(self) -> int:
        """The user record type of the add (0..255)."""
    @property
    def body(self) -> bytes | Body:
        """The add's body: a view into the mapped file (``load()``), or bytes (``load(copy=True)``)."""
    @property
    def updates(self) -> list[tuple[int, bytes | Body]]:
        """``(record_type, body)`` of each update, in append order."""
    def __eq__(self, other: object, /) -> bool: ...
    def __reduce__(self) -> tuple[type[RecordInfo], tuple[int, int, bytes | Body, list[tuple[int, bytes | Body]]]]: ...

@disjoint_base
class ReplayState:
    """Live records and open transactions, built file by file in replay order from the columns.

    No Python object per record: ``records`` makes each RecordInfo when it is looked at, from the
    columns the state owns (``files``). Damage is recorded, never raised: recovery decides what
    to do with it. A location packs ``(file index << 32) | row``.
    """

    transactions: dict[int, list[Any]]
    """Open transactions: tx_id -> ``[ops, xid or None, path, offset]``, ops as
    ``(kind, record_id, user_type, location, frame_bytes)`` (the body: ``body(location)``)."""
    corrupt: list[tuple[str, int, str]]
    """``(path, offset, reason)`` of damage followed by valid frames, and of inconsistent transactions."""
    anomalies: list[tuple[str | None, int, str]]
    """``(path, offset, reason)`` of legal-looking but inconsistent frames (an update of a record
    that is not live, a second add of a live id)."""
    frames_read: int
    replaceable_updates: int
    """Updates of a replaceable record type still live: what a compaction can drop."""
    adds: int

    def __init__(self, replaceable: Iterable[int] = (), expected: int = 0) -> None:
        """``replaceable``: the user record types whose updates ``replaceable_updates`` counts;
        ``expected``: how many records the replay holds at most (the tables are sized once)."""
    @property
    def records(self) -> LiveRecords:
        """Live records by id, made when looked at."""
    @property
    def live(self) -> LiveMap:
        """Record id -> bytes of its frames (its add and its updates)."""
    @property
    def files(self) -> list[FrameColumns]:
        """The columns of every file replayed, by file index."""
    def replay_file(self, buffer: ReadableBuffer, stamp: int, start: int, path: str) -> tuple[int, int]:
        """Scan one file's bytes and replay them; returns ``(end_offset, end_check)``."""
    def replay_columns(self, cols: FrameColumns, path: str) -> tuple[int, int]:
        """Apply every row of one file in order; returns ``(end_offset, end_check)``.

        ``end_offset`` is where valid data ends (the append position); ``end_check`` (a ``FrameCheck``
        value) says what lies there. Damage followed by valid frames goes to ``corrupt`` and is
        skipped, never taken for the end.
        """
    def body(self, location: int) -> bytes | Body:
        """The body of the frame at a location."""
    def apply_ops(self, ops: list[tuple[int, int, int, int, int]], path: str | None = None,
                  offset: int = 0) -> None:
        """Apply a committed transaction's ``(kind, record_id, user_type, location, frame_bytes)`` in order."""

@disjoint_base
class LiveRecords:
    """The live records of a replay by id: a read-only mapping (registered as a ``Mapping``) whose
    RecordInfo values are made when looked at; iterates in the order the records were added."""

    def __init__(self, state: ReplayState) -> None: ...
    def __len__(self) -> int: ...
    def __contains__(self, key: object, /) -> bool: ...
    def __getitem__(self, key: int, /) -> RecordInfo: ...
    def get(self, key: int, default: RecordInfo | None = None) -> RecordInfo | None: ...
    def __iter__(self) -> Iterator[int]: ...
    def keys(self) -> KeysView[int]: ...
    def values(self) -> ValuesView[RecordInfo]: ...
    def items(self) -> ItemsView[int, RecordInfo]: ...
    def _values(self) -> Iterator[RecordInfo]: ...
    def _items(self) -> Iterator[tuple[int, RecordInfo]]: ...
    def __eq__(self, other: object, /) -> bool: ...

@final
class RecordColumns:
    """Live records as columns, in the order they were added, for a reader that wants no Python
    object per record. Record ``i``: ``record_id[i]`` ('Q'), ``record_type[i]`` ('B'), its body
    ``buffers[body_buffer[i]][body_start[i]:body_end[i]]`` ('I', 'q', 'q'); its updates are rows
    ``update_first[i]`` to ``update_first[i + 1]`` ('q', ``len + 1`` entries) of ``update_type``,
    ``update_buffer``, ``update_start``, ``update_end``."""

    @property
    def record_id(self) -> array[int]: ...
    @property
    def record_type(self) -> array[int]: ...
    @property
    def body_buffer(self) -> array[int]: ...
    @property
    def body_start(self) -> array[int]: ...
    @property
    def body_end(self) -> array[int]: ...
    @property
    def update_first(self) -> array[int]: ...
    @property
    def update_type(self) -> array[int]: ...
    @property
    def update_buffer(self) -> array[int]: ...
    @property
    def update_start(self) -> array[int]: ...
    @property
    def update_end(self) -> array[int]: ...
    @property
    def buffers(self) -> list[bytes]: ...
    def __len__(self) -> int: ...

def record_columns(records: Mapping[int, RecordInfo]) -> RecordColumns | None:
    """Live records as RecordColumns: straight from the replay's columns for ``LoadResult.records``
    (no RecordInfo made), else one buffer per body; None when a body is neither bytes nor a Body."""
