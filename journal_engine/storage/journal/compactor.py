"""Crash-safe compaction: rewrite the live records of the older files, then reclaim them.

Steps, each separated by a crash point that tests cut at:
  1. switch the writer to a fresh file, so every older data file (the set F) is immutable;
     sync, so F is durable;
  2. replay F alone: its live records, and its transactions still open at F's end;
  3. write them densely to new files named ``.jec``; output k takes F[k]'s replay
     sequence (so it replays before the writer's files) and a fresh file id (so its
     frames carry a new stamp); each is fsynced and renamed       -> "compact-outputs-written"
  4. write the control file (tmp, fsync, rename, fsync dir) naming outputs and F:
     this is the commit point                                        -> "compact-control-written"
  5. rename outputs to data files, F to free files, fsync the directory -> "compact-swapped"
  6. delete the control file.
recover() at load: a control file means finish step 5-6; none means delete ``.jec``
leftovers. Either way the journal loads to the same live set.

Replaceable updates (Journal(replaceable_types={type: key_bytes})) keep only the
last update per (record, type, first key_bytes of the body).
"""
from __future__ import annotations

import json
import logging
import os

from ..._impl import ReplayState, crc32c, encode_frame
from ...errors import CorruptRecordError, JournalError
from .. import durability
from .format import COMPACT_NAME, CONTROL_FILE, DATA_NAME, HEADER_FLAG_COMPACTED, HEADER_FLAG_FRESH, FileHeader, compact_name, data_name, free_name, stamp_of
from ...record_format import FrameCheck, RecordKind
from .recovery import damage_of_followed_file, replay_data_file
from .segment_files import DataFile, read_compaction_plan, read_header

log = logging.getLogger("journal_engine.storage.journal")


def recover(directory: str, reclaim=None) -> bool:
    """Finish or undo a compaction that a crash (or a failed step) interrupted; True when one was finished.

    `reclaim(data_path, file_id)` takes each replaced data file (a running journal hands it to its
    file pool); without it the file is renamed to a free file.
    """
    control = os.path.join(directory, CONTROL_FILE)
    durability.unlink(control + ".tmp", missing_ok=True)
    if os.path.exists(control):
        _finish_swap(directory, read_compaction_plan(control), reclaim)
        return True
    leftovers = [name for name in _names(directory) if COMPACT_NAME.match(name)]
    for name in leftovers:
        durability.unlink(os.path.join(directory, name), missing_ok=True)
    if leftovers:
        durability.fsync_directory(directory)
    return False


def _names(directory: str) -> list:
    try:
        return os.listdir(directory)
    except OSError as exc:
        raise durability.io_error(exc, directory, "listing") from exc


def _finish_swap(directory: str, plan: dict, reclaim) -> None:
    """Steps 5 and 6 after the commit point; each rename is skipped when done already, so this
    runs again to the same end after a crash or an I/O error part-way."""
    for index, name in enumerate(plan["outputs"]):
        source = os.path.join(directory, name)
        if os.path.exists(source):
            durability.rename(source, os.path.join(directory, _data_name_of(name)))
        if index == 0:
            durability.crash_point("compact-first-output-renamed")
    for name in plan["replaced"]:
        source = os.path.join(directory, name)
        if os.path.exists(source):
            file_id = int(DATA_NAME.match(name).group(1), 16)
            if reclaim is not None:
                reclaim(source, file_id)
            else:
                durability.rename(source, os.path.join(directory, free_name(file_id)))
    durability.fsync_directory(directory)
    durability.crash_point("compact-swapped")
    durability.unlink(os.path.join(directory, CONTROL_FILE), missing_ok=True)
    durability.fsync_directory(directory)
    log.info("compaction of %d files finished", len(plan["replaced"]))


def _data_name_of(compact_file: str) -> str:
    return data_name(int(COMPACT_NAME.match(compact_file).group(1), 16))


