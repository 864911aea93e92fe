"""The Python twins of the compiled core (pyx/journal_engine/): the same logic, readable.

journal_engine._impl picks them when JOURNAL_ENGINE_IMPLEMENTATION=python, and -- with a RuntimeWarning --
when the compiled core is not built (JOURNAL_ENGINE_REQUIRE_EXTENSION=1, as CI sets it,
makes that an ImportError instead, and the test suite refuses to start on them unless forced); the whole
suite runs on them too. Like the compiled modules they import only the leaves (errors, limits, record_format)
and each other.
"""
