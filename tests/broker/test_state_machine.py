"""A hypothesis state machine drives the Journal against an in-memory model.

Rules append, update, delete, run transactions (commit, rollback, prepare),
sync, compact and reopen (close, a new Journal, load). After every reopen the
loaded records — id, type, body and the updates in order — and the prepared
transactions must equal the model, and load must roll back exactly the
transactions that were neither decided nor prepared. Small 64 KiB files make
file switches and compactions frequent. ``JOURNAL_ENGINE_STATE_MACHINE_EXAMPLES`` sets the number of
examples (default 60).
"""
from __future__ import annotations

import os
import random
import shutil
import tempfile

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from journal_engine import Journal

OPTIONS = {"file_size": 64 * 1024, "sync": "none", "compact_min_files": 0, "min_files": 2}

record_ids = st.one_of(st.integers(0, 40), st.sampled_from([2 ** 32, 2 ** 63, 2 ** 64 - 1]))
tx_ids = st.integers(1, 6)
record_types = st.integers(0, 255)
# (seed, length): bodies are made from a seed, so examples stay small; some lengths fill half a file
bodies = st.tuples(st.integers(0, 2 ** 16), st.one_of(st.integers(0, 64), st.integers(0, 3000),
                                                       st.sampled_from([0, 8, 4096, 20_000, 32_000])))


def make_body(spec: tuple[int, int]) -> bytes:
    seed, length = spec
    return random.Random(seed).randbytes(length)


class JournalMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="journal-state-machine-")
        self.journal = Journal(self.directory, **OPTIONS)
        self.journal.load()
        self.live: dict[int, tuple[int, bytes, list]] = {}
        self.txs: dict[int, dict] = {}     # tx id -> {"ops": [(kind, id, type, body)], "xid": bytes | None}
        self.reopens = 0

    # ----- helpers -------------------------------------------------------------------------------------------
    def _pending_adds(self) -> set[int]:
        return {op[1] for tx in self.txs.values() for op in tx["ops"] if op[0] == "add"}

    def _free(self, record_id: int) -> bool:
        return record_id not in self.live and record_id not in self._pending_adds()

    @staticmethod
    def _pick(items, index: int):
        items = sorted(items)
        return items[index % len(items)]

    def _open_tx(self, tx_id: int) -> bool:
        tx = self.txs.get(tx_id)
        return tx is None or tx["xid"] is None

    # ----- plain records ----------------------------------------------------------------------------------------
    @rule(record_id=record_ids, record_type=record_types, body=bodies)
    def add(self, record_id, record_type, body):
        if not self._free(record_id):
            return
        data = make_body(body)
        self.journal.add(record_id, record_type, data)
        self.live[record_id] = (record_type, data, [])

    @precondition(lambda self: self.live)
    @rule(index=st.integers(0, 10 ** 6), record_type=record_types, body=bodies)
    def update(self, index, record_type, body):
        record_id = self._pick(self.live, index)
        data = make_body(body)
        self.journal.update(record_id, record_type, data)
        self.live[record_id][2].append((record_type, data))

    @precondition(lambda self: self.live)
    @rule(index=st.integers(0, 10 ** 6))
    def delete(self, index):
        record_id = self._pick(self.live, index)
        self.journal.delete(record_id)
        del self.live[record_id]

    # ----- transactions -----------------------------------------------------------------------------------------
    @rule(tx_id=tx_ids, record_id=record_ids, record_type=record_types, body=bodies)
    def add_tx(self, tx_id, record_id, record_type, body):
        if not self._open_tx(tx_id) or not self._free(record_id):
            return
        data = make_body(body)
        self.journal.add_tx(tx_id, record_id, record_type, data)
        self.txs.setdefault(tx_id, {"ops": [], "xid": None})["ops"].append(("add", record_id, record_type, data))

    def _tx_targets(self, tx_id: int) -> set[int]:
        own = {op[1] for op in self.txs.get(tx_id, {"ops": []})["ops"] if op[0] == "add"}
        return set(self.live) | own

    @rule(tx_id=tx_ids, index=st.integers(0, 10 ** 6), record_type=record_types, body=bodies)
    def update_tx(self, tx_id, index, record_type, body):
        targets = self._tx_targets(tx_id)
        if not self._open_tx(tx_id) or not targets:
            return
        record_id = self._pick(targets, index)
        data = make_body(body)
        self.journal.update_tx(tx_id, record_id, record_type, data)
        self.txs.setdefault(tx_id, {"ops": [], "xid": None})["ops"].append(("update", record_id, record_type, data))

    @rule(tx_id=tx_ids, index=st.integers(0, 10 ** 6))
    def delete_tx(self, tx_id, index):
        targets = self._tx_targets(tx_id)
        if not self._open_tx(tx_id) or not targets:
            return
        record_id = self._pick(targets, index)
        self.journal.delete_tx(tx_id, record_id)
        self.txs.setdefault(tx_id, {"ops": [], "xid": None})["ops"].append(("delete", record_id, 0, b""))

    @precondition(lambda self: any(tx["xid"] is None for tx in self.txs.values()))
    @rule(index=st.integers(0, 10 ** 6), xid=st.binary(max_size=40))
    def prepare(self, index, xid):
        tx_id = self._pick([t for t, tx in self.txs.items() if tx["xid"] is None], index)
        self.journal.prepare(tx_id, xid)
        self.txs[tx_id]["xid"] = xid

    @precondition(lambda self: self.txs)
    @rule(index=st.integers(0, 10 ** 6))
    def commit(self, index):
        tx_id = self._pick(self.txs, index)
        self.journal.commit(tx_id)
        for kind, record_id, record_type, data in self.txs.pop(tx_id)["ops"]:
            if kind == "add":
                self.live[record_id] = (record_type, data, [])
            elif kind == "update":
                if record_id in self.live:   # deleted outside the transaction meanwhile: nothing to update
                    self.live[record_id][2].append((record_type, data))
            else:
                self.live.pop(record_id, None)

    @precondition(lambda self: self.txs)
    @rule(index=st.integers(0, 10 ** 6))
    def rollback(self, index):
        tx_id = self._pick(self.txs, index)
        self.journal.rollback(tx_id)
        del self.txs[tx_id]

    # ----- durability, compaction, reopen -----------------------------------------------------------------------
    @rule()
    def sync(self):
        self.journal.sync()
        stats = self.journal.stats()
        assert stats["durable_bytes"] == stats["appended_bytes"]

    @rule()
    def compact(self):
        files_before = self.journal.stats()["data_files"]
        event("compaction over several files" if files_before > 1 else "compaction of the active file only")
        self.journal.compact()

    @rule()
    def reopen(self):
        self.journal.close()
        self.journal = Journal(self.directory, **OPTIONS)
        loaded = self.journal.load()
        self.reopens += 1
        event(f"reopen with {len(loaded.prepared)} prepared, {len(loaded.report.rolled_back)} rolled back")
        got = {rid: (rec.record_type, rec.body, list(rec.updates)) for rid, rec in loaded.records.items()}
        assert got == self.live
        open_txs = sorted(t for t, tx in self.txs.items() if tx["xid"] is None)
        assert sorted(loaded.report.rolled_back) == open_txs
        for tx_id in open_txs:
            del self.txs[tx_id]
        prepared = {t.tx_id: (t.xid, [(r.kind, r.record_id, r.record_type, r.body) for r in t.records])
                    for t in loaded.prepared}
        assert prepared == {t: (tx["xid"], tx["ops"]) for t, tx in self.txs.items()}
        assert loaded.report.corrupt == [] and not loaded.report.torn_tail_truncated

    @invariant()
    def live_count_matches(self):
        assert self.journal.stats()["live_records"] == len(self.live)
        assert self.journal.stats()["pending_transactions"] == len(self.txs)

    def teardown(self):
        try:
            self.journal.close()
            # the last state must load too
            journal = Journal(self.directory, **OPTIONS)
            try:
                loaded = journal.load()
                assert {rid: (r.record_type, r.body, list(r.updates)) for rid, r in loaded.records.items()} == self.live
            finally:
                journal.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


# examples of up to 40 steps (JOURNAL_ENGINE_STATE_MACHINE_EXAMPLES): each is checked against the model
EXAMPLES = int(os.environ.get("JOURNAL_ENGINE_STATE_MACHINE_EXAMPLES", "60"))
JournalMachine.TestCase.settings = settings(max_examples=EXAMPLES, stateful_step_count=40, deadline=None,
                                            suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.filter_too_much])
test_journal_matches_the_model = JournalMachine.TestCase
