"""Which record store a campaign crashes: ours (the journal, the LMDB store) or a user's, named by
import path (``package.module:factory``). A factory takes the directory and ``sync`` (``"always"``,
``"group"`` or ``"none"``) and returns an object of the record-store protocol (storage/protocol.py):
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

from ..storage.backends import BACKENDS, DEFAULT_BACKEND
from ..storage.protocol import Backend

FILE_SIZE = 256 * 1024      # the journal's files in campaigns: small, so files roll and compactions run often

BUILT_IN = tuple(BACKENDS)
#: the store a campaign crashes unless told otherwise: it runs on every built-in backend
DEFAULT_STORE = DEFAULT_BACKEND


def built_in(spec: str) -> Backend | None:
    """Our backend that `spec` names, or None for a user's factory."""
    return BACKENDS.get(spec)


def open_store(spec: str, directory: str, sync: str, *, for_recovery: bool = False):
    """The store `spec` names, opened on `directory` (recovery opens it with automatic compaction off)."""
    backend = built_in(spec)
    if backend is not None:
        return backend.open(directory, sync=sync, file_size=FILE_SIZE, compact_min_files=0 if for_recovery else 2)
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"store {spec!r}: use {', '.join(repr(name) for name in BACKENDS)} or 'package.module:factory'")
    factory = getattr(importlib.import_module(module_name), attribute)
    return factory(directory, sync)


def volatile_files(spec: str) -> tuple[str, ...]:
    """Files of a store that hold no data, only locks and the like: what a power cut leaves in them does
    not matter, and the store may map them shared and writable (LMDB's reader table is such a file)."""
    backend = built_in(spec)
    return backend.volatile_files if backend is not None else ()


def lock_file(spec: str) -> str:
    """The name of the lock file that keeps a second opener out of a built-in store's directory."""
    return BACKENDS[spec].lock_file
