"""Configuration files are read with a size cap and only when regular: `/dev/zero`, a FIFO no one writes and
a file past limits.CONFIG_FILE_BYTES_MAX give a ConfigError naming the file at once, through
journal_engine.config.load and Broker(config=...), instead of filling memory or blocking for ever."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from journal_engine import ConfigError
from journal_engine.config import load
from journal_engine.limits import CONFIG_FILE_BYTES_MAX


def test_a_configuration_file_past_the_cap_is_refused_naming_file_and_cap(tmp_path):
    at_cap = tmp_path / "at-cap.xml"
    with open(at_cap, "wb") as handle:
        handle.truncate(CONFIG_FILE_BYTES_MAX)          # sparse: the cap's worth of NUL bytes
    with pytest.raises(ConfigError) as error:
        load(str(at_cap))
    assert "CONFIG_FILE_BYTES_MAX" not in str(error.value)      # read, then refused for what it holds
    past_cap = tmp_path / "past-cap.xml"
    with open(past_cap, "wb") as handle:
        handle.truncate(CONFIG_FILE_BYTES_MAX + 1)
    with pytest.raises(ConfigError, match="CONFIG_FILE_BYTES_MAX") as error:
        load(str(past_cap))
    assert str(past_cap) in str(error.value) and str(CONFIG_FILE_BYTES_MAX) in str(error.value)


CONFIG_LOADER = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))     # a reader without a cap dies here, not the machine
    from journal_engine import Broker, ConfigError
    from journal_engine.config import load
    for attempt in (lambda: load(sys.argv[1]), lambda: Broker(sys.argv[2], config=sys.argv[1])):
        try:
            attempt()
        except ConfigError as error:
            print(error)
""")


def load_in_a_child(path, tmp_path) -> subprocess.CompletedProcess:
    """journal_engine.config.load(path) and Broker(config=path) in a child (2 GiB of address space, 60 s)."""
    return subprocess.run([sys.executable, "-c", CONFIG_LOADER, str(path), str(tmp_path / "broker")],
                          capture_output=True, text=True, timeout=60, check=False)


def test_dev_zero_as_configuration_is_refused_at_once(tmp_path):
    done = load_in_a_child("/dev/zero", tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all("/dev/zero" in line and "not a regular file" in line for line in lines)


def test_a_fifo_as_configuration_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "broker.xml"
    os.mkfifo(fifo)                     # nobody writes it: an open for reading would block for ever
    done = load_in_a_child(fifo, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all(str(fifo) in line and "not a regular file" in line for line in lines)
