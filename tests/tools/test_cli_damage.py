"""Tools that hide damage, run as a user runs them (`journal-engine ...` in a child process): `export` and
`stats` of damaged files report each damaged place and exit 1; an export ends in a trailer that `import`
checks (a file cut short, without its trailer or with a changed row is refused); `import` of a binary
file or without lmdb is one line; `dlq list --queue NOPE`, a directory behind an unsearchable parent and
`compact` of a garbage data.mdb exit as docs/cli.md says."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from journal_engine import Journal
from journal_engine.limits import EXPORT_HEADER_LINE_BYTES_MAX

from damage import flip_byte
from test_cli_tools import UNPRIVILEGED, flip_byte_in_first_frame, snapshot, write_broker

HAS_LMDB = importlib.util.find_spec("lmdb") is not None
RECORDS = 5
DAMAGED_ID = 2


def journal_engine(*argv, input_bytes: bytes | None = None, prefix=()) -> subprocess.CompletedProcess:
    """The `journal-engine` command in a child process (``prefix``: a command that runs it, e.g. setpriv)."""
    return subprocess.run([*prefix, sys.executable, "-m", "journal_engine", *map(str, argv)], input=input_bytes,
                          capture_output=True, timeout=300, check=False)


def one_error_line(done: subprocess.CompletedProcess) -> str:
    """The one `journal-engine: error:` line of stderr (and no traceback)."""
    err = done.stderr.decode()
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("journal-engine: error:")]
    assert len(lines) == 1, err
    return lines[0]


def damage_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.decode().splitlines() if line.startswith("journal-engine: damage:")]


def flip_record(directory: Path, record_id: int) -> tuple[str, int]:
    """Flip a body byte of the ADD of ``record_id`` (found with `print --json`); (file path, frame offset)."""
    listing = journal_engine("print", directory, "--json")
    frame = next(json.loads(line) for line in listing.stdout.decode().splitlines()
                 if json.loads(line).get("record_id") == record_id)
    flip_byte(frame["path"], frame["offset"] + 40)
    return frame["path"], frame["offset"]


@pytest.fixture
def damaged_journal(tmp_path) -> tuple[Path, str, int]:
    """A journal of five records whose second is damaged and followed by valid ones."""
    directory = tmp_path / "journal"
    with Journal(directory, file_size=256 * 1024) as journal:
        journal.load()
        for record_id in range(1, RECORDS + 1):
            journal.add(record_id, 7, b"record %d " % record_id * 10)
    path, offset = flip_record(directory, DAMAGED_ID)
    return directory, path, offset


def exported_ids(jsonl: bytes) -> list[int]:
    return [row["record_id"] for row in map(json.loads, jsonl.splitlines()[1:]) if row["row"] == "record"]


# ----- export and stats of damaged files -----------------------------------------------------------------

def test_export_of_a_journal_with_a_damaged_record_reports_it_and_exits_1(damaged_journal, tmp_path):
    directory, path, offset = damaged_journal
    before = snapshot(directory)
    done = journal_engine("export", directory)
    assert done.returncode == 1
    assert exported_ids(done.stdout) == [1, 3, 4, 5]          # every record it could read is still exported
    assert damage_lines(done) == [f"journal-engine: damage: {path} offset {offset}: damaged frame (bad checksum, "
                                  f"length or kind) followed by valid records"]
    assert str(directory) in one_error_line(done) and "--allow-damage" in one_error_line(done)
    output = tmp_path / "salvage.jsonl"
    done = journal_engine("export", directory, "--allow-damage", "-o", output)
    assert done.returncode == 0 and len(damage_lines(done)) == 1       # knowingly: still told where
    assert exported_ids(output.read_bytes()) == [1, 3, 4, 5]
    assert journal_engine("import", output, tmp_path / "copy").returncode == 0
    assert snapshot(directory) == before


def test_export_stats_and_dlq_list_of_a_damaged_broker_directory_exit_1_naming_the_file(tmp_path):
    directory = tmp_path / "broker"
    write_broker(directory)
    path, offset = flip_byte_in_first_frame(directory / "messages")
    for argv in (["export", directory], ["stats", directory], ["stats", directory, "--json"],
                 ["dlq", "list", directory]):
        done = journal_engine(*argv)
        assert done.returncode == 1, argv
        (line,) = damage_lines(done)
        assert f"{path} offset {offset}:" in line, argv
        one_error_line(done)
    document = json.loads(journal_engine("stats", directory, "--json").stdout)
    messages = next(part for part in document["journals"] if part["journal"] == "messages")
    assert [(place["path"], place["offset"]) for place in messages["damage"]] == [(path, offset)]


def test_stats_of_a_journal_with_a_damaged_record_exits_1(damaged_journal):
    directory, path, offset = damaged_journal
    done = journal_engine("stats", directory)
    assert done.returncode == 1 and b"live records" in done.stdout
    assert [f"{path} offset {offset}" in line for line in damage_lines(done)] == [True]


def test_export_of_a_journal_with_a_torn_tail_judges_it_as_verify_does(tmp_path):
    from read_only_journals import build, tear_tail
    directory = tmp_path / "journal"
    build(directory)
    tear_tail(directory)
    assert journal_engine("verify", directory).returncode == 1
    done = journal_engine("export", directory)
    assert done.returncode == 1 and "torn tail" in damage_lines(done)[0]
    assert json.loads(done.stdout.splitlines()[-1])["row"] == "trailer"     # what was read, whole


def test_a_healthy_directory_exports_and_stats_with_exit_0_and_nothing_on_stderr(tmp_path):
    directory = tmp_path / "broker"
    write_broker(directory)
    for argv in (["export", directory], ["stats", directory]):
        done = journal_engine(*argv)
        assert (done.returncode, done.stderr) == (0, b""), argv


# ----- the trailer --------------------------------------------------------------------------------------

@pytest.fixture
def export_file(tmp_path) -> Path:
    directory = tmp_path / "broker"
    write_broker(directory)
    output = tmp_path / "export.jsonl"
    assert journal_engine("export", directory, "-o", output).returncode == 0
    return output


def test_an_export_ends_in_a_trailer_with_the_row_count_and_crc32c(export_file):
    from journal_engine._impl import crc32c
    lines = export_file.read_bytes().split(b"\n")
    assert lines[-1] == b""
    trailer = json.loads(lines[-2])
    crc = 0
    for line in lines[:-2]:
        crc = crc32c(line + b"\n", crc)
    assert trailer == {"row": "trailer", "rows": len(lines) - 3, "crc32c": crc}


def test_import_refuses_an_export_cut_short_by_head(export_file, tmp_path):
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(export_file.read_bytes().splitlines(keepends=True)[:5]))     # head -5
    done = journal_engine("import", cut, tmp_path / "new")
    assert done.returncode == 1
    line = one_error_line(done)
    assert str(cut) in line and "no trailer" in line and "cut short" in line
    assert not (tmp_path / "new").exists()


def test_import_refuses_an_export_cut_inside_a_line(export_file, tmp_path):
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(export_file.read_bytes()[:-10])
    done = journal_engine("import", cut, tmp_path / "new")
    assert done.returncode == 1 and "cut short" in one_error_line(done) and str(cut) in one_error_line(done)


def test_import_refuses_an_export_without_its_trailer(export_file, tmp_path):
    bare = tmp_path / "bare.jsonl"
    bare.write_bytes(b"".join(export_file.read_bytes().splitlines(keepends=True)[:-1]))
    done = journal_engine("import", bare, tmp_path / "new")
    assert done.returncode == 1 and "no trailer" in one_error_line(done)


def test_import_refuses_an_export_with_a_changed_row(export_file, tmp_path):
    text = export_file.read_bytes()
    changed = tmp_path / "changed.jsonl"
    changed.write_bytes(text.replace(b'"n":3', b'"n":4', 1))
    assert changed.read_bytes() != text
    done = journal_engine("import", changed, tmp_path / "new")
    assert done.returncode == 1 and "CRC32C" in one_error_line(done) and str(changed) in one_error_line(done)


def test_import_refuses_an_export_with_a_row_removed(export_file, tmp_path):
    lines = export_file.read_bytes().splitlines(keepends=True)
    removed = tmp_path / "removed.jsonl"
    removed.write_bytes(b"".join(lines[:2] + lines[3:]))
    done = journal_engine("import", removed, tmp_path / "new")
    assert done.returncode == 1 and "trailer says" in one_error_line(done)


def test_a_parquet_export_carries_the_trailer_and_import_checks_it(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="pyarrow: pip install 'journal_engine[export]'")
    import pyarrow.parquet as pq
    directory = tmp_path / "broker"
    write_broker(directory)
    exported = tmp_path / "export.parquet"
    assert journal_engine("export", directory, "--format", "parquet", "-o", exported).returncode == 0
    assert journal_engine("import", exported, tmp_path / "copy").returncode == 0
    table = pq.read_table(exported)
    rows = table.to_pylist()
    rows[0]["body"] = rows[0]["body"] + b"!"
    changed = tmp_path / "changed.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), changed)
    done = journal_engine("import", changed, tmp_path / "new")
    assert done.returncode == 1 and "CRC32C" in one_error_line(done)
    bare = tmp_path / "bare.parquet"
    metadata = {key: value for key, value in table.schema.metadata.items() if key != b"journal_engine_trailer"}
    pq.write_table(pa.Table.from_pylist(table.to_pylist(), schema=table.schema.with_metadata(metadata)), bare)
    done = journal_engine("import", bare, tmp_path / "new")
    assert done.returncode == 1 and "no trailer" in one_error_line(done)
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(exported.read_bytes()[:len(exported.read_bytes()) // 2])
    done = journal_engine("import", cut, tmp_path / "new")
    assert done.returncode == 1 and str(cut) in one_error_line(done)
    assert not (tmp_path / "new").exists()


def with_header_of_length(export: bytes, length: int) -> bytes:
    """The export with its first line padded (JSON whitespace) to ``length`` bytes, newline included, and a
    trailer that agrees: an export whose header is that long and nothing else wrong."""
    from journal_engine._impl import crc32c
    lines = export.split(b"\n")[:-2]
    header = lines[0][:-1] + b" " * (length - len(lines[0]) - 1) + b"}"
    lines[0] = header
    crc = 0
    for line in lines:
        crc = crc32c(line + b"\n", crc)
    trailer = json.dumps({"row": "trailer", "rows": len(lines) - 1, "crc32c": crc}, separators=(",", ":"))
    return b"\n".join(lines + [trailer.encode(), b""])


def test_an_export_header_is_read_up_to_its_cap(export_file, tmp_path):
    at_cap = tmp_path / "at-cap.jsonl"
    at_cap.write_bytes(with_header_of_length(export_file.read_bytes(), EXPORT_HEADER_LINE_BYTES_MAX))
    assert journal_engine("import", at_cap, tmp_path / "new").returncode == 0
    past_cap = tmp_path / "past-cap.jsonl"
    past_cap.write_bytes(with_header_of_length(export_file.read_bytes(), EXPORT_HEADER_LINE_BYTES_MAX + 1))
    done = journal_engine("import", past_cap, tmp_path / "newer")
    assert done.returncode == 2 and "not a journal_engine export" in one_error_line(done)


# ----- import: a file that is no export, a backend that is not installed --------------------------------

def test_import_of_a_binary_file_is_one_line_exit_2(tmp_path):
    binary = tmp_path / "image.bin"
    binary.write_bytes(bytes(range(256)) * 64)
    done = journal_engine("import", binary, tmp_path / "new")
    assert done.returncode == 2
    line = one_error_line(done)
    assert str(binary) in line and "not a journal_engine export" in line
    assert done.stderr.decode().count("\n") == 1 and not (tmp_path / "new").exists()


WITHOUT_LMDB = textwrap.dedent("""
    import sys
    sys.modules["lmdb"] = None          # as if lmdb were not installed: `import lmdb` raises ImportError
    from journal_engine.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def test_import_into_lmdb_without_lmdb_installed_names_the_extra(export_file, tmp_path):
    done = subprocess.run([sys.executable, "-c", WITHOUT_LMDB, "import", str(export_file), str(tmp_path / "new"),
                           "--backend", "lmdb"], capture_output=True, timeout=300, check=False)
    assert done.returncode == 2
    assert "pip install '.[lmdb]'" in one_error_line(done)
    assert not (tmp_path / "new").exists()


