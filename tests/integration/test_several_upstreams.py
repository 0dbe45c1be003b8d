"""Behaviour that only shows with several upstreams or with inbound keys, through the OpenAI SDK
on a real port:

- stored-response endpoints find a response wherever it lives: crossfeed's store (made through
  a chat upstream) or the Responses upstream that made it, whichever upstream is the default;
- ``max_concurrent_streams`` counts passed-through streams too (429 past the cap), not
  non-streaming requests;
- with inbound keys on, the client's key (crossfeed's own) never reaches a backend.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import openai
import pytest

from crossfeed.proxy.runtime.config import load_config
from crossfeed.proxy.runtime.guard import LIMITS
from crossfeed.translators.responses.response_object import new_response
from tests.fakes.upstream import FakeUpstream, JSONReply, Recorded, SSEReply
from tests.support.app_server import ProxyHandle, running_proxy, start_proxy
from tests.support.chat_chunks import DONE, chunk
from tests.support.clients import Captured, TeeTransport, validate_captured


def stored_response(rid: str, text: str) -> dict[str, Any]:
    """A whole stored Response, as OpenAI's API answers it."""
    return {
        **new_response({}, response_id=rid, created_at=1, model="gpt-x"),
        "status": "completed",
        "completed_at": 2,
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
            }
        ],
    }


def responses_backend(known: dict[str, dict[str, Any]]):  # type: ignore[no-untyped-def]
    """A Responses upstream that knows some stored responses and answers 404 for the others."""

    def answer(req: Recorded) -> JSONReply:
        rid = req.path.rsplit("/", 1)[-1]
        if req.method == "GET" and rid in known:
            return JSONReply(known[rid])
        return JSONReply(
            {
                "error": {
                    "message": f"Response with id '{rid}' not found.",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "not_found",
                }
            },
            status=404,
        )

    return answer


@pytest.fixture
async def two() -> AsyncIterator[tuple[FakeUpstream, FakeUpstream]]:
    chat, resp = FakeUpstream(), FakeUpstream()
    await chat.start()
    await resp.start()
    yield chat, resp
    await chat.close()
    await resp.close()


async def proxy_for(
    tmp_path: Path,
    chat: FakeUpstream,
    resp: FakeUpstream,
    *,
    default: str,
    extra: str = "",
    environ: dict[str, str] | None = None,
    chat_extra: str = "",
) -> ProxyHandle:
    f = tmp_path / "c.toml"
    f.write_text(f"""
{extra}
[[upstreams]]
name = "chat"
base_url = "{chat.base_url}"
models = ["local-*"]
default = {str(default == "chat").lower()}
{chat_extra}
[[upstreams]]
name = "hosted"
base_url = "{resp.base_url}"
api = "responses"
models = ["gpt-*"]
default = {str(default == "hosted").lower()}
[store]
backend = "memory"
""")
    return await start_proxy(load_config(f, {}), environ=environ)


def sdk(handle: ProxyHandle, captured: list[Captured], key: str = "sk-client") -> openai.AsyncOpenAI:
    http = httpx2.AsyncClient(transport=TeeTransport(captured), timeout=30)
    return openai.AsyncOpenAI(base_url=handle.base_url, api_key=key, http_client=http, max_retries=0)


@pytest.mark.parametrize("default", ["chat", "hosted"])
async def test_stored_responses_are_found_where_they_live(two, tmp_path: Path, default: str) -> None:
    chat, resp = two
    resp.default = responses_backend({"resp_hosted1": stored_response("resp_hosted1", "kept upstream")})
    chat.default = SSEReply(chunk({"content": "kept here"}) + chunk({}, "stop") + DONE)
    handle = await proxy_for(tmp_path, chat, resp, default=default)
    captured: list[Captured] = []
    c = sdk(handle, captured)
    try:
        events = [e async for e in await c.responses.create(model="local-1", input="hi", stream=True)]
        made = events[-1].response  # translated, stored by crossfeed
        assert made.output_text == "kept here"
        got = await c.responses.retrieve(made.id)
        assert got.id == made.id and got.output_text == "kept here"
        hosted = await c.responses.retrieve("resp_hosted1")  # only the Responses upstream knows it
        assert hosted.output_text == "kept upstream"
        with pytest.raises(openai.NotFoundError) as info:
            await c.responses.retrieve("resp_nowhere")
        assert info.value.code == "not_found"
        asked = [r.path for r in resp.requests]
        assert "/v1/responses/resp_hosted1" in asked and "/v1/responses/resp_nowhere" in asked
        # The response crossfeed stored never needed the upstream when the chat upstream is the default.
        assert (f"/v1/responses/{made.id}" in asked) == (default == "hosted")
    finally:
        await c.close()
        await handle.stop()
    validate_captured(captured)


