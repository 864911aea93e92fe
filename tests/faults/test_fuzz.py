"""A bounded coverage-guided fuzz run of every reader of the journal format (tests/helpers/fuzz_decoder.py):
no input may crash the interpreter, hang, or raise anything but the errors the format promises."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import journal_engine
from locations import HELPERS

HERE = HELPERS
RUNS = int(os.environ.get("JOURNAL_ENGINE_FUZZ_RUNS", "20000"))


def test_the_decoder_survives_a_bounded_fuzz_run(tmp_path):
    pytest.importorskip("atheris", reason="atheris is not installed (pip install atheris; it is in the test extra)")
    if journal_engine.IMPLEMENTATION != "cython":
        pytest.skip("the fuzz run is for the compiled decoder (pointer arithmetic in C); the twin is pure Python "
                    "and its parity with the compiled one is tested elsewhere")
    done = subprocess.run([sys.executable, str(HERE / "fuzz_decoder.py"), f"-runs={RUNS}", "-max_len=8192",
                           "-timeout=20", f"-artifact_prefix={tmp_path}/"],
                          capture_output=True, text=True, timeout=900, check=False, cwd=tmp_path)
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
    assert done.returncode == 0, f"the fuzzer found an input that breaks a reader:\n{tail}"
    assert f"Done {RUNS} runs" in done.stderr, tail


CHECKPOINT_RUNS = int(os.environ.get("JOURNAL_ENGINE_FUZZ_CHECKPOINT_RUNS", "800"))


def test_the_checkpoint_reader_survives_a_bounded_fuzz_run(tmp_path):
    """Forged, cut and extended checkpoints (tests/helpers/fuzz_checkpoint.py): each load returns the
    full decode's records and raises nothing but a JournalError, and the interpreter never dies."""
    pytest.importorskip("atheris", reason="atheris is not installed (pip install atheris; it is in the test extra)")
    if journal_engine.IMPLEMENTATION != "cython":
        pytest.skip("the fuzz run is for the compiled checks (pointer arithmetic in C); the twin's parity is tested "
                    "in tests/core/test_checkpoint.py")
    done = subprocess.run([sys.executable, str(HERE / "fuzz_checkpoint.py"), f"-runs={CHECKPOINT_RUNS}",
                           "-timeout=20", f"-artifact_prefix={tmp_path}/"],
                          capture_output=True, text=True, timeout=900, check=False, cwd=tmp_path,
                          env={**os.environ, "JOURNAL_ENGINE_FUZZ_SCRATCH": str(tmp_path)})
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
    assert done.returncode == 0, f"the fuzzer found a checkpoint that breaks the load:\n{tail}"
    assert f"Done {CHECKPOINT_RUNS} runs" in done.stderr, tail
