"""The journal as a backend (storage/protocol.py, ``Backend``): what the tools ask of it."""
from __future__ import annotations

from typing import Any

from .format import LOCK_FILE
from .journal import Journal
from .segment_files import list_directory

#: the Journal's options: a tuning option of another backend is not the journal's to take
_TUNING = ("file_size", "min_files", "buffer_timeout_us", "buffer_size", "compact_min_files", "compact_percentage",
           "pool_files")


class JournalBackend:
    """The segmented journal (docs/internals/format.md)."""

    name = "journal"
    description = "a journal"
    lock_file = LOCK_FILE
    volatile_files: tuple[str, ...] = ()
    frames = True
    compacts = True
    compaction_note = "compaction rewrites the live records of the older files and reclaims them"
    gathered_writes = False         # one pwrite per buffer, never writev
    read_only_recovers = True       # Journal(read_only=True).load() is the analysis a writing load acts on

    def open(self, directory: str, *, replaceable_types: dict | None = None, sync: str = "group",
             read_only: bool = False, **tuning: Any) -> Journal:
        options = {name: value for name, value in tuning.items() if name in _TUNING}
        return Journal(directory, replaceable_types=replaceable_types, sync=sync, read_only=read_only, **options)

    def file_count(self, directory: str) -> int:
        return len(list_directory(directory, as_if_compacted=True).data)


JOURNAL = JournalBackend()
