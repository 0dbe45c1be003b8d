"""Remote MCP tools (the hosted ``mcp`` tool) on a chat backend, with real MCP servers.

The servers are the ``mcp`` package's own (tests/fakes/mcp_server.py), one over streamable HTTP
that wants a bearer token and one over SSE, started once for the session on loopback ports (the
``mcp_urls`` fixture, tests/conftest.py). The
fake chat backend plays a model that calls an MCP tool and then answers from what the tool
returned, so a passing test proves the whole loop. Every SSE body and WebSocket frame passes the
strict validator (extended for the MCP events).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import openai
import orjson
import pytest

from tests.fakes.mcp_server import TEST_TOKEN
from tests.fakes.upstream import FakeUpstream, JSONReply, Recorded, SSEReply
from tests.support.app_server import ProxyHandle, running_proxy
from tests.support.chat_chunks import DONE, chunk
from tests.support.validators import validate_responses_sse
from tests.support.ws import FrameRecorder

pytestmark = pytest.mark.timeout(90)

TOKEN = TEST_TOKEN


@pytest.fixture
def proxy_overrides() -> dict[str, Any]:
    return {"mcp.allowed_servers": ["http://127.0.0.1:*"], "mcp.call_timeout_seconds": 3, "mcp.max_output_bytes": 4096}


def calls_sse(*calls: tuple[str, dict[str, Any]]) -> SSEReply:
    body = chunk({"role": "assistant", "content": ""})
    for i, (name, args) in enumerate(calls):
        raw = orjson.dumps(args).decode()
        body += chunk(
            {
                "tool_calls": [
                    {
                        "index": i,
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": name, "arguments": raw[:4]},
                    }
                ]
            }
        )
        body += chunk({"tool_calls": [{"index": i, "function": {"arguments": raw[4:]}}]})
    return SSEReply(body + chunk({}, "tool_calls") + chunk(None, usage=(90, 12)) + DONE, max_piece=37)


def answer_sse(text: str) -> SSEReply:
    return SSEReply(
        chunk({"role": "assistant", "content": ""})
        + chunk({"content": text}, "stop")
        + chunk(None, usage=(150, 9))
        + DONE,
        max_piece=41,
    )


def as_json(reply: SSEReply) -> JSONReply:
    text, calls = "", []
    for frame in reply.data.split(b"\n\n"):
        if frame.startswith(b"data: {"):
            for c in orjson.loads(frame[6:]).get("choices") or ():
                text += c["delta"].get("content") or ""
                for tc in c["delta"].get("tool_calls") or ():
                    if "id" in tc:
                        calls.append(
                            {
                                "id": tc["id"],
                                "type": "function",
                                "function": {"name": tc["function"]["name"], "arguments": ""},
                            }
                        )
                    calls[tc["index"]]["function"]["arguments"] += tc["function"].get("arguments", "")
    message: dict[str, Any] = {"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})}
    return JSONReply(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 90, "completion_tokens": 12, "total_tokens": 102},
        }
    )


def answering(text: str) -> Any:
    return lambda req: answer_sse(text) if req.body.get("stream") else as_json(answer_sse(text))


def model(*first: tuple[str, dict[str, Any]]) -> Any:
    """Calls ``first`` (or mcp__calc__add 2+40), then answers with every tool result it got."""

    def reply(req: Recorded) -> SSEReply | JSONReply:
        messages = req.body["messages"]
        if messages[-1]["role"] == "tool":
            out = answer_sse("Tools said: " + " | ".join(m["content"] for m in messages if m["role"] == "tool"))
        else:
            out = calls_sse(*(first or (("mcp__calc__add", {"a": 2, "b": 40}),)))
        return out if req.body.get("stream") else as_json(out)

    return reply


def mcp_tool(url: str, label: str = "calc", **kw: Any) -> dict[str, Any]:
    tool = {"type": "mcp", "server_label": label, "server_url": url, "require_approval": "never"}
    if url.endswith("/mcp"):
        tool["headers"] = {"Authorization": f"Bearer {TOKEN}"}
    return {**tool, **kw}


async def test_streamed_call_inside_the_response(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, mcp_urls: dict[str, str]
) -> None:
    upstream.default = model()
    stream = await client.responses.create(model="m", input="2+40?", tools=[mcp_tool(mcp_urls["http"])], stream=True)
    events = [e async for e in stream]
    types = [e.type for e in events]
    assert types[:6] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.output_item.done",
    ]
    assert types[6:13] == [
        "response.output_item.added",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
        "response.output_item.done",
        "response.output_item.added",
    ]
    final = events[-1].response
    assert [o.type for o in final.output] == ["mcp_list_tools", "mcp_call", "message"]
    listing, call, message = final.output
    assert listing.server_label == "calc" and "add" in [t.name for t in listing.tools]
    assert call.name == "add" and call.arguments == '{"a":2,"b":40}' and call.output == "42" and call.error is None
    assert message.content[0].text == "Tools said: 42"
    first = upstream.requests[0].body
    offered = {t["function"]["name"]: t["function"] for t in first["tools"]}
    assert offered["mcp__calc__add"]["parameters"]["required"] == ["a", "b"]
    assert upstream.requests[1].body["messages"][-1] == {"role": "tool", "tool_call_id": "call_0", "content": "42"}
    assert final.usage is not None and final.usage.total_tokens == 102 + 159


async def test_not_streamed_and_over_sse_transport(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, mcp_urls: dict[str, str]
) -> None:
    upstream.default = model(("mcp__text__echo", {"text": "hello"}))
    resp = await client.responses.create(model="m", input="echo", tools=[mcp_tool(mcp_urls["sse"], "text")])
    assert [o.type for o in resp.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert resp.output[1].output == "hello" and resp.output_text == "Tools said: hello"


async def test_over_websocket(
    proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder, mcp_urls: dict[str, str]
) -> None:
    upstream.default = model()
    async with ws_frames.connect(proxy.url.replace("http", "ws") + "/v1/responses") as ws:
        turn = await ws.turn(type="response.create", model="m", input="2+40?", tools=[mcp_tool(mcp_urls["http"])])
    assert turn.terminal == "response.completed"
    assert [i["type"] for i in turn.response["output"]] == ["mcp_list_tools", "mcp_call", "message"]


async def test_parallel_calls_run_concurrently_and_faults_fail_their_item(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, mcp_urls: dict[str, str]
) -> None:
    upstream.default = model(
        ("mcp__calc__meet", {"name": "a"}),
        ("mcp__calc__meet", {"name": "b"}),
        ("mcp__calc__fail", {}),
        ("mcp__calc__slow", {"seconds": 10}),
        ("mcp__calc__big", {"kib": 64}),
        ("mcp__calc__add", {"a": "x"}),
    )
    resp = await client.responses.create(model="m", input="go", tools=[mcp_tool(mcp_urls["http"])])
    calls = [o for o in resp.output if o.type == "mcp_call"]
    assert [(c.name, c.status) for c in calls] == [
        ("meet", "completed"),
        ("meet", "completed"),
        ("fail", "failed"),
        ("slow", "failed"),
        ("big", "completed"),
        ("add", "failed"),
    ]
    assert [c.output for c in calls[:2]] == ["a: met", "b: met"]  # both calls were in at once
    assert "fail tool always fails" in calls[2].error or "Error executing tool fail" in calls[2].error
    assert calls[3].error == "the MCP server did not answer within 3s"
    assert len(calls[4].output.encode()) < 4200 and calls[4].output.endswith("[output cut at 4096 bytes]")
    assert calls[5].error
    assert resp.status == "completed" and resp.output[-1].type == "message"
    told = [m["content"] for m in upstream.requests[1].body["messages"] if m["role"] == "tool"]
    assert told[2].startswith("Error: ") and told[3].startswith("Error: the MCP server did not answer")


async def test_a_server_that_cannot_list_fails_its_listing_not_the_response(
    client: openai.AsyncOpenAI, proxy: ProxyHandle, upstream: FakeUpstream, mcp_urls: dict[str, str]
) -> None:
    upstream.default = answering("No tools, then.")
    dead = {"type": "mcp", "server_label": "dead", "server_url": "http://127.0.0.1:9/mcp", "require_approval": "never"}
    no_token = {"type": "mcp", "server_label": "locked", "server_url": mcp_urls["http"], "require_approval": "never"}
    async with httpx2.AsyncClient(base_url=proxy.base_url, timeout=30) as http:
        r = await http.post("/responses", json={"model": "m", "input": "hi", "stream": True, "tools": [dead, no_token]})
    events = validate_responses_sse(r.content)
    assert [e["type"] for e in events].count("response.mcp_list_tools.failed") == 2
    final = events[-1]["response"]
    assert final["status"] == "completed" and [o["type"] for o in final["output"]] == [
        "mcp_list_tools",
        "mcp_list_tools",
        "message",
    ]
    assert final["output"][0]["error"] == "the MCP server could not be reached" and final["output"][1]["error"]
    assert "tools" not in upstream.requests[0].body


async def test_allowed_tools_filter(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, mcp_urls: dict[str, str]
) -> None:
    upstream.default = answering("ok")
    resp = await client.responses.create(
        model="m",
        input="hi",
        tools=[
            mcp_tool(mcp_urls["http"], allowed_tools=["add", "echo"]),
            mcp_tool(mcp_urls["sse"], "ro", allowed_tools={"read_only": True}),
        ],
    )
    assert [t["function"]["name"] for t in upstream.requests[0].body["tools"]] == [
        "mcp__calc__add",
        "mcp__calc__echo",
        "mcp__ro__lookup",
    ]
    assert [t.name for t in resp.output[0].tools] == ["add", "echo"]


@pytest.mark.parametrize("approve", [True, False])
async def test_approval_then_the_call_or_the_refusal(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, mcp_urls: dict[str, str], approve: bool
) -> None:
    upstream.default = model()
    tools = [mcp_tool(mcp_urls["http"], require_approval="always")]
    first = await client.responses.create(model="m", input="2+40?", tools=tools)
    assert first.status == "completed" and [o.type for o in first.output] == ["mcp_list_tools", "mcp_approval_request"]
    asked = first.output[1]
    assert asked.name == "add" and asked.server_label == "calc" and asked.arguments == '{"a":2,"b":40}'
    assert len(upstream.requests) == 1  # nothing called, nothing continued
    stream = await client.responses.create(
        model="m",
        previous_response_id=first.id,
        tools=tools,
        stream=True,
        input=[{"type": "mcp_approval_response", "approval_request_id": asked.id, "approve": approve}],
    )
    final = [e async for e in stream][-1].response
    sent = upstream.requests[1].body["messages"]
    assert sent[-2]["tool_calls"][0]["id"] == asked.id and sent[-1]["tool_call_id"] == asked.id
    if approve:
        assert [o.type for o in final.output] == ["mcp_call", "message"]  # the listing was reused
        assert final.output[0].approval_request_id == asked.id and final.output[0].output == "42"
        assert sent[-1]["content"] == "42" and final.output_text == "Tools said: 42"
    else:
        assert [o.type for o in final.output] == ["message"]
        assert "did not approve" in sent[-1]["content"]


async def test_filters_choose_which_tools_need_approval(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, mcp_urls: dict[str, str]
) -> None:
    upstream.default = model(("mcp__calc__add", {"a": 1, "b": 1}), ("mcp__calc__echo", {"text": "t"}))
    tools = [mcp_tool(mcp_urls["http"], require_approval={"never": {"tool_names": ["add"]}})]
    resp = await client.responses.create(model="m", input="x", tools=tools)
    assert [o.type for o in resp.output] == ["mcp_list_tools", "mcp_call", "mcp_approval_request"]


async def test_stored_exchange_is_replayed(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, mcp_urls: dict[str, str]
) -> None:
    upstream.default = model()
    tools = [mcp_tool(mcp_urls["http"])]
    first = await client.responses.create(model="m", input="2+40?", tools=tools)
    upstream.default = answering("Still 42.")
    second = await client.responses.create(model="m", input="and now?", tools=tools, previous_response_id=first.id)
    assert [o.type for o in second.output] == ["message"]  # listing reused from the conversation
    sent = upstream.requests[-1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "user"]
    assert sent[1]["tool_calls"][0]["function"]["name"] == "mcp__calc__add" and sent[2]["content"] == "42"


@pytest.mark.parametrize(
    ("allowed", "url"),
    [
        ([], "http://127.0.0.1:1/mcp"),
        (["https://mcp.example.com/*"], "http://127.0.0.1:1/mcp"),
        (["http://127.0.0.1:*"], "http://169.254.169.254/latest"),
    ],
)
async def test_a_server_the_operator_did_not_allow_is_a_400(
    upstream: FakeUpstream, tmp_path: Path, allowed: list[str], url: str
) -> None:
    from crossfeed.proxy.runtime.config import load_config

    async with running_proxy(
        load_config(
            None,
            {},
            {"upstream.base_url": upstream.base_url, "store.data_dir": str(tmp_path), "mcp.allowed_servers": allowed},
        )
    ) as handle:
        async with httpx2.AsyncClient(base_url=handle.base_url, timeout=10) as http:
            r = await http.post(
                "/responses",
                json={
                    "model": "m",
                    "input": "x",
                    "tools": [
                        {"type": "function", "name": "f"},
                        {"type": "mcp", "server_label": "x", "server_url": url},
                    ],
                },
            )
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "tools[1].server_url" and "[mcp] allowed_servers" in err["message"]
    assert upstream.requests == []


async def test_headers_reach_only_the_server(
    client: openai.AsyncOpenAI,
    proxy: ProxyHandle,
    upstream: FakeUpstream,
    mcp_urls: dict[str, str],
    capfd: pytest.CaptureFixture[str],
) -> None:
    upstream.default = model()
    async with httpx2.AsyncClient(base_url=proxy.base_url, timeout=30) as http:
        r = await http.post(
            "/responses", json={"model": "m", "input": "2+40?", "stream": True, "tools": [mcp_tool(mcp_urls["http"])]}
        )
        final = validate_responses_sse(r.content)[-1]["response"]
        assert final["output"][1]["output"] == "42"  # the server took the token
        stored = (await http.get(f"/responses/{final['id']}")).text
    assert TOKEN not in r.text and TOKEN not in stored
    assert "headers" not in final["tools"][0]
    assert all(TOKEN not in json.dumps(req.body) and TOKEN not in json.dumps(req.headers) for req in upstream.requests)
    out = capfd.readouterr()
    assert TOKEN not in out.out and TOKEN not in out.err


@pytest.mark.parametrize("streamed", [False, True])
async def test_agents_sdk_hosted_mcp_tool(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, mcp_urls: dict[str, str], streamed: bool
) -> None:
    from agents import Agent, HostedMCPTool, OpenAIResponsesModel, RunConfig, Runner, set_tracing_disabled

    set_tracing_disabled(True)
    upstream.default = model()
    agent = Agent(
        name="calc",
        instructions="Use the tools.",
        model=OpenAIResponsesModel(model="m", openai_client=client),
        tools=[HostedMCPTool(tool_config=mcp_tool(mcp_urls["http"]))],
    )  # type: ignore[arg-type]
    config = RunConfig(tracing_disabled=True)
    if streamed:
        result = Runner.run_streamed(agent, "2+40?", run_config=config)
        assert "raw_response_event" in [e.type async for e in result.stream_events()]
    else:
        result = await Runner.run(agent, "2+40?", run_config=config)
    assert result.final_output == "Tools said: 42"
    kinds = [type(i).__name__ for i in result.new_items]
    assert "MCPListToolsItem" in kinds and "ToolCallItem" in kinds


async def test_agents_sdk_approval_callback(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, mcp_urls: dict[str, str]
) -> None:
    from agents import Agent, HostedMCPTool, OpenAIResponsesModel, RunConfig, Runner, set_tracing_disabled

    set_tracing_disabled(True)
    upstream.default = model()
    asked: list[str] = []

    def on_approval(request: Any) -> dict[str, Any]:
        asked.append(request.data.name)
        return {"approve": True}

    tool = HostedMCPTool(
        tool_config=mcp_tool(mcp_urls["http"], require_approval="always"),  # type: ignore[arg-type]
        on_approval_request=on_approval,
    )
    agent = Agent(name="calc", model=OpenAIResponsesModel(model="m", openai_client=client), tools=[tool])
    result = await Runner.run(agent, "2+40?", run_config=RunConfig(tracing_disabled=True))
    assert asked == ["add"] and result.final_output == "Tools said: 42"


async def test_approval_in_a_stateless_conversation(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, mcp_urls: dict[str, str]
) -> None:
    """No previous_response_id: the client sends the whole input back, the answer with it."""
    upstream.default = model()
    tools = [mcp_tool(mcp_urls["http"], require_approval="always")]
    first = await client.responses.create(model="m", input="2+40?", tools=tools, store=False)
    history = [{"role": "user", "content": "2+40?"}, *(o.model_dump(exclude_none=True) for o in first.output)]
    asked = first.output[1]
    final = await client.responses.create(
        model="m",
        tools=tools,
        store=False,
        input=[*history, {"type": "mcp_approval_response", "approval_request_id": asked.id, "approve": True}],
    )
    assert [o.type for o in final.output] == ["mcp_call", "message"] and final.output[0].output == "42"
    async with httpx2.AsyncClient(base_url=str(client.base_url), timeout=10) as http:
        r = await http.post(
            "responses",
            json={
                "model": "m",
                "tools": tools,
                "input": [
                    {"role": "user", "content": "x"},
                    {"type": "mcp_approval_response", "approval_request_id": "mcpr_nope", "approve": True},
                ],
            },
        )
    assert r.status_code == 400 and "mcpr_nope" in r.json()["error"]["message"]  # answers nothing asked
    assert r.json()["error"]["param"] == "input[1].approval_request_id"
