from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.splitting import byte_by_byte, split_points
from translators.errors import UpstreamProtocolError
from translators.sse import SSEDecoder, SSEEvent


def decode(pieces: list[bytes], **kw: int) -> list[SSEEvent]:
    d = SSEDecoder(**kw)
    out: list[SSEEvent] = []
    for p in pieces:
        out += d.feed(p)
    return out + d.finish()


CASES = [
    (b"data: a\n\n", [SSEEvent(None, b"a")]),
    (b"data:a\n\n", [SSEEvent(None, b"a")]),
    (b"data:  two spaces\n\n", [SSEEvent(None, b" two spaces")]),
    (b"event: error\ndata: {}\n\n", [SSEEvent("error", b"{}")]),
    (b"data: 1\ndata: 2\n\n", [SSEEvent(None, b"1\n2")]),
    (b": comment\n\ndata: x\n\n", [SSEEvent(None, b"x")]),
    (b"data: a\r\n\r\ndata: b\r\rdata: c\n\n", [SSEEvent(None, b"a"), SSEEvent(None, b"b"), SSEEvent(None, b"c")]),
    (b"event: x\n\ndata: y\n\n", [SSEEvent(None, b"y")]),  # an event with no data dispatches nothing
    (b"data: unterminated", [SSEEvent(None, b"unterminated")]),
    (b"id: 5\nretry: 10\ndata: z\n\n", [SSEEvent(None, b"z")]),
    ("data: h\u00e9 \U0001F600\n\n".encode(), [SSEEvent(None, "h\u00e9 \U0001F600".encode())]),
]


@pytest.mark.parametrize(("raw", "expected"), CASES)
def test_vectors_any_split(raw: bytes, expected: list[SSEEvent]) -> None:
    assert decode([raw]) == expected
    assert decode(byte_by_byte(raw)) == expected
    for seed in range(10):
        assert decode(split_points(raw, seed, 3)) == expected


def test_cr_at_chunk_end_then_lf() -> None:
    assert decode([b"data: a\r", b"\n\r", b"\ndata: b\n\n"]) == [SSEEvent(None, b"a"), SSEEvent(None, b"b")]


def test_line_cap() -> None:
    with pytest.raises(UpstreamProtocolError):
        decode([b"data: " + b"x" * 2000], max_event_bytes=1000)
    with pytest.raises(UpstreamProtocolError):
        decode([b"data: " + b"x" * 600 + b"\n" + b"data: " + b"y" * 600 + b"\n"], max_event_bytes=1000)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 2**16))
def test_any_bytes_any_split_same_events(raw: bytes, seed: int) -> None:
    try:
        whole = decode([raw])
    except UpstreamProtocolError:
        return
    assert decode(split_points(raw, seed, 1 + seed % 17)) == whole
