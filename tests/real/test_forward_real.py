"""Forward against real servers: the official SDK's ``client.responses`` -> crossfeed -> the chat
endpoint of llama.cpp's llama-server and of llama-cpp-python, each serving the tiny scripted
model. Every reference is what the server itself answers to the same chat request; every
stream the SDK reads passes the strict validator (the ``captured`` fixture).
"""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import orjson
import pytest

from tests.fakes.tiny_model import AFTER_TOOL_ANSWER, TEXT_ANSWER
from tests.real.backends import Direct
from tests.real.weather import CHAT_WEATHER, WEATHER, collect

# llama-cpp-python calls a tool only when the request names it; llama-server ignores the name
# (its grammar lets the model choose), and the model calls it anyway.
NAMED = {"type": "function", "name": "get_weather"}
CHAT_NAMED = {"type": "function", "function": {"name": "get_weather"}}


async def test_text_streamed_is_the_servers_text(client: openai.AsyncOpenAI, direct: Direct) -> None:
    ref = await direct.chat({"messages": [{"role": "user", "content": "Say hello"}]})
    assert ref["choices"][0]["message"]["content"] == TEXT_ANSWER  # the model says its script
    types, text, final = await collect(await client.responses.create(model="tiny", input="Say hello", stream=True))
    assert text == TEXT_ANSWER
    assert types[-1] == "response.completed" and final.status == "completed"
    assert final.output_text == TEXT_ANSWER


async def test_text_not_streamed_is_the_servers_text(client: openai.AsyncOpenAI, direct: Direct) -> None:
    ref = await direct.chat(
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}]}
    )
    got = await client.responses.create(model="tiny", instructions="Be brief.", input="Say hello")
    assert got.status == "completed"
    assert got.output_text == ref["choices"][0]["message"]["content"] == TEXT_ANSWER


async def test_usage_is_what_the_server_counts(
    client: openai.AsyncOpenAI, direct: Direct, server: tuple[str, str]
) -> None:
    """llama-cpp-python sends no usage in a stream although crossfeed asks (``include_usage``):
    the streamed Response then counts 0, as documented, and the log notes ``usage_not_reported``."""
    ref = (await direct.chat({"messages": [{"role": "user", "content": "Count me"}]}))["usage"]
    got = await client.responses.create(model="tiny", input="Count me")
    assert got.usage is not None
    assert (got.usage.input_tokens, got.usage.output_tokens) == (ref["prompt_tokens"], ref["completion_tokens"])
    _, _, final = await collect(await client.responses.create(model="tiny", input="Count me", stream=True))
    assert final.usage is not None
    streamed = (final.usage.input_tokens, final.usage.output_tokens)
    assert streamed == ((0, 0) if server[0] == "llama-cpp-python" else (ref["prompt_tokens"], ref["completion_tokens"]))


