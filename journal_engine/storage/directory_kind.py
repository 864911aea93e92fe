"""Which backend wrote the record store in a directory, from the names of its files.

Each backend ignores the other's files, so a store opened with the wrong backend would look empty:
the message store, the LMDB store and the tools ask here first. Each backend's format module names
its own files; this module only puts the two questions side by side.
"""
from __future__ import annotations

import glob
import os

from .journal.format import FILES_GLOB
from .lmdb.format import DATA_FILE


def stored_backend(directory) -> str | None:
    """"journal", "lmdb", or None (empty or absent)."""
    path = os.fspath(directory)
    if os.path.exists(os.path.join(path, DATA_FILE)):
        return "lmdb"
    if glob.glob(os.path.join(glob.escape(path), FILES_GLOB)):
        return "journal"
    return None
