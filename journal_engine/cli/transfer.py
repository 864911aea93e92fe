"""`export` and `import`: the live records of a journal, an LMDB store or a broker directory, to a
file and back into a new directory (as ``artemis data exp`` / ``imp``).

An export holds what a load() returns — live records with their updates in append order, prepared
transactions — not the history in the files: importing it gives a directory that recovers to the
same state (the same queues, messages, references, delivery counts and scheduled times for a broker
directory), in freshly written files.

JSON lines (``--format jsonl``): a first line ``{"format": "journal_engine-export", "version": 1,
"layout": "store" | "journal", "backend": ...}``, then one object per record (``"row": "record"``:
journal, record_id, record_type, record_type_name, body (base64), updates [{record_type, body}],
fields — the decoded message-store fields, for people and analysis; import ignores them) or per
prepared transaction (``"row": "prepared"``: journal, tx_id, xid, ops [{op, record_id, record_type,
body}]). Parquet (``--format parquet``, needs pyarrow): the same rows as columns, the first line's
fields in the schema's metadata, ``fields`` as JSON text.
"""
from __future__ import annotations

import base64
import json
import os

import click

from ..record_format import REPLACEABLE_TYPES
from ..storage.journal import Journal
from ..store.message_store import BINDINGS_DIRECTORY, BINDINGS_FILE_SIZE_MAX_BYTES, MESSAGES_DIRECTORY
from .console import EXIT_OK, progress, stdout
from .records import decode_fields, json_value, type_name
from .target import NoJournalError, Part, locate

__all__ = ["COMMANDS", "export_rows", "read_export"]

FORMAT_NAME = "journal_engine-export"
FORMAT_VERSION = 1


def _b64(raw: bytes) -> str:
    return base64.b64encode(bytes(raw)).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def _load_read_only(part: Part):
    if part.backend == "lmdb":
        from ..store.lmdb_store import LmdbRecordStore
        with LmdbRecordStore(part.path, read_only=True) as store:
            return store.load()
    replaceable = REPLACEABLE_TYPES if part.name == MESSAGES_DIRECTORY else None
    with Journal(part.path, read_only=True, replaceable_types=replaceable) as journal:
        return journal.load()


def export_rows(directory: str):
    """(header, rows) of an export of ``directory`` (read-only)."""
    target = locate(directory)
    header = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "layout": "store" if target.store else "journal",
              "backend": target.backend}
    rows = []
    with progress("exporting", len(target.parts)) as advance:
        for part in target.parts:
            loaded = _load_read_only(part)
            for record_id, info in sorted(loaded.records.items()):
                rows.append({"row": "record", "journal": part.name, "record_id": record_id,
                             "record_type": info.record_type, "record_type_name": type_name(info.record_type),
                             "body": _b64(info.body),
                             "updates": [{"record_type": t, "body": _b64(b)} for t, b in info.updates],
                             "fields": json_value(decode_fields(record_id, info.record_type, info.body))})
            for prepared in loaded.prepared:
                rows.append({"row": "prepared", "journal": part.name, "tx_id": prepared.tx_id,
                             "xid": _b64(prepared.xid),
                             "ops": [{"op": r.kind, "record_id": r.record_id, "record_type": r.record_type,
                                      "body": _b64(r.body)} for r in prepared.records]})
            advance()
    return header, rows


# ----- parquet ----------------------------------------------------------------------------------------

def _arrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise click.UsageError("--format parquet needs pyarrow: pip install 'journal_engine[export]'") from None
    return pyarrow, pyarrow.parquet


def _parquet_schema(pa):
    blob = pa.struct([("record_type", pa.int32()), ("body", pa.binary())])
    op = pa.struct([("op", pa.string()), ("record_id", pa.uint64()), ("record_type", pa.int32()),
                    ("body", pa.binary())])
    return pa.schema([("row", pa.string()), ("journal", pa.string()), ("record_id", pa.uint64()),
                      ("record_type", pa.int32()), ("record_type_name", pa.string()), ("body", pa.binary()),
                      ("updates", pa.list_(blob)), ("fields", pa.string()), ("tx_id", pa.uint64()),
                      ("xid", pa.binary()), ("ops", pa.list_(op))])


