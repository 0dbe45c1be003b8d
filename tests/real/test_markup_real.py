"""Tool-call markup in content, from real servers that run no tool parser, read by crossfeed's
per-upstream ``tool_markup`` reader. The reference is llama-server's own parser reading the same
model output (the Qwen3-Coder XML) when it is given the tools.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from tests.real.backends import Direct, proxy_for
from tests.real.weather import CHAT_WEATHER, WEATHER, collect
from tests.support.clients import Captured, sdk_client


async def sdk_for(
    url: str, tmp_path: Path, captured: list[Captured], **overrides: Any
) -> AsyncIterator[openai.AsyncOpenAI]:
    handle = await proxy_for(url, tmp_path, **overrides)
    c = sdk_client(handle.base_url, captured, timeout=120)
    try:
        yield c
    finally:
        await c.close()
        await handle.stop()


@pytest.fixture
async def reference_call(llama_server_url: str) -> dict[str, Any]:
    """llama-server parses the model's call itself when it has the tools."""
    ref = await Direct(llama_server_url).chat(
        {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [CHAT_WEATHER]}
    )
    (call,) = ref["choices"][0]["message"]["tool_calls"]
    return {"name": call["function"]["name"], "arguments": orjson.loads(call["function"]["arguments"])}


def calls_of(final: Any) -> list[dict[str, Any]]:
    return [{"name": i.name, "arguments": orjson.loads(i.arguments)} for i in final.output if i.type == "function_call"]


@pytest.mark.parametrize("stream", [True, False])
async def test_llama_cpp_python_markup_becomes_one_call(
    llama_cpp_python_url: str, tmp_path: Path, captured: list[Captured], reference_call: dict[str, Any], stream: bool
) -> None:
    # Without the reader, the call is text: what a client of that server sees today.
    raw = await Direct(llama_cpp_python_url).chat(
        {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [CHAT_WEATHER]}
    )
    assert raw["choices"][0]["message"]["content"].startswith("<tool_call>")
    async for sdk in sdk_for(llama_cpp_python_url, tmp_path, captured, **{"upstream.tool_markup": "qwen3_coder"}):
        kw: dict[str, Any] = {"model": "tiny", "input": "Weather in Paris?", "tools": [WEATHER]}
        if stream:
            types, text, final = await collect(await sdk.responses.create(stream=True, **kw))
            assert text == "" and "response.output_text.delta" not in types
        else:
            final = await sdk.responses.create(**kw)
        assert final.status == "completed"
        assert calls_of(final) == [reference_call]
        assert [i.type for i in final.output] == ["function_call"]


@pytest.mark.parametrize(
    ("dialect", "markup", "text"),
    [("hermes", "hermes", "Checking the weather.\n"), ("mistral", "mistral", ""), ("qwen3_coder", "qwen3", "")],
)
async def test_llama_server_markup_dialects(
    llama_server_url: str,
    tmp_path: Path,
    captured: list[Captured],
    reference_call: dict[str, Any],
    dialect: str,
    markup: str,
    text: str,
) -> None:
    """No tools in the request, so llama-server parses nothing and streams the markup as text."""
    async for sdk in sdk_for(llama_server_url, tmp_path, captured, **{"upstream.tool_markup": dialect}):
        types, streamed, final = await collect(
            await sdk.responses.create(
                model="tiny", instructions=f"markup={markup}", input="Weather in Paris?", stream=True
            )
        )
        assert final.status == "completed" and streamed == text
        assert calls_of(final) == [reference_call]
        assert types.count("response.function_call_arguments.done") == 1


async def test_without_the_reader_markup_stays_text(
    llama_server_url: str, tmp_path: Path, captured: list[Captured]
) -> None:
    async for sdk in sdk_for(llama_server_url, tmp_path, captured):
        final = await sdk.responses.create(model="tiny", instructions="markup=mistral", input="Weather in Paris?")
        assert final.output_text.startswith("[TOOL_CALLS]get_weather[ARGS]") and calls_of(final) == []
