"""Legs: one Response made of several upstream calls (``end_leg`` / ``next_leg`` / ``emit_item``
/ ``end_response``), and the JSON framing a WebSocket sink chooses for wire-mode frames."""

from __future__ import annotations

import orjson
import pytest

from crossfeed.translators.errors import StreamStateError
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.sse import JSON_FRAMING, render_json, render_responses
from tests.support.chat_chunks import chat_chunk
from tests.support.validators import validate_responses_events


def machine(**kw: object) -> ChatToResponsesStream:
    return ChatToResponsesStream({"model": "m", "stream": True}, ids=SequentialIds(), now=lambda: 1, **kw)  # type: ignore[arg-type]


CALL = chat_chunk(
    {
        "tool_calls": [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"q":"x"}'}}
        ]
    }
)
USAGE_1 = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
USAGE_2 = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}


def two_legs(m: ChatToResponsesStream) -> list[dict]:
    out = m.start()
    out += m.feed(CALL)
    out += m.feed(chat_chunk({}, "tool_calls", usage=USAGE_1))
    out += m.end_leg()
    assert m.leg is not None and m.leg.finish_reason == "tool_calls"
    assert [c["call_id"] for c in m.leg.calls] == ["call_1"] and m.leg.usage == USAGE_1
    assert not m.done
    out += m.emit_item(
        {"id": "ws_1", "type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "x"}}
    )
    m.next_leg()
    out += m.feed(chat_chunk({"content": "found it"}))
    out += m.feed(chat_chunk({}, "stop", usage=USAGE_2))
    out += m.end_leg()
    assert m.leg is not None and m.leg.calls == [] and m.leg.finish_reason == "stop"
    out += m.end_response()
    return out


def test_two_legs_make_one_response_numbered_throughout() -> None:
    out = two_legs(machine())
    validate_responses_events(out)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    assert [e["type"] for e in out].count("response.created") == 1
    assert out[-1]["type"] == "response.completed"
    final = out[-1]["response"]
    assert [i["type"] for i in final["output"]] == ["function_call", "web_search_call", "message"]
    added = [e["output_index"] for e in out if e["type"] == "response.output_item.added"]
    assert added == [0, 1, 2]
    assert final["usage"]["input_tokens"] == 30 and final["usage"]["output_tokens"] == 8
    assert final["usage"]["total_tokens"] == 38


def test_finish_is_end_leg_then_end_response() -> None:
    a, b = machine(), machine()
    chunks = [chat_chunk({"content": "hi"}), chat_chunk({}, "length", usage=USAGE_1)]
    out_a = a.start() + [e for c in chunks for e in a.feed(c)] + a.finish()
    out_b = b.start() + [e for c in chunks for e in b.feed(c)] + b.end_leg() + b.end_response()
    assert out_a == out_b and out_a[-1]["type"] == "response.incomplete"


def test_a_failed_leg_ends_the_response_and_nothing_follows() -> None:
    m = machine()
    m.start()
    m.feed(chat_chunk({"content": "partial"}))
    out = m.end_leg(clean=False)
    assert out[-1]["type"] == "response.failed" and m.done
    with pytest.raises(StreamStateError):
        m.next_leg()
    with pytest.raises(StreamStateError):
        m.end_response()


def test_between_legs_nothing_is_fed_and_items_only_go_in_between() -> None:
    m = machine()
    m.start()
    with pytest.raises(StreamStateError):
        m.emit_item({"id": "x", "type": "web_search_call", "status": "completed"})
    m.feed(CALL)
    m.end_leg()
    with pytest.raises(StreamStateError):
        m.feed(chat_chunk({"content": "too early"}))
    out = m.fail("upstream_timeout", "the tool took too long")  # a bound that fires between legs
    assert out[-1]["type"] == "response.failed" and out[-1]["response"]["usage"] is None


@pytest.mark.parametrize(
    "chunks",
    [
        [chat_chunk({"content": "Hel"}), chat_chunk({"content": "lo"}), chat_chunk({}, "stop")],
        [chat_chunk({"reasoning_content": "think"}), chat_chunk({"content": "ok"}), chat_chunk({}, "stop")],
        [
            CALL,
            chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "more"}}]}),
            chat_chunk({}, "tool_calls"),
        ],
    ],
)
def test_json_framing_renders_each_event_as_its_json_document(chunks: list[dict]) -> None:
    """A WebSocket sink's frames are exactly the SSE ``data:`` payloads, one document each."""
    sse, js = machine(wire=True), machine(wire=JSON_FRAMING)
    body = render_responses(sse.start() + [e for c in chunks for e in sse.feed(c)] + sse.finish())
    docs = render_json(js.start() + [e for c in chunks for e in js.feed(c)] + js.finish())
    expected = [block.split(b"\ndata: ", 1)[1] for block in body.split(b"\n\n") if block]
    assert docs == expected
    validate_responses_events([orjson.loads(d) for d in docs])
