"""coilmq's own queue-store tests, run on journal_engine's coilmq store.

coilmq 1.1.0's source distribution ships ``tests/store/__init__.py`` with ``BaseQueueTests``, the
tests every coilmq store runs (each takes a ``store`` fixture). We do not copy that file: the session
fetches the sdist with pip, unpacks it into a temporary directory and imports the module from there.
When the sdist cannot be fetched (no network, no pip) these tests skip, naming what is missing.
Our own tests of what coilmq's suite does not cover follow (durability, failed deliveries, dead
letters, coilmq's configuration factory), on both backends.
"""
from __future__ import annotations

import importlib.util
import uuid

import pytest
from sdist_suites import import_from_sdist

coilmq = pytest.importorskip("coilmq", reason="coilmq is not installed (pip install 'journal_engine[coilmq]')")
from coilmq.util.frames import Frame  # noqa: E402

from journal_engine.integrations.coilmq import JournalQueueStore, make_store  # noqa: E402

COILMQ_SDIST = "coilmq==1.1.0"
# BaseQueueTests of coilmq 1.1.0; test_the_fetched_suite_is_the_one_run checks the list is complete
BASE_QUEUE_TESTS = ["test_enqueue", "test_dequeue", "test_dequeue_specific", "test_dequeue_order",
                    "test_dequeue_empty"]
BACKENDS = ["journal", pytest.param("lmdb", marks=pytest.mark.skipif(
    importlib.util.find_spec("lmdb") is None, reason="the lmdb package is not installed"))]


@pytest.fixture(scope="session")
def base_queue_tests(tmp_path_factory):
    """coilmq's BaseQueueTests class, imported from its sdist fetched once per session."""
    return import_from_sdist(tmp_path_factory.mktemp("coilmq-sdist"), COILMQ_SDIST, "tests/store/__init__.py",
                             "coilmq's test suite").BaseQueueTests


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    queue_store = JournalQueueStore(tmp_path / "store", backend=request.param)
    yield queue_store
    queue_store.close()


def test_the_fetched_suite_is_the_one_run(base_queue_tests):
    fetched = sorted(name for name in dir(base_queue_tests) if name.startswith("test_"))
    assert fetched == sorted(BASE_QUEUE_TESTS)


@pytest.mark.parametrize("name", BASE_QUEUE_TESTS)
def test_coilmq_base_queue_tests(base_queue_tests, store, name):
    getattr(base_queue_tests(), name)(store)


# ------------------------------------------------------------------ beyond coilmq's suite
def message(body="payload", **headers) -> Frame:
    return Frame("MESSAGE", headers={"message-id": str(uuid.uuid4()), **headers}, body=body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_frames_survive_reopening_in_order_with_bodies_and_headers_as_sent(tmp_path, backend):
    sent = [message(f"text {i}", seq=str(i)) for i in range(5)] + [message(b"\x00\xffbinary", kind="bytes")]
    with_store = JournalQueueStore(tmp_path, backend=backend)
    for frame in sent:
        with_store.enqueue("/queue/a", frame)
    with_store.enqueue("/queue/b", message("other"))
    assert with_store.dequeue("/queue/a") == sent[0]
    with_store.close()

    reopened = JournalQueueStore(tmp_path, backend=backend)
    try:
        assert {"/queue/a", "/queue/b"} <= reopened.destinations()
        assert reopened.size("/queue/a") == 5
        received = list(reopened.frames("/queue/a"))
        assert received == sent[1:]
        assert isinstance(received[-1].body, bytes) and isinstance(received[0].body, str)
    finally:
        reopened.close()


def test_a_requeued_delivery_comes_back_redelivered_and_dead_letters_past_the_limit(tmp_path):
    store = JournalQueueStore(tmp_path, max_delivery_attempts=2, dead_letter_queue="/queue/dead")
    try:
        sent = message("poison")
        store.enqueue("/queue/a", sent)
        first = store.deliver("/queue/a")
        assert first == sent and "redelivered" not in first.headers
        store.requeue("/queue/a", first)                 # a failed delivery
        second = store.deliver("/queue/a")
        assert second.headers["redelivered"] == "true" and second.body == "poison"
        store.requeue("/queue/a", second)                # the second failure: the limit
        assert store.size("/queue/a") == 0 and store.deliver("/queue/a") is None
        dead = store.dequeue("/queue/dead")
        assert dead.body == "poison" and dead.headers["message-id"] == sent.headers["message-id"]
        assert dead.headers["original-destination"] == "/queue/a"
        assert dead.headers["destination"] == "/queue/dead"
    finally:
        store.close()


def test_a_delivery_not_acknowledged_before_closing_comes_back_redelivered(tmp_path):
    store = JournalQueueStore(tmp_path)
    store.enqueue("/queue/a", message("held"))
    assert store.deliver("/queue/a").body == "held"
    assert store.size("/queue/a") == 0
    store.close()
    reopened = JournalQueueStore(tmp_path)
    try:
        again = reopened.deliver("/queue/a")
        assert again.body == "held" and again.headers["redelivered"] == "true"
        assert reopened.acknowledge(again) is True and reopened.acknowledge(again) is False
    finally:
        reopened.close()
    last = JournalQueueStore(tmp_path)
    try:
        assert last.size("/queue/a") == 0
    finally:
        last.close()


def test_requeue_of_a_frame_it_did_not_hand_out_stores_it_anew(tmp_path):
    store = JournalQueueStore(tmp_path)
    try:
        frame = store.dequeue("/queue/a")
        assert frame is None
        outside = message("from coilmq's own manager")
        store.requeue("/queue/a", outside)
        assert store.dequeue("/queue/a") == outside
    finally:
        store.close()


def test_the_receipt_header_of_a_send_is_not_kept(tmp_path):
    store = JournalQueueStore(tmp_path)
    try:
        store.enqueue("/queue/a", message("x", receipt="r-1", custom="kept"))
        frame = store.dequeue("/queue/a")
        assert "receipt" not in frame.headers and frame.headers["custom"] == "kept"
    finally:
        store.close()


def test_enqueue_without_message_id_is_refused(tmp_path):
    store = JournalQueueStore(tmp_path)
    try:
        with pytest.raises(ValueError):
            store.enqueue("/queue/a", Frame("MESSAGE", headers={}, body="x"))
    finally:
        store.close()


def test_coilmq_configuration_names_our_factory(tmp_path, monkeypatch):
    from coilmq.config import config
    from coilmq.exception import ConfigError as CoilConfigError
    from coilmq.start import server_from_config

    monkeypatch.setattr(config, "_sections", {key: dict(value) for key, value in config._sections.items()})
    config.set("coilmq", "qstore.factory", "journal_engine.integrations.coilmq:make_store")
    with pytest.raises(CoilConfigError):
        make_store()
    config.set("coilmq", "qstore.journal_engine.data_dir", str(tmp_path))
    config.set("coilmq", "qstore.journal_engine.max_delivery_attempts", "4")
    config.set("coilmq", "qstore.journal_engine.dead_letter_queue", "")
    config.set("coilmq", "listen_port", "0")
    server = server_from_config(config)
    try:
        store = server.queue_manager.store
        assert isinstance(store, JournalQueueStore)
        assert store.dead_letter_queue is None and store.destinations() == set()
        store.enqueue("/queue/a", message("configured"))
        assert store.dequeue("/queue/a").body == "configured"
    finally:
        server.server_close()
