"""Read-only analysis of a journal directory: the decision table of docs/internals/recovery.md.

`analyze()` replays every data file and decides what each end of data means,
without changing a byte; `Journal.load()` then acts on the decisions (truncate a
torn tail, roll back incomplete transactions) and tools (`journal-engine verify`)
print them. One decoder serves both.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..._impl import GAP_REASONS, ReplayState
from ...limits import FRAME_HEADER_SIZE_BYTES, SECTOR_SIZE_BYTES
from .format import CONTROL_FILE, HEADER_FLAG_RECYCLED
from ...record_format import FrameCheck
from .scan import cut_short, read_while_live, scan_data_file, scan_data_files_in_order
from .segment_files import Listing, list_directory
from ..protocol import LoadReport


@dataclass
class Analysis:
    listing: Listing
    state: ReplayState
    ends: list                  # per data file: (end offset, FrameCheck at the end)
    last_with_data: int         # index into listing.data, -1 when no file holds a frame
    report: LoadReport
    interrupted_compaction: bool


def replay_data_file(state: ReplayState, data) -> tuple[int, int]:
    """Replay one data file into `state` through the columnar decoder; (end offset, FrameCheck at
    the end) as the decoder found them."""
    return state.replay_columns(scan_data_file(data), data.path)


#: what the reader reports where a file's valid frames stop at damage and later files hold data
DAMAGED_END_REASON = "damaged frame at the end of a file followed by later files"
#: what the reader reports where the last file with data ends in damage (load() erases it)
TORN_TAIL_REASON = "torn tail: a write cut short at the end of the journal's data (load() erases it)"


def gap_reason(check: int) -> str:
    """What the reader reports of damage (a FrameCheck other than VALID) followed by valid frames."""
    return GAP_REASONS[check]


def cut_short_reason(data) -> str:
    """What the reader reports of a file shorter than it was allocated (at the offset of the cut)."""
    return (f"file cut short: {data.size} of its {data.header.file_size} bytes are left; "
            f"records past the cut are lost")


def damage_of_followed_file(data, end: int, check: FrameCheck) -> list:
    """(path, offset, reason) of what is damaged in a data file that later data follows (a file before
    the last with data, or a compaction's source): a cut past its allocation, and valid frames that
    stop at damage. Recovery and compaction judge a file by this one rule, so compaction never drops
    what load would report."""
    damage = []
    if cut_short(data):
        damage.append((data.path, data.size, cut_short_reason(data)))
    if classify_end(data, end, check) == FrameCheck.INVALID:
        damage.append((data.path, end, DAMAGED_END_REASON))
    return damage


def classify_end(data, end: int, check: FrameCheck) -> FrameCheck:
    """Where the valid frames of a file stop, is that a clean end or the start of a torn write?

    Files are created at a multiple of the sector size and zero-filled, so a file cut
    short, or non-zero bytes past the data in a file that never had an earlier life,
    can only be a torn write. In a recycled file, frames stamped for another file id are
    the earlier life's and mark a clean end.
    """
    if check == FrameCheck.ZERO and data.size % SECTOR_SIZE_BYTES and end + FRAME_HEADER_SIZE_BYTES > data.size:
        return FrameCheck.INVALID
    if check == FrameCheck.FOREIGN and not data.header.flags & HEADER_FLAG_RECYCLED:
        return FrameCheck.INVALID
    return check


def analyze(directory: str, replaceable_types=(), *, remove_temporary: bool = False,
            as_if_compacted: bool = False, copy: bool = True, checkpoint=None) -> Analysis:
    """Replay every data file in sequence order and classify how each one ends (`as_if_compacted`:
    a committed compaction is read as if finished, see list_directory; it is the read-only view of
    inspections, which may run beside a live writer: a file that writer renames meanwhile makes it
    read the directory again, see scan.read_while_live). ``copy=False``: the replay's bodies stay in
    the files' mappings (scan.scan_data_file). `checkpoint`: a journal.checkpoint.Checkpoint whose
    saved columns stand in for the decode of each file whose bytes still match them (``copy=False``)."""
    if as_if_compacted:
        return read_while_live(directory, lambda: _analyze(directory, replaceable_types, remove_temporary,
                                                           as_if_compacted, copy, checkpoint))
    return _analyze(directory, replaceable_types, remove_temporary, as_if_compacted, copy, checkpoint)


def _rows_expected(files: list, first_rows: int) -> int:
    """The rows of every file, estimated from the first file's (files are allocated alike): a size
    for the replay's tables, which grow if it is short."""
    first_size = max(files[0].size, 1)
    return first_rows * sum(max(data.size, 1) for data in files) // first_size + 1


def _analyze(directory: str, replaceable_types, remove_temporary: bool, as_if_compacted: bool,
             copy: bool, checkpoint) -> Analysis:
    listing = list_directory(directory, remove_temporary=remove_temporary, as_if_compacted=as_if_compacted)
    # each file is replayed as soon as it is decoded, while the next ones are (a GROUP frame means
    # nothing to a replay); the first file's rows size the replay's tables for all of them
    state = None
    ends = []
    saved = checkpoint.saved if checkpoint is not None and not copy else None
    for data, file_columns in zip(listing.data, scan_data_files_in_order(listing.data, copy, groups=False,
                                                                         saved=saved)):
        if state is None:
            state = ReplayState(replaceable_types, _rows_expected(listing.data, len(file_columns)))
        end, check = state.replay_columns(file_columns, data.path)
        ends.append((end, classify_end(data, end, FrameCheck(check))))
    if state is None:
        state = ReplayState(replaceable_types)
    report = LoadReport(corrupt=list(state.corrupt), anomalies=list(state.anomalies),
                        files_read=len(listing.data), records_read=state.frames_read,
                        checkpointed_files=checkpoint.files_used if saved is not None else 0)
    for data in listing.data:
        if cut_short(data):
            report.corrupt.append((data.path, data.size, cut_short_reason(data)))
    damaged_paths = {entry[0] for entry in report.corrupt}
    last = -1
    for index, (end, _check) in enumerate(ends):
        if end > listing.data[index].header.data_start or listing.data[index].path in damaged_paths:
            last = index
    # a damaged end is a torn tail only in the last file with data; anywhere else later data follows it
    for index in range(last):
        end, check = ends[index]
        if check == FrameCheck.INVALID:
            report.corrupt.append((listing.data[index].path, end, DAMAGED_END_REASON))
    if last >= 0 and ends[last][1] == FrameCheck.INVALID:
        report.torn_tail_truncated = True
        report.torn_tail = (listing.data[last].path, ends[last][0])
    return Analysis(listing, state, ends, last, report,
                    interrupted_compaction=os.path.exists(os.path.join(directory, CONTROL_FILE)))
