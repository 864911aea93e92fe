"""`journal-engine analyze` end to end (tables, plots, Parquet) and the set-up checks of journal_engine.spark."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pyarrow.parquet
import pytest
from damage import flip_byte
from spark_journals import POISON_BODY, python_rows, write_broker, write_journal

from journal_engine.cli import main as cli_main
from journal_engine.errors import ConfigError
from journal_engine.storage.journal.recovery import analyze
from journal_engine.spark import environment, register


@pytest.mark.spark
def test_analyze_prints_the_tables_and_writes_plots_and_parquet(spark, tmp_path, capsys):
    broker = tmp_path / "broker"
    write_broker(broker)
    crash = tmp_path / "crash.json"
    crash.write_text(json.dumps({"seed": 7, "size": "smoke", "store": "journal", "runs": {"kill": 3},
                                 "skipped": {}, "crash_points_hit": {}, "calls": 9, "acknowledged": 8,
                                 "lost_unacknowledged": 0, "violations": [], "duration_s": 0.5, "reproduce": "x"}))
    out = tmp_path / "out"
    assert cli_main(["analyze", str(broker), str(crash), "--out", str(out), "--parquet",
                     "--sent-time-property", "sent_at"]) == 0
    printed = capsys.readouterr().out
    for title in ("damage", "dead-letters", "delivery-counts", "redelivery-delays", "time-in-queue", "segment-bytes",
                  "crash-tests"):
        assert f"== {title}" in printed
    assert any(line.split()[:5] == ["orders", "orders", "DLA", "max-delivery-attempts", "1"]
               and line.split()[5] == str(len(POISON_BODY)) for line in printed.splitlines())
    for plot in ("delivery-counts.png", "segment-bytes.png", "dead-letters.png", "redelivery-delays.png"):
        assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the Parquet Spark wrote, read without Spark (a job each would only repeat what the source tests check)
    records = pyarrow.parquet.read_table(str(out / "records.parquet"))
    written = sorted(zip(records.column("path").to_pylist(), records.column("offset").to_pylist()))
    assert written == sorted((path, offset) for journal in ("messages", "bindings")
                             for path, offset, *_ in python_rows(str(broker / journal)))
    assert pyarrow.parquet.read_table(str(out / "crash-tests.parquet")).column("runs").to_pylist() == [3]
    assert not spark.sparkContext._jsc.sc().isStopped()     # the caller's session stays up


@pytest.mark.spark
def test_analyze_of_a_damaged_journal_exits_1_naming_each_damaged_place(spark, tmp_path, capsys):
    """As verify, stats, export and dlq list do (docs/cli.md): the tables count only what could be read.
    Before, analyze printed the damage table and exited 0."""
    journal = tmp_path / "journal"
    write_journal(journal)
    assert cli_main(["analyze", str(journal)]) == 0          # healthy: 0, nothing on stderr
    assert "damage" not in capsys.readouterr().err
    path, offset = python_rows(str(journal))[10][:2]
    flip_byte(path, offset + 40)        # a byte of a frame in the middle: damage followed by valid frames
    corrupt = analyze(str(journal), as_if_compacted=True).report.corrupt
    assert corrupt
    assert cli_main(["analyze", str(journal)]) == 1
    printed = capsys.readouterr()
    assert "== damage" in printed.out and "== segment-bytes" in printed.out     # the tables still print
    for damaged_path, damaged_offset, reason in corrupt:
        assert f"journal-engine: damage: {damaged_path} offset {damaged_offset}: {reason}" in printed.err
    assert "damaged place" in printed.err and "journal-engine verify" in printed.err


@pytest.mark.spark
def test_analyze_keeps_sparks_log_and_progress_bar_out_of_the_terminal(spark, tmp_path):
    """A user's run of the command: its own tables on stdout, and on stderr none of Spark's log4j
    lines (its default profile says where it logs, then INFO lines) nor a stage progress bar."""
    assert spark.conf.get("spark.ui.showConsoleProgress") == "false"
    broker = tmp_path / "broker"
    write_broker(broker)
    done = subprocess.run([sys.executable, "-m", "journal_engine", "analyze", str(broker)], capture_output=True,
                          text=True, timeout=300, check=True)
    assert "== dead-letters" in done.stdout
    noise = [line for line in done.stderr.splitlines()
             if " INFO " in line or "log4j" in line or "[Stage " in line or "setLogLevel" in line
             or "Traceback" in line or "incubator" in line]
    assert not noise, noise


def test_analyze_refuses_a_path_it_cannot_read(tmp_path, capsys):
    stray = tmp_path / "notes.txt"
    stray.write_text("hello")
    assert cli_main(["analyze", str(stray)]) == 2
    assert "neither a directory nor a JSON report" in capsys.readouterr().err


def test_without_java_17_the_error_says_what_is_needed(tmp_path, monkeypatch):
    fake_home = tmp_path / "jdk"
    (fake_home / "bin").mkdir(parents=True)
    java = fake_home / "bin" / "java"
    java.write_text('#!/bin/sh\necho \'openjdk version "11.0.2" 2019-01-15\' >&2\n')
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(fake_home))
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="Java 17 or later.*Java 11"):
        environment.java_home()
    monkeypatch.delenv("JAVA_HOME")
    with pytest.raises(ConfigError, match="no java on PATH"):
        environment.java_home()


@pytest.mark.spark
def test_the_session_environment_uses_this_interpreter_and_the_loopback(monkeypatch):
    monkeypatch.setenv("JAVA_HOME", os.environ.get("JAVA_HOME", ""))
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP"):
        monkeypatch.delenv(name, raising=False)
    environment.prepare("local[2]")
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert os.path.isfile(os.path.join(os.environ["JAVA_HOME"], "bin", "java"))


@pytest.mark.spark
def test_the_session_reaches_its_python_workers_over_unix_domain_sockets(spark):
    # over TCP on the loopback every task of the source waited 40 ms for its partition (the kernel's
    # delayed acknowledgement of the JVM's small writes): session() turns Spark's Unix domain sockets on
    assert spark.conf.get("spark.python.unix.domain.socket.enabled") == "true"
    seen = spark.sparkContext.parallelize([0], 1).map(
        lambda _: os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED", "").lower()).collect()
    assert seen == ["true"]


_PLAIN_SESSION = """
import logging, sys
from pyspark.sql import SparkSession
from journal_engine.spark import environment, register
environment.prepare("local[1]")
logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(name)s: %(message)s")
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
register(spark)
spark.stop()
"""


@pytest.mark.spark
def test_registering_in_a_session_that_reaches_its_workers_over_tcp_says_what_to_set(spark, caplog):
    with caplog.at_level("WARNING", logger="journal_engine.spark.source"):
        register(spark)                                  # session(): Unix domain sockets, nothing to say
    assert not caplog.records
    done = subprocess.run([sys.executable, "-c", _PLAIN_SESSION], capture_output=True, text=True, timeout=300,
                          check=True)
    assert "journal_engine.spark.source: this SparkSession reaches its Python workers over TCP" in done.stdout
    assert f"{environment.UNIX_SOCKETS_OPTION}=true" in done.stdout


_LIMITED_READS = """
import sys, time
from journal_engine.spark import session
spark = session("local[1]", quiet_console=%s)
for _ in range(3):       # a task that needs one row: the JVM closes its Python worker's socket mid-stream
    print(spark.read.format("journal_engine").option("batch_rows", "8").load(sys.argv[1]).limit(1).collect()[0].kind)
