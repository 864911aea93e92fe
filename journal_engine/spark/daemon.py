"""pyspark's daemon of Python workers, with a worker's broken pipe kept out of the terminal.

When a task needs no more rows (a ``limit``, a ``take``, a job cancelled), the JVM closes its Python
worker's socket while the worker is still sending; pyspark's daemon then prints the worker's
``BrokenPipeError`` with its traceback to stderr (the worker's last flush raises, as
``spark.python.daemon.killWorkerOnFlushFailure`` asks) — five of them in one ``journal-engine analyze``
of a 1M-message broker. The JVM has already taken what it needed and the forked worker exits either way:
here it exits without the traceback. Everything else is pyspark's daemon as it is.

``journal_engine.spark.session()`` sets ``spark.python.daemon.module`` to this module; executors need
journal_engine installed to run it, as they do to read the source.
"""
from __future__ import annotations

import socket

from pyspark import daemon

_worker = daemon.worker


def _worker_quiet_on_a_closed_socket(sock: socket.socket, authenticated: bool) -> int:
    try:
        return _worker(sock, authenticated)
    except (BrokenPipeError, ConnectionResetError):
        return 1        # the JVM closed the socket: the forked worker ends, as pyspark's would, but silently


daemon.worker = _worker_quiet_on_a_closed_socket

if __name__ == "__main__":
    daemon.manager()
