"""Journals read where they lie: a ``file://`` URI, and an S3 endpoint (moto's server, started here) read
through pyarrow.fs, against the Python reader of the same files on the local disk."""
from __future__ import annotations

import os
import socket

import pytest
from spark_journals import python_rows, write_broker

pytestmark = pytest.mark.spark


def rows_of(df) -> list[tuple]:
    return sorted((os.path.basename(row.path), row.offset, row.kind, row.record_id, bytes(row.body))
                  for row in df.select("path", "offset", "kind", "record_id", "body").collect())


def expected(broker, journal: str) -> list[tuple]:
    return sorted((os.path.basename(path), offset, kind, record_id - (1 << 64) if record_id >= 1 << 63 else record_id,
                   bytes(body)) for path, offset, kind, record_id, _type, _tx, body in python_rows(str(broker / journal)))


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    directory = tmp_path_factory.mktemp("stored") / "broker"
    write_broker(directory)
    return directory


def test_a_file_uri_reads_the_local_journal(spark, broker):
    df = spark.read.format("journal_engine").load((broker / "messages").as_uri())
    assert rows_of(df) == expected(broker, "messages")
    assert {row.path for row in df.select("path").distinct().collect()} <= \
        {str(broker / "messages" / name) for name in os.listdir(broker / "messages")}


@pytest.fixture(scope="module")
def s3_endpoint():
    moto_server = pytest.importorskip("moto.server", reason="the test extra's moto[server] is not installed")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
    finally:
        server.stop()


def test_a_broker_in_s3_is_read_where_it_lies(spark, broker, s3_endpoint):
    import pyarrow.fs
    bucket_uri = f"s3a://key:secret@archive/brokers/node-1?{s3_endpoint}"
    filesystem, root = pyarrow.fs.FileSystem.from_uri(
        bucket_uri.replace("s3a://", "s3://") + "&allow_bucket_creation=true")
    filesystem.create_dir("archive")
    pyarrow.fs.copy_files(str(broker), root, destination_filesystem=filesystem)
    df = spark.read.format("journal_engine").load(bucket_uri)
    rows = df.select("path", "damage").collect()
    assert all(row.damage is None for row in rows)
    assert {row.path.rsplit("/", 1)[0] for row in rows} == {"s3a://archive/brokers/node-1/messages",
                                                             "s3a://archive/brokers/node-1/bindings"}  # no secret
    for journal in ("messages", "bindings"):
        assert rows_of(df.where(f"path like '%/{journal}/%'")) == expected(broker, journal)
