"""The reverse machine's typed text-delta path (``feed_frame``, delta_frames.py) against plain
JSON into ``feed``: for text deltas of any shape (and the frames around them), both produce the
same chunks, byte for byte in wire mode, and count the same diagnostics."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile
from crossfeed.translators.pump import Pump
from crossfeed.translators.reverse.delta_frames import TEXT_DELTA_PREFIX
from crossfeed.translators.reverse.machine import ResponsesToChatStream
from crossfeed.translators.reverse.stopping import StoppingChatStream
from crossfeed.translators.reverse.stream_state import Call
from crossfeed.translators.sse import render_chat
from tests.support.validators import validate_chat_chunks

CREATED = {"type": "response.created", "response": {"id": "resp_1", "model": "m", "created_at": 1, "output": []}}
ADDED = {"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_1"}}
COMPLETED = {
    "type": "response.completed",
    "response": {"id": "resp_1", "model": "m", "output": [], "usage": {"input_tokens": 1, "output_tokens": 2}},
}


def frame(event: dict[str, Any]) -> bytes:
    return b"event: " + str(event.get("type")).encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def run(frames: list[bytes], *, typed: bool, wire: bool) -> tuple[bytes, dict[str, int], list[Any]]:
    m = ResponsesToChatStream(
        include_usage=True, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1, wire=wire
    )
    pump = Pump(m, typed_frames=typed)
    out: list[Any] = []
    for f in frames:
        out += pump.feed(f)
    out += pump.finish()
    return render_chat(out), m.diagnostics, out


def assert_same(frames: list[bytes]) -> None:
    plain = run(frames, typed=False, wire=False)
    for wire in (False, True):
        typed = run(frames, typed=True, wire=wire)
        assert typed[0] == plain[0]
        assert typed[1] == plain[1]
    validate_chat_chunks([orjson.loads(p[6:]) for p in plain[0].split(b"\n\n") if p.startswith(b"data: {")])


_value = st.one_of(
    st.none(), st.booleans(), st.integers(-1, 2), st.text(max_size=6), st.lists(st.integers(0, 1), max_size=2)
)


@st.composite
def text_delta(draw: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "response.output_text.delta"}  # type first, as servers write it
    for key, good in (
        ("sequence_number", st.integers(0, 9)),
        ("item_id", st.just("msg_1")),
        ("output_index", st.integers(0, 1)),
        ("content_index", st.integers(0, 1)),
        ("delta", st.text(max_size=8)),
        ("logprobs", st.just([])),
    ):
        if draw(st.booleans()):
            event[key] = draw(st.one_of(good, _value)) if draw(st.integers(0, 4)) == 0 else draw(good)
    return event


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(text_delta(), min_size=1, max_size=6), st.booleans())
def test_any_text_delta_same_both_ways(deltas: list[dict[str, Any]], created: bool) -> None:
    frames = ([frame(CREATED), frame(ADDED)] if created else []) + [frame(d) for d in deltas] + [frame(COMPLETED)]
    assert_same(frames)


def test_the_common_delta_takes_the_typed_path() -> None:
    """An ordinary stream's deltas are decoded typed (the path is taken, not only equivalent)."""
    delta = {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0}
    data = orjson.dumps({**delta, "delta": "Hi", "logprobs": [], "sequence_number": 2})
    assert data.startswith(TEXT_DELTA_PREFIX)
    m = ResponsesToChatStream(
        include_usage=False, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1, wire=True
    )
    assert m.feed_frame(data) is None  # nothing started yet: the general path starts the stream
    m.feed(CREATED)
    out = m.feed_frame(data)
    assert out is not None and len(out) == 2  # the role chunk, then the text
    body = render_chat(out)
    chunks = [orjson.loads(line[6:]) for line in body.split(b"\n\n") if line.startswith(b"data: ")]
    assert chunks[1]["choices"][0]["delta"] == {"content": "Hi"}
    # Not decoded typed: another event type that shares the prefix's start, logprobs, a wrong shape.
    assert m.feed_frame(data.replace(b"output_text.delta", b"output_text.annotation.added")) is None
    assert m.feed_frame(orjson.dumps({**delta, "delta": "x", "logprobs": [{"token": "x"}]})) is None
    assert m.feed_frame(orjson.dumps({**delta, "delta": 3})) is None
    assert m.feed_frame(b'{"type":"response.output_text.delta",') is None  # not JSON


