"""`journal-engine COMMAND | head`: a reader that goes away early is no damage, so every command that
prints ends quietly with exit status 0 (docs/cli.md), never 1 (damage) or a traceback."""
from __future__ import annotations

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


@pytest.mark.parametrize("command", PRINTING_COMMANDS, ids=" ".join)
def test_a_closed_pipe_ends_the_command_quietly_with_status_0(broker_directory, command):
    reader, writer = os.pipe()
    os.close(reader)                # the reader is gone before the first line, as `| head -0` would be
    try:
        done = subprocess.run([sys.executable, "-c", RUN_CLI, *command, str(broker_directory)],
                              stdout=writer, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr) == (0, "")
