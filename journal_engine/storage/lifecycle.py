"""The edges of a record store's life, written once for every backend (the journal and the LMDB store).

``with store:`` closes the store at the block's end, and a store dropped while open is closed when it
is collected (best effort: an error there has no caller to reach, so it is swallowed; close it
yourself to see one). A store class provides ``close()``, ``directory``, ``sync_mode`` and ``_state``.

A store still open when the interpreter exits is closed by an ``atexit`` hook, while the interpreter
is whole: a collection during the interpreter's teardown runs after its modules and builtins are
gone, so a close there cannot save what a clean close saves (the journal's checkpoint) and fails
with a message about a missing builtin. A store opts in with ``_close_at_exit()`` once it holds its
directory. A forked child forgets its parent's stores: it shares their directory lock, and closing
them from the child would write the parent's files behind its back.
"""
from __future__ import annotations

import atexit
import logging
import os
import weakref
from typing import Any

log = logging.getLogger("journal_engine")

# stores of this process that _close_at_exit() registered; a store leaves when it is collected
_open_at_exit: weakref.WeakSet = weakref.WeakSet()


def _close_stores_left_open() -> None:
    """The atexit hook: close what the program left open, as its own close() would (idempotent)."""
    for store in list(_open_at_exit):
        try:
            store.close()
        except Exception as exc:     # one store's failure must not keep the others from closing
            log.warning("%r, left open at exit, failed to close: %s", store, exc)
    _open_at_exit.clear()


atexit.register(_close_stores_left_open)
os.register_at_fork(after_in_child=_open_at_exit.clear)


class StoreLifecycle:
    """Context management, a repr naming the directory, sync mode and state, and a close at collection
    or at interpreter exit, whichever comes first."""

    __slots__ = ()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()     # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.directory!r}, sync={self.sync_mode!r}, state={self._state})"  # type: ignore[attr-defined]

    def _close_at_exit(self) -> None:
        """Close this store from the interpreter's exit hook if the program has not closed it by then."""
        _open_at_exit.add(self)

    def __del__(self) -> None:
        try:
            if getattr(self, "_state", "closed") != "closed":
                self.close()     # type: ignore[attr-defined]
        except Exception:
            pass
