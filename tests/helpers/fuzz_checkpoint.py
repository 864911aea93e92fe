"""A coverage-guided fuzz target (atheris) for the checkpoint's reader (storage/journal/checkpoint.py and the
compiled checks of its images).

One journal is written and closed cleanly at start (journal_engine.crashtest.checkpoint_attack's
pristine journal). Each input becomes patches to its checkpoint: bytes written at offsets the input
chooses (biased towards the entry table and the images' fields), with every checksum recomputed as a
forger would or left as it is, then the checkpoint cut or extended. A writing load of a copy of the
journal must return exactly what a full decode returns and raise nothing but a JournalError; a crash
of the interpreter, a hang, another exception or other records are findings.

    python tests/helpers/fuzz_checkpoint.py -runs=1000      # bounded, as tests/faults/test_fuzz.py runs it
"""
from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import warnings

import atheris

with atheris.instrument_imports():
    from journal_engine import Journal, JournalError
    from journal_engine.crashtest import checkpoint_attack as attacks
    from journal_engine.storage.journal import checkpoint as checkpoints
    from journal_engine.storage.journal.format import CHECKPOINT_FILE

# where the journals go: JOURNAL_ENGINE_FUZZ_SCRATCH (the test gives its tmp_path), else a new temporary
# directory, removed at the end unless the fuzzer ends the process first
SCRATCH = os.environ.get("JOURNAL_ENGINE_FUZZ_SCRATCH") or tempfile.mkdtemp(prefix="journal-engine-fuzz-checkpoint-")
PRISTINE = os.path.join(SCRATCH, "pristine")
attacks.write_pristine(PRISTINE, seed=7)
EXPECTED = attacks.decoded(PRISTINE)
with open(os.path.join(PRISTINE, CHECKPOINT_FILE), "rb") as handle:
    CHECKPOINT = handle.read()
TABLE_END = checkpoints._HEADER.size + len(attacks._entries(CHECKPOINT)) * checkpoints._ENTRY.size
logging.getLogger("journal_engine").setLevel(logging.CRITICAL)
warnings.simplefilter("ignore")


def forged(data: bytes) -> bytes:
    provider = atheris.FuzzedDataProvider(data)
    content = bytearray(CHECKPOINT)
    for _ in range(provider.ConsumeIntInRange(0, 6)):
        region = provider.ConsumeIntInRange(0, 2)      # the header, the entry table, anywhere
        limit = (checkpoints._HEADER.size, TABLE_END, len(content))[region]
        at = provider.ConsumeIntInRange(0, limit - 1)
        patch = provider.ConsumeBytes(provider.ConsumeIntInRange(1, 8))
        content[at:at + len(patch)] = patch
    if provider.ConsumeBool():
        content = bytearray(attacks._recomputed(content, images=provider.ConsumeBool()))
    shape = provider.ConsumeIntInRange(0, 3)
    if shape == 1:
        content = content[:provider.ConsumeIntInRange(0, len(content))]
    elif shape == 2:
        content += provider.ConsumeBytes(provider.ConsumeIntInRange(0, 4096))
    return bytes(content)


def test_one_input(data: bytes) -> None:
    work = os.path.join(SCRATCH, "work")
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(PRISTINE, work)
    with open(os.path.join(work, CHECKPOINT_FILE), "wb") as handle:
        handle.write(forged(data))
    with Journal(work, file_size=attacks.FILE_SIZE) as journal:     # anything but a JournalError is a finding
        try:
            result = journal.load()
        except JournalError as exc:
            raise AssertionError(f"a damaged or forged checkpoint made the load fail: {exc}") from exc
        if attacks.digest(result) != EXPECTED:
            raise AssertionError("the load returned other records, bodies or findings than a full decode")


if __name__ == "__main__":
    try:
        atheris.Setup(sys.argv, test_one_input)
        atheris.Fuzz()
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)
