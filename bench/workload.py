"""The record every benchmark writes: defined once, in journal_engine.benchmarking.workloads, which
`journal-engine bench` uses too (256 bytes of fixed random data: no peer gains from compression); the
percentiles the latency cases report; and the rounds' directories and their check afterwards."""
from __future__ import annotations

import shutil
from pathlib import Path

from journal_engine.benchmarking.workloads import BODY, KEY, RECORD_BYTES, USER_TYPE

__all__ = ["BODY", "KEY", "RECORD_BYTES", "USER_TYPE", "percentiles", "Rounds", "close_and_check"]


def percentiles(values: list[float]) -> dict[str, float]:
    """p50, p90, p99 and the maximum of `values`, rounded to 3 decimals (in the unit they came in)."""
    values = sorted(values)
    at = {label: values[min(len(values) - 1, int(fraction * len(values)))]
          for label, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))}
    return {**{label: round(value, 3) for label, value in at.items()}, "max": round(values[-1], 3)}


class Rounds:
    """Hands each round a fresh directory under the case's (``close_and_check`` removes it afterwards)."""

    def __init__(self, case_dir: Path) -> None:
        self.case_dir = case_dir
        self.count = 0

    def fresh(self) -> Path:
        self.count += 1
        path = self.case_dir / f"round-{self.count}"
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir()
        return path


def close_and_check(store, records: int, directory: Path, *, all_durable: bool = False) -> None:
    """After a round, untimed: the store (a Journal or a record store) closed and its directory removed,
    every record of the round live in it (and with ``all_durable``, all it appended durable before the close)."""
    try:
        live = store.stats()["live_records"]
        if all_durable:
            assert store.durable_bytes == store.appended_bytes
    finally:
        store.close()
    shutil.rmtree(directory, ignore_errors=True)
    assert live == records, f"{live} live records after a round of {records}"
