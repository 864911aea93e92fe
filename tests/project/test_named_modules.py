"""The compiled modules, their stubs and their twins name each other (``The Python twin is
journal_engine._twin.core``): every module they name by its dotted name exists, with the attribute named
after it if any, so a module that moves cannot leave a docstring pointing at its old place."""
from __future__ import annotations

import importlib
import re

import pytest
from locations import ROOT

pytestmark = pytest.mark.same_on_both   # read from the source

PACKAGE = ROOT / "journal_engine"
PYX = ROOT / "pyx" / "journal_engine"
SOURCES = sorted([*PYX.glob("*.pyx"), *PYX.glob("*.pxd"), *PYX.glob("*.h"), *PACKAGE.glob("*.pyi"),
                  *(PACKAGE / "_twin").glob("*.py")])
DOTTED = re.compile(r"(?<![\w/.])journal_engine(?:\.[A-Za-z_]\w*)+")


def module_exists(dotted: str) -> bool:
    """A Python module, a package, or a compiled module (.pyx) or its contract (.pxd) of that name."""
    parts = dotted.split(".")
    path = ROOT.joinpath(*parts)
    compiled = PYX.joinpath(*parts[1:])
    return (path.with_suffix(".py").exists() or (path / "__init__.py").exists()
            or compiled.with_suffix(".pyx").exists() or compiled.with_suffix(".pxd").exists())


def names_something(dotted: str) -> bool:
    parts = dotted.split(".")
    for end in range(len(parts), 1, -1):
        module = ".".join(parts[:end])
        if module_exists(module):
            value = importlib.import_module(module) if end < len(parts) else None
            for attribute in parts[end:]:
                if not hasattr(value, attribute):
                    return False
                value = getattr(value, attribute)
            return True
    return False


def test_the_sources_are_found():
    assert {"_core.pyx", "_replay.pyx", "_core.pyi", "core.py"} <= {path.name for path in SOURCES}


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_module_a_compiled_module_its_stub_or_its_twin_names_exists(path):
    stale = [f"line {number}: {name}" for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             for name in DOTTED.findall(line) if not names_something(name)]
    assert not stale, stale
