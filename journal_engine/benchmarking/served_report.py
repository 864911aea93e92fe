"""The document of `journal-engine bench --served` as a terminal table (rich), JSON (checked against
served_report.schema.json), Markdown (docs/benchmarks.md) and a PNG (matplotlib).

Every rate is the median over the interleaved rounds, with the rounds' min-max beside it; "x best peer"
divides by the fastest broker that is not ours in the same workload; p50/p99 (ms, send -> RECEIPT)
and fdatasyncs a message (ours only: its store's counter) are medians over the rounds too.
"""
from __future__ import annotations

from pathlib import Path

from . import report
from .report import rate, ratio

SCHEMA_FILE = "served_report.schema.json"
PLOT_FILE = "served-brokers.png"


def schema() -> dict:
    """The JSON schema of the served report, shipped in the package."""
    return report.schema(SCHEMA_FILE)


write_json = report.write_json


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if value < 10 else f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _latency(result: dict) -> str:
    return "-" if result["p99_ms"] is None else f"{_ms(result['p50_ms'])} / {_ms(result['p99_ms'])}"


def _syncs(result: dict) -> str:
    value = result["fdatasyncs_per_message"]
    return "-" if value is None else f"{value:.3g}"


def workloads(document: dict, part: str) -> dict[str, list[dict]]:
    """workload -> results, in the order they ran."""
    grouped: dict[str, list[dict]] = {}
    for result in document["results"]:
        if result["part"] == part:
            grouped.setdefault(result["workload"], []).append(result)
    return grouped


def facts(document: dict) -> list[tuple[str, str]]:
    machine, disk = document["machine"], document["machine"]["disk"]
    celery = document["celery"]
    return [
        ("machine", f"{machine['cpu']}, nproc {machine['nproc']}, {machine['memory_gib']} GiB; kernel "
                    f"{machine['kernel']}; Python {machine['python']}; {machine['date']}"),
        ("data", f"{disk['path']}: {disk['fstype']} on {disk['device']}"
                 + (" (TMPFS: no disk)" if disk["tmpfs"] else "")),
        ("run", f"{document['rounds']} interleaved round(s), a fresh broker per workload"
                + (f" warmed up {document['warm_up_s']:g} s" if document["warm_up_s"] else "")
                + "; receipted workloads "
                f"{document['seconds']:g} s; ingest {document['messages']} messages; {document['message_bytes']}-byte "
                f"persistent messages, prefetch {document['prefetch']}"
                + (f"; Celery {celery['tasks']} tasks, prefork -c {celery['concurrency']}" if celery["enabled"] else "")
                + f"; took {document['duration_s']:.0f} s; load average at start "
                  f"{' / '.join(f'{x:.2f}' for x in machine['loadavg_at_start'])}, at end "
                  f"{' / '.join(f'{x:.2f}' for x in document['loadavg_at_end'])}"),
    ] + [(f"{peer['name']}", f"{peer['version']}" + (f" ({peer['banner']})" if peer["banner"] and peer["banner"] not in
                                                       peer["version"] else ""))
         for peer in document["peers"]]


def skipped_lines(document: dict) -> list[str]:
    grouped: dict[tuple[str, str, str], list[str | None]] = {}
    for skip in document["skipped"]:
        grouped.setdefault((skip["target"], skip["part"], skip["reason"]), []).append(skip["workload"])
    return [f"skipped: {target} ({part}, {'every workload' if None in names else ', '.join(names)}): {reason}"
            for (target, part, reason), names in grouped.items()]


def print_tables(document: dict, console) -> None:
    from rich.table import Table
    console.print(f"[bold]journal-engine bench --served[/bold]{' (quick)' if document['quick'] else ''}")
    for label, value in facts(document):
        console.print(f"  {label}: {value}")
    titles = {"stomp": "STOMP: receipted SENDs, ingest without receipts, drain with ACKs (messages/s)",
              "celery": "Celery: add.delay, acks_late, first delay -> last task run (tasks/s)"}
    for part, title in titles.items():
        grouped = workloads(document, part)
        if not grouped:
            continue
        table = Table(title=title, title_justify="left")
        columns = [("workload", "left"), ("target", "left"), ("median/s", "right"), ("min-max", "right"),
                   ("x best peer", "right")]
        columns += [("p50 / p99 ms", "right"), ("fdatasyncs/msg", "right")] if part == "stomp" else \
            [("publish/s", "right")]
        for column, justify in columns:
            table.add_column(column, justify=justify)
        for workload, results in grouped.items():
            for index, result in enumerate(results):
                name = f"[bold]{result['target']}[/bold]" if result["ours"] else result["target"]
                cells = [workload if index == 0 else "", name, rate(result["median_per_s"]),
                         f"{rate(result['min_per_s'])}-{rate(result['max_per_s'])}",
                         ratio(result["ratio_to_best_peer"]) if result["ours"] else ""]
                cells += [_latency(result), _syncs(result)] if part == "stomp" else [rate(result["publish_per_s"])]
                table.add_row(*cells, end_section=index == len(results) - 1)
        console.print(table)
    for line in skipped_lines(document):
        console.print(f"[yellow]{line}[/yellow]")
    console.print("median of the rounds, min-max across them; x best peer: ours against the fastest broker that is "
                  "not ours; p50/p99: send -> RECEIPT; fdatasyncs/msg: our store's own counter (the peers have none)")


