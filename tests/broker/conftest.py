"""What the broker's tests share: a ManualClock at broker_time.NOW, and an in-memory broker on it (a
module that needs a durable one defines its own ``broker``)."""
from __future__ import annotations

import pytest
from broker_time import NOW

from journal_engine import Broker, ManualClock


@pytest.fixture
def clock():
    return ManualClock(NOW)


@pytest.fixture
def broker(clock):
    b = Broker(clock=clock)
    yield b
    b.close()
