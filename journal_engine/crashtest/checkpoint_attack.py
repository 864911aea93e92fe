"""The checkpoint attacked (crash-test mode ``checkpoint``): forged, cut, extended and flipped
checkpoints, and checkpoints cut by another holder of their inode while a load reads them or its
records are in use. Each attack is made on a copy of one cleanly closed journal, and each must keep:

  * the process lives: no SIGBUS or SIGSEGV, whatever the checkpoint holds or another process does to it
    (attacks run in a child process, so a signal death is counted, not the campaign's end);
  * ``load()`` returns what a full decode of the files returns (records, bodies, updates, prepared
    transactions, report), and raises nothing but a JournalError;
  * a checkpoint that did not check never outlives the load: a load that fails never names the forged
    bytes again, and the clean close after a load leaves a checkpoint the next load takes whole.

A forged field is written with every checksum recomputed, as a forger would (a plain flip is caught
by the CRC32Cs, and is attacked too): every field of an entry and of a row, at the boundaries where
C arithmetic breaks (2**31, 2**32, 2**63, 2**64 - 1 and their neighbours), in the first, a middle and
the last row: every row is checked against the frame header where it lies, so each must cost a decode.
What no attack here makes -- a data file forged together with its checkpoint -- is the residual risk
docs/internals/format.md, "What the checkpoint assumes", writes down.

Run as ``python -m journal_engine.crashtest.checkpoint_attack PRISTINE SCRATCH SEED FIRST COUNT``:
a child that prints ``A n`` before attack n, then ``R n outcome`` or ``V n what broke``.
"""
from __future__ import annotations

import hashlib
import os
import random
import shutil
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable

from ..errors import FileChangedError, JournalError
from ..storage.journal import checkpoint as checkpoints
from ..storage.journal.format import CHECKPOINT_FILE
from ..storage.journal.journal import Journal
from ..record_format import RecordKind

FILE_SIZE = 64 * 1024          # small files: several of them, each entry and image small
RECORDS = 600                  # the pristine journal's adds (with updates, deletes, groups, transactions)
BOUNDARIES = (0, 1, 7, 8, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 8, 2**63 - 1, 2**63, 2**64 - 8, 2**64 - 1)
BYTE_BOUNDARIES = (1, 3, 4, 8, 9, 127, 128, 255)
# the entry's fields (checkpoint._ENTRY) and their widths in bytes
ENTRY_FIELDS = (("file id", 8), ("sequence", 8), ("file size", 8), ("data start", 8), ("rows", 8),
                ("groups skipped", 8), ("end offset", 8), ("image at", 8), ("end check", 4), ("file crc", 4),
                ("image crc", 4))
# a row's columns in an image of n rows: (name, byte offset of row 0 as a function of n, width)
ROW_COLUMNS = (("offset", lambda n: 0, 8), ("size", lambda n: 8 * n, 8), ("body offset", lambda n: 16 * n + 8, 8),
               ("record id", lambda n: 24 * n + 8, 8), ("tx id", lambda n: 32 * n + 8, 8),
               ("check", lambda n: 40 * n + 8, 1), ("kind", lambda n: 41 * n + 8, 1),
               ("record type", lambda n: 42 * n + 8, 1))
HEADER_COUNT_AT = 20            # the entry count's offset in the header (checkpoint._HEADER: 8s, I, I, I)
CHILD_TIMEOUT_S = 600


@dataclass(frozen=True)
class Attack:
    """One attack: what it is called, the checkpoint's bytes it leaves (None: as it was), and what
    another holder of the checkpoint does during the load (``holder``): "", "cut after the load",
    "cut during the load", or "load refused" (a data file made unreadable: the load must fail)."""
    name: str
    content: bytes | None
    holder: str = ""
    cut_to: int = 0


def write_pristine(directory: str, seed: int, records: int = RECORDS) -> None:
    """A journal of ``records`` adds, with updates, deletes, record groups, committed transactions (each
    adding a record and updating another), a prepared one (adding and deleting) and an incomplete one,
    over several files, closed cleanly (so it holds a checkpoint). tests/core/test_checkpoint.py writes
    its journals with it too."""
    rng = random.Random(seed)
    live: list[int] = []
    with Journal(directory, file_size=FILE_SIZE, sync="none") as journal:
        journal.load()
        for record_id in range(1, records + 1):
            journal.add(record_id, rng.randrange(1, 9), rng.randbytes(rng.randrange(0, 300)))
            live.append(record_id)
            if rng.random() < 0.3:
                journal.update(rng.choice(live), rng.randrange(1, 9), rng.randbytes(rng.randrange(0, 60)))
            if rng.random() < 0.2 and len(live) > 2:
                journal.delete(live.pop(rng.randrange(len(live))))
            if record_id % 150 == 0:
                base = 10_000 + record_id
                journal.append_group([(RecordKind.ADD, base, 3, b"g1"), (RecordKind.ADD, base + 1, 3, b"g2")])
                journal.add_tx(record_id, 20_000 + record_id, 4, b"in a transaction")
                journal.update_tx(record_id, rng.choice(live), 5, b"tx update")
                journal.commit(record_id)
        journal.add_tx(77, 30_000, 6, b"prepared")
        journal.delete_tx(77, live[0])
        journal.prepare(77, b"an xid")
        journal.add_tx(78, 30_001, 6, b"never committed")


