"""What 43 everyday operations on a body view do after another process cut the file it maps (row X5 of
docs/internals/recovery.md; the table in docs/body-views.md, the warning in the README at ``load()``).

``load()`` hands out bodies as read-only views into the mapped data files. A copy out of a view made by
the view itself (``bytes(body)``, slicing, comparing, hashing, ``decode``...) reads under the SIGBUS guard
and raises FileChangedError naming the file; an operation that reads the view through its buffer
(``bytearray(body)``, ``hashlib.sha256(body)``, ``file.write(body)``...) reads the mapping directly and
dies of SIGBUS, as a read of an LMDB value or of SQLite's mmap mode does after such a cut. This test
pins both lists: an operation that moves from one to the other (a guard added, or lost) fails it until
the documents say so. ``load(copy=True)`` returns owned bytes, which no cut reaches (the twin's bodies
are bytes too: every operation works there).

The operations run in child processes, in order, each announced before it runs; a child that dies of a
signal names the operation that killed it, and the next child resumes after it.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap


from journal_engine import IMPLEMENTATION

#: (name, expression over ``body``, the view of a 4000-byte body past the cut; ``sink``: a file open for
#: writing; ``fd``: its descriptor). The order is the table's in docs/body-views.md.
OPERATIONS = [
    # copies the view makes itself: guarded
    ("bytes(body)", "bytes(body)"),
    ("body.tobytes()", "body.tobytes()"),
    ("body[0]", "body[0]"),
    ("body[-1]", "body[-1]"),
    ("body[:16]", "body[:16]"),
    ("body[100:200:2]", "body[100:200:2]"),
    ("body == bytes", "body == b'm' * 4000"),
    ("body != bytes", "body != b'n' * 4000"),
    ("body < bytes", "body < b'n'"),
    ("sorted([body, b'a'])", "sorted([body, b'a'])"),
    ("hash(body)", "hash(body)"),
    ("{body: 1}", "{body: 1}"),
    ("body in a set of bytes", "body in {b'm' * 4000}"),
    ("body + b'x'", "body + b'x'"),
    ("b'x' + body", "b'x' + body"),
    ("body.decode()", "body.decode()"),
    ("body.decode('latin-1')", "body.decode('latin-1')"),
    ("body.hex()", "body.hex()"),
    ("body.startswith(b'm')", "body.startswith(b'm')"),
    ("body.endswith(b'm')", "body.endswith(b'm')"),
    ("body.find(b'z')", "body.find(b'z')"),
    ("b'z' in body", "b'z' in body"),
    ("list(body)", "list(body)"),
    ("sum(body)", "sum(body)"),
    ("pickle.dumps(body)", "pickle.dumps(body)"),
    ("copy.deepcopy(body)", "bytes(copy.deepcopy(body))"),
    ("b'%b' % body", "b'%b' % body"),
    ("int.from_bytes(body, 'little')", "int.from_bytes(body, 'little')"),     # it calls bytes(body)
    # reads through the buffer protocol: not guarded (os.write: the kernel reads it)
    ("bytearray(body)", "bytearray(body)"),
    ("b''.join([body])", "b''.join([body])"),
    ("memoryview(body).tobytes()", "memoryview(body).tobytes()"),
    ("memoryview(body)[-1]", "memoryview(body)[-1]"),
    ("struct.unpack_from", "struct.unpack_from('<I', body, 3996)"),
    ("hashlib.sha256(body)", "hashlib.sha256(body).digest()"),
    ("zlib.crc32(body)", "zlib.crc32(body)"),
    ("zlib.compress(body)", "zlib.compress(body)"),
    ("base64.b64encode(body)", "base64.b64encode(body)"),
    ("str(body, 'utf-8')", "str(body, 'utf-8')"),
    ("codecs.decode(body, 'utf-8')", "codecs.decode(body, 'utf-8')"),
    ("io.BytesIO(body)", "io.BytesIO(body).getvalue()"),
    ("file.write(body)", "sink.write(body) and sink.flush()"),
    ("os.write(fd, body)", "os.write(fd, body)"),
    ("re.match(rb'm+', body)", "re.match(rb'm+', body)"),
]

#: the operations that die of SIGBUS on a view of a cut file (README, docs/body-views.md)
DIE_OF_SIGBUS = {
    "bytearray(body)", "b''.join([body])", "memoryview(body).tobytes()", "memoryview(body)[-1]",
    "struct.unpack_from", "hashlib.sha256(body)", "zlib.crc32(body)", "zlib.compress(body)",
    "base64.b64encode(body)", "str(body, 'utf-8')", "codecs.decode(body, 'utf-8')", "io.BytesIO(body)",
    "file.write(body)", "re.match(rb'm+', body)",
}
#: the kernel, not the process, meets the cut: write(2) from an unmapped page fails with EFAULT
FAIL_WITH_EFAULT = {"os.write(fd, body)"}

_CHILD = """
    import base64, codecs, copy, errno, hashlib, io, os, pickle, re, struct, subprocess, sys, zlib
    from journal_engine import FileChangedError, Journal
    directory, start = sys.argv[1], int(sys.argv[2])
    operations = [line.split("\\t", 1) for line in sys.argv[3].split("\\n")]
    with Journal(directory, file_size=1 << 20, sync="none") as journal:
        journal.load()
        for record_id in range(1, 201):
            journal.add(record_id, 7, b"m" * 4000)
    journal = Journal(directory, file_size=1 << 20)
    records = journal.load().records
    body = records[200].body                      # near the file's end, far past the cut
    path = journal.data_files()[0].path
    os.truncate(path, 4096)                        # another process's truncate(1) does the same
    sink = open(os.path.join(directory, "sink"), "wb")
    fd = os.open(os.path.join(directory, "sink-fd"), os.O_WRONLY | os.O_CREAT)
    for index in range(start, len(operations)):
        name, expression = operations[index]
        print("begin", index, flush=True)
        try:
            eval(expression)
        except FileChangedError as error:
            assert error.path == path, error.path
            print("end", index, "FileChangedError", flush=True)
        except OSError as error:
            print("end", index, "OSError:" + errno.errorcode.get(error.errno, str(error.errno)), flush=True)
        except Exception as error:
            print("end", index, type(error).__name__, flush=True)
        else:
            print("end", index, "read", flush=True)
