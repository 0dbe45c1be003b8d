from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.translators.errors import UpstreamProtocolError
from crossfeed.translators.sse import SSEDecoder, SSEEvent, render_chat, render_responses
from tests.support.splitting import byte_by_byte, split_points


def decode(pieces: list[bytes], **kw: int) -> list[SSEEvent]:
    d = SSEDecoder(**kw)
    out: list[SSEEvent] = []
    for p in pieces:
        out += d.feed(p)
    return out + d.finish()


CASES = [
    (b"data: a\n\n", [(None, b"a")]),
    (b"data:a\n\n", [(None, b"a")]),
    (b"data:  two spaces\n\n", [(None, b" two spaces")]),
    (b"event: error\ndata: {}\n\n", [("error", b"{}")]),
    (b"data: 1\ndata: 2\n\n", [(None, b"1\n2")]),
    (b": comment\n\ndata: x\n\n", [(None, b"x")]),
    (b"data: a\r\n\r\ndata: b\r\rdata: c\n\n", [(None, b"a"), (None, b"b"), (None, b"c")]),
    (b"event: x\n\ndata: y\n\n", [(None, b"y")]),  # an event with no data dispatches nothing
    (b"data: unterminated", [(None, b"unterminated")]),
    (b"id: 5\nretry: 10\ndata: z\n\n", [(None, b"z")]),
    ("data: h\u00e9 \U0001f600\n\n".encode(), [(None, "h\u00e9 \U0001f600".encode())]),
]


@pytest.mark.parametrize(("raw", "expected"), CASES)
def test_vectors_any_split(raw: bytes, expected: list[SSEEvent]) -> None:
    assert decode([raw]) == expected
    assert decode(byte_by_byte(raw)) == expected
    for seed in range(10):
        assert decode(split_points(raw, seed, 3)) == expected


def test_cr_at_chunk_end_then_lf() -> None:
    assert decode([b"data: a\r", b"\n\r", b"\ndata: b\n\n"]) == [(None, b"a"), (None, b"b")]


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


# Event streams built from realistic lines, so the whole-chunk fast paths (data-only frames,
# `event:` + `data:` frames) meet near-misses: comments, several data lines, CRLF, blank runs.
_LINES = st.sampled_from(
    [
        b'data: {"a":1}',
        b"data: x",
        b"data:",
        b"data:  y",
        b"event: response.output_text.delta",
        b"event: error",
        b": keepalive",
        b"id: 3",
        b"data: [DONE]",
        b"",
        b"event:x",
    ]
)
_STREAMS = st.lists(st.lists(_LINES, min_size=1, max_size=4), max_size=8).flatmap(
    lambda blocks: st.sampled_from([b"\n", b"\r\n"]).map(
        lambda nl: b"".join(nl.join(block) + nl + nl for block in blocks)
    )
)


def _by_lines(raw: bytes) -> list[SSEEvent]:
    """The reference: the general line-by-line rules only, one byte per feed (no fast path)."""
    return decode(byte_by_byte(raw))


@settings(max_examples=400, deadline=None)
@given(_STREAMS, st.integers(0, 2**16))
def test_structured_streams_fast_paths_agree(raw: bytes, seed: int) -> None:
    expected = _by_lines(raw)
    assert decode([raw]) == expected
    assert decode(split_points(raw, seed, 1 + seed % 5)) == expected


def test_fast_path_shapes() -> None:
    assert SSEDecoder().feed(b"data: a\n\ndata: b\n\n") == [(None, b"a"), (None, b"b")]
    assert SSEDecoder().feed(b"event: t\ndata: a\n\nevent: u\ndata: b\n\n") == [("t", b"a"), ("u", b"b")]
    # near misses take the general rules and still decode right
    assert SSEDecoder().feed(b"data: a\ndata: b\n\n") == [(None, b"a\nb")]
    assert SSEDecoder().feed(b"event: t\ndata: a\ndata: b\n\n") == [("t", b"a\nb")]
    assert SSEDecoder().feed(b"data: a\n\n: c\n\n") == [(None, b"a")]
    assert SSEDecoder().feed(b"event: t\n\ndata: b\n\n") == [(None, b"b")]