def digest(result) -> str:
    """What a load returned, as one hash: every record (id, type, body, updates) in the order the
    records give them, the prepared transactions, and the report's findings."""
    hasher = hashlib.sha256()
    for record in result.records.values():
        hasher.update(repr((record.record_id, record.record_type, bytes(record.body),
                            [(user_type, bytes(body)) for user_type, body in record.updates])).encode())
    for tx in result.prepared:
        hasher.update(repr((tx.tx_id, bytes(tx.xid),
                            [(op.kind, op.record_id, op.record_type, bytes(op.body)) for op in tx.records])).encode())
    report = result.report
    hasher.update(repr((report.torn_tail, sorted(report.corrupt), sorted(report.anomalies), report.files_read,
                        report.records_read,
                        sorted(report.incomplete_transactions) or sorted(report.rolled_back))).encode())
    return hasher.hexdigest()


def decoded(directory: str) -> str:
    """The digest of a full decode (a read-only load never uses the checkpoint)."""
    with Journal(directory, file_size=FILE_SIZE, read_only=True) as journal:
        return digest(journal.load())


def _recomputed(data: bytearray, images: bool) -> bytes:
    """`data` with its checksums made to match again, as a forger would: each image's (``images``),
    the entry table's and the header's."""
    head, entry = checkpoints._HEADER, checkpoints._ENTRY
    count = head.unpack_from(data, 0)[3]
    table_end = head.size + count * entry.size
    if table_end > len(data):
        return bytes(data)
    if images:
        for index in range(count):
            at = head.size + index * entry.size
            fields = list(entry.unpack_from(data, at))
            rows, image_at = fields[4], fields[7]
            size = checkpoints.image_size(rows) if rows < 2**40 else 0
            if size and image_at + size <= len(data):
                fields[10] = checkpoints.crc32c(bytes(data[image_at:image_at + size]))
                entry.pack_into(data, at, *fields)
    fields = list(head.unpack_from(data, 0))
    fields[5] = checkpoints.crc32c(bytes(data[head.size:table_end]))
    fields[6] = 0
    head.pack_into(data, 0, *fields)
    struct.pack_into("=I", data, head.size - 4, checkpoints.crc32c(bytes(data[:head.size - 4])))
    return bytes(data)


def _entries(pristine: bytes) -> list[tuple]:
    head, entry = checkpoints._HEADER, checkpoints._ENTRY
    count = head.unpack_from(pristine, 0)[3]
    return [entry.unpack_from(pristine, head.size + index * entry.size) for index in range(count)]


def _pack_field(data: bytearray, at: int, width: int, value: int) -> None:
    data[at:at + width] = (value % (1 << (8 * width))).to_bytes(width, sys.byteorder)


