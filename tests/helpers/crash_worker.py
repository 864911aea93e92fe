"""A child process for the crash tests: it writes a journal until it is killed.

Two commands:

``workload DIRECTORY SYNC_MODE SEED FIRST_SEQ FIRST_ID``
    The crash harness's journal workload (journal_engine.crashtest.journal_workload: its module
    text says what it prints).

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

import struct
import sys

# the workload, its bodies and its oracle are the crash harness's own (journal_engine.crashtest)
from journal_engine.crashtest.bodies import make_body, xid_of  # noqa: F401
from journal_engine.crashtest.journal_workload import FILE_SIZE, run_workload  # noqa: F401


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
