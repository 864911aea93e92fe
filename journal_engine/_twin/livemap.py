"""Python twin of the compiled live set (pyx/journal_engine/_livemap.pyx)."""
from __future__ import annotations


class LiveMap(dict):
    """record id -> bytes its frames occupy; `total_bytes` follows every change."""

    def __init__(self, expected: int = 0) -> None:
        super().__init__()
        self.total_bytes = 0

    def contains(self, key: int) -> bool:
        return key in self

    def get_bytes(self, key: int) -> int:
        return dict.get(self, key, -1)

    def put(self, key: int, nbytes: int) -> None:
        assert nbytes >= 0
        self.total_bytes += nbytes - dict.get(self, key, 0)
        dict.__setitem__(self, key, nbytes)

    def add_bytes(self, key: int, nbytes: int) -> None:
        dict.__setitem__(self, key, dict.__getitem__(self, key) + nbytes)
        self.total_bytes += nbytes

    def remove(self, key: int) -> int:
        nbytes = dict.pop(self, key, -1)
        if nbytes >= 0:
            self.total_bytes -= nbytes
        return nbytes

    def __setitem__(self, key: int, nbytes: int) -> None:
        self.put(key, nbytes)

    def __delitem__(self, key: int) -> None:
        if self.remove(key) < 0:
            raise KeyError(key)

    def pop(self, key: int, *default):
        nbytes = self.remove(key)
        if nbytes < 0:
            if default:
                return default[0]
            raise KeyError(key)
        return nbytes
