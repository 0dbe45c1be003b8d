"""Background runs across real crossfeed processes sharing one store (SQLite file, or Redis when a
Redis URL is available): a run started on A is resumed, polled and cancelled from B (A closes
its upstream request), and a run whose process is killed or shut down ends ``response.failed``
for every reader, the first within the lease's bound."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support.background import WORDS, held
from tests.support.replicas import Proc, start
from tests.support.validators import validate_responses_events, validate_responses_sse

LEASE = 2.0


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
async def pair(
    request: pytest.FixtureRequest, upstream: FakeUpstream, tmp_path: Path
) -> AsyncIterator[tuple[Proc, Proc]]:
    """Two replicas, A and B, sharing one store."""
    env: dict[str, str] = {}
    if request.param == "redis":
        env["CROSSFEED_REDIS_URL"] = request.getfixturevalue("redis_url")
        store = f'backend = "redis"\nkey_prefix = "cf-bg-{os.getpid()}-{id(tmp_path)}:"'
    else:
        store = f'backend = "sqlite"\ndata_dir = "{tmp_path / "data"}"'
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[server]\ndrain_seconds = 0.5\n\n[[upstreams]]\nname = "fake"\nbase_url = "{upstream.base_url}"\n'
        f"default = true\n\n[store]\n{store}\n\n[runs]\nlease_seconds = {LEASE}\nrenew_seconds = 0.5\n"
        "cancel_poll_seconds = 0.1\n"
    )
    a = await start(cfg, env)
    b = await start(cfg, env)
    yield a, b
    for p in (a, b):
        if p.proc.returncode is None:
            await p.stop()


def sdk(p: Proc) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=p.url + "/v1", api_key="k", max_retries=0)


async def events_of(stream: Any) -> list[dict[str, Any]]:
    return [e.model_dump(mode="json", exclude_unset=True) async for e in stream]


async def raw_events(p: Proc, rid: str, after: int | None = None) -> list[dict[str, Any]]:
    """A resumed stream read as it comes (the SDK raises at an ``error`` event), validated."""
    params = {"stream": "true", **({"starting_after": str(after)} if after is not None else {})}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{p.url}/v1/responses/{rid}", params=params) as r:
            assert r.status == 200
            raw = await r.read()
    return (
        validate_responses_sse(raw)
        if after is None
        else [orjson.loads(line[6:]) for line in raw.split(b"\n") if line.startswith(b"data: ")]
    )


async def test_started_on_a_resumed_and_polled_from_b(pair: tuple[Proc, Proc], upstream: FakeUpstream) -> None:
    a, b = pair
    reply, go = held()
    upstream.reply(reply)
    async with sdk(a) as on_a, sdk(b) as on_b:
        created = await on_a.responses.create(model="m", input="hi", background=True)
        assert (await on_b.responses.retrieve(created.id)).status == "in_progress"
        resumed = asyncio.create_task(
            events_of(await on_b.responses.retrieve(created.id, stream=True, starting_after=2))
        )
        await asyncio.sleep(0.3)
        assert not resumed.done()  # held on A: B's reader waits for live events
        go.set()
        got = await asyncio.wait_for(resumed, 20)
        whole = await events_of(await on_a.responses.retrieve(created.id, stream=True))
        validate_responses_events(whole)
        assert got == whole[3:]
        final = await on_b.responses.retrieve(created.id)
        assert final.status == "completed" and final.output_text == "".join(WORDS)


async def test_cancelled_from_b_closes_as_upstream_request(pair: tuple[Proc, Proc], upstream: FakeUpstream) -> None:
    a, b = pair
    reply, _ = held()
    upstream.reply(reply)
    async with sdk(a) as on_a, sdk(b) as on_b:
        created = await on_a.responses.create(model="m", input="hi", background=True)
        reading = asyncio.create_task(events_of(await on_a.responses.retrieve(created.id, stream=True)))
        cancelled = await on_b.responses.cancel(created.id)
        assert cancelled.status == "cancelled"
        async with asyncio.timeout(10):
            while upstream.open_requests:
                await asyncio.sleep(0.05)
        assert upstream.cancelled == 1  # A's request to the backend was closed, not finished
        events = await asyncio.wait_for(reading, 10)
        validate_responses_events(events)
        assert events[-1]["type"] == "response.failed" and events[-1]["response"]["status"] == "cancelled"
        assert (await on_b.responses.cancel(created.id)).status == "cancelled"  # idempotent


async def test_a_killed_replicas_run_fails_for_the_reader_on_b(pair: tuple[Proc, Proc], upstream: FakeUpstream) -> None:
    a, b = pair
    reply, _ = held()
    upstream.reply(reply)
    async with sdk(a) as on_a, sdk(b) as on_b:
        created = await on_a.responses.create(model="m", input="hi", background=True)
        reading = asyncio.create_task(raw_events(b, created.id))
        await asyncio.sleep(0.3)
        a.proc.send_signal(signal.SIGKILL)
        await a.proc.wait()
        events = await asyncio.wait_for(reading, LEASE + 15)
        last = events[-1]
        assert last["type"] == "response.failed"
        assert last["response"]["error"] == {
            "code": "server_error",
            "message": "the server running this response stopped",
        }
        again = await on_b.responses.retrieve(created.id)
        assert again.status == "failed"
        assert [e["type"] for e in await raw_events(b, created.id)].count("response.failed") == 1


async def test_a_replica_shut_down_ends_its_runs_failed(pair: tuple[Proc, Proc], upstream: FakeUpstream) -> None:
    a, b = pair
    reply, _ = held()
    upstream.reply(reply)
    async with sdk(a) as on_a:
        created = await on_a.responses.create(model="m", input="hi", background=True)
        assert await a.stop() == 0  # SIGTERM: the drain (0.5 s) ends the run
        events = await asyncio.wait_for(raw_events(b, created.id), 10)
        assert events[-1]["type"] == "response.failed"
        assert events[-1]["response"]["error"]["code"] == "server_shutting_down"