"""


def classify(tmp_path) -> dict[str, str]:
    """Each operation's outcome on a view of a cut file: "FileChangedError", "read" (it returned),
    another exception's name, or "SIGBUS" (the child died of it)."""
    listing = "\n".join(f"{name}\t{expression}" for name, expression in OPERATIONS)
    outcomes: dict[str, str] = {}
    start = 0
    for attempt in range(len(OPERATIONS) + 1):
        child = subprocess.run([sys.executable, "-c", textwrap.dedent(_CHILD), str(tmp_path / f"j{attempt}"),
                                str(start), listing], capture_output=True, text=True, timeout=120)
        begun = None
        for line in child.stdout.splitlines():
            words = line.split()
            if words[0] == "begin":
                begun = int(words[1])
            else:
                outcomes[OPERATIONS[int(words[1])][0]] = words[2]
                begun = None
        if child.returncode == 0:
            assert begun is None and len(outcomes) == len(OPERATIONS), child.stdout
            return outcomes
        assert begun is not None, (child.returncode, child.stderr[-2000:])    # died before the operations
        assert child.returncode == -signal.SIGBUS, (OPERATIONS[begun][0], child.returncode, child.stderr[-2000:])
        outcomes[OPERATIONS[begun][0]] = "SIGBUS"
        start = begun + 1
    raise AssertionError("more children than operations")


def test_which_operations_on_a_view_of_a_cut_file_raise_and_which_die_of_sigbus(tmp_path):
    outcomes = classify(tmp_path)
    assert len(OPERATIONS) == 43
    if IMPLEMENTATION != "cython":      # the twin's bodies are bytes (no tobytes()): a cut never reaches them
        assert {name for name, outcome in outcomes.items() if outcome != "read"} == {"body.tobytes()"}, outcomes
        return
    died = {name for name, outcome in outcomes.items() if outcome == "SIGBUS"}
    assert died == DIE_OF_SIGBUS, (sorted(died - DIE_OF_SIGBUS), sorted(DIE_OF_SIGBUS - died))
    assert {name: outcomes[name] for name in FAIL_WITH_EFAULT} == {name: "OSError:EFAULT" for name in FAIL_WITH_EFAULT}
    guarded = {name: outcome for name, outcome in outcomes.items()
               if name not in DIE_OF_SIGBUS and name not in FAIL_WITH_EFAULT}
    assert set(guarded.values()) == {"FileChangedError"}, guarded
