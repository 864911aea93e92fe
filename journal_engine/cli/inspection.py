"""`print`, `stats`, `verify`: read-only inspection of a journal, an LMDB store or a broker directory.

Each reads through ``target`` (the recovery analysis, the scan decoder, read-only stores) and never
writes to what it inspects.
"""
from __future__ import annotations

from collections import Counter

import click
from rich.table import Table

from ..errors import CorruptRecordError
from ..limits import COMPACT_MIN_FILES_DEFAULT, COMPACT_PERCENTAGE_DEFAULT
from ..record_format import REPLACEABLE_TYPES, FrameCheck, RecordKind, RecordType
from ..storage.journal.format import HEADER_FLAG_COMPACTED
from ..storage.journal.journal import compaction_due
from ..storage.journal.recovery import analyze
from .console import EXIT_DAMAGE, EXIT_OK, emit_json, emit_json_line, progress, stdout
from .damage import Damage, damage_in, damage_status
from .records import (BODY_KINDS, RecordFilter, decode_fields, json_value, kind_name, parse_kind, parse_type,
                      type_name)
from .target import Part, journal_frames, locate

__all__ = ["COMMANDS", "verify_part"]

directory_argument = click.argument("directory", type=click.Path(file_okay=False, path_type=str))


def _replaceable(part: Part) -> dict:
    """The replaceable record types a journal of this part was written with."""
    return REPLACEABLE_TYPES if part.name == "messages" else {}


def _loaded_records(part: Part):
    """Live records and stats of a record store whose files hold no frames to decode, opened read-only."""
    with part.backend.open(part.path, read_only=True) as store:
        return store.load(), store.stats()


def _file_count(part: Part) -> int:
    return part.backend.file_count(part.path)


# ----- print -------------------------------------------------------------------------------------------

def _text_line(record: dict, body: bytes, shown_bytes: int) -> str:
    fields = record.get("fields") or {}
    shown = " ".join(f"{key}={value!r}" if isinstance(value, str) else f"{key}={value}"
                     for key, value in fields.items())
    head = (f"{record['offset'] if record['offset'] is not None else '-':>10}  {record['kind']:<9} "
            f"id={record['record_id']} type={record['record_type']} tx={record['tx_id']}")
    if record["kind"] in ("ADD", "UPDATE", "ADD_TX", "UPDATE_TX"):
        head += f" {record['record_type_name']} len={record['body_size']}"
        if shown:
            head += f" {shown}"
        if shown_bytes and not fields:
            head += " " + body[:shown_bytes].hex() + ("…" if len(body) > shown_bytes else "")
    return head


def _print_record(part: Part, path, offset, kind, record_type, record_id, tx_id, body, addresses: dict,
                  selection: RecordFilter, as_json: bool, shown_bytes: int) -> None:
    fields = decode_fields(record_id, record_type, body, path=path) if kind in BODY_KINDS else {}
    if record_type == RecordType.ADD_MESSAGE and part.name != "bindings" and "address" in fields:
        addresses[record_id] = fields["address"]
    if not selection.accepts(kind, record_type, record_id, addresses.get(record_id)):
        return
    record = {"journal": part.name, "path": path, "offset": offset, "kind": kind_name(kind), "record_id": record_id,
              "record_type": record_type, "record_type_name": type_name(record_type) if kind in BODY_KINDS else None,
              "tx_id": tx_id, "body_size": len(body), "fields": json_value(fields)}
    if as_json:
        if shown_bytes:
            record["body_hex"] = body[:shown_bytes].hex()
        emit_json_line(record)
    else:
        click.echo(_text_line(record, body, shown_bytes))


@click.command("print")
@directory_argument
@click.option("--json", "as_json", is_flag=True, help="one JSON object per record (NDJSON)")
@click.option("--kind", "kinds", multiple=True, metavar="KIND", help="only this record kind (ADD, UPDATE, DELETE, "
              "ADD_TX, COMMIT, ...); repeatable")
