"""A Journal the program leaves open when the interpreter exits is closed by an atexit hook, while
the interpreter is whole: everything appended is synced and the checkpoint saved, so the next load
replays from it and nothing on stderr says otherwise. Before, the close ran from the collector during
the interpreter's teardown and logged "no checkpoint was saved on close: name 'open' is not defined"
(sync="none"), or never ran at all (a running flusher thread kept the journal alive): the next load
decoded every file.

A forked child forgets its parent's journals: the child's exit must not close (sync, checkpoint,
unlock) a journal its parent is still writing.

Each case runs in a child process: what is under test is the interpreter's exit."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from journal_engine import Journal

RECORDS = 200

_LEFT_OPEN = """
    import sys
    from journal_engine import Journal
    journal = Journal(sys.argv[1], sync=sys.argv[2])
    journal.load()
    for record_id in range(1, int(sys.argv[3]) + 1):
        journal.add(record_id, 7, record_id.to_bytes(4, "little") * 16)
    # no close(): the interpreter exits with the journal open
"""


def run_child(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("sync", ["always", "group", "none"])
def test_journal_left_open_at_exit_saves_its_checkpoint(tmp_path, sync):
    directory = tmp_path / "journal"
    child = run_child(_LEFT_OPEN, str(directory), sync, str(RECORDS))
    assert child.returncode == 0, child.stderr
    assert child.stderr == "", child.stderr     # no "no checkpoint was saved", no "'open' is not defined"
    assert (directory / "journal.jck").exists()
    with Journal(directory) as journal:
        result = journal.load()
        assert result.report.checkpointed_files >= 1
        assert result.report.corrupt == [] and not result.report.torn_tail_truncated
        assert sorted(result.records) == list(range(1, RECORDS + 1))
        for record_id, record in result.records.items():
            assert bytes(record.body) == record_id.to_bytes(4, "little") * 16


_FORKED_CHILD_EXITS = """
    import os, sys
    from journal_engine import Journal
    journal = Journal(sys.argv[1], sync="none")
    journal.load()
    journal.add(1, 7, b"before the fork")
    pid = os.fork()
    if pid == 0:
        sys.exit(0)      # a normal exit: the child runs its atexit hooks
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    print("checkpoint after the child's exit:", os.path.exists(os.path.join(sys.argv[1], "journal.jck")))
    journal.add(2, 7, b"after the fork")
    journal.close()
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_exit_leaves_its_parents_journal_open(tmp_path):
    directory = tmp_path / "journal"
    child = run_child(_FORKED_CHILD_EXITS, str(directory))
    assert child.returncode == 0, child.stderr
    assert "checkpoint after the child's exit: False" in child.stdout, child.stdout + child.stderr
    with Journal(directory) as journal:
        result = journal.load()
        assert {k: bytes(v.body) for k, v in result.records.items()} == {1: b"before the fork",
                                                                        2: b"after the fork"}
        assert result.report.checkpointed_files >= 1
