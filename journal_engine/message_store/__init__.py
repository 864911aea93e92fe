"""The message store: messages, queue references, acknowledgements, delivery counts and
scheduled redeliveries, kept in journals with Artemis's record types (docs/message-store.md).
"""
from .message_store import MessageStore, RecoveredReference, RecoveredState, StoreTransaction
from ..record_format import RecordType, StoredMessage, StoredQueue
from .interface import RecordStore, stored_backend

__all__ = ["MessageStore", "RecoveredState", "RecoveredReference", "StoredMessage", "StoredQueue", "RecordType",
           "StoreTransaction", "RecordStore", "LmdbRecordStore", "stored_backend"]


def __getattr__(name: str):
    # the LMDB backend imports the optional lmdb package: only when it is asked for
    if name == "LmdbRecordStore":
        from .lmdb_store import LmdbRecordStore
        return LmdbRecordStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
