"""`journal-engine export` / `import`: a broker directory (journal or LMDB) or a plain journal to JSON
lines or Parquet and back into a new directory that recovers to the same state."""
from __future__ import annotations

import json

import pytest

from journal_engine import Broker, Journal, ManualClock, MessageStore
from journal_engine.cli import main

from test_cli_tools import BACKENDS, NOW, write_broker


def run(capsys, *argv):
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def recovered(directory, backend):
    """What a broker sees: queues and, per queue, (message id, body, properties, delivery count)."""
    with MessageStore(directory, backend=backend, read_only=True) as store:
        state = store.load()
    return ({q.queue_id: (q.name, q.address, q.filter) for q in state.queues.values()},
            {queue_id: [(r.message_id, state.messages[r.message_id].body, dict(state.messages[r.message_id].properties),
                         r.delivery_count) for r in refs] for queue_id, refs in state.references.items()})


def rows_of(out: str) -> list:
    """The rows of a JSON-lines export: between its first line and its trailer (whose checksum covers
    the first line too, which names the backend)."""
    lines = out.splitlines()
    assert json.loads(lines[-1])["row"] == "trailer"
    return [json.loads(line) for line in lines[1:-1]]


@pytest.mark.parametrize("file_format", ["jsonl", "parquet"])
@pytest.mark.parametrize("store", BACKENDS)
def test_export_import_round_trip_of_a_broker_directory(tmp_path, capsys, store, file_format):
    if file_format == "parquet":
        pytest.importorskip("pyarrow", reason="parquet needs pyarrow: pip install 'journal_engine[export]'")
    source = tmp_path / "broker"
    write_broker(source, store)
    exported = tmp_path / f"export.{file_format}"
    code, out, _ = run(capsys, "export", source, "--format", file_format, "--output", exported)
    assert code == 0 and str(exported) in out
    copy = tmp_path / "copy"
    code, out, _ = run(capsys, "import", exported, copy, "--backend", "journal")
    assert code == 0 and "imported" in out
    assert recovered(copy, "journal") == recovered(source, store)
    _, first, _ = run(capsys, "export", source)
    _, second, _ = run(capsys, "export", copy)
    assert rows_of(first) == rows_of(second)
    header = json.loads(first.splitlines()[0])
    assert header["format"] == "journal_engine-export" and header["layout"] == "store"
    with Broker(copy, clock=ManualClock(NOW + 10_000)) as broker:        # the broker runs on the import
        assert broker.queue("orders").message_count == 3
        assert broker.queue("DLQ").message_count == 2
        message = broker.create_consumer("orders").receive(0)
        assert message.delivery_count == 2 and message.redelivered      # its count 1 came through


def test_export_import_of_a_plain_journal_keeps_updates_and_prepared_transactions(tmp_path, capsys):
    source = tmp_path / "journal"
    with Journal(source, file_size=256 * 1024) as journal:
        journal.load()
        journal.add(1, 7, b"one")
        journal.update(1, 8, b"one, updated")
        journal.add(2, 7, b"\x00\xffbinary")
        journal.add_tx(5, 3, 7, b"in a prepared transaction")
        journal.prepare(5, b"xid-5")
    exported = tmp_path / "export.jsonl"
    assert run(capsys, "export", source, "-o", exported)[0] == 0
    copy = tmp_path / "copy"
    assert run(capsys, "import", exported, copy)[0] == 0
    with Journal(copy, read_only=True) as journal:
        loaded = journal.load()
    assert {i: (r.record_type, r.body, r.updates) for i, r in loaded.records.items()} == {
        1: (7, b"one", [(8, b"one, updated")]), 2: (7, b"\x00\xffbinary", [])}
    (prepared,) = loaded.prepared
    assert (prepared.tx_id, prepared.xid, [(r.kind, r.record_id, r.body) for r in prepared.records]) == (
        5, b"xid-5", [("add", 3, b"in a prepared transaction")])


def test_import_refuses_a_directory_that_is_not_empty_and_a_foreign_file(tmp_path, capsys):
    source = tmp_path / "broker"
    write_broker(source)
    exported = tmp_path / "export.jsonl"
    run(capsys, "export", source, "-o", exported)
    code, _, err = run(capsys, "import", exported, source)
    assert code == 2 and "not empty" in err
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text('{"hello": 1}\n')
    code, _, err = run(capsys, "import", foreign, tmp_path / "new")
    assert code == 2 and "not a journal_engine export" in err and not (tmp_path / "new").exists()
