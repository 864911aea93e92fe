"""The compiled STOMP codec (pyx/journal_engine/_stomp_codec.pyx) and its Python twin
(journal_engine/_twin/stomp_codec.py) side by side in one process: for streams of well-formed frames,
cut anywhere, and for streams mangled byte by byte, both give the same frames, then the same error
text at the same frame; and both write the same MESSAGE frame of a kept message."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journal_engine.errors import StompFrameError

compiled = pytest.importorskip("journal_engine._stomp_codec", reason="the compiled core is not built")
from journal_engine._twin import stomp_codec as twin  # noqa: E402

FRAMES = [
    b"CONNECT\naccept-version:1.2\nhost:h\n\n\x00",
    b"\r\n\nSEND\r\ndestination:/queue/a\r\ncontent-length:5\r\n\r\na\x00b\x00c\x00",
    b"SEND\ndestination:/queue/a\ndestination:/queue/second\n\nno length\x00\n\n",
    b"SEND\ndestination:/queue/\\c\\n\\\\x\npersistent:true\nreceipt:r1\n\n\xff\xfe body\x00",
    b"ACK\nid:12\n\n\x00",
    b"SUBSCRIBE\nid:s\ndestination:/queue/caf\xc3\xa9\nack:client-individual\n\n\x00",
    b"DISCONNECT\nreceipt:bye\n\n\x00",
    b"\n",
]


def read_all(module, pieces: list[bytes], escapes: bool, **limits) -> tuple[list, str | None]:
    reader = module.FrameReader(**limits)
    reader.escapes = escapes
    frames = []
    try:
        for piece in pieces:
            for frame in reader.feed(piece):
                frames.append((frame.cmd, frame.headers, frame.body))
    except StompFrameError as error:
        return frames, str(error)
    return frames, f"buffered {reader.buffered_bytes}"


def same_on_both(pieces: list[bytes], escapes: bool, **limits) -> None:
    assert read_all(compiled, pieces, escapes, **limits) == read_all(twin, pieces, escapes, **limits)


def cuts(stream: bytes, rng: random.Random, count: int) -> list[bytes]:
    points = sorted(rng.sample(range(len(stream) + 1), min(count, len(stream) + 1)))
    return [stream[a:b] for a, b in zip([0] + points, points + [len(stream)])]


def test_well_formed_streams_cut_anywhere_read_the_same():
    rng = random.Random(7)
    for _ in range(400):
        stream = b"".join(rng.choice(FRAMES) for _ in range(rng.randint(1, 6)))
        for escapes in (False, True):
            same_on_both(cuts(stream, rng, rng.randint(0, 6)), escapes)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(FRAMES), min_size=1, max_size=4), st.data())
def test_mangled_streams_give_the_same_frames_then_the_same_error(frames, data):
    stream = bytearray(b"".join(frames))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(stream) - 1))
        stream[at] = data.draw(st.sampled_from([0, 10, 13, 58, 92, 0x16, 0xc3, 0xff, ord("x"), ord("c")]))
    pieces = cuts(bytes(stream), random.Random(data.draw(st.integers(0, 2**32))), 3)
    same_on_both(pieces, data.draw(st.booleans()))
    same_on_both(pieces, True, frame_bytes_max=40, headers_max=2)


@pytest.mark.parametrize("stream", [
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",             # a TLS hello
    b"SEND\ndestination:/queue/a\ncontent-length:3\n\nabcd\x00",  # a body longer than its content-length
    b"SEND\ncontent-length:99999999999999999999999\n\n",        # a length past any frame
    b"SEND\ncontent-length:-1\n\n\x00",
    b"SEND\nno colon here\n\n\x00",
    b"SEND\nbad:\\x\n\n\x00",
    b"SEND\n\xff:\xfe\n\n\x00",
    b"SEND\na:b\x00\n\n",
    b"SE ND\n\n\x00",
    b"\n\n\n",
])
def test_each_refusal_reads_the_same(stream):
    for escapes in (False, True):
        same_on_both([stream], escapes)
        same_on_both([stream[:i] for i in (len(stream) // 2,)] + [stream[len(stream) // 2:]], escapes)
    assert read_all(compiled, [stream], True)[1] is not None


class Kept:
    def __init__(self, properties, message_id=7, delivery_count=1, redelivered=False, body=b"body"):
        self.properties, self.message_id, self.delivery_count = properties, message_id, delivery_count
        self.redelivered, self.body = redelivered, body


@pytest.mark.parametrize("escapes", [False, True])
@pytest.mark.parametrize("message", [
    Kept({}),
    Kept({"stomp.header.persistent": "true", "stomp.header.a:b": "c\nd\\e\r", "other": 1}),
    Kept({"stomp.header.message-id": "old", "_AMQ_ORIG_ADDRESS": "/queue/x"}, redelivered=True, delivery_count=3),
    Kept({"_HQ_ORIG_ADDRESS": "/queue/here", "stomp.header.n": 5}, body=b"\x00" * 3),
    Kept(None, body=b""),
])
def test_the_message_frame_is_the_same(message, escapes):
    arguments = (message, "/queue/here", "sub:1", True, escapes, "stomp.header.",
                 frozenset({"message-id", "destination"}), ("_AMQ_ORIG_ADDRESS", "_HQ_ORIG_ADDRESS"))
    assert compiled.message_frame_bytes(*arguments) == twin.message_frame_bytes(*arguments)
    for value in ("plain", "a:b", "l\nf", "c\rr", "b\\s", "é"):
        assert compiled.header_value(value, escapes) == twin.header_value(value, escapes)
