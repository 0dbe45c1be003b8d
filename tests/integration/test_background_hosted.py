"""A background run between two legs (crossfeed running a hosted web search): a cancel there has
no relay to end, so the run's task is cancelled and its end is written from the log (its open
items closed, ``response.failed`` with status ``cancelled``); a shutdown there ends it failed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from tests.fakes.search import FakeSearch
from tests.fakes.upstream import FakeUpstream, SSEReply
from tests.support.app_server import running_proxy, start_proxy
from tests.support.chat_chunks import DONE, chunk
from tests.support.clients import sdk_client
from tests.support.validators import validate_responses_sse

pytestmark = pytest.mark.timeout(60)


def search_call(query: str) -> SSEReply:
    raw = orjson.dumps({"query": query}).decode()
    call = {"index": 0, "id": "call_0", "type": "function", "function": {"name": "web_search", "arguments": raw}}
    body = chunk({"role": "assistant", "content": ""}) + chunk({"tool_calls": [call]})
    return SSEReply(body + chunk({}, "tool_calls") + DONE)


@pytest.fixture
async def search() -> AsyncIterator[tuple[FakeSearch, asyncio.Event]]:
    """A search service whose searches wait until the event is set."""
    fake = FakeSearch(pages={"*": [("https://example.com/", "Example", "An example page.")]})
    started = asyncio.Event()
    release = asyncio.Event()

    async def hold() -> None:
        started.set()
        await release.wait()

    fake.hook = hold
    await fake.start()
    yield fake, started
    release.set()
    await fake.close()


def settings(upstream: FakeUpstream, fake: FakeSearch, tmp_path: Path) -> dict[str, Any]:
    return {
        "upstream.base_url": upstream.base_url,
        "store.data_dir": str(tmp_path / "data"),
        "web_search.backend": "searxng",
        "web_search.url": fake.url,
        "web_search.timeout_seconds": 30,
        "server.drain_seconds": 0.2,
        "runs.cancel_poll_seconds": 0.05,
    }


async def raw_events(base_url: str, rid: str) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base_url}/responses/{rid}", params={"stream": "true"}) as r:
            assert r.status == 200
            return validate_responses_sse(await r.read())


async def test_a_cancel_between_legs_ends_the_run_cancelled(
    upstream: FakeUpstream, search: tuple[FakeSearch, asyncio.Event], tmp_path: Path, captured: list[Any]
) -> None:
    fake, started = search
    upstream.reply(search_call("crossfeed"))
    async with running_proxy(settings(upstream, fake, tmp_path)) as handle:
        sdk = sdk_client(handle.base_url, captured)
        created = await sdk.responses.create(
            model="m", input="look it up", tools=[{"type": "web_search"}], background=True
        )
        await asyncio.wait_for(started.wait(), 10)  # the first leg is over, the search is running
        cancelled = await sdk.responses.cancel(created.id)
        assert cancelled.status == "cancelled"
        events = await raw_events(handle.base_url, created.id)
        assert events[-1]["type"] == "response.failed" and events[-1]["response"]["status"] == "cancelled"
        assert "error" not in [e["type"] for e in events]
        assert len(upstream.requests) == 1  # no second leg was asked for
        await sdk.close()


async def test_a_shutdown_between_legs_ends_the_run_failed(
    upstream: FakeUpstream, search: tuple[FakeSearch, asyncio.Event], tmp_path: Path
) -> None:
    fake, started = search
    upstream.reply(search_call("crossfeed"))
    handle = await start_proxy(settings(upstream, fake, tmp_path))
    async with openai.AsyncOpenAI(base_url=handle.base_url, api_key="k", max_retries=0) as sdk:
        created = await sdk.responses.create(
            model="m", input="look it up", tools=[{"type": "web_search"}], background=True
        )
        await asyncio.wait_for(started.wait(), 10)
    await handle.stop()  # the drain has no relay of it to end: end_runs does
    async with running_proxy(settings(upstream, fake, tmp_path)) as again:  # the same SQLite file
        events = await raw_events(again.base_url, created.id)
    assert events[-1]["type"] == "response.failed"
    error = events[-1]["response"]["error"]
    assert error == {"code": "server_shutting_down", "message": "crossfeed is shutting down; the response was ended"}
    assert [e["item"]["status"] for e in events if e["type"] == "response.output_item.done"] == ["incomplete"]
