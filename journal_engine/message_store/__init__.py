"""The message store: messages, queue references, acknowledgements, delivery counts and
scheduled redeliveries, kept in journals with Artemis's record types (docs/message-store.md).
"""
from .message_store import DuplicateIdEntry, MessageStore, RecoveredReference, RecoveredState, StoreTransaction
from ..record_format import RecordType, StoredMessage, StoredQueue
from ..storage.protocol import RecordStore
from ..storage.directory_kind import stored_backend

__all__ = ["MessageStore", "RecoveredState", "RecoveredReference", "StoredMessage", "StoredQueue", "RecordType",
           "StoreTransaction", "DuplicateIdEntry", "RecordStore", "LmdbRecordStore", "stored_backend"]


def __getattr__(name: str):
    # the LMDB backend imports the optional lmdb package: only when it is asked for
    if name == "LmdbRecordStore":
        from ..storage.lmdb.store import LmdbRecordStore
        return LmdbRecordStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
