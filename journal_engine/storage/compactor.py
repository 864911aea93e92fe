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
import mmap
import os

from .._impl import ReplayState, crc32c, encode_frame
from ..errors import CorruptRecordError
from ..limits import FILE_HEADER_SIZE_BYTES
from . import durability
from .format import (COMPACT_NAME, CONTROL_FILE, DATA_NAME, HEADER_FLAG_COMPACTED, HEADER_FLAG_FRESH, FileHeader,
                     RecordKind,
                     compact_name, data_name, free_name, stamp_of)

log = logging.getLogger("journal_engine.storage")


def recover(directory: str) -> None:
    """Finish or undo a compaction that a crash interrupted."""
    control = os.path.join(directory, CONTROL_FILE)
    if os.path.exists(control + ".tmp"):
        os.unlink(control + ".tmp")
    if os.path.exists(control):
        plan = _read_control(control)
        for name in plan["outputs"]:
            source = os.path.join(directory, name)
            if os.path.exists(source):
                os.rename(source, os.path.join(directory, _data_name_of(name)))
        for name in plan["replaced"]:
            source = os.path.join(directory, name)
            if os.path.exists(source):
                os.rename(source, os.path.join(directory, _free_name_of(name)))
        durability.fsync_directory(directory)
        os.unlink(control)
        durability.fsync_directory(directory)
        log.info("finished an interrupted compaction of %d files", len(plan["replaced"]))
        return
    leftovers = [name for name in os.listdir(directory) if COMPACT_NAME.match(name)]
    for name in leftovers:
        os.unlink(os.path.join(directory, name))
    if leftovers:
        durability.fsync_directory(directory)


def _read_control(path: str) -> dict:
    with open(path, "rb") as handle:
        raw = handle.read()
    body, _, crc_text = raw.rpartition(b"\n")
    try:
        ok = int(crc_text) == crc32c(body)
        plan = json.loads(body) if ok else None
    except ValueError:
        ok, plan = False, None
    if not ok or not isinstance(plan, dict) or "outputs" not in plan or "replaced" not in plan:
        raise CorruptRecordError("compaction control file is damaged", path=path, offset=0, field="control",
                                 hint="it was written atomically, so something else changed it; restore it "
                                      "or remove it and the .jec files together")
    return plan


def _data_name_of(compact_file: str) -> str:
    return data_name(int(COMPACT_NAME.match(compact_file).group(1), 16))


def _free_name_of(data_file: str) -> str:
    return free_name(int(DATA_NAME.match(data_file).group(1), 16))


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
        for kind, record_id, user_type, body, _size in ops:
            yield kind, user_type, record_id, tx_id, body
        if xid is not None:
            yield RecordKind.PREPARE, 0, 0, tx_id, len(ops).to_bytes(4, "little") + xid


def compact(journal) -> None:
    """Compact every data file before the writer's current one (see the module docstring)."""
    directory = journal.directory
    active = journal._roll_for_compaction()
    journal.sync()
    sources = [data for data in journal._data_files if data.header.sequence < active.sequence]
    if not sources:
        return
    state = ReplayState(journal.replaceable_types)
    for data in sources:
        with open(data.path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            state.replay_file(view, stamp_of(data.header.file_id), FILE_HEADER_SIZE_BYTES, data.path)
    if state.corrupt:
        path, offset, reason = state.corrupt[0]
        raise CorruptRecordError(f"compaction refused: {reason}", path=path, offset=offset,
                                 hint="run `journal-engine verify`; compacting would erase the evidence")

    # step 3: dense outputs, each a full pre-allocated file
    outputs = []          # (path, file_id, sequence)
    new_sizes = {}        # record_id -> bytes in the outputs
    kept_replaceable = 0
    buffer = bytearray()
    limit = journal.file_size - FILE_HEADER_SIZE_BYTES
    file_id = journal._pool.allocate_id()

    def flush() -> None:
        nonlocal buffer, file_id
        index = len(outputs)
        if index >= len(sources):
            raise _DoesNotFit()
        header = FileHeader(file_id, sources[index].header.sequence,
                            HEADER_FLAG_COMPACTED | HEADER_FLAG_FRESH).encode(crc32c)
        path = os.path.join(directory, compact_name(file_id))
        durability.create_zero_filled(path, journal.file_size, header + bytes(buffer))
        outputs.append((path, file_id, sources[index].header.sequence))
        buffer = bytearray()
        file_id = journal._pool.allocate_id()

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
            os.unlink(path)
        log.info("compaction skipped: the live data does not fit in fewer files")
        return
    durability.crash_point("compact-outputs-written")

    # step 4: the commit point
    control = os.path.join(directory, CONTROL_FILE)
    plan = json.dumps({"outputs": [os.path.basename(p) for p, _i, _s in outputs],
                       "replaced": [os.path.basename(d.path) for d in sources]}).encode()
    durability.write_file_durably(control, plan + b"\n" + str(crc32c(plan)).encode())
    durability.crash_point("compact-control-written")

    # step 5: swap
    from .segment_files import DataFile
    new_files = []
    for index, (path, out_id, sequence) in enumerate(outputs):
        target = os.path.join(directory, data_name(out_id))
        os.rename(path, target)
        new_files.append(DataFile(target, FileHeader(out_id, sequence, HEADER_FLAG_COMPACTED | HEADER_FLAG_FRESH),
                                  journal.file_size))
        if index == 0:
            durability.crash_point("compact-first-output-renamed")
    for data in sources:
        journal._pool.reclaim(data.path, data.header.file_id)
    durability.fsync_directory(directory)
    durability.crash_point("compact-swapped")
    os.unlink(control)
    durability.fsync_directory(directory)

    # step 6: bookkeeping; records deleted meanwhile keep their deletion in the writer's files
    source_paths = {d.path for d in sources}
    journal._data_files = new_files + [d for d in journal._data_files if d.path not in source_paths]
    live = journal._core_live()
    for record_id, size in new_sizes.items():
        if record_id in live:
            live[record_id] = live[record_id] + size - state.live[record_id]
    journal._core_reset_replaceable(max(0, journal.replaceable_update_count - state.replaceable_updates
                                        + kept_replaceable))


class _DoesNotFit(Exception):
    """The live data needs more files than it replaces (compaction would not gain anything)."""
