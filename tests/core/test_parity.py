"""The compiled core and its Python twin write the same bytes.

Frame codec and CRC: property-based, both modules imported side by side.
Whole journals: the implementation is chosen once per process, so each side of
a comparison runs `tests/helpers/journal_ops.py` in its own child process
(JOURNAL_ENGINE_IMPLEMENTATION=python for the twin, the extension required for
the compiled core) on the same op list, and every data file is compared byte
for byte. These tests are marked `twin`: they exercise the Python twin whatever
implementation the suite itself runs on.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from journal_ops import data_files, model_of

from journal_engine import _codec
from journal_engine.limits import max_body_bytes
from journal_engine._twin import codec as twin_codec
from journal_engine.storage.journal.format import FORMAT_VERSION, READABLE_FORMAT_VERSIONS
from journal_engine.record_format import RecordKind
from locations import GOLDEN as GOLDEN_DIR, HELPERS

HERE = HELPERS
OPS_SCRIPT = HERE / "journal_ops.py"
SMALL = 64 * 1024

u8 = st.integers(0, 255)
u32 = st.integers(0, 2 ** 32 - 1)
u64 = st.integers(0, 2 ** 64 - 1)


# ----- CRC32C ------------------------------------------------------------------------------------------

def test_crc32c_known_vector_in_every_path():
    assert _codec.crc32c(b"123456789") == 0xE3069283
    assert _codec.crc32c_software(b"123456789") == 0xE3069283
    assert twin_codec.crc32c(b"123456789") == 0xE3069283
    for crc in (_codec.crc32c, _codec.crc32c_software, twin_codec.crc32c):
        assert crc(b"") == 0
        assert crc(bytes(32)) == 0x8A9136AA          # RFC 3720 B.4: 32 bytes of zeros
        assert crc(b"\xff" * 32) == 0x62A8AB43       # RFC 3720 B.4: 32 bytes of ones
        assert crc(bytes(range(32))) == 0x46DD794E   # RFC 3720 B.4: incrementing


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=3000), seed=u32)
def test_crc32c_compiled_equals_twin(data, seed):
    assert _codec.crc32c(data, seed) == twin_codec.crc32c(data, seed)
    assert _codec.crc32c(bytearray(data)) == twin_codec.crc32c(data)
    assert _codec.crc32c(memoryview(data)) == twin_codec.crc32c(data)


@settings(max_examples=200, deadline=None)
@given(length=st.integers(0, 40_000), shift=st.integers(0, 15), seed=u32)
def test_crc32c_hardware_path_equals_software_path(length, shift, seed):
    """Random lengths and start offsets, so the word-at-a-time path meets every alignment and tail."""
    data = random.Random(length * 31 + shift).randbytes(length + shift)
    view = memoryview(data)[shift:]
    assert _codec.crc32c(view, seed) == _codec.crc32c_software(view, seed)


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=5000), cut=st.integers(0, 5000))
def test_crc32c_continues_across_chunks(data, cut):
    cut = min(cut, len(data))
    for crc in (_codec.crc32c, _codec.crc32c_software, twin_codec.crc32c):
        assert crc(data[cut:], crc(data[:cut])) == crc(data)


def test_hardware_crc_is_reported():
    assert isinstance(_codec.crc32c_uses_hardware(), bool)
    assert twin_codec.crc32c_uses_hardware() is False


# ----- frames ------------------------------------------------------------------------------------------------

@settings(max_examples=400, deadline=None)
@given(kind=u8, user_type=u8, stamp=u32, record_id=u64, tx_id=u64, body=st.binary(max_size=2000))
def test_encode_frame_compiled_equals_twin(kind, user_type, stamp, record_id, tx_id, body):
    compiled = _codec.encode_frame(kind, user_type, stamp, record_id, tx_id, body)
    twin = twin_codec.encode_frame(kind, user_type, stamp, record_id, tx_id, body)
    assert compiled == twin
    assert _codec.encode_frame(kind, user_type, stamp, record_id, tx_id, bytearray(body)) == twin
    assert _codec.encode_frame(kind, user_type, stamp, record_id, tx_id, memoryview(body)) == twin


frame_kinds = st.sampled_from([int(k) for k in RecordKind])


@st.composite
def frame_buffers(draw):
    """A buffer holding a valid frame at some 8-aligned offset, maybe damaged, maybe cut short."""
    stamp = draw(u32)
    body = draw(st.binary(max_size=600))
    frame = bytearray(twin_codec.encode_frame(draw(frame_kinds), draw(u8), stamp, draw(u64), draw(u64), body))
    prefix = bytes(8 * draw(st.integers(0, 4)))
    buffer = bytearray(prefix) + frame + bytes(8 * draw(st.integers(0, 4)))
    damage = draw(st.sampled_from(["none", "flip", "cut", "stamp", "zero", "garbage"]))
    if damage == "flip":
        bit = draw(st.integers(0, len(frame) * 8 - 1))
        buffer[len(prefix) + bit // 8] ^= 1 << (bit % 8)
    elif damage == "cut":
        buffer = buffer[:len(prefix) + draw(st.integers(0, len(frame) - 1))]
    elif damage == "garbage":
        buffer = bytearray(draw(st.binary(min_size=0, max_size=200)))
    check_stamp = stamp if damage != "stamp" else draw(u32)
    if damage == "zero":
        buffer = bytearray(len(buffer))
    pos = len(prefix) if damage != "garbage" else draw(st.integers(0, max(0, len(buffer))))
    return bytes(buffer), pos, check_stamp


@settings(max_examples=500, deadline=None)
@given(case=frame_buffers())
def test_check_frame_compiled_equals_twin(case):
    buffer, pos, stamp = case
    compiled = _codec.check_frame(buffer, pos, stamp)
    twin = twin_codec.check_frame(buffer, pos, stamp)
    assert (int(compiled[0]), compiled[1]) == (int(twin[0]), twin[1])


@settings(max_examples=200, deadline=None)
@given(kind=frame_kinds, user_type=u8, stamp=u32, record_id=u64, tx_id=u64, body=st.binary(max_size=600),
       bit=st.integers(0, 10 ** 9))
def test_every_single_bit_flip_of_a_frame_is_detected_by_both(kind, user_type, stamp, record_id, tx_id, body, bit):
    frame = bytearray(_codec.encode_frame(kind, user_type, stamp, record_id, tx_id, body))
    assert _codec.check_frame(bytes(frame), 0, stamp) == (0, len(frame))
    bit %= (32 + len(body)) * 8   # the bytes the CRC covers, and the CRC itself
    frame[bit // 8] ^= 1 << (bit % 8)
    compiled = _codec.check_frame(bytes(frame), 0, stamp)
    twin = twin_codec.check_frame(bytes(frame), 0, stamp)
    assert compiled[0] != 0 and int(twin[0]) == int(compiled[0])


group_kinds = st.sampled_from([int(RecordKind.ADD), int(RecordKind.UPDATE), int(RecordKind.DELETE)])
group_members = st.lists(st.tuples(group_kinds, u8, u64, st.binary(max_size=300)), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(stamp=u32, members=group_members)
def test_encode_group_compiled_equals_twin(stamp, members):
    assert _codec.encode_group(stamp, members) == twin_codec.encode_group(stamp, members)


def _columns(cols) -> tuple:
    return (cols.count, cols.end_offset, int(cols.end_check),
            [(cols.offset[i], cols.size[i], cols.check[i], cols.kind[i], cols.record_type[i], cols.record_id[i],
              cols.tx_id[i]) for i in range(cols.count)], cols.bodies)


@settings(max_examples=300, deadline=None)
@given(stamp=u32, members=group_members, tail=st.booleans(), sector=st.sampled_from([8, 64, 512]),
       cut=st.data())
def test_scan_of_a_torn_record_group_compiled_equals_twin(stamp, members, tail, sector, cut):
    """A group (maybe followed by a plain frame) with one stretch of it zeroed, a bit flipped or the
    file cut short: both decoders return the same rows, and neither applies part of the group."""
    from journal_engine import _scan
    from journal_engine._twin import scan as twin_scan

    group = _codec.encode_group(stamp, members)
    after = _codec.encode_frame(RecordKind.ADD, 1, stamp, 7, 0, b"after") if tail else b""
    buffer = bytearray(bytes(64) + group + after + bytes(64))
    damage = cut.draw(st.sampled_from(["none", "zero", "flip", "cut"]))
    if damage == "zero":
        start = 64 + cut.draw(st.integers(0, len(group) - 1)) // sector * sector
        buffer[start:start + sector] = bytes(len(buffer[start:start + sector]))
    elif damage == "flip":
        bit = cut.draw(st.integers(0, len(group) * 8 - 1))
        buffer[64 + bit // 8] ^= 1 << (bit % 8)
    elif damage == "cut":
        buffer = buffer[:64 + cut.draw(st.integers(0, len(group) - 1))]
    compiled = _columns(_scan.scan_columns(bytes(buffer), stamp, 64))
    twin = _columns(twin_scan.scan_columns(bytes(buffer), stamp, 64))
    assert compiled == twin
    members_seen = [row for row in compiled[3] if row[2] == 0 and row[3] != RecordKind.GROUP and row[0] < 64 + len(group)]
    assert len(members_seen) in (0, len(members))


# ----- whole journals, compiled core vs twin in child processes --------------------------------------------------

def child_env(implementation: str) -> dict:
    """The environment of a child process that must run on `implementation` and import this checkout."""
    import journal_engine

    env = {k: v for k, v in os.environ.items() if not k.startswith("JOURNAL_ENGINE_")}
    if implementation == "python":
        env["JOURNAL_ENGINE_IMPLEMENTATION"] = "python"
    else:
        env["JOURNAL_ENGINE_REQUIRE_EXTENSION"] = "1"
    package_root = str(Path(journal_engine.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def run_ops(tmp_path: Path, implementation: str, options: dict, ops: list, name: str) -> tuple[Path, list]:
    """Run `ops` in a child process on the given implementation; the directory and every load's summary."""
    directory = tmp_path / f"{name}-{implementation}"
    spec = tmp_path / f"{name}-{implementation}.json"
    spec.write_text(json.dumps({"options": options, "ops": ops}))
    done = subprocess.run([sys.executable, str(OPS_SCRIPT), str(directory), str(spec)],
                          env=child_env(implementation), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{implementation} side failed:\n{done.stderr}"
    result = json.loads(done.stdout)
    assert result["implementation"] == implementation
    return directory, result["loads"]


def mixed_ops() -> list:
    ops = []
    for rid in range(60):
        ops.append(["add", rid, rid % 7, [rid, rid * 37 % 1500]])
    for rid in range(0, 60, 3):
        ops.append(["update", rid, 200, [1000 + rid, rid * 11 % 300]])
    for rid in range(0, 60, 5):
        ops.append(["delete", rid])
    ops += [["add_tx", 1, 100, 1, "aa"], ["update_tx", 1, 1, 2, "bb"], ["delete_tx", 1, 2], ["commit", 1],
            ["add_tx", 2, 101, 1, "cc"], ["rollback", 2],
            ["add_tx", 3, 102, 1, "dd"], ["prepare", 3, "0102ff"],
            ["add_tx", 4, 103, 1, "ee"],                          # left open: rolled back at the reopen
            ["sync"], ["reopen"],
            ["commit", 3], ["add", 500, 255, ""], ["add", 2 ** 64 - 1, 0, "ff"], ["sync"]]
    return ops


def many_files_ops() -> list:
    ops = []
    for cycle in range(4):
        for index in range(120):
            rid = cycle * 1000 + index
            ops.append(["add", rid, cycle, [rid, 100 + rid * 53 % 2000]])
            if index % 4 == 3:
                ops.append(["update", rid - 1, 9, [rid, 17]])
            if index % 6 == 5:
                ops.append(["delete", rid - 2])
        ops.append(["sync"] if cycle % 2 else ["reopen"])
    ops.append(["add", 99_999, 1, [9, max_body_bytes(SMALL)]])   # a record that fills a file alone
    return ops


def transaction_ops() -> list:
    ops = [["add", rid, 1, [rid, 40]] for rid in range(20)]
    for tx in range(1, 13):
        for index in range(tx):
            ops.append(["add_tx", tx, 100 * tx + index, tx, [tx * 100 + index, 64 * index]])
        ops.append(["update_tx", tx, tx, 7, [tx, 10]])
        if tx % 4 == 0:
            ops.append(["commit", tx])
        elif tx % 4 == 1:
            ops.append(["rollback", tx])
        elif tx % 4 == 2:
            ops.append(["prepare", tx, [tx, tx]])
    ops += [["reopen"], ["commit", 2], ["reopen"], ["rollback", 6], ["reopen"]]
    return ops


def group_ops() -> list:
    ops = [["add", rid, 1, [rid, 40]] for rid in range(10)]
    for index in range(40):
        rid = 100 + index
        ops.append(["group", ["add", rid, 45, [rid, 50 + index * 97 % 3000]], ["update", rid, 32, "0100000000000000"],
                    ["update", index % 10, 34, "0200000000000000" "03000000"]]
                   + ([["delete", rid - 1, 0, ""]] if index % 3 == 2 else []))
        if index % 9 == 8:
            ops.append(["sync"] if index % 2 else ["reopen"])
    return ops


PARITY_CASES = {
    "groups": ({"file_size": SMALL, "sync": "none", "compact_min_files": 0}, group_ops()),
    "mixed-none": ({"file_size": SMALL, "sync": "none", "compact_min_files": 0}, mixed_ops()),
    "mixed-always": ({"file_size": SMALL, "sync": "always", "compact_min_files": 0}, mixed_ops()),
    "many-files": ({"file_size": SMALL, "sync": "none", "compact_min_files": 0, "min_files": 3},
                   many_files_ops()),
    "transactions": ({"file_size": SMALL, "sync": "none", "compact_min_files": 0}, transaction_ops()),
}


@pytest.mark.twin
@pytest.mark.parametrize("case", list(PARITY_CASES))
def test_compiled_core_and_twin_write_byte_identical_journals(tmp_path, case):
    options, ops = PARITY_CASES[case]
    compiled_dir, compiled_loads = run_ops(tmp_path, "cython", options, ops, case)
    twin_dir, twin_loads = run_ops(tmp_path, "python", options, ops, case)
    assert compiled_loads == twin_loads
    compiled_files, twin_files = data_files(compiled_dir), data_files(twin_dir)
    assert sorted(compiled_files) == sorted(twin_files)
    assert len(compiled_files) >= 1
    for name in compiled_files:
        assert compiled_files[name] == twin_files[name], f"{name} differs between the compiled core and the twin"
    # and what both wrote loads, on the suite's implementation, to what the ops mean
    from journal_ops import apply_ops
    expected = model_of(ops)
    for directory in (compiled_dir, twin_dir):
        final = apply_ops(str(directory), options, [])[0]
        assert final["records"] == expected["records"]
        assert final["prepared"] == expected["prepared"]
        assert final["rolled_back"] == expected["rolled_back"]


@pytest.mark.twin
def test_each_implementation_continues_the_journal_the_other_wrote(tmp_path):
    options, ops = PARITY_CASES["transactions"]
    compiled_dir, _ = run_ops(tmp_path, "cython", options, ops, "cross")
    twin_dir, _ = run_ops(tmp_path, "python", options, ops, "cross")
    extra = [["add", 77_777, 3, "abcdef"], ["update", 3, 4, "0a"], ["commit", 10], ["reopen"]]
    expected = model_of(ops + extra)
    for directory, implementation in ((compiled_dir, "python"), (twin_dir, "cython")):
        spec = tmp_path / f"continue-{implementation}.json"
        spec.write_text(json.dumps({"options": options, "ops": extra}))
        done = subprocess.run([sys.executable, str(OPS_SCRIPT), str(directory), str(spec)],
                              env=child_env(implementation), capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, f"{implementation} continuing the other's journal failed:\n{done.stderr}"
        loads = json.loads(done.stdout)["loads"]
        assert loads[-1]["records"] == expected["records"]
        assert loads[-1]["prepared"] == expected["prepared"]
    assert data_files(compiled_dir) == data_files(twin_dir)


# ----- the pinned golden journal ----------------------------------------------------------------------------------

GOLDEN = GOLDEN_DIR
GOLDEN_VERSIONS = sorted(int(p.name.split("-v")[1]) for p in GOLDEN.glob("format-v*") if p.is_dir())


def golden_spec(version: int = FORMAT_VERSION) -> dict:
    return json.loads((GOLDEN / f"format-v{version}.json").read_text())


def golden_journal(version: int = FORMAT_VERSION) -> Path:
    return GOLDEN / f"format-v{version}"


def test_every_readable_format_version_has_a_pinned_journal():
    assert GOLDEN_VERSIONS == list(READABLE_FORMAT_VERSIONS)


@pytest.mark.parametrize("version", GOLDEN_VERSIONS)
def test_golden_journal_loads_to_the_pinned_records(tmp_path, version):
    """A journal written by an earlier build of any readable format version must load the same way forever."""
    spec = golden_spec(version)
    copy = tmp_path / "golden"
    shutil.copytree(golden_journal(version), copy)
    from journal_ops import summarize

    from journal_engine import Journal

    expected = model_of(spec["ops"])
    assert expected["rolled_back"] and expected["prepared"] and len(expected["records"]) >= 4
    with Journal(copy, **spec["options"]) as journal:
        loaded = summarize(journal.load())
    assert loaded == expected
    with Journal(copy, **spec["options"]) as journal:   # the ROLLBACK load appended is read back too
        again = summarize(journal.load())
    assert again["records"] == expected["records"] and again["prepared"] == expected["prepared"]
    assert again["rolled_back"] == []


def test_same_ops_write_the_golden_bytes(tmp_path):
    spec = golden_spec()
    from journal_ops import apply_ops

    apply_ops(str(tmp_path / "fresh"), spec["options"], spec["ops"])
    fresh = data_files(str(tmp_path / "fresh"))
    pinned = {p.name: p.read_bytes() for p in sorted(golden_journal().glob("*.jej"))}
    assert len(pinned) >= 2
    assert sorted(fresh) == sorted(pinned)
    for name in pinned:
        assert fresh[name] == pinned[name], (
            f"{name}: the code no longer writes the golden bytes; if the format changed on purpose, bump "
            "FORMAT_VERSION and run `python tests/golden/regenerate.py --regenerate`")


@pytest.mark.twin
def test_twin_writes_the_golden_bytes(tmp_path):
    spec = golden_spec()
    directory, _loads = run_ops(tmp_path, "python", spec["options"], spec["ops"], "golden")
    pinned = {p.name: p.read_bytes() for p in sorted(golden_journal().glob("*.jej"))}
    assert data_files(str(directory)) == pinned


def test_golden_check_script_passes_without_rewriting(tmp_path):
    """regenerate.py without --regenerate only checks; it must agree with the files as committed."""
    before = {p.name: p.read_bytes() for p in GOLDEN.rglob("*") if p.is_file()}
    done = subprocess.run([sys.executable, str(GOLDEN / "regenerate.py")], env=child_env("cython"),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert {p.name: p.read_bytes() for p in GOLDEN.rglob("*") if p.is_file()} == before