# ----- dlq list, an unreachable directory, compact ---------------------------------------------------------

def test_dlq_list_of_an_unknown_queue_exits_2_naming_it(tmp_path):
    directory = tmp_path / "broker"
    write_broker(directory)
    done = journal_engine("dlq", "list", directory, "--queue", "NOPE")
    assert done.returncode == 2 and done.stdout == b""
    line = one_error_line(done)
    assert "'NOPE'" in line and "DLQ" in line                   # the queues there, in the hint
    assert journal_engine("dlq", "list", directory, "--queue", "DLQ").returncode == 0


def test_a_directory_behind_a_parent_that_may_not_be_searched_is_an_io_error_exit_3(tmp_path):
    parent = tmp_path / "locked"
    write_broker(parent / "broker")
    parent.chmod(0)
    try:
        done = journal_engine("verify", parent / "broker", prefix=UNPRIVILEGED)
    finally:
        parent.chmod(0o755)
    assert done.returncode == 3
    line = one_error_line(done)
    assert str(parent / "broker") in line and "Permission denied" in line and "no such directory" not in line


@pytest.mark.skipif(not HAS_LMDB, reason="lmdb is not installed")
def test_compact_of_a_garbage_data_mdb_exits_1_as_verify_judges_it(tmp_path):
    directory = tmp_path / "store"
    directory.mkdir()
    (directory / "data.mdb").write_bytes(os.urandom(64 * 1024))
    assert journal_engine("verify", directory).returncode == 1
    before = snapshot(directory)
    done = journal_engine("compact", directory)
    assert done.returncode == 1
    assert str(directory / "data.mdb") in damage_lines(done)[0] and "compact refuses" in one_error_line(done)
    assert snapshot(directory) == before


def test_compact_of_a_damaged_journal_exits_1_and_leaves_its_files(damaged_journal):
    directory, path, offset = damaged_journal
    before = data_files(directory)
    done = journal_engine("compact", directory)
    assert done.returncode == 1 and f"{path} offset {offset}" in damage_lines(done)[0]
    assert data_files(directory) == before


def data_files(directory: Path) -> dict:
    """The journal's files, bytes and mtimes (not the lock file, which the writer's open rewrites)."""
    return {name: value for name, value in snapshot(directory).items() if name.endswith(".jej")}
