"""The bench document as a terminal table (rich), as JSON (checked against report.schema.json) and as
Markdown for docs/benchmarks.md.

Every number is a median over the interleaved rounds; "spread" is (max - min) / median of the rounds;
"x best peer" divides by the best peer's median in the same cell (ours are never the peer); "of limit"
divides by the machine's ceiling for the cell (machine.py), which a store sharing one sync among
threads can pass.
"""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

SCHEMA_FILE = "report.schema.json"
DOC_START = "<!-- bench-command:results:start -->"
DOC_END = "<!-- bench-command:results:end -->"
SCENARIO_TITLES = {
    "append": "Append: record size x records per sync x sync mode x threads",
    "send-receive-ack": "Broker loop: send -> receive -> ack, 1 thread (messages/s)",
    "rollback-redeliver": "Broker loop: receive -> rollback -> redeliver, 1 thread (redeliveries/s)",
    "recovery": "Recovery: open and read every record back, warm page cache",
}


def schema(file_name: str = SCHEMA_FILE) -> dict:
    """The JSON schema of the document (``file_name``: another report's), shipped in the package."""
    return json.loads(resources.files(__package__).joinpath(file_name).read_text(encoding="utf-8"))


def result_console():
    """The rich console the tables go to: stdout; a file or a pipe has no terminal width to fit, so it
    gets one wide enough to keep each row whole."""
    from rich.console import Console
    out = Console()
    return out if out.is_terminal else Console(width=160)


def present(document: dict, console, out, print_tables, outputs) -> None:
    """Print the tables on ``out`` (default: stdout), then write every file asked for: ``outputs`` holds
    (path or None, writer(document, path) -> the paths written or None, what it is). The files are
    written even when printing fails (a reader of stdout gone away: ``journal-engine bench | head``);
    that error is raised after them."""
    try:
        print_tables(document, result_console() if out is None else out)
    finally:
        for path, write, what in outputs:
            if path is None:
                continue
            written = write(document, path)
            for each in written if isinstance(written, list) else [written or path]:
                console.print(f"{what} written to {each}")


def write_json(document: dict, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


def rate(value: float | None) -> str:
    """Records per second, short: 950, 12.3k, 1.48M."""
    if value is None:
        return "-"
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e4:
        return f"{value / 1e3:.0f}k"
    if value >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.0f}"


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def cells(document: dict) -> dict[str, dict[str, list[dict]]]:
    """scenario -> cell key -> results, in the order they ran."""
    grouped: dict[str, dict[str, list[dict]]] = {}
    for result in document["results"]:
        grouped.setdefault(result["scenario"], {}).setdefault(result["cell"]["key"], []).append(result)
    return grouped


def machine_facts(document: dict) -> list[tuple[str, str]]:
    """(label, value) pairs: the machine, the directory, its limits and the run."""
    facts, limits = document["machine"], document["limits"]
    disk, sync = facts["disk"], limits["raw_sync_loop"]
    bandwidth = limits["bandwidth"]
    return [
        ("machine", f"{facts['cpu']}, nproc {facts['nproc']}, {facts['memory_gib']} GiB; kernel {facts['kernel']}; "
                    f"Python {facts['python']}; journal_engine {facts['journal_engine_version']} "
                    f"({facts['journal_engine_implementation']} core); {facts['date']}"),
        ("directory", f"{disk['path']}: {disk['fstype']} on {disk['device']} (rotational={disk['rotational']}"
                      + (", TMPFS: no disk is measured" if disk["tmpfs"] else "") + ")"),
        ("raw sync loop", f"4 KiB pwrite + fdatasync, {sync['samples']} samples: {sync['syncs_per_s']} syncs/s; "
                          f"p50 {sync['p50_us']} us, p90 {sync['p90_us']} us, p99 {sync['p99_us']} us, "
                          f"p99.9 {sync['p999_us']} us"),
        ("bandwidth", f"sequential write {bandwidth['write_synced_mb_per_s']} MB/s to the disk (fdatasync at the end, "
                      f"{bandwidth['bytes'] >> 20} MiB), {bandwidth['write_cached_mb_per_s']} MB/s into the page cache; "
                      f"warm read {bandwidth['read_cached_mb_per_s']} MB/s"),
    ] + ([("limits measured", "; ".join(
            f"{when}: {m['raw_sync_loop']['syncs_per_s']} syncs/s, {m['bandwidth']['write_synced_mb_per_s']} MB/s synced, "
            f"{m['bandwidth']['write_cached_mb_per_s']} MB/s cached"
            for when, m in zip(("before the matrix", "after it"), document["limits_measured"]))
            + " (the ceilings use the better of each)")] if document.get("limits_measured") else []) + [
        ("run", f"{document['rounds']} interleaved rounds per cell; took {document['duration_s']:.0f} s (estimated "
                f"{document['estimated_s']:.0f} s); load average at start "
                f"{' / '.join(f'{x:.2f}' for x in facts['loadavg_at_start'])}, at end "
                f"{' / '.join(f'{x:.2f}' for x in document['loadavg_at_end'])}"),
    ]


