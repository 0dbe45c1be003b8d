"""The reverse machine's typed path for the frames around its text deltas (``feed_frame``,
event_frames.py) against plain JSON into ``feed``: for those frames of any shape (and odd ones
that must fall back), both produce the same chunks, byte for byte in wire mode, the same
diagnostics, the same usage for the driver and the same error."""

from __future__ import annotations

from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import crossfeed.translators.reverse.event_frames as ef
import crossfeed.translators.reverse.text_runs as runs_mod
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile
from crossfeed.translators.pump import Pump
from crossfeed.translators.reverse.event_frames import EVENT_PREFIXES, QUIET_PREFIXES
from crossfeed.translators.reverse.machine import ResponsesToChatStream
from crossfeed.translators.sse import render_chat

CREATED = {"type": "response.created", "response": {"id": "resp_1", "model": "m", "created_at": 1, "output": []}}
USAGE = {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3}


def frame(event: Any) -> bytes:
    name = event.get("type") if type(event) is dict else None
    return b"event: " + str(name).encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def run(frames: list[bytes], *, typed: bool, wire: bool, usage: bool, limit: int | None) -> tuple[Any, ...]:
    m = ResponsesToChatStream(
        include_usage=usage,
        options=BackendProfile(),
        ids=SequentialIds(),
        now=lambda: 1,
        wire=wire,
        max_output_tokens=limit,
    )
    pump = Pump(m, typed_frames=typed)
    out: list[Any] = []
    for f in frames:
        out += pump.feed(f)
    out += pump.finish()
    return render_chat(out), m.diagnostics, m.usage, m.error, m.finish_reason


def assert_same(frames: list[bytes], *, usage: bool = True, limit: int | None = None) -> None:
    plain = run(frames, typed=False, wire=False, usage=usage, limit=limit)
    for wire in (False, True):
        assert run(frames, typed=True, wire=wire, usage=usage, limit=limit) == plain


_odd = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1, 3),
    st.text(max_size=4),
    st.lists(st.integers(0, 1), max_size=2),
    st.fixed_dictionaries({"type": st.sampled_from(["output_text", "x"])}),
)
_text = st.sampled_from(["", "Hi", "Hi there", "Ho", "Hi\u00e9"])


def _maybe(draw: Any, good: Any) -> Any:
    return draw(st.one_of(good, _odd)) if draw(st.integers(0, 4)) == 0 else draw(good)


def _fields(draw: Any, event: dict[str, Any], fields: list[tuple[str, Any]]) -> dict[str, Any]:
    for key, good in fields:
        if draw(st.integers(0, 5)) > 0:
            event[key] = _maybe(draw, good)
    return event


@st.composite
def part(draw: Any) -> dict[str, Any]:
    ann = {"type": "url_citation", "url": "https://a.example", "title": "A", "start_index": 0, "end_index": 2}
    return _fields(
        draw,
        {"type": draw(st.sampled_from(["output_text", "refusal", "reasoning_text", "summary_text", "x"]))},
        [
            ("text", _text),
            ("refusal", _text),
            ("annotations", st.lists(st.just(ann), max_size=1)),
            ("logprobs", st.just([])),
        ],
    )


@st.composite
def item(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(["message", "message", "reasoning", "function_call", "web_search_call", 5]))
    body: dict[str, Any] = {"type": kind, "id": "msg_1"}
    return _fields(
        draw,
        body,
        [
            ("content", st.lists(part(), max_size=2)),
            ("status", st.just("completed")),
            ("role", st.just("assistant")),
            ("summary", st.just([])),
            ("name", st.just("f")),
            ("call_id", st.just("c1")),
            ("arguments", st.just("{}")),
        ],
    )


@st.composite
def around(draw: Any) -> dict[str, Any]:
    """One of the frames event_frames.py decodes typed, ``type`` first, each field maybe odd."""
    t = draw(
        st.sampled_from(
            [
                "response.in_progress",
                "response.content_part.added",
                "response.output_item.added",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
            ]
        )
    )
    return _fields(
        draw,
        {"type": t},
        [
            ("sequence_number", st.integers(0, 9)),
            ("item_id", st.just("msg_1")),
            ("output_index", st.integers(0, 1)),
            ("content_index", st.integers(0, 1)),
            ("text", _text),
            ("part", part()),
            ("item", item()),
            ("response", st.just({"id": "resp_1", "status": "in_progress", "output": []})),
        ],
    )


