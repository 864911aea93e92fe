"""Every backend, by name: where the tools, the message store and the crash harness find one.

A tool asks the backend what it needs (storage/protocol.py, ``Backend``) instead of testing its name.
"""
from __future__ import annotations

import os

from ..errors import ConfigError, IncompatibleFormatError
from .directory_kind import stored_backend
from .journal.backend import JOURNAL
from .lmdb.backend import LMDB
from .protocol import Backend, RecordStore

BACKENDS: dict[str, Backend] = {backend.name: backend for backend in (JOURNAL, LMDB)}
DEFAULT_BACKEND = JOURNAL.name


def backend_named(name: str) -> Backend:
    """The backend called `name`; ConfigError for any other name."""
    backend = BACKENDS.get(name) if isinstance(name, str) else None
    if backend is None:
        raise ConfigError("backend", name, f"use one of {', '.join(BACKENDS)}")
    return backend


def backend_of(directory) -> Backend | None:
    """The backend whose files `directory` holds, or None (empty or absent)."""
    name = stored_backend(directory)
    return None if name is None else BACKENDS[name]


def open_record_store(name: str, directory, **options) -> RecordStore:
    """A record store of backend `name` on `directory`, refused (IncompatibleFormatError) when the
    directory holds another backend's files: each backend ignores the other's, so it would look empty."""
    backend = backend_named(name)
    path = os.fspath(directory)
    found = backend_of(path)
    if found is not None and found is not backend:
        raise IncompatibleFormatError(f"the store directory holds {found.description}", path=path,
                                      hint=f'open it with backend="{found.name}"')
    return backend.open(path, **options)
