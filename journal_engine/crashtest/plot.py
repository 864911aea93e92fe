"""The crash-test report as a PNG (matplotlib, Agg: no display needed): where the power-loss crash
points fell along the recorded runs and how many states each checked, the named crash points hit,
and what every fault mode checked."""
from __future__ import annotations

from pathlib import Path

from .campaign import Report


def write_report_png(report: Report, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (where, points, modes) = plt.subplots(1, 3, figsize=(16, 4.6))
    if report.crash_positions:
        fractions = [fraction for fraction, _states in report.crash_positions]
        weights = [states for _fraction, states in report.crash_positions]
        where.hist(fractions, bins=40, weights=weights, color="#3a6ea5", label="states checked")
        where.hist(fractions, bins=40, histtype="step", color="#c0392b", linewidth=1.6, label="crash points")
        where.legend(loc="upper right", fontsize=8)
    else:
        where.text(0.5, 0.5, "no power-loss states in this run", ha="center", va="center")
    where.set_title("power loss: where crash points fell")
    where.set_xlabel("position in the recorded run (fraction of its system calls)")
    where.set_ylabel("count")

    names = list(report.crash_points_hit)
    points.barh(names, [report.crash_points_hit[name] for name in names], color="#7d5ba6")
    points.set_title("named crash points: hits")
    points.set_xlabel("runs that died there")
    points.tick_params(axis="y", labelsize=8)

    kinds = sorted(report.runs)
    modes.barh(kinds, [report.runs[kind] for kind in kinds], color="#2e8b57")
    modes.set_xscale("log")
    modes.set_title(f"what was checked ({len(report.violations)} violations)")
    modes.set_xlabel("runs, states or faults (log scale)")
    for index, kind in enumerate(kinds):
        modes.text(report.runs[kind], index, f" {report.runs[kind]:,}", va="center", fontsize=8)
    figure.suptitle(f"journal-engine crash-test {report.size} on {report.store}, seed {report.seed}, "
                    f"{report.duration_s:.0f} s")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
