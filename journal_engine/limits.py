"""Every limit and default of the storage core in one place, with the relations between them.

The relations are checked at import, with an ``if`` (``python -O`` removes an ``assert``): a broken one
is an ImportError naming it. Each maximum a caller can reach is tested at its value (accepted) and one
past it (a clear error): the journal's, the stores' and the broker's in
tests/broker/test_limits_and_config.py, the others' beside what enforces them (the configuration file's,
the export header's, the STOMP frame's and the served broker's).
"""
from __future__ import annotations

from array import array

FILE_HEADER_SIZE_BYTES = 64
FRAME_HEADER_SIZE_BYTES = 32
FRAME_ALIGNMENT_BYTES = 8
# A synced batch ends on a sector boundary, so later appends never rewrite a
# sector that holds records already reported durable (a torn rewrite would lose them).
SECTOR_SIZE_BYTES = 4096
# where the first frame of a file lies (format version 2): the sector after the header, so no write
# ever touches the header's sector once it is synced
DATA_START_BYTES = SECTOR_SIZE_BYTES

FILE_SIZE_MIN_BYTES = 64 * 1024
FILE_SIZE_MAX_BYTES = 1 << 31          # body lengths are u32; one mapping stays well inside
FILE_SIZE_DEFAULT_BYTES = 10 * 1024 * 1024

MIN_FILES_MIN = 2
# file ids grow by one per file and never wrap; a header or name past this is damage (or forged)
FILE_ID_MAX = (1 << 62) - 1
U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1
I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1
# the seed systems are Java: their settings are ints and longs, and their parsers refuse what does not fit
JAVA_INT_MIN = -(1 << 31)
JAVA_INT_MAX = (1 << 31) - 1
JAVA_LONG_MIN = I64_MIN
JAVA_LONG_MAX = I64_MAX
RECORD_ID_MAX = U64_MAX
TX_ID_MAX = U64_MAX
RECORD_TYPE_MAX = 255
BUFFER_TIMEOUT_US_MAX = 10_000_000

