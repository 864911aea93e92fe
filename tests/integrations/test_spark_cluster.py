"""`journal-engine analyze` through spark-submit on a standalone cluster: a master and a worker started here
(pyspark's spark-class), as users run it, stopped on every path.

The worker's PATH holds only the system's directories: its ``python3`` is the system's, without pyarrow or
journal_engine, as on a cluster node where nothing was installed beside Spark. The submitting user's
interpreter is this one, first on spark-submit's PATH (an activated virtual environment).
"""
from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time

import pytest
from spark_journals import POISON_BODY, write_broker

pytestmark = pytest.mark.spark

START_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop(process: subprocess.Popen) -> None:
    """The process and everything it started (its own session: the JVM, executors, Python daemons)."""
    for signal_number, wait_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 20)):
        try:
            os.killpg(process.pid, signal_number)
        except ProcessLookupError:
            return
        try:
            process.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_for(log, text: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not in {log}:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """spark://127.0.0.1:PORT with one worker of 2 cores; the environment its nodes run with."""
    import pyspark
    from journal_engine.spark.environment import java_home
    base = tmp_path_factory.mktemp("cluster")
    spark_class = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")
    node_env = {"PATH": "/usr/bin:/bin", "HOME": str(base), "JAVA_HOME": java_home(), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_HOME": os.path.dirname(pyspark.__file__), "SPARK_WORKER_DIR": str(base / "work")}
    if os.environ.get("PYTHONPATH"):        # a run of the suite against another tree reads that tree
        node_env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    started = []
    try:
        master_log = base / "master.log"
        with open(master_log, "wb") as log:
            started.append(subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host",
                                             "127.0.0.1", "--port", str(port), "--webui-port", str(free_port())],
                                            env=node_env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True))
        wait_for(master_log, "I have been elected leader", started[0])
        worker_log = base / "worker.log"
        with open(worker_log, "wb") as log:
            started.append(subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker", "--host",
                                             "127.0.0.1", "--cores", "2", "--memory", "2g", "--webui-port",
                                             str(free_port()), url], env=node_env, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True))
        wait_for(master_log, "Registering worker", started[1])
        yield url, node_env
    finally:
        for process in reversed(started):
            stop(process)


def test_spark_submit_runs_analyze_on_a_standalone_cluster(cluster, tmp_path):
    url, node_env = cluster
    broker = tmp_path / "broker"
    write_broker(broker)
    venv_bin = tmp_path / "venv-bin"          # the user's activated environment: its python3 first on PATH
    venv_bin.mkdir()
    # a script that execs this interpreter by its own path, not a symlink to it: a venv's python is itself a
    # symlink, and Python finds its venv (pyvenv.cfg) beside the path it was started by, so a symlink of
    # that symlink in another folder would start the base interpreter, outside the venv
    (venv_bin / "python3").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    (venv_bin / "python3").chmod(0o755)
    import journal_engine.spark.submit as submit
    spark_submit = os.path.join(node_env["SPARK_HOME"], "bin", "spark-submit")
    done = subprocess.run([spark_submit, "--master", url, "--conf", "spark.ui.enabled=false",
                           "--driver-java-options", submit.JAVA_OPTIONS, submit.__file__, "analyze", str(broker)],
                          env={**node_env, "PATH": f"{venv_bin}:{node_env['PATH']}"}, capture_output=True, text=True,
                          timeout=600, start_new_session=True)
    errors = [line for line in done.stderr.splitlines() if "Error" in line and not line.startswith("\tat ")]
    assert done.returncode == 0, "\n".join(errors[:20])
    # quiet as docs/spark.md promises: no start-up INFO lines (the driver option), no worker's traceback
    assert not [line for line in done.stderr.splitlines() if " INFO " in line or "Traceback" in line], done.stderr
    assert any(line.split()[:5] == ["orders", "orders", "DLA", "max-delivery-attempts", "1"]
               and line.split()[5] == str(len(POISON_BODY)) for line in done.stdout.splitlines()), done.stdout


SUBMITTED_SCRIPT = '''
from journal_engine.spark import session
spark = session(quiet_console=True)
err = spark.sparkContext._jvm.java.lang.System.err
for line in ("Traceback (most recent call last):",
             '  File "/opt/spark/python/lib/pyspark.zip/pyspark/daemon.py", line 264, in manager',
             "BrokenPipeError: [Errno 32] Broken pipe",
             "Traceback (most recent call last):",
             '  File "job.py", line 3, in <module>',
             "ValueError: the user's own error",
             "a line of the JVM's own"):
    err.println(line)
spark.stop()
'''


def test_under_spark_submit_a_planners_broken_pipe_traceback_is_kept_off_the_terminal(cluster, tmp_path):
    """spark-submit starts the driver's JVM before journal_engine runs, with the terminal as its stderr,
    and the JVM copies its Python daemons' stderr there: pyspark's planners' daemon among them, which
    prints a worker's BrokenPipeError traceback when Spark stops that worker after a minute idle. A
    session(quiet_console=True) -- what ``analyze`` starts -- points the running JVM's System.err
    through journal_engine's console filter: that traceback is kept back, anything else is printed."""
    url, node_env = cluster
    script = tmp_path / "job.py"
    script.write_text(SUBMITTED_SCRIPT)
    spark_submit = os.path.join(node_env["SPARK_HOME"], "bin", "spark-submit")
    done = subprocess.run([spark_submit, "--master", url, "--conf", "spark.ui.enabled=false", str(script)],
                          env={**node_env, "PATH": f"{os.path.dirname(sys.executable)}:{node_env['PATH']}",
                               "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=300, start_new_session=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "BrokenPipeError" not in done.stderr and "pyspark/daemon.py" not in done.stderr, done.stderr
    assert "ValueError: the user's own error" in done.stderr and "a line of the JVM's own" in done.stderr, done.stderr
    assert done.stderr.count("Traceback (most recent call last):") == 1, done.stderr[-2500:] + "\nSTDOUT:\n" + done.stdout[-2500:]
