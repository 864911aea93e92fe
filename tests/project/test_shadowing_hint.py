"""Python run from inside the checkout after `pip install .` imports the source tree, which has no built
extension; Python words that as "most likely due to a circular import". The warning says what happened."""
from __future__ import annotations

from journal_engine._impl import describe_missing_core

CIRCULAR = ImportError("cannot import name '_broker_objects' from partially initialized module 'journal_engine' "
                       "(most likely due to a circular import) (/src/journal_engine/__init__.py)")


def test_a_source_tree_without_extensions_is_named_as_shadowing_the_installed_package(tmp_path):
    package = tmp_path / "journal_engine"
    package.mkdir()
    (package / "_core.pyx").write_text("")
    (package / "_core.pyi").write_text("")
    said = describe_missing_core(CIRCULAR, str(package / "_impl.py"))
    assert "circular" not in said
    assert str(package) in said and "shadows" in said and "outside the checkout" in said


def test_a_tree_with_a_built_core_keeps_pythons_own_reason(tmp_path):
    package = tmp_path / "journal_engine"
    package.mkdir()
    (package / "_core.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    assert describe_missing_core(CIRCULAR, str(package / "_impl.py")) == str(CIRCULAR)