@st.composite
def terminal(draw: Any) -> dict[str, Any]:
    t = draw(st.sampled_from(["response.completed", "response.completed", "response.incomplete"]))
    resp = _fields(
        draw,
        {"id": "resp_1", "status": "completed"},
        [
            ("usage", st.just(USAGE)),
            ("incomplete_details", st.sampled_from([{"reason": "max_output_tokens"}, {"reason": "content_filter"}])),
            ("output", st.lists(item(), max_size=1)),
            ("model", st.just("m")),
        ],
    )
    return _fields(draw, {"type": t}, [("sequence_number", st.integers(0, 9)), ("response", st.just(resp))])


def delta(text: str, oi: int = 0) -> dict[str, Any]:
    return {"type": "response.output_text.delta", "output_index": oi, "content_index": 0, "delta": text}


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.one_of(around(), st.sampled_from([delta("Hi"), delta(" there"), delta("x", 1)])), max_size=8),
    terminal(),
    st.booleans(),
    st.sampled_from([None, 1, 5]),
)
def test_frames_around_deltas_same_both_ways(
    middle: list[dict[str, Any]], end: dict[str, Any], usage: bool, limit: int | None
) -> None:
    assert_same([frame(CREATED), *(frame(e) for e in middle), frame(end)], usage=usage, limit=limit)


def _stream(text: str = "Hi there") -> list[dict[str, Any]]:
    part_done = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
    item_done = {"id": "msg_1", "type": "message", "status": "completed", "content": [part_done], "role": "assistant"}
    return [
        CREATED,
        {"type": "response.in_progress", "sequence_number": 1, "response": CREATED["response"]},
        {
            "type": "response.output_item.added",
            "sequence_number": 2,
            "output_index": 0,
            "item": {"id": "msg_1", "type": "message", "status": "in_progress", "content": [], "role": "assistant"},
        },
        {
            "type": "response.content_part.added",
            "sequence_number": 3,
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": ""},
        },
        {**delta("Hi"), "item_id": "msg_1", "sequence_number": 4, "logprobs": []},
        {**delta(" there"), "item_id": "msg_1", "sequence_number": 5, "logprobs": []},
        {
            "type": "response.output_text.done",
            "sequence_number": 6,
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "text": text,
        },
        {
            "type": "response.content_part.done",
            "sequence_number": 7,
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "part": part_done,
        },
        {"type": "response.output_item.done", "sequence_number": 8, "output_index": 0, "item": item_done},
        {
            "type": "response.completed",
            "sequence_number": 9,
            "response": {**CREATED["response"], "status": "completed", "output": [item_done], "usage": USAGE},
        },
    ]


@pytest.mark.parametrize("text", ["Hi there", "Hi there, more", "Ho", ""])
@pytest.mark.parametrize("limit", [None, 2])
def test_an_ordinary_stream_same_both_ways(text: str, limit: int | None) -> None:
    """Final texts that equal, extend or disagree with what the deltas sent."""
    assert_same([frame(e) for e in _stream(text)], limit=limit)
    assert_same([frame(e) for e in _stream(text)], usage=False, limit=limit)


def test_an_ordinary_stream_takes_the_typed_path() -> None:
    """Every frame after ``created`` of an ordinary text stream is decoded typed (the path is
    taken, not only equivalent)."""
    m = ResponsesToChatStream(
        include_usage=True, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1, wire=True
    )
    events = _stream("Hi there, more")
    m.feed(events[0])
    sent: list[Any] = []
    for event in events[1:]:
        data = orjson.dumps(event)
        if event["type"] != "response.output_text.delta":
            assert data.startswith((*QUIET_PREFIXES, *EVENT_PREFIXES))
        out = m.feed_frame(data)
        assert out is not None, event["type"]
        sent += out
    assert m.done and m.finish_reason == "stop" and m.usage == USAGE
    chunks = [orjson.loads(x[6:]) for x in render_chat(sent).split(b"\n\n") if x.startswith(b"data: ")]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "Hi there, more"
    assert chunks[-1]["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize(
    "event",
    [
        {"type": "response.output_item.added", "output_index": 0, "item": {"type": "function_call", "name": "f"}},
        {"type": "response.output_item.added", "item_id": "msg_1", "item": {"type": "message"}},
        {"type": "response.output_item.added", "output_index": 0, "item": None},
        {"type": "response.output_item.added", "output_index": 0, "item": [1]},
        {"type": "response.output_item.done", "output_index": 0, "item": {"type": "reasoning", "summary": []}},
        {"type": "response.output_item.done", "output_index": 0, "item": {"type": "message", "content": 3}},
        {"type": "response.content_part.done", "output_index": 0, "part": "x"},
        {"type": "response.completed", "response": None},
        {"type": "response.completed", "response": 7},
        {"type": "response.in_progress", "item": 5},  # (an item it never reads: still a wrong shape for the struct)
        {"type": "response.content_part.added", "output_index": 0, "item": [1]},
    ],
)
def test_odd_shapes_fall_back(event: dict[str, Any]) -> None:
    """Frames the typed path leaves to ``feed`` (a call item, no index, a wrong container)."""
    m = ResponsesToChatStream(
        include_usage=True, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1, wire=True
    )
    m.feed(CREATED)
    assert m.feed_frame(orjson.dumps(event)) is None
    assert_same([frame(CREATED), frame(event), frame(_stream()[-1])])


