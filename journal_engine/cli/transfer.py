"""`export` and `import`: the live records of a journal, an LMDB store or a broker directory, to a
file and back into a new directory (as ``artemis data exp`` / ``imp``).

An export holds what a load() returns — live records with their updates in append order, prepared
transactions — not the history in the files: importing it gives a directory that recovers to the
same state (the same queues, messages, references, delivery counts and scheduled times for a broker
directory), in freshly written files. ``export`` of damaged files writes every record it could read,
reports each damaged place on stderr and exits 1 (0 with ``--allow-damage``): an export kept as a
backup must not lack a message silently.

JSON lines (``--format jsonl``), format version 2: a first line ``{"format": "journal_engine-export",
"version": 2, "layout": "store" | "journal", "backend": ...}``, then one object per record (``"row":
"record"``: journal, record_id, record_type, record_type_name, body (base64), updates [{record_type,
body}], fields — the decoded message-store fields, for people and analysis; import ignores them) or
per prepared transaction (``"row": "prepared"``: journal, tx_id, xid, ops [{op, record_id,
record_type, body}]), then the trailer, always the last line: ``{"row": "trailer", "rows": N,
"crc32c": C}``, N the number of rows between the first line and the trailer, C the CRC32C
(Castagnoli, journal_engine's ``crc32c``) of the first line and every row line, each as UTF-8 with
its ``\n``, chained in file order. ``import`` refuses (exit status 1, naming the file and what is
wrong) a file without its trailer (cut short, as by ``head``, or never written to the end), a file
cut inside a line, a row count or a checksum that differs (a row changed, added or removed).
Parquet (``--format parquet``, needs pyarrow): the same rows as columns, ``fields`` as JSON text; the
schema's metadata holds the first line (key ``journal_engine``) and the trailer (key
``journal_engine_trailer``), whose checksum is computed over the JSON lines the same rows give.
"""
from __future__ import annotations

import base64
import json
import os

import click

from .._impl import crc32c
from ..errors import CorruptRecordError, JournalError
from ..limits import BINDINGS_FILE_SIZE_MAX_BYTES, EXPORT_HEADER_LINE_BYTES_MAX
from ..record_format import REPLACEABLE_TYPES
from ..storage.backends import BACKENDS, backend_named
from ..message_store.message_store import BINDINGS_DIRECTORY, MESSAGES_DIRECTORY
from .console import EXIT_OK, progress, stdout
from .damage import Damage, damage_in, damage_status
from .records import decode_fields, json_value, type_name
from .target import NoJournalError, Part, locate

__all__ = ["COMMANDS", "NotAnExportError", "export_rows", "read_export"]

FORMAT_NAME = "journal_engine-export"
FORMAT_VERSION = 2          # 2: the trailer (row count and CRC32C) ends every export
TRAILER_ROW = "trailer"
PARQUET_HEADER_KEY = b"journal_engine"
PARQUET_TRAILER_KEY = b"journal_engine_trailer"
class NotAnExportError(JournalError, ValueError):
    """The file given to ``import`` is no export of this version at all (a usage error: exit status 2);
    an export that is damaged raises CorruptRecordError instead (exit status 1)."""

    def __init__(self, path: str, why: str) -> None:
        self.path = path
        super().__init__(f"{path}: {why}", hint="give a file written by `journal-engine export` (JSON lines or "
                                                "Parquet)")


_RE_EXPORT_HINT = "export the directory again; an export without its intact trailer is not a whole copy"


def _b64(raw: bytes) -> str:
    return base64.b64encode(bytes(raw)).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def _record_row(journal: str, record_id: int, record_type: int, body: str, updates: list, fields) -> dict:
    """A record's row (``body`` and the updates' bodies in base64); the one place its keys and their order
    are written, so the Parquet reader gives back the very lines the checksum covers."""
    return {"row": "record", "journal": journal, "record_id": record_id, "record_type": record_type,
            "record_type_name": type_name(record_type), "body": body, "updates": updates, "fields": fields}


def _prepared_row(journal: str, tx_id: int, xid: str, ops: list) -> dict:
    return {"row": "prepared", "journal": journal, "tx_id": tx_id, "xid": xid, "ops": ops}


def _row_line(row: dict) -> str:
    return json.dumps(row, separators=(",", ":"))


def _checksum(header_line: bytes, row_lines) -> int:
    """The trailer's CRC32C: the first line and every row line, each with its newline, in file order."""
    crc = crc32c(header_line + b"\n")
    for line in row_lines:
        crc = crc32c(line + b"\n", crc)
    return crc