@click.option("--type", "types", multiple=True, metavar="TYPE", help="only this user record type, by name or number "
              "(ADD_MESSAGE or 45, ADD_REF, UPDATE_DELIVERY_COUNT, ...); repeatable")
@click.option("--id-min", type=int, help="only record ids >= this")
@click.option("--id-max", type=int, help="only record ids <= this")
@click.option("--address", help="only records of messages sent to this address")
@click.option("--bytes", "shown_bytes", type=click.IntRange(min=0), default=16, show_default=True,
              help="body bytes to show in hex for records without decoded fields")
@click.option("--pads", is_flag=True, help="show PAD frames too")
def print_command(directory: str, as_json: bool, kinds, types, id_min, id_max, address, shown_bytes: int,
                  pads: bool) -> int:
    """Every record of DIRECTORY, decoded (message-store records by name and fields), in replay order.

    DIRECTORY is a journal, an LMDB store, or a broker directory (messages/ and bindings/)."""
    try:
        selection = RecordFilter(frozenset(parse_kind(k) for k in kinds), frozenset(parse_type(t) for t in types),
                                 id_min, id_max, address)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    target = locate(directory)
    addresses: dict[int, str] = {}
    with progress("reading", sum(_file_count(part) for part in target.parts)) as advance:
        for part in target.parts:
            if not part.backend.frames:
                loaded, _stats = _loaded_records(part)
                if not as_json:
                    click.echo(f"# {part.path}: {part.backend.description}, {len(loaded.records)} live records")
                for record_id, info in sorted(loaded.records.items()):
                    _print_record(part, part.path, None, RecordKind.ADD, info.record_type, record_id, 0, info.body,
                                  addresses, selection, as_json, shown_bytes)
                    for update_type, body in info.updates:
                        _print_record(part, part.path, None, RecordKind.UPDATE, update_type, record_id, 0, body,
                                      addresses, selection, as_json, shown_bytes)
                advance()
                continue
            for data, frames in journal_frames(part.path):
                advance()
                if not as_json:
                    click.echo(f"# {data.path}: file id {data.header.file_id}, sequence {data.header.sequence}"
                               + (" (compacted)" if data.header.flags & HEADER_FLAG_COMPACTED else ""))
                for offset, check, kind, user_type, record_id, tx_id, body in frames:
                    if check != FrameCheck.VALID:      # damage (a clean end is no row)
                        label = FrameCheck(check).name
                        if as_json:
                            emit_json_line({"journal": part.name, "path": data.path, "offset": offset, "check": label})
                        else:
                            click.echo(f"{offset:>10}  {label}")
                        continue
                    if kind == RecordKind.PAD and not pads:
                        continue
                    _print_record(part, data.path, offset, kind, user_type, record_id, tx_id, bytes(body),
                                  addresses, selection, as_json, shown_bytes)
    return EXIT_OK


# ----- stats -------------------------------------------------------------------------------------------

def _journal_stats(part: Part) -> dict:
    analysis = analyze(part.path, _replaceable(part), as_if_compacted=True)
    state = analysis.state
    written = sum(end - data.header.data_start for data, (end, _check) in zip(analysis.listing.data, analysis.ends))
    on_disk = sum(data.size for data in analysis.listing.data)
    file_size = max((data.header.file_size for data in analysis.listing.data), default=0)
    kinds: Counter = Counter()
    types: Counter = Counter()
    for _data, frames in journal_frames(part.path):
        for _offset, check, kind, user_type, _record_id, _tx_id, _body in frames:
            if check == FrameCheck.VALID:
                kinds[kind_name(kind)] += 1
                if kind in BODY_KINDS:
                    types[type_name(user_type)] += 1
    live_types: Counter = Counter()
    for record in state.records.values():
        live_types[type_name(record.record_type)] += 1
        for update_type, _body in record.updates:
            live_types[type_name(update_type)] += 1
    live_bytes = state.live.total_bytes
    due = compaction_due(len(analysis.listing.data), file_size, live_bytes, state.adds, state.replaceable_updates)
    live_percent = 100.0 * live_bytes / written if written else 100.0
    if due:
        advice = (f"compact: live data is {live_percent:.0f}% of what the {len(analysis.listing.data)} files hold "
                  f"(the journal compacts by itself past {COMPACT_MIN_FILES_DEFAULT} files under "
                  f"{COMPACT_PERCENTAGE_DEFAULT}% live); `journal-engine compact {part.path}` reclaims about "
                  f"{written - live_bytes} bytes")
    else:
        advice = f"no compaction needed (live data is {live_percent:.0f}% of the written bytes)"
    return {"journal": part.name, "path": part.path, "backend": part.backend.name,
            "data_files": len(analysis.listing.data), "free_files": len(analysis.listing.free),
            "file_size": file_size, "bytes_on_disk": on_disk, "written_bytes": written, "live_bytes": live_bytes,
            "dead_bytes": max(0, written - live_bytes), "live_records": len(state.records),
            "open_transactions": len(state.transactions), "frames_by_kind": dict(kinds),
            "records_by_type": dict(types), "live_records_by_type": dict(live_types),
            "compaction_due": due, "advice": advice,
            "damage": [place.as_dict() for place in damage_in(part.name, analysis.report)]}


