"""Type stub of the compiled live set (pyx/journal_engine/_livemap.pyx; twin: _twin/livemap.py)."""
from collections.abc import Iterator
from typing import TypeVar, final

from typing_extensions import Self

_T = TypeVar("_T")

@final
class LiveMap:
    """The journal's live set: record id -> bytes its frames occupy (its add and its updates).

    An open-addressing C table, so an append allocates no Python object; the compiled core uses its
    C methods (``.pxd``). From Python it is a small mapping of int to int. Record ids are u64.
    Not thread-safe by itself: the journal uses it with the GIL held.
    """

    def __new__(cls, expected: int = 0) -> Self:
        """``expected``: how many records to size the table for (it grows at 70% occupancy anyway)."""
    @property
    def total_bytes(self) -> int:
        """Bytes of every live record's frames: what compaction would keep."""
    def __len__(self) -> int: ...
    def __contains__(self, key: object, /) -> bool: ...
    def __getitem__(self, key: int, /) -> int: ...
    def __setitem__(self, key: int, nbytes: int, /) -> None: ...
    def __delitem__(self, key: int, /) -> None: ...
    def __iter__(self) -> Iterator[int]: ...
    def get(self, key: int, default: _T | None = None) -> int | _T | None:
        """The record's bytes, or ``default`` when it is not live."""
    def pop(self, key: int, *default: _T) -> int | _T:
        """Remove the record and return its bytes; ``default`` (or KeyError) when it is not live."""
    def keys(self) -> list[int]:
        """The live record ids: those a recovery handed over in rising order first, then the
        table's, in table order (not sorted, not append order)."""
    def items(self) -> list[tuple[int, int]]:
        """``(record_id, bytes)`` of every live record, in the order of ``keys()``."""
