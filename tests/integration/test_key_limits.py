"""Per-key caps on concurrent streams: ``[server] max_streams_per_key`` for every inbound key and a
named key's own ``max_concurrent_streams``. One stream past a key's cap is a 429 with
``Retry-After`` in OpenAI's envelope (the SDKs honour it and retry); other keys are not held back,
and a place comes back when a stream ends. The 429 names the key's name, never the key."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest

from crossfeed.proxy.runtime.config import load_config
from crossfeed.proxy.runtime.guard import LIMITS
from tests.fakes.upstream import FakeUpstream, SSEReply
from tests.support.app_server import ProxyHandle, running_proxy
from tests.support.chat_chunks import DONE, chunk
from tests.support.validators import validate_responses_sse
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)

KEYS = {"ALICE_KEY": "sk-alice-4c3b2a", "BOB_KEY": "sk-bob-9f8e7d", "LEGACY_KEYS": "sk-legacy-5e6f7a"}
HEAD = chunk({"role": "assistant", "content": "hel"})
TAIL = chunk({"content": "lo"}, "stop") + DONE


@pytest.fixture
async def capped(upstream: FakeUpstream, tmp_path: Path) -> Any:
    config = load_config(
        None,
        {},
        {
            "upstream.base_url": upstream.base_url,
            "store.data_dir": str(tmp_path / "data"),
            "server.max_streams_per_key": 2,
            "server.inbound_keys": [
                {"name": "alice", "key_env": "ALICE_KEY", "max_concurrent_streams": 1},
                {"name": "bob", "key_env": "BOB_KEY"},
            ],
            "server.inbound_keys_env": "LEGACY_KEYS",
        },
    )
    async with running_proxy(config, dict(KEYS)) as handle:
        yield handle


class Held:
    """Streams the upstream keeps open after their first chunk until ``release``."""

    def __init__(self, upstream: FakeUpstream) -> None:
        self.gate = asyncio.Event()
        upstream.default = lambda req: SSEReply(HEAD + TAIL, holds={len(HEAD): self.gate})

    def release(self) -> None:
        self.gate.set()


def client(handle: ProxyHandle, env: str) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(base_url=handle.base_url, timeout=30, headers={"Authorization": f"Bearer {KEYS[env]}"})


async def open_stream(c: httpx2.AsyncClient) -> tuple[int, dict[str, str], bytes]:
    async with c.stream("POST", "/responses", json={"model": "m", "input": "hi", "stream": True}) as r:
        return r.status_code, dict(r.headers), await r.aread()


async def test_a_key_past_its_cap_gets_a_429_and_other_keys_do_not(capped: ProxyHandle, upstream: FakeUpstream) -> None:
    held = Held(upstream)
    async with (
        client(capped, "ALICE_KEY") as alice,
        client(capped, "BOB_KEY") as bob,
        client(capped, "LEGACY_KEYS") as legacy,
    ):
        first = asyncio.ensure_future(open_stream(alice))
        assert await wait_until(lambda: capped.app[LIMITS].key_count("alice") == 1, 10)
        status, headers, body = await open_stream(alice)  # alice's own cap: 1
        assert status == 429 and headers["retry-after"] == "1", (status, body)
        error = orjson.loads(body)["error"]
        assert error["code"] == "rate_limit_exceeded" and "'alice'" in error["message"], error
        assert KEYS["ALICE_KEY"] not in body.decode()
        # bob and the key of inbound_keys_env (key-1) have the server's cap, 2 each
        more = [asyncio.ensure_future(open_stream(c)) for c in (bob, bob, legacy, legacy)]
        assert await wait_until(
            lambda: capped.app[LIMITS].key_count("bob") == 2 and capped.app[LIMITS].key_count("key-1") == 2, 10
        )
        for c, name in ((bob, "bob"), (legacy, "key-1")):
            status, headers, body = await open_stream(c)
            assert status == 429 and headers["retry-after"] == "1", (name, status)
            assert f"'{name}'" in orjson.loads(body)["error"]["message"]
        held.release()
        for status, _, body in await asyncio.gather(first, *more):
            assert status == 200
            assert validate_responses_sse(body)[-1]["type"] == "response.completed"
        assert capped.app[LIMITS].key_count("alice") == 0
        status, _, body = await open_stream(alice)  # its place came back
        assert status == 200 and validate_responses_sse(body)[-1]["type"] == "response.completed"


async def test_without_a_cap_a_key_opens_as_many_streams_as_it_likes(upstream: FakeUpstream, tmp_path: Path) -> None:
    config = load_config(
        None,
        {},
        {
            "upstream.base_url": upstream.base_url,
            "store.data_dir": str(tmp_path / "d"),
            "server.inbound_keys": [{"name": "alice", "key_env": "ALICE_KEY"}],
        },
    )
    async with running_proxy(config, dict(KEYS)) as handle:
        held = Held(upstream)
        async with client(handle, "ALICE_KEY") as alice:
            tasks = [asyncio.ensure_future(open_stream(alice)) for _ in range(5)]
            assert await wait_until(lambda: len(upstream.requests) == 5, 10)
            held.release()
            assert [status for status, _, _ in await asyncio.gather(*tasks)] == [200] * 5
