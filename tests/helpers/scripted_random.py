"""A random.Random whose random() returns given values: the manuals' worked examples draw known numbers."""
from __future__ import annotations

import random


class ScriptedRandom(random.Random):
    """Returns the given values from random(), in order (the manual's "bold values")."""

    def __new__(cls, values):
        # before Python 3.11, Random.__new__ seeds from the constructor's arguments, and a list is unhashable
        return super().__new__(cls)

    def __init__(self, values):
        super().__init__(0)
        self._values = list(values)

    def random(self):
        return self._values.pop(0)
