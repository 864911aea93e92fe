"""A file that another process cuts short while it is read never kills the interpreter: the reader
raises FileChangedError (a CorruptRecordError) naming the file. Before, a read-only load or `verify`
of a 64 MiB file truncated mid-scan died of SIGBUS (the decoder reads the file through a mapping,
and a mapped page past a file's new end raises SIGBUS).

Each case runs in a child process, so that a SIGBUS shows as a signal death (return code -7) instead
of killing the test run."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from journal_engine import IMPLEMENTATION, Journal

FILE_SIZE = 16 << 20
# the twin reads 32 MiB in Python for each try (seconds): fewer tries there, the same race
RACE_TRIES = 12 if IMPLEMENTATION == "cython" else 2


def run_child(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def big_journal(tmp_path_factory):
    """Two 16 MiB files full of records (what a real broker's journal holds)."""
    directory = tmp_path_factory.mktemp("big") / "journal"
    with Journal(directory, file_size=FILE_SIZE, sync="none") as journal:
        journal.load()
        body = b"m" * 4000
        for record_id in range(1, 6001):
            journal.add(record_id, 45, body)
    return directory


def copy_of(directory, tmp_path):
    import shutil
    target = tmp_path / "copy"
    shutil.copytree(directory, target)
    return target


_CUT_MID_READ = """
    import mmap, subprocess, sys
    from journal_engine import FileChangedError
    from journal_engine._impl import scan_columns
    from journal_engine.storage.journal import checkpoint as checkpoints
    from journal_engine.storage.journal.format import stamp_of
    from journal_engine.storage.journal.scan import _map_pinned
    from journal_engine.storage.journal.segment_files import list_directory
    taken = checkpoints.take(sys.argv[1])
    data = list_directory(sys.argv[1]).data[0]
    with open(data.path, "rb") as handle:
        view = {mapping}
        subprocess.run(["truncate", "-s", "1048576", data.path], check=True)   # after the map
        try:
            {read}
        except FileChangedError as error:
            print("refused", error.offset, error)
        else:
            print("read a cut file without noticing")
    """


@pytest.mark.skipif(IMPLEMENTATION != "cython", reason="the SIGBUS guard is the compiled decoder's; the twin "
                                                      "never maps a file (test below)")
@pytest.mark.parametrize("read", ["scan", "checkpointed"])
def test_a_mapping_cut_by_another_process_mid_scan_raises_file_changed_error(big_journal, tmp_path, read):
    """A scan decodes the mapping under the SIGBUS guard; a load that replays a file from the
    checkpoint's columns checks the CRC32C of the file's every byte under the same guard."""
    directory = copy_of(big_journal, tmp_path)
    code = _CUT_MID_READ.format(**{
        "scan": {"mapping": "mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ)",
                 "read": "scan_columns(view, stamp_of(data.header.file_id), data.header.data_start)"},
        "checkpointed": {"mapping": "_map_pinned(handle.fileno(), data)", "read": "taken.saved(data)(view)"},
    }[read])
    result = run_child(code, str(directory))
    assert result.returncode == 0, (result.returncode, result.stderr)
    assert result.stdout.startswith("refused 1048576 "), result.stdout


def test_a_file_cut_after_it_was_listed_raises_file_changed_error_naming_it(big_journal, tmp_path):
    directory = copy_of(big_journal, tmp_path)
    result = run_child("""
        import subprocess, sys
        from journal_engine import FileChangedError
        from journal_engine.storage.journal.scan import scan_data_file
        from journal_engine.storage.journal.segment_files import list_directory
        data = list_directory(sys.argv[1]).data[0]
        subprocess.run(["truncate", "-s", "1048576", data.path], check=True)
        try:
            scan_data_file(data)
        except FileChangedError as error:
            print("refused", error.path == data.path, error.offset)
        """, str(directory))
    assert result.returncode == 0, (result.returncode, result.stderr)
    assert result.stdout.split() == ["refused", "True", "1048576"], result.stdout


@pytest.mark.parametrize("reader", ["read-only load", "verify", "load", "load and read every body"])
def test_readers_racing_a_truncation_by_another_process_never_die_of_a_signal(big_journal, tmp_path, reader):
    """The attack as it was seen: a truncation at a random moment of a read, RACE_TRIES times; every reader
    ends with an exit status (a result, or one line naming the file), never a signal. The writing load
    keeps its bodies as views into the mapped files: it and a pass over every body are raced too."""
    load = """
        import sys
        from journal_engine import Journal, JournalError
        try:
            with Journal(sys.argv[1], read_only=sys.argv[2] == "read-only load", file_size=16 << 20) as journal:
                loaded = journal.load()
                if sys.argv[2] == "load and read every body":
                    for _ in range(20):
                        total = sum(len(bytes(rec.body)) for rec in loaded.records.values())
            print("read", len(loaded.report.corrupt))
        except JournalError as error:
            print("refused", type(error).__name__, error)
            sys.exit(1)
        """
    deaths, outcomes = [], []
    for attempt in range(RACE_TRIES):
        directory = copy_of(big_journal, tmp_path / str(attempt))
        target = sorted(p for p in os.listdir(directory) if p.endswith(".jej"))[attempt % 2]
        if reader == "verify":
            command = [sys.executable, "-m", "journal_engine", "verify", str(directory)]
        else:
            command = [sys.executable, "-c", textwrap.dedent(load), str(directory), reader]
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.25 + 0.05 * attempt)     # the interpreter's start, then somewhere in the scan
        subprocess.run(["truncate", "-s", str((1 + attempt) * 65536), str(directory / target)], check=True)
        out, err = child.communicate(timeout=120)
        if child.returncode < 0:
            deaths.append((attempt, signal.Signals(-child.returncode).name, err[-500:]))
        else:
            assert "Traceback" not in err, err
            outcomes.append(child.returncode)
    assert not deaths, deaths
    assert set(outcomes) <= {0, 1}, outcomes


