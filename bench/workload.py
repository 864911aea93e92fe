"""The record every benchmark writes: 256 bytes of fixed random data (no peer gains from compression)."""
from __future__ import annotations

import random

RECORD_BYTES = 256
BODY = random.Random(2024).randbytes(RECORD_BYTES)
