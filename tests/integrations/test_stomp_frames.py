"""serve-stomp's frame reader and writer (journal_engine/integrations/stomp_frames.py) on their own:
every split of a stream gives the same frames, the limits hold at their maximum and refuse one past
it, header escapes survive a write and a read. (test_serve_stomp_clients.py drives them through the
server with real clients.)"""
from __future__ import annotations

import pytest

pytest.importorskip("coilmq", reason="coilmq is not installed (pip install 'journal_engine[coilmq]')")

from coilmq.util.frames import Frame  # noqa: E402

from journal_engine import JournalError  # noqa: E402
from journal_engine.integrations.stomp_frames import FrameReader, StompFrameError, pack  # noqa: E402

STREAM = (b"\r\n\nCONNECT\r\naccept-version:1.2\r\nhost:h\r\n\r\n\x00\n"
          b"SEND\ndestination:/queue/a\ncontent-length:5\n\na\x00b\x00c\x00"
          b"SEND\ndestination:/queue/a\ndestination:/queue/second\n\nno length\x00\n\n"
          b"DISCONNECT\nreceipt:bye\n\n\x00")
EXPECTED = [("CONNECT", {"accept-version": "1.2", "host": "h"}, b""),
            ("SEND", {"destination": "/queue/a", "content-length": "5"}, b"a\x00b\x00c"),
            ("SEND", {"destination": "/queue/a"}, b"no length"),          # a repeated header: the first
            ("DISCONNECT", {"receipt": "bye"}, b"")]


def frames_of(reader: FrameReader, *pieces: bytes) -> list[tuple]:
    return [(f.cmd, f.headers, f.body or b"") for piece in pieces for f in reader.feed(piece)]


def test_every_split_of_a_stream_gives_the_same_frames():
    for cut in range(len(STREAM) + 1):
        for second_cut in (cut, min(len(STREAM), cut + 7)):
            reader = FrameReader()
            got = frames_of(reader, STREAM[:cut], STREAM[cut:second_cut], STREAM[second_cut:])
            assert got == EXPECTED, (cut, second_cut)
            assert reader.buffered_bytes == 0
    reader = FrameReader()
    assert frames_of(reader, *[STREAM[i:i + 1] for i in range(len(STREAM))]) == EXPECTED


@pytest.mark.parametrize("with_length", [True, False])
def test_a_frame_of_the_maximum_size_is_read_and_one_byte_more_is_refused(with_length):
    head = b"SEND\ndestination:/q\n" + (b"content-length:%d\n" if with_length else b"") + b"\n"

    def frame(body_bytes: int) -> bytes:
        text = head % body_bytes if with_length else head
        return text + b"x" * body_bytes + b"\x00"
    limit = 1000
    body_at_limit = limit - (len(frame(100)) - 100)      # the length's digits: as many as 100's
    assert len(frame(body_at_limit)) == limit
    [read] = FrameReader(frame_bytes_max=limit).feed(frame(body_at_limit))
    assert read.body == b"x" * body_at_limit
    with pytest.raises(StompFrameError, match="STOMP_FRAME_BYTES_MAX"):
        list(FrameReader(frame_bytes_max=limit).feed(frame(body_at_limit + 1)))


def test_the_maximum_number_of_headers_is_read_and_one_more_is_refused():
    def frame(headers: int) -> bytes:
        return b"SEND\n" + b"".join(b"h%d:v\n" % n for n in range(headers)) + b"\n\x00"
    [read] = FrameReader(headers_max=5).feed(frame(5))
    assert len(read.headers) == 5
    with pytest.raises(StompFrameError, match="STOMP_HEADERS_MAX"):
        list(FrameReader(headers_max=5).feed(frame(6)))


@pytest.mark.parametrize("data, said", [
    (b"\x16\x03garbage\n", "not a STOMP command"),
    (b"SEND\nno colon\n\n\x00", "no colon"),
    (b"SEND\ncontent-length:2\n\nlonger\x00", "longer than content-length"),
    (b"SEND\ncontent-length:-1\n\n\x00", "not a number"),
    (b"SEND\nbad:\\t\n\n\x00", "undefined escape"),
    (b"SEND\nx:\xff\n\n\x00", "not UTF-8"),
    (b"SEND\nx:y\x00", "before the empty line"),
])
def test_a_broken_frame_is_refused_with_what_is_wrong(data, said):
    reader = FrameReader()
    reader.escapes = True
    with pytest.raises(StompFrameError, match=said) as raised:
        list(reader.feed(data))
    assert isinstance(raised.value, JournalError) and isinstance(raised.value, ValueError)


def test_the_frames_before_a_broken_one_are_handed_out_first():
    reader = FrameReader()
    pieces = reader.feed(b"SEND\ndestination:/q\n\nfirst\x00NOT A COMMAND\n")
    assert next(pieces).body == b"first"
    with pytest.raises(StompFrameError):
        next(pieces)


def test_escaped_headers_survive_a_write_and_a_read():
    headers = {"a:b": "line\nbreak", "back\\slash": "carriage\rreturn", "plain": "x"}
    data = pack(Frame("MESSAGE", headers=dict(headers), body="é"), escapes=True)
    reader = FrameReader()
    reader.escapes = True
    [read] = reader.feed(data)
    assert read.body == "é".encode()
    assert read.headers == {**headers, "content-length": "2"}           # bytes, not characters
    # STOMP 1.0 has no escapes: a line break in a value becomes a space, the rest is as is
    [read] = FrameReader().feed(pack(Frame("MESSAGE", headers={"k": "a\nb:c"}), escapes=False))
    assert read.headers["k"] == "a b:c"
