"""Reverse direction: the official SDK's chat API against crossfeed, in front of a Responses backend."""

from __future__ import annotations

import openai
import orjson
import pytest

from tests.fakes.upstream import FakeUpstream, JSONReply, SSEReply
from tests.support.captures import data_objects, read_capture


@pytest.fixture
def proxy_overrides() -> dict[str, object]:
    return {"upstream.api": "responses"}


def capture(name: str, **kw: object) -> SSEReply:
    return SSEReply(read_capture(f"responses/{name}"), **kw)  # type: ignore[arg-type]


def capture_deltas(name: str, event_type: str) -> str:
    """The joined ``delta`` of one event type in a Responses capture, read without crossfeed."""
    return "".join(e["delta"] for e in data_objects(read_capture(f"responses/{name}")) if e["type"] == event_type)


MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Add 2 and 3, multiply 2 and 3"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": n,
            "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
        },
    }
    for n in ("add", "multiply")
]


async def test_stream_text_with_usage(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(capture("openai-gpt4omini-text-logprobs.sse", seed=1, max_piece=31))
    stream = await client.chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = [c async for c in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == capture_deltas("openai-gpt4omini-text-logprobs.sse", "response.output_text.delta")
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["stop"]
    sent = upstream.requests[-1]
    assert sent.path == "/v1/responses"
    assert sent.body["instructions"] == "Be brief." and sent.body["stream"] is True
    assert sent.body["input"][0]["role"] == "user"
    assert sent.body["store"] is False


async def test_stream_helper_parallel_tool_calls(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(capture("openai-gpt5-reasoning-parallel-function-calls.sse", seed=7))
    async with client.chat.completions.stream(model="gpt-5", messages=MESSAGES, tools=TOOLS) as stream:
        final = await stream.get_final_completion()
    msg = final.choices[0].message
    assert final.choices[0].finish_reason == "tool_calls"
    assert [tc.function.name for tc in msg.tool_calls] == ["add", "multiply"]
    assert all(orjson.loads(tc.function.arguments) for tc in msg.tool_calls)
    assert len({tc.id for tc in msg.tool_calls}) == 2
    tools_sent = upstream.requests[-1].body["tools"]
    assert [t["name"] for t in tools_sent] == ["add", "multiply"] and tools_sent[0]["strict"] is False


async def test_reasoning_reaches_chat_clients(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(capture("deepseek-v4flash-responses-reasoning-text.sse", seed=3))
    stream = await client.chat.completions.create(model="deepseek-v4-flash", messages=MESSAGES, stream=True)
    reasoning = []
    async for c in stream:
        if c.choices:
            extra = c.choices[0].delta.model_extra or {}
            reasoning.append(extra.get("reasoning_content") or "")
    assert "".join(reasoning) == capture_deltas(
        "deepseek-v4flash-responses-reasoning-text.sse", "response.reasoning_text.delta"
    )


async def test_non_streaming(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(
        JSONReply(
            {
                "id": "resp_1",
                "object": "response",
                "created_at": 5,
                "status": "completed",
                "model": "gpt-x",
                "output": [
                    {
                        "id": "msg_1",
                        "type": "message",
                        "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": "Five.", "annotations": []}],
                    }
                ],
                "usage": {
                    "input_tokens": 9,
                    "output_tokens": 2,
                    "total_tokens": 11,
                    "input_tokens_details": {"cached_tokens": 1},
                    "output_tokens_details": {"reasoning_tokens": 0},
                },
            }
        )
    )
    r = await client.chat.completions.create(model="gpt-x", messages=MESSAGES)
    assert r.choices[0].message.content == "Five." and r.choices[0].finish_reason == "stop"
    assert r.usage.prompt_tokens == 9 and r.usage.prompt_tokens_details.cached_tokens == 1
    assert upstream.requests[-1].body["stream"] is False


async def test_failed_stream_raises_in_sdk(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(capture("openai-gpt5nano-error-then-failed.sse"))
    stream = await client.chat.completions.create(model="gpt-5-nano", messages=MESSAGES, stream=True)
    with pytest.raises(openai.APIError):
        async for _ in stream:
            pass


async def test_failed_non_stream_keeps_status(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(
        JSONReply(
            {
                "id": "resp_2",
                "object": "response",
                "created_at": 5,
                "status": "failed",
                "model": "m",
                "output": [],
                "error": {"code": "rate_limit_exceeded", "message": "slow down"},
            }
        )
    )
    with pytest.raises(openai.RateLimitError) as info:
        await client.chat.completions.create(model="m", messages=MESSAGES)
    assert "slow down" in info.value.message


@pytest.mark.parametrize(("field", "value"), [("seed", 3), ("logit_bias", {"1": 2}), ("n", 9), ("stop", ["a"] * 5)])
async def test_unsupported_params_name_the_param(client: openai.AsyncOpenAI, field: str, value: object) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await client.chat.completions.create(model="m", messages=MESSAGES, **{field: value})
    assert info.value.param == field


async def test_responses_endpoint_passes_through(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(capture("openai-gpt4omini-parallel-function-calls.sse", seed=11))
    async with client.responses.stream(model="gpt-4o-mini", input="x") as stream:
        final = await stream.get_final_response()
    assert [o.type for o in final.output] == ["function_call", "function_call"]
    assert upstream.requests[-1].body == {"model": "gpt-4o-mini", "input": "x", "stream": True}
