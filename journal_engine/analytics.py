"""Ready analyses of journals and of the crash-test and bench reports: functions DataFrame -> DataFrame.

The journal functions take the rows of ``spark.read.format("journal_engine").load(...)`` (every record as
written, several journals at once: a row's journal is the directory of its file) and follow the
journal's own rules: a transactional record counts only when its transaction committed; a reference
is a (journal, message id, queue id) triple, as the message store keys it.

The journal records no clock of its own. Times come from what the broker writes: scheduled delivery
times (36), and the properties of dead-letter and expiry copies (``_JE_DEAD_LETTER_TIME``, the
``_JE_DELIVERY_HISTORY`` of failed deliveries, the original's ``_AMQ_ORIG_*`` / ``_HQ_ORIG_*``; see
journal_engine/broker/dead_letter.py). When a time is not in the journal the column is null rather
than a guess. docs/spark.md shows each function's output.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .broker.dead_letter import DEAD_LETTER_REASON, DEAD_LETTER_TIME, DELIVERY_HISTORY, ORIG_DELIVERY_COUNT
from .broker.dialects import DIALECTS
from .limits import COMPACT_PERCENTAGE_DEFAULT
from .record_format import RecordKind, RecordType

__all__ = ["records_with_journal", "committed", "dead_letters", "delivery_count_histogram", "redelivery_delays",
           "time_in_queue", "segment_bytes", "read_reports", "crash_test_summary", "bench_summary"]

_TX_KINDS = [RecordKind.ADD_TX.name, RecordKind.UPDATE_TX.name, RecordKind.DELETE_TX.name]
_ADDS = [RecordKind.ADD.name, RecordKind.ADD_TX.name]
_UPDATES = [RecordKind.UPDATE.name, RecordKind.UPDATE_TX.name]
_DELETES = [RecordKind.DELETE.name, RecordKind.DELETE_TX.name]
_HISTORY_TYPE = "array<struct<time:bigint,reason:string>>"


def _parent(column):
    return F.regexp_replace(column, "/[^/]+$", "")


def _property(name_of) -> F.Column:
    """A property of a copy under whichever broker family's name it carries (Artemis, then HornetQ)."""
    return F.coalesce(*[F.col("properties")[name_of(dialect)] for dialect in DIALECTS.values()
                        if name_of(dialect) is not None])


def records_with_journal(records: DataFrame) -> DataFrame:
    """The records with ``journal`` (the directory of their file) and ``store`` (the directory above it:
    a broker's or message store's, where its ``messages`` and ``bindings`` journals sit side by side)."""
    return (records.where(F.col("damage").isNull())
            .withColumn("journal", _parent(F.col("path")))
            .withColumn("store", _parent(F.col("journal"))))


def committed(records: DataFrame) -> DataFrame:
    """The records that took effect: non-transactional ones, and those of transactions whose COMMIT is in
    the journal (a rolled-back or unfinished transaction's records never applied)."""
    rows = records if "journal" in records.columns else records_with_journal(records)
    commits = (rows.where(F.col("kind") == RecordKind.COMMIT.name)
               .select("journal", "tx_id").distinct())
    plain = rows.where(~F.col("kind").isin(_TX_KINDS))
    transactional = rows.where(F.col("kind").isin(_TX_KINDS)).join(commits, ["journal", "tx_id"], "left_semi")
    return plain.unionByName(transactional)


def _queues(rows: DataFrame) -> DataFrame:
    """(store, queue_name, queue_id) from the bindings journals' queue records."""
    return (rows.where((F.col("record_type") == int(RecordType.QUEUE_BINDING_RECORD)) & F.col("kind").isin(_ADDS))
            .select("store", "queue_name", F.col("record_id").alias("queue_id")).distinct())


