"""`journal-engine analyze PATH... [--master URL] [--out DIR] [--parquet]`: the ready analyses, on Spark.

Directories are journals (or brokers' and message stores' directories, their journals inside); JSON
files are reports of `journal-engine crash-test --json` or `journal-engine bench --json`. One Spark
session serves the whole command: local[*] by default, any cluster with ``--master`` (or under
spark-submit, whose ``--master`` holds). Tables go to the terminal, PNG plots (and with ``--parquet``
the records and every table as Parquet) to ``--out``.
"""
from __future__ import annotations

import json
import os

from ..errors import ConfigError
from .columns import COLUMNS
from .files import find_stores

TABLE_ROWS_MAX = 20
#: the columns the analyses read: every column but the bodies (most of a journal's bytes)
ANALYSIS_SCHEMA = ", ".join(f"`{column.name}` {column.spark_type}" for column in COLUMNS if column.name != "body")


def split_paths(paths: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(journal paths, crash-test reports, bench reports) among the command's paths."""
    journals, crash_reports, bench_reports = [], [], []
    for path in paths:
        if os.path.isdir(path) or "://" in path:      # a directory, or a URI the source reads (file://, s3://)
            journals.append(path)
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                document = json.load(handle)
        except (OSError, ValueError) as exc:
            raise ConfigError("PATH", path, f"neither a directory nor a JSON report ({exc})") from None
        if isinstance(document, dict) and document.get("schema") == "journal-engine-bench":
            bench_reports.append(path)
        elif isinstance(document, dict) and "violations" in document:
            crash_reports.append(path)
        else:
            raise ConfigError("PATH", path, "a JSON file that is neither a crash-test nor a bench report")
    return journals, crash_reports, bench_reports


def print_table(title: str, frame) -> list:
    """Print the first rows of a DataFrame as an aligned table; returns the rows printed."""
    rows = frame.limit(TABLE_ROWS_MAX + 1).collect()
    print(f"\n== {title}")
    if not rows:
        print("(none)")
        return rows
    names = frame.columns
    cells = [[_cell(row[name]) for name in names] for row in rows[:TABLE_ROWS_MAX]]
    widths = [max(len(name), *(len(line[i]) for line in cells)) for i, name in enumerate(names)]
    print("  ".join(name.ljust(width) for name, width in zip(names, widths)))
    for line in cells:
        print("  ".join(cell.rjust(width) if _numeric(cell) else cell.ljust(width) for cell, width in zip(line, widths)))
    if len(rows) > TABLE_ROWS_MAX:
        print(f"... (first {TABLE_ROWS_MAX} rows; --parquet writes them all)")
    return rows


def _cell(value) -> str:
    return "" if value is None else f"{value:.1f}" if isinstance(value, float) else str(value)


def _numeric(text: str) -> bool:
    return text.replace(".", "", 1).lstrip("-").isdigit()


def _bar_plot(path: str, title: str, labels: list, series: dict, ylabel: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(max(6, 0.5 * len(labels) + 2), 4))
    bottom = [0] * len(labels)
    for name, values in series.items():
        axes.bar([str(label) for label in labels], values, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values)]
    axes.set_title(title)
    axes.set_ylabel(ylabel)
    if len(series) > 1:
        axes.legend()
    axes.tick_params(axis="x", labelrotation=45 if len(labels) > 8 else 0)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)


