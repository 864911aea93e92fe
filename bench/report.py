"""Turn a pytest-benchmark JSON of bench/ into the tables and the chart of docs/benchmarks.md.

    python -m pytest bench/ --benchmark-only --benchmark-json=bench-results.json
    python bench/report.py bench-results.json --doc docs/benchmarks.md --plot docs/benchmarks-journal.png

Without --doc the markdown is printed. With --doc, the parts of the document between
``<!-- bench:NAME:start -->`` and ``<!-- bench:NAME:end -->`` markers (NAME = machine,
targets, results, verdict) are replaced and the rest of the text is left as written.
Rates come from ``extra_info`` (records per round / median round time), which
bench/conftest.py records for every case.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from journal_engine.benchmarking.report import rate

GROUP_TITLES = {
    "a": "a. One sync per record (1 thread)",
    "b": "b. 16 threads, each record synced",
    "c": "c. One sync per 1000 records",
    "d": "d. No sync, one call per record",
    "e": "e. Load (recovery / full scan) of 1M records",
}


JOURNAL_GROUP = re.compile(r"^([a-e]): ")   # the groups of bench/test_bench_journal.py


@dataclass
class Case:
    group: str          # "a".."e"
    case: str           # "journal", "lmdb", "raw-append", ...
    settings: str
    records: int
    rounds: int
    median_s: float
    min_s: float
    rate: float         # records/s from the median round
    best_rate: float    # records/s from the fastest round
    mb_per_s: float


@dataclass
class Target:
    label: str
    value: float | None
    reference_label: str
    reference: float | None
    needed: float        # the ratio (or, when absolute, the rate) the target asks for
    absolute: bool = False

    @property
    def ratio(self) -> float | None:
        if self.value is None:
            return None
        if self.absolute:
            return self.value / self.needed
        if not self.reference:
            return None
        return self.value / self.reference

    @property
    def met(self) -> bool | None:
        ratio = self.ratio
        if ratio is None:
            return None
        return ratio >= (1.0 if self.absolute else self.needed)


def load_cases(paths: list[Path]) -> tuple[dict[str, dict[str, Case]], dict]:
    """Cases by group and case name; a later file's case replaces an earlier one's."""
    groups: dict[str, dict[str, Case]] = {}
    machine: dict = {}
    benches = []
    for path in paths:
        data = json.loads(path.read_text())
        machine = machine or data.get("machine_info", {})
        benches.extend(data["benchmarks"])
    for bench in benches:
        info = bench.get("extra_info", {})
        match = JOURNAL_GROUP.match(bench.get("group") or "")
        if "records_per_round" not in info or not match:
            continue   # another file's benchmarks (the message store's have their own document)
        key = match.group(1)
        stats = bench["stats"]
        records = info["records_per_round"]
        groups.setdefault(key, {})[info["case"]] = Case(
            group=key, case=info["case"], settings=info.get("settings", ""), records=records,
            rounds=stats["rounds"], median_s=stats["median"], min_s=stats["min"],
            rate=records / stats["median"], best_rate=records / stats["min"],
            mb_per_s=records * info.get("record_bytes", 256) / stats["median"] / 1e6)
    return groups, machine


def _rate(groups, group: str, case: str) -> float | None:
    found = groups.get(group, {}).get(case)
    return found.rate if found else None


def _best(groups, group: str, cases) -> tuple[str, float | None]:
    present = [(c, groups[group][c].rate) for c in cases if c in groups.get(group, {})]
    if not present:
        return "-", None
    return max(present, key=lambda item: item[1])


def targets(groups) -> list[Target]:
    rows = []
    raw_name, raw = _best(groups, "a", ["raw-append", "raw-prealloc"])
    rows.append(Target("a. journal sync=always, 1 thread", _rate(groups, "a", "journal"),
                       f"raw write+fdatasync loop ({raw_name})", raw, 0.9))
    group_rate = _rate(groups, "b", "journal")
    rows.append(Target("b. journal sync=group, 16 threads", group_rate, "journal case a (1 thread)",
                       _rate(groups, "a", "journal"), 10.0))
    rows.append(Target("b. journal sync=group, 16 threads", group_rate, "LMDB, 16 threads",
                       _rate(groups, "b", "lmdb"), 10.0))
    rows.append(Target("b. journal sync=group, 16 threads", group_rate, "SQLite, 16 threads",
                       _rate(groups, "b", "sqlite"), 10.0))
    peer_name, peer = _best(groups, "c", [c for c in groups.get("c", {}) if c != "journal"])
    rows.append(Target("c. journal, sync per 1000", _rate(groups, "c", "journal"), f"best peer ({peer_name})",
                       peer, 1.5))
    rows.append(Target("d. journal sync=none, files pre-created", _rate(groups, "d", "journal-precreated"),
                       "3M records/s", None, 3_000_000, absolute=True))
    rows.append(Target("e. journal load of 1M", _rate(groups, "e", "journal"), "LMDB full scan",
                       _rate(groups, "e", "lmdb"), 2.0))
    return rows


_fmt_rate = rate     # the bench command's short rates (journal_engine.benchmarking.report.rate)


def targets_markdown(rows: list[Target]) -> str:
    lines = ["| target | journal records/s | against | its records/s | ratio | needed | met |",
             "|---|---:|---|---:|---:|---:|:---:|"]
    for row in rows:
        ratio = row.ratio
        if row.absolute:
            ratio_text = f"{ratio:.2f}x of target" if ratio is not None else "-"
            needed = _fmt_rate(row.needed) + "/s"
            reference = "-"
        else:
            ratio_text = f"{ratio:.2f}x" if ratio is not None else "-"
            needed = f">= {row.needed:g}x"
            reference = _fmt_rate(row.reference)
        met = {True: "yes", False: "**no**", None: "-"}[row.met]
        lines.append(f"| {row.label} | {_fmt_rate(row.value)} | {row.reference_label} | {reference} | "
                     f"{ratio_text} | {needed} | {met} |")
    return "\n".join(lines)


def verdict_markdown(rows: list[Target]) -> str:
    lines = []
    for row in rows:
        ratio = row.ratio
        if ratio is None:
            lines.append(f"- {row.label} against {row.reference_label}: not measured in this run.")
            continue
        state = "**met**" if row.met else "**missed**"
        if row.absolute:
            lines.append(f"- {row.label}: {_fmt_rate(row.value)} records/s against {_fmt_rate(row.needed)}/s "
                         f"needed ({ratio:.2f}× of it): {state}.")
        else:
            lines.append(f"- {row.label}: {_fmt_rate(row.value)} records/s, {ratio:.2f}× {row.reference_label} "
                         f"({_fmt_rate(row.reference)}/s); needed ≥ {row.needed:g}×: {state}.")
    return "\n".join(lines) + "\n"


def results_markdown(groups) -> str:
    parts = []
    for key in sorted(groups):
        cases = sorted(groups[key].values(), key=lambda c: -c.rate)
        journal = next((c.rate for c in cases if c.case == "journal" or c.case == "journal-precreated"), None)
        parts.append(f"#### {GROUP_TITLES.get(key, key)}\n")
        parts.append("| case | records/s (median) | best round | MB/s of payload | records x rounds | "
                     "journal / this | settings |")
        parts.append("|---|---:|---:|---:|---:|---:|---|")
        for case in cases:
            versus = f"{journal / case.rate:.2f}x" if journal else "-"
            parts.append(f"| {case.case} | {_fmt_rate(case.rate)} | {_fmt_rate(case.best_rate)} | "
                         f"{case.mb_per_s:.1f} | {case.records:,} x {case.rounds} | {versus} | {case.settings} |")
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def machine_markdown(machine: dict) -> str:
    facts = machine.get("journal_bench", {})
    disk = facts.get("disk", {})
    latency = facts.get("fdatasync_4k", {})
    cpu = machine.get("cpu", {}).get("brand_raw", "?")
    if latency.get("mean_us"):
        sync_line = (f"| 4 KiB pwrite + fdatasync, {latency['samples']} samples | p50 {latency['p50_us']} us, "
                     f"p90 {latency['p90_us']} us, p99 {latency['p99_us']} us, mean {latency['mean_us']} us "
                     f"(= {1e6 / latency['mean_us']:.0f} syncs/s) |")
    else:
        sync_line = "| 4 KiB pwrite + fdatasync | not measured |"
    return "\n".join([
        "| fact | value |", "|---|---|",
        f"| date of the run | {facts.get('date', '?')} |",
        f"| CPU | {cpu}, nproc = {facts.get('nproc', '?')} |",
        f"| memory | {facts.get('memory_gib', '?')} GiB |",
        f"| kernel | {facts.get('kernel', '?')} |",
        f"| Python | {facts.get('python', machine.get('python_version', '?'))}, journal_engine core: "
        f"{facts.get('journal_engine_implementation', '?')} |",
        f"| disk of the data | {disk.get('device', '?')} ({disk.get('fstype', '?')}, "
        f"{disk.get('mount_options', '?')}; rotational={disk.get('rotational', '?')}), "
        f"directory {disk.get('path', '?')} |",
        sync_line,
        f"| load average (1, 5, 15 min) | at start {_loads(facts.get('loadavg_at_start'))}, "
        f"at end {_loads(facts.get('loadavg_at_end'))} |",
    ]) + "\n"


def _loads(values) -> str:
    return "?" if not values else " / ".join(f"{v:.2f}" for v in values)


def replace_section(text: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- bench:{name}:start -->\n).*?(<!-- bench:{name}:end -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"the document has no <!-- bench:{name}:start --> ... <!-- bench:{name}:end --> markers")
    return pattern.sub(lambda m: m.group(1) + body + m.group(2), text)


def draw(groups, rows: list[Target], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    keys = [k for k in sorted(groups) if k in GROUP_TITLES]
    lines = {"a": rows[0], "c": rows[4], "d": rows[5], "e": rows[6]}
    b_targets = [row for row in rows[1:4] if row.reference]
    if b_targets:   # the strictest of the three
        lines["b"] = max(b_targets, key=lambda row: row.reference * row.needed)
    figure, axes = plt.subplots(len(keys), 1, figsize=(10, 2.0 + 1.45 * sum(len(groups[k]) for k in keys) / 2.2))
    if len(keys) == 1:
        axes = [axes]
    for axis, key in zip(axes, keys):
        cases = sorted(groups[key].values(), key=lambda c: c.rate)
        names = [c.case for c in cases]
        rates = [c.rate for c in cases]
        colours = ["#d9480f" if c.case.startswith("journal") else "#868e96" for c in cases]
        bars = axis.barh(names, rates, color=colours)
        for bar, value in zip(bars, rates):
            axis.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {_fmt_rate(value)}",
                      va="center", fontsize=8)
        target = lines.get(key)
        if target is not None:
            line = target.needed if target.absolute else (target.reference or 0) * target.needed
            if line:
                axis.axvline(line, color="#1c7ed6", linestyle="--", linewidth=1)
                axis.text(line, -0.45, f" target {_fmt_rate(line)}", color="#1c7ed6", fontsize=8, va="bottom")
        axis.set_title(GROUP_TITLES[key], fontsize=10, loc="left")
        axis.set_xlim(0, max(rates + [line if target is not None and line else 0]) * 1.22)
        axis.tick_params(labelsize=8)
        axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: _fmt_rate(value) if value else "0"))
        axis.set_xlabel("records/s (256-byte records, median round)", fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", type=Path, nargs="+", help="the file(s) --benchmark-json wrote")
    parser.add_argument("--doc", type=Path, help="markdown document whose bench:* sections to update")
    parser.add_argument("--plot", type=Path, help="where to draw the bar chart (PNG)")
    args = parser.parse_args(argv)
    groups, machine = load_cases(args.json)
    if not groups:
        raise SystemExit(f"{', '.join(map(str, args.json))}: no bench/ results "
                         "(run with --benchmark-only and --benchmark-json)")
    rows = targets(groups)
    sections = {"machine": machine_markdown(machine), "targets": targets_markdown(rows) + "\n",
                "results": results_markdown(groups), "verdict": verdict_markdown(rows)}
    if args.doc:
        text = args.doc.read_text()
        for name, body in sections.items():
            text = replace_section(text, name, body)
        args.doc.write_text(text)
        print(f"updated {args.doc}")
    else:
        for body in sections.values():
            print(body)
    if args.plot:
        draw(groups, rows, args.plot)
        print(f"drew {args.plot}")
    for row in rows:
        state = {True: "met", False: "MISSED", None: "not measured"}[row.met]
        ratio = row.ratio
        print(f"{state:>12}  {row.label} vs {row.reference_label}: "
              f"{'-' if ratio is None else f'{ratio:.2f}'}"
              f"{' of target' if row.absolute else 'x'} "
              f"(needed {_fmt_rate(row.needed) + '/s' if row.absolute else f'{row.needed:g}x'})",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
