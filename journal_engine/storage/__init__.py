"""The storage floor: the record-store protocol and what every backend shares.

``protocol.py`` is the interface the message store writes through; ``durability.py``,
``directory_lock.py``, ``lifecycle.py`` and ``group_commit.py`` are shared by both backends, which
stand side by side under it: ``journal/`` (the segmented journal) and ``lmdb/``. A backend imports
this floor and never the other backend. Importing this package imports nothing else (the twin
core takes ``group_commit`` from here as a leaf).
"""