def test_stop_sequences_never_take_the_typed_path() -> None:
    m = StoppingChatStream(
        stop=["x"], include_usage=False, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1
    )
    m.feed(CREATED)
    assert m.feed_frame(orjson.dumps({"type": "response.output_text.delta", "output_index": 0, "delta": "x"})) is None


def test_stop_sequences_see_every_frame_through_the_pump() -> None:
    """A call's fragments, paced or several in a read, reach a stopping stream's ``feed`` (its
    ``frame_readers`` are None), as without typed frames: the usage it estimates at the cut
    counts them."""
    message = {"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_1"}}
    text = {"type": "response.output_text.delta", "output_index": 0, "content_index": 0}
    fragment = {"type": "response.function_call_arguments.delta", "output_index": 1}
    reads = [frame(e) for e in (CREATED, message, {**text, "delta": "a E"}, CALL_ADDED, {**fragment, "delta": "{"})]
    reads += [
        frame({**fragment, "delta": '"q"'}),
        frame({**fragment, "delta": ":1"}) + frame({**fragment, "delta": "}"}),
    ]
    reads += [frame({**text, "delta": "ND!"}), frame(COMPLETED)]
    outs = []
    for typed in (True, False):
        m = StoppingChatStream(
            stop=["END"], include_usage=True, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1
        )
        pump = Pump(m, typed_frames=typed)
        out = [o for r in reads for o in pump.feed(r)] + pump.finish()
        outs.append(render_chat(out))
    assert outs[0] == outs[1]
    chunks = [orjson.loads(p[6:]) for p in outs[0].split(b"\n\n") if p.startswith(b"data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == "a "  # "E" + "ND": the stop sequence
    assert "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas if d.get("tool_calls")) == '{"q":1}'
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"]["completion_tokens"] == 3  # 4 bytes a token: "a " and the 7 of the arguments


def _delta_bytes(body: str) -> bytes:
    return b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",' + body.encode() + b"}\n\n"


@pytest.mark.parametrize(
    "body",
    [
        '"output_index":0,"content_index":0,"delta":"a"',
        '"output_index":0,"delta":"a"',  # content_index absent: 0
        '"output_index":0,"content_index":null,"delta":"a"',
        '"item_id":"msg_1","content_index":0,"delta":"a"',  # no output_index: the item id
        '"output_index":0.0,"content_index":0,"delta":"a"',
        '"output_index":true,"content_index":0,"delta":"a"',
        '"output_index":0,"content_index":0,"delta":null',
        '"output_index":0,"content_index":0',  # no delta
        '"output_index":0,"content_index":0,"delta":"a","logprobs":{}',
        '"output_index":0,"content_index":0,"delta":"a","logprobs":0',
        '"output_index":0,"content_index":0,"delta":"a","logprobs":""',
        '"output_index":0,"content_index":0,"delta":"a","logprobs":null',
        '"output_index":0,"content_index":0,"delta":"a","type":"response.refusal.delta"',  # the last type wins
        '"output_index":0,"content_index":0,"delta":""',
        '"output_index":0,"content_index":0,"delta":"\\u00e9\\ud83d\\ude00"',
    ],
)
def test_odd_text_deltas_same_both_ways(body: str) -> None:
    """Each delta after an ordinary one of the same part (so that the typed path's kept part is
    in play), and alone."""
    first = frame({**ADDED_DELTA, "delta": "x"})
    assert_same([frame(CREATED), frame(ADDED), first, _delta_bytes(body), frame(COMPLETED)])
    assert_same([frame(CREATED), frame(ADDED), _delta_bytes(body), first, frame(COMPLETED)])


ADDED_DELTA = {"type": "response.output_text.delta", "output_index": 0, "content_index": 0}


def test_text_parts_interleaved_same_both_ways() -> None:
    """Deltas that go back and forth between parts and items: the kept part follows them."""
    second = {"type": "response.output_item.added", "output_index": 1, "item": {"type": "message", "id": "msg_2"}}
    order = [(0, 0), (0, 0), (0, 1), (0, 0), (1, 0), (1, 0), (0, 0), (0, 1), (1, 0)]
    deltas = [
        frame({**ADDED_DELTA, "output_index": oi, "content_index": ci, "delta": f"{oi}{ci};"}) for oi, ci in order
    ]
    assert_same([frame(CREATED), frame(ADDED), frame(second), *deltas, frame(COMPLETED)])


CALL_ADDED = {
    "type": "response.output_item.added",
    "output_index": 1,
    "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": ""},
}
CUSTOM_ADDED = {
    "type": "response.output_item.added",
    "output_index": 2,
    "item": {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_2", "name": "g", "input": ""},
}
REASONING_ADDED = {"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": "rs_1"}}
OTHER_TYPES = [
    "response.function_call_arguments.delta",
    "response.custom_tool_call_input.delta",
    "response.reasoning_summary_text.delta",
    "response.reasoning_text.delta",
    "response.reasoning.delta",
    "response.refusal.delta",
]