def _records_stats(part: Part) -> dict:
    """stats of a record store whose files hold no frames: its live records, counted by type."""
    loaded, stats = _loaded_records(part)
    live_types: Counter = Counter()
    for record in loaded.records.values():
        live_types[type_name(record.record_type)] += 1
        for update_type, _body in record.updates:
            live_types[type_name(update_type)] += 1
    return {"journal": part.name, "path": part.path, "backend": part.backend.name,
            "data_files": part.backend.file_count(part.path),
            "used_bytes": stats["used_bytes"], "map_size": stats["map_size"], "live_records": len(loaded.records),
            "open_transactions": len(loaded.prepared), "live_records_by_type": dict(live_types),
            "records_by_type": dict(live_types), "compaction_due": False,
            "advice": part.backend.compaction_note,
            "damage": []}       # an LMDB store that does not read raises instead (exit status 1)


@click.command("stats")
@directory_argument
@click.option("--json", "as_json", is_flag=True, help="the numbers as one JSON document")
def stats_command(directory: str, as_json: bool) -> int:
    """Files, live and dead bytes, records by kind and type, and compaction advice for DIRECTORY."""
    target = locate(directory)
    parts = []
    with progress("reading", len(target.parts)) as advance:
        for part in target.parts:
            parts.append(_journal_stats(part) if part.backend.frames else _records_stats(part))
            advance()
    document = {"directory": target.path, "store": target.store, "backend": target.backend.name, "journals": parts}
    damage = [Damage(**place) for part in parts for place in part["damage"]]
    if as_json:
        emit_json(document)
        return _stats_status(target.path, damage)
    console = stdout()
    table = Table(title=f"{target.path} ({'message store, ' if target.store else ''}{target.backend.name})")
    for column in ("journal", "files", "on disk", "written", "live bytes", "dead bytes", "live records"):
        table.add_column(column, justify="left" if column == "journal" else "right")
    for part in parts:
        table.add_row(part["journal"], str(part["data_files"]), str(part.get("bytes_on_disk", part.get("used_bytes"))),
                      str(part.get("written_bytes", "-")), str(part.get("live_bytes", "-")),
                      str(part.get("dead_bytes", "-")), str(part["live_records"]))
    console.print(table)
    for part in parts:
        records = Table(title=f"{part['journal']}: records by kind and type")
        records.add_column("kind / type")
        records.add_column("in the files", justify="right")
        records.add_column("live", justify="right")
        for kind, count in sorted(part.get("frames_by_kind", {}).items()):
            records.add_row(kind, str(count), "")
        for name in sorted(set(part["records_by_type"]) | set(part["live_records_by_type"])):
            records.add_row(f"type {name}", str(part["records_by_type"].get(name, 0)),
                            str(part["live_records_by_type"].get(name, 0)))
        console.print(records)
        console.print(f"{part['journal']}: {part['advice']}")
    return _stats_status(target.path, damage)


