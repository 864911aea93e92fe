"""Type stub of the compiled scan decoder (pyx/journal_engine/_scan.pyx; twin: _twin/scan.py).

The one reader of the frame format: recovery, compaction, the checkpoint and the tools all go through
it, so the rules (the decision table in docs/internals/recovery.md) live in one place; and the mapped
files (data files, the checkpoint a load took) whose bytes the bodies and columns point into. Offsets
are bytes from the start of a file; ``stamp`` is the low 32 bits of the file id.
"""
from collections.abc import Iterator
from typing import Any, SupportsIndex, final, overload

from _typeshed import ReadableBuffer
from typing_extensions import disjoint_base


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