def _copies(rows: DataFrame) -> DataFrame:
    """Dead-letter and expiry copies (a message naming its original) with where they came from."""
    return (rows.where((F.col("record_type") == int(RecordType.ADD_MESSAGE)) & F.col("kind").isin(_ADDS))
            .withColumn("original_address", _property(lambda d: d.orig_address))
            .where(F.col("original_address").isNotNull())
            .select("journal", "store", F.col("record_id").alias("copy_id"), "original_address",
                    _property(lambda d: d.orig_queue).alias("original_queue"),
                    _property(lambda d: d.orig_message_id).cast("bigint").alias("original_message_id"),
                    F.col("address").alias("dead_letter_address"),
                    F.col("properties")[DEAD_LETTER_REASON].alias("reason"),
                    F.col("properties")[DEAD_LETTER_TIME].cast("bigint").alias("dead_letter_time"),
                    F.col("properties")[ORIG_DELIVERY_COUNT].cast("bigint").alias("original_delivery_count"),
                    F.from_json(F.col("properties")[DELIVERY_HISTORY], _HISTORY_TYPE).alias("history"),
                    "message_size"))


def dead_letters(records: DataFrame) -> DataFrame:
    """Dead-lettered (and expired) messages by original address and queue: how many, why, their bytes.

    Columns: original_address, original_queue, dead_letter_address, reason, messages, bytes."""
    copies = _copies(committed(records_with_journal(records)))
    return (copies.groupBy("original_address", "original_queue", "dead_letter_address", "reason")
            .agg(F.count("*").alias("messages"), F.sum("message_size").alias("bytes"))
            .orderBy(F.desc("messages"), "original_address", "original_queue"))


def _references(rows: DataFrame) -> DataFrame:
    return (rows.where(F.col("record_type") == int(RecordType.ADD_REF))
            .select("journal", "store", F.col("record_id").alias("message_id"), "queue_id").distinct())


def delivery_count_histogram(records: DataFrame) -> DataFrame:
    """How many references reached each delivery count: the highest one persisted, or, for a reference
    that was dead-lettered (or expired), the count its copy records when that is higher — a rollback
    that dead-letters writes its count into the copy, not as a record of its own (0: none was persisted
    — delivered at most once, or acknowledged on the first delivery). Columns: delivery_count, references."""
    rows = committed(records_with_journal(records))
    persisted = (rows.where(F.col("record_type") == int(RecordType.UPDATE_DELIVERY_COUNT))
                 .select("journal", F.col("record_id").alias("message_id"), "queue_id",
                         F.col("delivery_count").cast("bigint").alias("delivery_count")))
    queues = _queues(rows).withColumnRenamed("queue_name", "original_queue")
    moved = (_copies(rows).join(queues, ["store", "original_queue"])
             .select("journal", F.col("original_message_id").alias("message_id"), "queue_id",
                     F.col("original_delivery_count").alias("delivery_count")))
    counts = (persisted.unionByName(moved)
              .groupBy("journal", "message_id", "queue_id")
              .agg(F.max("delivery_count").alias("delivery_count")))
    return (_references(rows).join(counts, ["journal", "message_id", "queue_id"], "left")
            .fillna(0, ["delivery_count"])
            .groupBy("delivery_count").agg(F.count("*").alias("references"))
            .orderBy("delivery_count"))


def _failures(rows: DataFrame) -> DataFrame:
    """(journal, message_id, queue_id, delivery_count, failed_at): failed deliveries with their time, from the
    delivery history of dead-letter copies (it lists the last failures, up to the copy's delivery count)."""
    copies = _copies(rows).where(F.col("history").isNotNull())
    queues = _queues(rows).withColumnRenamed("queue_name", "original_queue")
    entries = copies.select("journal", "store", "original_queue", F.col("original_message_id").alias("message_id"),
                            "original_delivery_count", F.size("history").alias("entries"),
                            F.posexplode("history").alias("position", "entry"))
    return (entries.join(queues, ["store", "original_queue"])
            .select("journal", "message_id", "queue_id",
                    (F.col("original_delivery_count") - F.col("entries") + F.col("position") + 1)
                    .alias("delivery_count"),
                    F.col("entry.time").alias("failed_at")))


