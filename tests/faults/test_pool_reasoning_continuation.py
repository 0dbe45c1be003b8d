"""Continuation in the reasoning (proxy/turns/continuation.py): a replica that dies while the answer
is still reasoning has it continued by another replica, whose request carries ``"<think>\\n"`` +
the partial reasoning as its trailing assistant message (``reasoning_prefill =
"reasoning_field"``: the partial reasoning in the message's reasoning field, content empty). The
rest may come back as reasoning deltas (a backend with a reasoning parser) or, after a think-tag
prefill, as raw content that goes on with the reasoning, then ``</think>`` and the answer; either
way the SDK reads one reasoning item whose text is the two parts, then the answer (the ``captured`` fixture validates every stream strictly). A
replica that dies in a call after its reasoning still fails the Response."""

from __future__ import annotations

from typing import Any

import pytest

from crossfeed.proxy.runtime.observability import METRICS
from crossfeed.translators.forward.prefill import HOLD
from tests.faults.pool_harness import dying_then_rest, failed_stream, failed_terminals, scripted_pool, served, stream
from tests.support.chat_chunks import DONE, chunk, usage_chunk

THINKING = chunk({"role": "assistant", "content": ""}) + chunk({"reasoning_content": "Let me "})
THINKING += chunk({"reasoning_content": "th"})
AS_REASONING = chunk({"reasoning_content": "ink."}) + chunk({"content": "Answer"}, "stop")
AS_CONTENT = chunk({"content": "ink.</th"}) + chunk({"content": "ink>\n\nAns"}) + chunk({"content": "wer"}, "stop")
END = usage_chunk(12, 4) + DONE
TOOLS = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]


@pytest.mark.parametrize(
    ("rest", "style"),
    [
        (AS_REASONING, "continue_final_message"),
        (AS_CONTENT, "trailing_assistant"),
        (AS_REASONING, "trailing_assistant"),
        (AS_CONTENT, "continue_final_message"),
    ],
    ids=["reasoning_deltas-vllm", "raw_content-llama", "reasoning_deltas-llama", "raw_content-vllm"],
)
async def test_a_replica_dying_mid_reasoning_is_continued_in_the_same_item(tmp_path, captured, rest, style) -> None:
    script = dying_then_rest(THINKING, chunk({"role": "assistant", "content": ""}) + rest + END)
    async with scripted_pool(tmp_path, captured, script, continue_on_failure=True, prefill=style) as pool:
        events = await stream(pool.client)
        metric = pool.proxy.app[METRICS].continuations.labels("gpu", "continued")._value.get()
    first, second = script.calls
    assert second.body["messages"][:-1] == first.body["messages"]
    assert second.body["messages"][-1] == {"role": "assistant", "content": "<think>\nLet me th"}
    if style == "trailing_assistant":  # llama-server refuses a prefill with thinking on
        assert second.body["chat_template_kwargs"]["enable_thinking"] is False
        assert "continue_final_message" not in second.body
    else:
        assert second.body["continue_final_message"] is True and second.body["add_generation_prompt"] is False
        assert "chat_template_kwargs" not in second.body
    assert sorted(served(pool.fakes)) == [1, 1]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    types = [e.type for e in events]
    assert [t for t in types if t in ("response.completed", "response.failed", "response.incomplete")] == [
        "response.completed"
    ]
    added = [e.item.type for e in events if e.type == "response.output_item.added"]
    assert added == ["reasoning", "message"]
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == "Let me think."
    final = events[-1].response
    reasoning = final.output[0]
    assert reasoning.type == "reasoning" and [c.text for c in reasoning.content or []] == ["Let me think."]
    assert final.output_text == "Answer"
    assert metric == 1


