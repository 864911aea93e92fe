"""A read-only view of a journal (an inspection, a read-only load, the CLI) beside a live writer that
compacts: a file the writer renames between the listing and the read is not an I/O error. The view
lists the directory again (journal.scan.read_while_live); a writer that keeps it moving for
LIVE_READ_ATTEMPTS_MAX reads in a row gets "in use" (JournalLockedError, exit status 4). Before, the
crash harness's live-inspect mode saw `journal-engine print` exit 3 ("No such file or directory")."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from journal_engine import FileVanishedError, Journal, JournalLockedError
from journal_engine.limits import LIVE_READ_ATTEMPTS_MAX
from journal_engine.storage.journal.format import free_name
from journal_engine.storage.journal.scan import read_while_live, scan_data_files
from journal_engine.storage.journal.segment_files import list_directory

FILE_SIZE = 64 * 1024


def build(directory, records: int = 60) -> None:
    with Journal(directory, file_size=FILE_SIZE, sync="none") as journal:
        journal.load()
        for record_id in range(1, records + 1):
            journal.add(record_id, 45, bytes(2000))


def recycle(path: str) -> None:
    """What a compaction's swap does to a replaced file: renamed to a free file, by another process."""
    header_id = int(os.path.basename(path)[len("journal-"):-len(".jej")], 16)
    subprocess.run(["mv", path, os.path.join(os.path.dirname(path), free_name(header_id))], check=True)


def test_a_file_renamed_between_the_listing_and_the_read_is_read_again_from_a_new_listing(tmp_path):
    directory = tmp_path / "journal"
    build(directory)
    tries = []

    def read():
        files = list_directory(str(directory)).data
        if not tries:
            recycle(files[0].path)        # between this listing and the read of what it listed
        tries.append(len(files))
        return scan_data_files(files)

    columns = read_while_live(str(directory), read)
    assert len(tries) == 2 and tries[1] == tries[0] - 1
    assert len(columns) == tries[1]


def test_a_writer_that_keeps_renaming_files_gets_in_use_after_the_last_try(tmp_path):
    directory = tmp_path / "journal"
    build(directory, records=200)

    def read():
        files = list_directory(str(directory)).data
        recycle(files[0].path)
        return scan_data_files(files)

    with pytest.raises(JournalLockedError, match=f"changed under {LIVE_READ_ATTEMPTS_MAX} reads in a row"):
        read_while_live(str(directory), read)


def test_a_vanished_file_is_its_own_error_when_read_outside_a_live_view(tmp_path):
    directory = tmp_path / "journal"
    build(directory)
    files = list_directory(str(directory)).data
    recycle(files[0].path)
    with pytest.raises(FileVanishedError) as gone:
        scan_data_files(files)
    assert gone.value.path == files[0].path


WRITER = """
import sys, time
from journal_engine import Journal
with Journal(sys.argv[1], file_size=65536, sync="none", compact_min_files=2, compact_percentage=90) as journal:
    journal.load()
    print("ready", flush=True)
    record_id = 1
    stop = time.monotonic() + 300         # the test kills it long before; a bound if it does not
    while time.monotonic() < stop:
        journal.add(record_id, 45, bytes(3000))
        if record_id > 8:
            journal.delete(record_id - 8)      # little stays live: the trigger compacts again and again
        record_id += 1
"""


@pytest.mark.parametrize("command", ["print", "verify", "stats"])
def test_inspections_beside_a_compacting_writer_exit_0_1_or_4_never_3(tmp_path, command):
    directory = tmp_path / "journal"
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER), str(directory)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready"
        for _ in range(6):
            child = subprocess.run([sys.executable, "-m", "journal_engine", command, str(directory)],
                                   capture_output=True, text=True, timeout=120)
            assert "Traceback" not in child.stderr, child.stderr
            assert child.returncode in (0, 1, 4), (child.returncode, child.stderr)
        assert writer.poll() is None, "the writer stopped: the inspections did not all run beside it"
    finally:
        writer.stdin.close()
        writer.kill()
        writer.wait()


def test_a_compaction_control_file_that_vanished_is_read_again_not_an_io_error(tmp_path):
    """The writer finishes its swap and deletes compaction.ctl between the view's look for it and its
    read (the crash harness's live-inspect saw `print` exit 3 there): the view lists again."""
    from journal_engine.storage.journal.format import CONTROL_FILE
    from journal_engine.storage.journal.segment_files import read_compaction_plan
    with pytest.raises(FileVanishedError) as gone:
        read_compaction_plan(str(tmp_path / CONTROL_FILE))
    assert gone.value.path.endswith(CONTROL_FILE)
    directory = tmp_path / "journal"
    build(directory)
    control = directory / CONTROL_FILE
    tries = []

    def read():
        tries.append(1)
        if len(tries) == 1:
            read_compaction_plan(str(control))    # it was there when looked for; gone when read
        return list_directory(str(directory), as_if_compacted=True).data

    assert len(read_while_live(str(directory), read)) > 0 and len(tries) == 2
