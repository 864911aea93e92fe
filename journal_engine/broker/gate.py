"""The broker's lock and whether the broker is open, shared by the broker and the parts of it that run
under the lock (deliveries, transactions).

Why an object of its own: those parts must check "closed" under the same lock the broker closes under,
without holding the broker itself (which would tie them to broker.py and keep a dropped broker alive).
"""
from __future__ import annotations

import threading

from ..errors import JournalClosedError

__all__ = ["Gate"]


class Gate:
    """``lock`` guards all of the broker's state; ``closed`` says whether close() ran (read it freely,
    change it only through ``close``: a plain attribute, because receive and send read it every time).
    ``check_open`` and ``close`` must be called with ``lock`` held."""

    __slots__ = ("lock", "closed")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.closed = False

    def check_open(self) -> None:
        """JournalClosedError when the broker is closed."""
        if self.closed:
            raise JournalClosedError("the broker is closed")

    def close(self) -> bool:
        """Mark the broker closed; False when it was closed already."""
        if self.closed:
            return False
        self.closed = True
        return True
