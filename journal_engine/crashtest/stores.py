"""Which record store a campaign crashes: ours (the journal, the LMDB store) or a user's, named by
import path (``package.module:factory``). A factory takes the directory and ``sync`` (``"always"``,
``"group"`` or ``"none"``) and returns an object of the record-store protocol (message_store/interface.py):
load(), add/update/delete(..., sync=None), add_tx/update_tx/delete_tx, prepare/commit/rollback,
sync(), compact(), close(). For example (docs/crash-testing.md has it whole)::

    # mystore.py
    from journal_engine import Journal

    def open_store(directory, sync):
        return Journal(directory, sync=sync, file_size=256 * 1024)

    # journal-engine crash-test --store mystore:open_store
"""
from __future__ import annotations

import importlib

FILE_SIZE = 256 * 1024      # the journal's files in campaigns: small, so files roll and compactions run often

BUILT_IN = ("journal", "lmdb")
# files of a store that hold no data, only locks and the like: what a power cut leaves in them does
# not matter, and the store may map them shared and writable (LMDB's reader table is such a file)
VOLATILE_FILES = {"lmdb": ("lock.mdb", "store.lock")}


def open_store(spec: str, directory: str, sync: str, *, for_recovery: bool = False):
    """The store `spec` names, opened on `directory` (recovery opens it with automatic compaction off)."""
    if spec == "journal":
        from ..journal.journal import Journal
        return Journal(directory, file_size=FILE_SIZE, sync=sync, compact_min_files=0 if for_recovery else 2)
    if spec == "lmdb":
        from ..message_store.lmdb_store import LmdbRecordStore
        return LmdbRecordStore(directory, sync=sync)
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"store {spec!r}: use 'journal', 'lmdb' or 'package.module:factory'")
    factory = getattr(importlib.import_module(module_name), attribute)
    return factory(directory, sync)


def lock_file(spec: str) -> str:
    """The name of the lock file that keeps a second opener out of a built-in store's directory."""
    if spec == "journal":
        from ..journal.format import LOCK_FILE
        return LOCK_FILE
    from ..message_store.lmdb_store import LOCK_FILE as LMDB_LOCK_FILE
    return LMDB_LOCK_FILE
