"""LangChain (``ChatOpenAI(use_responses_api=True)``) and pydantic-ai (``OpenAIResponsesModel``)
as their users run them, through crossfeed in front of a fake chat backend that streams
DeepSeek-style ``reasoning_content``. Reasoning must be visible to them (they ask for
``reasoning.summary``), and a streamed tool round trip must send the reasoning back to the
backend (DeepSeek-style backends refuse a tool turn without it). Every SDK stream is validated.
"""

from __future__ import annotations

from typing import Any

import httpx2
import orjson
import pytest

from tests.fakes.upstream import FakeUpstream, JSONReply, SSEReply
from tests.support.app_server import ProxyHandle, running_proxy
from tests.support.chat_replies import ANSWER, REASONING, reasoning_then
from tests.support.clients import Captured, TeeTransport


def http(captured: list[Captured]) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=TeeTransport(captured), timeout=30)


# -- LangChain ------------------------------------------------------------------------------------


def langchain(proxy: ProxyHandle, captured: list[Captured]) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model="deepseek-reasoner",
        base_url=proxy.base_url,
        api_key="sk-test",
        use_responses_api=True,
        reasoning={"effort": "medium", "summary": "auto"},
        http_async_client=http(captured),
        max_retries=0,
    )


def _reasoning_text(message: Any) -> str:
    return "".join(b.get("reasoning", "") for b in message.content_blocks if b.get("type") == "reasoning")


async def test_langchain_stream_shows_the_reasoning(
    proxy: ProxyHandle, upstream: FakeUpstream, captured: list[Captured]
) -> None:
    upstream.reply(reasoning_then(ANSWER))
    full = None
    async for piece in langchain(proxy, captured).astream("Weather in Paris?"):
        full = piece if full is None else full + piece
    assert full is not None
    assert _reasoning_text(full).strip() == REASONING
    assert full.text.strip() == ANSWER


async def test_langchain_streamed_tool_loop_sends_the_reasoning_back(
    proxy: ProxyHandle, upstream: FakeUpstream, captured: list[Captured]
) -> None:
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    upstream.reply(reasoning_then(call=("get_weather", {"city": "Paris"})), reasoning_then(ANSWER))
    model = langchain(proxy, captured).bind_tools([get_weather])
    question = HumanMessage("Weather in Paris?")
    first = None
    async for piece in model.astream([question]):
        first = piece if first is None else first + piece
    assert first is not None and [c["name"] for c in first.tool_calls] == ["get_weather"]
    call = first.tool_calls[0]
    result = ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])
    second = None
    async for piece in model.astream([question, first, result]):
        second = piece if second is None else second + piece
    assert second is not None and second.text.strip() == ANSWER
    sent = upstream.requests[1].body["messages"]
    turn = next(m for m in sent if m["role"] == "assistant")
    assert turn["tool_calls"][0]["function"]["name"] == "get_weather"
    assert turn.get("reasoning_content", "").strip() == REASONING  # the backend gets its reasoning back
    assert sent[-1] == {"role": "tool", "tool_call_id": turn["tool_calls"][0]["id"], "content": "sunny in Paris"}


async def test_langchain_streamed_tool_loop_without_a_reasoning_param(
    proxy: ProxyHandle, upstream: FakeUpstream, captured: list[Captured]
) -> None:
    """No ``reasoning`` asked: the reasoning streams as reasoning text, which LangChain's stream
    merge leaves out, so it replays the reasoning item by id only (``summary: []``,
    ``content: []``). crossfeed fills it from its store, as OpenAI does: the backend's tool
    turn still gets its reasoning."""
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    sent_bodies: list[dict[str, Any]] = []

    async def record(request: httpx2.Request) -> None:
        sent_bodies.append(orjson.loads(request.content))

    upstream.reply(reasoning_then(call=("get_weather", {"city": "Paris"})), reasoning_then(ANSWER))
    client = httpx2.AsyncClient(transport=TeeTransport(captured), timeout=30, event_hooks={"request": [record]})
    chat = ChatOpenAI(
        model="deepseek-reasoner",
        base_url=proxy.base_url,
        api_key="sk-test",
        use_responses_api=True,
        http_async_client=client,
        max_retries=0,
    )
    model = chat.bind_tools([get_weather])
    question = HumanMessage("Weather in Paris?")
    first = None
    async for piece in model.astream([question]):
        first = piece if first is None else first + piece
    assert first is not None and [c["name"] for c in first.tool_calls] == ["get_weather"]
    call = first.tool_calls[0]
    result = ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])
    second = None
    async for piece in model.astream([question, first, result]):
        second = piece if second is None else second + piece
    assert second is not None and second.text.strip() == ANSWER
    assert "reasoning" not in sent_bodies[1]
    (replayed,) = [i for i in sent_bodies[1]["input"] if i.get("type") == "reasoning"]
    assert replayed["id"] and not replayed.get("content") and not replayed.get("summary")  # by id only
    assert not replayed.get("encrypted_content")
    sent = upstream.requests[1].body["messages"]
    turn = next(m for m in sent if m["role"] == "assistant")
    assert turn.get("reasoning_content", "").strip() == REASONING  # filled from the store
    assert sent[-1] == {"role": "tool", "tool_call_id": turn["tool_calls"][0]["id"], "content": "sunny in Paris"}


