"""The Celery app of tests/integrations/test_celery_worker.py: broker_url on a `journal-engine serve-stomp`
server (JOURNAL_ENGINE_BROKER_URL; the transport's options, as JSON, in JOURNAL_ENGINE_TRANSPORT_OPTIONS),
its worker started with `celery -A celery_app worker` in a child process. Each task appends one line to
CELERY_RUNS_FILE when it runs: "<task> <key> <redelivered>", so that the test counts runs across worker
processes, including one that was SIGKILLed."""
from __future__ import annotations

import json
import os
import time

from celery import Celery
from celery.exceptions import Reject

import journal_engine.integrations.kombu  # noqa: F401  (registers the journal-engine:// scheme with kombu)

app = Celery("celery_app", broker=os.environ.get("JOURNAL_ENGINE_BROKER_URL", "journal-engine://127.0.0.1:61613"))
app.conf.update(
    task_ignore_result=True,                # no result backend: the runs file is the record
    worker_enable_remote_control=False,     # no pidbox queue per worker: the tests do not use it
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    # the transport's options (publish_window, ack_window), as JSON, for a test that sets them
    broker_transport_options=json.loads(os.environ.get("JOURNAL_ENGINE_TRANSPORT_OPTIONS", "{}")),
)


def record(task: str, key: str, request) -> None:
    """One line per run, appended with a single write (O_APPEND): whole even if the worker is killed next."""
    line = f"{task} {key} {bool(request.delivery_info.get('redelivered'))}\n".encode()
    fd = os.open(os.environ["CELERY_RUNS_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@app.task(bind=True)
def work(self, key: str) -> None:
    """Acknowledged when the worker takes it (Celery's default), before it runs."""
    record("work", key, self.request)


@app.task(bind=True, acks_late=True)
def hold(self, key: str) -> None:
    """Acknowledged after it ran (acks_late); the first delivery waits, to be SIGKILLed mid-task."""
    record("hold", key, self.request)
    if not self.request.delivery_info.get("redelivered"):
        time.sleep(120)


@app.task(bind=True, acks_late=True)
def always_fails(self, key: str) -> None:
    """Refused for good: the worker rejects it without requeue, and the server dead-letters it."""
    record("always_fails", key, self.request)
    raise Reject(f"{key} always fails", requeue=False)
