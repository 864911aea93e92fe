"""The operator tools (`journal-engine print|stats|verify|compact|dlq|export|import`) on real journals
written by the broker: decoded output, filters, JSON, exit statuses, read-only inspection, and the
errors a user meets (a missing, foreign, corrupt, locked or unreadable directory)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from journal_engine import AddressSettings, Broker, Journal, ManualClock, __version__, demo
from journal_engine.cli import main
from journal_engine.storage.journal.segment_files import list_directory
from damage import flip_byte
from locations import ROOT

NOW = 1_700_000_000_000
SMALL = {"file_size": 256 * 1024}
BACKENDS = ["journal", pytest.param("lmdb", marks=pytest.mark.skipif(
    __import__("importlib").util.find_spec("lmdb") is None, reason="lmdb is not installed"))]


def run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(root: Path) -> dict:
    """Every file under root: bytes and mtime (ns) — what an inspection must leave as it found it."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def write_broker(directory: Path, store: str = "journal") -> dict:
    """A broker directory with live messages, delivery counts, and two dead letters on DLQ (from 'orders')."""
    clock = ManualClock(NOW)
    options = SMALL if store == "journal" else None
    broker = Broker(directory, clock=clock, store=store, store_options=options)
    broker.address_settings.add("orders", AddressSettings(max_delivery_attempts=2, dead_letter_address="DLA"))
    broker.create_queue("orders")
    broker.create_queue("DLQ", address="DLA")
    broker.create_queue("audit")
    ids = [broker.send("orders", f"order {n}".encode(), properties={"n": n, "kind": "poison" if n < 2 else "ok"})
           for n in range(5)]
    broker.send("audit", b"audit record")
    consumer = broker.create_consumer("orders")
    for _ in range(2):              # the two poison messages fail twice: dead-lettered
        for _ in range(2):
            message = consumer.receive(0)
            consumer.rollback(message)
            clock.advance(10)
    message = consumer.receive(0)   # one more fails once and stays, delivery count 1
    consumer.rollback(message)
    consumer.close()
    broker.close()
    return {"ids": ids, "clock": clock}


@pytest.fixture
def broker_dir(tmp_path):
    directory = tmp_path / "broker"
    write_broker(directory)
    return directory


# ----- print ------------------------------------------------------------------------------------------

def test_print_names_records_and_decodes_message_fields(broker_dir, capsys):
    code, out, _ = run(capsys, "print", broker_dir)
    assert code == 0
    assert "ADD_MESSAGE" in out and "address='orders'" in out and "UPDATE_DELIVERY_COUNT" in out
    assert "QUEUE_BINDING_RECORD" in out and "name='DLQ'" in out
    assert "type=45" in out          # the number stays beside the name


def test_print_json_lines_parse_and_filter_by_kind_type_id_and_address(broker_dir, capsys):
    code, out, _ = run(capsys, "print", broker_dir, "--json")
    assert code == 0
    records = [json.loads(line) for line in out.splitlines()]
    assert {r["journal"] for r in records} == {"messages", "bindings"}
    messages = [r for r in records if r.get("record_type_name") == "ADD_MESSAGE"]
    assert {m["fields"]["address"] for m in messages} == {"orders", "audit", "DLA"}
    copy = next(m for m in messages if m["fields"]["address"] == "DLA")
    assert copy["kind"] == "ADD_TX"
    assert copy["fields"]["properties"]["_JE_DEAD_LETTER_REASON"] == "max-delivery-attempts"

    _, out, _ = run(capsys, "print", broker_dir, "--json", "--type", "UPDATE_DELIVERY_COUNT")
    counts = [json.loads(line) for line in out.splitlines()]
    assert counts and all(r["record_type"] == 34 and "delivery_count" in r["fields"] for r in counts)

    _, out, _ = run(capsys, "print", broker_dir, "--json", "--kind", "commit")
    assert [json.loads(line)["kind"] for line in out.splitlines()] == ["COMMIT", "COMMIT"]

    _, out, _ = run(capsys, "print", broker_dir, "--json", "--id-min", "2", "--id-max", "3", "--kind", "ADD")
    assert sorted(json.loads(line)["record_id"] for line in out.splitlines()
                  if json.loads(line)["journal"] == "messages") == [2, 3]

    _, out, _ = run(capsys, "print", broker_dir, "--json", "--address", "DLA")
    dla = [json.loads(line) for line in out.splitlines()]
    assert dla and {r["record_type_name"] for r in dla} >= {"ADD_MESSAGE", "ADD_REF"}
    assert all(r["journal"] == "messages" for r in dla)