def test_a_terminal_event_whose_output_is_needed_falls_back() -> None:
    """A done-only stream (no item events): the terminal Response's output is replayed."""
    m = ResponsesToChatStream(
        include_usage=True, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1, wire=True
    )
    m.feed(CREATED)
    end = _stream()[-1]
    assert m.feed_frame(orjson.dumps(end)) is None
    assert_same([frame(CREATED), frame(end)])


@pytest.mark.parametrize(
    "data",
    [
        b'{"type":"response.content_part.added","type":"response.output_text.delta","output_index":0,"delta":"a"}',
        b'{"type":"response.in_progress","type":5}',
        b'{"type":"response.output_item.added","output_index":0,"item":{"type":"message"},"type":"error"}',
        b'{"type":"response.output_text.done","output_index":0,"text":"Hi there, more","type":"response.refusal.done"}',
        b'{"type":"response.completed","response":{"usage":null},"type":"response.failed"}',
        b'{"type":"response.content_part.done","output_index":0,"part":{"type":"output_text","text":"Hi"}',  # cut
        b'{"type":"response.output_item.done","output_index":0,"item":{"type":"message","content":[{"type":"output_text","text":"\xff"}]}}',
    ],
)
def test_odd_bytes_same_both_ways(data: bytes) -> None:
    """A repeated ``type`` (the last one counts, for orjson and msgspec alike), JSON cut short,
    invalid UTF-8 in a field the typed path reads: the same as the general path."""
    events = _stream("Hi there, more")
    frames = [frame(e) for e in events]
    odd = b"event: x\ndata: " + data + b"\n\n"
    assert_same([*frames[:6], odd, *frames[6:]])


_RESPONSE = {"id": "resp_1", "object": "response", "status": "in_progress", "output": [], "tools": []}


@pytest.mark.parametrize(
    "first",
    [
        CREATED,
        {**CREATED, "type": "response.in_progress"},  # a server that sends no created
        {**CREATED, "type": "response.queued"},
        {"type": "response.created", "response": None},
        {"type": "response.created"},
        {"type": "response.created", "response": {**_RESPONSE}},  # no model, no created_at
        {"type": "response.created", "response": {**_RESPONSE, "model": None, "created_at": None}},
        {"type": "response.created", "response": {**_RESPONSE, "model": "m", "created_at": 1.5}},
        {"type": "response.created", "response": {**_RESPONSE, "model": 5, "created_at": 1}},
        {"type": "response.created", "response": {**_RESPONSE, "model": "m", "created_at": "1"}},
        {"type": "response.created", "response": {**_RESPONSE, "model": "m", "created_at": True}},
        {"type": "response.created", "response": {**_RESPONSE, "model": "m", "created_at": 2**64 - 1}},
        {"type": "response.created", "response": {**_RESPONSE, "model": "m", "created_at": -(2**63)}},
        {"type": "response.created", "response": 7},
        {"type": "response.created", "response": "x"},
        {"type": "response.created", "response": [1]},
    ],
)
def test_the_first_frame_same_both_ways(first: dict[str, Any]) -> None:
    """The first lifecycle frame decoded typed (its Response's model and creation time) or
    parsed whole: the same chunks, errors and diagnostics, whatever its shape."""
    assert_same([frame(first), *(frame(e) for e in _stream()[1:])])


