"""The Open Responses check itself (tests/support/open_responses.py): it rejects what the schema
rejects, and it reads OpenAI's names where the two specifications differ."""

from __future__ import annotations

import pytest

from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.responses.response_object import fill_response, new_response
from tests.support.open_responses import OpenResponsesViolation, check_events, check_response

REQUEST = {
    "model": "m",
    "input": "hi",
    "stream": True,
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}, {"type": "web_search"}],
}


def stream(reasoning: str = "", text: str = "Hi") -> list[dict]:
    m = ChatToResponsesStream(REQUEST, ids=SequentialIds(), now=lambda: 5)
    out = m.start()
    if reasoning:
        out += m.feed({"choices": [{"index": 0, "delta": {"reasoning_content": reasoning}}]})
    out += m.feed({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]})
    out += m.finish()
    return [e for e in out if isinstance(e, dict)]


def test_crossfeed_stream_passes_and_its_response_is_whole() -> None:
    events = stream(reasoning="think")
    check_events(events)
    final = events[-1]["response"]
    assert final["completed_at"] == 5 and final["tools"][0]["strict"] is True
    assert "response.reasoning_text.delta" in [e["type"] for e in events]  # OpenAI's name, kept


@pytest.mark.parametrize("missing", ["completed_at", "presence_penalty", "frequency_penalty", "text"])
def test_a_response_without_a_required_field_is_rejected(missing: str) -> None:
    resp = new_response(REQUEST, response_id="resp_1", created_at=1, model="m")
    check_response(resp)
    del resp[missing]
    with pytest.raises(OpenResponsesViolation, match=missing):
        check_response(resp)


def test_a_function_tool_without_strict_is_rejected() -> None:
    resp = new_response({}, response_id="resp_1", created_at=1, model="m")
    resp["tools"] = [{"type": "function", "name": "f", "parameters": {}}]
    with pytest.raises(OpenResponsesViolation, match="strict"):
        check_response(resp)


def test_an_event_missing_its_fields_is_rejected() -> None:
    events = stream()
    delta = next(e for e in events if e["type"] == "response.output_text.delta")
    del delta["item_id"]
    with pytest.raises(OpenResponsesViolation, match=r"output_text\.delta"):
        check_events(events)


def test_fill_response_completes_a_backend_response_and_keeps_what_it_sent() -> None:
    sent = {
        "id": "resp_x",
        "object": "response",
        "created_at": 3,
        "status": "in_progress",
        "model": "m",
        "output": [],
        "error": None,
        "incomplete_details": None,
        "usage": None,
        "temperature": 0.5,
        "reasoning": {"effort": "low"},
    }
    resp = fill_response(dict(sent))
    check_response(resp)
    assert resp["temperature"] == 0.5 and resp["completed_at"] is None and resp["reasoning"]["effort"] == "low"
