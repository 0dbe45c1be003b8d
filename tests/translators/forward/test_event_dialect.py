"""The client's event dialect (``events=`` of the forward machine, ``replay_events``): OpenAI's
names by default, the Open Responses names of the raw reasoning events when asked; the rest of
the stream, and the ``reasoning_text`` content part, are the same in both."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import EVENT_NAMES, OPEN_RESPONSES_EVENTS, OPENAI_EVENTS, EventNames
from crossfeed.translators.responses.replay import replay_events
from crossfeed.translators.sse import JSON_FRAMING, render_json, render_responses
from tests.support.chat_chunks import chat_chunk
from tests.support.validators import StreamViolation, validate_responses_events, validate_responses_sse

CHUNKS = [
    chat_chunk({"role": "assistant", "reasoning_content": "Let me "}),
    chat_chunk({"reasoning_content": "think."}),
    chat_chunk({"content": "Hi"}),
    chat_chunk({}, "stop", usage=(3, 4)),
]
OR_DELTA, OR_DONE = "response.reasoning.delta", "response.reasoning.done"
SHARED_KEYS_BUDGET = 29  # the machine's instance-dict attributes at most (test_machine_layers.py says why)


def run(events: EventNames | None, wire: Any = False, request: dict[str, Any] | None = None) -> list[Any]:
    kwargs: dict[str, Any] = {} if events is None else {"events": events}
    m = ChatToResponsesStream(
        request or {"model": "m", "stream": True}, ids=SequentialIds(), now=lambda: 1, wire=wire, **kwargs
    )
    out = m.start()
    for c in CHUNKS:
        out += m.feed(c)
    return out + m.finish()


def types(out: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in out]


def test_open_responses_names_the_raw_reasoning_events_its_way() -> None:
    out = run(OPEN_RESPONSES_EVENTS)
    validate_responses_events(out, dialect="open_responses")  # the Open Responses schema included
    assert types(out).count(OR_DELTA) == 2 and types(out).count(OR_DONE) == 1
    assert not [t for t in types(out) if t.startswith("response.reasoning_text")]
    done = next(e for e in out if e["type"] == OR_DONE)
    assert done["text"] == "Let me think." and done["content_index"] == 0
    reasoning = out[-1]["response"]["output"][0]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Let me think."}]  # valid in both


def test_only_the_names_differ_from_openais_stream() -> None:
    openai, other = run(None), run(OPEN_RESPONSES_EVENTS)
    renamed = {OR_DELTA: "response.reasoning_text.delta", OR_DONE: "response.reasoning_text.done"}
    assert [{**e, "type": renamed.get(e["type"], e["type"])} for e in other] == openai
    assert run(OPENAI_EVENTS) == openai == run(EVENT_NAMES["openai"])


@pytest.mark.parametrize("framing", [True, JSON_FRAMING], ids=["sse", "websocket"])
def test_wire_frames_carry_the_dialects_names(framing: Any) -> None:
    dicts, wired = run(OPEN_RESPONSES_EVENTS), run(OPEN_RESPONSES_EVENTS, wire=framing)
    assert any(isinstance(e, bytes) for e in wired)
    if framing is True:
        body = render_responses(wired)
        assert body == render_responses(dicts)
        assert body.count(b"event: response.reasoning.delta\ndata: ") == 2
        assert validate_responses_sse(body, dialect="open_responses") == dicts
    else:
        frames = render_json(wired)
        assert frames == render_json(dicts)
        validate_responses_events([orjson.loads(f) for f in frames], dialect="open_responses")


def test_a_summary_stream_is_the_same_in_both_dialects() -> None:
    request = {"model": "m", "stream": True, "reasoning": {"summary": "auto"}}
    assert run(OPEN_RESPONSES_EVENTS, request=request) == run(None, request=request)


def test_the_validator_holds_each_dialect_to_its_names() -> None:
    with pytest.raises(StreamViolation, match="OpenAI's name"):
        validate_responses_events(run(None), dialect="open_responses")
    with pytest.raises(StreamViolation, match=r"unknown event type 'response\.reasoning\.delta'"):
        validate_responses_events(run(OPEN_RESPONSES_EVENTS))


def test_the_option_keeps_the_machine_in_the_fast_layout() -> None:
    m = ChatToResponsesStream(
        {"model": "m"}, ids=SequentialIds(), now=lambda: 0, wire=True, events=OPEN_RESPONSES_EVENTS
    )
    m.start()
    for c in CHUNKS:
        m.feed(c)
    m.finish()
    assert len(vars(m)) <= SHARED_KEYS_BUDGET, sorted(vars(m))


def test_a_replay_names_the_events_as_the_live_stream_did() -> None:
    final = run(OPEN_RESPONSES_EVENTS)[-1]["response"]
    replayed = replay_events(final, OPEN_RESPONSES_EVENTS)
    validate_responses_events(replayed, dialect="open_responses")
    assert [t for t in types(replayed) if t.startswith("response.reasoning")] == [OR_DELTA, OR_DONE]
    default = replay_events(final)
    validate_responses_events(default)
    assert "response.reasoning_text.delta" in types(default)