def markdown(document: dict) -> str:
    """A table per part for docs/benchmarks.md: a row per workload, a column per target."""
    lines = ["| fact | value |", "|---|---|"] + [f"| {label} | {value} |" for label, value in facts(document)]
    for part in ("stomp", "celery"):
        grouped = workloads(document, part)
        if not grouped:
            continue
        targets = list(dict.fromkeys(r["target"] for results in grouped.values() for r in results))
        lines += ["", "| workload | " + " | ".join(targets) + " | ours x best peer |",
                  "|---|" + "---|" * len(targets) + "---|"]
        for workload, results in grouped.items():
            by_target = {r["target"]: r for r in results}
            row = [workload]
            for target in targets:
                result = by_target.get(target)
                if result is None:
                    row.append("-")
                    continue
                cell = f"{rate(result['median_per_s'])} ({rate(result['min_per_s'])}–{rate(result['max_per_s'])})"
                if result["p99_ms"] is not None:
                    cell += f", p50 {_ms(result['p50_ms'])} / p99 {_ms(result['p99_ms'])} ms"
                if result["fdatasyncs_per_message"] is not None:
                    cell += f", {_syncs(result)} fdatasyncs/msg"
                row.append(cell)
            ours = [r for r in results if r["ours"] and r["ratio_to_best_peer"] is not None]
            row.append("; ".join(f"{r['target']} {ratio(r['ratio_to_best_peer'])} ({r['best_peer']})" for r in ours)
                       or "-")
            lines.append("| " + " | ".join(row) + " |")
    skipped = skipped_lines(document)
    if skipped:
        lines += [""] + [f"- {line}" for line in skipped]
    return "\n".join(lines) + "\n"


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _present(grouped: dict[str, list[dict]], targets: list[str]) -> list[str]:
    return [t for t in targets if any(r["target"] == t for results in grouped.values() for r in results)]


def _bars(axis, grouped: dict[str, list[dict]], targets: list[str], colours: dict, value: str, low: str | None,
          high: str | None) -> None:
    targets = _present(grouped, targets)
    width = 0.8 / max(1, len(targets))
    for offset, target in enumerate(targets):
        xs, heights, errors_low, errors_high = [], [], [], []
        for index, results in enumerate(grouped.values()):
            result = next((r for r in results if r["target"] == target), None)
            if result is None or result[value] is None:
                continue
            xs.append(index - 0.4 + width * (offset + 0.5))
            heights.append(result[value])
            errors_low.append(result[value] - result[low] if low else 0)
            errors_high.append(result[high] - result[value] if high else 0)
        if xs:
            ours = any(r["ours"] for results in grouped.values() for r in results if r["target"] == target)
            axis.bar(xs, heights, width, label=target, color=colours[target], edgecolor="black" if ours else None,
                     linewidth=1.2 if ours else 0, yerr=[errors_low, errors_high] if low else None, capsize=3)
    axis.set_xticks(range(len(grouped)), list(grouped), fontsize=8)
    axis.set_yscale("log")
    axis.grid(True, axis="y", which="both", alpha=0.3)


def write_plot(document: dict, path: Path) -> Path:
    """Grouped bars: messages/s per workload and target (whiskers: min-max of the rounds), p50 and p99
    of send -> RECEIPT per receipted workload, and Celery tasks/s."""
    plt = _pyplot()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    stomp, celery = workloads(document, "stomp"), workloads(document, "celery")
    receipted = {name: results for name, results in stomp.items() if name.startswith("receipted")}
    targets = list(dict.fromkeys(r["target"] for r in document["results"]))
    palette = plt.get_cmap("tab10")
    colours = {target: palette(index % 10) for index, target in enumerate(targets)}
    panels = [panel for panel in ("stomp", "latency", "celery")
              if {"stomp": stomp, "latency": receipted, "celery": celery}[panel]] or ["stomp"]
    widths = [max(2, len({"stomp": stomp, "latency": receipted, "celery": celery}[panel])) for panel in panels]
    figure, axes = plt.subplots(1, len(panels), figsize=(sum(widths) * 1.6 + 1.5, 4.4), squeeze=False,
                                gridspec_kw={"width_ratios": widths})
    for axis, panel in zip(axes[0], panels):
        if panel == "stomp":
            _bars(axis, stomp, targets, colours, "median_per_s", "min_per_s", "max_per_s")
            axis.set_title("STOMP, 256 B persistent messages", fontsize=10)
            axis.set_ylabel("messages/s (median, min-max)")
        elif panel == "latency":
            _bars(axis, receipted, targets, colours, "p99_ms", None, None)
            present = _present(receipted, targets)
            for offset, target in enumerate(present):
                width = 0.8 / max(1, len(present))
                points = [(index - 0.4 + width * (offset + 0.5), r["p50_ms"])
                          for index, results in enumerate(receipted.values())
                          for r in results if r["target"] == target and r["p50_ms"] is not None]
                if points:
                    axis.plot([p[0] for p in points], [p[1] for p in points], "k_", markersize=10)
            axis.set_title("send -> RECEIPT: p99 bars, p50 ticks", fontsize=10)
            axis.set_ylabel("ms (median of the rounds)")
        else:
            _bars(axis, celery, targets, colours, "median_per_s", "min_per_s", "max_per_s")
            axis.set_title("Celery, acks_late, prefork -c 2", fontsize=10)
            axis.set_ylabel("tasks/s (median, min-max)")
    handles = {}
    for axis in axes[0]:
        for handle, label in zip(*axis.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    figure.legend(list(handles.values()), list(handles), loc="upper center", ncol=min(6, len(handles)), fontsize=9)
    machine = document["machine"]
    disk = machine["disk"]
    figure.suptitle(f"{document['rounds']} interleaved rounds on {disk['fstype']} {disk['device']}, "
                    f"nproc {machine['nproc']}, {machine['date']}", y=0.005, va="bottom", fontsize=8)
    figure.tight_layout(rect=(0, 0.04, 1, 0.9))
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path
