"""Duplicate detection (Artemis's "Duplicate Message Detection"; HornetQ's the same with ``_HQ_DUPL_ID``).

A message may carry a duplicate id in a property (``_AMQ_DUPL_ID``, or ``_HQ_DUPL_ID`` in the HornetQ
dialect), bytes or str. Each address remembers the last ``id_cache_size`` ids it routed, in a ring
(Artemis's DuplicateIDCacheImpl): a message whose id is among them is not routed. With
``persist_id_cache`` every id is journaled (DUPLICATE_ID, type 37) in the same record group or
transaction as its message, and the entry the ring overwrites is deleted with it, so that after any
crash the caches come back exactly as the messages they let through.

Why a module of its own: the rings and their records are one job, apart from routing (post_office)
and from the sessions whose commits they may refuse (transactions).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

from ..errors import ConfigError
from ..limits import ID_CACHE_SIZE_MAX
from ..message_store.message_store import DuplicateIdEntry

__all__ = ["AddressIds", "DuplicateIds", "check_id_cache_size"]


def check_id_cache_size(value: object) -> None:
    """0 (no detection) up to limits.ID_CACHE_SIZE_MAX; ConfigError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= ID_CACHE_SIZE_MAX:
        raise ConfigError("id_cache_size", value, f"must be an integer within 0..{ID_CACHE_SIZE_MAX} (0: no "
                                                  "duplicate detection)")


class AddressIds:
    """One address's last ``size`` duplicate ids, a ring: the next id overwrites the oldest."""

    __slots__ = ("size", "_ring", "_records", "_position")

    def __init__(self, size: int) -> None:
        self.size = size
        self._ring: list[bytes] = []                    # in the order they were added, from _position
        self._records: dict[bytes, int | None] = {}     # id -> its DUPLICATE_ID record id (None: not stored)
        self._position = 0                              # where the next id goes once the ring is full

    def __contains__(self, duplicate_id: bytes) -> bool:
        return duplicate_id in self._records

    def __len__(self) -> int:
        return len(self._ring)

    def replaced_record(self) -> int | None:
        """The record id of the entry the next add overwrites (None: the ring is not full, or that
        entry was not stored)."""
        if len(self._ring) < self.size:
            return None
        return self._records[self._ring[self._position]]

    def add(self, duplicate_id: bytes, record_id: int | None) -> int | None:
        """Remember ``duplicate_id``; the record id of the entry it overwrote (None: none, or not stored)."""
        if len(self._ring) < self.size:
            self._ring.append(duplicate_id)
            self._records[duplicate_id] = record_id
            return None
        oldest = self._ring[self._position]
        replaced = self._records.pop(oldest)
        self._ring[self._position] = duplicate_id
        self._records[duplicate_id] = record_id
        self._position = (self._position + 1) % self.size
        return replaced

    def ids(self) -> list[bytes]:
        """The ids, oldest first."""
        return self._ring[self._position:] + self._ring[:self._position]


class DuplicateIds:
    """The broker's duplicate-id caches, one per address (made at its first id), and what they write.

    ``new_record_id`` hands out record ids from the message ids' counter; ``store`` is the broker's
    MessageStore (None in memory: the caches are kept in memory only, as with ``persist=False``)."""

    __slots__ = ("size", "persist", "property_name", "refused", "_store", "_new_record_id", "_addresses")

    def __init__(self, size: int, persist: bool, property_name: str, store, new_record_id: Callable[[], int]) -> None:
        check_id_cache_size(size)
        if not isinstance(persist, bool):
            raise ConfigError("persist_id_cache", persist, "must be True or False")
        self.size = size
        self.persist = persist and store is not None
        self.property_name = property_name
        self._store = store
        self._new_record_id = new_record_id
        self._addresses: dict[str, AddressIds] = {}
        self.refused = 0            # sends refused as duplicates (Broker.stats()["duplicates"])

    @property
    def enabled(self) -> bool:
        return self.size > 0

    def id_of(self, properties: Mapping | None) -> bytes | None:
        """The duplicate id a message's properties carry (a str as its UTF-8 bytes), None when it
        carries none or detection is off; ConfigError for a value that is neither bytes nor str."""
        if not properties or self.size == 0:
            return None
        value = properties.get(self.property_name)
        if value is None:
            return None
        if isinstance(value, str):
            return value.encode("utf-8")
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        raise ConfigError(self.property_name, value, "a duplicate id must be bytes or str")

    def seen(self, address: str, duplicate_id: bytes) -> bool:
        ids = self._addresses.get(address)
        return ids is not None and duplicate_id in ids

    def entry(self, address: str, duplicate_id: bytes) -> tuple[DuplicateIdEntry | None, int | None]:
        """The record to write for a new id (None when ids are not persisted) and the record id of the
        entry its ring overwrites (to delete in the same group). Nothing is remembered yet."""
        if not self.persist:
            return None, None
        ids = self._addresses.get(address)
        replaced = ids.replaced_record() if ids is not None else None
        return DuplicateIdEntry(self._new_record_id(), address, duplicate_id), replaced

    def remember(self, address: str, duplicate_id: bytes, entry: DuplicateIdEntry | None) -> None:
        """The id into its address's ring, once its message (or its transaction) is stored."""
        ids = self._addresses.get(address)
        if ids is None:
            ids = self._addresses[address] = AddressIds(self.size)
        ids.add(duplicate_id, entry.record_id if entry is not None else None)

    def load(self, entries: list[DuplicateIdEntry]) -> list[int]:
        """The recovered entries (oldest first) back into their rings; the record ids of those beyond
        an address's ring (the cache was made smaller, or a crash came between an entry and the DELETE
        of the one it replaced), which the caller deletes, as Artemis does at load."""
        if self.size == 0:
            return [entry.record_id for entry in entries]
        excess: list[int] = []
        for entry in entries:
            ids = self._addresses.get(entry.address)
            if ids is None:
                ids = self._addresses[entry.address] = AddressIds(self.size)
            if entry.duplicate_id in ids:
                excess.append(entry.record_id)
                continue
            replaced = ids.add(entry.duplicate_id, entry.record_id)
            if replaced is not None:
                excess.append(replaced)
        return excess

    def ids(self, address: str) -> list[bytes]:
        """An address's remembered ids, oldest first (empty for an address without any)."""
        ids = self._addresses.get(address)
        return ids.ids() if ids is not None else []
