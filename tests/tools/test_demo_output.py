"""What the demo shows: the SIGKILL line where the kill happened, times a reader can read, a reason whole,
a `dlq list` command only for a directory that still exists, one chart file in the temporary folder."""
from __future__ import annotations

import io
import os
import tempfile

from rich.console import Console

from journal_engine import demo

LONG_REASON = "max-delivery-attempts: 3 deliveries, none acknowledged, to DLA from orders by the broker's redelivery"


def test_the_sigkill_line_is_drawn_on_the_ticks_clock():
    reports = demo._Reports()
    reports.spawned_at = 100.0
    reports.ticks = [(100.4, 0, 0), (101.4, 100, 50), (102.4, 300, 150)]
    reports.killed_at = 103.25          # the first durable batch came 0.4 s after the spawn: it counts too
    times, sends, acks, kill_s = demo._chart_series(reports)
    assert times == [1.4, 2.4] or all(abs(a - b) < 1e-9 for a, b in zip(times, [1.4, 2.4]))
    assert abs(kill_s - 3.25) < 1e-9
    assert [round(v) for v in sends] == [100, 200] and [round(v) for v in acks] == [50, 100]


def test_the_history_shows_times_of_day_not_epoch_milliseconds():
    text = demo._history_text([{"time": 1_700_000_000_123, "reason": "rollback"}])
    assert text == "22:13:20.123 rollback"


def test_a_long_reason_is_shown_whole_at_80_columns():
    row = {"message_id": 12345678, "original_message_id": 12345601, "delivery_count": 3, "reason": LONG_REASON,
           "history": [{"time": 1_700_000_000_123, "reason": "rollback"}] * 3}
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(demo._dlq_table([row], "title"))
    cells = "".join(line.split("│")[4].strip() for line in out.getvalue().splitlines() if line.count("│") >= 5)
    assert cells.replace(" ", "") == LONG_REASON.replace(" ", "")


def test_the_dlq_list_command_is_named_only_for_a_kept_directory():
    assert "journal-engine dlq list /data/demo --queue DLQ" in demo._dlq_title("/data/demo", True, 5, 9)
    deleted = demo._dlq_title("/tmp/journal-engine-demo-x", False, 5, 9)
    assert "/tmp/journal-engine-demo-x" not in deleted and "--keep" in deleted


def test_the_default_chart_is_one_file_where_the_help_says():
    assert demo._default_png("/data/demo", True) == "/data/demo/journal-engine-demo.png"
    first, second = demo._default_png("/tmp/a", False), demo._default_png("/tmp/b", False)
    assert first == second == os.path.join(tempfile.gettempdir(), "journal-engine-demo.png")
    assert "--keep directory" in demo.PNG_HELP and "temporary folder" in demo.PNG_HELP


def test_the_demo_commands_help_says_where_the_chart_goes(capsys):
    from journal_engine.cli import main
    assert main(["demo", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "in the --keep directory, else in the temporary folder" in help_text