@st.composite
def other_delta(draw: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"type": draw(st.sampled_from(OTHER_TYPES))}  # type first, as servers write it
    for key, good in (
        ("sequence_number", st.integers(0, 9)),
        ("item_id", st.sampled_from(["rs_1", "fc_1", "ctc_1"])),
        ("output_index", st.integers(0, 3)),
        ("content_index", st.integers(0, 1)),
        ("summary_index", st.integers(0, 1)),
        ("delta", st.text(max_size=8)),
    ):
        if draw(st.booleans()):
            event[key] = draw(st.one_of(good, _value)) if draw(st.integers(0, 4)) == 0 else draw(good)
    return event


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(other_delta(), min_size=1, max_size=8), st.integers(0, 3))
def test_any_call_or_reasoning_delta_same_both_ways(deltas: list[dict[str, Any]], opened: int) -> None:
    """Before and after their items are added (a call's fragments held until it is named), of any
    index, part or shape: typed and plain give the same chunks and diagnostics."""
    added = [REASONING_ADDED, CALL_ADDED, CUSTOM_ADDED][:opened]
    frames = [frame(CREATED), *(frame(a) for a in added), *(frame(d) for d in deltas)]
    frames += [frame(a) for a in (REASONING_ADDED, CALL_ADDED, CUSTOM_ADDED)[opened:]] + [frame(COMPLETED)]
    assert_same(frames)