def _live_frames(state: ReplayState, replaceable: dict):
    """(kind, record_type, record_id, tx_id, body) of everything F still needs, in replay order."""
    for record_id, rec in state.records.items():
        yield RecordKind.ADD, rec.record_type, record_id, 0, rec.body
        updates = rec.updates
        if replaceable:
            last = {}
            for index, (user_type, body) in enumerate(updates):
                key_bytes = replaceable.get(user_type)
                if key_bytes is not None:
                    last[(user_type, bytes(body[:key_bytes]))] = index
            keep = set(last.values())
            updates = [u for index, u in enumerate(updates)
                       if replaceable.get(u[0]) is None or index in keep]
        for user_type, body in updates:
            yield RecordKind.UPDATE, user_type, record_id, 0, body
    for tx_id, (ops, xid, _path, _offset) in state.transactions.items():
        for kind, record_id, user_type, location, _size in ops:
            yield kind, user_type, record_id, tx_id, state.body(location)
        if xid is not None:
            yield RecordKind.PREPARE, 0, 0, tx_id, len(ops).to_bytes(4, "little") + xid


def compact(journal, *, accept_damage: bool = False) -> None:
    """Compact every data file before the writer's current one (see the module docstring).

    A failure before the commit point removes its outputs and changes nothing; a failure after it
    leaves the control file, and the next compaction (or load) finishes the swap first, so one
    failed compaction never stops later ones. Damage in any source (see `_refuse_damage`) refuses
    it before anything is written, unless `accept_damage`.
    """
    directory = journal.directory
    _finish_committed(journal)   # a swap that an earlier failure left part-way
    # each file as it is on disk now, not as it was listed when it was written or loaded: another
    # process may have cut or replaced it since
    on_disk = {}
    if not accept_damage:
        # before the roll, so that a refused compaction (the automatic one retries at every file
        # switch) never leaves a fresh file behind
        on_disk = {data.path: _as_it_is_now(journal, data) for data in journal.data_files()}
        _refuse_damage(journal, list(on_disk.values()))
    active = journal.roll_for_compaction()
    journal.sync()
    sources = [on_disk.get(data.path) or _as_it_is_now(journal, data)      # a file switched to meanwhile
               for data in journal.data_files() if data.header.sequence < active.sequence]
    if not sources:
        return
    state = ReplayState(journal.replaceable_types)
    damage = []
    for data in sources:
        end, check = replay_data_file(state, data)
        damage += damage_of_followed_file(data, end, FrameCheck(check))
    if not accept_damage:
        _refuse_damage(journal, [], list(state.corrupt) + damage)

    outputs = []          # (path, file_id, sequence)
    try:
        new_sizes, kept_replaceable = _write_outputs(journal, state, sources, outputs)
    except BaseException:
        _remove_outputs(outputs)
        raise
    if new_sizes is None:
        return
    durability.crash_point("compact-outputs-written")
    # step 4: the commit point
    control = os.path.join(directory, CONTROL_FILE)
    plan = {"outputs": [os.path.basename(p) for p, _i, _s in outputs],
            "replaced": [os.path.basename(d.path) for d in sources]}
    encoded = json.dumps(plan).encode()
    try:
        durability.write_file_durably(control, encoded + b"\n" + str(crc32c(encoded)).encode())
    except BaseException:
        # the control file may have been renamed into place: take the commit back before the
        # outputs go; if even that fails, both stay and the next compaction (or load) finishes it
        if os.path.exists(control):
            durability.unlink(control)
            durability.fsync_directory(directory)
        _remove_outputs(outputs)
        raise

    # committed: the journal's view changes now; the files follow in step 5 (finished later if it fails)
    new_files = [DataFile(os.path.join(directory, data_name(out_id)),
                          FileHeader(out_id, sequence, HEADER_FLAG_COMPACTED | HEADER_FLAG_FRESH, journal.file_size),
                          journal.file_size)
                 for _path, out_id, sequence in outputs]
    journal.compaction_committed([d.path for d in sources], new_files, new_sizes, state.live,
                                 state.replaceable_updates - kept_replaceable)
    durability.crash_point("compact-control-written")
    _finish_swap(directory, plan, journal.reclaim_file)


def _as_it_is_now(journal, data: DataFile) -> DataFile:
    """`data` read again from the disk: its size now, and its header, which must still be the one the
    journal wrote (CorruptRecordError naming the file when it is gone, unreadable or another file)."""
    try:
        now = read_header(data.path)
    except CorruptRecordError:
        journal.mark_damaged(data.path)
        raise
    if (now.header.file_id, now.header.sequence) != (data.header.file_id, data.header.sequence):
        journal.mark_damaged(data.path)
        raise CorruptRecordError(
            f"compaction refused: the file's header names file id {now.header.file_id} sequence "
            f"{now.header.sequence}, not the {data.header.file_id} / {data.header.sequence} this journal wrote",
            path=data.path, offset=0, field="header",
            hint="another process replaced the file; run `journal-engine verify` and restore it from a copy")
    return now