@pytest.mark.parametrize(
    "data",
    [
        b'{"type":"response.created","response":{"model":"m","created_at":18446744073709551616}}',  # orjson: a float
        b'{"type":"response.created","response":{"model":"m","created_at":-9223372036854775809}}',
        b'{"type":"response.created","response":{"model":"m","created_at":1e400}}',  # neither parses it
        b'{"type":"response.created","response":{"model":"m"},"type":"error"}',  # the last type counts
        b'{"type":"response.created","response":{"model":"\xff"}}',
        b'{"type":"response.created","response":{"model":"m"}',  # cut short
    ],
)
def test_odd_first_frames_same_both_ways(data: bytes) -> None:
    """Integers beyond 64 bits (orjson makes them floats: the typed path leaves them to it),
    a repeated type, invalid UTF-8, JSON cut short."""
    first = b"event: response.created\ndata: " + data + b"\n\n"
    assert_same([first, *(frame(e) for e in _stream()[1:])])


def test_the_first_frame_takes_the_typed_path() -> None:
    m = ResponsesToChatStream(
        include_usage=True, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1, wire=True
    )
    assert m.feed_frame(orjson.dumps({**CREATED, "response": {**_RESPONSE, "model": "m", "created_at": 7}})) == []
    assert m.phase == "streaming"
    out = m.feed_frame(orjson.dumps(_stream()[4]))  # the first delta: the role chunk, then the text
    assert out is not None
    chunks = [orjson.loads(x[6:]) for x in render_chat(out).split(b"\n\n") if x.startswith(b"data: ")]
    assert {(c["model"], c["created"]) for c in chunks} == {("m", 7)}
    bad = ResponsesToChatStream(
        include_usage=True, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1, wire=True
    )
    assert bad.feed_frame(b'{"type":"response.created","response":{"created_at":18446744073709551616}}') is None
    assert bad.phase == "waiting"


_HUGE = b"18446744073709551616"  # 2**64: orjson parses it as a float, msgspec as an int
_LOW = b"-9223372036854775809"  # -(2**63) - 1


def _with(event: dict[str, Any], path: tuple[Any, ...], raw: bytes) -> bytes:
    """``event``'s JSON with the value at ``path`` written as ``raw`` (orjson cannot write it)."""
    marker = 987654321987
    copy = orjson.loads(orjson.dumps(event))
    node: Any = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = marker
    return orjson.dumps(copy).replace(str(marker).encode(), raw)


_BIG_INT_PLACES = [
    (2, ("output_index",), b"%s"),  # a quiet frame
    (2, ("item", "type"), b"%s"),
    (4, ("output_index",), b"%s"),  # a text delta
    (4, ("content_index",), b"%s"),
    (4, ("logprobs",), b'[{"token":"Hi","logprob":-0.5,"bytes":[72,%s],"top_logprobs":[]}]'),
    (6, ("output_index",), b"%s"),
    (6, ("content_index",), b"%s"),
    (6, ("text",), b"%s"),
    (7, ("output_index",), b"%s"),
    (7, ("content_index",), b"%s"),
    (7, ("part", "annotations"), b'[{"type":"url_citation","url":"u","title":"t","start_index":%s,"end_index":2}]'),
    (8, ("output_index",), b"%s"),
    (8, ("item", "content", 0, "annotations"), b'[{"type":"file_citation","file_id":"f","index":%s}]'),
    (9, ("response", "usage", "input_tokens"), b"%s"),
    (9, ("response", "usage", "output_tokens"), b"%s"),
    (9, ("response", "usage", "total_tokens"), b"%s"),
    (9, ("response", "usage", "output_tokens_details"), b'{"reasoning_tokens":%s}'),
    (9, ("response", "usage", "input_tokens_details"), b'{"cached_tokens":%s}'),
]


@pytest.mark.parametrize("raw", [_HUGE, _LOW])
@pytest.mark.parametrize(("at", "path", "template"), _BIG_INT_PLACES)
def test_integers_past_64_bits_same_both_ways(at: int, path: tuple[Any, ...], template: bytes, raw: bytes) -> None:
    """An integer orjson makes a float, in any field a typed frame's handler reads (an index, a
    logprob's bytes, an annotation's index, a count of the usage or of its details): the same as
    the general path."""
    events = _stream()
    frames = [frame(e) for e in events]
    frames[at] = b"event: x\ndata: " + _with(events[at], path, template % raw) + b"\n\n"
    for usage in (True, False):
        assert_same(frames, usage=usage)


