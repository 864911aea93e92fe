"""`journal-engine serve-stomp` under load, SIGKILLed in the middle and restarted on its directory and
port: ten STOMP connections (six producers sending with receipts, four consumers acknowledging with
receipts, so a backlog waits in the store when the kill comes) for eight seconds. Nothing receipted
is lost, nothing whose ACK was receipted comes again, and neither life of the server prints a
traceback. The driver is tests/helpers/stomp_load.py; the full size (50 connections, 60 s) is
bench/test_bench_stomp_load.py.

That the check can fail: SIGKILL keeps the page cache, so serve-stomp cannot be made to lose a
receipted message by the kill alone; the same load and kill on coilmq's own server with its memory
store (which receipts a message it holds only in memory) is reported lost.
"""
from __future__ import annotations

import pytest

pytest.importorskip("coilmq", reason="coilmq is not installed (pip install 'journal_engine[coilmq]')")

from stomp_load import KilledServer, run_load  # noqa: E402

CONNECTIONS = 10
CONSUMERS = 4
DURATION_S = 8.0


@pytest.mark.parametrize("backend", ["journal", "lmdb"])
def test_nothing_receipted_is_lost_when_the_server_is_sigkilled_under_load(tmp_path, backend):
    if backend == "lmdb":
        pytest.importorskip("lmdb", reason="the lmdb package is not installed")
    server = KilledServer.serve_stomp(tmp_path / "store", tmp_path, "--backend", backend)
    try:
        result = run_load(server.port, connections=CONNECTIONS, consumers=CONSUMERS, duration_s=DURATION_S,
                          kill=server.kill, kill_at_s=DURATION_S / 2)
    finally:
        status = server.stop()
    print(result.summary())
    assert not result.violations(), (result.summary(), result.violations())
    assert result.backlog_at_kill > 0, result.summary()          # the store alone held messages at the kill
    assert result.reconnects >= CONNECTIONS, result.summary()    # every client lived through the kill
    assert len(result.receipted) > result.backlog_at_kill, result.summary()  # sends went on after the restart
    assert not server.tracebacks(), server.tracebacks()
    assert status == 0                                           # SIGTERM: a clean stop of the second life


def test_the_check_reports_the_receipted_messages_a_server_loses_at_the_kill(tmp_path):
    server = KilledServer.coilmq("memory", tmp_path)
    try:
        result = run_load(server.port, connections=CONNECTIONS, consumers=CONSUMERS, duration_s=4.0,
                          kill=server.kill, kill_at_s=2.0, drain_timeout_s=2.0, redelivered_flag=False)
    finally:
        server.stop()
    print(result.summary())
    assert result.backlog_at_kill > 0, result.summary()
    assert result.lost and f"{len(result.lost)} receipted messages never received" in result.violations()[0]
