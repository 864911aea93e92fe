"""Starting Spark for journal_engine: Java 17+, the interpreter the workers run, quiet logs, one session.

Spark 4 runs on Java 17 or later. ``java_home()`` takes ``JAVA_HOME`` when it points at a Java, else the
``java`` on ``PATH``, checks its version, and says what to install when neither will do. The Python
workers must run the interpreter that runs this code (the one journal_engine is installed in), so
``PYSPARK_PYTHON`` is set to it; a local session binds to the loopback (``SPARK_LOCAL_IP``), so a
machine without a resolvable host name still starts one. The log4j2 configuration shipped beside
this module keeps Spark to warnings, and the console progress bar is off.

The JVM talks to its Python workers over Unix domain sockets (``spark.python.unix.domain.socket.enabled``,
Spark 4.1+), not over TCP on the loopback: over TCP each task of the journal_engine source waited 40 ms
for its partition (the kernel's delayed acknowledgement of the JVM's small writes), a quarter of a
10 MiB file's task (docs/benchmarks.md).
"""
from __future__ import annotations

import atexit
import fcntl
import os
import re
import shutil
import subprocess
import struct
import sys
import termios
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from ..errors import ConfigError
from .source import UNIX_SOCKETS_OPTION, register

JAVA_VERSION_MIN = 17
LOCAL_MASTER_DEFAULT = "local[*]"
LOG4J2_CONFIGURATION = Path(__file__).with_name("log4j2.properties")
#: the JVM option that gives a driver or executor journal_engine's log settings (WARN) from its start
LOG4J2_JAVA_OPTION = f"-Dlog4j2.configurationFile={LOG4J2_CONFIGURATION.as_uri()}"
#: Arrow Java's checks off: Spark turns a Python source's Arrow batches into rows through ArrowColumnVector,
#: and with the checks on every value read re-checks the buffer's reference count and bounds (a quarter of
#: the JVM's time in a full read of the journal_engine source; docs/benchmarks.md). Without them a batch
#: whose offsets were wrong would crash the JVM instead of failing the task, so this is a choice for
#: large reads (``session(java_options=ARROW_UNCHECKED_JAVA_OPTIONS)``), not the default.
ARROW_UNCHECKED_JAVA_OPTIONS = "-Darrow.enable_unsafe_memory_access=true -Darrow.enable_null_check_for_get=false"
#: what every session() sets (``config`` may override): the module docstring says why
SESSION_DEFAULTS = {
    "spark.ui.showConsoleProgress": "false",
    UNIX_SOCKETS_OPTION: "true",
    "spark.python.daemon.module": "journal_engine.spark.daemon",   # a worker's broken pipe without a traceback
}
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


def _java_version(java: str) -> int:
    """The feature version (8, 11, 17, 21, ...) of a java executable."""
    result = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False)
    match = _VERSION.search(result.stderr + result.stdout)
    if not match:
        raise ConfigError("java", java, f"`{java} -version` did not print a version",
                          hint=f"Spark 4 needs Java {JAVA_VERSION_MIN}+; set JAVA_HOME to one")
    major, minor = int(match.group(1)), int(match.group(2) or 0)
    return minor if major == 1 else major      # "1.8.0" is Java 8


def java_home() -> str:
    """The home of a Java 17+ (JAVA_HOME, else the java on PATH); ConfigError saying Java 17+ is needed."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(("JAVA_HOME", Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    on_path = shutil.which("java")
    if on_path:
        candidates.append(("PATH", Path(on_path).resolve()))
    found = []
    for source, java in candidates:
        if not java.is_file():
            found.append(f"{source}: no {java}")
            continue
        version = _java_version(str(java))
        if version >= JAVA_VERSION_MIN:
            return str(java.parent.parent)
        found.append(f"{source}: Java {version} at {java}")
    raise ConfigError("JAVA_HOME", os.environ.get("JAVA_HOME"),
                      f"Spark 4 needs Java {JAVA_VERSION_MIN} or later; found "
                      + ("; ".join(found) if found else "no java on PATH"),
                      hint=f"install a Java {JAVA_VERSION_MIN}+ (e.g. openjdk-17-jre-headless) and set JAVA_HOME to it")


def prepare(master: str = LOCAL_MASTER_DEFAULT) -> None:
    """Set the environment a Spark session of this process needs (see the module docstring)."""
    os.environ["JAVA_HOME"] = java_home()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def session(master: str | None = None, app_name: str = "journal-engine", config: dict | None = None,
            java_options: str = "", quiet_console: bool = True):
    """A SparkSession with journal_engine's data source registered: quiet, started once per process.

    ``master`` None: ``local[*]``, unless spark-submit started this driver (its --master holds);
    ``config``: more Spark settings, applied last; ``java_options``: more options of the driver's and
    executors' JVMs (beside the log configuration), e.g. ``-XX:TieredStopAtLevel=1`` for short sessions;
    ``quiet_console`` (the default): the JVM this starts writes its stderr through ``console_filter``,
    so that ``spark.stop()`` does not print the broken pipes of pyspark's idle planner workers, which
    it closes; under spark-submit, whose JVM is running already, its System.err goes through the same
    filter (``filter_running_jvm_console``). False leaves the JVM's stderr as Spark has it."""
    from pyspark.sql import SparkSession

    if not _under_spark_submit():
        prepare(master or LOCAL_MASTER_DEFAULT)
    else:
        # spark-submit's --conf spark.pyspark.python reaches this driver as PYSPARK_PYTHON; without it the
        # executors would run "python3" from their PATH, which need not hold pyarrow nor journal_engine
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    java_options = f"{LOG4J2_JAVA_OPTION} {java_options}".strip()
    builder = (SparkSession.builder.appName(app_name)
               .config("spark.driver.extraJavaOptions", java_options)
               .config("spark.executor.extraJavaOptions", java_options))
    for key, value in SESSION_DEFAULTS.items():
        builder = builder.config(key, value)
    if master:
        builder = builder.master(master)
    elif not _under_spark_submit():
        builder = builder.master(LOCAL_MASTER_DEFAULT)
    if (master or LOCAL_MASTER_DEFAULT).startswith("local"):
        # a local session: few shuffle partitions (the default 200 are empty tasks on one machine), no web UI
        builder = (builder.config("spark.sql.shuffle.partitions", str(2 * (os.cpu_count() or 1)))
                   .config("spark.ui.enabled", "false"))
    for key, value in (config or {}).items():
        builder = builder.config(key, str(value))
    if quiet_console and not _under_spark_submit():
        with console_filter():
            spark = builder.getOrCreate()
    else:
        spark = builder.getOrCreate()
        if quiet_console:
            filter_running_jvm_console(spark)
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark


