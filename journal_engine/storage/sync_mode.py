"""A store's sync mode, and the one rule that answers "does this call wait for the disk?".

Every write takes ``sync=None | True | False``: True waits for a (shared) sync, False never waits, and
None lets the store's mode decide. The mode's answer differs by the kind of call (Artemis: a record
follows ``journal-sync-non-transactional``, a transaction's end ``journal-sync-transactional``):

* a record (add, update, delete, a group, a send, an acknowledgement): waits in "always" only;
* a transaction boundary (prepare, commit, a queue binding): waits unless the mode is "none".

``SyncMode`` is a ``str`` ("always", "group" or "none"), so a store's ``sync_mode`` compares and prints
as the name it always was; the journal, the LMDB store, the twin core, the record writers and the
message store ask it instead of comparing names. The compiled core asks it once, when it is
configured, and keeps the two answers in C fields. A leaf: it imports only errors and limits.
"""
from __future__ import annotations

from ..errors import ConfigError
from ..limits import SYNC_MODE_NAMES


class SyncMode(str):
    """One of SYNC_MODE_NAMES, with its answers; ``SyncMode.named(name)`` gives the shared instance."""

    #: a record written with sync=None waits for the disk
    records_wait: bool
    #: a transaction boundary written with sync=None waits for the disk
    boundaries_wait: bool
    #: a background flusher makes what did not wait durable within the store's window ("group")
    flushes_in_background: bool
    #: the store syncs at all on its own ("none" leaves the disk to sync(), flush() and close())
    syncs: bool

    def __new__(cls, name: str) -> SyncMode:
        if name not in SYNC_MODE_NAMES:
            raise ConfigError("sync", name, f"must be one of {', '.join(SYNC_MODE_NAMES)}")
        mode = super().__new__(cls, name)
        mode.records_wait = name == "always"
        mode.boundaries_wait = name != "none"
        mode.flushes_in_background = name == "group"
        mode.syncs = name != "none"
        return mode

    @staticmethod
    def named(name: str | SyncMode) -> SyncMode:
        """The shared instance for a mode's name (ConfigError for any other value)."""
        mode = _MODES.get(name) if isinstance(name, str) else None
        return mode if mode is not None else SyncMode(name)     # any other value: the constructor's ConfigError

    def record_waits(self, sync: bool | None) -> bool:
        """Does a record written with this ``sync`` argument wait for the disk?"""
        return self.records_wait if sync is None else bool(sync)

    def boundary_waits(self, sync: bool | None) -> bool:
        """Does a transaction boundary written with this ``sync`` argument wait for the disk?"""
        return self.boundaries_wait if sync is None else bool(sync)


_MODES = {name: SyncMode(name) for name in SYNC_MODE_NAMES}