def _trailer(header_line: str, row_lines: list[str]) -> dict:
    return {"row": TRAILER_ROW, "rows": len(row_lines),
            "crc32c": _checksum(header_line.encode(), (line.encode() for line in row_lines))}


def _load_read_only(part: Part):
    replaceable = REPLACEABLE_TYPES if part.name == MESSAGES_DIRECTORY else None
    with part.backend.open(part.path, read_only=True, replaceable_types=replaceable) as store:
        return store.load(copy=True)      # owned bytes: a live writer may recycle a file under a view


def export_rows(directory: str) -> tuple[dict, list, list[Damage]]:
    """(header, rows, damage) of an export of ``directory`` (read-only): the rows of every record
    that could be read, and where the files are damaged (what the rows may lack)."""
    target = locate(directory)
    header = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "layout": "store" if target.store else "journal",
              "backend": target.backend.name}
    rows = []
    damage: list[Damage] = []
    with progress("exporting", len(target.parts)) as advance:
        for part in target.parts:
            loaded = _load_read_only(part)
            damage.extend(damage_in(part.name, loaded.report))
            for record_id, info in sorted(loaded.records.items()):
                rows.append(_record_row(part.name, record_id, info.record_type, _b64(info.body),
                                        [{"record_type": t, "body": _b64(b)} for t, b in info.updates],
                                        json_value(decode_fields(record_id, info.record_type, info.body))))
            for prepared in loaded.prepared:
                rows.append(_prepared_row(part.name, prepared.tx_id, _b64(prepared.xid),
                                          [{"op": r.kind, "record_id": r.record_id, "record_type": r.record_type,
                                            "body": _b64(r.body)} for r in prepared.records]))
            advance()
    return header, rows, damage


# ----- parquet ----------------------------------------------------------------------------------------

def _arrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise click.UsageError("--format parquet needs pyarrow: pip install '.[export]' in the journal_engine checkout") from None
    return pyarrow, pyarrow.parquet


def _parquet_schema(pa):
    blob = pa.struct([("record_type", pa.int32()), ("body", pa.binary())])
    op = pa.struct([("op", pa.string()), ("record_id", pa.uint64()), ("record_type", pa.int32()),
                    ("body", pa.binary())])
    return pa.schema([("row", pa.string()), ("journal", pa.string()), ("record_id", pa.uint64()),
                      ("record_type", pa.int32()), ("record_type_name", pa.string()), ("body", pa.binary()),
                      ("updates", pa.list_(blob)), ("fields", pa.string()), ("tx_id", pa.uint64()),
                      ("xid", pa.binary()), ("ops", pa.list_(op))])


def _write_parquet(path: str, header_line: str, rows: list, trailer: dict) -> None:
    pa, pq = _arrow()
    columns = {name: [] for name in _parquet_schema(pa).names}
    for row in rows:
        record = row["row"] == "record"
        columns["row"].append(row["row"])
        columns["journal"].append(row["journal"])
        columns["record_id"].append(row.get("record_id"))
        columns["record_type"].append(row.get("record_type"))
        columns["record_type_name"].append(row.get("record_type_name"))
        columns["body"].append(_unb64(row["body"]) if record else None)
        columns["updates"].append([{"record_type": u["record_type"], "body": _unb64(u["body"])}
                                   for u in row["updates"]] if record else None)
        columns["fields"].append(json.dumps(row["fields"]) if record else None)
        columns["tx_id"].append(row.get("tx_id"))
        columns["xid"].append(_unb64(row["xid"]) if not record else None)
        columns["ops"].append([dict(o, body=_unb64(o["body"])) for o in row["ops"]] if not record else None)
    schema = _parquet_schema(pa).with_metadata({PARQUET_HEADER_KEY: header_line,
                                                PARQUET_TRAILER_KEY: json.dumps(trailer)})
    pq.write_table(pa.table(columns, schema=schema), path)


