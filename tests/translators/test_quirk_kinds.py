"""The quirks a translator repairs, counted by kind in its ``diagnostics`` (issue 37): what the
``translation.anomaly`` line and ``crossfeed_translation_anomalies_total`` count at info, and what
a debug log shows one line each (``translation.quirk``, proxy/runtime/turn_trace.py).

  legacy_function_call_dropped  a legacy ``function_call`` beside the same ``tool_calls`` fragment
  tool_markup_parsed            a call the backend wrote as markup in its text
  think_tags_split              a ``<think>`` block taken out of the text (once a block)
  stream_renumbered             a native Responses stream not numbered 0, 1, 2... (once a stream)
  stop_sequence                 the text cut at a chat client's stop sequence (responses -> chat)
"""

from __future__ import annotations

from typing import Any

from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile
from crossfeed.translators.pump import Pump
from crossfeed.translators.responses.normalize import NormalizeResponses
from crossfeed.translators.reverse.stopping import StoppingChatStream
from tests.support import chat_chunks

REQUEST: dict[str, Any] = {
    "model": "m",
    "input": "hi",
    "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}],
}


def chat(*deltas: dict[str, Any], profile: BackendProfile | None = None) -> dict[str, int]:
    m = ChatToResponsesStream(REQUEST, ids=SequentialIds(), now=lambda: 1, profile=profile or BackendProfile())
    m.start()
    pump = Pump(m)
    pump.feed(b"".join(chat_chunks.chunk(d) for d in deltas) + chat_chunks.chunk({}, "stop") + chat_chunks.DONE)
    assert m.done
    return m.diagnostics


def test_a_plain_stream_repairs_nothing() -> None:
    assert chat({"content": "Hello"}, {"content": " there"}) == {"usage_not_reported": 1}


def test_legacy_function_call_beside_tool_calls() -> None:
    fn = {"name": "lookup", "arguments": "{}"}
    diagnostics = chat(
        {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": fn}], "function_call": fn}
    )
    assert diagnostics["legacy_function_call_dropped"] == 1
    assert "legacy_function_call_dropped" not in chat({"function_call": fn})  # alone it is the call: nothing dropped


def test_think_tags_split_once_a_block() -> None:
    profile = BackendProfile(think_tags=True)
    diagnostics = chat({"content": "<think>let me"}, {"content": " see</think>Hello"}, profile=profile)
    assert diagnostics["think_tags_split"] == 1
    assert "think_tags_split" not in chat({"content": "no thinking here"}, profile=profile)


def test_tool_markup_parsed() -> None:
    profile = BackendProfile(tool_markup="hermes")
    call = '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'
    assert chat({"content": "Sure. " + call}, profile=profile)["tool_markup_parsed"] == 1
    assert "tool_markup_parsed" not in chat({"content": "Sure."}, profile=profile)


def normalized(events: list[dict[str, Any]]) -> dict[str, int]:
    m = NormalizeResponses(ids=SequentialIds(), now=lambda: 1)
    for e in events:
        m.feed(e)
    return m.diagnostics


RESPONSE = {"id": "resp_1", "object": "response", "created_at": 1, "model": "m", "status": "in_progress", "output": []}
DONE = {**RESPONSE, "status": "completed", "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}


def test_a_native_stream_renumbered_once() -> None:
    numbered = [
        {"type": "response.created", "response": RESPONSE, "sequence_number": 0},
        {"type": "response.in_progress", "response": RESPONSE, "sequence_number": 1},
        {"type": "response.completed", "response": DONE, "sequence_number": 2},
    ]
    assert "stream_renumbered" not in normalized(numbered)
    unnumbered = [{k: v for k, v in e.items() if k != "sequence_number"} for e in numbered]  # llama-server
    assert normalized(unnumbered)["stream_renumbered"] == 1
    skipping = [{**e, "sequence_number": 2 * i} for i, e in enumerate(numbered)]
    assert normalized(skipping)["stream_renumbered"] == 1


def test_a_stop_sequence_cut() -> None:
    m = StoppingChatStream(
        stop=("END",), include_usage=False, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1
    )
    events = [
        {"type": "response.created", "response": RESPONSE},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []},
        },
        {
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": "a END b",
        },
    ]
    for e in events:
        m.feed(e)
    assert m.diagnostics.get("stop_sequence") == 1
