"""Type stub of the compiled reader of the message store's record bodies (pyx/journal_engine/_store_body.pyx;
twin: _twin/store_body.py).

Its C readers are shared with the other compiled modules through _store_body.pxd; Python sees only
the routing codes' names.
"""


ROUTING_NAMES: dict[int, str]
"""Routing type code -> name, as the ``routing_type`` column's codes mean them (0: none, a null)."""
