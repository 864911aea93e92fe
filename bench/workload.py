"""The record every benchmark writes: defined once, in journal_engine.benchmarking.workloads, which
`journal-engine bench` uses too (256 bytes of fixed random data: no peer gains from compression)."""
from __future__ import annotations

from journal_engine.benchmarking.workloads import BODY, KEY, RECORD_BYTES, USER_TYPE

__all__ = ["BODY", "KEY", "RECORD_BYTES", "USER_TYPE"]