time.sleep(2)            # a reading worker's broken pipe, had it been printed, reaches stderr before the mark
print("READS DONE", file=sys.stderr, flush=True)
spark.stop()
"""


def _limited_reads(journal, quiet_console: bool) -> tuple[str, str]:
    """stdout, and stderr split at the mark: before spark.stop() and from it."""
    done = subprocess.run([sys.executable, "-c", _LIMITED_READS % quiet_console, str(journal)],
                          capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.split() == ["ADD"] * 3
    reads, _, stop = done.stderr.partition("READS DONE\n")
    return reads, stop


@pytest.mark.spark
def test_a_python_worker_whose_socket_spark_closes_prints_no_traceback(tmp_path):
    # the reading workers' daemon itself (journal_engine.spark.daemon), with no console filter: until
    # spark.stop(), whose closing of pyspark's idle planner workers is quiet_console's (the next test)
    journal = tmp_path / "journal"
    write_journal(journal)
    reads, _ = _limited_reads(journal, quiet_console=False)
    assert "Traceback" not in reads and "BrokenPipeError" not in reads, reads


@pytest.mark.spark
def test_a_default_session_prints_no_traceback_at_its_stop_either(tmp_path):
    # spark.stop() closes the idle workers of pyspark's planner daemons (lookup, create and plan a data
    # source: always pyspark.daemon), and a worker waiting for its next task prints a BrokenPipeError
    # when its socket closes first: seen under load; session() filters the JVM's stderr by default
    journal = tmp_path / "journal"
    write_journal(journal)
    reads, stop = _limited_reads(journal, quiet_console=True)
    assert "Traceback" not in reads + stop and "BrokenPipeError" not in reads + stop, reads + stop
    assert "Using incubator modules" not in reads


def test_the_console_filter_drops_a_daemons_broken_pipe_and_the_jvms_notice_and_keeps_the_rest(tmp_path):
    daemon = "/site-packages/pyspark/python/lib/pyspark.zip/pyspark/daemon.py"
    written = [
        "WARNING: Using incubator modules: jdk.incubator.vector\n",
        "12:00:00 WARN SomeClass: a warning the user should see\n",
        "Traceback (most recent call last):\n", f'  File "{daemon}", line 264, in manager\n',
        f'  File "{daemon}", line 95, in worker\n', "BrokenPipeError: [Errno 32] Broken pipe\n",
        "Traceback (most recent call last):\n", '  File "mine.py", line 1, in <module>\n', "    boom()\n",
        "ValueError: a real failure\n",
        "Traceback (most recent call last):\n", f'  File "{daemon}", line 95, in worker\n',
        "ConnectionResetError: [Errno 104] Connection reset by peer\n",
        "the last line\n",
    ]
    read_end, write_end = os.pipe()
    out = tmp_path / "console"
    with open(out, "w") as console:
        copier = threading.Thread(target=environment._copy_console, args=(read_end, os.dup(console.fileno())))
        copier.start()
        with os.fdopen(write_end, "w") as pipe:
            pipe.writelines(written)
        copier.join(timeout=10)
    assert out.read_text().splitlines(keepends=True) == [written[1], *written[6:10], written[13]]


def test_analyze_refuses_a_directory_without_a_store_in_one_line_before_spark_starts(tmp_path):
    (tmp_path / "empty").mkdir()
    done = subprocess.run([sys.executable, "-m", "journal_engine", "analyze", str(tmp_path / "empty")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "holds no record store" in done.stderr, done.stderr
