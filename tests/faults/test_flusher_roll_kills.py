"""SIGKILL while the group-mode flusher syncs without the GIL and the writer switches files.

Once, after a SIGKILL, the store conformance suite reported "damaged frame at the end of a file
followed by later files" (recovery's E7). The suspect: the flusher writing out and syncing
without the GIL while an appender seals the active file and continues in the next one. This
test drives exactly that: 64 KiB files (a file switch every ~200 records), appends that never
wait (the flusher's batches), record groups, sync=True appends from a second thread, deletes
that keep compaction and recycled files in play; then SIGKILL at a random moment, again and
again. After each kill the directory must read back with no damage anywhere but a torn tail,
every record body must be one that was written, and every record whose sync returned must be
there. ``JOURNAL_ENGINE_ROLL_KILLS`` sets the number of kills per seed (default 6).
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from journal_engine import Journal
from journal_engine.storage.journal.recovery import analyze

KILLS = int(os.environ.get("JOURNAL_ENGINE_ROLL_KILLS", "6"))
FILE_SIZE = 64 * 1024

WRITER = r"""
import sys, threading, time
from journal_engine import Journal
from journal_engine.record_format import RecordKind

def body(record_id):
    return record_id.to_bytes(8, "little") * (8 + record_id % 24)

journal = Journal(sys.argv[1], sync="group", file_size=int(sys.argv[2]), compact_min_files=4,
                  buffer_timeout_us=int(sys.argv[3]))
loaded = journal.load()
first = max((record_id for record_id in loaded.records if record_id < 1 << 40), default=0) + 1
first_acknowledged = max((record_id for record_id in loaded.records if record_id >= 1 << 40), default=1 << 40) + 1
print("ready", first, flush=True)

def acknowledged_adds():
    record_id = first_acknowledged
    while True:
        journal.add(record_id, 2, body(record_id), sync=True)
        print("A", record_id, flush=True)
        record_id += 1

threading.Thread(target=acknowledged_adds, daemon=True).start()
record_id = first
while True:
    if record_id % 7 == 0:
        journal.append_group([(RecordKind.ADD, record_id, 1, body(record_id)),
                              (RecordKind.ADD, record_id + 1, 1, body(record_id + 1))])
        record_id += 2
    else:
        journal.add(record_id, 1, body(record_id))
        record_id += 1
    if record_id > 40 and journal.is_live(record_id - 40):
        journal.delete(record_id - 40)         # little stays live: compaction and recycled files join in
    if record_id % 64 == 0:
        time.sleep(0)                          # the sync=True thread gets the GIL now and then
"""


def _body(record_id: int) -> bytes:
    return record_id.to_bytes(8, "little") * (8 + record_id % 24)


def _run_and_kill(directory, rng: random.Random) -> list[int]:
    """One writer run killed 0.05-0.5 s after it loaded; the ids whose sync=True add returned."""
    process = subprocess.Popen([sys.executable, "-c", WRITER, str(directory), str(FILE_SIZE),
                                str(rng.choice((0, 100, 500)))],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        ready = process.stdout.readline()
        assert ready.startswith(b"ready"), (ready, process.stderr.read().decode())
        time.sleep(rng.uniform(0.05, 0.5))
    finally:
        process.send_signal(signal.SIGKILL)
        out, err = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL, err.decode()
    # a kill can cut the last line short ("A " with its id unwritten): only whole lines count
    lines = out.decode().split("\n")[:-1]
    return [int(line.split()[1]) for line in lines if line.startswith("A ")]


@pytest.mark.parametrize("seed", [0, 1])
def test_kills_while_the_flusher_syncs_and_files_switch_leave_no_damage_but_a_torn_tail(tmp_path, seed):
    directory = tmp_path / "journal"
    rng = random.Random(seed)
    acknowledged: set[int] = set()
    for kill in range(KILLS):
        acknowledged.update(_run_and_kill(directory, rng))
        # read-only, a committed compaction read as if finished: what the next load will find
        report = analyze(str(directory), as_if_compacted=True).report
        assert report.corrupt == [], f"kill {kill}: {report.corrupt}"
        with Journal(directory, file_size=FILE_SIZE, compact_min_files=4) as journal:
            records = journal.load().records
            for record_id, record in records.items():
                assert record.body == _body(record_id), f"kill {kill}: record {record_id} was never written"
            lost = [record_id for record_id in acknowledged if record_id not in records]
            assert lost == [], f"kill {kill}: acknowledged records lost: {lost[:10]}"
            # the next run deletes records of this one; a deleted acknowledged record is no longer owed
            acknowledged = {record_id for record_id in acknowledged if record_id in records}
