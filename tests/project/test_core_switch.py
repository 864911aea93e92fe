"""journal_engine._impl, the one switch between the compiled core and its twin: the names each core module
gives the package are written once (CORE_EXPORTS), and both the compiled module and its twin have them."""
from __future__ import annotations

import importlib

import pytest

from journal_engine import _impl

pytestmark = pytest.mark.same_on_both   # both sides are imported by name, whichever the suite runs on


@pytest.mark.parametrize("module", sorted(_impl.CORE_EXPORTS))
def test_the_twin_and_the_compiled_module_have_every_name_the_switch_exports(module):
    twin = importlib.import_module(f"journal_engine._twin.{module}")
    assert [name for name in _impl.CORE_EXPORTS[module] if not hasattr(twin, name)] == []
    try:
        compiled = importlib.import_module(f"journal_engine._{module}")
    except ImportError as exc:
        pytest.skip(f"the compiled core is not built: {exc}")
    assert [name for name in _impl.CORE_EXPORTS[module] if not hasattr(compiled, name)] == []


def test_the_switch_exports_each_name_once_from_the_implementation_in_use():
    names = [name for names in _impl.CORE_EXPORTS.values() for name in names]
    assert len(names) == len(set(names))
    assert _impl.__all__ == ["IMPLEMENTATION", *names]
    prefix = "journal_engine._" if _impl.IMPLEMENTATION == "cython" else "journal_engine._twin."
    for module, exported in _impl.CORE_EXPORTS.items():
        source = importlib.import_module(prefix + module)
        assert all(getattr(_impl, name) is getattr(source, name) for name in exported), module