def test_print_marks_the_files_a_compaction_wrote(broker_dir, capsys):
    _, before, _ = run(capsys, "print", broker_dir)
    assert "(compacted)" not in before
    assert run(capsys, "compact", broker_dir)[0] == 0
    _, after, _ = run(capsys, "print", broker_dir)
    file_lines = [line for line in after.splitlines() if line.startswith("# ")]
    assert any(line.endswith(" (compacted)") for line in file_lines), file_lines


def test_print_rejects_an_unknown_record_type_with_the_choices(broker_dir, capsys):
    code, _, err = run(capsys, "print", broker_dir, "--type", "NOPE")
    assert code == 2 and "ADD_MESSAGE" in err and "Traceback" not in err


# ----- stats ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("store", BACKENDS)
def test_stats_json_counts_files_bytes_and_records(tmp_path, capsys, store):
    directory = tmp_path / "broker"
    write_broker(directory, store)
    code, out, _ = run(capsys, "stats", directory, "--json")
    assert code == 0
    document = json.loads(out)
    assert document["store"] is True and document["backend"] == store
    parts = {p["journal"]: p for p in document["journals"]}
    assert parts["bindings"]["live_records"] == 4                      # three queues and the ID counter
    assert parts["bindings"]["live_records_by_type"] == {"QUEUE_BINDING_RECORD": 3, "ID_COUNTER": 1}
    assert parts["messages"]["live_records"] == 6                      # 3 + audit + 2 dead-letter copies
    assert parts["messages"]["live_records_by_type"]["ADD_MESSAGE"] == 6
    assert "compaction" in parts["messages"]["advice"]
    if store == "journal":
        messages = parts["messages"]
        assert messages["frames_by_kind"]["ADD_TX"] == 2 and messages["frames_by_kind"]["COMMIT"] == 2
        assert messages["live_bytes"] + messages["dead_bytes"] == messages["written_bytes"]
        assert messages["dead_bytes"] > 0 and messages["compaction_due"] is False
    code, out, _ = run(capsys, "stats", directory)
    assert code == 0 and "messages" in out and "records by kind and type" in out


# ----- verify ------------------------------------------------------------------------------------------

def test_verify_healthy_broker_directory_exits_0(broker_dir, capsys):
    code, out, _ = run(capsys, "verify", broker_dir)
    assert code == 0 and "healthy" in out
    code, out, _ = run(capsys, "verify", broker_dir, "--json")
    assert code == 0 and json.loads(out)["healthy"] is True


def flip_byte_in_first_frame(journal_dir: Path) -> tuple[str, int]:
    data = list_directory(str(journal_dir)).data[0]
    flip_byte(data.path, data.header.data_start + 20)
    return data.path, data.header.data_start


def test_verify_damage_exits_1_naming_path_and_offset(broker_dir, capsys):
    path, frame_offset = flip_byte_in_first_frame(broker_dir / "messages")
    before = snapshot(broker_dir)
    code, out, _ = run(capsys, "verify", broker_dir, "--json")
    assert code == 1
    document = json.loads(out)
    assert not document["healthy"]
    assert any(p["path"] == path and p["offset"] == frame_offset for p in document["problems"]), document
    code, out, _ = run(capsys, "verify", broker_dir)
    assert code == 1 and "DAMAGED" in out and os.path.basename(path) in out
    assert snapshot(broker_dir) == before


def test_verify_of_a_directory_without_a_journal_exits_2(tmp_path, capsys):
    (tmp_path / "foreign.txt").write_text("not a journal")
    code, out, err = run(capsys, "verify", tmp_path)
    assert code == 2 and "no journal found" in err and str(tmp_path) in err and out == ""