def skipped_lines(document: dict) -> list[str]:
    """One line per store, scenario and reason, naming the cells (all of them: null)."""
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for skip in document["skipped"]:
        grouped.setdefault((skip["store"], skip["scenario"], skip["reason"]), []).append(skip["cell"])
    lines = []
    for (store, scenario, reason), cells_skipped in grouped.items():
        where = "every cell" if None in cells_skipped else \
            (cells_skipped[0] if len(cells_skipped) == 1 else f"{len(cells_skipped)} cells: {', '.join(cells_skipped)}")
        lines.append(f"skipped: {store} ({scenario}, {where}): {reason}")
    return lines


def print_tables(document: dict, console) -> None:
    from rich.table import Table
    console.print(f"[bold]journal-engine bench[/bold] ({document['matrix']} matrix)")
    for label, value in machine_facts(document):
        console.print(f"  {label}: {value}")
    for scenario, by_cell in cells(document).items():
        table = Table(title=SCENARIO_TITLES.get(scenario, scenario), title_justify="left")
        for column, justify in (("cell", "left"), ("store", "left"), ("records/s", "right"), ("spread", "right"),
                                ("x best peer", "right"), ("of limit", "right"), ("limit/s", "right"),
                                ("sync p50/p99 us", "right")):
            table.add_column(column, justify=justify)
        for key, results in by_cell.items():
            for index, result in enumerate(sorted(results, key=lambda r: -r["median_records_per_s"])):
                latency = result.get("sync_latency_us")
                name = f"[bold]{result['store']}[/bold]" if result["ours"] else result["store"]
                table.add_row(key if index == 0 else "", name, rate(result["median_records_per_s"]),
                              _percent(result["spread_percent"]), ratio(result["ratio_to_best_peer"]),
                              ratio(result["fraction_of_limit"]),
                              rate(result["limit_records_per_s"]) if index == 0 else "",
                              f"{latency['p50_us']:.0f}/{latency['p99_us']:.0f}" if latency else "-",
                              end_section=index == len(results) - 1)
        console.print(table)
    for line in skipped_lines(document):
        console.print(f"[yellow]{line}[/yellow]")
    console.print("records/s: median of the rounds; spread: (max-min)/median; x best peer: against the fastest "
                  "store that is not ours in the cell; of limit: against the machine's ceiling for the cell "
                  "(limit/s; threads sharing one sync can pass it)")


def _store_order(results: list[dict]) -> list[str]:
    names: list[str] = []
    for result in results:
        if result["store"] not in names:
            names.append(result["store"])
    return names


def markdown(document: dict) -> str:
    """The tables for docs/benchmarks.md: per scenario, a row per cell, a column per store, and the
    journal's ratios (to the best peer, to the limit)."""
    lines = ["| fact | value |", "|---|---|"]
    for label, value in machine_facts(document):
        lines.append(f"| {label} | {value} |")
    for scenario, by_cell in cells(document).items():
        all_results = [result for results in by_cell.values() for result in results]
        stores = _store_order(all_results)
        ours = "journal" if "journal" in stores else next((s for s in stores if s.startswith("broker-journal")), None)
        lines += ["", f"#### {SCENARIO_TITLES.get(scenario, scenario)}", "",
                  "| cell | limit/s | " + " | ".join(stores) + f" | {ours} x best peer | {ours} of limit |",
                  "|---|---:|" + "---:|" * len(stores) + "---:|---:|"]
        for key, results in by_cell.items():
            by_store = {result["store"]: result for result in results}
            row = [key, rate(results[0]["limit_records_per_s"])]
            for store in stores:
                result = by_store.get(store)
                row.append("-" if result is None else
                           f"{rate(result['median_records_per_s'])} ±{result['spread_percent'] / 2:.0f}%")
            mine = by_store.get(ours)
            row.append(f"{ratio(mine['ratio_to_best_peer'])} ({mine['best_peer']})" if mine else "-")
            row.append(ratio(mine["fraction_of_limit"]) if mine else "-")
            lines.append("| " + " | ".join(row) + " |")
    skipped = skipped_lines(document)
    if skipped:
        lines += [""] + [f"- {line}" for line in skipped]
    return "\n".join(lines) + "\n"


def update_doc(document: dict, path: Path) -> None:
    """Rewrites the part of a Markdown file between DOC_START and DOC_END with markdown(document);
    the prose around the markers is written by hand."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    start, end = text.find(DOC_START), text.find(DOC_END)
    if start < 0 or end < start:
        raise ValueError(f"{path}: no {DOC_START} ... {DOC_END} section to rewrite")
    path.write_text(text[:start + len(DOC_START)] + "\n" + markdown(document) + text[end:], encoding="utf-8")
