"""journal_engine: a Cython-accelerated persistent journal for message brokers.

``IMPLEMENTATION`` is "cython" when the compiled core is in use, "python" when
the Python twin runs (forced by JOURNAL_ENGINE_IMPLEMENTATION=python).
"""
from ._impl import IMPLEMENTATION, RecordInfo
from .errors import (ConfigError, CorruptRecordError, DuplicateRecordError, FileChangedError, FileVanishedError,
                     IncompatibleFormatError, JournalClosedError, JournalError, JournalFailedError, JournalLockedError,
                     RecordTooLargeError, StoreFullError, UnknownRecordError, UnknownTransactionError)
from .record_format import RecordKind
from .storage.journal.journal import Journal
from .storage.protocol import LoadReport, LoadResult, PreparedTransaction, TransactionRecord
from .message_store import MessageStore, RecordType, RecoveredReference, RecoveredState, StoredMessage, StoredQueue
from .broker.selector import Selector, SelectorError
from .broker.artemis.address_settings import AddressSettings, AddressSettingsRepository, HierarchicalRepository
from .broker.broker import Broker
from .broker.classic.policy import ClassicRedeliveryPolicy
from .broker.classic.config import ClassicBrokerConfig
from .broker.clock import ManualClock, WallClock
from .broker.consumer import Consumer
from .broker.message import Message
from .broker.queue import QueueInfo
from .broker.session import Session
from .broker.dead_letter import DeadLetterReason
from .broker.redrive import RedriveResult
from .errors import DuplicateIdError, MessageStateError, QueueExistsError, UnknownQueueError
from .message_store.message_store import StoreTransaction
from . import config, wildcard
from .config import BrokerConfig

__version__ = "0.1.0"

__all__ = [
    "IMPLEMENTATION", "Journal", "LoadResult", "LoadReport", "RecordInfo", "PreparedTransaction",
    "TransactionRecord", "RecordKind",
    "JournalError", "CorruptRecordError", "FileChangedError", "FileVanishedError", "IncompatibleFormatError", "JournalClosedError", "JournalFailedError",
    "JournalLockedError", "ConfigError", "RecordTooLargeError", "StoreFullError", "UnknownRecordError",
    "DuplicateRecordError", "UnknownTransactionError",
    "MessageStore", "RecoveredState", "RecoveredReference", "StoredMessage", "StoredQueue", "RecordType",
    "AddressSettings", "AddressSettingsRepository", "HierarchicalRepository", "Selector", "SelectorError", "wildcard",
    "config", "BrokerConfig",
    "Broker", "ClassicRedeliveryPolicy", "ClassicBrokerConfig", "ManualClock", "WallClock", "Consumer", "Message", "QueueInfo", "Session", "StoreTransaction",
    "MessageStateError", "QueueExistsError", "UnknownQueueError", "DuplicateIdError", "DeadLetterReason",
    "RedriveResult",
]