def test_a_missing_directory_is_one_line_exit_2_and_is_not_created(tmp_path, capsys):
    missing = tmp_path / "mistyped"
    for command in ("print", "stats", "verify", "compact", "export"):
        code, _, err = run(capsys, command, missing)
        assert code == 2, command
        assert err.strip().count("\n") == 0 and "no such directory" in err and str(missing) in err
        assert "Traceback" not in err
    for command in (("dlq", "list"), ("dlq", "redrive")):
        code, _, err = run(capsys, *command, missing, *(["--from", "DLQ"] if command[1] == "redrive" else []))
        assert code == 2 and "no such directory" in err
    assert not missing.exists()


#: root reads a mode-000 directory through CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (CI runs as root): the
#: command runs without them, so that the directory's mode, as for any other user, refuses it
UNPRIVILEGED = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"] if os.geteuid() == 0 else []


def test_an_unreadable_directory_is_an_io_error_exit_3(broker_dir):
    messages = broker_dir / "messages"
    messages.chmod(0)
    try:
        done = subprocess.run([*UNPRIVILEGED, sys.executable, "-m", "journal_engine", "verify", str(broker_dir)],
                              capture_output=True, text=True, timeout=120)
    finally:
        messages.chmod(0o755)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "permission denied" in done.stderr and str(messages) in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr


_EIO_DRIVER = """
import ctypes, sys
from journal_engine.cli import main
assert main(["verify", sys.argv[1]]) == 0      # once healthy, so every lazy import is done before reads fail
fiu = ctypes.CDLL("libfiu.so.0")
fiu.fiu_enable.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint]
fiu.fiu_enable(b"posix/io/rw/read", 1, ctypes.c_void_p(5), 0)     # every read() fails with EIO
status = main(["verify", sys.argv[1]])
fiu.fiu_disable(b"posix/io/rw/read")
print("status", status)
"""


@pytest.mark.skipif(not shutil.which("fiu-run"), reason="libfiu's fiu-run is not installed (Debian: fiu-utils)")
def test_a_disk_that_fails_reads_is_an_io_error_exit_3_with_the_path(broker_dir, tmp_path):
    # works as root too: the read fails in the C library (libfiu), not by permission
    driver = tmp_path / "eio_driver.py"
    driver.write_text(_EIO_DRIVER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                                    os.environ.get("PYTHONPATH")])))
    done = subprocess.run(["fiu-run", "-x", sys.executable, str(driver), str(broker_dir)], capture_output=True,
                          text=True, timeout=300, check=False, env=env)
    assert done.stdout.strip().endswith("status 3"), (done.stdout, done.stderr)
    error_lines = [line for line in done.stderr.splitlines() if line.startswith("journal-engine: error:")]
    assert len(error_lines) == 1 and "Input/output error" in error_lines[0] and str(broker_dir) in error_lines[0]
    assert "Traceback" not in done.stderr


def test_brackets_in_paths_and_reasons_are_printed_as_they_are(tmp_path, capsys):
    directory = tmp_path / "[journal]"
    with Journal(directory, file_size=64 * 1024, sync="none") as journal:
        journal.load()
        journal.add(1, 1, b"x")
    code, out, _ = run(capsys, "stats", directory)
    assert code == 0 and "[journal]" in out


