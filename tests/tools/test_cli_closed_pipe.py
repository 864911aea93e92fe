"""`journal-engine COMMAND | head`: a reader that goes away early is no damage, so every command that
prints ends quietly with exit status 0 (docs/cli.md), never 1 (damage) or a traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from journal_engine import Broker

RUN_CLI = "import sys; from journal_engine.cli import main; sys.exit(main(sys.argv[1:]))"  # the console script
PRINTING_COMMANDS = [["stats"], ["print"], ["verify"], ["dlq", "list"], ["export"], ["stats", "--json"]]


@pytest.fixture(scope="module")
def broker_directory(tmp_path_factory):
    directory = tmp_path_factory.mktemp("closed_pipe") / "broker"
    broker = Broker(directory)
    broker.create_queue("orders")
    for n in range(50):
        broker.send("orders", b"x" * 50, properties={"n": n})
    broker.close()
    return directory


def run_into_a_closed_pipe(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    reader, writer = os.pipe()
    os.close(reader)                # the reader is gone before the first line, as `| head -0` would be
    try:
        return subprocess.run([sys.executable, "-c", RUN_CLI, *argv], stdout=writer, stderr=subprocess.PIPE,
                              text=True, timeout=timeout_s)
    finally:
        os.close(writer)


@pytest.mark.parametrize("command", PRINTING_COMMANDS, ids=" ".join)
def test_a_closed_pipe_ends_the_command_quietly_with_status_0(broker_directory, command):
    done = run_into_a_closed_pipe([*command, str(broker_directory)], 60)
    assert (done.returncode, done.stderr) == (0, "")


def test_bench_ends_quietly_with_status_0_on_a_closed_pipe_and_still_writes_its_json(tmp_path):
    """`journal-engine bench ... | head`: its progress lines go to stderr as ever, its tables meet the closed
    pipe, and the JSON it was asked for is written all the same (the hidden --tiny matrix, seconds long)."""
    report = tmp_path / "bench.json"
    done = run_into_a_closed_pipe(["bench", "--tiny", "--no-progress", "--dir", str(tmp_path / "data"),
                                   "--json", str(report)], 600)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Broken pipe" not in done.stderr, done.stderr
    assert json.loads(report.read_text())["matrix"] == "tiny"