# sync modes and the defaults of every store's signature (CONTRACT: Journal, MessageStore, the LMDB store)
SYNC_MODE_NAMES = ("always", "group", "none")
SYNC_MODE_DEFAULT = "group"
BUFFER_SIZE_DEFAULT_BYTES = 490 * 1024         # Artemis's journal-buffer-size
BUFFER_TIMEOUT_DEFAULT_US = 500
MIN_FILES_DEFAULT = 2
COMPACT_MIN_FILES_DEFAULT = 10                  # Artemis's journal-compact-min-files
COMPACT_PERCENTAGE_DEFAULT = 30                 # Artemis's journal-compact-percentage
MAX_REDELIVERY_RECORDS_DEFAULT = 10             # Artemis's max-redelivery-records
# duplicate detection: the ids an address remembers (Artemis's id-cache-size, a ring per address; 0:
# no detection) and whether they are journaled (persist-id-cache); the largest cache this broker takes
ID_CACHE_SIZE_DEFAULT = 20_000
ID_CACHE_SIZE_MAX = 10_000_000
PERSIST_ID_CACHE_DEFAULT = True
# ActiveMQ Classic's producer audit (a destination policy's enableAudit): per destination, a window of
# producer sequence ids per producer (BitArrayBin, 64-bit words) for at most so many producers (an LRU).
# A policy entry's defaults (BaseDestination.MAX_AUDIT_DEPTH, MAX_PRODUCERS_TO_AUDIT) and a destination's
# own when no entry applies (BaseDestination's fields); the largest values taken: a window of
# CLASSIC_AUDIT_DEPTH_MAX ids is 128 KiB a producer
CLASSIC_AUDIT_DEPTH_POLICY_DEFAULT = 10_000
CLASSIC_AUDIT_PRODUCERS_POLICY_DEFAULT = 64
CLASSIC_AUDIT_DEPTH_DESTINATION_DEFAULT = 2048
CLASSIC_AUDIT_PRODUCERS_DESTINATION_DEFAULT = 1024
CLASSIC_AUDIT_DEPTH_MAX = 1 << 20
CLASSIC_AUDIT_PRODUCERS_MAX = 1 << 16
# a message is redriven from a dead-letter queue at most this many times (loop protection)
REDRIVES_MAX_DEFAULT = 3
# message ids a broker reserves in its bindings journal at a time (an ID counter record per block)
MESSAGE_ID_BLOCK = 10_000
# a recovered queue's references are made this many at a time, as its deliveries reach them (ReadyQueue):
# the first receive after a restart makes one chunk, not the whole queue
READY_CHUNK = 1024
BUFFER_SIZE_MIN_BYTES = SECTOR_SIZE_BYTES
COMPACT_PERCENTAGE_MAX = 100
# Artemis's JournalImpl.UPDATE_FACTOR: compact when replaceable updates outnumber adds this much
COMPACT_UPDATE_FACTOR = 10
# sealed files whose data is not yet durable, kept open for the next sync
UNSYNCED_OPEN_FILES_MAX = 64
SCAN_THREADS_MAX = 4                            # files decoded at once by recovery (and no more than cores)
# below this many bytes of files recovery decodes on its own thread: starting and joining a pool of
# threads costs more than decoding a few MiB (twice the CPU of a load of a 1 MiB journal)
SCAN_THREADS_MIN_BYTES = 4 * 1024 * 1024
# a scan writes its rows straight into the columns it returns, sized for the most rows a file's bytes
# could hold (untouched room costs address space, not memory), up to this many rows (a 1.5 GiB file);
# a larger file's rows grow in buffers copied into the columns at the end (each row written twice)
SCAN_DIRECT_ROWS_MAX = 100_000_000
# a table array (the live set's, the record writer's references) of at least this many bytes is
# mapped on transparent huge pages (a fault per 2 MiB instead of two per 4 KiB: see
# _livemap.zeroed_table); a smaller one comes from calloc
TABLE_HUGE_PAGES_BYTES_MIN = 1 << 20
# the largest queue id the message store's table of one-queue messages holds (a LiveMap: signed 64-bit
# values, with room for its own marks); a reference on a larger id, which only a damaged or hostile
# journal holds, is kept beside it as a one-queue tuple (message_store/message_queues.py)
ONE_QUEUE_ID_MAX = (1 << 62) - 1

def max_frame_bytes(file_size_bytes: int) -> int:
    """The largest frame one file of this size holds."""
    return file_size_bytes - DATA_START_BYTES


def max_body_bytes(file_size_bytes: int) -> int:
    """The largest record body one file of this size holds."""
    return max_frame_bytes(file_size_bytes) - FRAME_HEADER_SIZE_BYTES


def check_id(value: int) -> None:
    """A record or transaction id (RECORD_ID_MAX, TX_ID_MAX): OverflowError outside 0..U64_MAX, as the compiled
    core raises converting it to a u64 (the Python twin and the LMDB store check with this)."""
    if not 0 <= value <= U64_MAX:
        raise OverflowError(f"{value} is out of range for a u64 id")