def _write_parquet(path: str, header: dict, rows: list) -> None:
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
    schema = _parquet_schema(pa).with_metadata({"journal_engine": json.dumps(header)})
    pq.write_table(pa.table(columns, schema=schema), path)


def _read_parquet(path: str) -> tuple[dict, list]:
    pa, pq = _arrow()
    table = pq.read_table(path)
    metadata = (table.schema.metadata or {}).get(b"journal_engine")
    if metadata is None:
        raise click.UsageError(f"{path}: not a journal_engine export (no journal_engine metadata)")
    header = json.loads(metadata)
    rows = []
    for row in table.to_pylist():
        if row["row"] == "record":
            rows.append({"row": "record", "journal": row["journal"], "record_id": row["record_id"],
                         "record_type": row["record_type"], "body": _b64(row["body"]),
                         "updates": [{"record_type": u["record_type"], "body": _b64(u["body"])}
                                     for u in row["updates"]]})
        else:
            rows.append({"row": "prepared", "journal": row["journal"], "tx_id": row["tx_id"], "xid": _b64(row["xid"]),
                         "ops": [dict(o, body=_b64(o["body"])) for o in row["ops"]]})
    return header, rows


def read_export(path: str) -> tuple[dict, list]:
    """(header, rows) of an export file (JSON lines or Parquet, told by its first bytes)."""
    with open(path, "rb") as handle:
        magic = handle.read(4)
    if magic == b"PAR1":
        header, rows = _read_parquet(path)
    else:
        with open(path, encoding="utf-8") as handle:
            lines = [line for line in handle if line.strip()]
        if not lines:
            raise click.UsageError(f"{path}: empty file, not a journal_engine export")
        try:
            header = json.loads(lines[0])
            rows = [json.loads(line) for line in lines[1:]]
        except ValueError as exc:
            raise click.UsageError(f"{path}: not a JSON-lines journal_engine export ({exc})") from None
    if header.get("format") != FORMAT_NAME or header.get("version") != FORMAT_VERSION:
        raise click.UsageError(f"{path}: not a journal_engine export of version {FORMAT_VERSION} "
                               f"(first line: {str(header)[:80]})")
    return header, rows


# ----- the commands -----------------------------------------------------------------------------------

@click.command("export")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--format", "file_format", type=click.Choice(["jsonl", "parquet"]), default="jsonl", show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=str),
              help="the file to write (jsonl: default standard output; parquet: required)")
def export_command(directory: str, file_format: str, output) -> int:
    """Export the live records of DIRECTORY (read-only) as JSON lines or Parquet; `import` reads it back."""
    if file_format == "parquet" and output is None:
        raise click.UsageError("--format parquet needs --output FILE")
    if file_format == "parquet":
        _arrow()
    header, rows = export_rows(directory)
    if file_format == "parquet":
        _write_parquet(output, header, rows)
    else:
        lines = [json.dumps(header)] + [json.dumps(row, separators=(",", ":")) for row in rows]
        if output is None:
            for line in lines:
                click.echo(line)
        else:
            with open(output, "w", encoding="utf-8") as handle:
                handle.write("\n".join(lines) + "\n")
    if output is not None:
        stdout().print(f"exported {len(rows)} rows of {directory} to {output} ({file_format})")
    return EXIT_OK


def _open_record_store(path: str, name: str, backend: str):
    replaceable = REPLACEABLE_TYPES if name == MESSAGES_DIRECTORY else None
    if backend == "lmdb":
        from ..store.lmdb_store import LmdbRecordStore
        return LmdbRecordStore(path, replaceable_types=replaceable, sync="none")
    file_size = {"file_size": BINDINGS_FILE_SIZE_MAX_BYTES} if name == BINDINGS_DIRECTORY else {}
    return Journal(path, replaceable_types=replaceable, sync="none", **file_size)


@click.command("import")
@click.argument("export_file", type=click.Path(exists=True, dir_okay=False, path_type=str))
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--backend", type=click.Choice(["journal", "lmdb"]), help="default: the exported directory's")
def import_command(export_file: str, directory: str, backend) -> int:
    """Write the records of EXPORT_FILE into a new DIRECTORY (which must not exist or be empty)."""
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
