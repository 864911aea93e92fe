"""The Python twins of the compiled core (pyx/journal_engine/): the same logic, readable.

journal_engine._impl picks them only when JOURNAL_ENGINE_IMPLEMENTATION=python; the whole suite runs
on them too. Like the compiled modules they import only the leaves (errors, limits, record_format)
and each other.
"""