async def test_a_replica_that_repeats_the_think_prefill_has_it_dropped(tmp_path, captured) -> None:
    """llama.cpp's server streams the prefill it continues, its <think> too, before the new text."""
    echoed = chunk({"content": "<think>\nLet"}) + chunk({"content": " me th"}) + AS_CONTENT
    script = dying_then_rest(THINKING, chunk({"role": "assistant", "content": None}) + echoed + END)
    async with scripted_pool(tmp_path, captured, script, continue_on_failure=True) as pool:
        events = await stream(pool.client)
    final = events[-1].response
    assert final.status == "completed"
    assert [c.text for c in final.output[0].content or []] == ["Let me think."]
    assert final.output_text == "Answer"


async def test_a_replica_dying_in_a_call_after_its_reasoning_is_not_continued(tmp_path, captured) -> None:
    call = chunk(
        {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"q":'}}]}
    )
    script = dying_then_rest(THINKING + call, b"")
    async with scripted_pool(tmp_path, captured, script, continue_on_failure=True) as pool:
        events: list[dict[str, Any]] = await failed_stream(pool.client, captured, tools=TOOLS)
    assert failed_terminals(events) == ["response.failed"]
    assert events[-1]["response"]["error"]["code"] == "upstream_disconnected"
    assert sum(served(pool.fakes)) == 1


# llama-server with ``reasoning_prefill = "reasoning_field"`` and ``trailing_assistant``: the prefill
# repeated in the reasoning field, the first new text in the same delta (seen on the real server).
ECHOED_IN_REASONING = chunk({"reasoning_content": "Let me think"}) + chunk({"reasoning_content": "."})
ECHOED_IN_REASONING += chunk({"content": "Answer"}, "stop")


@pytest.mark.parametrize(
    ("rest", "style", "field"),
    [
        (ECHOED_IN_REASONING, "trailing_assistant", "reasoning_content"),
        (AS_REASONING, "continue_final_message", "reasoning_content"),
        (AS_REASONING, "trailing_assistant", "reasoning"),
    ],
    ids=["echoed-llama", "vllm-style", "reasoning-field-named-reasoning"],
)
async def test_a_reasoning_field_prefill_carries_the_thought_in_the_field(
    tmp_path, captured, rest, style, field
) -> None:
    """``reasoning_prefill = "reasoning_field"``: the second replica is asked with the partial
    reasoning in the upstream's reasoning field and empty content, no ``<think>``, thinking left on."""
    script = dying_then_rest(THINKING, chunk({"role": "assistant", "content": None}) + rest + END)
    keys = {"prefill": style, "reasoning_prefill": "reasoning_field", "reasoning_field": field}
    async with scripted_pool(tmp_path, captured, script, continue_on_failure=True, **keys) as pool:
        events = await stream(pool.client)
    first, second = script.calls
    assert second.body["messages"][:-1] == first.body["messages"]
    assert second.body["messages"][-1] == {"role": "assistant", "content": "", field: "Let me th"}
    assert "chat_template_kwargs" not in second.body
    assert second.body.get("continue_final_message") is (True if style == "continue_final_message" else None)
    assert sorted(served(pool.fakes)) == [1, 1]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.item.type for e in events if e.type == "response.output_item.added"] == ["reasoning", "message"]
    final = events[-1].response
    assert final.status == "completed"
    assert [c.text for c in final.output[0].content or []] == ["Let me think."]
    assert final.output_text == "Answer"


async def test_after_a_reasoning_field_prefill_content_is_the_answer(tmp_path, captured) -> None:
    """The backend parses the thought it was given, so content with no ``</think>`` is the answer
    at once, however long (after a ``think_tag`` prefill it would be held, then past HOLD taken
    for reasoning)."""
    long = "word " * (HOLD // 5 + 10)
    rest = chunk({"content": long}) + chunk({"content": "end."}, "stop")
    script = dying_then_rest(THINKING, chunk({"role": "assistant", "content": None}) + rest + END)
    async with scripted_pool(
        tmp_path, captured, script, continue_on_failure=True, reasoning_prefill="reasoning_field"
    ) as pool:
        events = await stream(pool.client)
    final = events[-1].response
    assert final.status == "completed"
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert [c.text for c in final.output[0].content or []] == ["Let me th"]
    assert final.output_text == long + "end."