def redelivery_delays(records: DataFrame) -> DataFrame:
    """Each scheduled redelivery: when it was due and how long after the failed delivery it was set.

    A scheduled time (36) follows the delivery count (34) of the same failed delivery; the failure's
    time is known when the message was later dead-lettered (its copy's delivery history), else null.
    Columns: queue_id, queue_name, message_id, delivery_count, failed_at, scheduled_time, delay_ms."""
    rows = committed(records_with_journal(records))
    in_order = Window.partitionBy("journal", "record_id", "queue_id").orderBy("sequence", "offset") \
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    updates = (rows.where(F.col("record_type").isin(int(RecordType.UPDATE_DELIVERY_COUNT),
                                                    int(RecordType.SET_SCHEDULED_DELIVERY_TIME)))
               .withColumn("attempt", F.last("delivery_count", ignorenulls=True).over(in_order)))
    scheduled = (updates.where(F.col("record_type") == int(RecordType.SET_SCHEDULED_DELIVERY_TIME))
                 .select("journal", "store", F.col("record_id").alias("message_id"), "queue_id",
                         F.col("attempt").alias("delivery_count"), "scheduled_time"))
    return (scheduled.join(_failures(rows), ["journal", "message_id", "queue_id", "delivery_count"], "left")
            .join(_queues(rows), ["store", "queue_id"], "left")
            .select("queue_id", "queue_name", "message_id", "delivery_count", "failed_at", "scheduled_time",
                    (F.col("scheduled_time") - F.col("failed_at")).alias("delay_ms"))
            .orderBy("queue_id", "message_id", "delivery_count"))


def time_in_queue(records: DataFrame, *, sent_time_property: str | None = None) -> DataFrame:
    """How each reference left its queue, and how long it stayed where the journal can tell.

    ``outcome``: the dead-letter reason (``max-delivery-attempts``, ``expired``, ...) when a copy names
    it, ``acknowledged``, or ``in queue``. ``left_at``: the copy's dead-letter time (an acknowledgement
    carries no time). ``sent_at``: the message property ``sent_time_property`` (epoch ms, set by the
    producer) when given. ``time_in_queue_ms`` = left_at - sent_at where both are known.
    Columns: queue_id, queue_name, message_id, outcome, sent_at, left_at, time_in_queue_ms."""
    rows = committed(records_with_journal(records))
    acknowledged = (rows.where(F.col("record_type") == int(RecordType.ACKNOWLEDGE_REF))
                    .select("journal", F.col("record_id").alias("message_id"), "queue_id").distinct()
                    .withColumn("acknowledged", F.lit(True)))
    queues = _queues(rows)
    left = (_copies(rows).join(queues.withColumnRenamed("queue_name", "original_queue"), ["store", "original_queue"])
            .groupBy("journal", F.col("original_message_id").alias("message_id"), "queue_id")
            .agg(F.first("reason").alias("reason"), F.min("dead_letter_time").alias("left_at")))
    messages = rows.where((F.col("record_type") == int(RecordType.ADD_MESSAGE)) & F.col("kind").isin(_ADDS))
    sent = messages.select("journal", F.col("record_id").alias("message_id"),
                           (F.col("properties")[sent_time_property].cast("bigint") if sent_time_property
                            else F.lit(None).cast("bigint")).alias("sent_at"))
    return (_references(rows)
            .join(acknowledged, ["journal", "message_id", "queue_id"], "left")
            .join(left, ["journal", "message_id", "queue_id"], "left")
            .join(sent, ["journal", "message_id"], "left")
            .join(queues, ["store", "queue_id"], "left")
            .select("queue_id", "queue_name", "message_id",
                    F.when(F.col("reason").isNotNull(), F.col("reason"))
                    .when(F.col("acknowledged"), F.lit("acknowledged")).otherwise(F.lit("in queue")).alias("outcome"),
                    "sent_at", "left_at", (F.col("left_at") - F.col("sent_at")).alias("time_in_queue_ms"))
            .orderBy("queue_id", "message_id"))


