"""The LMDB store as a backend (storage/protocol.py, ``Backend``): what the tools ask of it.

The store itself imports the optional ``lmdb`` package: it is imported when a store is opened, not
when the backend is listed.
"""
from __future__ import annotations

from typing import Any

from .format import LOCK_FILE, READER_TABLE_FILE

#: the LmdbRecordStore's options: a tuning option of another backend is not the LMDB store's to take
_TUNING = ("map_size", "map_size_max", "buffer_timeout_us", "buffer_size", "max_readers")


class LmdbBackend:
    """One LMDB environment a store (store.py)."""

    name = "lmdb"
    description = "an LMDB store"
    lock_file = LOCK_FILE
    volatile_files = (READER_TABLE_FILE, LOCK_FILE)     # LMDB maps its reader table shared and writable
    frames = False
    compacts = False
    compaction_note = "LMDB stores need no compaction: LMDB reuses freed pages and overwrites delivery counts in place"
    gathered_writes = True          # LMDB writes its pages with writev
    read_only_recovers = False      # opening may write (a new environment, a reader slot): recover on a copy

    def open(self, directory: str, *, replaceable_types: dict | None = None, sync: str = "group",
             read_only: bool = False, **tuning: Any):
        from .store import LmdbRecordStore
        options = {name: value for name, value in tuning.items() if name in _TUNING}
        return LmdbRecordStore(directory, replaceable_types=replaceable_types, sync=sync, read_only=read_only,
                               **options)

    def file_count(self, directory: str) -> int:
        return 1


LMDB = LmdbBackend()
