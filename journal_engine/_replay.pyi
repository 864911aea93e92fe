"""Type stub of the compiled scan decoder and replay (pyx/journal_engine/_replay.pyx; twin:
_twin/replay.py).

The one reader of the frame format: recovery, compaction and the tools all go through it, so the
rules (the decision table in docs/internals/recovery.md) live in one place. Offsets are bytes from
the start of a file; ``stamp`` is the low 32 bits of the file id.
"""
from array import array
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from typing import Any, SupportsIndex, final, overload

from _typeshed import ReadableBuffer
from typing_extensions import disjoint_base

from journal_engine._livemap import LiveMap

@final
class MappedFile:
    """One data file mapped read-only, whole: what the bodies of ``load()`` point into. Each
    :class:`Body` view holds it, so it is unmapped when the last view goes; while it lives the file
    is pinned (:func:`is_pinned`) and the journal never recycles it."""

    def __init__(self, fd: int, size: int, path: str, key: tuple[int, int]) -> None:
        """Map ``size`` bytes of ``fd`` (open for reading); ``key``: the file's (st_dev, st_ino)."""
    @property
    def size(self) -> int: ...
    @property
    def path(self) -> str: ...
    def __len__(self) -> int: ...

def is_pinned(key: tuple[int, int]) -> bool:
    """True while a body view (or a scan's columns) maps the file whose (st_dev, st_ino) is ``key``."""

