"""Type stub of the broker's compiled per-message objects (pyx/journal_engine/_broker_objects.pyx;
twin: _twin/broker_objects.py)."""
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, final

from typing_extensions import disjoint_base

READY: Final[int]
SCHEDULED: Final[int]
DELIVERING: Final[int]
DONE: Final[int]
ACKED_IN_TX: Final[int]

@disjoint_base
class MessageData:
    """One message's content and its bookkeeping: how many references it has, and how many of them
    the message store holds (the store deletes the message when the last of those is acknowledged)."""

    message_id: int
    address: str
    properties: dict[str, Any] | None
    durable: bool
    expiration: int
    routing_type: str | None
    priority: int
    durable_refs: int
    public_id: int
    def __init__(self, message_id: int, address: str, body: bytes, properties: dict[str, Any] | None,
                 durable: bool, expiration: int, routing_type: str | None, priority: int = ...) -> None: ...
    @property
    def body(self) -> bytes:
        """The body; a recovered message's is read from the store when first asked for (its delivery)."""
    @body.setter
    def body(self, value: bytes) -> None: ...
    def set_property(self, name: str, value: Any) -> None:
        """Set one property in a new dict (deliveries already handed out keep the old one)."""
    def stored_properties(self) -> dict[str, Any] | None:
        """The properties as the store keeps them."""
    def properties_view(self) -> Mapping[str, Any]:
        """The properties, read-only."""
    def headers(self) -> dict[str, Any]:
        """The header fields a filter may use."""

@disjoint_base
class Reference:
    """A message on one queue: its own delivery count, scheduled time and state."""

    data: MessageData
    queue: Any
    delivery_count: int
    state: int
    delivery: Message | None
    failures: list[tuple[int, str]] | None
    def __init__(self, data: MessageData, queue: Any, delivery_count: int = 0) -> None: ...
    def dispatch(self) -> None:
        """READY -> DELIVERING: the delivery count up by one."""
    def undo_dispatch(self) -> None:
        """DELIVERING -> READY: a dispatch taken back (the delivery count down by one)."""
    def leave_consumer(self) -> None:
        """No longer held by a consumer: its queue counts one delivering reference less."""
    def back_to_ready(self) -> None:
        """-> READY: back in its queue at once."""
    def schedule(self) -> None:
        """-> SCHEDULED: in the timer heap until due."""
    def fall_due(self) -> None:
        """SCHEDULED -> READY: its time came."""
    def acknowledge_in_transaction(self) -> None:
        """DELIVERING -> ACKED_IN_TX."""
    def back_to_delivering(self) -> None:
        """ACKED_IN_TX -> DELIVERING: held by its consumer again (a STOMP ABORT)."""
    def undo_transacted_ack(self) -> None:
        """An acknowledgement in a transaction that rolled back."""
    def leave_queue(self) -> None:
        """-> DONE: gone for good, standing for no delivery."""
    def record_failure(self, now_ms: int, reason: str) -> None:
        """Note a failed delivery."""

@disjoint_base
class Message:
    """One delivery of a message (or a browsed copy, whose delivery_count is 0)."""

    delivery_count: int
    queue: str
    def __init__(self, data: MessageData, delivery_count: int, queue: str, ref: Reference | None = None,
                 owner: Any = None) -> None: ...
    @property
    def message_id(self) -> int: ...
    @property
    def address(self) -> str: ...
    @property
    def body(self) -> bytes: ...
    @property
    def properties(self) -> Mapping[str, Any]: ...
    @property
    def durable(self) -> bool: ...
    @property
    def expiration(self) -> int: ...
    @property
    def routing_type(self) -> str | None: ...
    @property
    def priority(self) -> int: ...
    @property
    def redelivered(self) -> bool: ...

def delivery_of(message: Message) -> tuple[Reference | None, Any]:
    """(reference, consumer) of the delivery ``message`` stands for; (None, None) for a browsed copy."""

def recovered_datas(message_ids: Iterable[int], fields: Iterable[tuple[Any, ...]], durable_refs: int,
                    source: Any = None) -> list[MessageData]:
    """The MessageData of recovered messages, from their ids and stored fields (address, body,
    properties, durable, expiration, routing type), each with ``durable_refs`` set; a body None is
    read from ``source`` (``source.body(message_id)``) when first asked for."""

def split_by_level(message_ids: Any, counts: Any, priorities: Any, level_of: bytes,
                   rows: dict[int, int]) -> dict[int, tuple[array[int], array[int]]]: ...
def ready_references(datas: Iterable[MessageData], queue: Any, delivery_counts: Iterable[int]) -> list[Reference]:
    """A READY Reference on ``queue`` of each MessageData, with its recovered delivery count."""

@final
class ReadyQueue:
    """A recovered queue's ready references, made a chunk at a time as its head reaches them; the
    deque operations the broker uses, as on a deque holding every reference."""

    def __init__(self, make: Callable[[int, int], list[Reference]], rows: int, chunk: int = ...) -> None: ...
    @property
    def unmade(self) -> int:
        """Recovered rows whose References are not made yet."""
    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...
    def popleft(self) -> Reference: ...
    def append(self, ref: Reference) -> None: ...
    def appendleft(self, ref: Reference) -> None: ...
    def extendleft(self, refs: Iterable[Reference]) -> None: ...
    def clear(self) -> None: ...
    def insert(self, index: int, ref: Reference) -> None: ...
    def __getitem__(self, index: int, /) -> Reference: ...
    def __iter__(self) -> Iterator[Reference]: ...
