"""The journal-level workload of the crash harness, run in a child process until it is killed.

It opens and recovers a journal, then appends a random mix of add / update / delete, transactions
(commit, rollback, prepare then commit or rollback later), record groups (append_group), sync() and
compact(). It streams its
oracle out of the process as the calls happen: before each call an intent line ``O <seq> <op>
<args...>``; after each call that promised durability (a ``sync=True`` append, a commit or prepare
in "always"/"group" mode, every call in "always" mode, a ``sync()``) has RETURNED, ``A <seq>``:
everything up to and including ``seq`` is durable. One write per line to a pipe, so every line
printed before a SIGKILL reaches the parent. ``R`` marks the end of recovery, ``E`` the end.

Every body names its record id and the sequence number of the call that wrote it and ends with a
CRC (journal_engine.crashtest.bodies), so a recovered body that was never written is told apart.

    python -m journal_engine.crashtest.journal_workload DIRECTORY SYNC_MODE SEED FIRST_SEQ FIRST_ID [MAX_CALLS [STORE]]
"""
from __future__ import annotations

import random
import signal
import sys
import threading

from ..record_format import RecordKind
from .bodies import make_body, xid_of
from .stores import FILE_SIZE, open_store  # noqa: F401  (FILE_SIZE: the campaign and tests take it from here)

COMPACT_SIGNAL = signal.SIGUSR1     # the campaign's outside-file mode asks for a compaction with it
COMPACTION_ASKED = threading.Event()   # set by COMPACT_SIGNAL: the next call is a compaction
_GROUP_KINDS = {"add": RecordKind.ADD, "upd": RecordKind.UPDATE, "del": RecordKind.DELETE}


# ----- workload -------------------------------------------------------------------------------
class JournalWorkload:
    """One child's calls, each announced before and acknowledged after, as the module says."""

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

    def put_live(self, record_id: int) -> None:
        """The record joins the pool of live records the workload updates and deletes."""
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
        self.put_live(record_id)
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
        self.put_live(record_id)
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

    def group(self) -> None:
        """A record group (append_group): adds, updates and deletes of distinct records, appended as one
        unit; announced as one call ``grp <sync> <kind>:<id>:<type>:<size> ...``. A store without
        append_group (a user's) gets a transaction instead."""
        if not hasattr(self.journal, "append_group"):
            return self.transaction()
        members = []
        for _ in range(self.rng.randrange(2, 6)):
            r = self.rng.random()
            if r < 0.5 or not self.live:
                record_id = self.next_id
                self.next_id += 1
                members.append(("add", record_id, self.rng.randrange(1, 6), self._payload_len()))
            elif r < 0.8:
                members.append(("upd", self._take_live(), self.rng.randrange(1, 6), self._payload_len()))
            else:
                members.append(("del", self._take_live(), 0, 0))
        sync = self._sync_flag()
        seq = self.intent("grp", sync, *(f"{kind}:{record_id}:{record_type}:{size}"
                                         for kind, record_id, record_type, size in members))
        self.journal.append_group([(_GROUP_KINDS[kind], record_id, record_type,
                                    make_body(record_id, seq, size) if kind != "del" else b"")
                                   for kind, record_id, record_type, size in members], sync=sync)
        for kind, record_id, _type, _size in members:
            if kind != "del":
                self.put_live(record_id)
        if self._durable(sync):
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
                self.put_live(record_id)
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
        if COMPACTION_ASKED.is_set():
            COMPACTION_ASKED.clear()
            return self.compact()
        if self.prepared and self.rng.random() < 0.05:
            return self.resolve_prepared(self.rng.choice(sorted(self.prepared)))
        r = self.rng.random()
        if len(self.live) > 150:
            r = 0.45 + r * 0.55        # favour updates and deletes once the live set is large
        if r < 0.33:
            self.add()
        elif r < 0.52:
            self.update()
        elif r < 0.75:
            self.delete()
        elif r < 0.86:
            self.transaction()
        elif r < 0.92:
            self.group()
        elif r < 0.985:
            self.sync()
        else:
            self.compact()


def start_workload(journal, result, rng: random.Random, mode: str, first_seq: int, first_id: int,
                   out=None) -> JournalWorkload:
    """The workload on a journal just loaded (`result`): its live records and prepared transactions
    taken over, ``R`` emitted, the prepared transactions resolved. `out`: where the oracle goes."""
    work = JournalWorkload(journal, rng, mode, first_seq, first_id)
    if out is not None:
        work.out = out
    report = result.report
    if report.corrupt or report.anomalies:
        work.emit(f"W damage reported at the worker's load: {report.corrupt!r} {report.anomalies!r}")
    for record_id in result.records:
        work.put_live(record_id)
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
    return work


def run_workload(directory: str, mode: str, seed: int, first_seq: int, first_id: int,
                 max_calls: int = 20000, store: str = "journal") -> None:
    rng = random.Random(seed)
    # before the R line: the campaign may signal as soon as it reads it
    signal.signal(COMPACT_SIGNAL, lambda _signum, _frame: COMPACTION_ASKED.set())
    with open_store(store, directory, mode) as journal:   # the journal: small files, compaction runs
        work = start_workload(journal, journal.load(), rng, mode, first_seq, first_id)
        for _ in range(max_calls):
            work.step()
    work.emit("E")


def main(argv: list[str]) -> int:
    """Exit 0 after the calls; 1 after an error, reported on the oracle as
    ``X <type> <is a JournalError> <is an OSError> <errno> <file named>`` (injected I/O errors end a run
    so; the file is the name of the error's path, "-" when it names none)."""
    from .children import die_with_parent_as_told, error_line

    die_with_parent_as_told()
    directory, mode, seed, first_seq, first_id = argv[1], argv[2], int(argv[3]), int(argv[4]), int(argv[5])
    max_calls = int(argv[6]) if len(argv) > 6 else 20000
    store = argv[7] if len(argv) > 7 else "journal"
    try:
        run_workload(directory, mode, seed, first_seq, first_id, max_calls, store)
    except Exception as exc:
        sys.stdout.write(error_line(exc) + "\n")
        sys.stdout.flush()
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