def check_max_redelivery_records(value: int) -> None:
    """-1 (no cap) or 0..U32_MAX, as Artemis's parser (MINUS_ONE_OR_GE_ZERO); ConfigError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < -1 or value > U32_MAX:
        from .errors import ConfigError
        raise ConfigError("max_redelivery_records", value, f"must be -1 (no cap) or an integer within 0..{U32_MAX}")


# an awaiting receive (Broker.receive_async) looks again after these pauses, doubling from the first
# to the last: a message sent meanwhile waits at most the last pause, an idle consumer costs a
# receive(0) per last pause
ASYNC_RECEIVE_POLL_FIRST_S = 0.0005
ASYNC_RECEIVE_POLL_LAST_S = 0.02

_ARRAY_BOUNDS = {"Q": U64_MAX, "I": U32_MAX}


def checked_array(values, typecode: str, what: str) -> array:
    """A batch argument as array(typecode) ("Q": u64, "I": u32); a value out of range raises OverflowError."""
    if isinstance(values, array) and values.typecode == typecode:
        return values
    try:
        return array(typecode, values)
    except OverflowError:
        raise OverflowError(f"{what}: every value must be within 0..{_ARRAY_BOUNDS[typecode]}") from None


def u64_array(values, what: str) -> array:
    """A batch of u64 values (ids, times) as array("Q"), so the compiled writer reads them without
    a Python object each; OverflowError naming ``what`` for a value outside 0..U64_MAX."""
    return checked_array(values, "Q", what)


def u32_array(values, what: str) -> array:
    """A batch of u32 values (delivery counts) as array("I"); OverflowError outside 0..U32_MAX."""
    return checked_array(values, "I", what)



# `journal-engine import` reads an export's first line (its header) up to this many bytes before it
# decides the file is an export at all: a large binary file given by mistake is not read whole first
EXPORT_HEADER_LINE_BYTES_MAX = 64 * 1024

# a configuration file (broker.xml, activemq.xml, a HornetQ configuration) is read whole into memory;
# past this it is refused (ConfigError naming the file and this cap) rather than read: a mistaken
# multi-GiB file would otherwise fill memory (a FIFO or a device such as /dev/zero is refused before
# anything is read, as no regular file). Real ones hold a few KiB.
CONFIG_FILE_BYTES_MAX = 16 * 1024 * 1024


# ----- the stores (message_store/): the LMDB backend, the message store, the delivery-count shadow -----------------
LMDB_MAP_SIZE_DEFAULT_BYTES = 64 * 1024 * 1024
LMDB_MAP_SIZE_MIN_BYTES = 1024 * 1024
LMDB_MAP_SIZE_MAX_DEFAULT_BYTES = 1 << 40      # 1 TiB of address space: the automatic growth stops here
LMDB_BODY_BYTES_MAX = U32_MAX - 1              # the prepared-transaction encoding keeps u32 lengths
# an LMDB group-commit batch is committed by the appender itself (back-pressure) past this many times buffer_size
LMDB_BATCH_HARD_LIMIT_FACTOR = 8
# after a full disk the LMDB flusher retries this often (callers of sync() retry at once)
LMDB_FULL_DISK_RETRY_S = 0.1
# an EIO from an LMDB commit counts as a full disk when less than twice the batch plus this is free
LMDB_FULL_DISK_SLACK_BYTES = 1024 * 1024
BINDINGS_FILE_SIZE_MAX_BYTES = 1024 * 1024     # the bindings journal's files: queue bindings are few and small
# the delivery-count shadow's entries: 1 MiB of them, one journal write-out per 32k dispatches
SHADOW_ENTRIES_DEFAULT = 32 * 1024

# checkpoints (storage/journal/checkpoint.py) the compiled core holds mapped at once: each is a patched region of
# its SIGBUS handler, whose table has this many slots (JE_PATCHED_MAX in pyx/journal_engine/bus_guard.h,
# which a test holds to this); one more is refused with an OSError naming it
CHECKPOINTS_MAPPED_MAX = 64

# a read-only view of a journal a live writer changes (it compacts or recycles a file between the
# listing and the read) lists the directory again, at most this many times, then says the journal is
# in use instead of reading a set of files that never existed together
LIVE_READ_ATTEMPTS_MAX = 5

# ----- the broker (broker/) -------------------------------------------------------------------------------------
NAME_LENGTH_MAX = 0xFFFF                # queue and address names (the store keeps them as u32-length strings)
SELECTOR_LENGTH_MAX = 64 * 1024         # characters; a filter longer than this is a mistake, not a filter
SELECTOR_NESTING_DEPTH_MAX = 64         # parentheses, NOT and sign chains: ~9 frames a level stays far below the recursion limit
ADDRESS_SETTINGS_CACHE_ENTRIES_MAX = 65536      # per repository; past it the cache starts over (addresses are unbounded)
REDELIVERY_DELAYS_LENGTH_MAX = 10_000
# a message's priority, JMS's range: higher is delivered first; a message sent without one has the default
PRIORITY_MIN = 0
PRIORITY_MAX = 9
PRIORITY_DEFAULT = 4
# a Qpid queue's x-qpid-priorities: levels a queue may have (an AMQP 0-9-1 priority is a byte)
QPID_PRIORITIES_MAX = 255
# serve-stomp (integrations/stomp_frames.py): a STOMP frame past this many bytes (command, headers and
# body) is refused with an ERROR frame before it is read whole, so one client cannot fill the server's
# memory; past this many header lines likewise. A socket read takes up to STOMP_READ_BYTES at a time.
STOMP_FRAME_BYTES_MAX = 16 * 1024 * 1024
STOMP_HEADERS_MAX = 1000
STOMP_READ_BYTES = 64 * 1024
# after an ERROR frame the server stops writing, then reads (and drops) what the client still sends for
# at most this long before it closes: closing with unread bytes would reset the connection, and a reset
# can discard the ERROR frame before the client reads it
STOMP_ERROR_LINGER_S = 1.0
# a destination's watcher (integrations/coilmq.py) waits in Consumer.receive, which wakes when a message
# becomes deliverable; it returns at least this often to see whether its subscribers are gone
STOMP_WATCH_WAIT_S = 1.0
# a STOMP connection's frames wait in an outbox written by a thread of its own; past this many bytes
# queued, queueing more waits for the client to read. A write (or that wait) taking longer than
# STOMP_WRITE_TIMEOUT_S shuts the connection down (part of a frame may be out: nothing may follow it)
STOMP_OUTBOX_BYTES_MAX = 32 * 1024 * 1024
STOMP_WRITE_TIMEOUT_S = 10.0
# the served broker (served/): a subscription acknowledging by client or client-individual is handed at
# most this many messages it has not acknowledged, unless its SUBSCRIBE says otherwise in the
# ``activemq.prefetchSize`` header (ActiveMQ's name), between 1 and SERVED_PREFETCH_MAX. 1 keeps the
# order a consumer sees after a NACK (the failed message comes back next) and the old server's model
SERVED_PREFETCH_DEFAULT = 1
SERVED_PREFETCH_MAX = 65536
# a connection holds at most this many subscriptions; a SUBSCRIBE past it gets an ERROR frame naming it
SERVED_SUBSCRIPTIONS_PER_CONNECTION_MAX = 1000
# connections the served broker holds at once; one more gets an ERROR naming this limit and is closed
SERVED_CONNECTIONS_MAX = 10000
# a CONNECT whose login/passcode do not match (--users) gets its ERROR at once and its connection is
# closed this long after, on a timer of the event loop (other connections go on): a guesser waits
SERVED_LOGIN_FAILURE_DELAY_S = 1.0
# a connection's outgoing bytes the event loop buffers: past the high mark no more MESSAGE frames are
# handed to its subscriptions (they stay in their queues, for other consumers) until it drains below
# the low mark; a connection that stays past the high mark for STOMP_WRITE_TIMEOUT_S is given up
SERVED_WRITE_BUFFER_HIGH_BYTES = 4 * 1024 * 1024
SERVED_WRITE_BUFFER_LOW_BYTES = 1024 * 1024
# one subscription is handed at most this many messages in one turn of the loop, so that a consumer
# with a deep backlog and no prefetch bound (ack auto) does not hold the loop from other connections
SERVED_DISPATCH_BATCH_MAX = 256
# a subscription with room and nothing deliverable looks at its queue again this often, for what
# becomes deliverable with nothing sent: a redelivery falling due, a dead letter or an expiry copy
SERVED_IDLE_POLL_S = 0.02
# the served broker's store writes what no RECEIPT waits for (an ACK without a receipt, a SEND without
# one) within this window, not the journal's default 500 us: every RECEIPT makes its turn sync anyway,
# and a shorter window only adds the background flusher's fdatasyncs beside the turns' (32 receipted
# producers: 0.20 -> 0.09 fdatasyncs a message)
SERVED_STORE_BUFFER_TIMEOUT_US = 5000
# heart-beating (STOMP 1.1 and 1.2): the server offers to send, and asks to receive, a heart-beat at
# most this often; a client that promised heart-beats and is silent for SERVED_HEARTBEAT_GRACE times
# the agreed interval is given up (its unacknowledged messages become failed deliveries)
SERVED_HEARTBEAT_MS = 1000
# serve-stomp --failback (served/takeover.py): a serving backup looks for a restarted primary's request this
# often; after handing back it waits at most this long for the primary to take the lock and withdraw it
SERVED_FAILBACK_POLL_S = 0.1
SERVED_FAILBACK_HANDOVER_S = 30.0
SERVED_HEARTBEAT_GRACE = 2.0

# The operator's console (journal_engine/console, docs/console.md). It runs on the served broker's event
# loop, so each of its calls into the broker is bounded: a page of messages, a walk of a queue that stops.
CONSOLE_PAGE_MESSAGES_DEFAULT = 50       # messages a page of a queue shows
CONSOLE_PAGE_MESSAGES_MAX = 500
# references one browse walks before it stops (a filtered page of a million-message queue continues from
# where the walk stopped, on the operator's next click): a selector costs about 2 us a reference, so a
# walk holds the loop about 10 ms
CONSOLE_BROWSE_SCAN_MAX = 5000
# dead letters one Dead letters page reads, groups and lists (each one's history is decoded): about 20 ms
CONSOLE_DEAD_LETTERS_MAX = 2000
CONSOLE_SAMPLE_PERIOD_S = 2.0            # how often the queues' counts are sampled for their rates
CONSOLE_SAMPLES_KEPT = 300               # samples kept a queue: 10 minutes at the period above
CONSOLE_BODY_PREVIEW_BYTES = 64 * 1024   # the body a message's page shows at most
CONSOLE_SESSION_TTL_S = 8 * 3600         # a login lasts a working day
CONSOLE_SESSIONS_MAX = 1000              # logged-in sessions held at once; the oldest goes first
CONSOLE_ACTIONS_KEPT = 1000              # redrives and deletions the console lists (newest first)
CONSOLE_HEALTH_CACHE_S = 10.0            # the journal-health page's analysis is reused this long
# the kombu transport (integrations/kombu.py) waits this long for the RECEIPT of a request (a publish,
# a declaration, an ACK) before it gives the connection up as lost
KOMBU_REPLY_TIMEOUT_S = 30.0

# the group commit's histograms (journal_engine/metrics: journal_engine_journal_commit_batch_bytes and
# _commit_lag_seconds), kept by the journal core as fixed arrays of counts filled once per sync: the
# upper bounds of the buckets (a last one, past the largest bound, counts the rest). A batch is at
# least a sector (the pad); its lag runs from about the window (BUFFER_TIMEOUT_DEFAULT_US) to what a
# slow disk's fdatasync takes.
HISTOGRAM_BOUNDS_MAX = 16
COMMIT_BATCH_BUCKETS_BYTES = (4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576, 4194304)
COMMIT_LAG_BUCKETS_NS = (100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000, 25_000_000,
                         50_000_000, 100_000_000, 250_000_000, 1_000_000_000)


def _rising(bounds: tuple[int, ...]) -> bool:
    return 0 < len(bounds) <= HISTOGRAM_BOUNDS_MAX and all(0 < a < b for a, b in zip(bounds, bounds[1:]))


# how the limits relate, checked at import with an ``if`` (``python -O`` removes an ``assert``)
_RELATIONSHIPS = {
    "the file header is 8-byte aligned": FILE_HEADER_SIZE_BYTES % FRAME_ALIGNMENT_BYTES == 0,
    "the frame header is 8-byte aligned": FRAME_HEADER_SIZE_BYTES % FRAME_ALIGNMENT_BYTES == 0,
    "a sector is a whole number of frame alignments": SECTOR_SIZE_BYTES % FRAME_ALIGNMENT_BYTES == 0,
    "the smallest file is a whole number of sectors": FILE_SIZE_MIN_BYTES % SECTOR_SIZE_BYTES == 0,
    "the first frame lies past the header, on a sector": FILE_HEADER_SIZE_BYTES <= DATA_START_BYTES
                                                         and DATA_START_BYTES % SECTOR_SIZE_BYTES == 0,
    "the smallest file holds a frame and a sector past its data start": FILE_SIZE_MIN_BYTES
        > DATA_START_BYTES + FRAME_HEADER_SIZE_BYTES + SECTOR_SIZE_BYTES,
    "array('Q') holds u64 and array('I') u32": array("Q").itemsize == 8 and array("I").itemsize == 4,
    "the default buffer is within its bounds": BUFFER_SIZE_DEFAULT_BYTES >= BUFFER_SIZE_MIN_BYTES,
    "the default flush window is within its bound": BUFFER_TIMEOUT_DEFAULT_US <= BUFFER_TIMEOUT_US_MAX,
    "the default file count is within its bound": MIN_FILES_DEFAULT >= MIN_FILES_MIN,
    "the default sync mode is a sync mode": SYNC_MODE_DEFAULT in SYNC_MODE_NAMES,
    "a STOMP read fits in a frame": 0 < STOMP_READ_BYTES <= STOMP_FRAME_BYTES_MAX,
    "a STOMP outbox holds a frame of the largest size": STOMP_FRAME_BYTES_MAX < STOMP_OUTBOX_BYTES_MAX,
    "a served subscription's default prefetch is within its bound": 1 <= SERVED_PREFETCH_DEFAULT <= SERVED_PREFETCH_MAX,
    "a served connection's write buffer marks are ordered": 0 < SERVED_WRITE_BUFFER_LOW_BYTES
                                                            < SERVED_WRITE_BUFFER_HIGH_BYTES,
    "a served turn hands out at least one message": SERVED_DISPATCH_BATCH_MAX >= 1,
    "a served connection may subscribe": SERVED_SUBSCRIPTIONS_PER_CONNECTION_MAX >= 1,
    "the served broker takes a connection": SERVED_CONNECTIONS_MAX >= 1,
    "a failback request is looked for well within its handover": 0 < SERVED_FAILBACK_POLL_S * 10
                                                                 <= SERVED_FAILBACK_HANDOVER_S,
    "a failed login is closed after a short, positive delay": 0 < SERVED_LOGIN_FAILURE_DELAY_S <= 10,
    "the served store's window is a journal window": 0 < SERVED_STORE_BUFFER_TIMEOUT_US <= BUFFER_TIMEOUT_US_MAX,
    "served heart-beats tolerate a late one": SERVED_HEARTBEAT_MS > 0 and SERVED_HEARTBEAT_GRACE > 1,
    "a console page is within its bound and walks at least a page": 1 <= CONSOLE_PAGE_MESSAGES_DEFAULT
        <= CONSOLE_PAGE_MESSAGES_MAX <= CONSOLE_BROWSE_SCAN_MAX,
    "a dead-letters page lists at least a page": CONSOLE_DEAD_LETTERS_MAX >= CONSOLE_PAGE_MESSAGES_MAX,
    "the console keeps at least two samples a queue": CONSOLE_SAMPLES_KEPT >= 2 and CONSOLE_SAMPLE_PERIOD_S > 0,
    "the async receive's polls grow": 0 < ASYNC_RECEIVE_POLL_FIRST_S <= ASYNC_RECEIVE_POLL_LAST_S,
    "an LMDB map starts within its growth": LMDB_MAP_SIZE_MIN_BYTES <= LMDB_MAP_SIZE_DEFAULT_BYTES
                                            <= LMDB_MAP_SIZE_MAX_DEFAULT_BYTES,
    "Classic's audit defaults are within their bounds": max(CLASSIC_AUDIT_DEPTH_POLICY_DEFAULT,
                                                            CLASSIC_AUDIT_DEPTH_DESTINATION_DEFAULT)
        <= CLASSIC_AUDIT_DEPTH_MAX <= JAVA_INT_MAX and max(CLASSIC_AUDIT_PRODUCERS_POLICY_DEFAULT,
                                                        CLASSIC_AUDIT_PRODUCERS_DESTINATION_DEFAULT)
        <= CLASSIC_AUDIT_PRODUCERS_MAX <= JAVA_INT_MAX,
    "the histograms' bounds rise and fit the core's arrays": _rising(COMMIT_BATCH_BUCKETS_BYTES)
                                                              and _rising(COMMIT_LAG_BUCKETS_NS),
    "Java's bounds are the integer bounds": JAVA_LONG_MIN == I64_MIN and JAVA_LONG_MAX == I64_MAX
                                            and JAVA_INT_MIN < 0 < JAVA_INT_MAX < U32_MAX,
}
if not all(_RELATIONSHIPS.values()):
    raise ImportError("journal_engine.limits: " + "; ".join(what for what, holds in _RELATIONSHIPS.items() if not holds))
