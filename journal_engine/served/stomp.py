"""STOMP's rules the served broker checks, apart from the frame grammar (``integrations/stomp_frames.py``
reads and writes frames): the version a CONNECT agrees on, the heart-beats it agrees on, and the
error a frame that breaks the protocol gets.
"""
from __future__ import annotations

from ..errors import JournalError
from ..limits import SERVED_HEARTBEAT_MS

__all__ = ["ProtocolError", "VERSIONS", "agreed_version", "agreed_heart_beats", "CLIENT_COMMANDS",
           "SERVER_COMMANDS"]

VERSIONS = ("1.0", "1.1", "1.2")
CLIENT_COMMANDS = frozenset({"CONNECT", "STOMP", "SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN",
                             "COMMIT", "ABORT", "DISCONNECT"})
SERVER_COMMANDS = frozenset({"CONNECTED", "MESSAGE", "RECEIPT", "ERROR"})


class ProtocolError(JournalError, ValueError):
    """A client's frame breaks the STOMP protocol (a command before CONNECT, a missing header, an
    unknown transaction...): answered with an ERROR frame whose ``message`` is this text, then the
    connection closes; the server and its other connections go on."""


def agreed_version(headers: dict[str, str]) -> str:
    """The highest version both sides speak: of the CONNECT's ``accept-version`` (none: 1.0).
    ProtocolError when none is common."""
    offered = headers.get("accept-version")
    if offered is None:
        return "1.0"
    common = [version for version in VERSIONS if version in {part.strip() for part in offered.split(",")}]
    if not common:
        raise ProtocolError(f"CONNECT: accept-version {offered[:60]} names no version this server speaks "
                            f"({', '.join(VERSIONS)})")
    return common[-1]


def agreed_heart_beats(headers: dict[str, str]) -> tuple[int, int, str]:
    """From a CONNECT's ``heart-beat:cx,cy``: (how often the server sends one, in ms, 0 never; how
    often the client will, 0 never; the CONNECTED frame's ``heart-beat`` header). The server offers
    SERVED_HEARTBEAT_MS both ways. ProtocolError for a header that is not two whole numbers."""
    value = headers.get("heart-beat", "0,0")
    parts = value.split(",")
    if len(parts) != 2 or not all(part.strip().isascii() and part.strip().isdigit() for part in parts):
        raise ProtocolError(f"CONNECT: heart-beat:{value[:40]} is not two whole numbers of milliseconds (cx,cy)")
    client_sends, client_wants = (int(part) for part in parts)
    server_sends = max(SERVED_HEARTBEAT_MS, client_wants) if client_wants else 0
    client_will = max(client_sends, SERVED_HEARTBEAT_MS) if client_sends else 0
    return server_sends, client_will, f"{SERVED_HEARTBEAT_MS},{SERVED_HEARTBEAT_MS}"
