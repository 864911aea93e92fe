"""`journal-engine crash-test`: a campaign with a live progress bar, a table, JSON, and the line
``violations: N`` (exit status 1 on any violation, with the command that replays the campaign; 5 when
a --ci or --long campaign left a mode unrun or an acceptance figure unreached, naming it)."""
from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from pathlib import Path

from .campaign import Campaign
from .scratch import CampaignInterrupted

EXIT_VIOLATIONS = 1
EXIT_INCOMPLETE = 5     # no violation, but the campaign did less than its size promises: CI must not pass it


def run(size: str, seed: int | None, json_path: str | None, scratch: str | None, store: str = "journal") -> int:
    """The command: 0 with no violation, 1 with any; 5 with none but a mode asked for that did not run or
    an acceptance figure not reached (--ci, --long); 128 + the signal when SIGINT / SIGTERM / SIGHUP
    stopped it (its scratch removed all the same)."""
    try:
        from rich.progress import Progress
    except ImportError:      # rich is optional for the library; the command falls back to plain lines
        Progress = None
    try:
        if Progress is not None:
            with Progress(transient=True) as progress:
                tasks: dict = {}

                def show(mode: str, done: int, total: int) -> None:
                    if mode not in tasks:
                        tasks[mode] = progress.add_task(mode, total=total)
                    progress.update(tasks[mode], completed=done, total=total)

                report = Campaign(scratch, size=size, seed=seed, progress=show, store=store).run()
        else:
            report = Campaign(scratch, size=size, seed=seed, store=store).run()
    except CampaignInterrupted as stop:
        print(f"crash-test {size}: {stop}; its scratch is removed", file=sys.stderr)
        return 128 + stop.signum
    except KeyboardInterrupt:
        print(f"crash-test {size}: interrupted; its scratch is removed", file=sys.stderr)
        return 128 + signal.SIGINT
    data = report.as_dict()
    if json_path:
        with open(json_path, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=2)
    png_path = _write_png(report, json_path)
    print(f"crash-test {size} on {store}, seed {report.seed}, {report.duration_s:.1f} s wall, "
          f"{report.cpu_s:.1f} s CPU in {report.workers} worker processes and their children")
    for mode, count in sorted(report.runs.items()):
        print(f"  {mode:<12} {count:>7} runs")
    for mode, why in report.skipped.items():
        print(f"  {mode:<12} skipped: {why}")
    for mode, why in report.not_applicable.items():
        print(f"  {mode:<12} not applicable to this store: {why}")
    if report.stale_scratch_removed:
        print(f"  removed the scratch of {len(report.stale_scratch_removed)} killed campaigns: "
              f"{', '.join(report.stale_scratch_removed)}")
    if report.power_loss:
        power = report.power_loss
        print(f"  power loss   {power['states']:>7} states at {power['crash_points']} crash points of "
              f"{power['recorded_runs']} recorded runs ({_counts(power['states_by_kind'])}); "
              f"{power['full_checks']} with a writing load; "
              f"unsynced tail reported as damage in {power['damage_reported_in_unsynced_tail']} "
              f"({power['reordered_tail']} with a later call kept past a lost one)")
    if report.libfiu:
        fiu = report.libfiu
        print(f"  libfiu       {fiu['faults']:>7} I/O errors injected in {fiu['runs']} runs "
              f"({_counts(fiu['faults_by_kind'])}), "
              f"{fiu['short_write_cycles']} cycles with short writes; after the error a synced write was "
              f"refused {fiu['refused_after']} times, made durable {fiu['accepted_after']} times")
    if report.full_disk:
        print(f"  full disk    {report.full_disk['runs']:>7} runs on a small tmpfs, "
              f"{report.full_disk['store_full']} stopped by StoreFullError")
    for mode, outcomes in sorted({**report.damage, **report.outside}.items()):
        print(f"  {mode:<12} {_counts(outcomes)}")
    if report.broker:
        b = report.broker
        print(f"  broker       {b['kills']:>7} kills ({b['strict_kills']} in strict mode): {b['sends']} sends, "
              f"{b['deliveries']} deliveries, {b['rollbacks']} rollbacks, {b['acks']} acks, "
              f"{b['dead_letters']} dead letters")
    if report.takeover:
        t = report.takeover
        print(f"  takeover     {t['takeovers']:>7} live servers SIGKILLed under load, a backup taking over each in "
              f"{t['takeover_ms'] / t['takeovers']:.0f} ms on average: {t['receipted']} SENDs receipted, "
              f"{t['resent']} resent after a kill, {t['delivered']} MESSAGEs ({t['redelivered']} flagged redelivered)")
    for point, hits in report.crash_points_hit.items():
        print(f"  crash point {point:<30} hit {hits} times")
    print(f"  {report.calls} calls, {report.acknowledged} acknowledged, "
          f"{report.lost_unacknowledged} unacknowledged calls lost (allowed)")
    print("  phase          tasks  from s    to s  wall s  busy s   CPU s")
    for phase, row in data["phases"].items():
        print(f"  {phase:<13} {row['tasks']:>6} {row.get('from_s', 0):>7.1f} {row.get('to_s', 0):>7.1f} "
              f"{row['wall_s']:>7.1f} {row['busy_s']:>7.1f} {row['cpu_s']:>7.1f}")
    for violation in report.violations[:20]:
        print(f"VIOLATION {violation}")
    if len(report.violations) > 20:
        print(f"... and {len(report.violations) - 20} more (all in the JSON report)")
    if png_path:
        print(f"  plot: {png_path}")
    for mode, why in report.missing_modes().items():
        print(f"INCOMPLETE the {mode} mode did not run: {why}")
    for shortfall in report.shortfalls():
        print(f"INCOMPLETE acceptance figure not reached: {shortfall}")
    print(f"violations: {len(report.violations)}")
    if report.violations:
        print(f"reproduce: {report.reproduce()}", file=sys.stderr)
        return EXIT_VIOLATIONS
    if report.missing_modes() or report.shortfalls():
        print(f"crash-test {size}: incomplete (exit status {EXIT_INCOMPLETE}); reproduce: {report.reproduce()}",
              file=sys.stderr)
        return EXIT_INCOMPLETE
    return 0


def _counts(counts: dict) -> str:
    """``{"b": 2, "a": 1}`` as ``"a 1, b 2"``: a report's counts by kind, in one line."""
    return ", ".join(f"{kind} {count}" for kind, count in sorted(counts.items()))


def _write_png(report, json_path: str | None) -> str | None:
    """The report's PNG next to the JSON (else in the temporary directory), or None without matplotlib."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("  plot: skipped, matplotlib is not installed (pip install '.[crashtest]' in the journal_engine checkout)")
        return None
    from .plot import write_report_png
    if json_path:
        path = Path(json_path).with_suffix(".png")
    else:
        path = Path(tempfile.gettempdir()) / f"journal-engine-crash-test-{report.size}-{report.seed}.png"
    return str(write_report_png(report, path))


if __name__ == "__main__":
    sys.exit(run(os.environ.get("SIZE", "quick"), None, None, None))
