"""The turns the inspector's tests run through crossfeed (tests/integration/test_inspector.py and the
browser's, tests/e2e/test_inspector_browser.py): a streamed tool call through the official SDK, a
WebSocket turn, a web-search turn (two backend legs and a search), a turn on a backend with a
quirk, and a slow stream that a test holds open. Every stream and frame passes the strict validator.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import openai
import orjson

from tests.fakes.search import FakeSearch
from tests.fakes.upstream import FakeUpstream, Recorded, SSEReply
from tests.support.chat_chunks import DONE, chunk
from tests.support.clients import Captured, TeeTransport, validate_captured
from tests.support.paths import ROOT
from tests.support.validators import validate_responses_sse
from tests.support.ws import FrameLog, RawWS, ws_url

ADMIN_KEY = "inspector-admin-key-3b9d"
CLIENT_KEY = "sk-client-inspected-77c1"
BACKEND_KEY = "sk-backend-inspected-51e0"
TOOLS = [
    {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
]
PAGES = {"*": [("https://example.org/rust", "Rust 1.80", "LazyCell is stable.")]}


def settings(upstream: FakeUpstream, search: FakeSearch | None = None, **more: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "upstream.base_url": upstream.base_url,
        "upstream.api_key_env": "CF_INSPECTED_BACKEND_KEY",
        "server.inbound_keys_env": "CF_INSPECTED_CLIENT_KEYS",
        "store.backend": "memory",
        "inspector.enabled": True,
        "inspector.admin_key_env": "CF_INSPECTOR_KEY",
    }
    if search is not None:
        out.update({"web_search.backend": "searxng", "web_search.url": search.url, "web_search.timeout_seconds": 5})
    return {**out, **more}


ENVIRON = {
    "CF_INSPECTOR_KEY": ADMIN_KEY,
    "CF_INSPECTED_CLIENT_KEYS": CLIENT_KEY,
    "CF_INSPECTED_BACKEND_KEY": BACKEND_KEY,
}


def tool_call_stream() -> bytes:
    return (
        chunk({"role": "assistant", "content": "Let me look."})
        + chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "lookup"}}]})
        + chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"q": "rust'}}]})
        + chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' 1.80"}'}}]})
        + chunk({}, "tool_calls", usage=(12, 7))
        + DONE
    )


def quirk_stream() -> bytes:
    """llama-cpp-python's duplicate: a legacy ``function_call`` beside the same tool call."""
    call = {"name": "lookup", "arguments": '{"q": "x"}'}
    return (
        chunk({"role": "assistant", "content": "Checking."})
        + chunk(
            {"tool_calls": [{"index": 0, "id": "call_9", "type": "function", "function": call}], "function_call": call}
        )
        + chunk({}, "tool_calls", usage=(5, 3))
        + DONE
    )


def text_stream(text: str) -> bytes:
    body = chunk({"role": "assistant", "content": ""})
    body += b"".join(chunk({"content": text[i : i + 6]}) for i in range(0, len(text), 6))
    return body + chunk({}, "stop", usage=(9, 4)) + DONE


def search_model(req: Recorded) -> SSEReply:
    """Searches once, then answers from what it was given."""
    last = req.body["messages"][-1]
    if last["role"] == "tool":
        return SSEReply(text_stream("Rust 1.80 made LazyCell stable."), max_piece=23)
    args = orjson.dumps({"query": "rust 1.80"}).decode()
    calls = chunk(
        {
            "tool_calls": [
                {"index": 0, "id": "call_s", "type": "function", "function": {"name": "web_search", "arguments": args}}
            ]
        }
    )
    return SSEReply(chunk({"role": "assistant", "content": ""}) + calls + chunk({}, "tool_calls") + DONE, max_piece=29)


def sdk(base_url: str, captured: list[Captured]) -> openai.AsyncOpenAI:
    """The official SDK with the client key, every body it reads recorded (and validated by the caller)."""
    http = httpx2.AsyncClient(transport=TeeTransport(captured), timeout=30)
    return openai.AsyncOpenAI(base_url=base_url, api_key=CLIENT_KEY, http_client=http, max_retries=0)


async def streamed_tool_call(upstream: FakeUpstream, base_url: str) -> str:
    """A streamed turn whose answer is a tool call, through the official SDK; its response id."""
    upstream.reply(SSEReply(tool_call_stream(), max_piece=17))
    captured: list[Captured] = []
    async with sdk(base_url, captured).responses.stream(
        model="m", input="What changed in Rust 1.80?", tools=TOOLS, instructions="Use the tool."
    ) as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    assert validate_captured(captured) == 1
    assert [o.type for o in final.output] == ["message", "function_call"]
    return final.id


async def quirk_turn(upstream: FakeUpstream, base_url: str, previous: str | None = None) -> bytes:
    upstream.reply(SSEReply(quirk_stream(), max_piece=41))
    body: dict[str, Any] = {"model": "m", "input": "again", "stream": True, "tools": TOOLS}
    if previous:
        body["previous_response_id"] = previous
    async with (
        aiohttp.ClientSession() as s,
        s.post(base_url + "/responses", json=body, headers={"Authorization": f"Bearer {CLIENT_KEY}"}) as r,
    ):
        raw = await r.read()
        assert r.status == 200, raw
    validate_responses_sse(raw)
    return raw


async def websocket_turn(upstream: FakeUpstream, url: str) -> list[dict[str, Any]]:
    upstream.reply(SSEReply(text_stream("Hello over the socket."), max_piece=13))
    log = FrameLog("inspected websocket turn")
    async with (
        aiohttp.ClientSession() as s,
        s.ws_connect(ws_url(url), headers={"Authorization": f"Bearer {CLIENT_KEY}"}) as ws,
    ):
        turn = await RawWS(ws, log).turn(model="m", input="Say hello")
    assert turn.events[-1]["type"] == "response.completed", turn.events[-1]
    log.validate()
    return turn.events


async def search_turn(upstream: FakeUpstream, base_url: str) -> Any:
    upstream.default = search_model
    captured: list[Captured] = []
    try:
        async with sdk(base_url, captured).responses.stream(
            model="m", input="What is new in Rust 1.80?", tools=[{"type": "web_search"}]
        ) as stream:
            async for _ in stream:
                pass
            final = await stream.get_final_response()
    finally:
        upstream.default = None
    assert validate_captured(captured) == 1
    assert [o.type for o in final.output] == ["web_search_call", "message"]
    return final


def slow_stream() -> bytes:
    return text_stream("A slow answer that arrives in two halves, the second after a pause.")


async def slow_turn(upstream: FakeUpstream, base_url: str, hold: asyncio.Event) -> bytes:
    """A stream the backend writes half of, then holds until ``hold`` is set."""
    data = slow_stream()
    upstream.reply(SSEReply(data, max_piece=19, holds={len(data) // 2: hold}))
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            base_url + "/responses",
            json={"model": "m", "input": "slowly", "stream": True},
            headers={"Authorization": f"Bearer {CLIENT_KEY}"},
        ) as r,
    ):
        raw = await r.read()
    validate_responses_sse(raw)
    return raw


def replay_case(case: Path) -> subprocess.CompletedProcess[str]:
    """``crossfeed translate --case CASE --check`` as a user runs it (no CROSSFEED_* settings)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSFEED_")}
    return subprocess.run(
        [sys.executable, "-m", "crossfeed", "translate", "--case", str(case), "--check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