@pytest.mark.parametrize("stream", [True, False])
async def test_max_output_tokens_reached_is_incomplete(
    client: openai.AsyncOpenAI, direct: Direct, stream: bool
) -> None:
    ref = await direct.chat({"messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 3})
    assert ref["choices"][0]["finish_reason"] == "length"
    cut = ref["choices"][0]["message"]["content"]
    assert cut and TEXT_ANSWER.startswith(cut) and cut != TEXT_ANSWER
    if stream:
        types, text, final = await collect(
            await client.responses.create(model="tiny", input="Say hello", max_output_tokens=3, stream=True)
        )
        assert types[-1] == "response.incomplete" and text == cut
    else:
        final = await client.responses.create(model="tiny", input="Say hello", max_output_tokens=3)
        assert final.output_text == cut
    assert final.status == "incomplete"
    assert final.incomplete_details is not None and final.incomplete_details.reason == "max_output_tokens"


def _calls(response: Any) -> list[Any]:
    return [item for item in response.output if item.type == "function_call"]


@pytest.mark.parametrize("stream", [True, False])
async def test_forced_tool_call_is_one_function_call(client: openai.AsyncOpenAI, direct: Direct, stream: bool) -> None:
    ref = await direct.chat(
        {
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [CHAT_WEATHER],
            "tool_choice": CHAT_NAMED,
        }
    )
    ref_calls = ref["choices"][0]["message"]["tool_calls"]
    assert len(ref_calls) == 1 and ref_calls[0]["function"]["name"] == "get_weather"
    kw: dict[str, Any] = {"model": "tiny", "input": "Weather in Paris?", "tools": [WEATHER], "tool_choice": NAMED}
    if stream:
        types, _, final = await collect(await client.responses.create(**kw, stream=True))
        assert types.count("response.output_item.added") == 1
        assert types.count("response.function_call_arguments.done") == 1
    else:
        final = await client.responses.create(**kw)
    assert final.status == "completed"
    calls = _calls(final)
    assert len(calls) == 1, final.output
    assert calls[0].name == "get_weather"
    assert calls[0].arguments == ref_calls[0]["function"]["arguments"]
    assert orjson.loads(calls[0].arguments) == {"city": "Paris"}


async def test_tool_round_trip(client: openai.AsyncOpenAI, direct: Direct) -> None:
    """The second request carries the call and its output as the server's template renders them."""
    first = await client.responses.create(model="tiny", input="Weather in Paris?", tools=[WEATHER], tool_choice=NAMED)
    call = _calls(first)[0]
    second_input: list[Any] = [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"},
    ]
    ref = await direct.chat(
        {
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "tool_calls": [  # no content key: llama-cpp-python rejects null
                        {
                            "id": call.call_id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": call.call_id, "content": "Sunny, 21 C"},
            ],
            "tools": [CHAT_WEATHER],
        }
    )
    assert ref["choices"][0]["message"]["content"] == AFTER_TOOL_ANSWER
    _, text, final = await collect(
        await client.responses.create(model="tiny", input=second_input, tools=[WEATHER], stream=True)
    )
    assert final.status == "completed" and text == AFTER_TOOL_ANSWER


async def test_twenty_concurrent_streams_each_match_their_reference(client: openai.AsyncOpenAI, direct: Direct) -> None:
    asks = [{"input": "Say hello", "max_output_tokens": 1 + i % 10} for i in range(14)]
    asks += [{"input": "Weather?", "tools": [WEATHER], "tool_choice": NAMED} for _ in range(3)]
    asks += [{"input": "Weather?", "instructions": f"markup={m}"} for m in ("hermes", "mistral", "qwen3")]
    refs = []
    for ask in asks:
        messages = [{"role": "system", "content": ask["instructions"]}] if "instructions" in ask else []
        body: dict[str, Any] = {"messages": [*messages, {"role": "user", "content": ask["input"]}]}
        if "max_output_tokens" in ask:
            body["max_tokens"] = ask["max_output_tokens"]
        if "tools" in ask:
            body |= {"tools": [CHAT_WEATHER], "tool_choice": CHAT_NAMED}
        msg = (await direct.chat(body))["choices"][0]["message"]
        refs.append((msg.get("content") or "", [c["function"]["arguments"] for c in msg.get("tool_calls") or ()]))

    async def one(ask: dict[str, Any]) -> tuple[str, list[str]]:
        _, text, final = await collect(await client.responses.create(model="tiny", stream=True, **ask))
        return text, [c.arguments for c in _calls(final)]

    got = await asyncio.gather(*(one(a) for a in asks))
    assert got == refs
    assert len({r[0] for r in refs}) > 5  # the references differ: each stream has its own


async def test_a_request_the_server_rejects_keeps_its_status_and_message(
    client: openai.AsyncOpenAI, server: tuple[str, str]
) -> None:
    """A prompt longer than the server's context. llama-server answers 400 before streaming;
    llama-cpp-python answers 200 and then an empty body. Neither is ever a success."""
    long_input = "x " * 40_000
    if server[0] == "llama-server":
        with pytest.raises(openai.BadRequestError) as err:
            await client.responses.create(model="tiny", input=long_input, stream=True)
        assert "exceeds the available context size" in str(err.value)
        return
    with pytest.raises(openai.APIError, match="the upstream closed the stream before it finished"):
        await collect(await client.responses.create(model="tiny", input=long_input, stream=True))
    # (the SDK raises at the stream's error event; the body, checked by the validator at teardown,
    # ends with exactly one response.failed)
