"""STOMP frames read from a byte stream, and the MESSAGE frame of a kept message written: the Python
twin of the compiled ``_stomp_codec`` (pyx/journal_engine/_stomp_codec.pyx), the served broker's
hottest code after the journal. ``integrations/stomp_frames.py`` says what the reader accepts and
why; the two implementations give the same frames and the same errors for every stream
(tests/integrations/test_stomp_codec_parity.py).
"""
from __future__ import annotations

import re
from collections.abc import Iterator

from ..errors import StompFrameError
from ..limits import STOMP_FRAME_BYTES_MAX, STOMP_HEADERS_MAX

__all__ = ["StompFrame", "FrameReader", "header_value", "message_frame_bytes", "UNESCAPED_COMMANDS"]

CONNECT = "CONNECT"
CONNECTED = "CONNECTED"

_EOL = b"\n"
_NUL = b"\x00"
# STOMP 1.1 escapes (1.2 adds \r); an undefined escape is a fatal protocol error (1.2 spec, "Value Encoding")
_UNESCAPES = {"n": "\n", "c": ":", "\\": "\\", "r": "\r"}
_ESCAPE_SEQUENCE = re.compile(r"\\(.?)", re.DOTALL)
_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c", "\r": "\\r"})
# CONNECT and CONNECTED carry no escapes: they come before the version is agreed (1.2 spec)
UNESCAPED_COMMANDS = frozenset({CONNECT, CONNECTED, "STOMP"})


class StompFrame:
    """A frame as read: ``cmd`` (the command), ``headers`` (str to str, the first of repeated ones),
    ``body`` (bytes). coilmq's ``Frame`` has the same three attributes, so :func:`pack` writes either."""

    __slots__ = ("cmd", "headers", "body")

    def __init__(self, cmd: str, headers: dict | None = None, body: bytes = b"") -> None:
        self.cmd = cmd
        self.headers = headers if headers is not None else {}
        self.body = body

    def __repr__(self) -> str:
        return f"StompFrame({self.cmd!r}, {self.headers!r}, {len(self.body)} bytes)"