def test_debug_shows_the_traceback(tmp_path):
    done = subprocess.run([sys.executable, "-m", "journal_engine", "--debug", "verify", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0 and "Traceback" in done.stderr and "NoJournalError" in done.stderr


def test_version_prints_the_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and __version__ in out and "core" in out


# ----- read-only --------------------------------------------------------------------------------------

@pytest.mark.parametrize("store", BACKENDS)
def test_inspecting_commands_change_nothing_in_a_broker_directory(tmp_path, capsys, store):
    directory = tmp_path / "broker"
    write_broker(directory, store)
    before = snapshot(directory)
    for argv in (["print", directory], ["print", directory, "--json"], ["stats", directory], ["verify", directory],
                 ["export", directory], ["dlq", "list", directory]):
        code, out, err = run(capsys, *argv)
        assert code == 0, (argv, err)
        assert out, argv
        assert snapshot(directory) == before, f"`journal-engine {' '.join(map(str, argv))}` changed the directory"


# ----- compact ----------------------------------------------------------------------------------------

HOLDER = textwrap.dedent("""
    import sys
    from journal_engine import Broker
    broker = Broker(sys.argv[1])
    print("ready", flush=True)
    sys.stdin.readline()
    broker.close()
""")


def test_compact_is_refused_while_another_process_holds_the_journal_naming_its_pid(broker_dir, capsys):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(broker_dir)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        code, _, err = run(capsys, "compact", broker_dir)
        assert code == 4 and f"process {holder.pid}" in err and "in use" in err and "Traceback" not in err
        code, _, err = run(capsys, "dlq", "redrive", broker_dir, "--from", "DLQ")
        assert code == 4 and f"process {holder.pid}" in err
    finally:
        holder.communicate("\n", timeout=60)


def test_compact_compacts_a_broker_directory(broker_dir, capsys):
    code, out, _ = run(capsys, "compact", broker_dir, "--json")
    assert code == 0
    document = json.loads(out)
    assert document["compacted"] and document["journals"]["messages"]["after"]["live_records"] == 6
    code, out, _ = run(capsys, "verify", broker_dir)
    assert code == 0


# ----- dlq ----------------------------------------------------------------------------------------------

def test_dlq_list_shows_origin_count_reason_and_history(broker_dir, capsys):
    code, out, _ = run(capsys, "dlq", "list", broker_dir, "--json")
    assert code == 0
    rows = json.loads(out)["dead_letters"]
    assert len(rows) == 2
    for row in rows:
        assert (row["queue"], row["original_address"], row["original_queue"]) == ("DLQ", "orders", "orders")
        assert row["delivery_count"] == 2 and row["reason"] == "max-delivery-attempts"
        assert [entry["reason"] for entry in row["history"]] == ["rollback", "rollback"]
        assert row["history"][1]["time"] - row["history"][0]["time"] == 10
    assert sorted(row["original_message_id"] for row in rows) == [1, 2]
    code, out, _ = run(capsys, "dlq", "list", broker_dir, "--address", "elsewhere", "--json")
    assert json.loads(out)["dead_letters"] == []
    code, out, _ = run(capsys, "dlq", "list", broker_dir)
    assert code == 0 and "max-delivery-attempts" in out and "orders" in out


def test_dlq_redrive_moves_back_with_the_audit_trail_and_refuses_loops(broker_dir, capsys):
    code, out, _ = run(capsys, "dlq", "redrive", broker_dir, "--from", "DLQ", "--limit", "1", "--json")
    assert code == 0
    result = json.loads(out)
    assert len(result["moved"]) == 1 and result["moved"][0]["queue"] == "orders" and result["refused"] == []
    code, out, _ = run(capsys, "dlq", "list", broker_dir, "--json")
    assert len(json.loads(out)["dead_letters"]) == 1
    clock = ManualClock(NOW + 1000)
    with Broker(broker_dir, clock=clock, store_options=SMALL) as broker:
        (redriven,) = [m for m in broker.browse("orders") if m.message_id == result["moved"][0]["new_message_id"]]
        assert redriven.properties["_JE_REDRIVE_COUNT"] == 1
        assert redriven.properties["_JE_REDRIVE_SOURCE"] == "DLQ"
        assert isinstance(redriven.properties["_JE_REDRIVE_TIME"], int)
        assert redriven.properties["_AMQ_ORIG_ADDRESS"] == "orders"      # the last failure's trail stays
    code, out, _ = run(capsys, "dlq", "redrive", broker_dir, "--from", "DLQ", "--max-redrives", "0")
    assert code == 0 and "refused" in out and "max_redrives 0" in out
    code, _, err = run(capsys, "dlq", "redrive", broker_dir, "--from", "nowhere")
    assert code == 2 and "nowhere" in err
    code, _, err = run(capsys, "dlq", "redrive", broker_dir, "--from", "DLQ", "--filter", "n = = 1")
    assert code == 2 and "Traceback" not in err


# ----- the demo -----------------------------------------------------------------------------------------

def test_the_demo_checks_everything_and_writes_its_chart(tmp_path):
    pytest.importorskip("matplotlib", reason="the demo's chart needs matplotlib: pip install 'journal_engine[demo]'")
    png = tmp_path / "demo.png"
    done = subprocess.run([sys.executable, "-m", "journal_engine", "demo", "--seconds", "1.5", "--seed", "7",
                           "--png", str(png), "--keep", str(tmp_path / "demo")],
                          capture_output=True, text=True, timeout=120, check=False,
                          env=dict(os.environ, COLUMNS="200"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SIGKILL" in done.stdout and "recovered in" in done.stdout and "redriven" in done.stdout
    assert "verdict: every acknowledged message" in done.stdout
    assert str(png) in done.stdout and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class _FlushedText:
    """A stream that keeps only what was flushed: what a parent reading the pipe could have seen."""

    def __init__(self) -> None:
        self.pending, self.flushed = "", ""

    def write(self, text: str) -> None:
        self.pending += text

    def flush(self) -> None:
        self.flushed, self.pending = self.flushed + self.pending, ""


class _AnnouncementCheckingConsumer:
    """A real consumer whose acknowledgements and rollbacks first note whether they were announced."""

    def __init__(self, consumer, out: _FlushedText) -> None:
        self.consumer, self.out = consumer, out
        self.unannounced: list[tuple[str, int]] = []

    def receive(self, timeout):
        return self.consumer.receive(timeout)

    def ack(self, message) -> None:
        if f"doubt {message.message_id}\n" not in self.out.flushed:
            self.unannounced.append(("ack", message.message_id))
        self.consumer.ack(message)

    def rollback(self, message) -> None:
        if message.delivery_count >= demo.MAX_DELIVERY_ATTEMPTS and f"doubt {message.message_id}\n" not in self.out.flushed:
            self.unannounced.append(("dead letter", message.message_id))
        self.consumer.rollback(message)


def test_the_demo_child_announces_each_ack_and_dead_letter_before_issuing_it(tmp_path):
    # in group mode the flusher may make an acknowledgement durable at once: the parent must have been
    # told before, or a SIGKILL before the batch's report makes the message look lost
    broker = demo._open_broker(str(tmp_path / "broker"))
    try:
        for n in range(1, 2 * demo.BATCH + 1):
            kind = "poison" if n % demo.POISON_EVERY == 0 else "flaky" if n % demo.FLAKY_EVERY == 0 else "ok"
            broker.send(demo.ADDRESS, b"x", properties={"kind": kind, "n": n})
        out = _FlushedText()
        consumer = _AnnouncementCheckingConsumer(broker.create_consumer(demo.ADDRESS), out)
        acked, dead = [], []
        for _ in range(8):                      # poison messages come back until dead-lettered
            batch_acked, _counts, batch_dead = demo._consume_batch(consumer, out)
            acked += batch_acked
            dead += batch_dead
            time.sleep(0.05)                    # the redelivery delays run out
        assert acked and dead and consumer.unannounced == []
    finally:
        broker.close()


def test_a_corrupt_file_header_is_one_line_exit_1_for_every_inspecting_command(broker_dir, capsys):
    data = list_directory(str(broker_dir / "bindings")).data[0]
    with open(data.path, "r+b") as handle:
        handle.write(b"\x00" * 16)                  # the header's magic and checksum gone
    for argv in (["print", broker_dir], ["stats", broker_dir], ["export", broker_dir], ["dlq", "list", broker_dir]):
        code, _, err = run(capsys, *argv)
        assert code == 1, argv
        assert data.path in err and "Traceback" not in err and err.count("\n") == 1, (argv, err)
    code, out, _ = run(capsys, "verify", broker_dir, "--json")
    assert code == 1 and any(p["path"] == data.path for p in json.loads(out)["problems"])


def test_print_and_verify_show_a_torn_tail_where_it_begins_and_leave_it(broker_dir, capsys):
    from read_only_journals import tear_tail
    tear_tail(broker_dir / "messages")
    before = snapshot(broker_dir)
    code, out, _ = run(capsys, "verify", broker_dir, "--json")
    assert code == 1
    (torn,) = [p for p in json.loads(out)["problems"] if p["problem"].startswith("torn tail")]
    code, out, _ = run(capsys, "print", broker_dir, "--json")
    assert code == 0
    marks = [json.loads(line) for line in out.splitlines() if '"check"' in line]
    assert marks == [{"journal": "messages", "path": torn["path"], "offset": torn["offset"], "check": "INVALID"}]
    assert snapshot(broker_dir) == before
