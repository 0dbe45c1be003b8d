"""The OpenAI Agents SDK (OpenAIResponsesModel) through crossfeed, on a chat-only backend.

A two-tool task: the model looks up a city's temperature, converts it, then answers. The fake
backend plays the model: each turn's reply depends on what crossfeed sent it (tool results must
arrive as tool messages for the next step to happen).
"""

from __future__ import annotations

import orjson
import pytest
from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, function_tool, set_tracing_disabled

from tests.fakes.upstream import FakeUpstream, JSONReply, SSEReply
from tests.support.chat_chunks import DONE, chunk


def call(call_id: str, name: str, args: dict) -> bytes:
    text = orjson.dumps(args).decode()
    return (
        chunk({"role": "assistant", "content": "", "reasoning_content": f"need {name}"})
        + chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": text[:5]}}
                ]
            }
        )
        + chunk({"tool_calls": [{"index": 0, "function": {"arguments": text[5:]}}]}, "tool_calls")
        + DONE
    )


def answer(text: str) -> bytes:
    return chunk({"role": "assistant", "content": ""}) + chunk({"content": text}, "stop") + DONE


@function_tool
def get_temperature(city: str) -> str:
    """Current temperature of a city in Celsius."""
    return {"Oslo": "-3"}.get(city, "20")


@function_tool
def to_fahrenheit(celsius: float) -> str:
    """Convert Celsius to Fahrenheit."""
    return str(round(celsius * 9 / 5 + 32, 1))


def completion(message: dict, finish: str) -> JSONReply:
    return JSONReply(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", **message}}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 8, "total_tokens": 38},
        }
    )


def json_call(call_id: str, name: str, args: dict) -> JSONReply:
    return completion(
        {
            "content": None,
            "reasoning_content": f"need {name}",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": orjson.dumps(args).decode()},
                }
            ],
        },
        "tool_calls",
    )


def script(upstream: FakeUpstream, stream: bool) -> None:
    if stream:
        upstream.reply(
            SSEReply(call("call_t", "get_temperature", {"city": "Oslo"}), seed=1),
            SSEReply(call("call_f", "to_fahrenheit", {"celsius": -3}), seed=2),
            SSEReply(answer("It is -3 C (26.6 F) in Oslo."), seed=3),
        )
    else:
        upstream.reply(
            json_call("call_t", "get_temperature", {"city": "Oslo"}),
            json_call("call_f", "to_fahrenheit", {"celsius": -3}),
            completion({"content": "It is -3 C (26.6 F) in Oslo."}, "stop"),
        )


def check_conversation(upstream: FakeUpstream) -> None:
    second, third = upstream.requests[1].body["messages"], upstream.requests[2].body["messages"]
    assert second[-1] == {"role": "tool", "tool_call_id": "call_t", "content": "-3"}
    assert second[-2]["tool_calls"][0]["function"]["name"] == "get_temperature"
    assert third[-1] == {"role": "tool", "tool_call_id": "call_f", "content": "26.6"}
    assert {t["function"]["name"] for t in upstream.requests[0].body["tools"]} == {"get_temperature", "to_fahrenheit"}


@pytest.fixture
def agent(proxy, client) -> Agent:
    set_tracing_disabled(True)
    return Agent(
        name="weather",
        instructions="Answer with both units.",
        tools=[get_temperature, to_fahrenheit],
        model=OpenAIResponsesModel(model="qwen3", openai_client=client),
    )


async def test_runner_run(agent: Agent, upstream: FakeUpstream) -> None:
    script(upstream, stream=False)
    result = await Runner.run(agent, "How cold is Oslo, in both units?", run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == "It is -3 C (26.6 F) in Oslo."
    check_conversation(upstream)


async def test_runner_run_streamed(agent: Agent, upstream: FakeUpstream) -> None:
    script(upstream, stream=True)
    result = Runner.run_streamed(agent, "How cold is Oslo, in both units?", run_config=RunConfig(tracing_disabled=True))
    kinds = [event.type async for event in result.stream_events()]
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
    assert result.final_output == "It is -3 C (26.6 F) in Oslo."
    check_conversation(upstream)
