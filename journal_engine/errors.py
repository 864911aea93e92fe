"""The one exception hierarchy of journal_engine, rooted at JournalError.

Operating errors (a damaged file, a full disk, bad configuration) carry where
they happened and a hint; broken invariants are bugs and raise AssertionError.
"""
from __future__ import annotations


class JournalError(Exception):
    """Root of every error journal_engine raises on purpose.

    ``hint`` says what the caller can do about it; it is also appended to the message.
    """

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.hint = hint
        super().__init__(f"{message} (hint: {hint})" if hint else message)


class CorruptRecordError(JournalError, ValueError):
    """A file's bytes do not hold what the format promises.

    ``path``, ``offset`` (bytes from the start of the file) and ``field`` say where, when known;
    the message names them too, so a log line alone locates the damage.
    """

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None,
                 field: str | None = None, hint: str | None = None) -> None:
        self.path = path
        self.offset = offset
        self.field = field
        where = []
        if path is not None:
            where.append(str(path))
        if offset is not None:
            where.append(f"offset {offset}")
        if field is not None:
            where.append(f"field {field}")
        super().__init__(f"{message} [{', '.join(where)}]" if where else message, hint=hint)


class IncompatibleFormatError(CorruptRecordError):
    """A journal file written by another format version of journal_engine."""


class JournalClosedError(JournalError):
    """The journal (or store) was closed, or was never loaded."""


class JournalIOError(JournalError, OSError):
    """An operating-system call on a journal file failed (EIO, EACCES, ...).

    Also an ``OSError`` carrying the ``errno`` and ``filename`` of the failure, so code that
    catches either contract catches it.
    """

    def __init__(self, message: str, *, errno: int | None = None, path: str | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.errno = errno
        self.filename = path
        self.path = path

    def __str__(self) -> str:  # OSError would print "[Errno N] None: filename" once errno is set
        return str(self.args[0]) if self.args else ""


class AddressInUseError(JournalIOError):
    """A server's listening address (host and port) is taken by another program; nothing was created."""


class JournalFailedError(JournalIOError):
    """An fsync or write failed; the journal accepts no more writes until reopened."""

    @classmethod
    def after(cls, what: str, cause: BaseException) -> "JournalFailedError":
        """The error a writer raises once `what` ("write", "sync") failed with `cause`."""
        return cls(f"{what} failed: {cause}", errno=getattr(cause, "errno", None),
                   path=getattr(cause, "filename", None),
                   hint="the journal accepts no more writes; reopen it")


class FileChangedError(CorruptRecordError):
    """A file changed under the process that uses it: another process cut it short (or replaced it)
    while it was mapped or read. ``offset`` is where the cut was met. Raised instead of the SIGBUS
    that a read of a mapped page past a file's new end would kill the interpreter with."""


class FileVanishedError(FileChangedError):
    """A file listed a moment before is gone: another process renamed or deleted it while it was read
    (a live journal's writer compacting or recycling it, when an inspection reads beside it)."""


class JournalLockedError(JournalError):
    """Another Journal in this or another process holds the directory; ``holder_pid`` is that
    process's id when the holder wrote it (the message names it too)."""

    holder_pid: int | None = None


class ConfigError(JournalError, ValueError):
    """A configuration field has a value it cannot take.

    ``field`` names the argument or configuration element, ``value`` is what it was given; ``line``
    (1-based, None when not from a file) is where a configuration file says it.
    """

    def __init__(self, field: str, value: object, problem: str, *, hint: str | None = None,
                 line: int | None = None) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        self.line = line
        where = f" at line {line}" if line is not None else ""
        super().__init__(f"{field}={value!r}{where}: {problem}", hint=hint)


class SelectorError(ConfigError):
    """A JMS selector (queue filter) that does not parse, or asks for what no message can give.

    ``column`` is 1-based (when the selector ends too early, the column just past its end);
    ``token`` is the offending token as written (None at the end of the text).
    """

    def __init__(self, selector: str, problem: str, *, column: int, token: str | None) -> None:
        self.selector = selector
        self.column = column
        self.token = token
        where = f"at column {column}, " + (f"token {token!r}" if token is not None else "end of selector")
        super().__init__("selector", selector, f"{problem} ({where})")


class RecordTooLargeError(JournalError, ValueError):
    """A record does not fit in one journal file."""


class StoreFullError(JournalIOError):
    """The disk (or the LMDB map) is full; nothing already durable was lost."""


class UnknownRecordError(JournalError, KeyError):
    """An update or delete named a record id that is not live."""

    @classmethod
    def of_reference(cls, queue_id: int, message_id: int) -> "UnknownRecordError":
        """A message store call named a reference (queue, message) that is not live."""
        return cls(f"no live reference of message {message_id} on queue {queue_id}; "
                   "store_reference() it first (or it was acknowledged or deleted)")

    @classmethod
    def of_message(cls, message_id: int) -> "UnknownRecordError":
        """A reference was added for a message that is not live: the message record comes first."""
        return cls(f"message {message_id} is not live in the journal; a reference needs its message")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class DuplicateRecordError(JournalError, ValueError):
    """An add named a record id that is already live."""


class UnknownTransactionError(JournalError, KeyError):
    """A commit, prepare or rollback named a transaction with no records."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class MessageStateError(JournalError, ValueError):
    """A message was acknowledged or rolled back when its state does not allow it: twice, by a consumer
    it was not delivered to, after its consumer or session closed, or outside a transaction that needs
    one. Nothing was changed."""


class DuplicateIdError(JournalError):
    """A transacted session sent a message whose duplicate id (``_AMQ_DUPL_ID``; ``_HQ_DUPL_ID`` in the
    HornetQ dialect) its address had already seen: as in Artemis, the transaction became rollback-only,
    and its commit rolled it back. ``duplicate_id`` and ``address`` name the first such message."""

    def __init__(self, address: str, duplicate_id: bytes) -> None:
        self.address = address
        self.duplicate_id = duplicate_id
        super().__init__(f"duplicate id {duplicate_id!r} was already sent to address {address!r}: the "
                         "transaction is rolled back, nothing of it was stored",
                         hint="the message was sent before (a resend after a lost reply); begin the "
                              "transaction again without it")


class UnknownQueueError(ConfigError, KeyError):
    """A queue name that the broker does not have."""

    def __init__(self, name: object, *, hint: str | None = None) -> None:
        super().__init__("queue", name, "no such queue", hint=hint or "create_queue() it first; "
                         "broker.queue_names() lists the queues")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class QueueExistsError(ConfigError):
    """create_queue() named a queue that already exists."""


class StompFrameError(JournalError, ValueError):
    """A client's frame breaks STOMP's grammar or a limit (limits.py, ``STOMP_*``); the served broker
    answers with an ERROR frame whose ``message`` is this error's text, then closes the connection."""
