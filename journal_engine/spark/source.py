"""The ``journal_engine`` data source of PySpark 4 (the Python Data Source API): journals as DataFrames.

``spark.read.format("journal_engine").load(path_or_paths)`` reads journal directories, or the
directories that hold them (a broker's or a message store's: its ``messages`` and ``bindings``
journals) -- local paths, ``file://`` or any URI pyarrow.fs opens (files.py) -- one partition per data file — a file larger than the option ``split_bytes`` in several,
each converting its share of the rows (the frame chain of a file is only known from its start: no
offset inside a file can be trusted to begin a frame, since a body may hold anything, so every part
scans the file whole with the compiled decoder, which is the cheap step). Rows come out as Arrow
batches built from the decoders' columns (journal_engine.spark.columns); the files are opened read
only and mapped, never written, truncated or locked. A partition is a replay position: a file a
compaction replaced after the plan is read as the file that holds its position now (``_slot``). An
LMDB store is read as its live records (one partition), as ``live=true`` reads a journal. Damage is a
row (a file whose header does not decode too), unless ``mode=failfast``.

Options:

* ``live`` (false): true gives only the records ``Journal.load()`` returns — each live record's add
  and its updates — read as a read-only load does (one partition per journal);
* ``mode`` (``permissive``): ``failfast`` fails the job at the first damage row, with the reader's
  words and the place, instead of returning it;
* ``split_bytes`` (64 MiB): files larger than this are read as several partitions;
* ``batch_rows`` (65536): rows per Arrow batch.

A schema given to the reader (``.schema("record_id bigint, kind string")``), a subset of the documented
one, is a projection: only those columns are built and sent to Spark, which is most of a read's cost.

The reader takes no filters (``pushFilters``): Spark 4.3 keeps the reader a query's filters were pushed
to and reads later queries of the same DataFrame with it, so a ``where`` would leak into the next
question (docs/spark.md, Filters).
"""
from __future__ import annotations

import gc
import json
import logging
import sys

import numpy as np
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from ..errors import ConfigError, CorruptRecordError, FileVanishedError
from ..record_format import FrameCheck
from ..storage.backends import backend_named
from ..storage.journal.recovery import (DAMAGED_END_REASON, TORN_TAIL_REASON, classify_end, cut_short_reason,
                                gap_reason)
from ..storage.journal.scan import FileScan
from ..storage.journal.segment_files import DataFile
from . import columns as arrow_columns
from .files import files_of, find_stores

log = logging.getLogger(__name__)

SOURCE_NAME = "journal_engine"
SPLIT_BYTES_DEFAULT = 64 * 1024 * 1024
BATCH_ROWS_DEFAULT = 65536
MODES = ("permissive", "failfast")
#: Spark's switch from TCP on the loopback to Unix domain sockets for its Python workers (4.1+)
UNIX_SOCKETS_OPTION = "spark.python.unix.domain.socket.enabled"


_frozen = False


def _freeze_a_workers_heap_once() -> None:
    """In a Python worker of Spark (a child of ``pyspark.daemon``), move every object it holds so far
    (pyspark's, pyarrow's, ours: a few hundred thousand) out of the cycle collector's passes, once.
    The daemon runs ``gc.collect()`` after every task of a reused worker, a full pass over all of them:
    half the worker's time for a 31-file read. Objects a task makes are still collected after it.
    Nothing is done outside a Spark worker (a driver or a test that calls ``read`` keeps its heap as
    it is)."""
    global _frozen
    if _frozen:
        return
    _frozen = True
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if getattr(main_spec, "name", None) in ("pyspark.daemon", "pyspark.worker", "journal_engine.spark.daemon"):
        gc.collect()
        gc.freeze()


def paths_of(options: dict) -> list[str]:
    """The paths given to load(): one (``path``) or several (``paths``, a JSON list, as Spark passes them)."""
    paths = []
    if options.get("paths"):
        paths = json.loads(options["paths"])
    elif options.get("path"):
        paths = [options["path"]]
    if not paths:
        raise ConfigError("path", None, "no path given", hint='spark.read.format("journal_engine").load(path)')
    return paths


class FilePart(InputPartition):
    """Rows of one replay slot of a journal as the plan listed it: part ``part`` of ``parts`` (by row) of
    the data file that held sequence ``data.header.sequence`` (or of the file that took that place in
    replay order since, when a compaction replaced it: ``JournalReader._slot``)."""

    def __init__(self, journal: str, data: DataFile, part: int, parts: int) -> None:
        super().__init__((data.path, part))
        self.journal, self.data, self.part, self.parts = journal, data, part, parts


class DamagePart(InputPartition):
    """One damage row the plan found: a data file whose header does not decode, a journal that does
    not list (a damaged compaction control file, two files claiming one replay position)."""

    def __init__(self, path: str, offset: int | None, damage: str) -> None:
        super().__init__((path, offset))
        self.path, self.offset, self.damage = path, offset, damage