def _read_parquet(path: str) -> tuple[bytes, list, dict | None]:
    """(first line, rows, trailer) of a Parquet export (trailer None when its metadata has none)."""
    pa, pq = _arrow()
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise CorruptRecordError(f"cannot be read as Parquet ({exc}): the file was cut short or damaged",
                                 path=path, hint=_RE_EXPORT_HINT) from None
    metadata = table.schema.metadata or {}
    if PARQUET_HEADER_KEY not in metadata:
        raise NotAnExportError(path, "a Parquet file without journal_engine's metadata, not an export")
    trailer = json.loads(metadata[PARQUET_TRAILER_KEY]) if PARQUET_TRAILER_KEY in metadata else None
    rows = []
    for row in table.to_pylist():
        if row["row"] == "record":
            rows.append(_record_row(row["journal"], row["record_id"], row["record_type"], _b64(row["body"]),
                                    [{"record_type": u["record_type"], "body": _b64(u["body"])}
                                     for u in row["updates"]], json.loads(row["fields"])))
        else:
            rows.append(_prepared_row(row["journal"], row["tx_id"], _b64(row["xid"]),
                                      [dict(o, body=_b64(o["body"])) for o in row["ops"]]))
    return metadata[PARQUET_HEADER_KEY], rows, trailer


# ----- reading an export back -------------------------------------------------------------------------

def _header_of(path: str, line: bytes) -> dict:
    """The first line, when it is the header of an export of this version (a usage error otherwise:
    the file given is not an export at all)."""
    try:
        header = json.loads(line)
    except ValueError:          # UnicodeDecodeError too: a binary file
        raise NotAnExportError(path, "not a journal_engine export (its first line is not JSON)") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise NotAnExportError(path, f"not a journal_engine export (first line: {line[:80]!r})")
    if header.get("version") != FORMAT_VERSION:
        raise NotAnExportError(path, f"a journal_engine export of version {header.get('version')}; this version "
                                     f"reads version {FORMAT_VERSION} (export the directory again)")
    return header


def _check_trailer(path: str, trailer, header_line: bytes, row_lines: list[bytes]) -> None:
    """CorruptRecordError (exit status 1) unless the trailer is there and agrees with the rows."""
    if not isinstance(trailer, dict) or trailer.get("row") != TRAILER_ROW:
        raise CorruptRecordError("has no trailer: the export was cut short, or never written to the end",
                                 path=path, hint=_RE_EXPORT_HINT)
    if trailer.get("rows") != len(row_lines):
        raise CorruptRecordError(f"holds {len(row_lines)} rows where its trailer says {trailer.get('rows')}: rows "
                                 f"were removed or added", path=path, hint=_RE_EXPORT_HINT)
    if trailer.get("crc32c") != _checksum(header_line, row_lines):
        raise CorruptRecordError("a row differs from what was exported (the trailer's CRC32C does not match)",
                                 path=path, hint=_RE_EXPORT_HINT)


def _read_json_lines(path: str, handle) -> tuple[dict, list]:
    header_line = handle.readline(EXPORT_HEADER_LINE_BYTES_MAX)
    if not header_line.strip():
        raise NotAnExportError(path, "empty file, not a journal_engine export")
    if len(header_line) == EXPORT_HEADER_LINE_BYTES_MAX and not header_line.endswith(b"\n"):
        raise NotAnExportError(path, f"not a journal_engine export (no line ends in its first "
                                     f"{EXPORT_HEADER_LINE_BYTES_MAX} bytes)")
    header = _header_of(path, header_line)
    if not header_line.endswith(b"\n"):
        raise CorruptRecordError("ends inside its first line: the export was cut short", path=path,
                                 offset=len(header_line), hint=_RE_EXPORT_HINT)
    rest = handle.read()
    lines = rest.split(b"\n")
    if lines[-1]:
        raise CorruptRecordError("ends inside a line: the export was cut short", path=path,
                                 offset=len(header_line) + len(rest), hint=_RE_EXPORT_HINT)
    lines.pop()
    try:
        trailer = json.loads(lines[-1]) if lines else None
    except ValueError:
        trailer = None
    row_lines = lines[:-1] if isinstance(trailer, dict) and trailer.get("row") == TRAILER_ROW else lines
    _check_trailer(path, trailer, header_line[:-1], row_lines)
    return header, [json.loads(line) for line in row_lines]


def read_export(path: str) -> tuple[dict, list]:
    """(header, rows) of an export file (JSON lines or Parquet, told by its first bytes), its trailer
    checked: CorruptRecordError for a file cut short or changed, NotAnExportError for a file that is
    not an export."""
    with open(path, "rb") as handle:
        if handle.read(4) == b"PAR1":
            header_line, rows, trailer = _read_parquet(path)
            header = _header_of(path, header_line)
            _check_trailer(path, trailer, header_line, [_row_line(row).encode() for row in rows])
            return header, rows
        handle.seek(0)
        return _read_json_lines(path, handle)


