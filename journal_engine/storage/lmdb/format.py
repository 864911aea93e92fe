"""The LMDB store's layout on disk, written once: its file names, its databases, its keys.

A directory holds one LMDB environment (``data.mdb``, ``lock.mdb``) with five named databases, and
``store.lock`` (the holder's process id; the flock is on the directory itself,
storage/directory_lock.py: one LmdbRecordStore per directory, across processes, because the
live-record table the writes are checked against is in memory).
Keys are big-endian so LMDB's byte order is numeric order, and a record's updates and slots are
one contiguous key range after its id.

| database   | key                                   | value                                   |
|------------|---------------------------------------|-----------------------------------------|
| records    | record id u64                         | record type u8, body                    |
| updates    | record id u64, sequence u64           | record type u8, body (append order)     |
| slots      | record id u64, record type u8, key    | sequence u64 of the live replaceable update |
| prepared   | tx id u64                             | a prepared transaction (prepared.py)    |
| meta       | b"format", b"next_sequence"           | FORMAT_TAG, u64                         |
"""
from __future__ import annotations

import struct

LOCK_FILE = "store.lock"
DATA_FILE = "data.mdb"                          # LMDB's names in a directory environment
READER_TABLE_FILE = "lock.mdb"
NEW_DATA_FILE = "data.mdb.new"                  # a new environment until it is synced and renamed (environment.py)
FORMAT_TAG = b"journal_engine.lmdb-record-store/1"

#: the named databases, in the order the store unpacks their handles
DATABASES = (b"records", b"updates", b"slots", b"prepared", b"meta")
#: the meta database's keys
FORMAT_KEY = b"format"
NEXT_SEQUENCE_KEY = b"next_sequence"

#: a record id (records, prepared's tx id, the first 8 bytes of every updates and slots key) and a sequence
RECORD_ID = struct.Struct(">Q")
#: an updates key: record id, sequence
RECORD_ID_SEQUENCE = struct.Struct(">QQ")
#: key and type bytes counted per record in the byte counters (an update's key and its type byte)
ENTRY_OVERHEAD_BYTES = RECORD_ID_SEQUENCE.size + 1
