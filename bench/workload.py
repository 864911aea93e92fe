"""The record every benchmark writes: defined once, in journal_engine.benchmarking.workloads, which
`journal-engine bench` uses too (256 bytes of fixed random data: no peer gains from compression); and
the percentiles the latency cases report."""
from __future__ import annotations

from journal_engine.benchmarking.workloads import BODY, KEY, RECORD_BYTES, USER_TYPE

__all__ = ["BODY", "KEY", "RECORD_BYTES", "USER_TYPE", "percentiles"]


def percentiles(values: list[float]) -> dict[str, float]:
    """p50, p90, p99 and the maximum of `values`, rounded to 3 decimals (in the unit they came in)."""
    values = sorted(values)
    at = {label: values[min(len(values) - 1, int(fraction * len(values)))]
          for label, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))}
    return {**{label: round(value, 3) for label, value in at.items()}, "max": round(values[-1], 3)}
