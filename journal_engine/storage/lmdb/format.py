"""The LMDB store's names on disk (the layout itself: store.py's module text)."""

LOCK_FILE = "store.lock"
DATA_FILE = "data.mdb"                          # LMDB's names in a directory environment
READER_TABLE_FILE = "lock.mdb"
NEW_DATA_FILE = "data.mdb.new"                  # a new environment until it is synced and renamed (below)
FORMAT_TAG = b"journal_engine.lmdb-record-store/1"
