"""STOMP frames read from a byte stream and written to one, for ``journal-engine serve-stomp``.

Why not coilmq's ``FrameBuffer``: it parses from whatever one ``recv`` returned as if it held whole
lines, so a header line cut by a TCP read boundary (``destin`` | ``ation:/queue/a``) makes
``parse_headers`` raise ``ValueError`` out of the request handler and drops the connection with
everything still unread in it; a header value holding ``:`` does the same; a frame without its NUL
yet raises ``BodyNotTerminated``; heart-beat EOLs before a command stall it; its buffer is never
trimmed. Its ``Frame.pack`` counts a text body's characters as its ``content-length`` and escapes no
header. :class:`FrameReader` reads frames from any split of the stream, STOMP 1.0, 1.1 and 1.2
(heart-beat EOLs, CRLF line ends, header escapes, the first of repeated headers, ``content-length``
bodies holding NULs), and refuses what breaks the grammar or the limits with :class:`StompFrameError`,
which the server answers with an ERROR frame before it closes the connection. :func:`pack` writes a
frame with a byte-exact ``content-length`` and escaped headers.

The reader and the header writer are compiled (``pyx/journal_engine/_stomp_codec.pyx``, the Python
twin ``_twin/stomp_codec.py``): they run for every frame the served broker reads or writes. The
module imports no broker: the served broker (``journal_engine.served``) reads its frames as
:class:`StompFrame`, coilmq's request handler as coilmq's ``Frame`` (``FrameReader(frame_type=...)``).
"""
from __future__ import annotations

from .._impl import UNESCAPED_COMMANDS, FrameReader, StompFrame, header_value
from ..errors import StompFrameError

__all__ = ["StompFrameError", "StompFrame", "FrameReader", "pack", "header_value"]

_NUL = b"\x00"


def pack(frame, *, escapes: bool) -> bytes:
    """The bytes of ``frame``: its headers (escaped when ``escapes``, except on CONNECTED), a
    ``content-length`` counting the body's bytes (a str body is written as UTF-8), the body, NUL."""
    body = frame.body
    if isinstance(body, str):
        body = body.encode("utf-8")
    elif body is None:
        body = b""
    escape = escapes and frame.cmd not in UNESCAPED_COMMANDS
    parts = [str(frame.cmd).encode("utf-8")]
    for name, value in frame.headers.items():
        if name != "content-length":
            parts += (b"\n", header_value(str(name), escape), b":", header_value(str(value), escape))
    parts += (b"\ncontent-length:", str(len(body)).encode(), b"\n\n", bytes(body), _NUL)
    return b"".join(parts)