@pytest.mark.parametrize(
    ("added", "delta", "expected"),
    [
        (
            CALL_ADDED,
            {"output_index": 1, "delta": '{"a":'},
            {"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]},
        ),
        (
            CUSTOM_ADDED,
            {"output_index": 2, "delta": "x\n"},
            {"tool_calls": [{"index": 0, "function": {"arguments": "x\\n"}}]},
        ),
        (REASONING_ADDED, {"output_index": 0, "summary_index": 0, "delta": "hm"}, {"reasoning_content": "hm"}),
        (REASONING_ADDED, {"output_index": 0, "content_index": 0, "delta": "hm"}, {"reasoning_content": "hm"}),
        (REASONING_ADDED, {"output_index": 0, "delta": "hm"}, {"reasoning_content": "hm"}),
    ],
    ids=["arguments", "custom-input", "summary", "reasoning-text", "reasoning-open-responses"],
)
def test_the_common_call_and_reasoning_deltas_take_the_typed_path(
    added: dict[str, Any], delta: dict[str, Any], expected: dict[str, Any]
) -> None:
    kind = {
        "function_call": "response.function_call_arguments.delta",
        "custom_tool_call": "response.custom_tool_call_input.delta",
    }.get(added["item"]["type"])
    if kind is None:
        kind = (
            "response.reasoning_summary_text.delta"
            if "summary_index" in delta
            else "response.reasoning_text.delta"
            if "content_index" in delta
            else "response.reasoning.delta"
        )
    m = ResponsesToChatStream(include_usage=False, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1)
    m.feed(CREATED)
    m.feed(added)
    data = orjson.dumps({"type": kind, "item_id": added["item"]["id"], **delta, "sequence_number": 3})
    out = m.feed_frame(data)
    assert out is not None, "the general way was taken"
    deltas = [o["choices"][0]["delta"] for o in out if isinstance(o, dict)]
    last = deltas[-1]
    if "tool_calls" in expected:
        assert last["tool_calls"][0]["function"] == expected["tool_calls"][0]["function"]
    else:
        assert last == expected
    # the general way: no output_index (the item id), a refusal, a null index, a call not yet added
    assert m.feed_frame(orjson.dumps({"type": kind, "item_id": "x", "delta": "a"})) is None
    assert m.feed_frame(orjson.dumps({"type": "response.refusal.delta", "output_index": 0, "delta": "a"})) is None
    assert m.feed_frame(orjson.dumps({"type": kind, "output_index": 0, "summary_index": None, "delta": "a"})) is None
    assert (
        m.feed_frame(orjson.dumps({"type": "response.function_call_arguments.delta", "output_index": 7, "delta": "a"}))
        is None
    )


@pytest.mark.parametrize("usage", [True, False])
def test_a_call_s_fragment_in_wire_mode_is_its_chunk_rendered(usage: bool) -> None:
    """A function call's argument fragment is a finished frame in wire mode: the bytes of its
    chunk as the dict path renders them, escapes, ``usage`` and all; and a role chunk still owed
    in front of one is the call's (``content: null``), as in front of the call's dict."""
    machines = [
        ResponsesToChatStream(include_usage=usage, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1, wire=w)
        for w in (True, False)
    ]
    for m in machines:
        m.feed(CREATED)
    calls = [Call(3, custom=False) for _ in machines]
    text = 'x"\\\n\u00e9\U0001f600'
    wired, plain = (m._args(c, text) for m, c in zip(machines, calls, strict=True))
    assert type(wired) is bytes and type(plain) is dict
    assert render_chat([wired]) == render_chat([plain])
    for m in machines:
        m._role = True
    ahead = [m._with_role([frag]) for m, frag in zip(machines, (wired, plain), strict=True)]
    assert render_chat(ahead[0]) == render_chat(ahead[1])
    assert orjson.loads(render_chat(ahead[0]).split(b"\n\n")[0][6:])["choices"][0]["delta"]["content"] is None


def _summary(oi: int, si: int, text: str) -> dict[str, Any]:
    return {"type": "response.reasoning_summary_text.delta", "output_index": oi, "summary_index": si, "delta": text}


def _thought(oi: int, ci: int, text: str) -> dict[str, Any]:
    return {"type": "response.reasoning_text.delta", "output_index": oi, "content_index": ci, "delta": text}


REASONING_ADDED_3 = {
    "type": "response.output_item.added",
    "output_index": 3,
    "item": {"type": "reasoning", "id": "rs_2"},
}
_BY_ITEM_ID = {"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "summary_index": 1, "delta": "q"}


@pytest.mark.parametrize(
    ("deltas", "reasoning"),
    [
        (
            [_summary(0, 0, "a"), _summary(0, 0, "b"), _summary(0, 1, "c"), _summary(0, 1, "d"), _summary(0, 0, "e")],
            "ab\n\ncd\n\ne",
        ),
        ([_thought(0, 0, "a"), _thought(0, 0, "b"), _thought(0, 1, "c"), _thought(0, 0, "d")], "abcd"),
        # each part's final text against what it streamed: a piece kept in the wrong part is sent again
        (
            [
                _thought(0, 0, "a"),
                _thought(0, 0, "b"),
                _thought(0, 1, "c"),
                {"type": "response.reasoning_text.done", "output_index": 0, "content_index": 0, "text": "ab"},
                {"type": "response.reasoning_text.done", "output_index": 0, "content_index": 1, "text": "c"},
            ],
            "abc",
        ),
        (
            [_thought(0, 0, "a"), _thought(3, 0, "b"), _thought(3, 0, "c"), _thought(0, 0, "d"), _thought(0, 0, "e")],
            "a\n\nbc\n\nde",
        ),
        ([_thought(0, 0, "a"), _summary(0, 0, "b"), _thought(0, 0, "c"), _summary(0, 0, "d")], "a\n\nb\n\nc\n\nd"),
        (
            [{**_thought(0, 0, "a"), "type": "response.reasoning.delta"}, _thought(0, 0, "b"), _thought(0, 0, "c")],
            "abc",
        ),
        # a delta the general way (by its item id) between two of one part: the next one is a new segment
        (
            [_summary(0, 0, "a"), _summary(0, 0, "b"), _BY_ITEM_ID, _summary(0, 0, "c"), _summary(0, 0, "d")],
            "ab\n\nq\n\ncd",
        ),
        (
            [
                _thought(0, 0, "a"),
                {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "{}"},
                {"type": "response.output_text.delta", "output_index": 4, "content_index": 0, "delta": "hi"},
                _thought(0, 0, "b"),
                _thought(0, 0, ""),
                _thought(0, 0, "c"),
            ],
            "abc",
        ),
    ],
    ids=[
        "summary parts",
        "reasoning parts",
        "final texts",
        "two items",
        "text and summary",
        "open-responses name",
        "by item id",
        "between",
    ],
)
@pytest.mark.parametrize("named", [True, False], ids=["event-lines", "data-lines"])
def test_reasoning_deltas_continuing_a_part_same_both_ways(
    deltas: list[dict[str, Any]], reasoning: str, named: bool
) -> None:
    """A reasoning delta that continues the part the last one wrote is written from that part's
    frame (``_rrun``); any other part, or a reasoning text sent the general way, starts a segment
    (its separator) exactly as the general path does. Under event lines the pump reads the
    deltas with ``reasoning_frame``; frames of a data line alone go to ``feed_frame``."""
    message = {"type": "response.output_item.added", "output_index": 4, "item": {"type": "message", "id": "msg_1"}}
    events = [CREATED, REASONING_ADDED, CALL_ADDED, REASONING_ADDED_3, message, *deltas, COMPLETED]
    frames = [frame(e) if named else b"data: " + orjson.dumps(e) + b"\n\n" for e in events]
    assert_same(frames)
    body = run(frames, typed=True, wire=True)[0]
    chunks = [orjson.loads(line[6:]) for line in body.split(b"\n\n") if line.startswith(b"data: {")]
    said = "".join(c["choices"][0]["delta"].get("reasoning_content") or "" for c in chunks if c["choices"])
    assert said == reasoning


def _text(oi: int, text: str) -> dict[str, Any]:
    return {"type": "response.output_text.delta", "output_index": oi, "content_index": 0, "delta": text}


def _under(name: str, event: dict[str, Any]) -> bytes:
    """``event``'s frame under the event line of ``name``."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


_SUMMARY = "response.reasoning_summary_text.delta"
MESSAGE_4 = {"type": "response.output_item.added", "output_index": 4, "item": {"type": "message", "id": "msg_1"}}
_READERS = ("feed_frame", "reasoning_frame", "call_frame")  # a frame's readers (delta_reads.py)
# Reads once a reasoning delta's head is the pump's hot one (delta_reads.reasoning_frame), each
# after two deltas of one summary part (a part kept), then one more of it.
_AFTER_A_PART: dict[str, list[bytes]] = {
    "the part again": [frame(_summary(0, 0, "c"))],
    "an empty delta": [frame(_summary(0, 0, "")), frame(_summary(0, 0, "c"))],
    "the next summary part": [frame(_summary(0, 1, "c"))],
    "reasoning text under the summary's name": [_under(_SUMMARY, _thought(0, 0, "c"))],
    "a text delta under its name": [
        _under(_SUMMARY, {"type": "response.output_text.delta", "output_index": 4, "content_index": 0, "delta": "hi"})
    ],
    "a call's fragment under its name": [
        _under(_SUMMARY, {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "{}"})
    ],
    "an error under its name": [_under(_SUMMARY, {"type": "error", "code": "busy", "message": "overloaded"})],
    "a null index": [frame({**_summary(0, 0, "c"), "summary_index": None})],
    "a part's done": [
        frame({"type": "response.reasoning_summary_text.done", "output_index": 0, "summary_index": 0, "text": "ab"})
    ],
    "three in a read": [frame(_summary(0, 0, "c")) + frame(_summary(0, 1, "d")) + frame(_summary(0, 1, "e"))],
    "text, then the part, in a read": [frame(_text(4, "hi")) + frame(_summary(0, 0, "c")) + frame(_summary(0, 0, "d"))],
    "the part, then text, in a read": [frame(_summary(0, 0, "c")) + frame(_text(4, "hi")) + frame(_summary(0, 1, "d"))],
    "a text read, then two of the part": [
        frame(_text(4, "hi")),
        frame(_summary(0, 0, "c")) + frame(_summary(0, 0, "d")),
    ],
    "after the stream ended": [frame(COMPLETED), frame(_summary(0, 0, "c"))],
}


@pytest.mark.parametrize("reads", list(_AFTER_A_PART.values()), ids=list(_AFTER_A_PART))
def test_reads_of_the_reasoning_head_same_both_ways(reads: list[bytes]) -> None:
    opened = [frame(CREATED), frame(REASONING_ADDED), frame(CALL_ADDED), frame(MESSAGE_4)]
    kept = [frame(_summary(0, 0, "a")), frame(_summary(0, 0, "b"))]
    assert_same([*opened, *kept, *reads, frame(_summary(0, 0, "f")), frame(COMPLETED)])


def _wire_pump() -> Pump:
    return Pump(
        ResponsesToChatStream(
            include_usage=False, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1, wire=True
        )
    )


def _calls(work: Callable[[], Any], only: tuple[str, ...] | None = _READERS) -> tuple[list[str], Any]:
    """The Python functions ``work()`` calls (of those named ``only``), in order, and what it
    returned."""
    names: list[str] = []

    def profile(f: FrameType, event: str, arg: Any) -> None:
        if event == "call" and (only is None or f.f_code.co_name in only):
            names.append(f.f_code.co_name)

    sys.setprofile(profile)
    try:
        out = work()
    finally:
        sys.setprofile(None)
    return names, out


def _said(outs: list[Any]) -> list[dict[str, Any]]:
    return [orjson.loads(b[6:-2])["choices"][0]["delta"] for b in outs]


def test_a_delta_that_continues_the_part_runs_reasoning_frame_alone() -> None:
    """The pump's read of a reasoning delta that continues the kept part calls ``reasoning_frame``
    and nothing else (no ``feed_frame`` dispatch); ``feed_frame`` of one reads it itself, with no
    call."""
    pump = _wire_pump()
    m = pump.machine
    for event in (CREATED, REASONING_ADDED, _summary(0, 0, "a"), _summary(0, 0, "b")):
        pump.feed(frame(event))
    paced, data = frame(_summary(0, 0, "c")), orjson.dumps(_summary(0, 0, "d"))
    names, (read, direct) = _calls(lambda: (pump.feed(paced), m.feed_frame(data)), None)
    assert names == ["<lambda>", "feed", "reasoning_frame", "feed_frame"]
    assert _said([*read, *(direct or [])]) == [{"reasoning_content": "c"}, {"reasoning_content": "d"}]


def test_the_part_s_frames_in_a_read_the_decoder_splits_run_reasoning_frame() -> None:
    """A read of several frames that the SSE decoder splits (not all of the hot head's: here the
    text head is hot again): each frame named a reasoning delta goes to ``reasoning_frame``,
    the text frame to ``feed_frame``."""
    pump = _wire_pump()
    for event in (CREATED, REASONING_ADDED, MESSAGE_4, _summary(0, 0, "a"), _summary(0, 0, "b"), _text(4, "hi")):
        pump.feed(frame(event))
    read = frame(_summary(0, 0, "c")) + frame(_text(4, "!")) + frame(_summary(0, 0, "d"))
    names, out = _calls(lambda: pump.feed(read))
    assert names == ["reasoning_frame", "feed_frame", "reasoning_frame"]
    assert _said(out) == [{"reasoning_content": "c"}, {"content": "!"}, {"reasoning_content": "d"}]


def _fragment(text: str) -> dict[str, Any]:
    return {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": text}


def test_a_call_s_fragments_run_call_frame() -> None:
    """Once a call's fragment head is the pump's hot one, a fragment's read goes to
    ``call_frame`` (no ``feed_frame`` dispatch); in a read the decoder splits, so does each frame
    named a fragment."""
    pump = _wire_pump()
    for event in (CREATED, CALL_ADDED, MESSAGE_4, _fragment('{"a":')):
        pump.feed(frame(event))
    paced = frame(_fragment("1"))
    split = frame(_fragment(",")) + frame(_text(4, "hi")) + frame(_fragment('"b":2}'))
    first, out = _calls(lambda: pump.feed(paced))
    then, more = _calls(lambda: pump.feed(split))
    assert (first, then) == (["call_frame"], ["call_frame", "feed_frame", "call_frame"])
    said = [d.get("content") or d["tool_calls"][0]["function"]["arguments"] for d in _said(out + more)]
    assert said == ["1", ",", "hi", '"b":2}']


def test_a_long_read_of_fragments_runs_call_frame_before_a_template() -> None:
    """A read of 1 KiB or more before any text (the pump offers it to ``feed_run``, which reads
    its frames one by one until a template is known): each fragment goes to ``call_frame``, and
    each reasoning delta to ``reasoning_frame``, as the general path writes them (the part's
    second teaches a template, but the six after it are fewer than ``RUN_MIN`` bytes: no run)."""
    pieces = [frame(_fragment(f'"k{i}": {i},' * 3)) for i in range(12)]
    thoughts = [frame(_summary(0, 0, f"thinking {i} ")) for i in range(8)]
    reads = [frame(CREATED) + frame(REASONING_ADDED) + b"".join(thoughts), frame(CALL_ADDED), b"".join(pieces)]
    assert len(reads[0]) >= 1024 and len(reads[2]) >= 1024
    assert_same([*reads, frame(COMPLETED)])
    pump = _wire_pump()
    names, _ = _calls(lambda: [pump.feed(read) for read in reads])
    # created, the reasoning item: feed_frame; the first delta (no part kept yet) on to it
    assert names[:4] == ["feed_frame", "feed_frame", "reasoning_frame", "feed_frame"]
    assert names[4:11] == ["reasoning_frame"] * 7  # the second (its template), the six after it
    assert names[11:] == ["feed_frame"] + ["call_frame"] * 12  # the call's item, its fragments
