# cython: language_level=3
"""STOMP frames read from a byte stream, and the MESSAGE frame of a kept message written: the served
broker's hottest code after the journal, compiled. The Python twin is journal_engine/_twin/stomp_codec.py;
journal_engine/integrations/stomp_frames.py says what the reader accepts and why. Both give the same
frames and the same errors for every stream (tests/integrations/test_stomp_codec_parity.py).

The reader looks at each byte of the stream once, in C: heart-beat EOLs, the empty line that ends
the headers (LF LF or LF CR LF), each header line's colon, a body's NUL. Python objects are made
only for what a frame hands out (its command, header names and values, body); the error paths call
the twin's wording through the same Python code (they are rare and must read the same).
"""
import re

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_SetDefault
from cpython.unicode cimport PyUnicode_DecodeASCII, PyUnicode_DecodeUTF8
from libc.string cimport memchr

from .errors import StompFrameError
from .limits import STOMP_FRAME_BYTES_MAX, STOMP_HEADERS_MAX

__all__ = ["StompFrame", "FrameReader", "header_value", "message_frame_bytes", "UNESCAPED_COMMANDS"]

# CONNECT and CONNECTED carry no escapes: they come before the version is agreed (1.2 spec)
UNESCAPED_COMMANDS = frozenset({"CONNECT", "CONNECTED", "STOMP"})
# STOMP 1.1 escapes (1.2 adds \r); an undefined escape is a fatal protocol error (1.2 spec, "Value Encoding")
_UNESCAPES = {"n": "\n", "c": ":", "\\": "\\", "r": "\r"}
_ESCAPE_SEQUENCE = re.compile(r"\\(.?)", re.DOTALL)
_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c", "\r": "\\r"})


cdef class StompFrame:
    """A frame as read: ``cmd`` (the command), ``headers`` (str to str, the first of repeated ones),
    ``body`` (bytes). coilmq's ``Frame`` has the same three attributes, so ``pack`` writes either."""

    cdef public object cmd
    cdef public object headers
    cdef public object body

    def __init__(self, cmd, headers=None, body=b""):
        self.cmd = cmd
        self.headers = headers if headers is not None else {}
        self.body = body

    def __repr__(self):
        return f"StompFrame({self.cmd!r}, {self.headers!r}, {len(self.body)} bytes)"


cdef inline Py_ssize_t _find(const char* data, Py_ssize_t size, char byte, Py_ssize_t start) noexcept:
    """Where ``byte`` first is at or after ``start``; -1 if nowhere."""
    if start >= size:
        return -1
    cdef const char* found = <const char*>memchr(data + start, byte, size - start)
    return -1 if found == NULL else found - data


cdef inline bint _end_of_headers(const char* data, Py_ssize_t size, Py_ssize_t start, Py_ssize_t* header_end,
                                 Py_ssize_t* body_start) noexcept:
    """The first empty line at or after ``start`` (LF LF or LF CR LF): where the header block ends
    (its LF) and the body starts. False until it is buffered."""
    cdef Py_ssize_t at = _find(data, size, 10, start)
    while at >= 0:
        if at + 1 < size and data[at + 1] == 10:
            header_end[0] = at
            body_start[0] = at + 2
            return True
        if at + 2 < size and data[at + 1] == 13 and data[at + 2] == 10:
            header_end[0] = at
            body_start[0] = at + 3
            return True
        at = _find(data, size, 10, at + 1)
    return False


cdef inline bint _is_ascii(const char* data, Py_ssize_t size) noexcept:
    cdef Py_ssize_t i
    for i in range(size):
        if <unsigned char>data[i] >= 0x80:
            return False
    return True


