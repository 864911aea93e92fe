"""A child process for the crash tests: it writes a journal until it is killed.

Two commands:

``workload DIRECTORY SYNC_MODE SEED FIRST_SEQ FIRST_ID``
    Opens the journal, recovers it, then appends a random mix of add / update /
    delete, transactions (commit, rollback, prepare then commit or rollback
    later), sync() and compact() until it is killed. Before each call it prints
    an intent line ``O <seq> <op> <args...>``; after each call that promised
    durability (a ``sync=True`` append, a commit or prepare in "always"/"group"
    mode, every call in "always" mode, a ``sync()``) has RETURNED, it prints
    ``A <seq>``: everything up to and including ``seq`` is durable. Lines go to
    stdout, a pipe the parent reads, one write per line, so every line printed
    before a SIGKILL reaches the parent. ``R`` marks the end of recovery.

``sync-failure DIRECTORY SYNC_MODE``
    Run under fiu-run: syncs some records, then waits on stdin while the parent
    makes msync / fdatasync fail, and reports how every later write behaves.

``compact DIRECTORY PHASE``
    PHASE ``build``: writes the fixed journal of ``build_compaction_journal``
    and closes it. PHASE ``compact``: opens it, prints ``loaded``, prints
    ``compacting``, calls compact() and prints ``compacted``. Run with
    JOURNAL_ENGINE_CRASH_AT=<point> the process dies at that point (exit 137).

Every body names its record id and the sequence number of the call that wrote
it, and ends with a CRC, so a recovered body that was never written, or was
changed, is told apart from a real one (``check_body``).
"""
from __future__ import annotations

import hashlib
import os
import random
import struct
import sys
import zlib

FILE_SIZE = 256 * 1024
_BODY_HEAD = struct.Struct("<QQI")      # record id, sequence of the writing call, payload length
_BODY_CRC = struct.Struct("<I")
BODY_OVERHEAD = _BODY_HEAD.size + _BODY_CRC.size


