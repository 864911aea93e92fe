"""The pages: Jinja2 templates (package data, autoescaped) and what each page's plots are made of.

The templates are in ``templates/``, the stylesheet and the little script in ``static/``; both are
package data (pyproject.toml, MANIFEST.in), so a console in a closed network fetches nothing.
"""
from __future__ import annotations

import datetime
import json
import os
from importlib import resources

import jinja2

from .plots import bar_plot, line_plot, sparkline

__all__ = ["environment", "report_plots", "read_report", "STATIC_DIRECTORY"]

STATIC_DIRECTORY = str(resources.files(__package__) / "static")


def _when(ms) -> str:
    """Epoch ms as UTC time, or '-'."""
    if not isinstance(ms, (int, float)) or isinstance(ms, bool) or ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _bytes(value) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(value)


def _delay(ms) -> str:
    if not isinstance(ms, int):
        return "-"
    return f"{ms} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"


def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader(__package__, "templates"),
                             autoescape=jinja2.select_autoescape(["html"]), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters.update(when=_when, size=_bytes, delay=_delay, sparkline=sparkline,
                       rate=lambda value: f"{value:.1f}")
    return env


def read_report(path: str) -> dict:
    """A crash-test or bench ``--json`` report: its kind, its name and its plots (or why not)."""
    name = os.path.basename(path)
    try:
        with open(path, encoding="utf-8") as source:
            document = json.load(source)
    except (OSError, ValueError) as error:
        return {"name": name, "path": path, "kind": "unreadable", "problem": str(error), "plots": []}
    return {"name": name, "path": path, **report_plots(document)}


def report_plots(document) -> dict:
    """Plots of a report: a crash campaign's runs a fault mode and its verdict; a bench run's median
    rates a case with their min-max; anything else is named unknown."""
    if isinstance(document, dict) and isinstance(document.get("runs"), dict) and "violations" in document:
        runs = sorted((str(mode), float(count)) for mode, count in document["runs"].items()
                      if isinstance(count, (int, float)))
        violations = document["violations"]
        count = len(violations) if isinstance(violations, list) else violations     # the report lists them
        summary = (f"seed {document.get('seed')}, size {document.get('size')}, store {document.get('store')}: "
                   f"{count} violations, {sum(count for _mode, count in runs):.0f} runs, "
                   f"{document.get('acknowledged')} acknowledged calls, {document.get('duration_s')} s")
        return {"kind": "crash-test", "summary": summary, "healthy": count == 0,
                "plots": [bar_plot(runs, title="crash runs by fault mode", unit=" runs")]}
    if isinstance(document, dict) and isinstance(document.get("results"), list):
        rows = []
        for result in document["results"]:
            if not isinstance(result, dict) or not isinstance(result.get("median_records_per_s"), (int, float)):
                continue
            cell = result.get("cell") if isinstance(result.get("cell"), dict) else {}
            label = f"{result.get('scenario', '?')} {cell.get('key', '')} {result.get('store', '')}".strip()
            rows.append((label, float(result["median_records_per_s"]), float(result.get("min_records_per_s") or 0),
                         float(result.get("max_records_per_s") or 0)))
        rows.sort(key=lambda row: -row[1])
        rows = rows[:24]
        machine = document.get("machine") if isinstance(document.get("machine"), dict) else {}
        summary = (f"{document.get('schema', 'bench')} matrix {document.get('matrix', '?')}, "
                   f"{len(document['results'])} results, {machine.get('date', '')} on {machine.get('cpu', '?')}")
        plots = [bar_plot([(label, median) for label, median, _low, _high in rows],
                          title="median records/s (the 24 fastest cases)", unit="/s")]
        spread = {label: [(0.0, low), (1.0, median), (2.0, high)] for label, median, low, high in rows[:4]}
        if spread:
            plots.append(line_plot(spread, title="min, median, max of the four fastest cases",
                                   x_label="0 min, 1 median, 2 max", y_label="records/s"))
        return {"kind": "bench", "summary": summary, "healthy": True, "plots": plots}
    return {"kind": "unknown", "summary": "neither a crash-test nor a bench report", "healthy": False, "plots": []}