cdef str _command(const char* data, Py_ssize_t size):
    """The command of a frame's first line (a CR before its LF dropped); StompFrameError unless it is
    a word of ASCII letters, as every STOMP command is."""
    cdef Py_ssize_t i
    cdef unsigned char c
    if size and data[size - 1] == 13:
        size -= 1
    cdef bint word = size > 0
    for i in range(size):
        c = <unsigned char>data[i]
        if not ((65 <= c <= 90) or (97 <= c <= 122)):
            word = False
            break
    if not word:
        line = PyBytes_FromStringAndSize(data, size)
        raise StompFrameError(f"the frame's first line, {_shown(line)}, is not a STOMP command (a word of "
                              "letters such as CONNECT or SEND)" + (": is the client speaking TLS?"
                                                                   if line[:2] == b"\x16\x03" else ""))
    return PyUnicode_DecodeASCII(data, size, NULL)


def _shown(bytes data):
    """Bytes a client sent, for an ERROR frame's message: quoted text when they are printable ASCII,
    else their first bytes in hex (a Python bytes repr says little to a client in another language)."""
    head = data[:40]
    if head.isascii() and head.decode("ascii").isprintable():
        return f'"{head.decode("ascii")}"' + ("..." if len(data) > 40 else "")
    return "bytes " + data[:16].hex(" ") + (" ..." if len(data) > 16 else "")


def _unescape(str text, str command):
    if "\\" not in text:
        return text

    def one(match):
        escaped = match.group(1)
        if escaped not in _UNESCAPES:
            raise StompFrameError(f"{command} frame: undefined escape \\{escaped} in a header")
        return _UNESCAPES[escaped]
    return _ESCAPE_SEQUENCE.sub(one, text)


