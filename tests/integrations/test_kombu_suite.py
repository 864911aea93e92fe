"""kombu's own integration suite, run on the journal-engine transport against `journal-engine
serve-stomp` in a child process.

kombu's source distribution ships ``t/integration/common.py`` with the classes every transport's
integration tests subclass (``BasicFunctionality``, ``BaseExchangeTypes``, ``BaseTimeToLive``,
``BasePriority``, ``BaseMessage``; each test takes a ``connection`` or ``invalid_connection``
fixture). We do not copy that file: the session fetches the sdist of the installed kombu with pip,
unpacks it into a temporary directory and imports the module from there (as test_coilmq_store.py
does with coilmq's). What does not apply is skipped with its reason (docs/integrations.md lists them;
tests/helpers/skips_allowed.py allows them in CI).
"""
from __future__ import annotations

import inspect

import pytest
from sdist_suites import import_from_sdist
from stomp_server import Server

kombu = pytest.importorskip("kombu", reason="kombu is not installed (pip install 'journal_engine[celery]')")
import journal_engine.integrations.kombu  # noqa: E402,F401  (registers the journal-engine scheme)

# the classes of kombu's t/integration/common.py that a transport runs, and their tests;
# test_the_fetched_suite_is_the_one_run checks the lists are complete
SUITE = {
    "BasicFunctionality": ["test_connect", "test_failed_connect", "test_failed_connection", "test_failed_channel",
                           "test_failed_default_channel", "test_default_channel_autoconnect", "test_channel",
                           "test_default_channel", "test_autoretry_default_channel", "test_publish_consume",
                           "test_consume_empty_queue", "test_simple_queue_publish_consume",
                           "test_simple_buffer_publish_consume"],
    "BaseExchangeTypes": ["test_direct", "test_direct_routing_keys", "test_fanout", "test_topic",
                          "test_publish_empty_exchange"],
    "BaseTimeToLive": ["test_publish_consume", "test_simple_queue_publish_consume",
                       "test_simple_buffer_publish_consume"],
    "BasePriority": ["test_publish_consume", "test_publish_requeue_consume", "test_simple_queue_publish_consume",
                     "test_simple_buffer_publish_consume"],
    "BaseMessage": ["test_ack", "test_reject_no_requeue", "test_reject_requeue", "test_requeue"],
}
# what does not apply, and why (docs/integrations.md, "What kombu's suite skips")
_ONE_DRAIN = ("one drain_events() is expected to hand over every waiting message (py-amqp's prefetch); this "
              "transport hands over one a call")
NOT_APPLICABLE = {"BasePriority.test_publish_consume": _ONE_DRAIN, "BasePriority.test_publish_requeue_consume": _ONE_DRAIN}


@pytest.fixture(scope="session")
def kombu_common(tmp_path_factory):
    """kombu's t/integration/common.py, imported from the sdist of the installed kombu, fetched once."""
    return import_from_sdist(tmp_path_factory.mktemp("kombu-sdist"), f"kombu=={kombu.__version__}",
                             "t/integration/common.py", "kombu's integration suite")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    directory = tmp_path_factory.mktemp("kombu-suite")
    started = Server(directory / "store", directory / "server.log")
    yield started
    started.stop()


@pytest.fixture
def connection(server):
    connection = kombu.Connection(f"journal-engine://127.0.0.1:{server.port}")
    yield connection
    connection.release()


@pytest.fixture
def invalid_connection():
    return kombu.Connection("journal-engine://127.0.0.1:1", connect_timeout=2)


def test_the_fetched_suite_is_the_one_run(kombu_common):
    for name, tests in SUITE.items():
        fetched = sorted(attribute for attribute in dir(getattr(kombu_common, name)) if attribute.startswith("test_"))
        assert fetched == sorted(tests), name


def test_a_url_of_the_scheme_picks_the_transport():
    assert kombu.Connection("journal-engine://127.0.0.1:61613").transport_cls == "journal-engine"
    assert type(kombu.Connection("journal-engine://127.0.0.1:61613").transport) is journal_engine.integrations.kombu.Transport


@pytest.mark.parametrize("case", [f"{name}.{test}" for name, tests in SUITE.items() for test in tests])
def test_kombu_integration_suite(kombu_common, request, case):
    name, test = case.split(".")
    if case in NOT_APPLICABLE:
        pytest.skip(f"kombu's {case} does not apply: {NOT_APPLICABLE[case]}")
    suite_class = type(f"test_JournalEngine{name}", (getattr(kombu_common, name),), {})
    method = getattr(suite_class(), test)
    arguments = {parameter: request.getfixturevalue(parameter) for parameter in inspect.signature(method).parameters}
    method(**arguments)


# BasePriority's two cases skipped above, as kombu's own one-message-a-drain transports run them (its
# Redis transport overrides both with a drain_events() a message): the same publishes, declarations and
# orders, with JMS's order (higher first, as py-amqp's), one drain a message.
def _publish(producer, queue, body, priority):
    producer.publish(body, retry=True, exchange=queue.exchange, routing_key=queue.routing_key, declare=[queue],
                     serializer="pickle", priority=priority)


def _three_published(channel, name: str):
    """The queue ``name`` (priorities up to 10), declared by a producer that publishes first, second and
    third at priorities 3, 6 and 3, as kombu's cases do; (queue, producer)."""
    queue = kombu.Queue(name, routing_key=name, max_priority=10)
    producer = kombu.Producer(channel)
    for body, priority in (("first", 3), ("second", 6), ("third", 3)):
        _publish(producer, queue, {"msg": body}, priority)
    return queue, producer


def _drain(connection, consumer, count):
    with consumer:
        for _ in range(count):
            connection.drain_events(timeout=5)


def test_priority_publish_consume_one_drain_a_message(connection):
    bodies = []
    with connection as conn, conn.channel() as channel:
        queue, _producer = _three_published(channel, "priority_one_drain")
        consumer = kombu.Consumer(conn, [queue], accept=["pickle"],
                                  callbacks=[lambda body, message: (bodies.append(body["msg"]), message.ack())])
        _drain(conn, consumer, 3)
    assert bodies == ["second", "first", "third"]


def test_priority_publish_requeue_consume_one_drain_a_message(connection):
    received = []
    with connection as conn, conn.channel() as channel:
        queue, producer = _three_published(channel, "priority_requeue_one_drain")
        # held unacknowledged: a prefetch of four (this transport's default is one at a time; Redis's has none)
        consumer = kombu.Consumer(conn, [queue], accept=["pickle"], prefetch_count=4,
                                  callbacks=[lambda body, message: received.append((body["msg"], message))])
        _drain(conn, consumer, 3)
        assert [body for body, _ in received] == ["second", "first", "third"]
        for _, message in received:
            message.requeue()           # not acknowledged: back on the queue, in priority order again
        received.clear()
        _publish(producer, queue, {"msg": "fourth"}, 9)
        _drain(conn, consumer, 4)
        for _, message in received:
            message.ack()
    assert [body for body, _ in received] == ["fourth", "second", "first", "third"]