_said = st.sampled_from(["Hi there", 'say "hi"\n\tback\\', "caf\u00e9 \U0001f600", "Hi", ""])
_around_text = st.sampled_from(
    [
        {},
        {"extra": {"text": "Hi there"}},  # a text key before the one read, of the same text
        {"logprobs": [{"text": "Hi there", "token": "x"}]},
        {"text": "Hi there"},  # at the top of a part or an item: not read there
    ]
)


@st.composite
def closing(draw: Any, text: str) -> list[bytes]:
    """The closing frames of part (0, 0), in orders and shapes a server may write: their text is
    the streamed one, or not; fields before and after it; other text keys; a key escaped."""
    final = draw(st.sampled_from([text, text, text + "!", "", "other"]))
    before, after = draw(_around_text), draw(_around_text)
    oi, ci = draw(st.sampled_from([0, 0, 0, 1])), draw(st.sampled_from([0, 0, 0, 1]))
    anns = draw(st.sampled_from([[], [], None, [{"type": "url_citation", "url": "https://a.example", "text": text}]]))
    part = {"type": draw(st.sampled_from(["output_text", "output_text", "refusal"])), **before, "text": final}
    if anns is not None:
        part["annotations"] = anns
    part.update(after)
    parts = [part, *draw(st.lists(st.just({"type": "output_text", "text": text}), max_size=1))]
    events = [
        {
            "type": "response.output_text.done",
            "output_index": oi,
            "content_index": ci,
            **before,
            "text": final,
            **after,
        },
        {"type": "response.content_part.done", "output_index": oi, "content_index": ci, **before, "part": part},
        {"type": "response.output_item.done", "output_index": oi, "item": {"type": "message", "content": parts}},
    ]
    out = [frame(e) for e in draw(st.permutations(events))]
    if draw(st.booleans()):  # the key read written with an escape: the same key for a decoder
        k = draw(st.integers(0, len(out) - 1))
        out[k] = out[k].replace(b'"text":', b'"te\\u0078t":', 1)
    return out


@pytest.mark.parametrize("spliced_min", [0, runs_mod._SPLICED_MIN], ids=["cut", "decoded"])
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), _said, st.integers(1, 3))
def test_closing_frames_of_the_streamed_text_same_both_ways(spliced_min: int, data: Any, text: str, cut: int) -> None:
    """The closing frames whose text is the one the deltas sent are decoded without it
    (event_frames.spliced), or decoded and found to confirm it (event_frames.text_holder):
    whatever else they hold, the chunks are those of plain JSON."""
    pieces = [text[:cut], text[cut:]] if len(text) > cut else [text, ""]
    deltas = [{**delta(p), "sequence_number": 4 + i} for i, p in enumerate(pieces)]
    output = [{"type": "message", "content": [{"type": "output_text", "text": text}]}]
    resp = {"id": "resp_1", "status": data.draw(st.sampled_from(["completed", "incomplete"])), "output": output}
    resp.update(data.draw(st.sampled_from([{}, {"x": {"text": text}}])))
    resp["usage"] = data.draw(st.sampled_from([USAGE, {**USAGE, "text": text}, {**USAGE, "y": ""}]))
    end = {"type": "response." + resp["status"], "response": resp}
    if resp["status"] == "incomplete":
        resp["incomplete_details"] = data.draw(st.sampled_from([{"reason": "content_filter", "text": text}, None]))
    with mock.patch.object(runs_mod, "_SPLICED_MIN", spliced_min):  # (0: short texts are cut too)
        assert_same([frame(CREATED), *(frame(d) for d in deltas), *data.draw(closing(text)), frame(end)])


def _closing_decodes(monkeypatch: pytest.MonkeyPatch, text: str) -> list[bytes]:
    """The bytes the closing frames of an ordinary stream of ``text`` were decoded from (in wire
    mode: the run's part is kept with its content frame's template); its chunks those of plain
    JSON."""
    decoded: list[bytes] = []
    real = ef._decode_event
    monkeypatch.setattr(ef, "_decode_event", lambda data: decoded.append(data) or real(data))
    events = _stream(text)
    events[4]["delta"], events[5]["delta"] = text[:10], text[10:]
    frames = [frame(e) for e in events]
    want = run(frames, typed=False, wire=False, usage=True, limit=None)
    assert run(frames, typed=True, wire=True, usage=True, limit=None) == want
    return [d for d in decoded if d.startswith(ef.TEXT_CLOSINGS)]


