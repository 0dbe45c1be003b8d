"""The hosted web_search tool on a chat backend, through the official SDK (SSE and WebSocket),
against a fake SearXNG (and fakes of Brave and Tavily) that speak their real JSON APIs.

The fake backend plays a model that searches first and answers from the results it was given,
so a passing test proves the round trip: the function offered, the call hidden from the client,
the ``web_search_call`` item and its events, the results fed back, the answer with its citations.
Every SSE body and WebSocket frame passes the strict validator.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import openai
import orjson
import pytest

from tests.fakes.search import FakeSearch
from tests.fakes.upstream import FakeUpstream, JSONReply, Recorded, SSEReply
from tests.support.app_server import ProxyHandle, running_proxy
from tests.support.chat_chunks import DONE, chunk
from tests.support.validators import validate_responses_sse
from tests.support.ws import FrameRecorder

pytestmark = pytest.mark.timeout(60)

BLOG = "https://blog.rust-lang.org/2024/07/25/Rust-1.80.0.html"
DOCS = "https://doc.rust-lang.org/std/"
PAGES = {
    "*": [
        (BLOG, "Announcing Rust 1.80.0", "The Rust team is happy to announce 1.80.0 with LazyCell."),
        (DOCS, "std - Rust", "The Rust Standard Library."),
    ]
}
SEARCH = [{"type": "web_search"}]


def calls_reply(*queries: str, name: str = "web_search", text: str = "") -> SSEReply:
    body = chunk({"role": "assistant", "content": ""})
    if text:
        body += chunk({"content": text})
    for i, q in enumerate(queries):
        raw = orjson.dumps({"query": q}).decode()
        body += chunk(
            {
                "tool_calls": [
                    {
                        "index": i,
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": name, "arguments": raw[:6]},
                    }
                ]
            }
        )
        body += chunk({"tool_calls": [{"index": i, "function": {"arguments": raw[6:]}}]})
    return SSEReply(body + chunk({}, "tool_calls") + chunk(None, usage=(100, 10)) + DONE, max_piece=29)


def answer_reply(text: str) -> SSEReply:
    body = chunk({"role": "assistant", "content": ""}) + b"".join(
        chunk({"content": text[i : i + 9]}) for i in range(0, len(text), 9)
    )
    return SSEReply(body + chunk({}, "stop") + chunk(None, usage=(300, 20)) + DONE, max_piece=31)


ANSWER = f"Rust 1.80 brought LazyCell ([the announcement]({BLOG})); see also {DOCS} and [1]."


def model(req: Recorded) -> SSEReply:
    """Searches once, then answers citing what it got (a tool message with the results)."""
    last = req.body["messages"][-1]
    if last["role"] == "tool":
        return answer_reply(ANSWER if "URL: " in last["content"] else "The search failed, sorry.")
    return calls_reply("rust 1.80 release")


def as_json(reply: SSEReply) -> JSONReply:
    """The same reply as a non-streamed completion."""
    text, calls = "", []
    for line in reply.data.split(b"\n\n"):
        if not line.startswith(b"data: {"):
            continue
        for c in orjson.loads(line[6:]).get("choices") or ():
            d = c["delta"]
            text += d.get("content") or ""
            for tc in d.get("tool_calls") or ():
                if "id" in tc:
                    calls.append(
                        {
                            "id": tc["id"],
                            "type": "function",
                            "function": {"name": tc["function"]["name"], "arguments": ""},
                        }
                    )
                calls[tc["index"]]["function"]["arguments"] += tc["function"].get("arguments", "")
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return JSONReply(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        }
    )


def auto(make: Any) -> Any:
    """A reply function answering streamed requests with its stream, the others as one completion."""

    def reply(req: Recorded) -> SSEReply | JSONReply:
        out = make(req)
        return out if req.body.get("stream") else as_json(out)

    return reply


@pytest.fixture
async def search() -> AsyncIterator[FakeSearch]:
    fake = FakeSearch(pages=dict(PAGES))
    await fake.start()
    yield fake
    await fake.close()


@pytest.fixture
def proxy_overrides(search: FakeSearch) -> dict[str, Any]:
    return {"web_search.backend": "searxng", "web_search.url": search.url, "web_search.timeout_seconds": 2}


def check_answer(final: Any) -> None:
    assert [o.type for o in final.output] == ["web_search_call", "message"]
    ws = final.output[0]
    assert ws.status == "completed" and ws.action.type == "search" and ws.action.query == "rust 1.80 release"
    assert ws.id.startswith("ws_")
    text = final.output[1].content[0]
    assert text.text == ANSWER
    spans = [(a.url, text.text[a.start_index : a.end_index]) for a in text.annotations]
    assert spans == [(BLOG, f"[the announcement]({BLOG})"), (DOCS, DOCS), (BLOG, "[1]")]
    assert all(a.type == "url_citation" and a.title for a in text.annotations)


async def test_streamed_search_inside_the_response(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, search: FakeSearch
) -> None:
    upstream.default = auto(model)
    stream = await client.responses.create(model="m", input="What is new in Rust 1.80?", tools=SEARCH, stream=True)
    events = [e async for e in stream]
    types = [e.type for e in events]
    assert types[:7] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
        "response.output_item.done",
    ]
    assert types.count("response.output_text.annotation.added") == 3 and types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    check_answer(final)
    assert final.usage is not None and (final.usage.input_tokens, final.usage.output_tokens) == (400, 30)
    first, second = (r.body for r in upstream.requests)
    assert [t["function"]["name"] for t in first["tools"]] == ["web_search"]
    assert "Cite" in first["tools"][0]["function"]["description"]
    assert second["messages"][-2]["tool_calls"][0]["function"] == {
        "name": "web_search",
        "arguments": '{"query":"rust 1.80 release"}',
    }
    result = second["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "call_0"
    assert f"[1] Announcing Rust 1.80.0\nURL: {BLOG}" in result["content"]
    assert search.requests[0].query == {"q": "rust 1.80 release", "format": "json"}


async def test_every_legs_tokens_reach_the_token_counters(
    proxy: ProxyHandle, client: openai.AsyncOpenAI, upstream: FakeUpstream, search: FakeSearch
) -> None:
    """A searched turn's usage (both legs summed) is on its summary line and in the token
    counters, streamed as well as answered whole."""
    upstream.default = auto(model)
    stream = await client.responses.create(model="m", input="What is new in Rust 1.80?", tools=SEARCH, stream=True)
    final = [e async for e in stream][-1].response
    assert final.usage is not None and (final.usage.input_tokens, final.usage.output_tokens) == (400, 30)
    whole = await client.responses.create(model="m", input="What is new in Rust 1.80?", tools=SEARCH)
    assert whole.usage is not None and (whole.usage.input_tokens, whole.usage.output_tokens) == (200, 20)
    async with httpx2.AsyncClient() as http:
        text = (await http.get(proxy.url + "/metrics")).text
    assert 'crossfeed_tokens_total{direction="in",model="m"} 600.0' in text, text
    assert 'crossfeed_tokens_total{direction="out",model="m"} 50.0' in text, text


async def test_not_streamed(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.default = auto(model)
    resp = await client.responses.create(model="m", input="What is new in Rust 1.80?", tools=SEARCH)
    check_answer(resp)
    assert resp.usage is not None and resp.usage.total_tokens == 220


async def test_over_websocket(proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder) -> None:
    upstream.default = auto(model)
    async with ws_frames.connect(proxy.url.replace("http", "ws") + "/v1/responses") as ws:
        turn = await ws.turn(type="response.create", model="m", input="What is new?", tools=SEARCH)
    assert turn.terminal == "response.completed"
    assert [i["type"] for i in turn.response["output"]] == ["web_search_call", "message"]
    assert "response.web_search_call.searching" in turn.types()


async def test_two_searches_in_one_turn_run_concurrently(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, search: FakeSearch
) -> None:
    both = asyncio.Event()

    async def gate() -> None:  # each search waits until the other one has started too
        if len(search.requests) >= 2:
            both.set()
        await asyncio.wait_for(both.wait(), 5)

    search.hook = gate
    upstream.reply(
        auto(lambda req: calls_reply("rust 1.80", "rust lazycell")),
        auto(
            lambda req: answer_reply(
                "Both: " + ", ".join(m["content"][:30] for m in req.body["messages"] if m["role"] == "tool")
            )
        ),
    )
    resp = await client.responses.create(model="m", input="two things", tools=SEARCH, parallel_tool_calls=True)
    assert [(o.type, getattr(o, "status", None)) for o in resp.output] == [
        ("web_search_call", "completed"),
        ("web_search_call", "completed"),
        ("message", "completed"),
    ]
    assert [o.action.query for o in resp.output[:2]] == ["rust 1.80", "rust lazycell"]
    tools = [m for m in upstream.requests[1].body["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["call_0", "call_1"]
    assert "[3] Announcing" in tools[1]["content"]  # numbers run on across the searches


@pytest.mark.parametrize("fault", ["500", "garbage", "slow", "shape"])
async def test_a_failed_search_fails_its_item_and_the_response_still_completes(
    proxy: ProxyHandle, upstream: FakeUpstream, search: FakeSearch, fault: str
) -> None:
    search.fail = fault
    upstream.default = auto(model)
    async with httpx2.AsyncClient(base_url=proxy.base_url, timeout=30) as http:
        r = await http.post("/responses", json={"model": "m", "input": "q", "tools": SEARCH, "stream": True})
    events = validate_responses_sse(r.content)
    types = [e["type"] for e in events]
    assert "response.web_search_call.completed" not in types and types[-1] == "response.completed"
    final = events[-1]["response"]
    assert [(o["type"], o["status"]) for o in final["output"]] == [
        ("web_search_call", "failed"),
        ("message", "completed"),
    ]
    told = upstream.requests[1].body["messages"][-1]["content"]
    assert told.startswith("The search failed:") and "http" not in told.lower().replace("http ", "")


async def test_the_search_budget_ends_the_response_incomplete(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, search: FakeSearch
) -> None:
    upstream.default = auto(lambda req: calls_reply("again"))  # a model that never stops searching
    resp = await client.responses.create(model="m", input="q", tools=SEARCH, max_tool_calls=2)
    assert resp.status == "incomplete" and resp.incomplete_details is not None
    assert resp.incomplete_details.reason == "max_messages"
    assert [o.type for o in resp.output] == ["web_search_call", "web_search_call"]
    assert len(search.requests) == 2 and len(upstream.requests) == 3
    last = upstream.requests[2].body
    assert last["tool_choice"] == "none" and last["messages"][-1]["content"].startswith("The search") is False


async def test_spent_searches_leave_one_leg_to_answer(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, search: FakeSearch
) -> None:
    upstream.reply(auto(lambda req: calls_reply("one", "two")), auto(model))
    resp = await client.responses.create(model="m", input="q", tools=SEARCH, max_tool_calls=1)
    assert resp.status == "completed" and [o.type for o in resp.output] == ["web_search_call", "message"]
    tools = [m for m in upstream.requests[1].body["messages"] if m["role"] == "tool"]
    assert tools[0]["content"].startswith('Search results for "one"') and tools[1]["content"].startswith("Not run")
    assert upstream.requests[1].body["tool_choice"] == "none" and len(search.requests) == 1


async def test_tool_choice_forces_the_first_search_only(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.default = auto(model)
    await client.responses.create(model="m", input="q", tools=SEARCH, tool_choice={"type": "web_search"})
    first, second = (r.body for r in upstream.requests)
    assert first["tool_choice"] == {"type": "function", "function": {"name": "web_search"}}
    assert second["tool_choice"] == "auto"


async def test_a_client_function_named_web_search_keeps_its_name(
    client: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    mine = {"type": "function", "name": "web_search", "parameters": {"type": "object", "properties": {}}}
    upstream.reply(auto(lambda req: calls_reply("rust", name="web_search")))
    resp = await client.responses.create(model="m", input="q", tools=[mine, *SEARCH])
    assert [o.type for o in resp.output] == ["function_call"] and resp.output[0].name == "web_search"
    names = [t["function"]["name"] for t in upstream.requests[0].body["tools"]]
    assert names == ["web_search", "crossfeed_web_search"]


async def test_sources_when_asked_and_domains_filtered(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.default = auto(model)
    resp = await client.responses.create(
        model="m",
        input="q",
        include=["web_search_call.action.sources"],
        tools=[
            {"type": "web_search", "filters": {"allowed_domains": ["doc.rust-lang.org"]}, "search_context_size": "low"}
        ],
    )
    assert [s.url for s in resp.output[0].action.sources] == [DOCS]  # blog.rust-lang.org filtered out


async def test_stored_searches_are_replayed_as_the_tool_exchange(
    client: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    upstream.default = auto(model)
    first = await client.responses.create(model="m", input="What is new?", tools=SEARCH)
    upstream.default = None
    upstream.reply(answer_reply("Yes."))
    await client.responses.create(model="m", input="Thanks", previous_response_id=first.id, stream=True)
    msgs = upstream.requests[-1].body["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant", "user"]
    assert msgs[1]["tool_calls"][0]["function"]["name"] == "web_search"
    assert msgs[2]["content"].startswith('Searched for "rust 1.80 release"') and msgs[3]["content"] == ANSWER


@pytest.mark.parametrize(("backend", "path"), [("brave", "/res/v1/web/search"), ("tavily", "/search")])
async def test_keyed_backends(
    upstream: FakeUpstream, search: FakeSearch, tmp_path: Any, backend: str, path: str
) -> None:
    from crossfeed.proxy.runtime.config import load_config
    from crossfeed.translators.ids import SequentialIds

    url = search.url + path
    config = load_config(
        None,
        {},
        {
            "upstream.base_url": upstream.base_url,
            "store.data_dir": str(tmp_path),
            "web_search.backend": backend,
            "web_search.url": url,
            "web_search.api_key_env": "SEARCH_KEY",
        },
    )
    async with running_proxy(config, {"SEARCH_KEY": "sk-search-secret"}, ids=SequentialIds()) as handle:
        upstream.default = auto(model)
        async with openai.AsyncOpenAI(base_url=handle.base_url, api_key="k", max_retries=0) as c:
            check_answer(await c.responses.create(model="m", input="What is new?", tools=SEARCH))
    sent = search.requests[0]
    key = sent.headers.get("X-Subscription-Token") or sent.headers.get("Authorization")
    assert key in ("sk-search-secret", "Bearer sk-search-secret")
    assert (sent.query.get("q") or sent.body["query"]) == "rust 1.80 release"


async def test_without_a_search_backend_the_tool_is_dropped(upstream: FakeUpstream, tmp_path: Any) -> None:
    from crossfeed.proxy.runtime.config import load_config

    config = load_config(None, {}, {"upstream.base_url": upstream.base_url, "store.data_dir": str(tmp_path)})
    async with running_proxy(config) as handle:
        upstream.reply(as_json(answer_reply("No search here.")))
        async with openai.AsyncOpenAI(base_url=handle.base_url, api_key="k", max_retries=0) as c:
            resp = await c.responses.create(model="m", input="q", tools=SEARCH)
    assert resp.output_text == "No search here." and "tools" not in upstream.requests[0].body


@pytest.mark.parametrize("streamed", [False, True])
async def test_agents_sdk_web_search_tool(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, search: FakeSearch, streamed: bool
) -> None:
    from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, WebSearchTool, set_tracing_disabled
    from agents.items import ToolCallItem

    set_tracing_disabled(True)
    upstream.default = auto(model)
    agent = Agent(
        name="researcher",
        instructions="Search, then answer with sources.",
        tools=[WebSearchTool()],
        model=OpenAIResponsesModel(model="qwen3", openai_client=client),
    )
    config = RunConfig(tracing_disabled=True)
    if streamed:
        result = Runner.run_streamed(agent, "What is new in Rust 1.80?", run_config=config)
        kinds = [event.type async for event in result.stream_events()]
        assert "raw_response_event" in kinds
    else:
        result = await Runner.run(agent, "What is new in Rust 1.80?", run_config=config)
    assert result.final_output == ANSWER
    calls = [i for i in result.new_items if isinstance(i, ToolCallItem)]
    assert [getattr(c.raw_item, "type", None) for c in calls] == ["web_search_call"]
    assert len(upstream.requests) == 2 and len(search.requests) == 1  # one Response, two legs
    assert [t["function"]["name"] for t in upstream.requests[0].body["tools"]] == ["web_search"]


async def test_a_leg_with_client_calls_too_runs_the_search_and_hands_the_client_its_calls(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, search: FakeSearch
) -> None:
    mine = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
    body = chunk({"role": "assistant", "content": ""})
    body += chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_s",
                    "type": "function",
                    "function": {"name": "web_search", "arguments": '{"query": "rust"}'},
                }
            ]
        }
    )
    body += chunk(
        {
            "tool_calls": [
                {"index": 1, "id": "call_c", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
            ]
        }
    )
    upstream.reply(SSEReply(body + chunk({}, "tool_calls") + DONE))
    stream = await client.responses.create(model="m", input="q", tools=[mine, *SEARCH], stream=True)
    final = [e async for e in stream][-1].response
    assert final.status == "completed"
    assert [o.type for o in final.output] == ["function_call", "web_search_call"]
    assert final.output[0].call_id == "call_c" and final.output[1].status == "completed"
    assert len(upstream.requests) == 1 and len(search.requests) == 1


async def test_a_failure_between_legs_still_ends_with_one_terminal_event(
    proxy: ProxyHandle, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crossfeed.proxy.turns.hosted import search_runner as searching

    async def broken(*args: Any, **kwargs: Any) -> dict[str, str]:
        raise RuntimeError("a bug in a runner")

    monkeypatch.setattr(searching, "_search_calls", broken)
    upstream.default = auto(model)
    async with httpx2.AsyncClient(base_url=proxy.base_url, timeout=30) as http:
        r = await http.post("/responses", json={"model": "m", "input": "q", "tools": SEARCH, "stream": True})
    events = validate_responses_sse(r.content)
    assert events[-1]["type"] == "response.failed" and events[-1]["response"]["error"]["code"] == "internal_error"
    assert "bug" not in r.text and "Traceback" not in r.text
