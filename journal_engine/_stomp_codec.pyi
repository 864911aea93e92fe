"""Type stub of the compiled STOMP codec (pyx/journal_engine/_stomp_codec.pyx; twin: _twin/stomp_codec.py).

The served broker's frame reader and its MESSAGE frame writer; integrations/stomp_frames.py is the
module users import them from.
"""
from collections.abc import Iterator
from typing import Any

from typing_extensions import disjoint_base

__all__ = ["StompFrame", "FrameReader", "header_value", "message_frame_bytes", "UNESCAPED_COMMANDS"]

UNESCAPED_COMMANDS: frozenset[str]

@disjoint_base
class StompFrame:
    """A frame as read: ``cmd``, ``headers`` (the first of repeated ones), ``body``."""
    cmd: str
    headers: dict[str, str]
    body: bytes
    def __init__(self, cmd: str, headers: dict[str, str] | None = None, body: bytes = b"") -> None: ...

@disjoint_base
class FrameReader:
    """Frames from a byte stream fed in pieces of any size."""
    escapes: bool
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Keywords only: ``frame_bytes_max`` (STOMP_FRAME_BYTES_MAX), ``headers_max``
        (STOMP_HEADERS_MAX), ``frame_type`` (StompFrame; called as ``frame_type(cmd, headers=, body=)``)."""
    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet part of a returned frame."""
    def feed(self, data: bytes) -> Iterator[Any]:
        """Buffer ``data``; yield each frame completed, one at a time."""

def header_value(value: str, escapes: bool) -> bytes:
    """A header value as ``pack`` writes it: escaped (STOMP 1.1, 1.2) or with line breaks as spaces (1.0)."""

def message_frame_bytes(message: Any, destination: str, subscription_id: str, ack: bool, escapes: bool,
                        kept_prefix: str, set_on_the_way_out: frozenset[str], original_keys: tuple[str, ...]) -> bytes:
    """The MESSAGE frame of a kept message (served/messages.py's ``message_frame``)."""