def make_body(record_id: int, seq: int, payload_len: int) -> bytes:
    """The one body the call `seq` writes for `record_id`; the parent rebuilds it to compare."""
    head = _BODY_HEAD.pack(record_id, seq, payload_len)
    seed = hashlib.blake2b(head, digest_size=32).digest()
    payload = (seed * (payload_len // len(seed) + 1))[:payload_len]
    return head + payload + _BODY_CRC.pack(zlib.crc32(head + payload))


def check_body(body: bytes) -> tuple[int, int]:
    """(record id, seq) of a body made by make_body; ValueError if it was never written so."""
    if len(body) < BODY_OVERHEAD:
        raise ValueError(f"body of {len(body)} bytes is shorter than any written body")
    record_id, seq, payload_len = _BODY_HEAD.unpack_from(body)
    if len(body) != BODY_OVERHEAD + payload_len:
        raise ValueError(f"body length {len(body)} does not match its payload length {payload_len}")
    if body != make_body(record_id, seq, payload_len):
        raise ValueError(f"body of record {record_id} seq {seq} differs from the one written")
    return record_id, seq


def xid_of(tx_id: int) -> bytes:
    return b"xid-%d" % tx_id


# ----- workload -------------------------------------------------------------------------------
class _Workload:
    def __init__(self, journal, rng: random.Random, mode: str, first_seq: int, first_id: int) -> None:
        self.journal = journal
        self.rng = rng
        self.mode = mode
        self.seq = first_seq
        self.next_id = first_id
        self.live: list[int] = []          # ids that are live and in no open transaction
        self.live_set: set[int] = set()
        self.prepared: dict[int, list] = {}  # tx id -> ops [(kind, record_id)] still to be resolved
        self.out = sys.stdout

    def emit(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def intent(self, *fields) -> int:
        seq = self.seq
        self.seq += 1
        self.emit("O " + " ".join(str(f) for f in (seq,) + fields))
        return seq

    def ack(self, seq: int) -> None:
        self.emit(f"A {seq}")

    def _sync_flag(self):
        """None lets the mode decide; True forces a wait (and so an acknowledgement)."""
        if self.mode == "always":
            return None
        return True if self.rng.random() < 0.2 else None

    def _durable(self, sync, tx_end: bool = False) -> bool:
        if sync is True or self.mode == "always":
            return True
        return tx_end and self.mode == "group"

    def _payload_len(self) -> int:
        r = self.rng.random()
        if r < 0.6:
            return self.rng.randrange(0, 200)
        if r < 0.95:
            return self.rng.randrange(200, 1500)
        return self.rng.randrange(1500, 6000)

    def _take_live(self) -> int | None:
        if not self.live:
            return None
        index = self.rng.randrange(len(self.live))
        self.live[index], self.live[-1] = self.live[-1], self.live[index]
        record_id = self.live.pop()
        self.live_set.discard(record_id)
        return record_id

    def _put_live(self, record_id: int) -> None:
        self.live.append(record_id)
        self.live_set.add(record_id)

    # one call each
    def add(self) -> None:
        record_id = self.next_id
        self.next_id += 1
        record_type = self.rng.randrange(1, 6)
        size = self._payload_len()
        sync = self._sync_flag()
        seq = self.intent("add", record_id, record_type, size, sync)
        self.journal.add(record_id, record_type, make_body(record_id, seq, size), sync=sync)
        self._put_live(record_id)
        if self._durable(sync):
            self.ack(seq)

    def update(self) -> None:
        record_id = self._take_live()
        if record_id is None:
            return self.add()
        record_type = self.rng.randrange(1, 6)
        size = self._payload_len()
        sync = self._sync_flag()
        seq = self.intent("upd", record_id, record_type, size, sync)
        self.journal.update(record_id, record_type, make_body(record_id, seq, size), sync=sync)
        self._put_live(record_id)
        if self._durable(sync):
            self.ack(seq)

    def delete(self) -> None:
        record_id = self._take_live()
        if record_id is None:
            return self.add()
        sync = self._sync_flag()
        seq = self.intent("del", record_id, sync)
        self.journal.delete(record_id, sync=sync)
        if self._durable(sync):
            self.ack(seq)

    def transaction(self) -> None:
        tx_id = self.seq          # unique: no call ever reuses a sequence number
        ops = []
        for _ in range(self.rng.randrange(1, 6)):
            r = self.rng.random()
            if r < 0.5 or not self.live:
                record_id = self.next_id
                self.next_id += 1
                record_type = self.rng.randrange(1, 6)
                size = self._payload_len()
                seq = self.intent("atx", tx_id, record_id, record_type, size)
                self.journal.add_tx(tx_id, record_id, record_type, make_body(record_id, seq, size))
                ops.append(("add", record_id))
                if self.rng.random() < 0.3:   # an update of a record added in the same transaction
                    size = self._payload_len()
                    seq = self.intent("utx", tx_id, record_id, record_type, size)
                    self.journal.update_tx(tx_id, record_id, record_type, make_body(record_id, seq, size))
            elif r < 0.8:
                record_id = self._take_live()
                record_type = self.rng.randrange(1, 6)
                size = self._payload_len()
                seq = self.intent("utx", tx_id, record_id, record_type, size)
                self.journal.update_tx(tx_id, record_id, record_type, make_body(record_id, seq, size))
                ops.append(("update", record_id))
            else:
                record_id = self._take_live()
                seq = self.intent("dtx", tx_id, record_id)
                self.journal.delete_tx(tx_id, record_id)
                ops.append(("delete", record_id))
        r = self.rng.random()
        if r < 0.6:
            self._end(tx_id, "cmt", ops)
        elif r < 0.8:
            self._end(tx_id, "rbk", ops)
        else:
            sync = self._sync_flag()
            seq = self.intent("prp", tx_id, sync)
            self.journal.prepare(tx_id, xid_of(tx_id), sync=sync)
            self.prepared[tx_id] = ops
            if self._durable(sync, tx_end=True):
                self.ack(seq)

    def _end(self, tx_id: int, how: str, ops: list) -> None:
        sync = self._sync_flag()
        seq = self.intent(how, tx_id, sync)
        if how == "cmt":
            self.journal.commit(tx_id, sync=sync)
        else:
            self.journal.rollback(tx_id, sync=sync)
        # a record is live afterwards if the commit left it so, or if the rollback found it so
        first: dict[int, str] = {}
        last: dict[int, str] = {}
        for kind, record_id in ops:
            first.setdefault(record_id, kind)
            last[record_id] = kind
        for record_id in first:
            if (last[record_id] != "delete") if how == "cmt" else (first[record_id] != "add"):
                self._put_live(record_id)
        if self._durable(sync, tx_end=True):
            self.ack(seq)

    def resolve_prepared(self, tx_id: int) -> None:
        ops = self.prepared.pop(tx_id)
        self._end(tx_id, "cmt" if self.rng.random() < 0.7 else "rbk", ops)

    def sync(self) -> None:
        seq = self.intent("syn")
        self.journal.sync()
        self.ack(seq)

    def compact(self) -> None:
        self.intent("cpt")
        self.journal.compact()

    def step(self) -> None:
        if self.prepared and self.rng.random() < 0.05:
            return self.resolve_prepared(self.rng.choice(sorted(self.prepared)))
        r = self.rng.random()
        if len(self.live) > 150:
            r = 0.45 + r * 0.55        # favour updates and deletes once the live set is large
        if r < 0.35:
            self.add()
        elif r < 0.55:
            self.update()
        elif r < 0.80:
            self.delete()
        elif r < 0.92:
            self.transaction()
        elif r < 0.985:
            self.sync()
        else:
            self.compact()


def run_workload(directory: str, mode: str, seed: int, first_seq: int, first_id: int,
                 max_calls: int = 20000) -> None:
    from journal_engine import Journal

    rng = random.Random(seed)
    with Journal(directory, file_size=FILE_SIZE, sync=mode, compact_min_files=2) as journal:
        result = journal.load()
        work = _Workload(journal, rng, mode, first_seq, first_id)
        report = result.report
        if report.corrupt or report.anomalies:
            work.emit(f"W damage reported at the worker's load: {report.corrupt!r} {report.anomalies!r}")
        for record_id in result.records:
            work._put_live(record_id)
        for tx in result.prepared:
            # records a prepared transaction touches stay out of the pool until it is resolved
            ops = []
            for op in tx.records:
                ops.append((op.kind, op.record_id))
                if op.record_id in work.live_set:
                    work.live.remove(op.record_id)
                    work.live_set.discard(op.record_id)
            work.prepared[tx.tx_id] = ops
        work.emit("R")
        for tx_id in sorted(work.prepared):
            work.resolve_prepared(tx_id)
        for _ in range(max_calls):
            work.step()
    work.emit("E")


# ----- compaction ---------------------------------------------------------------------------------
COMPACTION_RECORDS = 1200
COMPACTION_REPLACEABLE = {34: 8}


def build_compaction_journal(directory: str) -> None:
    """A journal whose compaction has work: most records deleted, many updates, open transactions."""
    from journal_engine import Journal

    with Journal(directory, file_size=FILE_SIZE, sync="none", compact_min_files=0,
                 replaceable_types=COMPACTION_REPLACEABLE) as journal:
        journal.load()
        for spec in compaction_operations():
            getattr(journal, spec[0])(*spec[1:])
        journal.sync()


def compaction_operations():
    """The calls build_compaction_journal makes, in order, as (method, *args)."""
    seq = 0
    for record_id in range(COMPACTION_RECORDS):
        seq += 1
        yield ("add", record_id, 1, make_body(record_id, seq, 300 + record_id % 400))
    for record_id in range(0, COMPACTION_RECORDS, 3):
        for count in range(4):
            seq += 1
            queue = struct.pack("<Q", count % 2)
            yield ("update", record_id, 34, queue + make_body(record_id, seq, 40))
        seq += 1
        yield ("update", record_id, 7, make_body(record_id, seq, 20))
    for record_id in range(COMPACTION_RECORDS):
        if record_id % 5:
            yield ("delete", record_id)
    # a prepared transaction and a committed one, both before the compaction
    seq += 1
    yield ("add_tx", 900001, 10_000, 2, make_body(10_000, seq, 64))
    yield ("update_tx", 900001, 0, 2, make_body(0, seq, 16))
    yield ("prepare", 900001, xid_of(900001))
    seq += 1
    yield ("add_tx", 900002, 10_001, 3, make_body(10_001, seq, 64))
    yield ("delete_tx", 900002, 5)
    yield ("commit", 900002)


def expected_compaction_state(*, compacted: bool):
    """(records, prepared) after build_compaction_journal, as {id: (type, body, updates)} and
    {tx: (xid, [(kind, id, type, body)])}; `compacted` drops replaced updates of type 34."""
    records: dict[int, tuple[int, bytes, list]] = {}
    pending: dict[int, list] = {}
    prepared: dict[int, tuple[bytes, list]] = {}
    for method, *args in compaction_operations():
        if method == "add":
            record_id, record_type, body = args
            records[record_id] = (record_type, body, [])
        elif method == "update":
            record_id, record_type, body = args
            records[record_id][2].append((record_type, body))
        elif method == "delete":
            del records[args[0]]
        elif method == "add_tx":
            tx_id, record_id, record_type, body = args
            pending.setdefault(tx_id, []).append(("add", record_id, record_type, body))
        elif method == "update_tx":
            tx_id, record_id, record_type, body = args
            pending.setdefault(tx_id, []).append(("update", record_id, record_type, body))
        elif method == "delete_tx":
            tx_id, record_id = args
            pending.setdefault(tx_id, []).append(("delete", record_id, 0, b""))
        elif method == "prepare":
            tx_id, xid = args
            prepared[tx_id] = (xid, pending.pop(tx_id))
        elif method == "commit":
            for kind, record_id, record_type, body in pending.pop(args[0]):
                if kind == "add":
                    records[record_id] = (record_type, body, [])
                elif kind == "update":
                    records[record_id][2].append((record_type, body))
                else:
                    records.pop(record_id, None)
    return (compact_updates(records) if compacted else records), prepared


def compact_updates(records: dict, replaceable: dict = COMPACTION_REPLACEABLE) -> dict:
    """What compaction keeps of {id: (type, body, updates)}: the last update per (record, type, key)
    of the replaceable types, every other update, in append order."""
    out = {}
    for record_id, (record_type, body, updates) in records.items():
        last = {}
        for index, (user_type, update) in enumerate(updates):
            key_bytes = replaceable.get(user_type)
            if key_bytes is not None:
                last[(user_type, update[:key_bytes])] = index
        keep = set(last.values())
        out[record_id] = (record_type, body, [
            u for index, u in enumerate(updates) if u[0] not in replaceable or index in keep])
    return out


AFTER_COMPACTION_FIRST_ID = 50_000
AFTER_COMPACTION_RECORDS = 80     # 8 KiB each: enough to switch files twice (two file activations)


def after_compaction_body(record_id: int) -> bytes:
    return make_body(record_id, record_id, 8000)


def run_compaction(directory: str, phase: str) -> None:
    """Build, or compact and then append until two new files were activated; prints its progress
    (``acked <id>`` after each synced append) so the parent knows what is durable."""
    from journal_engine import Journal

    if phase == "build":
        build_compaction_journal(directory)
        return
    journal = Journal(directory, file_size=FILE_SIZE, sync="none", compact_min_files=0,
                      replaceable_types=COMPACTION_REPLACEABLE)
    journal.load()
    print("loaded", flush=True)
    print("compacting", flush=True)
    journal.compact()
    print("compacted", flush=True)
    for record_id in range(AFTER_COMPACTION_FIRST_ID, AFTER_COMPACTION_FIRST_ID + AFTER_COMPACTION_RECORDS):
        journal.add(record_id, 9, after_compaction_body(record_id), sync=True)
        print(f"acked {record_id}", flush=True)
    journal.close()
    print("closed", flush=True)


# ----- a failed sync ---------------------------------------------------------------------------------
SYNC_FAILURE_RECORDS = 20


def run_sync_failure(directory: str, mode: str) -> None:
    """Run under fiu-run: append and sync, then wait while the parent makes every msync / fdatasync fail
    (fiu-ctrl), try again, wait while it lifts the fault, and try every kind of write once more.
    Prints what each call did, one line each."""
    from journal_engine import Journal, JournalFailedError

    journal = Journal(directory, file_size=FILE_SIZE, sync=mode)
    journal.load()
    for record_id in range(SYNC_FAILURE_RECORDS):
        journal.add(record_id, 1, make_body(record_id, record_id, 500), sync=True)
        print(f"acked {record_id}", flush=True)
    print("ready", flush=True)
    sys.stdin.readline()                                    # the fault is on
    try:
        journal.add(100, 1, make_body(100, 100, 500), sync=True)
        print("first-sync returned", flush=True)
    except JournalFailedError as exc:
        print(f"first-sync JournalFailedError {exc.__cause__!r}", flush=True)
    except Exception as exc:   # reported to the parent, which fails the test with it
        print(f"first-sync {type(exc).__name__} {exc!r}", flush=True)
    print("failed", flush=True)
    sys.stdin.readline()                                    # the fault is off: a retry would succeed now
    attempts = [
        ("add", lambda: journal.add(101, 1, b"after", sync=True)),
        ("add-nosync", lambda: journal.add(102, 1, b"after", sync=False)),
        ("update", lambda: journal.update(0, 2, b"after", sync=True)),
        ("delete", lambda: journal.delete(1, sync=True)),
        ("add_tx", lambda: journal.add_tx(7, 103, 1, b"after")),
        ("sync", journal.sync),
    ]
    for name, call in attempts:
        try:
            call()
            print(f"later {name} returned", flush=True)
        except JournalFailedError:
            print(f"later {name} JournalFailedError", flush=True)
        except Exception as exc:
            print(f"later {name} {type(exc).__name__} {exc!r}", flush=True)
    journal.close()
    print("closed", flush=True)


def main(argv: list[str]) -> int:
    if argv[1] == "workload":
        directory, mode, seed, first_seq, first_id = argv[2:7]
        run_workload(directory, mode, int(seed), int(first_seq), int(first_id))
        return 0
    if argv[1] == "compact":
        run_compaction(argv[2], argv[3])
        return 0
    if argv[1] == "sync-failure":
        run_sync_failure(argv[2], argv[3])
        return 0
    print(f"unknown command {argv[1]!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