async def test_passed_through_streams_count_against_the_cap(two, tmp_path: Path) -> None:
    chat, _resp = two
    ticks = chunk({"content": "tick "}) * 200 + chunk({}, "stop") + DONE
    chat.reply(
        SSEReply(ticks, delay=0.01),
        JSONReply(
            {
                "id": "c1",
                "object": "chat.completion",
                "created": 1,
                "model": "local-1",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            }
        ),
    )
    f = tmp_path / "c.toml"
    f.write_text(
        f'[[upstreams]]\nname = "chat"\nbase_url = "{chat.base_url}"\nmax_concurrent_streams = 1\n'
        '[store]\nbackend = "memory"\n'
    )
    async with running_proxy(load_config(f, {})) as handle:
        async with aiohttp.ClientSession() as s:
            body = {"model": "local-1", "messages": [{"role": "user", "content": "x"}]}
            async with s.post(handle.base_url + "/chat/completions", json={**body, "stream": True}) as first:
                assert first.status == 200
                assert await first.content.readany()  # the first stream is open
                async with s.post(handle.base_url + "/chat/completions", json={**body, "stream": True}) as second:
                    assert second.status == 429 and second.headers["Retry-After"] == "1"
                    err = (await second.json())["error"]
                    assert err["code"] == "rate_limit_exceeded" and "chat" in err["message"]
                async with s.post(handle.base_url + "/chat/completions", json=body) as plain:
                    assert plain.status == 200  # not a stream: not counted
                    assert (await plain.json())["choices"][0]["message"]["content"] == "ok"
                rest = await first.read()
                assert rest.rstrip().endswith(b"data: [DONE]")
        assert handle.app[LIMITS].open_count("chat") == 0  # every place given back


@pytest.mark.parametrize("backend_key", [False, True])
async def test_inbound_key_never_reaches_a_backend(two, tmp_path: Path, backend_key: bool) -> None:
    chat, resp = two
    chat.default = SSEReply(chunk({"content": "ok"}) + chunk({}, "stop") + DONE)
    resp.default = responses_backend({"resp_h": stored_response("resp_h", "up")})
    extra = '[server]\ninbound_keys_env = "TEST_INBOUND"\n'
    environ = {"TEST_INBOUND": "sk-crossfeed-own", "TEST_BACKEND_KEY": "sk-backend"}
    handle = await proxy_for(
        tmp_path,
        chat,
        resp,
        default="chat",
        extra=extra,
        environ=environ,
        chat_extra='api_key_env = "TEST_BACKEND_KEY"' if backend_key else "",
    )
    captured: list[Captured] = []
    c = sdk(handle, captured, key="sk-crossfeed-own")
    try:
        s = await c.responses.create(model="local-1", input="x", stream=True)
        assert [e async for e in s][-1].type == "response.completed"
        assert (await c.responses.retrieve("resp_h")).output_text == "up"  # passed through
        async with aiohttp.ClientSession(headers={"Authorization": "Bearer sk-crossfeed-own"}) as raw:
            async with raw.post(
                handle.base_url + "/chat/completions",
                json={"model": "local-1", "messages": [{"role": "user", "content": "x"}]},
            ) as r:
                assert r.status == 200
    finally:
        await c.close()
        await handle.stop()
    assert len(chat.requests) == 2 and len(resp.requests) == 1
    for r in chat.requests:
        assert r.headers.get("Authorization") == ("Bearer sk-backend" if backend_key else None), r.path
    assert resp.requests[0].headers.get("Authorization") is None
    assert all("sk-crossfeed-own" not in str(r.headers) for r in chat.requests + resp.requests)
    validate_captured(captured)


async def test_an_unreachable_second_place_does_not_hide_the_404(two, tmp_path: Path) -> None:
    chat, resp = two
    await resp.close()  # the Responses upstream is down
    handle = await proxy_for(tmp_path, chat, resp, default="chat")
    captured: list[Captured] = []
    c = sdk(handle, captured)
    try:
        with pytest.raises(openai.NotFoundError) as info:
            await c.responses.retrieve("resp_nowhere")
        assert info.value.code == "not_found"
    finally:
        await c.close()
        await handle.stop()
