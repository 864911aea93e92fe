"""A live `serve-stomp` and its backup (`serve-stomp --backup`) on one directory, each on a port of its
own, for the failover test (tests/integrations/test_serve_stomp_failover.py) and the takeover benchmark
(bench/test_bench_takeover.py).

:meth:`FailoverPair.kill` SIGKILLs the live server, waits for the backup's listening line (it took the
lock, recovered and serves), then starts a new backup on the port the dead server freed and waits for
its line saying it waits: the two ports stay the clients' whole failover list, kill after kill.
"""
from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from locations import ROOT
from stomp_load import free_port
from stomp_server import START_TIMEOUT_S, LoggedChild, has_traceback

WAITING = "waiting for the directory lock of "
LISTENING = "listening on 127.0.0.1:"


class ServeStomp(LoggedChild):
    """`python -m journal_engine serve-stomp --data DATA --port PORT ...extra`, its stdout read line by line."""

    def __init__(self, data: Path, log: Path, port: int, *extra: str) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        super().__init__([sys.executable, "-m", "journal_engine", "serve-stomp", "--data", str(data), "--port", str(port),
                          "--host", "127.0.0.1", *extra], log, env=env, stdout=subprocess.PIPE)
        self.port = port
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in iter(self.process.stdout.readline, b""):
            self.lines.put(line.decode(errors="replace"))
        self.lines.put("")                      # end of output

    def line(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """The next line printed; AssertionError when none comes in time or the output ended."""
        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"serve-stomp printed nothing within {timeout_s} s; see {self.log_path}") from None
        assert line, f"serve-stomp ended (status {self.process.wait()}): {self.stderr()[-2000:]}"
        return line

    def listening(self, timeout_s: float = START_TIMEOUT_S) -> str:
        line = self.line(timeout_s)
        assert LISTENING + str(self.port) in line, (line, self.stderr()[-2000:])
        return line


class FailoverPair:
    """A live server on one free port and a waiting backup on another, over ``data``; logs in ``logs``."""

    def __init__(self, data: Path, logs: Path, *extra: str) -> None:
        self.data, self.logs, self.extra = data, logs, extra
        self.ports = (free_port(), free_port())
        self.lives: list[ServeStomp] = []
        self.live = self._start(self.ports[0], backup=False)
        self.live.listening()
        self.backup = self._start(self.ports[1], backup=True)
        self.waiting_line = self.backup.line()
        assert WAITING in self.waiting_line, self.waiting_line
        self.takeovers_s: list[float] = []      # SIGKILL to the backup's listening line

    def _start(self, port: int, *, backup: bool) -> ServeStomp:
        log = self.logs / f"server-{len(self.lives) + 1}.log"
        started = ServeStomp(self.data, log, port, *self.extra, *(["--backup"] if backup else []))
        self.lives.append(started)
        return started

    def kill(self) -> int:
        """SIGKILL the live server; once the backup serves, a new backup on the freed port. Returns the port
        that now serves."""
        killed_at = self.sigkill()
        self.backup.listening()
        self.takeovers_s.append(time.monotonic() - killed_at)
        return self.promote()

    def sigkill(self) -> float:
        """SIGKILL the live server (and reap it); returns the time.monotonic() of the signal."""
        killed_at = time.monotonic()
        self.live.kill()
        return killed_at

    def promote(self) -> int:
        """After a takeover: the backup is the live server, a new backup waits on the port the dead one
        freed. Returns the live port."""
        freed = self.live.port
        self.live, self.backup = self.backup, self._start(freed, backup=True)
        line = self.backup.line()
        assert WAITING in line, line
        return self.live.port

    def tracebacks(self) -> list[str]:
        return [life.stderr()[-3000:] for life in self.lives if has_traceback(life.stderr())]

    def stop(self) -> tuple[int, int]:
        """SIGTERM both, the backup first (stopping the live server first would hand the lock to the backup,
        and a SIGTERM during its recovery, before it serves, ends it as it ends any start then):
        (the live server's status, the waiting backup's status)."""
        backup = self.backup.stop()
        return self.live.stop(), backup
