"""Property tests: any upstream byte sequence, split anywhere, through the SSE decoder and both
stream machines (wrapped in the same ``Pump`` the relay drives).

Never an exception escaping; the outputs always form a valid client stream with exactly one
terminal event (Responses: completed / incomplete / failed; Chat: one finish_reason or one error
object), whether the upstream ends with EOF (``finish``) or the transport fails (``fail``); and the
outputs do not depend on where the bytes were split.

Inputs: raw random bytes; plausible streams built from real event shapes and then mutated (values
replaced by random JSON, events dropped, duplicated or swapped, garbage and comments inserted,
line ends changed, cut short).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from crossfeed.translators.errors import UpstreamProtocolError
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile
from crossfeed.translators.pump import Pump
from crossfeed.translators.reverse.machine import ResponsesToChatStream
from crossfeed.translators.sse import SSEDecoder
from tests.faults import fault_upstream as fu
from tests.support.validators import validate_chat_chunks, validate_responses_events

# No shrinking: a failure is reported as found (shrinking these inputs takes tens of seconds).
SETTINGS = settings(
    max_examples=120,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
texts = st.text(max_size=20)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for p in points:
        out.append(data[prev:p])
        prev = p
    out.append(data[prev:])
    return out


# -- plausible upstream streams, then mutated ---------------------------------------------------------------


@st.composite
def chat_events(draw: Any) -> list[dict[str, Any]]:
    text = draw(texts)
    kw: dict[str, Any] = {"text": text, "pieces": fu.pieces_of(text, draw(st.integers(1, 5))) if text else []}
    if draw(st.booleans()):
        kw["reasoning"] = draw(st.text(min_size=1, max_size=12))
    if draw(st.booleans()):
        kw["tool"] = (draw(st.text(min_size=1, max_size=8)), draw(st.text(max_size=12)))
    kw["finish"] = draw(
        st.sampled_from(
            [
                "stop",
                "length",
                "content_filter",
                "tool_calls",
                None,
                "weird",
                "insufficient_system_resource",
                "model_length",
                "error",
                "abort",
            ]
        )
    )
    kw["usage"] = draw(st.booleans())
    return fu.chat_stream_events(**kw)


@st.composite
def responses_events(draw: Any) -> list[dict[str, Any]]:
    text = draw(texts)
    kw: dict[str, Any] = {"text": text, "pieces": fu.pieces_of(text, draw(st.integers(1, 5))) if text else []}
    if draw(st.booleans()):
        kw["reasoning"] = draw(st.text(min_size=1, max_size=12))
    if draw(st.booleans()):
        kw["tool"] = (draw(st.text(min_size=1, max_size=8)), draw(st.text(max_size=12)))
    kw["terminal"] = draw(st.booleans())
    kw["close_items"] = draw(st.booleans())
    events = fu.responses_stream_events(**kw)
    ending = draw(st.sampled_from(["as_is", "incomplete", "failed", "error"]))
    if ending == "incomplete" and events[-1]["type"] == "response.completed":
        resp = {
            **events[-1]["response"],
            "status": "incomplete",
            "incomplete_details": {"reason": draw(st.sampled_from(["max_output_tokens", "content_filter", "x"]))},
        }
        events[-1] = {**events[-1], "type": "response.incomplete", "response": resp}
    elif ending in ("failed", "error"):
        if ending == "error":
            events.append({"type": "error", "code": "e", "message": draw(texts), "param": None})
        events.append(
            {
                "type": "response.failed",
                "response": fu.response_object("failed", [], error={"code": "server_error", "message": draw(texts)}),
            }
        )
    return events


def mutate(draw: Any, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    events = [dict(e) for e in events]
    for _ in range(draw(st.integers(0, 4))):
        if not events:
            break
        op = draw(st.sampled_from(["value", "drop", "dup", "swap", "delete_key", "nested"]))
        i = draw(st.integers(0, len(events) - 1))
        if op == "value":
            keys = sorted(events[i]) or ["type"]
            events[i][draw(st.sampled_from(keys))] = draw(json_values)
        elif op == "nested":
            for key in ("choices", "delta", "item", "response", "part"):
                if isinstance(events[i].get(key), dict):
                    inner = dict(events[i][key])
                    if inner:
                        inner[draw(st.sampled_from(sorted(inner)))] = draw(json_values)
                    events[i][key] = inner
                elif isinstance(events[i].get(key), list) and events[i][key] and isinstance(events[i][key][0], dict):
                    first = dict(events[i][key][0])
                    if isinstance(first.get("delta"), dict) and first["delta"]:
                        delta = dict(first["delta"])
                        delta[draw(st.sampled_from(sorted(delta)))] = draw(json_values)
                        first["delta"] = delta
                    events[i][key] = [first, *events[i][key][1:]]
        elif op == "drop":
            del events[i]
        elif op == "dup":
            events.insert(i, dict(events[i]))
        elif op == "swap" and len(events) > 1:
            j = draw(st.integers(0, len(events) - 1))
            events[i], events[j] = events[j], events[i]
        elif op == "delete_key" and events[i]:
            del events[i][draw(st.sampled_from(sorted(events[i])))]
    return events


GARBAGE = [
    b"data: {not json\n\n",
    b"data: [1, 2]\n\n",
    b"data: null\n\n",
    b": comment\n\n",
    b"event: error\n",
    b"retry: 10\n",
    b"id: 5\n",
    b"\n\n",
    b"data: [DONE]\n\n",
    b"data:\n\n",
    b"garbage line\n",
    b"data: \xff\xfe\n\n",
    b'data: {"error": {"message": "boom"}}\n\n',
    b"event: response.failed\n",
]


@st.composite
def upstream_bytes(draw: Any, shape: str) -> bytes:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=600))
    events = mutate(draw, draw(chat_events() if shape == "chat" else responses_events()))
    frames = [fu.sse(e) if shape == "chat" else fu.sse(e, str(e.get("type") or "x")) for e in events]
    for _ in range(draw(st.integers(0, 3))):
        frames.insert(draw(st.integers(0, len(frames))), draw(st.sampled_from(GARBAGE)))
    if shape == "chat" and draw(st.booleans()):
        frames.append(b"data: [DONE]\n\n")
    data = b"".join(frames)
    eol = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    if eol != b"\n":
        data = data.replace(b"\n", eol)
    if draw(st.integers(0, 3)) == 0:
        data = data[: draw(st.integers(0, len(data)))]
    return data


# -- drivers --------------------------------------------------------------------------------------------------


def run_forward(chunks: list[bytes], fail_at: int | None) -> list[dict[str, Any]]:
    machine = ChatToResponsesStream({"model": "m", "input": "x"}, ids=SequentialIds(), now=lambda: 1)
    pump = Pump(machine, max_event_bytes=4096)
    out = list(machine.start())
    for n, c in enumerate(chunks):
        if fail_at is not None and n == fail_at:
            out += pump.fail("upstream_disconnected", "the upstream connection closed")
            break
        out += pump.feed(c)
        if pump.done:
            break
    else:
        out += pump.finish()
    if fail_at is not None:
        out += pump.fail("upstream_timeout", "late failure")  # after the end: must add nothing
    return out


def run_reverse(chunks: list[bytes], fail_at: int | None, usage: bool) -> list[dict[str, Any]]:
    machine = ResponsesToChatStream(
        include_usage=usage, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1, model="m"
    )
    pump = Pump(machine, max_event_bytes=4096)
    out: list[dict[str, Any]] = []
    for n, c in enumerate(chunks):
        if fail_at is not None and n == fail_at:
            out += pump.fail("upstream_disconnected", "the upstream connection closed")
            break
        out += pump.feed(c)
        if pump.done:
            break
    else:
        out += pump.finish()
    if fail_at is not None:
        out += pump.fail("upstream_timeout", "late failure")
    return out


def check_forward(events: list[dict[str, Any]]) -> None:
    validate_responses_events(events)
    terminal = [e for e in events if e["type"] in ("response.completed", "response.incomplete", "response.failed")]
    assert len(terminal) == 1 and terminal[0] is events[-1]
    orjson.dumps(events)  # renderable


def check_reverse(chunks: list[dict[str, Any]], usage: bool) -> None:
    validate_chat_chunks(chunks, expect_usage=None)
    errors = [c for c in chunks if c.get("error")]
    finishes = [c for c in chunks for ch in c.get("choices") or [] if ch.get("finish_reason")]
    assert len(errors) + len(finishes) == 1, f"{len(errors)} errors, {len(finishes)} finish reasons"
    if errors:
        assert chunks[-1] is errors[0]
        assert errors[0]["error"].get("message")
    orjson.dumps(chunks)


# -- properties -----------------------------------------------------------------------------------------------


@SETTINGS
@given(st.binary(max_size=3000), st.lists(st.integers(0, 10_000), max_size=12))
def test_sse_decoder_any_bytes_any_split(data: bytes, cuts: list[int]) -> None:
    """Same events whatever the split; the only exception is the protocol error for oversize lines."""
    whole = SSEDecoder()
    expected = whole.feed(data) + whole.finish()
    parts = SSEDecoder()
    got = []
    for piece in split(data, cuts):
        got += parts.feed(piece)
    got += parts.finish()
    assert got == expected
    small = SSEDecoder(max_event_bytes=16)
    try:
        for piece in split(data, cuts):
            small.feed(piece)
        small.finish()
    except UpstreamProtocolError:
        pass


@SETTINGS
@given(st.data())
def test_forward_machine_any_bytes(data: Any) -> None:
    raw = data.draw(upstream_bytes("chat"))
    cuts = data.draw(st.lists(st.integers(0, 100_000), max_size=15))
    chunks = split(raw, cuts)
    fail_at = data.draw(st.none() | st.integers(0, len(chunks)))
    events = run_forward(chunks, fail_at)
    check_forward(events)
    if fail_at is None:
        assert events == run_forward([raw], None), "the output depends on where the bytes were split"


@SETTINGS
@given(st.data())
def test_reverse_machine_any_bytes(data: Any) -> None:
    raw = data.draw(upstream_bytes("responses"))
    cuts = data.draw(st.lists(st.integers(0, 100_000), max_size=15))
    usage = data.draw(st.booleans())
    chunks = split(raw, cuts)
    fail_at = data.draw(st.none() | st.integers(0, len(chunks)))
    out = run_reverse(chunks, fail_at, usage)
    check_reverse(out, usage)
    if fail_at is None:
        assert out == run_reverse([raw], None, usage), "the output depends on where the bytes were split"


@SETTINGS
@given(st.binary(max_size=2000), st.lists(st.integers(0, 10_000), max_size=10))
def test_both_machines_raw_bytes(data: bytes, cuts: list[int]) -> None:
    check_forward(run_forward(split(data, cuts), None))
    check_reverse(run_reverse(split(data, cuts), None, True), True)


def test_unmutated_streams_succeed() -> None:
    """Sanity for the generators: the unmutated shapes translate into successful streams."""
    chat = b"".join(fu.ok_frames("chat"))
    events = run_forward(split(chat, [7, 100, 333]), None)
    check_forward(events)
    assert events[-1]["type"] == "response.completed"
    resp = b"".join(fu.ok_frames("responses"))
    chunks = run_reverse(split(resp, [5, 200, 901]), None, True)
    check_reverse(chunks, True)
    assert any(ch.get("finish_reason") == "stop" for c in chunks for ch in c.get("choices") or [])


# -- minimal reproductions of what the properties found (named, so a failure says what broke) -------------

_CHUNK = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
MALFORMED_CHAT = {
    "choices-true": {**_CHUNK, "choices": True},
    "choices-null-entry": {**_CHUNK, "choices": [None]},
    "content-number": {**_CHUNK, "choices": [{"index": 0, "delta": {"content": 5}}]},
    "tool-call-number": {**_CHUNK, "choices": [{"index": 0, "delta": {"tool_calls": [5]}}]},
    "tool-function-string": {
        **_CHUNK,
        "choices": [
            {"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": "f"}]}}
        ],
    },
    "usage-string": {**_CHUNK, "choices": [], "usage": "lots"},
    "delta-list": {**_CHUNK, "choices": [{"index": 0, "delta": ["x"]}]},
}


@pytest.mark.parametrize("name", sorted(MALFORMED_CHAT))
def test_forward_machine_malformed_chunk(name: str) -> None:
    """A JSON chunk of the wrong shape ends the stream cleanly; the machine must not raise (in the
    relay a raise loses the events of that chunk: a gap in sequence_number)."""
    head = b"".join(fu.ok_frames("chat")[:2])
    tail = b"".join(fu.ok_frames("chat")[2:])
    events = run_forward([head, fu.sse(MALFORMED_CHAT[name]), tail], None)
    check_forward(events)


def test_reverse_machine_call_fragment_before_item_added() -> None:
    """Argument deltas for a call whose output_item.added never came (or comes later) must not
    open a chat tool call without a name."""
    events = fu.responses_stream_events(tool=("get_weather", '{"a": 1}'))
    added = next(
        i
        for i, e in enumerate(events)
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"
    )
    moved = events.pop(added)
    events.insert(added + 2, moved)  # after the first argument delta
    check_reverse(run_reverse([b"".join(fu.frames("responses", events))], None, True), True)