cdef class FrameReader:
    """Frames from a byte stream fed in pieces of any size.

    ``feed(data)`` yields the frames completed so far, in order, and keeps the rest. ``escapes``
    (False until the connection agreed on STOMP 1.1 or 1.2) decodes header escapes. A frame of more
    than ``frame_bytes_max`` bytes is refused as soon as that many are buffered without its end.
    ``frame_type`` is called as ``frame_type(command, headers=..., body=...)`` for each frame.
    """

    cdef public bint escapes
    cdef object _frame_type
    cdef Py_ssize_t _frame_bytes_max
    cdef Py_ssize_t _headers_max
    cdef bytearray _buffer
    # the frame whose headers are read and whose body is awaited
    cdef bint _pending
    cdef str _pending_command
    cdef dict _pending_headers
    cdef Py_ssize_t _pending_body_start
    cdef Py_ssize_t _pending_length     # -1: no content-length, the body ends at its NUL
    # how far the search for the end of the headers (or, once they are read, for the body's NUL) has
    # looked: each byte is looked at once, however the stream is split
    cdef Py_ssize_t _searched
    cdef Py_ssize_t _start               # where the frame being read begins (bytes before it are read)
    cdef bint _command_checked

    def __init__(self, *, frame_bytes_max=STOMP_FRAME_BYTES_MAX, headers_max=STOMP_HEADERS_MAX,
                 frame_type=StompFrame):
        self.escapes = False
        self._frame_type = frame_type
        self._frame_bytes_max = frame_bytes_max
        self._headers_max = headers_max
        self._buffer = bytearray()
        self._pending = False
        self._searched = 0
        self._start = 0
        self._command_checked = False

    @property
    def buffered_bytes(self):
        """Bytes received and not yet part of a returned frame."""
        return len(self._buffer) - self._start

    def feed(self, data):
        """Buffer ``data``; yield each frame completed, one at a time, so that the frames before a
        broken one are handled before its StompFrameError is raised."""
        self._buffer += data
        try:
            while True:
                frame = self._next_frame()
                if frame is None:
                    break
                yield frame
        finally:
            self._compact()

    cdef void _compact(self):
        """Drop the bytes of the frames returned, once a feed is done (bytearray drops a head in
        place, without moving the rest)."""
        cdef Py_ssize_t start = self._start
        if start:
            del self._buffer[:start]
            self._start = 0
            self._searched = max(0, self._searched - start)
            if self._pending:
                self._pending_body_start -= start

    cdef int _check_size(self, Py_ssize_t size) except -1:
        if size > self._frame_bytes_max:
            raise StompFrameError(f"a frame of more than {self._frame_bytes_max} bytes (STOMP_FRAME_BYTES_MAX)")
        return 0

    cdef object _next_frame(self):
        cdef bytearray buffer = self._buffer
        cdef const char* data = PyByteArray_AS_STRING(buffer)
        cdef Py_ssize_t size = PyByteArray_GET_SIZE(buffer)
        cdef Py_ssize_t start = self._start
        cdef Py_ssize_t searched, header_end = 0, body_start = 0, line_end, end, length
        cdef StompFrame frame
        if not self._pending:
            while start < size and (data[start] == 13 or data[start] == 10):    # heart-beats between frames
                start += 1
            self._start = start
            searched = max(self._searched, start)
            if not _end_of_headers(data, size, max(searched - 2, start), &header_end, &body_start):
                # refuse garbage at once rather than wait for an empty line that may never come
                if not self._command_checked:
                    line_end = _find(data, size, 10, searched)
                    if line_end < 0:        # binary garbage (a TLS hello) holds a NUL before any EOL
                        line_end = _find(data, size, 0, searched)
                    if line_end >= 0:
                        _command(data + start, line_end - start)
                        self._command_checked = True
                if _find(data, size, 0, searched) >= 0:
                    raise StompFrameError("a frame ends (NUL) before the empty line that ends its headers")
                self._searched = size
                self._check_size(size - start)
                return None
            self._check_size(body_start - start)
            self._headers(data, start, header_end)
            self._pending_body_start = body_start
            self._pending_length = _content_length(self._pending_headers)
            self._pending = True
            self._searched = body_start
        body_start = self._pending_body_start
        length = self._pending_length
        if length >= 0:
            self._check_size(body_start + length + 1 - start)
            if size <= body_start + length:
                return None
            if data[body_start + length] != 0:
                raise StompFrameError(f"{self._pending_command} frame: the byte after its content-length of {length} "
                                      "is not the NUL that ends a frame (the body is longer than content-length says)")
            end = body_start + length
        else:
            end = _find(data, size, 0, self._searched)
            if end < 0:
                self._searched = size
                self._check_size(size - start)
                return None
            self._check_size(end + 1 - start)
        body = PyBytes_FromStringAndSize(data + body_start, end - body_start)
        self._start = self._searched = end + 1
        self._pending = False
        self._command_checked = False
        command, headers = self._pending_command, self._pending_headers
        self._pending_command = None
        self._pending_headers = None
        if self._frame_type is StompFrame:
            frame = StompFrame.__new__(StompFrame)
            frame.cmd, frame.headers, frame.body = command, headers, body
            return frame
        return self._frame_type(command, headers=headers, body=body)

    cdef int _headers(self, const char* data, Py_ssize_t start, Py_ssize_t end) except -1:
        """The command and headers of the block ``data[start:end]`` into the pending frame."""
        cdef Py_ssize_t first_end = _find(data, end, 10, start)
        cdef Py_ssize_t rest, line, line_end, colon, value_end, lines
        cdef bint escapes
        cdef dict headers = {}
        if first_end < 0:
            first_end = end
        command = _command(data + start, first_end - start)
        rest = first_end + 1
        if rest < end:
            if _find(data, end, 0, rest) >= 0:
                raise StompFrameError(f"{command} frame: a NUL among its headers")
            if not _is_ascii(data + rest, end - rest):
                try:
                    PyBytes_FromStringAndSize(data + rest, end - rest).decode("utf-8")
                except UnicodeDecodeError as error:
                    raise StompFrameError(f"{command} frame: its headers are not UTF-8 (byte {error.start})") from None
            lines = 1
            line = rest
            while True:
                line = _find(data, end, 10, line)
                if line < 0:
                    break
                lines += 1
                line += 1
            if lines > self._headers_max:
                raise StompFrameError(f"{command} frame has {lines} headers, more than {self._headers_max} "
                                      "(STOMP_HEADERS_MAX)")
            escapes = self.escapes and command not in UNESCAPED_COMMANDS
            line = rest
            while line <= end:
                line_end = _find(data, end, 10, line)
                if line_end < 0:
                    line_end = end
                value_end = line_end - 1 if line_end > line and data[line_end - 1] == 13 else line_end
                colon = line
                while colon < value_end and data[colon] != 58:
                    colon += 1
                if colon == value_end:
                    text = PyUnicode_DecodeUTF8(data + line, value_end - line, NULL)
                    raise StompFrameError(f"{command} frame: the header line {text[:80]!r} has no colon")
                name = PyUnicode_DecodeUTF8(data + line, colon - line, NULL)
                value = PyUnicode_DecodeUTF8(data + colon + 1, value_end - colon - 1, NULL)
                if escapes:
                    name, value = _unescape(name, command), _unescape(value, command)
                PyDict_SetDefault(headers, name, value)     # a repeated header: the first one counts
                line = line_end + 1
        self._pending_command = command
        self._pending_headers = headers
        return 0


