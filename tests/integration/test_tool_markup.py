"""``tool_markup`` through the whole proxy: the official SDK -> crossfeed -> a fake backend that
replays real server streams of tool-call markup (recorded from llama-server and llama-cpp-python,
tests/fixtures/recorded), cut into random pieces. Every SDK stream passes the strict validator.
"""

from __future__ import annotations

from typing import Any

import openai
import orjson
import pytest

from tests.fakes.upstream import FakeUpstream, SSEReply
from tests.support.captures import read_capture

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture
def proxy_overrides(request: pytest.FixtureRequest) -> dict[str, Any]:
    return {"upstream.tool_markup": getattr(request, "param", "hermes")}


CASES = [
    ("hermes", "recorded/chat/llamaserver-markup-hermes.sse", "Checking the weather.\n"),
    ("mistral", "recorded/chat/llamaserver-markup-mistral.sse", ""),
    ("qwen3_coder", "recorded/chat/llamaserver-markup-qwen3.sse", ""),
    ("qwen3_coder", "recorded/chat/llamacpppython-tool-markup-in-content.sse", ""),
]


@pytest.mark.parametrize(
    ("proxy_overrides", "recording", "text"),
    CASES,
    indirect=["proxy_overrides"],
    ids=[c[1].split("/")[-1] for c in CASES],
)
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_recorded_markup_becomes_one_call(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, recording: str, text: str, seed: int
) -> None:
    upstream.reply(SSEReply(read_capture(recording), seed=seed, max_piece=7))
    stream = await client.responses.create(model="tiny", input="Weather in Paris?", tools=[WEATHER], stream=True)
    deltas, final = [], None
    async for ev in stream:
        if ev.type == "response.output_text.delta":
            deltas.append(ev.delta)
        if ev.type == "response.completed":
            final = ev.response
    assert final is not None and "".join(deltas) == text
    calls = [i for i in final.output if i.type == "function_call"]
    assert [(c.name, orjson.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert "<tool_call>" not in final.output_text and "[TOOL_CALLS]" not in final.output_text


async def test_without_the_option_the_markup_is_text(upstream: FakeUpstream, tmp_path: Any) -> None:
    from tests.support.app_server import running_proxy

    async with running_proxy({"upstream.base_url": upstream.base_url, "store.data_dir": str(tmp_path / "d")}) as handle:
        upstream.reply(SSEReply(read_capture("recorded/chat/llamaserver-markup-mistral.sse")))
        async with openai.AsyncOpenAI(base_url=handle.base_url, api_key="k", max_retries=0) as c:
            async with c.responses.stream(model="tiny", input="Weather in Paris?", tools=[WEATHER]) as s:  # type: ignore[list-item]
                final = await s.get_final_response()
        assert final.output_text == '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}'
        assert not [i for i in final.output if i.type == "function_call"]
