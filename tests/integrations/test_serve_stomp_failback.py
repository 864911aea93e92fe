"""`serve-stomp --failback`: a primary restarted after its backup took over asks for the directory back
(docs/failover.md, "Failback"). Real processes, real SIGKILLs:

* the primary SIGKILLed, its backup takes over and is sent messages; the primary restarted with
  --failback asks, the backup hands back (its clients disconnected, its store closed cleanly) and waits
  again; the primary serves what the backup received; SIGKILLed again, the same backup takes over again;
* with nobody serving, --failback serves at once and leaves no request behind; a SIGTERM while it waits
  ends it with status 0, its request withdrawn; --failback with --backup is refused.
"""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from failover_pair import LISTENING, WAITING, FailoverPair, ServeStomp
from stomp_load import free_port
from stomp_server import RawClient, frame_bytes

from journal_engine.served.takeover import FAILBACK_REQUEST_FILE, FailbackRequest

ASKING = "to hand back the directory of "
HANDING = "back to pid "


def send_receipted(port: int, bodies: list[bytes]) -> None:
    client = RawClient(port)
    client.connect("1.2")
    for n, body in enumerate(bodies):
        client.send_raw(frame_bytes("SEND", {"destination": "/queue/back", "receipt": str(n)}, body))
        command, headers, _ = client.read_frame()
        assert (command, headers.get("receipt-id")) == ("RECEIPT", str(n)), (command, headers)
    client.close()


def receive_all(port: int, count: int) -> list[bytes]:
    client = RawClient(port)
    client.connect("1.2")
    client.send_raw(frame_bytes("SUBSCRIBE", {"destination": "/queue/back", "id": "0", "ack": "auto"}))
    bodies = []
    for _ in range(count):
        command, _, body = client.read_frame()
        assert command == "MESSAGE", command
        bodies.append(body)
    client.close()
    return bodies


def test_a_restarted_primary_gets_the_directory_back_and_the_backup_waits_again(tmp_path):
    pair = FailoverPair(tmp_path / "store", tmp_path)
    primary_port = pair.ports[0]
    try:
        pair.sigkill()
        pair.backup.listening()                         # the backup serves
        send_receipted(pair.backup.port, [b"sent to the backup %d" % n for n in range(5)])
        primary = ServeStomp(tmp_path / "store", tmp_path / "primary-2.log", primary_port, "--failback")
        pair.lives.append(primary)
        asking = primary.line()
        assert ASKING in asking and f"pid {pair.backup.process.pid}" in asking, asking
        handing = pair.backup.line()
        assert HANDING in handing and f"pid {primary.process.pid}" in handing and "(failback)" in handing, handing
        primary.listening()
        assert WAITING in pair.backup.line()            # the backup waits for the lock again, bound to nothing
        assert not (tmp_path / "store" / FAILBACK_REQUEST_FILE).exists()
        assert receive_all(primary_port, 5) == [b"sent to the backup %d" % n for n in range(5)]
        send_receipted(primary_port, [b"after the failback"])
        primary.kill()                                   # and again: the same backup takes over
        pair.backup.listening()
        assert receive_all(pair.backup.port, 1) == [b"after the failback"]
        assert not pair.tracebacks(), pair.tracebacks()
    finally:
        for life in pair.lives:
            life.stop()


def test_failback_with_nobody_serving_serves_at_once_and_a_sigterm_ends_its_wait(tmp_path):
    (tmp_path / "store").mkdir()
    alone = ServeStomp(tmp_path / "store", tmp_path / "alone.log", free_port(), "--failback")
    try:
        alone.listening()
        assert not (tmp_path / "store" / FAILBACK_REQUEST_FILE).exists()
        waiting = ServeStomp(tmp_path / "store", tmp_path / "waiting.log", free_port(), "--failback")
        assert f"asking pid {alone.process.pid}" in waiting.line()     # a live server that is no backup: it waits
        assert (tmp_path / "store" / FAILBACK_REQUEST_FILE).exists()
        assert waiting.stop() == 0
        assert not (tmp_path / "store" / FAILBACK_REQUEST_FILE).exists()
        send_receipted(alone.port, [b"the live server did not hand back"])
    finally:
        assert alone.stop() == 0


def test_failback_and_backup_together_are_refused(tmp_path):
    (tmp_path / "store").mkdir()
    both = ServeStomp(tmp_path / "store", tmp_path / "both.log", free_port(), "--failback", "--backup")
    assert both.process.wait(timeout=60) == 2
    assert "--failback" in both.stderr()
    with pytest.raises(AssertionError):
        both.line(1.0)
    assert LISTENING not in both.stderr()


def test_a_request_of_a_dead_process_of_this_machine_is_stale(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    request = FailbackRequest(tmp_path)
    (tmp_path / FAILBACK_REQUEST_FILE).write_text(f"{dead.stdout.strip()} {socket.gethostname()}\n")
    assert request.requester() is None and not (tmp_path / FAILBACK_REQUEST_FILE).exists()
    request.make()                                  # this process: alive, a request
    assert request.requester().startswith("pid ")
    (tmp_path / FAILBACK_REQUEST_FILE).write_text(f"{dead.stdout.strip()} another-host\n")
    assert request.requester() == f"pid {dead.stdout.strip()} on another-host"    # another machine's: kept
