"""Writes the pinned golden journal of tests/golden/ — only when asked to.

The golden journal is a tiny journal (64 KiB files) holding a few records of
every kind, written by a fixed op list. tests/core/test_parity.py checks that the
current code loads it to the pinned records and writes the very same bytes for
the same ops, so any change to the on-disk format shows up as a failing test
instead of silently breaking journals already on users' disks.

    python tests/golden/regenerate.py                # check: exit 1 when the code no longer writes them
    python tests/golden/regenerate.py --regenerate   # rewrite them (a format change: bump FORMAT_VERSION
                                                     # first, so the older version's files stay pinned)
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "helpers"))   # tests/helpers/, for journal_ops

from journal_ops import apply_ops, data_files

from journal_engine.storage.journal.format import FORMAT_VERSION

# one pinned journal per format version; this script writes (or checks) the current version's,
# and the older ones stay as they are: tests/core/test_parity.py loads every one of them
JOURNAL_DIR = HERE / f"format-v{FORMAT_VERSION}"
PINNED_OPS = HERE / f"format-v{FORMAT_VERSION}.json"

OPTIONS = {"file_size": 64 * 1024, "sync": "none", "compact_min_files": 0, "min_files": 2}

OPS = [
    ["add", 1, 1, "6669727374"],                      # "first"
    ["add", 2, 2, ""],                                # an empty body
    ["add", 3, 255, [3, 13]],                         # a body that needs padding
    ["add", 2 ** 64 - 1, 0, "ff" * 8],                # the largest id, type 0
    ["update", 1, 10, "7570646174652d31"],            # "update-1"
    ["update", 1, 11, "7570646174652d32"],            # "update-2"
    ["delete", 3],
    ["add_tx", 10, 100, 5, "74782d616464"],           # committed: add, update, delete
    ["update_tx", 10, 2, 6, "74782d757064617465"],
    ["delete_tx", 10, 2 ** 64 - 1],
    ["commit", 10],
    ["add_tx", 11, 101, 5, "726f6c6c6564206261636b"],  # rolled back
    ["rollback", 11],
    ["add_tx", 12, 102, 7, "7072657061726564"],       # prepared with an xid, decided after the reopen
    ["update_tx", 12, 1, 7, "70726570617265642d7570"],
    ["prepare", 12, "786964"],
    ["group", ["add", 6, 45, "6d657373616765"], ["update", 6, 32, "0100000000000000"],  # a record group
     ["update", 1, 34, "0100000000000000" "02000000"], ["delete", 2, 0, ""]],
    ["sync"],
    ["reopen"],
    ["add", 4, 4, [4, 40_000]],                       # with the next one, crosses into a second file
    ["add", 5, 4, [5, 30_000]],
    ["commit", 12],
    ["add_tx", 13, 103, 8, "6f70656e"],               # left open: load rolls it back
    ["add_tx", 14, 104, 8, "707265706172656420616761696e"],
    ["prepare", 14, ""],                              # prepared with an empty xid, left prepared
]


def write(directory: Path) -> dict[str, bytes]:
    """Run the golden ops into an empty directory; the data files holding frames."""
    apply_ops(str(directory), OPTIONS, OPS)
    return data_files(str(directory))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--regenerate", action="store_true", help="rewrite the pinned golden files")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        fresh = write(Path(scratch) / "journal")
    pinned = {p.name: p.read_bytes() for p in sorted(JOURNAL_DIR.glob("*.jej"))} if JOURNAL_DIR.exists() else {}
    if not args.regenerate:
        if fresh == pinned and PINNED_OPS.exists() and json.loads(PINNED_OPS.read_text()) == {"options": OPTIONS,
                                                                                          "ops": OPS}:
            print(f"golden journal up to date: {len(pinned)} files in {JOURNAL_DIR}")
            return 0
        print(f"the code no longer writes the golden journal in {JOURNAL_DIR}; "
              "if the format changed on purpose, run with --regenerate", file=sys.stderr)
        return 1
    if JOURNAL_DIR.exists():
        shutil.rmtree(JOURNAL_DIR)
    JOURNAL_DIR.mkdir()
    for name, raw in fresh.items():
        (JOURNAL_DIR / name).write_bytes(raw)
    # the ops are pinned next to the files they wrote; what a load must return is computed from
    # them by an engine-free model (journal_ops.model_of), so it is not stored twice
    lines = ",\n  ".join(json.dumps(op) for op in OPS)
    PINNED_OPS.write_text(f'{{"options": {json.dumps(OPTIONS)},\n "ops": [\n  {lines}\n ]}}\n')
    assert json.loads(PINNED_OPS.read_text()) == {"options": OPTIONS, "ops": OPS}
    print(f"wrote {len(fresh)} files to {JOURNAL_DIR} and {PINNED_OPS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
