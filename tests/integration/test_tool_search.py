"""Deferred tools and tool_search on a chat backend, through the official SDK (SSE, not
streamed, WebSocket), with a recorded Codex request's tools of which some are deferred.

The fake backend plays a model that searches for a deferred tool, then calls the tool it found:
a passing test proves the round trip. The backend's first request carries only the non-deferred
tools and the search function; the next leg's tools include the found tool (in its place, before
the search function); the client gets the ``tool_search_call`` and ``tool_search_output`` items
and then the call as an ordinary ``function_call``; a follow-up request replaying those items
has the tool from its first leg. Every SSE body and WebSocket frame passes the strict validator.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import orjson
import pytest
from openai.types.responses import ResponseToolSearchCall, ResponseToolSearchOutputItem

from tests.fakes.upstream import FakeUpstream, JSONReply, Recorded, SSEReply
from tests.support.app_server import ProxyHandle
from tests.support.chat_chunks import DONE, chunk
from tests.support.paths import TESTS
from tests.support.ws import FrameRecorder

pytestmark = pytest.mark.timeout(60)

CODEX = json.loads((TESTS / "fixtures" / "codex" / "shell.1.request.json").read_text())
DEFER = {"view_image", "get_goal", "create_goal", "update_goal"}
ISSUE = {
    "type": "function",
    "name": "create_issue",
    "description": "Open a new issue in a GitHub repository.",
    "parameters": {
        "type": "object",
        "properties": {"title": {"type": "string"}},
        "required": ["title"],
        "additionalProperties": False,
    },
    "strict": False,
    "defer_loading": True,
}
GITHUB = {"type": "namespace", "name": "mcp__github__", "description": "GitHub", "tools": [ISSUE]}
SERVER_RUN = [{**t, "execution": "server"} if t["type"] == "tool_search" else t for t in CODEX["tools"]]
TOOLS = [*({**t, "defer_loading": True} if t.get("name") in DEFER else t for t in SERVER_RUN), GITHUB]
VISIBLE = ["exec_command", "write_stdin", "request_user_input", "apply_patch"]
FOUND = "mcp__github__create_issue"


def call_reply(name: str, args: dict[str, Any], call_id: str) -> SSEReply:
    raw = orjson.dumps(args).decode()
    body = chunk({"role": "assistant", "content": ""})
    body += chunk(
        {
            "tool_calls": [
                {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": raw[:5]}}
            ]
        }
    )
    body += chunk({"tool_calls": [{"index": 0, "function": {"arguments": raw[5:]}}]})
    return SSEReply(body + chunk({}, "tool_calls") + chunk(None, usage=(100, 10)) + DONE, max_piece=23)


def answer_reply(text: str) -> SSEReply:
    body = chunk({"role": "assistant", "content": ""}) + chunk({"content": text})
    return SSEReply(body + chunk({}, "stop") + chunk(None, usage=(100, 5)) + DONE)


def as_json(reply: SSEReply) -> JSONReply:
    """The same reply as a non-streamed completion (one tool call or text)."""
    text, call = "", None
    for line in reply.data.split(b"\n\n"):
        if not line.startswith(b"data: {"):
            continue
        for c in orjson.loads(line[6:]).get("choices") or ():
            text += c["delta"].get("content") or ""
            for tc in c["delta"].get("tool_calls") or ():
                if "id" in tc:
                    call = {
                        "id": tc["id"],
                        "type": "function",
                        "function": {"name": tc["function"]["name"], "arguments": ""},
                    }
                assert call is not None
                call["function"]["arguments"] += tc["function"].get("arguments", "")
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if call:
        message["tool_calls"] = [call]
    return JSONReply(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if call else "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        }
    )


def model(req: Recorded) -> SSEReply | JSONReply:
    """Searches when the tool it needs is not offered; calls it once it is; answers after."""
    tools = [t["function"]["name"] for t in req.body.get("tools") or ()]
    last = req.body["messages"][-1]
    if last["role"] == "tool" and last["tool_call_id"] == "call_issue":
        reply = answer_reply("Opened.")
    elif FOUND in tools:
        reply = call_reply(FOUND, {"title": "Crash on start"}, "call_issue")
    else:
        reply = call_reply("tool_search", {"query": "open a github issue"}, "call_search")
    return reply if req.body.get("stream") else as_json(reply)


def names(req: Recorded) -> list[str]:
    return [t["function"]["name"] for t in req.body["tools"]]


def check_output(output: list[dict[str, Any]]) -> None:
    assert [o["type"] for o in output] == ["tool_search_call", "tool_search_output", "function_call"]
    searched, loaded, call = output
    ResponseToolSearchCall.model_validate(searched)
    ResponseToolSearchOutputItem.model_validate(loaded)
    assert searched["execution"] == loaded["execution"] == "server"
    assert searched["call_id"] == loaded["call_id"] == "call_search"
    assert searched["arguments"] == {"query": "open a github issue"} and searched["status"] == "completed"
    assert loaded["status"] == "completed"
    assert loaded["tools"] == [
        {"type": "namespace", "name": "mcp__github__", "description": "GitHub", "tools": [ISSUE]}
    ]
    assert (call["namespace"], call["name"], call["call_id"]) == ("mcp__github__", "create_issue", "call_issue")
    assert json.loads(call["arguments"]) == {"title": "Crash on start"}


def check_legs(upstream: FakeUpstream) -> None:
    first, second = upstream.requests[:2]
    assert names(first) == [*VISIBLE, "tool_search"]
    description = first.body["tools"][-1]["function"]["description"]
    assert "- mcp__github__.create_issue: Open a new issue in a GitHub repository." in description
    assert "- view_image" in description
    assert names(second) == [*VISIBLE, FOUND, "tool_search"]
    result = second.body["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "call_search" and FOUND in result["content"]
    assert first.body["tools"][:4] == second.body["tools"][:4]  # the prefix a backend caches


async def test_streamed_search_reveals_the_tool_and_the_model_calls_it(
    client: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    upstream.default = model
    stream = await client.responses.create(model="m", input="File a bug", tools=TOOLS, stream=True)  # type: ignore[arg-type]
    events = [e async for e in stream]
    types = [e.type for e in events]
    assert types[:6] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.output_item.added",
        "response.output_item.done",
    ]
    assert types[-1] == "response.completed" and "response.function_call_arguments.done" in types
    final = events[-1].response
    check_output([o.model_dump(exclude_none=True) for o in final.output])
    check_legs(upstream)
    assert len(upstream.requests) == 2

    # the client runs the call and replays the whole turn: the tool is offered from the first leg
    upstream.requests.clear()
    replay = [
        {"role": "user", "content": "File a bug"},
        *(o.model_dump(exclude_none=True) for o in final.output),
        {"type": "function_call_output", "call_id": "call_issue", "output": "issue #7"},
    ]
    again = await client.responses.create(model="m", input=replay, tools=TOOLS, stream=True)  # type: ignore[arg-type]
    done = [e async for e in again][-1].response
    assert done.output_text == "Opened."
    (only,) = upstream.requests
    assert names(only) == [*VISIBLE, FOUND, "tool_search"]
    roles = [(m["role"], [c["function"]["name"] for c in m.get("tool_calls") or ()]) for m in only.body["messages"]]
    assert roles == [("user", []), ("assistant", ["tool_search"]), ("tool", []), ("assistant", [FOUND]), ("tool", [])]


async def test_not_streamed_and_continued_by_previous_response_id(
    client: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    upstream.default = model
    resp = await client.responses.create(model="m", input="File a bug", tools=TOOLS)  # type: ignore[arg-type]
    check_output([o.model_dump(exclude_none=True) for o in resp.output])
    check_legs(upstream)
    upstream.requests.clear()
    done = await client.responses.create(
        model="m",
        previous_response_id=resp.id,
        input=[{"type": "function_call_output", "call_id": "call_issue", "output": "issue #7"}],
        tools=TOOLS,  # type: ignore[arg-type]
    )
    assert done.output_text == "Opened."
    assert names(upstream.requests[0]) == [*VISIBLE, FOUND, "tool_search"]


async def test_over_websocket(proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder) -> None:
    upstream.default = model
    async with ws_frames.connect(proxy.url.replace("http", "ws") + "/v1/responses") as ws:
        turn = await ws.turn(type="response.create", model="m", input="File a bug", tools=TOOLS)
    assert turn.terminal == "response.completed"
    check_output(turn.response["output"])
    check_legs(upstream)


async def test_without_deferred_tools_the_backend_gets_no_search_function(
    client: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    upstream.reply(answer_reply("Hi."))
    stream = await client.responses.create(model="m", input="hi", tools=SERVER_RUN, stream=True)  # type: ignore[arg-type]
    assert [e async for e in stream][-1].type == "response.completed"
    assert names(upstream.requests[0]) == [*VISIBLE, "view_image", "get_goal", "create_goal", "update_goal"]


def client_model(req: Recorded) -> SSEReply | JSONReply:
    """Searches (Codex runs the search) until the tool is offered, then calls it."""
    tools = [t["function"]["name"] for t in req.body.get("tools") or ()]
    reply = (
        call_reply(FOUND, {"title": "Crash on start"}, "call_issue")
        if FOUND in tools
        else call_reply("tool_search", {"query": "open a github issue"}, "call_search")
    )
    return reply if req.body.get("stream") else as_json(reply)


@pytest.mark.parametrize("stream", [True, False])
async def test_a_client_run_search_goes_to_the_client_and_its_output_reveals_the_tools(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, stream: bool
) -> None:
    """Codex's own ``tool_search`` (``execution: "client"``) with no deferred tool declared: the
    backend gets the search function; its call ends the Response as a ``tool_search_call`` for
    the client (crossfeed searches nothing); the client's ``tool_search_output`` reveals the
    tools it loaded to the backend, and the model calls one."""
    upstream.default = client_model
    if stream:
        events = [
            e
            async for e in await client.responses.create(
                model="m", input="File a bug", tools=CODEX["tools"], stream=True
            )
        ]
        assert events[-1].type == "response.completed"
        final = events[-1].response
    else:
        final = await client.responses.create(model="m", input="File a bug", tools=CODEX["tools"])
    (searched,) = [o.model_dump(exclude_none=True) for o in final.output]
    assert final.status == "completed"
    assert (searched["type"], searched["execution"], searched["call_id"]) == (
        "tool_search_call",
        "client",
        "call_search",
    )
    assert searched["arguments"] == {"query": "open a github issue"} and searched["status"] == "completed"
    (first,) = upstream.requests
    assert names(first) == [*VISIBLE, *sorted(DEFER, key=[t.get("name") for t in CODEX["tools"]].index), "tool_search"]

    upstream.requests.clear()
    loaded = {
        "type": "tool_search_output",
        "call_id": "call_search",
        "execution": "client",
        "status": "completed",
        "tools": [GITHUB],
    }
    replay = [{"role": "user", "content": "File a bug"}, searched, loaded]
    again = await client.responses.create(model="m", input=replay, tools=CODEX["tools"], stream=stream)  # type: ignore[arg-type]
    done = [e async for e in again][-1].response if stream else again  # type: ignore[union-attr]
    (call,) = [o.model_dump(exclude_none=True) for o in done.output]  # type: ignore[union-attr]
    assert (call["type"], call["namespace"], call["name"]) == ("function_call", "mcp__github__", "create_issue")
    (only,) = upstream.requests
    assert names(only)[-2:] == [FOUND, "tool_search"]
    roles = [(m["role"], [c["function"]["name"] for c in m.get("tool_calls") or ()]) for m in only.body["messages"]]
    assert roles == [("user", []), ("assistant", ["tool_search"]), ("tool", [])]