# ----- the commands -----------------------------------------------------------------------------------

@click.command("export")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--format", "file_format", type=click.Choice(["jsonl", "parquet"]), default="jsonl", show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=str),
              help="the file to write (jsonl: default standard output; parquet: required)")
@click.option("--allow-damage", is_flag=True,
              help="exit 0 when damaged files leave records out (the damage is still reported on stderr)")
def export_command(directory: str, file_format: str, output, allow_damage: bool) -> int:
    """Export the live records of DIRECTORY (read-only) as JSON lines or Parquet, ended by a trailer
    (row count and CRC32C) that `import` checks. Damage: every readable record is exported, each
    damaged place is reported on stderr, and the exit status is 1 (0 with --allow-damage)."""
    if file_format == "parquet" and output is None:
        raise click.UsageError("--format parquet needs --output FILE")
    if file_format == "parquet":
        _arrow()
    header, rows, damage = export_rows(directory)
    header_line = json.dumps(header)
    row_lines = [_row_line(row) for row in rows]
    trailer = _trailer(header_line, row_lines)
    if file_format == "parquet":
        _write_parquet(output, header_line, rows, trailer)
    else:
        lines = [header_line, *row_lines, _row_line(trailer)]
        if output is None:
            for line in lines:
                click.echo(line)
        else:
            with open(output, "w", encoding="utf-8") as handle:
                handle.write("\n".join(lines) + "\n")
    if output is not None:
        stdout().print(f"exported {len(rows)} rows of {directory} to {output} ({file_format})")
    return damage_status(directory, damage, f"the export holds the {len(rows)} rows that could be read, and may "
                         f"lack the records stored there", f"`journal-engine verify {directory}` lists the damage; "
                         f"--allow-damage exports what can be read with exit status 0", allowed=allow_damage)


def _open_record_store(path: str, name: str, backend: str):
    replaceable = REPLACEABLE_TYPES if name == MESSAGES_DIRECTORY else None
    file_size = {"file_size": BINDINGS_FILE_SIZE_MAX_BYTES} if name == BINDINGS_DIRECTORY else {}
    return backend_named(backend).open(path, replaceable_types=replaceable, sync="none", **file_size)


@click.command("import")
@click.argument("export_file", type=click.Path(exists=True, dir_okay=False, path_type=str))
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--backend", type=click.Choice(list(BACKENDS)), help="default: the exported directory's")
def import_command(export_file: str, directory: str, backend) -> int:
    """Write the records of EXPORT_FILE into a new DIRECTORY (which must not exist or be empty), once its
    trailer agrees with its rows: an export cut short or changed is refused (exit status 1)."""
    if os.path.exists(directory) and (not os.path.isdir(directory) or os.listdir(directory)):
        raise NoJournalError(directory, "exists and is not empty; import writes only into a new directory")
    header, rows = read_export(export_file)
    backend = backend or header.get("backend", "journal")
    names = sorted({row["journal"] for row in rows}
                   | ({MESSAGES_DIRECTORY, BINDINGS_DIRECTORY} if header["layout"] == "store" else set()))
    stores = {}
    try:
        for name in names:
            path = directory if header["layout"] == "journal" else os.path.join(directory, name)
            stores[name] = _open_record_store(path, name, backend)
            stores[name].load()
        with progress("importing", len(rows)) as advance:
            for row in rows:
                store = stores[row["journal"]]
                if row["row"] == "record":
                    store.add(row["record_id"], row["record_type"], _unb64(row["body"]))
                    for update in row["updates"]:
                        store.update(row["record_id"], update["record_type"], _unb64(update["body"]))
                else:
                    for op in row["ops"]:
                        if op["op"] == "add":
                            store.add_tx(row["tx_id"], op["record_id"], op["record_type"], _unb64(op["body"]))
                        elif op["op"] == "update":
                            store.update_tx(row["tx_id"], op["record_id"], op["record_type"], _unb64(op["body"]))
                        else:
                            store.delete_tx(row["tx_id"], op["record_id"])
                    store.prepare(row["tx_id"], _unb64(row["xid"]))
                advance()
            for store in stores.values():
                store.sync()
    finally:
        for store in stores.values():
            store.close()
    stdout().print(f"imported {len(rows)} rows into {directory} ({header['layout']}, {backend})")
    return EXIT_OK


COMMANDS = [export_command, import_command]