# -- pydantic-ai ----------------------------------------------------------------------------------


def agent(proxy: ProxyHandle, captured: list[Captured], **kw: Any) -> Any:
    import openai
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIResponsesModel, OpenAIResponsesModelSettings
    from pydantic_ai.providers.openai import OpenAIProvider

    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="sk-test", http_client=http(captured), max_retries=0)
    model = OpenAIResponsesModel("deepseek-reasoner", provider=OpenAIProvider(openai_client=client))
    settings = OpenAIResponsesModelSettings(
        openai_reasoning_summary="detailed", openai_reasoning_effort="medium", openai_send_reasoning_ids=True
    )
    return Agent(model, model_settings=settings, **kw)


async def test_pydantic_ai_run_stream_shows_thinking(
    proxy: ProxyHandle, upstream: FakeUpstream, captured: list[Captured]
) -> None:
    from pydantic_ai.messages import ThinkingPart

    upstream.reply(reasoning_then(ANSWER))
    async with agent(proxy, captured).run_stream("Weather in Paris?") as run:
        text = await run.get_output()
        messages = run.all_messages()
    assert text.strip() == ANSWER
    thinking = [p.content for m in messages for p in getattr(m, "parts", ()) if isinstance(p, ThinkingPart)]
    assert "".join(thinking).strip() == REASONING


async def test_pydantic_ai_tool_run(proxy: ProxyHandle, upstream: FakeUpstream, captured: list[Captured]) -> None:
    upstream.reply(reasoning_then(call=("get_weather", {"city": "Paris"})), reasoning_then(ANSWER))
    a = agent(proxy, captured)

    @a.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    async with a.run_stream("Weather in Paris?") as run:
        output = await run.get_output()
    assert output.strip() == ANSWER
    sent = upstream.requests[1].body["messages"]
    assert any(m["role"] == "tool" and m["content"] == "sunny in Paris" for m in sent)
    turn = next(m for m in sent if m["role"] == "assistant")
    assert turn.get("reasoning_content", "").strip() == REASONING


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


async def test_langchain_with_structured_output(
    proxy: ProxyHandle, upstream: FakeUpstream, captured: list[Captured]
) -> None:
    from pydantic import BaseModel

    class Weather(BaseModel):
        city: str
        sunny: bool

    upstream.reply(
        JSONReply(
            {
                "id": "c",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": '{"city": "Paris", "sunny": true}'},
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14},
            }
        )
    )
    llm = langchain(proxy, captured).with_structured_output(Weather)
    got = await llm.ainvoke("Weather in Paris?")
    assert got == Weather(city="Paris", sunny=True)
    fmt = upstream.requests[0].body["response_format"]
    assert fmt["type"] == "json_schema" and set(fmt["json_schema"]["schema"]["properties"]) == {"city", "sunny"}


# -- LangChain in chat mode, reverse: a Responses backend --------------------------------------------


async def test_langchain_chat_mode_stop_and_n(upstream: FakeUpstream, tmp_path: Any, captured: list[Captured]) -> None:
    """``ChatOpenAI`` in chat mode (no Responses API) in front of a Responses backend: ``stop=``
    is applied by crossfeed across chunks, ``n=2`` gives two generations."""
    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI

    from crossfeed.proxy.runtime.config import load_config
    from tests.support.responses_replies import answer, final_response

    async with running_proxy(
        load_config(
            None,
            {},
            {
                "upstream.base_url": upstream.base_url,
                "upstream.api": "responses",
                "store.data_dir": str(tmp_path / "d"),
            },
        )
    ) as handle:
        llm = ChatOpenAI(
            model="m", base_url=handle.base_url, api_key="k", max_retries=0, http_async_client=http(captured)
        )
        upstream.reply(SSEReply(b"".join(answer(["The weather ", "is sun", "ny. END here", " more"]))))
        cut = ""
        async for piece in llm.astream("Weather?", stop=["END"]):
            cut += piece.text
        assert cut == "The weather is sunny. "
        upstream.reply(JSONReply(final_response("One.")), JSONReply(final_response("Two.")))
        result = await llm.agenerate([[HumanMessage("Count")]], n=2)
        assert sorted(g.text for g in result.generations[0]) == ["One.", "Two."]
