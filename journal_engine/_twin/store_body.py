"""Python twin of the compiled reader of the message store's record bodies (pyx/journal_engine/_store_body.pyx).

The compiled reader walks bodies in C for the other compiled modules; the twins read them through
record_format's decoders, so only the public names are here.
"""
from __future__ import annotations

from ..record_format import ROUTING_TYPES

#: routing type codes as the columns give them (record_format.ROUTING_TYPES; 0 is "none": a null)
ROUTING_NAMES = {code: name for name, code in ROUTING_TYPES.items() if name is not None}
