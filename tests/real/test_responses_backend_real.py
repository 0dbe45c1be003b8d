"""llama-server's native ``/v1/responses`` behind crossfeed (``api = "responses"``).

Its stream lacks ``sequence_number``, ``output_index`` and ``content_index``, and its
``output_item.done`` has neither ``output_index`` nor ``item_id``; it ends a stream cut by
``max_output_tokens`` as ``completed``. Reverse: chat clients still get each answer once, and
``finish_reason: length`` when it was cut. Forward with ``normalize_stream``: Responses clients
get a stream the strict validator (and the SDK) accept.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from tests.fakes.tiny_model import TEXT_ANSWER
from tests.real.backends import Direct, proxy_for
from tests.support.app_server import ProxyHandle
from tests.support.clients import Captured, sdk_client
from tests.support.validators import StreamViolation, validate_responses_sse

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CHAT_WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER["parameters"]}}


@pytest.fixture
async def native(llama_server_url: str, tmp_path: Path) -> AsyncIterator[ProxyHandle]:
    handle = await proxy_for(
        llama_server_url,
        tmp_path,
        **{"upstream.api": "responses", "upstream.normalize_stream": True, "upstream.min_output_tokens": 1},
    )
    yield handle
    await handle.stop()


@pytest.fixture
async def sdk(native: ProxyHandle, captured: list[Captured]) -> AsyncIterator[openai.AsyncOpenAI]:
    c = sdk_client(native.base_url, captured, timeout=120)
    yield c
    await c.close()


@pytest.fixture
def server_itself(llama_server_url: str) -> Direct:
    return Direct(llama_server_url)


async def test_the_raw_native_stream_is_one_strict_clients_reject(server_itself: Direct) -> None:
    """Why the option exists: llama-server's own stream fails the validator."""
    status, raw = await server_itself.post("/responses", {"model": "tiny", "input": "hi", "stream": True})
    assert status == 200
    with pytest.raises(StreamViolation):
        validate_responses_sse(raw)


async def chat_stream(c: openai.AsyncOpenAI, **kw: Any) -> tuple[str, str | None, list[Any]]:
    text, finish, calls = [], None, {}
    stream = await c.chat.completions.create(model="tiny", stream=True, **kw)
    async for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.content:
                text.append(choice.delta.content)
            for tc in choice.delta.tool_calls or ():
                slot = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                if tc.function and tc.function.name:
                    slot["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    slot["arguments"] += tc.function.arguments
            finish = choice.finish_reason or finish
    return "".join(text), finish, list(calls.values())


async def test_reverse_chat_client_gets_the_answer_once(sdk: openai.AsyncOpenAI, server_itself: Direct) -> None:
    status, raw = await server_itself.post("/responses", {"model": "tiny", "input": "Say hello"})
    assert status == 200
    ref = "".join(
        p["text"]
        for item in orjson.loads(raw)["output"]
        if item["type"] == "message"
        for p in item["content"]
        if p["type"] == "output_text"
    )
    assert ref == TEXT_ANSWER
    text, finish, _ = await chat_stream(sdk, messages=[{"role": "user", "content": "Say hello"}])
    assert (text, finish) == (ref, "stop")
    whole = await sdk.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Say hello"}])
    assert whole.choices[0].message.content == ref and whole.choices[0].finish_reason == "stop"


async def test_reverse_cut_answer_is_finish_reason_length(sdk: openai.AsyncOpenAI, server_itself: Direct) -> None:
    status, raw = await server_itself.post(
        "/responses", {"model": "tiny", "input": "Say hello", "max_output_tokens": 3}
    )
    body = orjson.loads(raw)
    assert status == 200 and body["status"] == "completed"  # what the server says of a cut answer
    assert body["usage"]["output_tokens"] == 3
    text, finish, _ = await chat_stream(sdk, messages=[{"role": "user", "content": "Say hello"}], max_tokens=3)
    assert finish == "length"
    assert text and TEXT_ANSWER.startswith(text) and text != TEXT_ANSWER
    whole = await sdk.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Say hello"}], max_tokens=3
    )
    assert whole.choices[0].finish_reason == "length" and whole.choices[0].message.content == text


async def test_reverse_tool_call_is_one_call(sdk: openai.AsyncOpenAI) -> None:
    text, finish, calls = await chat_stream(
        sdk, messages=[{"role": "user", "content": "Weather?"}], tools=[CHAT_WEATHER]
    )
    assert finish == "tool_calls" and text == ""
    assert calls == [{"name": "get_weather", "arguments": '{"city":"Paris"}'}]


async def test_normalised_stream_passes_the_strict_validator(sdk: openai.AsyncOpenAI) -> None:
    """Forward to the native endpoint with ``normalize_stream``: the SDK stream helpers accept it
    (and the ``captured`` fixture validates the body strictly)."""
    async with sdk.responses.stream(model="tiny", input="Say hello") as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    assert final.status == "completed" and final.output_text == TEXT_ANSWER
    async with sdk.responses.stream(model="tiny", input="Weather?", tools=[WEATHER]) as stream:  # type: ignore[list-item]
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    calls = [i for i in final.output if i.type == "function_call"]
    assert len(calls) == 1 and orjson.loads(calls[0].arguments) == {"city": "Paris"}


async def test_normalised_cut_stream_is_incomplete(sdk: openai.AsyncOpenAI) -> None:
    stream = await sdk.responses.create(model="tiny", input="Say hello", max_output_tokens=3, stream=True)
    types = [ev.type async for ev in stream]
    assert types[-1] == "response.incomplete"