def _refuse_damage(journal, files: list, damage: list = ()) -> None:
    """Raise CorruptRecordError for the first damage found: in `damage` (path, offset, reason), in a
    file of `files` that is cut short, or in one that load reported. Compacting a damaged file would
    drop every record past the damage and leave a journal that loads clean: the loss would be silent."""
    known = journal.damaged_files()
    damage = list(damage)
    for data in files:
        damage += damage_of_followed_file(data, data.size, FrameCheck.VALID)
        if data.path in known:
            damage.append((data.path, 0, "load reported damage in this file"))
    if not damage:
        return
    for path, _offset, _reason in damage:
        journal.mark_damaged(path)
    path, offset, reason = damage[0]
    raise CorruptRecordError(f"compaction refused: {reason}", path=path, offset=offset,
                             hint="run `journal-engine verify` and keep a copy of the file; compacting would "
                                  "drop the records past the damage and erase the evidence (compact(accept_damage="
                                  "True) compacts what can be read)")


def _finish_committed(journal) -> None:
    """Finish a compaction whose commit point was reached but whose swap failed part-way, and bring
    the journal's list of data files in line with the directory."""
    directory = journal.directory
    control = os.path.join(directory, CONTROL_FILE)
    if not os.path.exists(control):
        recover(directory)      # only .jec leftovers of a failed compaction to delete
        return
    plan = read_compaction_plan(control)
    _finish_swap(directory, plan, journal.reclaim_file)
    outputs = [read_header(os.path.join(directory, _data_name_of(name))) for name in plan["outputs"]]
    journal.replace_data_files([os.path.join(directory, name) for name in plan["replaced"]], outputs)


def _remove_outputs(outputs: list) -> None:
    for path, _id, _seq in outputs:
        try:
            durability.unlink(path, missing_ok=True)
        except JournalError:
            pass   # a .jec without a control file is deleted at the next load


def _write_outputs(journal, state: ReplayState, sources: list, outputs: list):
    """Step 3: the live frames of `sources` densely into ``.jec`` files, appended to `outputs`.
    Returns (bytes per record id in the outputs, replaceable updates kept), or (None, 0) when
    the live data would not fit in fewer files than it replaces."""
    directory = journal.directory
    new_sizes = {}        # record_id -> bytes in the outputs
    kept_replaceable = 0
    buffer = bytearray()
    header_of = FileHeader(0, 0)
    limit = journal.file_size - header_of.data_start
    file_id = journal.allocate_file_id()

    def flush() -> None:
        nonlocal buffer, file_id
        index = len(outputs)
        if index >= len(sources):
            raise _DoesNotFit()
        header = FileHeader(file_id, sources[index].header.sequence, HEADER_FLAG_COMPACTED | HEADER_FLAG_FRESH,
                            journal.file_size)
        path = os.path.join(directory, compact_name(file_id))
        image = header.encode(crc32c).ljust(header.data_start, b"\0") + bytes(buffer)
        durability.create_zero_filled(path, journal.file_size, image)
        outputs.append((path, file_id, sources[index].header.sequence))
        buffer = bytearray()
        file_id = journal.allocate_file_id()

    try:
        for kind, user_type, record_id, tx_id, body in _live_frames(state, journal.replaceable_types):
            frame = encode_frame(kind, user_type, stamp_of(file_id), record_id, tx_id, body)
            if len(buffer) + len(frame) > limit:
                flush()
                frame = encode_frame(kind, user_type, stamp_of(file_id), record_id, tx_id, body)
            buffer += frame
            if kind in (RecordKind.ADD, RecordKind.UPDATE):
                new_sizes[record_id] = new_sizes.get(record_id, 0) + len(frame)
                if kind == RecordKind.UPDATE and user_type in journal.replaceable_types:
                    kept_replaceable += 1
        if buffer or not outputs:
            flush()
    except _DoesNotFit:
        for path, _id, _seq in outputs:
            durability.unlink(path, missing_ok=True)
        outputs.clear()
        log.info("compaction skipped: the live data does not fit in fewer files")
        return None, 0
    return new_sizes, kept_replaceable


class _DoesNotFit(Exception):
    """The live data needs more files than it replaces (compaction would not gain anything)."""