def systematic(pristine: bytes) -> list[Callable[[], Attack]]:
    """Every forged field at every boundary: each entry field of the first and the last entry, each
    row column of the first, a middle and the last row of the first file with rows, the header's count."""
    makers: list[Callable[[], Attack]] = []
    entries = _entries(pristine)
    head, entry_struct = checkpoints._HEADER, checkpoints._ENTRY
    for index in sorted({0, len(entries) - 1}):
        at = head.size + index * entry_struct.size
        offset = 0
        for name, width in ENTRY_FIELDS:
            for value in BOUNDARIES if width == 8 else [v for v in BOUNDARIES if v < 2**32]:
                def make(at=at + offset, width=width, value=value, name=name, index=index) -> Attack:
                    data = bytearray(pristine)
                    _pack_field(data, at, width, value)
                    # a forged image crc is the forger's own word: the others are recomputed around it
                    return Attack(f"entry {index} {name} = {value}", _recomputed(data, images=name != "image crc"))
                makers.append(make)
            offset += width
    with_rows = [(index, fields) for index, fields in enumerate(entries) if fields[4] >= 3]
    if with_rows:
        index, fields = with_rows[0]
        rows, image_at = fields[4], fields[7]
        for row in (0, rows // 2, rows - 1):
            for name, first, width in ROW_COLUMNS:
                values = BOUNDARIES if width == 8 else BYTE_BOUNDARIES
                for value in values:
                    column_row = row + 1 if name == "body offset" else row
                    def make(at=image_at + first(rows) + width * column_row, width=width, value=value,
                             name=name, row=row) -> Attack:
                        data = bytearray(pristine)
                        _pack_field(data, at, width, value)
                        return Attack(f"file {index} row {row} {name} = {value}", _recomputed(data, images=True))
                    makers.append(make)
    for value in (0, 1, len(entries) + 1, 2**31, 2**32 - 1):
        def make(value=value) -> Attack:
            data = bytearray(pristine)
            struct.pack_into("=I", data, HEADER_COUNT_AT, value)
            return Attack(f"header count = {value}", _recomputed(data, images=False))
        makers.append(make)
    return makers


def random_attack(pristine: bytes, rng: random.Random) -> Attack:
    """A cut, an extension, a flipped bit, a forged byte anywhere, or another holder's cut."""
    size = len(pristine)
    entries = _entries(pristine)
    structural = sorted({0, 1, checkpoints._HEADER.size - 1, checkpoints._HEADER.size,
                         checkpoints._HEADER.size + len(entries) * checkpoints._ENTRY.size, size - 1}
                        | {fields[7] + delta for fields in entries for delta in (-1, 0, 1, 8)}
                        | {fields[7] + checkpoints.image_size(fields[4]) + delta for fields in entries
                           for delta in (-1, 0)})
    kind = rng.choice(("cut", "extend", "flip", "forged byte", "cut after the load", "cut during the load",
                       "load refused"))
    if kind == "cut":
        cut = rng.choice(structural) if rng.random() < 0.5 else rng.randrange(size)
        cut = min(max(cut, 0), size - 1)
        return Attack(f"cut to {cut} of {size} bytes", pristine[:cut])
    if kind == "extend":
        extra = rng.choice((1, 8, 4096, 65536))
        tail = bytes(extra) if rng.random() < 0.5 else rng.randbytes(extra)
        return Attack(f"extended by {extra} bytes", pristine + tail)
    if kind == "flip":
        at, bit = rng.randrange(size), rng.randrange(8)
        data = bytearray(pristine)
        data[at] ^= 1 << bit
        return Attack(f"bit {bit} flipped at {at}", bytes(data))
    if kind == "forged byte":
        at = rng.randrange(size)
        data = bytearray(pristine)
        data[at] = rng.randrange(256)
        return Attack(f"byte at {at} forged, checksums recomputed", _recomputed(data, images=True))
    if kind == "load refused":
        data = bytearray(pristine)
        fields = entries[0]
        _pack_field(data, fields[7], 8, rng.choice((2**63 - 1, 2**40, 2**64 - 1)))
        return Attack("first row forged, then a load that refuses the directory", _recomputed(data, images=True),
                      holder=kind)
    cut = rng.choice(structural + [0, 0])
    return Attack(f"{kind} by another holder, to {cut} bytes", None, holder=kind, cut_to=min(max(cut, 0), size))


def attack_at(pristine: bytes, seed: int, n: int, makers: list) -> Attack:
    """Attack number n of a campaign: the systematic ones in turn, every third, the rest random."""
    if n % 3 == 0 and n // 3 < len(makers):
        return makers[n // 3]()
    return random_attack(pristine, random.Random(seed * 1_000_003 + n))


def run_attack(pristine_dir: str, work: str, attack: Attack, expected: str) -> tuple[str, str]:
    """(outcome, what broke or '') of one attack on a copy of the pristine journal."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(pristine_dir, work)
    path = os.path.join(work, CHECKPOINT_FILE)
    if attack.content is not None:
        with open(path, "wb") as handle:
            handle.write(attack.content)
    if attack.holder == "load refused":
        return _refused_load(work, path, attack)
    holder = os.path.join(work, "held.jck")
    cutter = None
    if attack.holder:
        os.link(path, holder)
    if attack.holder == "cut during the load":
        cutter = threading.Timer(random.uniform(0, 0.002), os.truncate, (holder, attack.cut_to))
        cutter.start()
    noticed = False
    try:
        with Journal(work, file_size=FILE_SIZE) as journal:
            result = journal.load()
            if attack.holder == "cut after the load":
                os.truncate(holder, attack.cut_to)
            found = digest(result)
            checkpointed = result.report.checkpointed_files
    except FileChangedError as exc:
        if not attack.holder or exc.path != path:
            return "refused", f"the load raised {type(exc).__name__}: {exc}"
        noticed = True          # the records read a checkpoint another holder cut: an error naming it
    except JournalError as exc:
        return "refused", f"the load raised {type(exc).__name__}: {exc}"
    except Exception as exc:        # the finding: anything else leaving load()
        return "escaped", f"{type(exc).__name__} escaped the load: {exc}"
    finally:
        if cutter is not None:
            cutter.join()
    if not noticed and found != expected:
        return "wrong", "the load returned other records, bodies or findings than a full decode"
    if attack.content is not None and os.path.exists(path):
        with open(path, "rb") as handle:
            if handle.read() == attack.content:
                return "outlived", "the attacked checkpoint outlived the load (the close did not replace it)"
    after = _next_load(work)
    if after:
        return "next load", after
    if noticed:
        return "cut noticed", ""
    return ("decoded" if checkpointed == 0 else "partly checkpointed" if attack.content is not None
            else "checkpointed"), ""


def _next_load(work: str) -> str:
    """What is wrong with the load after the attacked one's clean close, or ''."""
    expected = decoded(work)
    with Journal(work, file_size=FILE_SIZE) as journal:
        result = journal.load()
        if digest(result) != expected:
            return "the load after the attacked one's close returned other records than a full decode"
        if result.report.checkpointed_files == 0:
            return "the attacked load's clean close left no checkpoint the next load could use"
    return ""


def _refused_load(work: str, path: str, attack: Attack) -> tuple[str, str]:
    """A load that must fail (a data file's header made unreadable) after taking a forged checkpoint:
    the forged bytes must not be named again."""
    first = sorted(name for name in os.listdir(work) if name.endswith(".jej"))[0]
    with open(os.path.join(work, first), "r+b") as handle:
        handle.write(b"\0\0\0\0")
    try:
        with Journal(work, file_size=FILE_SIZE) as journal:
            journal.load()
    except JournalError:
        pass
    except Exception as exc:
        return "escaped", f"{type(exc).__name__} escaped the refused load: {exc}"
    else:
        return "wrong", "a load of a directory whose data file has no header did not refuse it"
    if os.path.exists(path):
        with open(path, "rb") as handle:
            if handle.read() == attack.content:
                return "outlived", "the refused load put the forged checkpoint back"
    return "not put back", ""


def child(pristine_dir: str, scratch: str, seed: int, first: int, count: int) -> None:
    """Attacks first .. first + count - 1, each announced before it runs and judged after."""
    import logging
    import warnings
    logging.getLogger("journal_engine").setLevel(logging.CRITICAL)
    warnings.simplefilter("ignore")
    expected = decoded(pristine_dir)
    with open(os.path.join(pristine_dir, CHECKPOINT_FILE), "rb") as handle:
        pristine = handle.read()
    makers = systematic(pristine)
    work = os.path.join(scratch, f"attack-{os.getpid()}")
    for n in range(first, first + count):
        attack = attack_at(pristine, seed, n, makers)
        print(f"A {n} {attack.name}", flush=True)
        outcome, broke = run_attack(pristine_dir, work, attack, expected)
        print(f"V {n} {outcome}: {broke}" if broke else f"R {n} {outcome}", flush=True)
    shutil.rmtree(work, ignore_errors=True)


def attack(scratch: str, seed: int, first: int, count: int, progress=lambda done: None) -> tuple[dict, list[str]]:
    """Run attacks first .. first + count - 1 on a pristine journal made in `scratch`, in child
    processes (a new one after a child dies); (outcome -> how many, violations)."""
    pristine_dir = os.path.join(scratch, f"pristine-{seed}")
    shutil.rmtree(pristine_dir, ignore_errors=True)
    write_pristine(pristine_dir, seed)
    outcomes: dict[str, int] = {}
    violations: list[str] = []
    n = first
    while n < first + count:
        command = [sys.executable, "-m", __name__, pristine_dir, scratch, str(seed), str(n), str(first + count - n)]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        current, name = None, ""
        started = time.monotonic()
        for line in process.stdout:
            kind, number, rest = (line.rstrip("\n").split(" ", 2) + ["", ""])[:3]
            if kind == "A":
                current, name = int(number), rest
            elif kind in ("R", "V"):
                outcome = rest.split(":", 1)[0]
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                if kind == "V":
                    violations.append(f"checkpoint attack {number} ({name}): {rest.split(': ', 1)[-1]} "
                                      f"(replay: seed {seed})")
                n = int(number) + 1
                current = None
                progress(n - first)
            if time.monotonic() - started > CHILD_TIMEOUT_S:
                process.kill()
        error = process.stderr.read()
        returncode = process.wait()
        if current is not None:         # the child died inside an attack: the finding
            how = f"died of signal {-returncode}" if returncode < 0 else f"exited {returncode}"
            violations.append(f"checkpoint attack {current} ({name}): the loading process {how} "
                              f"{error.strip().splitlines()[-1:] if error.strip() else ''} (replay: seed {seed})")
            outcomes["process died"] = outcomes.get("process died", 0) + 1
            n = current + 1
            progress(n - first)
        elif returncode != 0:
            violations.append(f"checkpoint attacks from {n}: the attacking process exited {returncode}: "
                              f"{error.strip().splitlines()[-1:]}")
            break
    shutil.rmtree(pristine_dir, ignore_errors=True)
    return outcomes, violations


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
