"""Web search in the forward translator: citation spans, hidden hosted calls in the forward
machine, and replayed items. The search client is tested in
tests/proxy/turns/hosted/test_search_backends.py, the standalone endpoint Codex calls in
tests/proxy/http/test_standalone_search.py."""

from __future__ import annotations

from typing import Any

from crossfeed.translators.forward.citations import citations
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.forward.web_search_items import replayed, search_function_name
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import ToolContext

A, B = "https://a.example/x", "https://b.example/"


def spans(text: str, sources: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(c["url"], text[c["start_index"] : c["end_index"]]) for c in citations(text, sources)]


def test_citation_spans_cover_exactly_the_citing_text() -> None:
    src = [(A, "A"), (B, "B")]
    assert spans(f"see [the A page]({A}), then {B}.", src) == [(A, f"[the A page]({A})"), (B, B)]
    assert spans("first [2], then [1][1]; not [3] nor [0]", src) == [(B, "[2]"), (A, "[1]"), (A, "[1]")]
    assert spans(f"[x](https://other.example/) and {A}", src) == [(A, A)]
    assert spans(f"{B[:-1]} without the slash, [b]({B[:-1]})", src) == [(B, f"[b]({B[:-1]})")]
    assert citations("nothing here", src) == [] and citations(A, []) == []
    text = f"é{A}"
    (c,) = citations(text, src)
    assert (c["start_index"], c["end_index"]) == (1, 1 + len(A))  # characters, not bytes


def _machine(hosted: frozenset[str]) -> ChatToResponsesStream:
    m = ChatToResponsesStream({"model": "m"}, ids=SequentialIds(), now=lambda: 1, tools=ToolContext(hosted=hosted))
    m.start()
    return m


def _call(i: int, name: str | None, args: str, call_id: str | None = None) -> dict[str, Any]:
    fn: dict[str, Any] = {"arguments": args}
    if name:
        fn["name"] = name
    tc: dict[str, Any] = {"index": i, "function": fn}
    if call_id:
        tc["id"] = call_id
    return {"choices": [{"index": 0, "delta": {"tool_calls": [tc]}}]}


def test_a_call_to_a_hosted_tool_streams_nothing_and_takes_no_index() -> None:
    m = _machine(frozenset({"web_search"}))
    m.feed({"choices": [{"index": 0, "delta": {"content": "Let me look."}}]})
    out = [e for e in m.feed(_call(0, "web_search", '{"que', "c1")) if isinstance(e, dict)]
    assert [e["type"] for e in out] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]  # the message closes; the call shows nothing
    assert m.feed(_call(0, None, 'ry":"x"}')) == []
    added = next(e for e in m.feed(_call(1, "lookup", "{}", "c2")) if isinstance(e, dict))
    assert added["type"] == "response.output_item.added" and added["output_index"] == 1
    m.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    m.end_leg()
    assert m.leg is not None and m.leg.hosted == [{"call_id": "c1", "name": "web_search", "arguments": '{"query":"x"}'}]
    assert [c["name"] for c in m.leg.calls] == ["lookup"]
    assert [o["type"] for o in m.output_since(0)] == ["message", "function_call"]


def test_replayed_web_search_items() -> None:
    call, tool = replayed(
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search", "query": "q", "sources": [{"type": "url", "url": A}]},
        },
        "web_search",
        "ws_1",
    )
    assert call == {"id": "ws_1", "type": "function", "function": {"name": "web_search", "arguments": '{"query":"q"}'}}
    assert tool["tool_call_id"] == "ws_1" and f"[1] {A}" in tool["content"]
    assert "failed" in replayed({"status": "failed", "action": {}}, "f", "x")[1]["content"]
    assert "not kept" in replayed({"action": {"query": "q"}}, "f", "x")[1]["content"]
    assert search_function_name([{"type": "function", "name": "web_search"}]) == "crossfeed_web_search"
    assert search_function_name([{"type": "web_search"}]) == "web_search" and search_function_name(None) == "web_search"