@pytest.mark.parametrize("cut_to", [0, 4096])
def test_a_shadow_cut_under_a_strict_broker_is_an_error_at_the_next_receive_not_a_signal(tmp_path, cut_to):
    """`delivery-counts.shadow` truncated by another process under a running broker with
    persist_delivery_count_before_delivery: the next receive() that writes a count there raises
    FileChangedError naming the file; the broker closes, and opens again with every message."""
    result = run_child("""
        import os, subprocess, sys
        from journal_engine import Broker, FileChangedError, ManualClock
        directory, cut_to = sys.argv[1], sys.argv[2]
        broker = Broker(directory, clock=ManualClock(start_ms=1_700_000_000_000),
                        persist_delivery_count_before_delivery=True)
        broker.create_queue("orders")
        for number in range(2000):
            broker.send("orders", b"order %d" % number)
        consumer = broker.create_consumer("orders")
        consumer.ack(consumer.receive(0))
        shadow = os.path.join(directory, "delivery-counts.shadow")
        assert os.path.getsize(shadow) > 1 << 20, os.path.getsize(shadow)
        subprocess.run(["truncate", "-s", cut_to, shadow], check=True)
        refused = 0
        for _ in range(1500):     # past the cut: entries ride 32 bytes each through the first pages
            try:
                message = consumer.receive(0)
            except FileChangedError as error:
                assert error.path == shadow, error.path
                refused += 1
                break
            consumer.ack(message)
        consumer.close()
        broker.close()
        broker = Broker(directory, clock=ManualClock(start_ms=1_700_000_000_000))
        print(refused, broker.queue("orders").message_count)
        broker.close()
        """, str(tmp_path / "broker"), str(cut_to))
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    refused, left = map(int, result.stdout.split())
    assert refused == 1
    assert 0 < left < 2000


def test_a_body_view_of_a_file_another_process_cut_is_an_error_naming_the_file_when_copied(big_journal, tmp_path):
    """load() hands out views into the mapped files; another process truncates one of them under the
    views: a copy of a view past the cut (bytes(), slicing, comparing) raises FileChangedError naming
    the file, instead of SIGBUS. Views before the cut still read."""
    directory = copy_of(big_journal, tmp_path)
    result = run_child("""
        import subprocess, sys
        from journal_engine import FileChangedError, IMPLEMENTATION, Journal
        with Journal(sys.argv[1], file_size=16 << 20) as journal:
            records = journal.load().records
            first, last = records[1].body, records[3000].body
            path = journal.data_files()[0].path
            subprocess.run(["truncate", "-s", "1048576", path], check=True)
            assert bytes(first) == b"m" * 4000
            try:
                bytes(last)
            except FileChangedError as error:
                print("refused", error.path == path, error.offset is not None)
            else:
                print("read", IMPLEMENTATION)
        """, str(directory))
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert result.stdout.split() == (["refused", "True", "True"] if IMPLEMENTATION == "cython" else ["read", "python"])


