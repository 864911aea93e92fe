"""The stores a journal_engine user would pick instead: defined once, in
journal_engine.benchmarking.peers (their settings and why they are fair are written there), which
`journal-engine bench` runs too."""
from __future__ import annotations

from journal_engine.benchmarking.peers import KEY, BufferedRawFile, LmdbStore, RawFile, RocksStore, SqliteStore

__all__ = ["KEY", "BufferedRawFile", "LmdbStore", "RawFile", "RocksStore", "SqliteStore"]
