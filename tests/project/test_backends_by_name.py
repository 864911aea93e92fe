"""No module tests a backend's name: tools ask the backend (storage/protocol.py, ``Backend``), and
``storage/backends.py`` lists them. A comparison with "journal" or "lmdb" outside storage/ would be a
fork the next backend has to find (docs/backends.md)."""
from __future__ import annotations

import ast

import pytest
from locations import ROOT

pytestmark = pytest.mark.same_on_both   # read from the source

BACKEND_NAMES = {"journal", "lmdb"}
#: what holds a backend's name where the code forks on it ("journal" is also a column, a layout, a part)
HOLDERS = ("backend", "store", "spec")


def _holder(node) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def name_comparisons(path) -> list[str]:
    """``backend == "lmdb"``, ``store != "journal"``, ``spec in ("journal", ...)`` and the like in one file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        names = [v for operand in operands
                 for v in (operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand])
                 if isinstance(v, ast.Constant) and v.value in BACKEND_NAMES]
        if names and any(any(word in _holder(operand).lower() for word in HOLDERS) for operand in operands):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_module_outside_storage_tests_a_backends_name():
    package = ROOT / "journal_engine"
    # storage/ lists the backends; benchmarking/ names its peers (one of them called "journal")
    files = [path for path in package.rglob("*.py")
             if not {"storage", "benchmarking"} & set(path.relative_to(package).parts)]
    assert any(path.name == "inspection.py" for path in files)
    forks = [place for path in files for place in name_comparisons(path)]
    assert not forks, f"a backend tested by its name (ask storage.backends instead): {forks}"
