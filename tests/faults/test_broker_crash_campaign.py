"""The crash harness's broker-level workload (journal_engine.crashtest.broker_workload): SIGKILL chains
of sends, deliveries, rollbacks with redelivery delays, acknowledgements and dead letters, strict mode
on and off, find no violation; and the check catches a broker whose strict mode does not persist the
delivery count before delivering."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest

from journal_engine.crashtest import Campaign, broker_workload
from journal_engine.crashtest.children import run_child as _run_child
from journal_engine.message_store.message_store import BINDINGS_DIRECTORY, MessageStore


def test_broker_kill_chains_keep_every_invariant(tmp_path):
    """Four chains: the journal and LMDB backends, each with one client on a manual clock and with
    several (consumer threads, transacted sessions, consumers closed with messages in hand) on the
    wall clock."""
    campaign = Campaign(tmp_path / "scratch", size="smoke", seed=8)
    campaign.scratch.mkdir(parents=True)
    for chain in range(4):
        campaign.broker_chain(chain, 4)
    assert campaign.report.violations == []
    found = campaign.report.broker
    assert found["kills"] == 16 and found["strict_kills"] == 8
    assert found["kills_on_journal"] == found["kills_on_lmdb"] == found["concurrent_kills"] == 8
    assert min(found["sends"], found["deliveries"], found["rollbacks"], found["acks"], found["dead_letters"],
               found["returned_by_a_close"]) > 0


_CLOSED_WITH_A_MESSAGE_IN_HAND = """
import os, signal, sys
from journal_engine.crashtest import broker_workload
broker = broker_workload.open_broker(sys.argv[1], "always", True, 1_000_000)
consumer = broker.create_consumer(broker_workload.QUEUE)
broker_workload.send_new(broker, 1)
message = consumer.receive(0)
assert (message.message_id, message.delivery_count) == (1, 1)
consumer.close()            # the message goes back uncounted: its lowered count is written
broker.sync()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_message_a_closed_consumer_gave_back_sets_no_strict_floor(tmp_path):
    """Strict mode writes a delivery's count before it; a consumer closed with the message in hand
    gives it back uncounted and the broker writes the lowered count, so recovery finds it lower than
    the delivery showed. The oracle's ``U`` line says so; without it the check would call the close
    a strict-mode loss (what the --ci campaign of seed 15 reported on LMDB before the line was read)."""
    directory = str(tmp_path / "broker")
    child = subprocess.run([sys.executable, "-c", _CLOSED_WITH_A_MESSAGE_IN_HAND, directory], capture_output=True,
                           timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    recovered = broker_workload.recovered_state(directory, "always", 1_000_000)
    assert recovered["queue"] == {1: (0, broker_workload.body_of(1))}
    lines = ["R", "O 1 send 1", "D 1 1", "U 1 1", "A 1"]
    empty = {"queue": {}, "dead": {}}
    assert broker_workload.check_broker(empty, lines, recovered, strict=True, context="closed") == []
    without_the_close = [line for line in lines if not line.startswith("U ")]
    assert [v for v in broker_workload.check_broker(empty, without_the_close, recovered, strict=True, context="x")
            if "strict mode" in v]


def test_a_full_disk_under_the_broker_on_either_backend_stops_at_store_full_error(tmp_path):
    campaign = Campaign(tmp_path / "scratch", size="smoke", seed=9)
    campaign.plan = dict(campaign.plan, full_disks=3)
    campaign.scratch.mkdir(parents=True)
    campaign.full_disk()
    if "full-disk" in campaign.report.skipped:       # not root, or no mount: the mode says why
        assert "tmpfs" in campaign.report.skipped["full-disk"]
        return
    assert campaign.report.violations == []
    assert campaign.report.full_disk["store_full_on"] == {"journal": 1, "broker on journal": 1, "broker on lmdb": 1}


@pytest.mark.parametrize("flavour", [[], ["journal", "concurrent"]], ids=["one client", "concurrent clients"])
def test_the_check_catches_deliveries_whose_count_was_not_persisted_first(tmp_path, flavour):
    """A run with strict mode off, checked as if it were on: a message delivered before the kill comes
    back with a lower count (what a strict mode that forgot its write would do); with one client on a
    manual clock, and with the concurrent flavour's threads and sessions on the wall clock."""
    caught = []
    for seed in range(20):      # until one run shows it: a loaded machine gets less done before the kill
        directory = str(tmp_path / f"broker-{seed}")
        lines, returncode, stderr = _run_child(["journal_engine.crashtest.broker_workload", directory, "group",
                                                "default", str(seed), "1000000"] + flavour,
                                               kill_after=min(0.15 * (1 + seed // 3), 1.0))
        assert returncode == -9, stderr
        clock_ms = max([1_000_000] + [int(line.split()[1]) for line in lines if line.startswith("T ")])
        recovered = broker_workload.recovered_state(directory, "group", clock_ms)
        caught += [v for v in broker_workload.check_broker({"queue": {}, "dead": {}}, lines, recovered, strict=True,
                                                           context=f"seed {seed}") if "strict mode" in v]
        if caught:
            break
    assert caught, "the check did not notice a delivery whose count was not persisted"


# A workload step in sync mode "none" whose messages reached the disk while its queues' bindings did not
# (nightly seed 24, broker chain 61: step 0 in sync "none" killed 1.3 ms after its recovery, between
# the message journal's sync and the bindings journal's, which MessageStore.sync() then took in that
# order). store_queue now writes a binding out at once and sync() takes the bindings first, so a killed
# process no longer leaves that state; a power cut in sync mode "none" still can (nothing was synced):
# the child's kill followed by the loss of the bindings' unsynced writes.
_KILLED_BETWEEN_THE_SYNCS = """
import os, signal, sys
from journal_engine.crashtest import broker_workload
broker = broker_workload.open_broker(sys.argv[1], "none", False, 1_000_000)
for _ in range(4):
    broker_workload.send_new(broker, broker.stats()["next_message_id"])
broker.store._message_records.sync()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_messages_of_a_queue_binding_lost_to_a_kill_are_not_adopted_by_the_next_queue(tmp_path):
    """The queue created at the next start must not take the lost queue's id: with it, the next load
    hands that queue the orphaned references, and the following recovery shows messages the oracle
    never saw sent (the nightly's "broker chain 61, step 1: 4 recovered messages never sent")."""
    directory = str(tmp_path / "broker-61")
    child = subprocess.run([sys.executable, "-c", _KILLED_BETWEEN_THE_SYNCS, directory], capture_output=True,
                           timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    shutil.rmtree(os.path.join(directory, BINDINGS_DIRECTORY))      # the power cut: the bindings never synced
    lines = ["R"] + [f"O {n} send {n}" for n in range(1, 5)]      # none synced: losing them is allowed
    step0 = broker_workload.recovered_state(directory, "none", 1_000_000)
    assert (step0["queue"], step0["dead"], step0["dead_copies"]) == ({}, {}, {})
    assert broker_workload.check_broker({"queue": {}, "dead": {}}, lines, step0, strict=False, context="step 0") == []
    broker_workload.open_broker(directory, "always", True, 1_000_000).close()     # step 1: a start, nothing sent
    step1 = broker_workload.recovered_state(directory, "always", 1_000_000)
    assert broker_workload.check_broker(step0, ["R"], step1, strict=True, context="step 1") == []
    assert (step1["queue"], step1["dead"], step1["dead_copies"]) == ({}, {}, {})


_QUEUE_STORED_THEN_KILLED = """
import os, signal, sys
from journal_engine.message_store.message_store import MessageStore
store = MessageStore(sys.argv[1], backend=sys.argv[2], sync="none")
store.load()
store.store_queue(1, "orders", "orders")
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("backend", ["journal", "lmdb"])
def test_a_queue_stored_in_sync_mode_none_survives_a_killed_process(tmp_path, backend):
    """store_queue writes the binding out at once even when nothing waits for the disk: the message
    journal writes out on its own schedule (a full buffer, a full file, which is synced), so a binding
    left in the process's buffer could be lost under messages that name its queue."""
    directory = str(tmp_path / "store")
    child = subprocess.run([sys.executable, "-c", _QUEUE_STORED_THEN_KILLED, directory, backend],
                           capture_output=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    with MessageStore(directory, backend=backend) as store:
        assert [queue.name for queue in store.load().queues.values()] == ["orders"]


@pytest.mark.same_on_both     # the harness's own check
def test_the_check_catches_a_duplicate_id_the_broker_lost(tmp_path):
    """A message back from recovery without its id in the cache (a resend would route it twice), and a
    synced send whose id is gone: what a broker writing the id apart from its message could leave."""
    directory = str(tmp_path / "broker")
    broker = broker_workload.open_broker(directory, "always", False, 1_000_000)
    first, second = (broker_workload.send_new(broker, broker.stats()["next_message_id"]) for _ in range(2))
    broker_workload.resend(broker, first)
    broker.close()
    recovered = broker_workload.recovered_state(directory, "always", 1_000_000)
    lines = ["R", f"O 1 send {first}", f"O 2 send {second}", "A 2"]
    assert broker_workload.check_broker({"queue": {}, "dead": {}}, lines, recovered, strict=False, context="ok") == []
    recovered["ids"].discard(broker_workload.duplicate_id_of(first))
    assert broker_workload.check_broker({"queue": {}, "dead": {}}, lines, recovered, strict=False, context="lost") == [
        f"lost: message {first} came back without its duplicate id m-{first} in the cache: a resend would route "
        "it twice", f"lost: the duplicate id of message {first}, sent and synced, is lost"]
