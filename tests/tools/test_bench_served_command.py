"""`journal-engine bench --served`: the document's fields and schema, the plot, brokers that are not
installed said out loud with the command that installs them, and a broker that fails reported with
its log while the run goes on.

Untimed and small: one round of 0.3 s phases on our server alone, with PATH holding no broker (so
RabbitMQ, ActiveMQ and Redis are reported skipped whether or not this machine has them; the command
runs our server with this interpreter, not from PATH). About 20 s in all. The run against the peers
themselves is the documented command (docs/benchmarks.md); bench/test_bench_served.py runs the same
code as CI's bench smoke.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("rich", reason="the bench command needs rich: pip install '.[bench]'")
pytest.importorskip("matplotlib", reason="the bench plot needs matplotlib: pip install '.[bench]'")
jsonschema = pytest.importorskip("jsonschema", reason="the report's schema check needs jsonschema (in the test extra)")

from journal_engine import cli  # noqa: E402
from journal_engine.benchmarking import served_peers, served_report, served_runner  # noqa: E402
from report_schema import assert_meets_schema, assert_refused_without  # noqa: E402

PEERS_NOT_ON_PATH = {"rabbitmq": "apt-get install rabbitmq-server", "activemq": "apt-get install activemq",
                     "redis": "apt-get install redis-server"}


@pytest.fixture(scope="module")
def run_without_peers(tmp_path_factory):
    """One run through the command line with an empty PATH: its exit status, document and files."""
    root = tmp_path_factory.mktemp("bench-served")
    empty = root / "empty-path"
    empty.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", str(empty))
        code = cli.main(["bench", "--served", "--quick", "--no-progress", "--targets", "served,rabbitmq,activemq,redis",
                         "--celery", "--seconds", "0.3", "--messages", "400", "--producers", "1,4",
                         "--dir", str(root / "data"), "--json", str(root / "out" / "served.json"),
                         "--plot", str(root / "out" / "served.png")])
    document = json.loads((root / "out" / "served.json").read_text())
    return code, document, root


def test_the_command_exits_zero_and_measures_our_server(run_without_peers):
    code, document, _ = run_without_peers
    assert code == 0
    assert document["quick"] is True and document["rounds"] == 1 and document["producers"] == [1, 4]
    ran = {(r["part"], r["workload"], r["target"]) for r in document["results"]}
    assert ran >= {("stomp", "receipted 1", "served"), ("stomp", "receipted 4", "served"),
                   ("stomp", "ingest", "served"), ("stomp", "drain", "served")}, ran


def test_every_result_has_its_rate_spread_latency_and_syncs(run_without_peers):
    _, document, _ = run_without_peers
    for result in document["results"]:
        assert result["min_per_s"] <= result["median_per_s"] <= result["max_per_s"]
        assert len(result["round_per_s"]) == document["rounds"]
        if result["part"] == "stomp" and result["target"] == "served":
            assert result["fdatasyncs_per_message"] is not None and result["fdatasyncs_per_message"] > 0
            if result["workload"].startswith("receipted"):
                assert 0 < result["p50_ms"] <= result["p99_ms"]
        assert result["best_peer"] is None and result["ratio_to_best_peer"] is None   # no peer ran


def test_a_broker_that_is_not_installed_is_skipped_with_its_apt_get_command(run_without_peers):
    _, document, _ = run_without_peers
    for target, command in PEERS_NOT_ON_PATH.items():
        skips = [s for s in document["skipped"] if s["target"] == target]
        assert skips, f"{target} neither ran nor was reported skipped"
        assert all(s["workload"] is None and command in s["reason"] for s in skips), skips
    assert {s["part"] for s in document["skipped"] if s["target"] == "redis"} == {"celery"}
    assert not [r for r in document["results"] if r["target"] in PEERS_NOT_ON_PATH]


def test_the_peers_list_says_what_ours_promises_and_how_it_was_started(run_without_peers):
    _, document, _ = run_without_peers
    served = next(peer for peer in document["peers"] if peer["name"] == "served")
    assert served["ours"] and "fdatasync" in served["promise"] and "serve-stomp" in served["started"]
    assert served["version"].startswith("journal_engine ")


def test_the_json_matches_its_schema_shipped_in_the_package(run_without_peers):
    _, document, _ = run_without_peers
    schema = served_report.schema()
    assert_meets_schema(document, schema)
    assert schema["properties"]["schema_version"]["const"] == served_runner.SCHEMA_VERSION
    assert_refused_without(document, schema, "median_per_s")


def test_the_plot_is_a_png_that_opens(run_without_peers):
    _, _, root = run_without_peers
    from PIL import Image
    path = root / "out" / "served.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        assert image.size[0] > 300


def test_no_broker_process_and_no_scratch_directory_is_left(run_without_peers):
    _, _, root = run_without_peers
    assert not list((root / "data").glob("served-*")), "the run's scratch directories were not removed"


@pytest.mark.parametrize("arguments, message", [
    (["--targets", "served,kafka"], "kafka unknown"),
    (["--producers", "0"], "must be positive"),
    (["--messages", "3"], "at least 8"),
])
def test_a_bad_value_is_a_usage_error(arguments, message, capsys, tmp_path):
    assert cli.main(["bench", "--served", "--no-progress", "--dir", str(tmp_path), *arguments]) == 2
    assert message in capsys.readouterr().err


def test_a_served_option_without_served_is_a_usage_error(capsys, tmp_path):
    assert cli.main(["bench", "--targets", "served", "--dir", str(tmp_path)]) == 2
    assert "--targets needs --served" in capsys.readouterr().err


def test_each_broker_says_what_it_promises_and_how_it_is_started():
    for name, broker in served_peers.BROKERS.items():
        assert broker.name == name
        assert broker.promise().strip() and broker.how_started().strip()


def test_the_rabbitmq_and_activemq_files_stay_in_the_scratch_directory(tmp_path, monkeypatch):
    """What each broker is given points into its scratch directory, never /var/lib or /etc (checked
    without starting them: the settings are written before the first process starts)."""
    spawned = []

    def spawn(self, role, command, env):
        spawned.append((command, env))
        raise served_peers.PeerStartError("not started in this test")

    monkeypatch.setattr(served_peers.Broker, "_spawn", spawn)
    for broker in (served_peers.RabbitMQ, served_peers.ActiveMQ):
        monkeypatch.setattr(broker, "unavailable", classmethod(lambda cls: None))
    monkeypatch.setattr(served_peers.RabbitMQ, "_scripts", classmethod(lambda cls: Path("/usr/lib/rabbitmq/bin")))
    monkeypatch.setattr(served_peers.shutil, "which", lambda name: f"/usr/bin/{name}")
    for broker in (served_peers.RabbitMQ, served_peers.ActiveMQ):
        with pytest.raises(served_peers.PeerStartError):
            with broker(tmp_path / broker.name):
                pass
    (epmd_command, rabbit_env), (activemq_command, _) = spawned
    assert epmd_command[1:] == ["-port", rabbit_env["ERL_EPMD_PORT"], "-address", "127.0.0.1"]
    for name in ("HOME", "RABBITMQ_MNESIA_BASE", "RABBITMQ_LOG_BASE", "RABBITMQ_ENABLED_PLUGINS_FILE",
                 "RABBITMQ_CONFIG_FILE", "RABBITMQ_CONF_ENV_FILE", "RABBITMQ_PID_FILE"):
        assert rabbit_env[name].startswith(str(tmp_path / "rabbitmq")), (name, rabbit_env[name])
    assert rabbit_env["RABBITMQ_NODENAME"].endswith("@localhost") and rabbit_env["RABBITMQ_DIST_PORT"].isdigit()
    conf = (tmp_path / "rabbitmq" / "rabbitmq.conf").read_text()
    assert "listeners.tcp.local = 127.0.0.1:" in conf and "stomp.listeners.tcp.local = 127.0.0.1:" in conf
    assert (tmp_path / "rabbitmq" / "enabled_plugins").read_text().strip() == "[rabbitmq_stomp]."
    xml = (tmp_path / "activemq" / "conf" / "activemq.xml").read_text()
    assert "stomp://127.0.0.1:" in xml and "61616" not in xml and "jetty" not in xml
    assert f'<kahaDB directory="{tmp_path / "activemq" / "data"}/kahadb"/>' in xml
    assert f"-Dactivemq.base={tmp_path / 'activemq'}" in activemq_command


class _QuietConsole:
    def print(self, *args, **kwargs) -> None:
        pass


class _ExitsAtOnce(served_peers.Broker):
    """A broker whose process ends before it answers: the run must report it and go on."""
    name = "activemq"

    @classmethod
    def unavailable(cls):
        return None

    @classmethod
    def version(cls):
        return "a stand-in that exits"

    @classmethod
    def how_started(cls):
        return "python -c 'sys.exit(3)'"

    def _start(self):
        import sys
        child = self._spawn("server", [sys.executable, "-c", "import sys; print('cannot start'); sys.exit(3)"], {})
        self._wait(child, "answer to a STOMP CONNECT", lambda: served_peers.accepts(served_peers.free_port()))


def test_a_broker_that_fails_is_reported_with_its_log_and_the_run_goes_on(tmp_path, monkeypatch):
    monkeypatch.setitem(served_peers.BROKERS, "activemq", _ExitsAtOnce)
    sizes = served_runner.Sizes(rounds=2, seconds=0.2, messages=200, producers=(2,), celery=False, celery_tasks=1,
                                targets=("served", "activemq"))
    document = served_runner.ServedRunner(served_runner.Options(tmp_path, sizes=sizes, progress=False),
                                          _QuietConsole()).run()
    assert {r["target"] for r in document["results"]} == {"served"}
    failed = [s for s in document["skipped"] if s["target"] == "activemq"]
    assert {s["workload"] for s in failed} == {"receipted 2", "ingest", "drain"}
    for skip in failed:
        assert skip["reason"].startswith("failed in round 1: PeerStartError")
        assert "exited with status 3" in skip["reason"] and "cannot start" in skip["reason"]
    log = failed[0]["reason"].split("(logs in ")[-1].rstrip(")")
    assert (Path(log) / "server.log").read_text().strip() == "cannot start"   # kept for a look
