"""`journal-engine bench`: the report's shape, its JSON schema, the plots, and skipped peers said out loud.

Untimed: the numbers of a run on a test machine mean nothing; what is checked is that every store of
every scenario either ran (with a median, a ratio and a fraction of the machine's limit) or was
reported skipped with a reason, that the JSON matches the schema shipped in the package, and that the
plots are PNG files that open. The run is the hidden `--tiny` matrix (every scenario, every store,
two rounds), in a temporary directory on the disk the tests use.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("rich", reason="the bench command needs rich: pip install 'journal_engine[bench]'")
pytest.importorskip("matplotlib", reason="the bench plots need matplotlib: pip install 'journal_engine[bench]'")
jsonschema = pytest.importorskip("jsonschema", reason="the report's schema check needs jsonschema (in the test extra)")

from journal_engine import cli  # noqa: E402
from journal_engine.benchmarking import peers, plots, report, runner, workloads  # noqa: E402
from report_schema import assert_meets_schema, assert_refused_without  # noqa: E402

SCENARIOS = {"append": peers.APPEND_STORES, "send-receive-ack": peers.QUEUE_STORES,
             "rollback-redeliver": peers.QUEUE_STORES, "recovery": peers.RECOVERY_STORES}
SKIP_SCENARIO = {"append": "append", "send-receive-ack": "queue", "rollback-redeliver": "queue",
                 "recovery": "recovery"}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One `journal-engine bench --tiny` run through the command line: its document, output and files."""
    root = tmp_path_factory.mktemp("bench")
    outputs = root / "out"
    code = cli.main(["bench", "--tiny", "--no-progress", "--dir", str(root / "data"),
                     "--json", str(outputs / "bench.json"), "--plot", str(outputs / "plots")])
    document = json.loads((outputs / "bench.json").read_text())
    return code, document, outputs


def test_the_command_runs_and_exits_zero(tiny_run):
    code, document, _ = tiny_run
    assert code == 0
    assert document["matrix"] == "tiny"
    assert document["rounds"] == workloads.tiny_matrix().rounds


def test_every_store_of_every_cell_ran_or_was_reported_skipped(tiny_run):
    _, document, _ = tiny_run
    matrix = workloads.tiny_matrix()
    keys = {"append": [cell.key for cell in matrix.append],
            "send-receive-ack": [cell.key for cell in matrix.queue if cell.operation == "send-receive-ack"],
            "rollback-redeliver": [cell.key for cell in matrix.queue if cell.operation == "rollback-redeliver"],
            "recovery": [cell.key for cell in matrix.recovery]}
    ran = {(r["scenario"], r["cell"]["key"], r["store"]) for r in document["results"]}
    skipped = {(s["scenario"], s["cell"], s["store"]) for s in document["skipped"]}
    for scenario, stores in SCENARIOS.items():
        assert keys[scenario], scenario
        for key in keys[scenario]:
            for store in stores:
                reported = ((scenario, key, store.name) in ran
                            or (SKIP_SCENARIO[scenario], key, store.name) in skipped
                            or (SKIP_SCENARIO[scenario], None, store.name) in skipped)
                assert reported, f"{store.name} in {scenario} / {key}: neither ran nor reported skipped"
    for skip in document["skipped"]:
        assert skip["reason"].strip()


def test_ours_ran_everywhere_and_each_result_has_its_ratios(tiny_run):
    _, document, _ = tiny_run
    for scenario in SCENARIOS:
        stores = {r["store"] for r in document["results"] if r["scenario"] == scenario}
        assert stores & {"journal", "broker-journal"}, f"the journal did not run in {scenario}"
    for result in document["results"]:
        assert result["median_records_per_s"] > 0
        assert len(result["round_records_per_s"]) == document["rounds"]
        assert result["min_records_per_s"] <= result["median_records_per_s"] <= result["max_records_per_s"]
        if result["best_peer"] is not None:
            assert result["ratio_to_best_peer"] > 0
        if result["scenario"] in ("append", "recovery"):
            assert result["fraction_of_limit"] > 0 and result["limit"]
        if result["scenario"] == "append" and result["cell"]["sync"] == "durable":
            latency = result["sync_latency_us"]
            assert latency["p50_us"] <= latency["p99_us"] <= latency["max_us"]


def test_the_machine_limits_and_the_directory_are_in_the_report(tiny_run):
    _, document, _ = tiny_run
    limits = document["limits"]
    assert limits["raw_sync_loop"]["syncs_per_s"] > 0
    assert limits["bandwidth"]["write_synced_mb_per_s"] > 0
    disk = document["machine"]["disk"]
    assert disk["path"].endswith("data") and disk["fstype"] and isinstance(disk["tmpfs"], bool)
    assert document["estimated_s"] > 0


def test_the_json_matches_the_schema_shipped_in_the_package(tiny_run):
    _, document, _ = tiny_run
    schema = report.schema()
    assert_meets_schema(document, schema)
    assert document["schema_version"] == runner.SCHEMA_VERSION == schema["properties"]["schema_version"]["const"]


