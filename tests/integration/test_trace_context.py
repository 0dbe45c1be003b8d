"""The client's W3C trace context passed on while tracing is off (proxy/runtime/tracing.py).

No ``OTEL_*`` variable: crossfeed traces nothing, yet a client's valid ``traceparent`` (and its
``tracestate``) reaches every backend call of its turn and the MCP servers it calls, unchanged. An
invalid ``traceparent`` is not passed (nor its ``tracestate``); without one, nothing is sent.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from crossfeed.proxy.keys import TRACER
from tests.fakes.mcp_server import TEST_TOKEN
from tests.fakes.search import FakeSearch
from tests.fakes.upstream import FakeUpstream, JSONReply, Recorded
from tests.support.app_server import ProxyHandle, running_proxy
from tests.support.chat_replies import call_reply, json_text, text_reply
from tests.support.ws import FrameRecorder

pytestmark = pytest.mark.timeout(60)

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACESTATE = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
CONTEXT = {"traceparent": TRACEPARENT, "tracestate": TRACESTATE}


@contextlib.asynccontextmanager
async def untraced(
    monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream, tmp_path: Path, **overrides: Any
) -> AsyncIterator[ProxyHandle]:
    """The proxy with no ``OTEL_*`` variable: tracing off."""
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    settings = {"upstream.base_url": upstream.base_url, "store.data_dir": str(tmp_path / "data"), **overrides}
    async with running_proxy(settings, environ={}) as proxy:
        assert not proxy.app[TRACER].on
        yield proxy


async def post(proxy: ProxyHandle, body: dict[str, Any], headers: dict[str, str], path: str = "/v1/responses") -> bytes:
    async with aiohttp.ClientSession() as session, session.post(proxy.url + path, json=body, headers=headers) as r:
        raw = await r.read()
        assert r.status == 200, raw
        return raw


def tool_then_answer(name: str) -> Any:
    """A model that calls ``name`` once, then answers."""

    def reply(req: Recorded) -> Any:
        done = req.body["messages"][-1]["role"] == "tool"
        return text_reply("Done.") if done else call_reply("call_0", name, '{"query": "what is a"}')

    return reply


def context(req: Recorded) -> dict[str, str]:
    """The trace context headers a request came with."""
    return {k.lower(): v for k, v in req.headers.items() if k.lower() in ("traceparent", "tracestate")}


async def test_a_streamed_and_a_whole_turn_pass_it_on(
    monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream, tmp_path: Path
) -> None:
    upstream.reply(text_reply("One."), json_text("Two."))
    async with untraced(monkeypatch, upstream, tmp_path) as proxy:
        assert b"response.completed" in await post(proxy, {"model": "m", "input": "a", "stream": True}, CONTEXT)
        assert orjson.loads(await post(proxy, {"model": "m", "input": "b"}, CONTEXT))["status"] == "completed"
    assert [context(r) for r in upstream.requests] == [CONTEXT, CONTEXT]


async def test_a_chat_completion_and_a_websocket_turn_pass_it_on(
    monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream, tmp_path: Path, ws_frames: FrameRecorder
) -> None:
    upstream.reply(text_reply("One."), text_reply("Two."), text_reply("Three."))
    async with untraced(monkeypatch, upstream, tmp_path) as proxy:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        await post(proxy, body, CONTEXT, "/v1/chat/completions")
        url = proxy.url.replace("http", "ws") + "/v1/responses"
        async with ws_frames.connect(url, headers=CONTEXT) as ws:
            for text in ("two", "three"):  # each frame's turn
                turn = await ws.turn(type="response.create", model="m", input=text, store=False)
                assert turn.terminal == "response.completed"
    assert [context(r) for r in upstream.requests] == [CONTEXT, CONTEXT, CONTEXT]


async def test_the_next_request_on_a_connection_does_not_inherit_it(
    monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream, tmp_path: Path
) -> None:
    upstream.reply(text_reply("One."), text_reply("Two."))
    async with untraced(monkeypatch, upstream, tmp_path) as proxy, aiohttp.ClientSession() as session:
        for headers in (CONTEXT, {}):  # one keep-alive connection, two requests
            body = {"model": "m", "input": "a", "stream": True}
            async with session.post(proxy.url + "/v1/responses", json=body, headers=headers) as r:
                assert r.status == 200 and b"response.completed" in await r.read()
    assert [context(r) for r in upstream.requests] == [CONTEXT, {}]


@pytest.mark.parametrize(
    "sent",
    [
        {},  # nothing sent: nothing passed
        {"tracestate": TRACESTATE},  # a tracestate alone is not passed
        {"traceparent": TRACEPARENT.upper(), "tracestate": TRACESTATE},  # upper-case hex
        {"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"},  # trace id all zeros
        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01"},  # parent id all zeros
        {"traceparent": "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},  # another version
        {"traceparent": TRACEPARENT + "-00"},  # a field too many
        {"traceparent": "garbage", "tracestate": TRACESTATE},
    ],
)
async def test_an_invalid_or_missing_traceparent_is_not_passed(
    monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream, tmp_path: Path, sent: dict[str, str]
) -> None:
    upstream.reply(text_reply("One."))
    async with untraced(monkeypatch, upstream, tmp_path) as proxy:
        await post(proxy, {"model": "m", "input": "a", "stream": True}, sent)
    assert context(upstream.requests[0]) == {}


async def test_a_tracestate_over_512_characters_is_left_out(
    monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream, tmp_path: Path
) -> None:
    upstream.reply(text_reply("One."))
    async with untraced(monkeypatch, upstream, tmp_path) as proxy:
        await post(proxy, {"model": "m", "input": "a", "stream": True}, {**CONTEXT, "tracestate": "k=" + "v" * 511})
    assert context(upstream.requests[0]) == {"traceparent": TRACEPARENT}


async def test_both_legs_of_a_web_search_turn_pass_it_on(
    monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream, tmp_path: Path
) -> None:
    search = FakeSearch(pages={"*": [("https://example.org/a", "A page", "What the page says.")]})
    await search.start()
    upstream.default = tool_then_answer("web_search")
    settings = {"web_search.backend": "searxng", "web_search.url": search.url}
    try:
        async with untraced(monkeypatch, upstream, tmp_path, **settings) as proxy:
            body = {"model": "m", "input": "a?", "stream": True, "tools": [{"type": "web_search"}]}
            assert b"web_search_call" in await post(proxy, body, CONTEXT)
    finally:
        await search.close()
    assert [context(r) for r in upstream.requests] == [CONTEXT, CONTEXT]


async def test_an_mcp_server_gets_it(
    monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream, tmp_path: Path, mcp_urls: dict[str, str]
) -> None:
    upstream.default = tool_then_answer("mcp__calc__traceparent")
    tool = {
        "type": "mcp",
        "server_label": "calc",
        "server_url": mcp_urls["http"],
        "require_approval": "never",
        "headers": {"Authorization": f"Bearer {TEST_TOKEN}"},
    }
    settings = {"mcp.allowed_servers": ["http://127.0.0.1:*"]}
    async with untraced(monkeypatch, upstream, tmp_path, **settings) as proxy:
        raw = await post(proxy, {"model": "m", "input": "trace?", "stream": True, "tools": [tool]}, CONTEXT)
    final = [orjson.loads(line[6:]) for line in raw.split(b"\n") if line.startswith(b"data: {")][-1]
    mcp_call = next(o for o in final["response"]["output"] if o["type"] == "mcp_call")
    assert mcp_call["output"] == TRACEPARENT  # the header the MCP server saw
    assert [context(r) for r in upstream.requests] == [CONTEXT, CONTEXT]


async def test_a_token_count_passes_it_to_the_tokenizer(
    monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream, tmp_path: Path
) -> None:
    upstream.reply(JSONReply({"count": 42, "max_model_len": 8192, "tokens": []}))
    async with untraced(monkeypatch, upstream, tmp_path, **{"upstream.tokenizer": "vllm"}) as proxy:
        raw = await post(proxy, {"model": "m", "input": "hi"}, CONTEXT, "/v1/responses/input_tokens")
    assert orjson.loads(raw)["input_tokens"] == 42
    assert upstream.requests[0].path == "/tokenize" and context(upstream.requests[0]) == CONTEXT


async def test_a_token_count_on_a_responses_backend_passes_it_on(
    monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream, tmp_path: Path
) -> None:
    upstream.reply(JSONReply({"object": "response.input_tokens", "input_tokens": 7}))
    async with untraced(monkeypatch, upstream, tmp_path, **{"upstream.api": "responses"}) as proxy:
        raw = await post(proxy, {"model": "m", "input": "hi"}, CONTEXT, "/v1/responses/input_tokens")
    assert orjson.loads(raw) == {"object": "response.input_tokens", "input_tokens": 7}
    assert upstream.requests[0].path == "/v1/responses/input_tokens" and context(upstream.requests[0]) == CONTEXT
