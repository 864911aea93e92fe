"""The edges of a record store's life, written once for every backend (the journal and the LMDB store).

``with store:`` closes the store at the block's end, and a store dropped while open is closed when it
is collected (best effort: an error there has no caller to reach, so it is swallowed; close it
yourself to see one). A store class provides ``close()``, ``directory``, ``sync_mode`` and ``_state``.
"""
from __future__ import annotations

from typing import Any


class StoreLifecycle:
    """Context management, a repr naming the directory, sync mode and state, and a close at collection."""

    __slots__ = ()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()     # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.directory!r}, sync={self.sync_mode!r}, state={self._state})"  # type: ignore[attr-defined]

    def __del__(self) -> None:
        try:
            if getattr(self, "_state", "closed") != "closed":
                self.close()     # type: ignore[attr-defined]
        except Exception:
            pass