@pytest.mark.skipif(IMPLEMENTATION != "cython", reason="the twin's bodies are bytes read before the cut: there is "
                                                      "no view to notice it")
def test_a_body_view_of_a_file_cut_and_grown_again_is_an_error_not_zeros(big_journal, tmp_path):
    """Another process cuts a data file to nothing and grows it back to its size: every mapped page
    then reads zeros, no SIGBUS. A copy of a view (bytes(), ==, hash, slicing, decode) reads its frame's
    header after the copy and raises FileChangedError naming the file, instead of handing out zeros."""
    directory = copy_of(big_journal, tmp_path)
    result = run_child("""
        import os, sys
        from journal_engine import FileChangedError, Journal
        with Journal(sys.argv[1], file_size=16 << 20) as journal:
            records = journal.load().records
            body = records[3000].body
            assert bytes(body) == b"m" * 4000
            path = journal.data_files()[0].path
            size = os.path.getsize(path)
            os.truncate(path, 0)
            os.truncate(path, size)
            for name, copy in (("bytes", lambda: bytes(body)), ("eq", lambda: body == b"m" * 4000),
                               ("hash", lambda: hash(body)), ("slice", lambda: body[10:20]),
                               ("decode", lambda: body.decode())):
                try:
                    copy()
                except FileChangedError as error:
                    print(name, "refused", error.path == path, error.offset)
                else:
                    print(name, "read", "zeros")
        """, str(directory))
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    lines = [line.split() for line in result.stdout.splitlines()]
    assert [line[:3] for line in lines] == [[name, "refused", "True"] for name in ("bytes", "eq", "hash", "slice",
                                                                                     "decode")], result.stdout


# the twin's broker reads every body at its recovery, before the cut, and receives them all: a tenth of
# the messages shows it (it writes and reads some thirty times slower)
CUT_BROKER_MESSAGES = 6000 if IMPLEMENTATION == "cython" else 600


def test_a_recovered_broker_whose_message_file_another_process_cut_refuses_a_receive_with_an_error(tmp_path):
    """Broker(dir) leaves recovered bodies in the mapped message journal until a consumer receives them;
    another process cuts that file: the receive of a message past the cut raises FileChangedError naming
    the file (never SIGBUS), and the ones before it are received whole."""
    result = run_child("""
        import glob, os, subprocess, sys
        from journal_engine import Broker, FileChangedError, IMPLEMENTATION, ManualClock
        directory = sys.argv[1]
        clock = ManualClock(start_ms=1_700_000_000_000)
        with Broker(directory, clock=clock) as broker:
            broker.create_queue("orders")
            for number in range(int(sys.argv[2])):
                broker.send("orders", b"%06d" % number + b"m" * 4000)
        broker = Broker(directory, clock=clock)
        consumer = broker.create_consumer("orders")
        received, refused = 0, None
        data_files = sorted(glob.glob(os.path.join(directory, "messages", "*.jej")))   # the first holds the first messages
        subprocess.run(["truncate", "-s", "65536", data_files[0]], check=True)
        while True:
            try:
                message = consumer.receive(0)
            except FileChangedError as error:
                refused = error.path
                break
            if message is None:
                break
            assert type(message.body) is bytes and message.body[:6] == b"%06d" % received
            received += 1
        print(IMPLEMENTATION, received, refused == data_files[0] if refused else None)
        """, str(tmp_path / "broker"), str(CUT_BROKER_MESSAGES))
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    implementation, received, named = result.stdout.split()
    if implementation == "cython":
        assert named == "True" and int(received) < CUT_BROKER_MESSAGES, result.stdout
    else:
        assert named == "None" and int(received) == CUT_BROKER_MESSAGES, result.stdout
