"""docs/integrations.md's stomp.py example runs as written against a served broker: it sends, receives,
acknowledges and disconnects (it once used a ``frame`` it never defined)."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
from locations import ROOT
from stomp_server import Server

pytest.importorskip("stomp", reason="stomp.py is not installed (pip install '.[coilmq]')")
pytest.importorskip("coilmq", reason="coilmq is not installed (pip install '.[coilmq]')")

DOC = ROOT / "docs" / "integrations.md"


def stomp_py_snippet() -> str:
    text = DOC.read_text()
    found = re.search(r"With stomp\.py:\s*```python\n(.*?)```", text, re.S)
    assert found, "docs/integrations.md has no python block after 'With stomp.py:'"
    return found.group(1)


def test_the_stomp_py_snippet_runs_against_a_served_broker(tmp_path):
    snippet = stomp_py_snippet()
    assert "61613" in snippet
    server = Server(tmp_path / "store", tmp_path / "server.log")
    try:
        done = subprocess.run([sys.executable, "-c", snippet.replace("61613", str(server.port))],
                              capture_output=True, text=True, timeout=30)
    finally:
        assert server.stop() == 0
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["..."], (done.stdout, done.stderr)