class LiveStore(InputPartition):
    """The live records of one record store: a journal read with live=true, or an LMDB store (which holds
    only live records)."""

    def __init__(self, directory: str, backend: str) -> None:
        super().__init__(directory)
        self.directory, self.backend = directory, backend


def register(spark) -> None:
    """Make ``spark.read.format("journal_engine")`` read journals in this SparkSession, and warn when
    the session links its Python workers by TCP on the loopback: every partition then waits 40 ms
    for the kernel's delayed acknowledgement (docs/spark.md, Performance)."""
    spark.dataSource.register(JournalDataSource)
    if str(spark.conf.get(UNIX_SOCKETS_OPTION, "false")).strip().lower() != "true":
        log.warning("this SparkSession reaches its Python workers over TCP: each partition of the journal_engine "
                    "source waits about 40 ms for its input; build the session with %s=true (Spark 4.1+), "
                    "as journal_engine.spark.session() does", UNIX_SOCKETS_OPTION)


class JournalDataSource(DataSource):
    """``format("journal_engine")``: the module docstring says what it reads and its options."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return arrow_columns.SPARK_SCHEMA

    def reader(self, schema) -> "JournalReader":
        fields = [(field.name, field.dataType.simpleString()) for field in schema.fields]
        return JournalReader(self.options, arrow_columns.projection(fields))


def _flag(options: dict, name: str) -> bool:
    value = str(options.get(name, "false")).strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(name, options.get(name), "use true or false")
    return value == "true"


def _positive(options: dict, name: str, default: int) -> int:
    try:
        value = int(options.get(name, default))
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(name, options.get(name), "a whole number of at least 1")
    return value


class JournalReader(DataSourceReader):
    def __init__(self, options: dict, columns=arrow_columns.COLUMNS) -> None:
        self.columns = columns
        self.wanted = {column.name for column in columns}
        self.store_fields = arrow_columns.needs_store_fields(columns)
        self.live = _flag(options, "live")
        self.mode = str(options.get("mode", "permissive")).lower()
        if self.mode not in MODES:
            raise ConfigError("mode", options.get("mode"), f"use one of {', '.join(MODES)}")
        self.split_bytes = _positive(options, "split_bytes", SPLIT_BYTES_DEFAULT)
        self.batch_rows = _positive(options, "batch_rows", BATCH_ROWS_DEFAULT)
        self.stores = [store for path in paths_of(options) for store in find_stores(path)]

    def partitions(self) -> list[InputPartition]:
        found: list[InputPartition] = []
        for directory, backend in self.stores:
            if self.live or not backend_named(backend).frames:
                if "://" in directory:
                    raise ConfigError("live", "true", "a journal in object storage is read file by file; live=true "
                                                      "loads a journal from a local path",
                                      hint="read it without live=true, or copy it where the executors mount it")
                found.append(LiveStore(directory, backend))
                continue
            try:
                files, unreadable = self._listing(directory)
            except CorruptRecordError as damaged:       # the journal does not list at all
                found.append(self._damage_part(damaged, directory))
                continue
            found += [self._damage_part(damaged, directory) for damaged in unreadable]
            for data in files:
                parts = max(1, -(-data.size // self.split_bytes))
                found += [FilePart(directory, data, part, parts) for part in range(parts)]
        return found

    @staticmethod
    def _listing(directory: str) -> tuple[list[DataFile], list[CorruptRecordError]]:
        """What load() replays, in its order, and the files whose header does not decode."""
        files = files_of(directory)

        def listing() -> tuple[list[DataFile], list[CorruptRecordError]]:
            unreadable: list[CorruptRecordError] = []
            return files.listing(unreadable), unreadable
        return files.again_if_changed(listing)

    def _damage_part(self, damaged: CorruptRecordError, directory: str) -> DamagePart:
        """A damage row for an error of the plan (failfast: the error itself, raised)."""
        if self.mode == "failfast":
            raise damaged
        return DamagePart(damaged.path or directory, damaged.offset, str(damaged))

    def read(self, partition):
        _freeze_a_workers_heap_once()
        if isinstance(partition, LiveStore):
            yield from self._read_live(partition)
        elif isinstance(partition, DamagePart):
            yield arrow_columns.single_row(self.columns, path=partition.path, offset=partition.offset,
                                           damage=partition.damage)
        else:
            yield from self._read_file(partition)

    def _damage(self, path: str, offset: int, reason: str) -> str:
        if self.mode == "failfast":
            raise CorruptRecordError(reason, path=path, offset=offset,
                                     hint='mode=failfast stops at the first damage; the default mode '
                                          '"permissive" returns it as a row with `damage` set')
        return reason

    @staticmethod
    def _slot(partition: FilePart) -> FileScan | None:
        """The file of the partition's replay slot, scanned: the planned file while its header still
        names the planned file id and sequence; once a compaction has replaced it, the file that holds
        that sequence now (compaction gives its k-th output the k-th replaced file's sequence), or None
        when the compaction needed fewer files than it replaced. A file is never damage for being gone."""
        planned = partition.data.header
        files = files_of(partition.journal)

        def successor() -> FileScan | None:
            for data in files.listing():
                if data.header.sequence == planned.sequence:
                    return files.scan(data)
            return None

        try:
            now = files.header(partition.data.path)
        except FileVanishedError:
            return files.again_if_changed(successor)
        if (now.header.file_id, now.header.sequence) != (planned.file_id, planned.sequence):
            return files.again_if_changed(successor)    # the name taken again since the plan
        return files.scan(now)

    def _read_file(self, partition: FilePart):
        try:
            scan = self._slot(partition)
        except CorruptRecordError as damaged:       # a header damaged since the plan, a file cut while read
            if self.mode == "failfast":
                raise
            yield arrow_columns.single_row(self.columns, path=damaged.path or partition.data.path,
                                           offset=damaged.offset, damage=str(damaged))
            return
        if scan is None:
            return
        data = scan.data
        frames = scan.columns
        start = frames.count * partition.part // partition.parts
        stop = frames.count * (partition.part + 1) // partition.parts
        damaged = np.flatnonzero(np.frombuffer(frames.check, dtype=np.uint8)[start:stop]) + start
        damage = {int(row) - start: self._damage(data.path, frames.offset[row], gap_reason(frames.check[row]))
                  for row in damaged}
        file_arrays = arrow_columns.frame_arrays(frames, data.path, data.header.file_id, data.header.sequence,
                                                 self.wanted)
        file_arrays = {name: array.slice(start, stop - start) for name, array in file_arrays.items()}
        message_arrays, rejected = arrow_columns.message_arrays(frames, start, stop) if self.store_fields else ({}, [])
        for row in rejected:
            damage[row] = self._damage(data.path, frames.offset[start + row],
                                       arrow_columns.body_error(frames, start + row, data.path))
        yield from arrow_columns.batches(file_arrays, message_arrays, damage, stop - start, self.batch_rows,
                                         self.columns)
        if partition.part == partition.parts - 1:
            yield from self._file_end(partition.journal, data, frames.end_offset, FrameCheck(frames.end_check))
            if scan.cut_short:
                yield self._damage_row(data, data.size, cut_short_reason(data))

    def _file_end(self, journal: str, data: DataFile, end: int, check: FrameCheck):
        """Where the file's valid frames stop: a clean end (no row), or damage — a torn tail when no later
        file holds data, else damage followed by later files (recovery's decision)."""
        if classify_end(data, end, check) == FrameCheck.INVALID:
            files = files_of(journal)

            def later_data() -> bool:
                return _any_holds_data(files, [later for later in files.listing()
                                               if later.header.sequence > data.header.sequence])
            reason = DAMAGED_END_REASON if files.again_if_changed(later_data) else TORN_TAIL_REASON
            yield self._damage_row(data, end, reason)

    def _damage_row(self, data: DataFile, offset: int, reason: str):
        return arrow_columns.single_row(self.columns, path=data.path, file_id=data.header.file_id, sequence=data.header.sequence,
                                        offset=offset, damage=self._damage(data.path, offset, reason))

    def _read_live(self, partition: LiveStore):
        directory = partition.directory
        try:
            # read only: nothing written (a journal takes no lock; LMDB joins a writer's reader table)
            with backend_named(partition.backend).open(directory, read_only=True) as opened:
                # owned bytes: beside a live writer, which may recycle a compacted file under a view
                loaded = opened.load(copy=True)
        except CorruptRecordError as damaged:       # load() refuses the store (a file whose header does not decode)
            if self.mode == "failfast":
                raise
            yield arrow_columns.single_row(self.columns, path=damaged.path or directory, offset=damaged.offset,
                                           damage=str(damaged))
            return
        report = loaded.report
        if self.mode == "failfast" and (report.corrupt or report.torn_tail):
            path, offset, reason = report.corrupt[0] if report.corrupt else (*report.torn_tail, TORN_TAIL_REASON)
            self._damage(path, offset, reason)
        records = arrow_columns.LiveRecords(loaded.records.values())
        file_arrays = arrow_columns.frame_arrays(records, directory, None, None, self.wanted)
        message_arrays, rejected = (arrow_columns.message_arrays(records, 0, records.count) if self.store_fields
                                    else ({}, []))
        damage = {row: self._damage(directory, None, arrow_columns.body_error(records, row, directory))
                  for row in rejected}
        yield from arrow_columns.batches(file_arrays, message_arrays, damage, records.count, self.batch_rows,
                                         self.columns)


def _any_holds_data(files, later: list) -> bool:
    """Whether any of these data files holds a frame or damage (recovery's test for the last file with data)."""
    for data in later:
        scan = files.scan(data)
        if scan.cut_short or scan.columns.end_offset > data.header.data_start or scan.columns.count:
            return True
    return False
