"""Per-key request and token rates (issue 35), over real sockets:

- a key's requests per minute: the next one is a 429 ``rate_limit_exceeded`` in OpenAI's envelope
  with ``Retry-After`` and ``x-ratelimit-*`` headers, before any backend call; another key is not
  held back; counted requests carry their ``x-ratelimit-*`` headers;
- a key's tokens per minute, counted from the usage of a streamed answer: once spent, the next
  request is a 429 naming tokens;
- two crossfeed replicas on one Redis count together: the N+1st request in the window is a 429
  on either replica.

Windows are minutes aligned on the clock: a test that would straddle one waits for the next.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from crossfeed.proxy.runtime.config import load_config
from tests.fakes.upstream import FakeUpstream, SSEReply
from tests.support.app_server import running_proxy
from tests.support.chat_chunks import DONE, chunk
from tests.support.replicas import start
from tests.support.ws import FrameLog, RawWS, ws_url

pytestmark = pytest.mark.timeout(90)


async def fresh_window(needed: float = 8.0) -> None:
    """Wait (at most ``needed`` seconds) so that the next ``needed`` seconds are in one minute."""
    left = 60 - time.time() % 60
    if left < needed:
        await asyncio.sleep(left + 0.05)


def answer(tokens: tuple[int, int] = (3, 2)) -> SSEReply:
    return SSEReply(chunk({"role": "assistant", "content": "ok"}) + chunk({}, "stop", usage=tokens) + DONE)


def config_file(tmp_path: Path, upstream: FakeUpstream, store: str, server: str) -> Path:
    path = tmp_path / "crossfeed.toml"
    path.write_text(
        f"[server]\n{server}\n"
        f'[[upstreams]]\nname = "fake"\nbase_url = "{upstream.base_url}"\ndefault = true\n\n[store]\n{store}\n'
    )
    return path


async def post(base: str, key: str, **body: Any) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            base + "/v1/responses",
            json={"model": "m", "input": "hi", "stream": True, **body},
            headers={"Authorization": f"Bearer {key}"},
        ) as r,
    ):
        return r.status, {k.lower(): v for k, v in r.headers.items()}, await r.read()


async def test_requests_per_minute(upstream: FakeUpstream, tmp_path: Path) -> None:
    keys = (
        '[[server.inbound_keys]]\nname = "small"\nkey_env = "CF_RL_SMALL"\nrequests_per_minute = 2\n'
        '[[server.inbound_keys]]\nname = "big"\nkey_env = "CF_RL_BIG"\n'
    )
    cfg = load_config(config_file(tmp_path, upstream, 'backend = "memory"', keys), {})
    upstream.default = lambda req: answer()
    env = {"CF_RL_SMALL": "sk-small", "CF_RL_BIG": "sk-big"}
    await fresh_window()
    async with running_proxy(cfg, environ=env) as handle:
        for n in (1, 2):
            status, headers, _ = await post(handle.url, "sk-small")
            assert status == 200
            assert headers["x-ratelimit-limit-requests"] == "2"
            assert headers["x-ratelimit-remaining-requests"] == str(2 - n)
        status, headers, raw = await post(handle.url, "sk-small")
        assert status == 429, raw
        assert b'"code":"rate_limit_exceeded"' in raw and b"2 requests per minute" in raw and b"'small'" in raw
        assert 1 <= int(headers["retry-after"]) <= 60 and headers["x-ratelimit-remaining-requests"] == "0"
        assert len(upstream.requests) == 2  # the refused one never reached the backend
        for _ in range(4):  # another key (no limit of its own, none for the server) is not held back
            assert (await post(handle.url, "sk-big"))[0] == 200
        # the official SDK sees a RateLimitError it can retry after Retry-After
        client = openai.AsyncOpenAI(base_url=handle.base_url, api_key="sk-small", max_retries=0)
        with pytest.raises(openai.RateLimitError) as limited:
            await client.responses.create(model="m", input="x")
        assert limited.value.response.headers["retry-after"]


async def test_tokens_per_minute_count_streamed_usage(upstream: FakeUpstream, tmp_path: Path) -> None:
    keys = '[[server.inbound_keys]]\nname = "t"\nkey_env = "CF_RL_T"\ntokens_per_minute = 100\n'
    cfg = load_config(config_file(tmp_path, upstream, 'backend = "memory"', keys), {})
    upstream.default = lambda req: answer((40, 30))  # 70 tokens a turn
    await fresh_window()
    async with running_proxy(cfg, environ={"CF_RL_T": "sk-t"}) as handle:
        status, headers, _ = await post(handle.url, "sk-t")
        assert status == 200 and headers["x-ratelimit-remaining-tokens"] == "100"
        status, headers, _ = await post(handle.url, "sk-t")  # 70 spent: still under 100
        assert status == 200 and headers["x-ratelimit-remaining-tokens"] == "30"
        status, headers, raw = await post(handle.url, "sk-t")  # 140 spent
        assert status == 429 and b"100 tokens per minute" in raw, raw
        assert headers["x-ratelimit-remaining-tokens"] == "0"
    assert len(upstream.requests) == 2


@pytest.mark.redis
async def test_two_replicas_count_together(upstream: FakeUpstream, tmp_path: Path, redis_url: str) -> None:
    keys = 'inbound_keys_env = "CF_RL_KEYS"\nrequests_per_minute_per_key = 3\n'
    store = f'backend = "redis"\nkey_prefix = "cf-rl-{os.getpid()}-{time.time_ns()}:"'
    cfg = config_file(tmp_path, upstream, store, keys)
    upstream.default = lambda req: answer()
    env = {"CROSSFEED_REDIS_URL": redis_url, "CF_RL_KEYS": "sk-shared"}
    a = await start(cfg, env)
    b = await start(cfg, env)
    try:
        await fresh_window(15.0)
        statuses = [(await post(p.url, "sk-shared"))[0] for p in (a, b, a)]
        assert statuses == [200, 200, 200]
        for p in (b, a):  # the 4th and 5th requests of the minute, on either replica
            status, headers, raw = await post(p.url, "sk-shared")
            assert status == 429 and headers["x-ratelimit-limit-requests"] == "3", raw
    finally:
        assert await a.stop() == 0
        assert await b.stop() == 0
    assert len(upstream.requests) == 3


async def test_websocket_turns_count_one_by_one(upstream: FakeUpstream, tmp_path: Path) -> None:
    """Each turn on a socket is a request of its key; the socket's opening is not."""
    keys = '[[server.inbound_keys]]\nname = "ws"\nkey_env = "CF_RL_WS"\nrequests_per_minute = 2\n'
    cfg = load_config(config_file(tmp_path, upstream, 'backend = "memory"', keys), {})
    upstream.default = lambda req: answer()
    await fresh_window()
    async with running_proxy(cfg, environ={"CF_RL_WS": "sk-ws"}) as handle:
        log = FrameLog("rate-limited socket")
        async with (
            aiohttp.ClientSession() as s,
            s.ws_connect(ws_url(handle.url), headers={"Authorization": "Bearer sk-ws"}) as ws,
        ):
            sock = RawWS(ws, log)
            for _ in range(2):
                assert (await sock.turn(model="m", input="hi")).terminal == "response.completed"
            refused = await sock.turn(model="m", input="hi")
            assert refused.errors and refused.errors[0]["status"] == 429, refused.errors
            assert refused.errors[0]["error"]["code"] == "rate_limit_exceeded"
        log.validate()
    assert len(upstream.requests) == 2


@pytest.mark.redis
async def test_the_count_outlives_a_replica(upstream: FakeUpstream, tmp_path: Path, redis_url: str) -> None:
    """Requests counted on a replica that then dies (SIGKILL) still count on the other."""
    keys = 'inbound_keys_env = "CF_RL_KEYS"\nrequests_per_minute_per_key = 2\n'
    store = f'backend = "redis"\nkey_prefix = "cf-rl-kill-{os.getpid()}-{time.time_ns()}:"'
    cfg = config_file(tmp_path, upstream, store, keys)
    upstream.default = lambda req: answer()
    env = {"CROSSFEED_REDIS_URL": redis_url, "CF_RL_KEYS": "sk-shared"}
    a = await start(cfg, env)
    b = await start(cfg, env)
    try:
        await fresh_window(15.0)
        assert [(await post(a.url, "sk-shared"))[0] for _ in range(2)] == [200, 200]
        a.proc.kill()
        await asyncio.wait_for(a.proc.wait(), 20)
        status, _, raw = await post(b.url, "sk-shared")
        assert status == 429, raw
    finally:
        assert await b.stop() == 0
    assert len(upstream.requests) == 2