def _stats_status(directory: str, damage: list) -> int:
    """Exit status 1 after the numbers when the files hold damage (each place on stderr)."""
    return damage_status(directory, damage, "the numbers count only the records that could be read",
                         f"`journal-engine verify {directory}` lists the damage")


# ----- verify ------------------------------------------------------------------------------------------

def verify_part(part: Part, problems: list, notes: list) -> dict:
    """Problems (damage) and notes (what recovery will do) of one record store."""
    if not part.backend.frames:
        try:
            loaded, _stats = _loaded_records(part)
        except CorruptRecordError as exc:
            problems.append(Damage.of_error(part.name, exc, part.path).as_dict())
            return {"journal": part.name, "files": 1, "records": 0}
        for path, offset, reason in loaded.report.anomalies:
            notes.append({"journal": part.name, "path": path, "offset": offset, "note": reason})
        return {"journal": part.name, "files": 1, "records": loaded.report.records_read}
    try:
        analysis = analyze(part.path, _replaceable(part), as_if_compacted=True)
    except CorruptRecordError as exc:
        problems.append(Damage.of_error(part.name, exc, part.path).as_dict())
        return {"journal": part.name, "files": 0, "records": 0}
    report = analysis.report
    problems.extend(place.as_dict() for place in damage_in(part.name, report))
    for path, offset, reason in report.anomalies:
        notes.append({"journal": part.name, "path": path, "offset": offset, "note": reason})
    for tx_id, (_ops, xid, path, offset) in analysis.state.transactions.items():
        notes.append({"journal": part.name, "path": path, "offset": offset,
                      "note": f"transaction {tx_id} " + ("prepared (kept for its coordinator)" if xid is not None
                                                          else "never completed (recovery rolls it back)")})
    if analysis.interrupted_compaction:
        notes.append({"journal": part.name, "path": part.path, "offset": None,
                      "note": "an interrupted compaction is pending (recovery finishes it)"})
    return {"journal": part.name, "files": report.files_read, "records": report.records_read}


@click.command("verify")
@directory_argument
@click.option("--json", "as_json", is_flag=True, help="the verdict and every problem as one JSON document")
def verify_command(directory: str, as_json: bool) -> int:
    """Check DIRECTORY without changing it: exit 0 healthy, 1 damage (each problem with path and
    offset), 2 usage or no journal, 3 I/O error."""
    target = locate(directory)
    problems: list = []
    notes: list = []
    parts = []
    with progress("verifying", len(target.parts) + int(target.store)) as advance:
        for part in target.parts:
            parts.append(verify_part(part, problems, notes))
            advance()
        if target.store and not problems:
            try:
                with target.open_store() as store:
                    state = store.load(skip_corrupt=True)
            except CorruptRecordError as exc:
                problems.append(Damage.of_error("store", exc, target.path).as_dict())
            else:
                for error in state.corrupt_messages:
                    problems.append({"journal": "messages", "path": error.path, "offset": error.offset,
                                     "problem": str(error)})
                for anomaly in state.anomalies:
                    notes.append({"journal": "store", "path": target.path, "offset": None, "note": anomaly})
            advance()
    healthy = not problems
    if as_json:
        emit_json({"directory": target.path, "healthy": healthy, "journals": parts, "problems": problems,
                   "notes": notes})
        return EXIT_OK if healthy else EXIT_DAMAGE
    console = stdout()
    for part in parts:
        console.print(f"{part['journal']}: {part['files']} files, {part['records']} records read")
    if problems:
        table = Table(title="damage")
        for column in ("path", "offset", "problem"):
            table.add_column(column, overflow="fold")
        for problem in problems:
            table.add_row(str(problem["path"]), str(problem["offset"]), problem["problem"])
        console.print(table)
    for note in notes:
        console.print(f"note: {note['path']}" + (f" offset {note['offset']}" if note["offset"] is not None else "")
                      + f": {note['note']}")
    console.print("healthy" if healthy else f"DAMAGED: {len(problems)} problems")
    return EXIT_OK if healthy else EXIT_DAMAGE


COMMANDS = [print_command, stats_command, verify_command]