def run(paths: list[str], master: str | None, out: str | None, parquet: bool,
        sent_time_property: str | None = None) -> list[tuple[str, int | None, str]]:
    """Print the tables (and write the plots and Parquet); return every damaged place the journals hold,
    as (path, offset, reason): the command exits 1 when there is one (docs/cli.md), as ``verify``,
    ``stats``, ``export`` and ``dlq list`` do, since the analyses count only what could be read."""
    journals, crash_reports, bench_reports = split_paths(paths)
    for path in journals:       # a directory with no store is refused in one line, before Spark starts
        find_stores(path)
    from .. import analytics
    from .environment import session
    from .source import register

    from pyspark import StorageLevel
    from pyspark.sql import SparkSession

    if out:
        os.makedirs(out, exist_ok=True)
    borrowed = SparkSession.getActiveSession()      # a caller's session (a notebook, a test) is used as it is
    spark = borrowed or session(master, quiet_console=True)
    if borrowed:
        register(borrowed)
    cached = []     # every table is computed once: printed, plotted and written from the cache

    def once(frame, level=StorageLevel.MEMORY_AND_DISK):
        cached.append(frame.persist(level))
        return frame

    damaged: list[tuple[str, int | None, str]] = []
    try:
        tables = {}
        if journals:
            # the analyses' columns (no bodies) on the executors' disks: rows of a large journal do not fit in
            # their memory, and trying first (MEMORY_AND_DISK) unrolled every partition, warned, then spilled
            records = once(spark.read.format("journal_engine").schema(ANALYSIS_SCHEMA).load(journals),
                           StorageLevel.DISK_ONLY)
            damage = records.where("damage is not null").select("path", "offset", "damage")
            tables = {
                "damage": damage,
                "dead-letters": analytics.dead_letters(records),
                "delivery-counts": analytics.delivery_count_histogram(records),
                "redelivery-delays": analytics.redelivery_delays(records),
                "time-in-queue": analytics.time_in_queue(records, sent_time_property=sent_time_property),
                "segment-bytes": analytics.segment_bytes(records),
            }
            if parquet and out:     # every column, bodies too
                spark.read.format("journal_engine").load(journals).write.mode("overwrite") \
                    .parquet(os.path.join(out, "records.parquet"))
        if crash_reports:
            tables["crash-tests"] = analytics.crash_test_summary(analytics.read_reports(spark, crash_reports))
        if bench_reports:
            tables["bench"] = analytics.bench_summary(analytics.read_reports(spark, bench_reports))
        tables = {name: once(frame) for name, frame in tables.items()}
        shown = {name: print_table(name, frame) for name, frame in tables.items()}
        if "damage" in tables:      # every place, not only the rows the table shows (it is cached)
            damaged = [(row.path, row.offset, row.damage) for row in tables["damage"].collect()]
        if out:
            _plots(out, tables, shown)
            if parquet:
                for name, frame in tables.items():
                    frame.write.mode("overwrite").parquet(os.path.join(out, f"{name}.parquet"))
            print(f"\nwritten to {out}")
    finally:
        for frame in cached:
            frame.unpersist()
        if not borrowed:
            spark.stop()
    return damaged


def _plots(out: str, tables: dict, shown: dict) -> None:
    """A PNG per analysis with something to draw (whole tables: they are small by construction)."""
    if "delivery-counts" in tables:
        rows = tables["delivery-counts"].collect()
        if rows:
            _bar_plot(os.path.join(out, "delivery-counts.png"), "References by persisted delivery count",
                      [row.delivery_count for row in rows], {"references": [row.references for row in rows]},
                      "references")
    if "segment-bytes" in tables:
        rows = tables["segment-bytes"].collect()
        if rows:
            _bar_plot(os.path.join(out, "segment-bytes.png"), "Live and dead bytes per journal file",
                      [f"{os.path.basename(os.path.dirname(row.path))}/{row.file_id}" for row in rows],
                      {"live": [row.live_bytes for row in rows], "dead": [row.dead_bytes for row in rows]}, "bytes")
    if shown.get("dead-letters"):
        rows = tables["dead-letters"].collect()
        _bar_plot(os.path.join(out, "dead-letters.png"), "Dead letters by original queue",
                  [f"{row.original_address}/{row.original_queue}" for row in rows],
                  {"messages": [row.messages for row in rows]}, "messages")
    if shown.get("redelivery-delays"):
        rows = tables["redelivery-delays"].where("delay_ms is not null").groupBy("delay_ms").count() \
            .orderBy("delay_ms").collect()
        if rows:
            _bar_plot(os.path.join(out, "redelivery-delays.png"), "Redelivery delays",
                      [row.delay_ms for row in rows], {"redeliveries": [row["count"] for row in rows]}, "redeliveries")
    if shown.get("bench"):
        rows = tables["bench"].collect()
        _bar_plot(os.path.join(out, "bench.png"), "Median rate per bench cell (over the reports)",
                  [f"{row.scenario} {row.cell} {row.store}" for row in rows],
                  {"records/s": [row.median_records_per_s for row in rows]}, "records/s")