# a content-length too large for a Py_ssize_t is as good as this one: past every frame limit
cdef Py_ssize_t _LENGTH_PAST_ANY_FRAME = 1 << 60


cdef Py_ssize_t _content_length(dict headers) except -2:
    value = headers.get("content-length")
    if value is None:
        return -1
    value = value.strip()
    if not (value.isascii() and value.isdigit()):
        raise StompFrameError(f"content-length {value[:40]!r} is not a number of bytes")
    length = int(value)
    return length if length < _LENGTH_PAST_ANY_FRAME else _LENGTH_PAST_ANY_FRAME     # refused as too large


cpdef bytes header_value(str value, bint escapes):
    """A header value as ``pack`` writes it: escaped (STOMP 1.1, 1.2) or with line breaks as spaces (1.0)."""
    if escapes:
        return value.translate(_ESCAPES).encode("utf-8")
    return value.replace("\n", " ").replace("\r", " ").encode("utf-8")


cdef inline bytes _escaped(str value, bint escapes):
    """header_value, without the translation for the common value that needs none."""
    cdef Py_UCS4 c
    for c in value:
        if c == "\\" or c == "\n" or c == ":" or c == "\r":
            return header_value(value, escapes)
    return value.encode("utf-8")


def message_frame_bytes(message, str destination, str subscription_id, bint ack, bint escapes, str kept_prefix,
                        frozenset set_on_the_way_out, tuple original_keys):
    """The MESSAGE frame of ``message`` (a broker Message) from ``destination`` to the subscription
    ``subscription_id`` (served/messages.py's ``message_frame`` says which headers, and keeps the
    names): each property named ``kept_prefix + header`` as that header but those in
    ``set_on_the_way_out``, ``original-destination`` from the first of ``original_keys`` present
    when it is not ``destination``, ``message-id``, ``delivery-count``, ``redelivered``,
    ``subscription``, ``ack`` when ``ack``, ``content-length``; escaped when ``escapes``."""
    properties = message.properties
    cdef Py_ssize_t start = len(kept_prefix)
    cdef list lines = [b"MESSAGE\ndestination:", _escaped(destination, escapes)]
    original = None
    if properties:
        for name, value in properties.items():
            if name.startswith(kept_prefix):
                key = name[start:]
                if key not in set_on_the_way_out:
                    lines += (b"\n", _escaped(key, escapes), b":", _escaped(str(value), escapes))
            elif original is None and name in original_keys:
                original = value
    if original is not None and original != destination:
        lines += (b"\noriginal-destination:", _escaped(str(original), escapes))
    message_id = str(message.message_id).encode()
    lines += (b"\nmessage-id:", message_id, b"\ndelivery-count:", str(message.delivery_count).encode())
    if message.redelivered:
        lines.append(b"\nredelivered:true")
    lines += (b"\nsubscription:", _escaped(subscription_id, escapes))
    if ack:
        lines += (b"\nack:", message_id)
    body = message.body
    lines += (b"\ncontent-length:", str(len(body)).encode(), b"\n\n", body, b"\x00")
    return b"".join(lines)
