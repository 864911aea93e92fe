"""What a directory given to a command holds, and its readers — read-only by construction.

A directory is one of: a journal (``journal-*.jej`` files), an LMDB record store (``data.mdb``),
or a message store / broker directory (``messages/`` and ``bindings/``, each a journal or an LMDB
store, as ``Broker(dir)`` and ``MessageStore(dir)`` write them). Every reader here opens what it
reads read-only (``Journal(read_only=True)``, ``MessageStore(read_only=True)``, the recovery
analysis, the columnar decoder of storage/journal/scan.py): an inspection never writes, truncates, rolls
back or creates anything (an LMDB store is read under a shared directory lock, or, beside its
writer, through LMDB's reader table: docs/cli.md, "Read-only by construction").
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Iterator

from ..errors import JournalError, JournalIOError
from ..record_format import FrameCheck
from ..storage.journal.scan import scan_directory
from ..storage.journal.segment_files import DataFile
from ..storage.backends import backend_of
from ..storage.protocol import Backend
from ..message_store.message_store import BINDINGS_DIRECTORY, MESSAGES_DIRECTORY, MessageStore

__all__ = ["Target", "NoJournalError", "locate", "journal_frames"]


class NoJournalError(JournalError):
    """The directory holds no journal, LMDB store or message store (a usage error: exit status 2)."""

    def __init__(self, path: str, why: str) -> None:
        self.path = path
        super().__init__(f"{path}: {why}",
                         hint="give a journal directory (journal-*.jej files), an LMDB store (data.mdb) or a "
                              "broker directory (messages/ and bindings/)")


@dataclass(frozen=True)
class Part:
    """One record store of a target: its name ("journal", "messages", "bindings"), path and backend
    (storage/backends.py: what its files let a tool read)."""

    name: str
    path: str
    backend: Backend


@dataclass(frozen=True)
class Target:
    """A directory and the record stores it holds. ``store``: a message store (messages/, bindings/)."""

    path: str
    parts: tuple[Part, ...]
    store: bool

    @property
    def backend(self) -> Backend:
        return self.parts[0].backend

    def open_store(self) -> MessageStore:
        """The message store, read-only (its load() changes nothing)."""
        return MessageStore(self.path, backend=self.backend.name, read_only=True)


def _check_directory(path: str) -> None:
    """A missing path, a file, or a directory this process may not read: one clear error each. A stat
    that is refused (a parent this process may not search) is an I/O error, not "no such directory"."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise NoJournalError(path, "no such directory") from None
    except OSError as exc:
        raise JournalIOError(f"{path}: cannot reach the directory: {exc.strerror}", errno=exc.errno, path=path,
                             hint="run as a user who may search every directory above it (or fix their "
                                  "permissions)") from None
    if not stat.S_ISDIR(status.st_mode):
        raise NoJournalError(path, "not a directory")
    try:
        os.listdir(path)
    except PermissionError as exc:
        raise JournalIOError(f"{path}: permission denied reading the directory", errno=exc.errno, path=path,
                             hint="run as a user who may read it (or fix its permissions)") from None
    except OSError as exc:
        raise JournalIOError(f"{path}: cannot list the directory: {exc.strerror}", errno=exc.errno, path=path,
                             hint="check the disk and the path") from None


def locate(path: str) -> Target:
    """What ``path`` holds (see the module docstring); NoJournalError when nothing, JournalIOError
    when it cannot be read."""
    path = os.fspath(path)
    _check_directory(path)
    backend = backend_of(path)
    if backend is not None:
        return Target(path, (Part("journal", path, backend),), store=False)
    parts = []
    for name in (MESSAGES_DIRECTORY, BINDINGS_DIRECTORY):
        sub = os.path.join(path, name)
        if os.path.isdir(sub):
            _check_directory(sub)
            sub_backend = backend_of(sub)
            if sub_backend is not None:
                parts.append(Part(name, sub, sub_backend))
    if not parts:
        raise NoJournalError(path, "no journal found here")
    if len({part.backend for part in parts}) > 1:
        raise NoJournalError(path, "messages/ and bindings/ were written by different backends")
    return Target(path, tuple(parts), store=True)


def journal_frames(directory: str) -> Iterator[tuple[DataFile, list]]:
    """Each data file of a journal directory in replay order with its frames, decoded by the one
    columnar decoder (storage/journal/scan.py): (offset, FrameCheck, kind, user record type, record id,
    tx id, body) each, and a last INVALID row where a torn write ends the valid data. Read-only:
    the listing reads an interrupted compaction as finished and removes nothing."""
    for scan in scan_directory(directory):
        columns = scan.columns
        offsets, checks, kinds = columns.offset, columns.check, columns.kind
        types, ids, tx_ids = columns.record_type, columns.record_id, columns.tx_id
        rows = [(offsets[row], checks[row], kinds[row], types[row], ids[row], tx_ids[row], columns.body(row))
                for row in range(columns.count)]
        if columns.end_check == FrameCheck.INVALID:
            rows.append((columns.end_offset, FrameCheck.INVALID, 0, 0, 0, 0, b""))
        yield scan.data, rows