def test_the_closing_frames_of_an_ordinary_stream_skip_its_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """The four closing frames that repeat the text are decoded without it."""
    done = _closing_decodes(monkeypatch, 'Hi there, "more"\n' * 150)  # (2,048 characters or more)
    assert len(done) == 4
    assert not any(b"more" in d for d in done)


def test_the_closing_frames_of_a_short_text_are_decoded_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``_SPLICED_MIN`` characters the text costs less to decode than to find and cut."""
    done = _closing_decodes(monkeypatch, "Hi there, more " * 10)
    assert len(done) == 4 and all(b"more" in d for d in done)


_CITED = {"type": "url_citation", "url": "https://a.example", "start_index": 0, "end_index": 2, "text": "Hi there"}
_ESCAPED_EMPTY = {"type": "output_text", "ESCAPED": ""}  # a text key written with an escape (below)


@pytest.mark.parametrize(
    "closing",
    [
        # another part's empty text, after a text key of the streamed text: not this part's
        {
            "type": "response.output_text.done",
            "output_index": 0,
            "content_index": 1,
            "x": {"text": "Hi there"},
            "text": "",
        },
        {
            "type": "response.output_text.done",
            "output_index": 1,
            "content_index": 0,
            "x": {"text": "Hi there"},
            "text": "",
        },
        {
            "type": "response.content_part.done",
            "output_index": 0,
            "content_index": 1,
            "part": {"type": "output_text", "x": {"text": "Hi there"}, "text": ""},
        },
        # a message of two parts whose first one's key is escaped: the cut is the second's
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {"type": "message", "content": [_ESCAPED_EMPTY, {"type": "output_text", "text": "Hi there"}]},
        },
        # an annotation's text before the part's: the cut is the annotation's
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {"type": "message", "content": [{"type": "output_text", "annotations": [_CITED], "text": ""}]},
        },
        {
            "type": "response.content_part.done",
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "refusal", "x": {"text": "Hi there"}, "text": "", "refusal": "no"},
        },
    ],
)
def test_a_cut_that_is_not_the_text_read_is_not_taken(closing: dict[str, Any]) -> None:
    """Where the first ``text`` value that is the streamed text is not the one the handler reads
    (and that one is empty), the frame is decoded whole: the chunks are those of plain JSON."""
    raw = frame(closing).replace(b'"ESCAPED"', b'"te\\u0078t"')
    end = {"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "usage": USAGE}}
    with mock.patch.object(runs_mod, "_SPLICED_MIN", 0):
        assert_same([frame(CREATED), frame(delta("Hi")), frame(delta(" there")), raw, frame(end)])


_DONES = ("response.output_text.done", "response.content_part.done", "response.output_item.done")


@pytest.mark.parametrize(
    ("final", "handled"),
    [("Hi there", ()), ("Hi there, more", _DONES[:1]), ("Ho", _DONES)],
    ids=["streamed", "longer", "other"],
)
def test_closing_frames_that_confirm_the_streamed_text_reach_no_handler(
    monkeypatch: pytest.MonkeyPatch, final: str, handled: tuple[str, ...]
) -> None:
    """A ``*.done`` frame whose text is the streamed one sends nothing: no handler runs for it
    (the path is taken, not only equivalent). One with another text goes to its handler, which
    sends the tail (then the part's text is the final one: the frames after it confirm it) or
    counts the mismatch."""
    import crossfeed.translators.reverse.machine as machine_mod

    seen: list[str] = []
    handlers = dict(machine_mod._HANDLERS)
    for t in _DONES:
        real = handlers[t]
        handlers[t] = lambda m, ev, real=real: seen.append(ev["type"]) or real(m, ev)
    monkeypatch.setattr(machine_mod, "_HANDLERS", handlers)
    frames = [frame(e) for e in _stream(final)]
    m = ResponsesToChatStream(
        include_usage=True, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1, wire=True
    )
    pump = Pump(m)
    for f in frames:
        pump.feed(f)
    assert m.done
    assert tuple(seen) == handled
