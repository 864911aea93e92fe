"""The message store: messages, queue references, acknowledgements, delivery counts and
scheduled redeliveries, kept in journals with Artemis's record types (docs/message-store.md).
"""
from .message_store import MessageStore, RecoveredReference, RecoveredState, StoreTransaction
from .records import RecordType, StoredMessage, StoredQueue

__all__ = ["MessageStore", "RecoveredState", "RecoveredReference", "StoredMessage", "StoredQueue", "RecordType",
           "StoreTransaction"]