@final
class Body:
    """A record's body as a read-only view into its mapped journal file (what ``load()`` returns):
    bytes-like (``==``, ordering and ``hash`` as the bytes it holds, ``len``, indexing and slicing
    into bytes, the buffer protocol, read-only), kept as long as the user likes: it keeps its file
    mapped and pinned. Copies out of it read under the SIGBUS guard (FileChangedError when another
    process cut the file); reads through its buffer do not."""

    def __init__(self, *args: object) -> None:
        """Raises TypeError: views are made by ``Journal.load()``."""
    @property
    def path(self) -> str | None:
        """The journal file the view points into."""
    def __bytes__(self) -> bytes: ...
    def tobytes(self) -> bytes: ...
    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, index: SupportsIndex, /) -> int: ...
    @overload
    def __getitem__(self, index: slice, /) -> bytes: ...
    def __iter__(self) -> Iterator[int]: ...
    def __contains__(self, item: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __ne__(self, other: object, /) -> bool: ...
    def __lt__(self, other: ReadableBuffer | Body, /) -> bool: ...
    def __le__(self, other: ReadableBuffer | Body, /) -> bool: ...
    def __gt__(self, other: ReadableBuffer | Body, /) -> bool: ...
    def __ge__(self, other: ReadableBuffer | Body, /) -> bool: ...
    def __add__(self, other: ReadableBuffer, /) -> bytes: ...
    def __radd__(self, other: bytes, /) -> bytes: ...
    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str: ...
    def hex(self, *args: Any) -> str: ...
    def startswith(self, *args: Any) -> bool: ...
    def endswith(self, *args: Any) -> bool: ...
    def find(self, *args: Any) -> int: ...
    def __reduce__(self) -> tuple[type[bytes], tuple[bytes]]: ...

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

@disjoint_base
class FrameColumns:
    """Every frame of one file from ``start``, decoded into column buffers the object owns.

    One row per valid frame and one per damaged region followed by valid frames (``check`` not
    VALID, its other fields 0); where valid data ends is ``end_offset`` / ``end_check``, not a
    row. Columns are memoryviews of typed arrays: ``offset``, ``size`` and ``body_offsets`` 'q',
    ``check``, ``kind`` and ``record_type`` 'B', ``record_id`` and ``tx_id`` 'Q'. Body ``i`` is
    ``bodies[body_offsets[i]:body_offsets[i + 1]]`` (``count + 1`` offsets: Arrow's large_binary
    layout) -- unless ``mapped`` (a scan with ``copy=False``): then ``bodies`` is the scanned
    MappedFile, body ``i`` lies after the frame header at ``offset[i]`` and is
    ``body_offsets[i + 1] - body_offsets[i]`` bytes long, and ``body(i)`` is a :class:`Body` view.
    """

    @property
    def count(self) -> int: ...
    @property
    def groups_skipped(self) -> int:
        """Valid GROUP frames a scan with ``groups=False`` made no row of."""
    @property
    def end_offset(self) -> int:
        """Where valid data ends: the append position."""
    @property
    def end_check(self) -> int:
        """The ``FrameCheck`` of what lies at ``end_offset``."""
    @property
    def bodies(self) -> bytes | MappedFile: ...
    @property
    def mapped(self) -> bool: ...
    @property
    def offset(self) -> memoryview: ...
    @property
    def size(self) -> memoryview: ...
    @property
    def check(self) -> memoryview: ...
    @property
    def kind(self) -> memoryview: ...
    @property
    def record_type(self) -> memoryview: ...
    @property
    def record_id(self) -> memoryview: ...
    @property
    def tx_id(self) -> memoryview: ...
    @property
    def body_offsets(self) -> memoryview: ...
    def body(self, row: int) -> bytes | Body:
        """The body of one row (empty for a damaged region)."""
    def __len__(self) -> int: ...

GAP_REASONS: dict[int, str]
"""FrameCheck value -> what a reader reports of such damage followed by valid frames (``ReplayState.corrupt``)."""

GUARDS_MAPPED_READS: bool
"""True where scan_columns reads a mapped file under a SIGBUS guard (a file cut short meanwhile raises
FileChangedError); storage/journal/scan.py maps files only where it holds, and reads them otherwise."""

def scan_columns(buffer: ReadableBuffer, stamp: int, start: int, copy: bool = True, groups: bool = True) -> FrameColumns:
    """Decode every frame of one file from ``start`` into a :class:`FrameColumns`: the one parser
    of the format, which recovery, compaction, the tools and the Spark source read through."""

def scan_frames(buffer: ReadableBuffer, stamp: int, start: int) -> list[
        tuple[int, int, int | None, int | None, int | None, int | None, bytes | None]]:
    """Every frame of one file from ``start`` as ``(offset, check, kind, user_type, record_id, tx_id,
    body)``, for tools that print or verify: a damaged region is one row with ``check`` not VALID
    and the other fields None. Ends where data ends."""

def image_size(count: int) -> int:
    """The bytes of the image of ``count`` rows' columns (storage/journal/checkpoint.py)."""

def columns_image(cols: FrameColumns) -> bytes:
    """One file's columns as the bytes a checkpoint holds: their image (storage/journal/checkpoint.py)."""

def file_checksum(data: MappedFile) -> int:
    """The CRC32C of every byte of a mapped file, under the SIGBUS guard (FileChangedError when cut)."""

@final
class CheckpointMapping:
    """The checkpoint a load took, mapped read-only; pages another holder of its inode cuts away read
    as zeros and set ``cut`` (bus_guard.h's patched regions)."""

    def __init__(self, fd: int, size: int, path: str, trailer: bytes) -> None:
        """Map ``size`` bytes of ``fd`` (open for reading), whose last 8 bytes should be ``trailer``."""
    @property
    def size(self) -> int: ...
    @property
    def path(self) -> str: ...
    @property
    def cut(self) -> bool:
        """Whether another process cut the file under the mapping (a page of it read as zeros)."""
    def __len__(self) -> int: ...

def image_is_sound(image: ReadableBuffer, count: int, start: int, end_offset: int, image_crc: int) -> bool:
    """Whether an image CRC32Cs to ``image_crc`` and its rows lie in order within [start, end_offset)."""

def checkpointed_columns(data: MappedFile, image: ReadableBuffer, count: int, start: int, end_offset: int,
                         end_check: int, groups_skipped: int, data_crc: int, image_crc: int,
                         stamp: int, mapping: CheckpointMapping | None = None) -> FrameColumns | None:
    """The columns a scan of ``data`` (``copy=False, groups=False``) would return, from the image a
    checkpoint saved of them (in memory the caller owns), or None when the file or the image no longer
    CRC32C to what was saved, a row would lie outside the file, or a row is not what the file holds
    where it lies."""