@pytest.mark.parametrize(
    "raw",
    [
        b"event: t\ndata: a\n\nevent: t\nid: 1\ndata: b\n\n",  # a known name, then another line
        b"event: u\nid: 1\ndata: a\n\nevent: u\ndata: b\n\n",  # an unknown name and another line
        b"event: t\ndata: a\n\nevent: t\ndata: b\ndata: c\n\n",  # two data lines
        b"event: t\ndata: a\n\nevent: t\n\nevent: t\ndata: c\n\n",  # an event without data
        b"event: t\ndata: a\n\nevent: t\ndata: b\n: note\n\n",  # a comment after the data
        b"event: t\ndata: a\n\nevent: \ndata: b\n\n",  # an empty name
        b"event: t\ndata: a\n\nevent:  t\ndata: \n\n",  # a name with a space, empty data
        b"event: t\ndata: a\n\nevent: t\ndata: b\n\n\n",  # a blank line more
        "event: t\ndata: a\n\nevent: \u00e9\xff\ndata: b\n\n".encode("latin-1"),  # a name not UTF-8
    ],
)
def test_named_frames_near_misses(raw: bytes) -> None:
    """Whole ``event:`` + ``data:`` chunks the fast path splits, and near misses of them: the same
    events as the line-by-line rules, whether a name was seen before or not."""
    assert SSEDecoder().feed(raw) == _by_lines(raw)
    assert SSEDecoder().feed(raw) == _by_lines(raw)  # every name now seen


@pytest.mark.parametrize(
    "raw",
    [
        b"event: t\ndata: b\n\n",  # the shape itself
        b"event: t\nid: 1\ndata: b\n\n",  # another line before the data
        b"event: t\nevent: u\ndata: b\n\n",  # a second name
        b"event: t\ndata: b\ndata: c\n\n",  # two data lines
        b"event: t\ndata: b\n: note\n\n",  # a comment after the data
        b"event: t\ndata:b\n\n",  # no space after the colon
        b"event: t\ndata: b\n\n\n",  # a blank line more
        b"event: t\n\n",  # no data
        b"event: \ndata: b\n\n",  # an empty name
        b"event:  t\ndata: \n\n",  # a name with a space, empty data
        "event: \u00e9\xff\ndata: b\n\n".encode("latin-1"),  # a name not UTF-8
    ],
)
def test_one_named_frame_a_read(raw: bytes) -> None:
    """A read of one ``event:`` + ``data:`` event (a paced Responses stream) and near misses of it:
    the same events as the line-by-line rules, whether its name line was seen before or not, and
    after a read of the same name line in the shape."""
    assert SSEDecoder().feed(raw) == _by_lines(raw)
    assert SSEDecoder().feed(raw) == _by_lines(raw)  # every name line now seen
    head = raw.split(b"\n", 1)[0]
    assert SSEDecoder().feed(head + b"\ndata: x\n\n") == _by_lines(head + b"\ndata: x\n\n")
    assert SSEDecoder().feed(raw) == _by_lines(raw)


def test_long_event_names_are_read_but_not_kept() -> None:
    """The decoder keeps the names it has seen for the next frame, but not a long one: an upstream
    chooses them, and 512 names of megabytes each would stay in memory."""
    from crossfeed.translators import sse

    for raw in (
        b"event: " + b"n" * 300 + b"\ndata: a\n\n",
        b"event: " + b"m" * 300 + b"\ndata: a\n\nevent: t\ndata: b\n\n",
    ):
        kept = len(sse._HEAD_NAMES), len(sse._NAMES)
        assert SSEDecoder().feed(raw) == _by_lines(raw)
        assert len(sse._HEAD_NAMES) <= kept[0] + 1 and len(sse._NAMES) <= kept[1] + 1  # ("t" may be new)
        assert not any(len(k) > 256 for k in (*sse._HEAD_NAMES, *sse._NAMES))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(st.binary(max_size=8), st.fixed_dictionaries({"type": st.sampled_from(["a", "b"])})), max_size=5)
)
def test_renderers_join_frames_and_render_dicts(outs: list[bytes | dict]) -> None:
    """A list of rendered frames (a run's, wire mode) is joined as it is; a dict anywhere in it
    is rendered in its place, whichever way the renderer takes."""
    chat = b"".join(o if isinstance(o, bytes) else b"data: " + orjson.dumps(o) + b"\n\n" for o in outs)
    assert render_chat(outs) == chat
    named = b"".join(
        o if isinstance(o, bytes) else b"event: " + o["type"].encode() + b"\ndata: " + orjson.dumps(o) + b"\n\n"
        for o in outs
    )
    assert render_responses(outs) == named