def test_the_schema_refuses_another_version_and_a_result_without_its_median(tiny_run):
    _, document, _ = tiny_run
    schema = report.schema()
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**document, "schema_version": 2}, schema)
    assert_refused_without(document, schema, "median_records_per_s")


def test_the_plots_are_pngs_that_open(tiny_run):
    _, _, outputs = tiny_run
    from PIL import Image
    for name in (plots.THROUGHPUT_FILE, plots.LATENCY_FILE):
        path = outputs / "plots" / name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:
            assert image.size[0] > 200 and image.size[1] > 200


def test_the_markdown_table_names_every_store_that_ran(tiny_run):
    _, document, _ = tiny_run
    text = report.markdown(document)
    for store in {r["store"] for r in document["results"]}:
        assert f" {store} |" in text, store


# ----- skipped peers and a tmpfs, on a one-cell matrix ---------------------------------------------------------

def _one_cell_matrix() -> workloads.Matrix:
    return workloads.Matrix("tiny", (workloads.AppendCell(256, 1, workloads.SYNC_DURABLE, 1, 20),), (), (),
                            rounds=1, limit_samples=20, bandwidth_bytes=1 << 20)


def _run_one_cell(tmp_path: Path, monkeypatch) -> tuple[dict, str]:
    from rich.console import Console
    monkeypatch.setitem(workloads.MATRICES, "tiny", _one_cell_matrix)
    console = Console(record=True, width=200)
    document = runner.Runner(runner.Options(tmp_path / "data", matrix="tiny", progress=False), console).run()
    report.print_tables(document, console)
    return document, console.export_text()


def test_a_peer_that_does_not_import_is_skipped_with_a_line_never_silently(tmp_path, monkeypatch):
    monkeypatch.setitem(peers.PEER_MODULES, "rocksdb", "journal_engine_no_such_peer_module")
    document, text = _run_one_cell(tmp_path, monkeypatch)
    skips = [s for s in document["skipped"] if s["store"] == "rocksdb"]
    assert skips and skips[0]["cell"] is None and "journal_engine_no_such_peer_module" in skips[0]["reason"]
    assert "pip install" in skips[0]["reason"]
    assert "skipped: rocksdb" in text
    assert "rocksdb" not in {r["store"] for r in document["results"]}
    assert "journal" in {r["store"] for r in document["results"]}


def test_a_peer_that_fails_during_a_round_is_reported_and_the_run_goes_on(tmp_path, monkeypatch):
    def broken_open(self, directory, cell):
        raise OSError("the peer broke")
    monkeypatch.setattr(peers.SqliteAppend, "open", broken_open)
    document, text = _run_one_cell(tmp_path, monkeypatch)
    skips = [s for s in document["skipped"] if s["store"] == "sqlite"]
    assert skips and "the peer broke" in skips[0]["reason"] and skips[0]["cell"]
    assert "skipped: sqlite" in text
    assert {"journal", "raw-file"} <= {r["store"] for r in document["results"]}


def test_a_tmpfs_directory_is_warned_about(tmp_path, monkeypatch):
    from journal_engine.benchmarking import machine
    real = machine.disk_of

    def as_tmpfs(path):
        return {**real(path), "fstype": "tmpfs", "tmpfs": True}

    monkeypatch.setattr(machine, "disk_of", as_tmpfs)
    document, text = _run_one_cell(tmp_path, monkeypatch)
    assert document["machine"]["disk"]["tmpfs"] is True
    assert "warning" in text and "tmpfs" in text


def test_the_directory_and_the_estimate_are_said_before_the_matrix_runs(tmp_path, monkeypatch):
    _, text = _run_one_cell(tmp_path, monkeypatch)
    lines = text.splitlines()
    where = next(i for i, line in enumerate(lines) if line.startswith("measuring in "))
    estimate = next(i for i, line in enumerate(lines) if " matrix: " in line and "about" in line)
    table = next(i for i, line in enumerate(lines) if line.startswith("Append"))
    assert where < estimate < table
    assert str((tmp_path / "data").resolve()) in lines[where]


def test_the_doc_section_between_the_markers_is_rewritten_and_the_prose_kept(tiny_run, tmp_path):
    _, document, _ = tiny_run
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# prose before\n{report.DOC_START}\nold table\n{report.DOC_END}\nprose after\n")
    report.update_doc(document, doc)
    text = doc.read_text()
    assert text.startswith("# prose before\n") and text.endswith(f"{report.DOC_END}\nprose after\n")
    assert "old table" not in text and "| cell | limit/s |" in text
    unmarked = tmp_path / "no-markers.md"
    unmarked.write_text("prose only\n")
    with pytest.raises(ValueError):
        report.update_doc(document, unmarked)
    assert unmarked.read_text() == "prose only\n"
