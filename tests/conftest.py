"""Shared fixtures. The suite requires the compiled core unless the Python twin is forced."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import journal_engine
from journal_engine import Journal

# the helpers (child-process workers, the skip gate, shared journals) import by name from every folder
sys.path.insert(0, str(Path(__file__).resolve().parent / "helpers"))
import skips_allowed  # noqa: E402

SMALL_FILE = 256 * 1024   # small files so tests cross file boundaries quickly


def pytest_report_header(config):
    return f"journal_engine implementation: {journal_engine.IMPLEMENTATION}"


def pytest_configure(config):
    # every skip listed with its message at the end; on CI (CI=true) one not in tests/helpers/skips_allowed.py fails
    skips_allowed.pytest_configure(config)


def pytest_sessionstart(session):
    forced = os.environ.get("JOURNAL_ENGINE_IMPLEMENTATION", "").lower() == "python"
    if not forced and journal_engine.IMPLEMENTATION != "cython":
        raise pytest.UsageError(
            "the compiled core of journal_engine did not build or import; the suite tests the compiled core "
            "(set JOURNAL_ENGINE_IMPLEMENTATION=python to test the Python twin on purpose)")


@pytest.fixture
def journal_dir(tmp_path):
    path = tmp_path / "journal"
    path.mkdir()
    return path


@pytest.fixture
def open_journal(journal_dir):
    """open_journal(**options) -> (journal, load_result); every journal is closed at the end."""
    opened = []

    def _open(directory=None, **options):
        options.setdefault("file_size", SMALL_FILE)
        journal = Journal(directory or journal_dir, **options)
        opened.append(journal)
        return journal, journal.load()

    yield _open
    for journal in opened:
        journal.close()


#: the tests' session: their tables are a few hundred rows, so the cost is the JVM's own start and the
#: planning of each query, not the data. One shuffle partition, no adaptive re-planning, no code generation
#: (Janino compiling each query's classes costs more than interpreting a few rows), Python workers reused
#: between tasks; a JVM for a short run: the JIT's quick tier only, a serial collector, and no bytecode
#: verification of Spark's own jars (loading their classes is most of a session's start).
SPARK_TEST_CONFIG = {
    "spark.sql.shuffle.partitions": 1,
    "spark.default.parallelism": 2,
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.catalogImplementation": "in-memory",
    "spark.python.worker.reuse": "true",
    "spark.ui.enabled": "false",
}
SPARK_TEST_JAVA_OPTIONS = ("-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:CICompilerCount=1 "
                           "-XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote")


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of a test run, for every Spark test of every module (a session takes seconds
    to start): local[2], quiet, with the journal_engine data source registered."""
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    pytest.importorskip("pyarrow", reason="the spark extra is not installed")
    from journal_engine.spark import session
    started = session("local[2]", "journal-engine-tests", SPARK_TEST_CONFIG, java_options=SPARK_TEST_JAVA_OPTIONS)
    yield started
    started.stop()