#: what the JVM started by session(quiet_console=True) may write that is not the user's concern: the notice of
#: the incubator module Spark 4 asks for, the first line of its stderr
_JVM_NOTICES = ("WARNING: Using incubator modules:",)
_TRACEBACK = "Traceback (most recent call last):"


@contextmanager
def console_filter():
    """While the body starts a JVM, its stderr -- and so that of the Python daemons it starts, pyspark's
    planners among them -- is a pipe a thread of this process reads and copies to this process's stderr,
    less what is not the user's concern: _JVM_NOTICES, and the ``BrokenPipeError`` (or reset) traceback of
    a pyspark daemon's worker whose socket the JVM closed. Spark stops its planners' idle Python workers
    after a minute (a full read of a large journal is such a minute), and pyspark.daemon prints each of
    their broken pipes; the daemon of the reading workers is journal_engine.spark.daemon, quiet by
    itself, but the planners' daemon is always pyspark's. Only what the body starts writes to the pipe."""
    read_end, write_end = os.pipe()
    console = os.dup(2)
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        os.dup2(console, 2)
        threading.Thread(target=_copy_console, args=(read_end, console), name="jvm-console", daemon=True).start()


def filter_running_jvm_console(spark) -> None:
    """What ``console_filter`` does for a JVM it starts, for the driver's JVM that spark-submit started
    before this process, with the terminal as its stderr. That JVM copies the stderr of the Python
    daemons it starts -- pyspark's planners', whose idle workers print a ``BrokenPipeError``
    traceback when Spark stops them, a minute idle or at the end -- to its ``System.err``; it is
    pointed at a pipe this process reads through the same filter into the JVM's own stderr (this
    process's stderr is the JVM's stdout under spark-submit). When this process exits the JVM's own
    lines go to its stderr again; what the daemons still write then goes nowhere: the copies of their
    stderr keep the stream they started with, and nothing reads the pipe. The JVM opens the pipe, and
    this process the JVM's stderr, through /proc (Linux); elsewhere nothing changes."""
    proc_fd = f"/proc/{os.getpid()}/fd"
    if not os.path.isdir(proc_fd):
        return
    jvm = spark.sparkContext._jvm
    console = os.open(f"/proc/{jvm.java.lang.ProcessHandle.current().pid()}/fd/2", os.O_WRONLY | os.O_APPEND)
    read_end, write_end = os.pipe()
    try:
        piped = jvm.java.io.PrintStream(jvm.java.io.FileOutputStream(f"{proc_fd}/{write_end}"), True)
    finally:
        os.close(write_end)      # the JVM holds the pipe open now
    terminal = jvm.java.lang.System.err
    threading.Thread(target=_copy_console, args=(read_end, console), name="jvm-console", daemon=True).start()
    jvm.java.lang.System.setErr(piped)

    def restore() -> None:
        try:
            jvm.java.lang.System.setErr(terminal)
        except Exception:        # the JVM went first
            return
        deadline = time.monotonic() + 1
        while _unread_bytes(read_end) and time.monotonic() < deadline:   # what is in the pipe reaches the terminal
            time.sleep(0.01)

    atexit.register(restore)


def _unread_bytes(fd: int) -> int:
    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0


def _copy_console(read_end: int, console: int) -> None:
    with os.fdopen(read_end, "r", errors="replace") as lines, os.fdopen(console, "w") as out:
        held: list[str] = []         # a traceback block, until its last line says what it is
        for line in lines:
            if held or line.startswith(_TRACEBACK):
                held.append(line)
                if line.startswith((" ", _TRACEBACK)):
                    continue
                quiet = (any("pyspark/daemon.py" in seen for seen in held)
                         and line.startswith(("BrokenPipeError", "ConnectionResetError")))
                if not quiet:
                    out.writelines(held)
                held = []
            elif not line.startswith(_JVM_NOTICES):
                out.write(line)
            out.flush()
        out.writelines(held)


def _under_spark_submit() -> bool:
    """True when spark-submit started this driver (it hands over its JVM gateway, and its --master)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ
