"""PNG plots of a bench document (matplotlib, Agg: no display needed).

* ``throughput-by-records-per-sync.png``: records/s against records per sync, a line per store, one
  panel per record size and thread count of the durable cells, the machine's limit dashed;
* ``sync-latency.png``: the latency percentiles of one durable commit (p50 ... p99.9) per store in the
  one-record-per-sync, one-thread cell of each record size, next to the raw sync loop's.
"""
from __future__ import annotations

from pathlib import Path

THROUGHPUT_FILE = "throughput-by-records-per-sync.png"
LATENCY_FILE = "sync-latency.png"
PERCENTILES = (("p50_us", "p50"), ("p90_us", "p90"), ("p99_us", "p99"), ("p999_us", "p99.9"))


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _durable_append(document: dict) -> list[dict]:
    return [r for r in document["results"] if r["scenario"] == "append" and r["cell"]["sync"] == "durable"]


def _style(store: str) -> dict:
    ours = store in ("journal", "lmdb-store")
    return {"linewidth": 2.4 if ours else 1.2, "marker": "o" if ours else ".", "zorder": 3 if ours else 2}


def write_throughput(document: dict, path: Path) -> Path:
    plt = _pyplot()
    results = _durable_append(document)
    panels = sorted({(r["cell"]["record_bytes"], r["cell"]["threads"]) for r in results})
    columns = max(1, len({threads for _, threads in panels}))
    rows = max(1, len({size for size, _ in panels}))
    figure, axes = plt.subplots(rows, columns, figsize=(4.6 * columns, 3.6 * rows), squeeze=False)
    sizes = sorted({size for size, _ in panels})
    thread_counts = sorted({threads for _, threads in panels})
    for (size, threads) in panels:
        axis = axes[sizes.index(size)][thread_counts.index(threads)]
        cell_results = [r for r in results if (r["cell"]["record_bytes"], r["cell"]["threads"]) == (size, threads)]
        for store in dict.fromkeys(r["store"] for r in cell_results):
            points = sorted((r["cell"]["records_per_sync"], r["median_records_per_s"])
                            for r in cell_results if r["store"] == store)
            axis.plot([p[0] for p in points], [p[1] for p in points], label=store, **_style(store))
        limits = sorted({(r["cell"]["records_per_sync"], r["limit_records_per_s"]) for r in cell_results})
        axis.plot([p[0] for p in limits], [p[1] for p in limits], "k--", linewidth=1, label="machine limit")
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_title(f"{size} B records, {threads} thread{'s' if threads > 1 else ''}", fontsize=10)
        axis.set_xlabel("records per sync")
        axis.set_ylabel("records/s (median)")
        axis.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="upper center", ncol=min(8, len(labels)), fontsize=9)
    disk = document["machine"]["disk"]
    figure.suptitle(f"durable appends on {disk['fstype']} {disk['device']}, {document['machine']['date']}",
                    y=0.005, va="bottom", fontsize=9)
    figure.tight_layout(rect=(0, 0.03, 1, 0.93))
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def write_latency(document: dict, path: Path) -> Path:
    plt = _pyplot()
    results = [r for r in _durable_append(document)
               if r["cell"]["records_per_sync"] == 1 and r["cell"]["threads"] == 1 and r.get("sync_latency_us")]
    sizes = sorted({r["cell"]["record_bytes"] for r in results}) or [0]
    figure, axes = plt.subplots(1, len(sizes), figsize=(5.2 * len(sizes), 3.8), squeeze=False)
    raw = document["limits"]["raw_sync_loop"]
    for index, size in enumerate(sizes):
        axis = axes[0][index]
        series = [("raw sync loop (4 KiB)", raw)] + [(r["store"], r["sync_latency_us"]) for r in results
                                                     if r["cell"]["record_bytes"] == size]
        positions = range(len(PERCENTILES))
        for store, latency in series:
            style = {"linewidth": 1, "linestyle": "--", "color": "black"} if store.startswith("raw sync") \
                else _style(store)
            axis.plot(list(positions), [latency[key] for key, _ in PERCENTILES], label=store, **style)
        axis.set_xticks(list(positions), [label for _, label in PERCENTILES])
        axis.set_yscale("log")
        axis.set_ylabel("latency of one durable commit (us)")
        axis.set_title(f"{size} B records, 1 record per sync, 1 thread", fontsize=10)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def write_plots(document: dict, directory: Path) -> list[Path]:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return [write_throughput(document, directory / THROUGHPUT_FILE), write_latency(document, directory / LATENCY_FILE)]