def segment_bytes(records: DataFrame, *, compact_percentage: int = COMPACT_PERCENTAGE_DEFAULT) -> DataFrame:
    """Live and dead bytes per data file: the compaction candidates.

    A record is live when it was added and not deleted (the journal's rule; transactional records once
    committed); its frames — the add and its updates — are live bytes, every other frame (deleted
    records, acknowledgements' records of deleted messages, transaction markers, pads, damage) is dead.
    ``compaction_candidate``: live below ``compact_percentage`` percent of the file's used bytes.
    A store read as its live records (an LMDB store, or a journal read with ``live=true``) has no frames:
    its row is the store's directory, the records' bodies (adds and updates) its bytes, all of them live.
    Columns: path, file_id, sequence, frames, used_bytes, live_bytes, dead_bytes, live_percent,
    compaction_candidate."""
    # a row of a store read as its live records names the store's directory and has no frame: its size
    # is its body's, and the store itself (not its parent, as for a data file) is the scope of its ids
    frameless = F.col("frame_size").isNull() & F.col("file_id").isNull()
    size = (F.coalesce(F.col("frame_size"), F.col("body_size")) if "body_size" in records.columns
            else F.col("frame_size"))
    every = (records.withColumn("bytes", size)
             .withColumn("journal", F.when(frameless, F.col("path")).otherwise(_parent(F.col("path"))))
             .withColumn("store", _parent(F.col("journal"))))
    effective = committed(every.where(F.col("damage").isNull()))
    added = effective.where(F.col("kind").isin(_ADDS)).select("journal", "record_id").distinct()
    deleted = effective.where(F.col("kind").isin(_DELETES)).select("journal", "record_id").distinct()
    live_ids = added.join(deleted, ["journal", "record_id"], "left_anti")
    live = (effective.where(F.col("kind").isin(_ADDS + _UPDATES)).join(live_ids, ["journal", "record_id"], "left_semi")
            .groupBy("path").agg(F.sum("bytes").alias("live_bytes")))
    used = every.groupBy("path", "file_id", "sequence").agg(F.count("*").alias("frames"),
                                                            F.sum("bytes").alias("used_bytes"))
    return (used.join(live, "path", "left").fillna(0, ["live_bytes"])
            .withColumn("dead_bytes", F.col("used_bytes") - F.col("live_bytes"))
            .withColumn("live_percent", F.round(100.0 * F.col("live_bytes") / F.col("used_bytes"), 1))
            .withColumn("compaction_candidate", F.col("live_percent") < compact_percentage)
            .orderBy("path"))


# ----- crash-test and bench reports ------------------------------------------------------------------

def read_reports(spark, paths) -> DataFrame:
    """The JSON reports of `journal-engine crash-test --json` and `journal-engine bench --json`, one row
    each, with ``report`` (its path)."""
    return spark.read.option("multiLine", True).json(paths).withColumn("report", F.input_file_name())


def crash_test_summary(reports: DataFrame) -> DataFrame:
    """One row per crash-test report: store, size, seed, fault modes, runs, acknowledged writes, writes
    lost without an acknowledgement, violations, duration. Columns as named."""
    runs = F.from_json(F.to_json("runs"), "map<string,bigint>")
    return (reports.where(F.col("violations").isNotNull())
            .select("report", "store", "size", "seed", F.size(F.map_keys(runs)).alias("fault_modes"),
                    F.aggregate(F.map_values(runs), F.lit(0).cast("bigint"), lambda total, n: total + n).alias("runs"),
                    "acknowledged", "lost_unacknowledged", F.size("violations").alias("violations"), "duration_s")
            .orderBy("report"))


def bench_summary(reports: DataFrame) -> DataFrame:
    """Every bench cell over all the reports given: the median rate (records or messages per second) per
    scenario, cell and store, its range over the reports, and how it stands against the best peer and
    the machine's limit. Columns: scenario, cell, store, ours, reports, median_records_per_s,
    min_records_per_s, max_records_per_s, ratio_to_best_peer, fraction_of_limit."""
    results = (reports.where(F.col("schema") == "journal-engine-bench")
               .select("report", F.explode("results").alias("result")).select("report", "result.*"))
    return (results.groupBy("scenario", F.col("cell.key").alias("cell"), "store", "ours")
            .agg(F.count("*").alias("reports"),
                 F.median("median_records_per_s").alias("median_records_per_s"),
                 F.min("median_records_per_s").alias("min_records_per_s"),
                 F.max("median_records_per_s").alias("max_records_per_s"),
                 F.avg("ratio_to_best_peer").alias("ratio_to_best_peer"),
                 F.avg("fraction_of_limit").alias("fraction_of_limit"))
            .orderBy("scenario", "cell", F.desc("ours"), "store"))
