"""Where the broker tests' manual clock starts (epoch ms): a fixed moment, so that every delivery,
expiry and redelivery time a test works out is exact."""
from __future__ import annotations

NOW = 1_700_000_000_000