class FrameReader:
    """Frames from a byte stream fed in pieces of any size.

    ``feed(data)`` yields the frames completed so far, in order, and keeps the rest. ``escapes``
    (False until the connection agreed on STOMP 1.1 or 1.2) decodes header escapes. A frame of more
    than ``frame_bytes_max`` bytes is refused as soon as that many are buffered without its end.
    ``frame_type`` is called as ``frame_type(command, headers=..., body=...)`` for each frame.
    """

    def __init__(self, *, frame_bytes_max: int = STOMP_FRAME_BYTES_MAX, headers_max: int = STOMP_HEADERS_MAX,
                 frame_type=StompFrame) -> None:
        self.escapes = False
        self._frame_type = frame_type
        self._frame_bytes_max = frame_bytes_max
        self._headers_max = headers_max
        self._buffer = bytearray()
        # the frame whose headers are read and whose body is awaited: (command, headers, body start,
        # content-length or None); and where the search for its NUL goes on
        self._pending: tuple[str, dict[str, str], int, int | None] | None = None
        # how far the search for the end of the headers (or, once they are read, for the body's NUL)
        # has looked: each byte is looked at once, however the stream is split
        self._searched = 0
        self._start = 0                 # where the frame being read begins (bytes before it are read)
        self._command_checked = False

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet part of a returned frame."""
        return len(self._buffer) - self._start

    def feed(self, data: bytes) -> Iterator:
        """Buffer ``data``; yield each frame completed, one at a time, so that the frames before a
        broken one are handled before its StompFrameError is raised."""
        self._buffer += data
        try:
            while (frame := self._next_frame()) is not None:
                yield frame
        finally:
            self._compact()

    def _compact(self) -> None:
        """Drop the bytes of the frames returned, once a feed is done: dropping them frame by frame
        moved the rest of the buffer each time (quadratic in the frames one read holds)."""
        start = self._start
        if start:
            del self._buffer[:start]
            self._start = 0
            self._searched = max(0, self._searched - start)
            if self._pending is not None:
                command, headers, body_start, length = self._pending
                self._pending = (command, headers, body_start - start, length)

    def _next_frame(self):
        buffer = self._buffer
        start = self._start             # where the frame being read begins; positions are the buffer's
        if self._pending is None:
            size = len(buffer)
            while start < size and buffer[start] in b"\r\n":    # heart-beats between frames
                start += 1
            self._start = start
            searched = max(self._searched, start)
            end = _end_of_headers(buffer, max(searched - 2, start))    # an empty line is 2 or 3 bytes
            if end is None:
                # refuse garbage at once rather than wait for an empty line that may never come
                if not self._command_checked:
                    line_end = buffer.find(_EOL, searched)
                    if line_end < 0:        # binary garbage (a TLS hello) holds a NUL before any EOL
                        line_end = buffer.find(_NUL, searched)
                    if line_end >= 0:
                        _command(bytes(buffer[start:line_end]))
                        self._command_checked = True
                if buffer.find(_NUL, searched) >= 0:
                    raise StompFrameError("a frame ends (NUL) before the empty line that ends its headers")
                self._searched = size
                self._check_size(size - start)
                return None
            header_end, body_start = end
            self._check_size(body_start - start)
            command, headers = self._headers(bytes(buffer[start:header_end]))
            self._pending = (command, headers, body_start, self._content_length(headers))
            self._searched = body_start
        command, headers, body_start, length = self._pending
        if length is not None:
            self._check_size(body_start + length + 1 - start)
            if len(buffer) <= body_start + length:
                return None
            if buffer[body_start + length] != 0:
                raise StompFrameError(f"{command} frame: the byte after its content-length of {length} is not the "
                                      "NUL that ends a frame (the body is longer than content-length says)")
            end = body_start + length
        else:
            end = buffer.find(_NUL, self._searched)
            if end < 0:
                self._searched = len(buffer)
                self._check_size(len(buffer) - start)
                return None
            self._check_size(end + 1 - start)
        body = bytes(buffer[body_start:end])
        self._start = self._searched = end + 1
        self._pending = None
        self._command_checked = False
        return self._frame_type(command, headers=headers, body=body)

    def _headers(self, block: bytes) -> tuple[str, dict[str, str]]:
        first, _, rest = block.partition(_EOL)
        command = _command(first)
        if b"\x00" in rest:
            raise StompFrameError(f"{command} frame: a NUL among its headers")
        try:
            text = rest.decode("utf-8")
        except UnicodeDecodeError as error:
            raise StompFrameError(f"{command} frame: its headers are not UTF-8 (byte {error.start})") from None
        lines = [line[:-1] if line.endswith("\r") else line for line in text.split("\n")] if rest else []
        if len(lines) > self._headers_max:
            raise StompFrameError(f"{command} frame has {len(lines)} headers, more than {self._headers_max} "
                                  "(STOMP_HEADERS_MAX)")
        escapes = self.escapes and command not in UNESCAPED_COMMANDS
        headers: dict[str, str] = {}
        for line in lines:
            name, colon, value = line.partition(":")
            if not colon:
                raise StompFrameError(f"{command} frame: the header line {line[:80]!r} has no colon")
            if escapes:
                name, value = _unescape(name, command), _unescape(value, command)
            headers.setdefault(name, value)         # a repeated header: the first one counts
        return command, headers

    @staticmethod
    def _content_length(headers: dict[str, str]) -> int | None:
        value = headers.get("content-length")
        if value is None:
            return None
        value = value.strip()
        if not (value.isascii() and value.isdigit()):
            raise StompFrameError(f"content-length {value[:40]!r} is not a number of bytes")
        return int(value)

    def _check_size(self, size: int) -> None:
        if size > self._frame_bytes_max:
            raise StompFrameError(f"a frame of more than {self._frame_bytes_max} bytes (STOMP_FRAME_BYTES_MAX)")


def _command(line: bytes) -> str:
    """The command of a frame's first line (a CR before its LF dropped); StompFrameError unless it is
    a word of ASCII letters, as every STOMP command is."""
    if line.endswith(b"\r"):
        line = line[:-1]
    if not (line.isascii() and line.isalpha()):
        raise StompFrameError(f"the frame's first line, {_shown(line)}, is not a STOMP command (a word of "
                              "letters such as CONNECT or SEND)" + (": is the client speaking TLS?"
                                                                   if line[:2] == b"\x16\x03" else ""))
    return line.decode("ascii")


def _shown(data: bytes) -> str:
    """Bytes a client sent, for an ERROR frame's message: quoted text when they are printable ASCII,
    else their first bytes in hex (a Python bytes repr says little to a client in another language)."""
    head = data[:40]
    if head.isascii() and head.decode("ascii").isprintable():
        return f'"{head.decode("ascii")}"' + ("..." if len(data) > 40 else "")
    return "bytes " + data[:16].hex(" ") + (" ..." if len(data) > 16 else "")


def _end_of_headers(buffer: bytearray, start: int = 0) -> tuple[int, int] | None:
    """Where the header block ends (the EOL of its last line) and the body starts: after the first
    empty line (LF LF or LF CR LF) at or after ``start``. None until it is buffered."""
    index = buffer.find(b"\n\n", start)
    # an LF CR LF ending sooner lies before that LF LF: looking further would read the whole buffer
    # for each frame (quadratic in the frames one read holds)
    crlf = buffer.find(b"\n\r\n", start, index + 2 if index >= 0 else len(buffer))
    if crlf >= 0 and (index < 0 or crlf < index):
        return crlf, crlf + 3
    if index >= 0:
        return index, index + 2
    return None


def _unescape(text: str, command: str) -> str:
    if "\\" not in text:
        return text

    def one(match: re.Match) -> str:
        escaped = match.group(1)
        if escaped not in _UNESCAPES:
            raise StompFrameError(f"{command} frame: undefined escape \\{escaped} in a header")
        return _UNESCAPES[escaped]
    return _ESCAPE_SEQUENCE.sub(one, text)


def header_value(value: str, escapes: bool) -> bytes:
    """A header value as :func:`pack` writes it: escaped (STOMP 1.1, 1.2) or with line breaks as spaces (1.0)."""
    if escapes:
        return value.translate(_ESCAPES).encode("utf-8")
    return value.replace("\n", " ").replace("\r", " ").encode("utf-8")



def message_frame_bytes(message, destination: str, subscription_id: str, ack: bool, escapes: bool, kept_prefix: str,
                        set_on_the_way_out: frozenset, original_keys: tuple) -> bytes:
    """The MESSAGE frame of ``message`` (a broker Message) from ``destination`` to the subscription
    ``subscription_id`` (served/messages.py's ``message_frame`` says which headers, and keeps the
    names): each property named ``kept_prefix + header`` as that header but those in
    ``set_on_the_way_out``, ``original-destination`` from the first of ``original_keys`` present
    when it is not ``destination``, ``message-id``, ``delivery-count``, ``redelivered``,
    ``subscription``, ``ack`` when ``ack``, ``content-length``; escaped when ``escapes``."""
    properties = message.properties
    start = len(kept_prefix)
    lines = [b"MESSAGE\ndestination:", header_value(destination, escapes)]
    original = None
    if properties:
        for name, value in properties.items():
            if name.startswith(kept_prefix):
                key = name[start:]
                if key not in set_on_the_way_out:
                    lines += (b"\n", header_value(key, escapes), b":", header_value(str(value), escapes))
            elif original is None and name in original_keys:
                original = value
    if original is not None and original != destination:
        lines += (b"\noriginal-destination:", header_value(str(original), escapes))
    message_id = str(message.message_id).encode()
    lines += (b"\nmessage-id:", message_id, b"\ndelivery-count:", str(message.delivery_count).encode())
    if message.redelivered:
        lines.append(b"\nredelivered:true")
    lines += (b"\nsubscription:", header_value(subscription_id, escapes))
    if ack:
        lines += (b"\nack:", message_id)
    body = message.body
    lines += (b"\ncontent-length:", str(len(body)).encode(), b"\n\n", body, b"\x00")
    return b"".join(lines)
