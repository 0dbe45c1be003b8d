"""The pool tests' pieces (tests/faults/test_pool_*.py): fake replicas of one chat backend on
real ports, crossfeed in front of them as a pool, and the SDK turns they drive."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from crossfeed.proxy.keys import POOLS
from crossfeed.proxy.runtime.config import Config, load_config
from tests.fakes.upstream import FakeUpstream, JSONReply, Recorded, Reply, SSEReply
from tests.support.app_server import ProxyHandle, running_proxy
from tests.support.chat_replies import text_reply
from tests.support.clients import Captured, sdk_client

MODEL = "pool-model"


@contextlib.asynccontextmanager
async def replicas(n: int) -> AsyncIterator[list[FakeUpstream]]:
    """``n`` fake chat backends, each answering "from <its index>" unless scripted otherwise."""
    fakes = [FakeUpstream() for _ in range(n)]
    for i, fake in enumerate(fakes):
        fake.default = text_reply(f"from {i}")
        await fake.start()
    try:
        yield fakes
    finally:
        for fake in fakes:
            await fake.close()


@dataclass
class ScriptedPool:
    fakes: list[FakeUpstream]
    proxy: ProxyHandle
    client: openai.AsyncOpenAI


@contextlib.asynccontextmanager
async def scripted_pool(
    tmp_path: Path, captured: list[Captured], script: Reply, *, n: int = 2, **pool: Any
) -> AsyncIterator[ScriptedPool]:
    """``n`` replicas that all answer with ``script``, crossfeed in front of them as one pool (with
    ``pool`` keys, as ``pool_config`` takes them) and an SDK client on it, closed when the block ends."""
    async with replicas(n) as fakes:
        for fake in fakes:
            fake.default = script
        config = pool_config(tmp_path, [f.base_url for f in fakes], **pool)
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured)
            try:
                yield ScriptedPool(fakes, proxy, client)
            finally:
                await client.close()


def served(fakes: Sequence[FakeUpstream]) -> list[int]:
    """How many chat calls each fake got."""
    return [sum(1 for r in f.requests if r.path.endswith("/chat/completions")) for f in fakes]


def pool_config(
    tmp_path: Path, urls: Sequence[str], *, store: str = "memory", model: str = MODEL, **pool: Any
) -> Config:
    """One pooled chat upstream ``gpu`` serving MODEL on ``urls``, with ``pool`` keys on it (a
    ``timeouts`` dict or ``fallback_urls`` too: then a second upstream ``spare`` is its fallback,
    serving ``spare-model``)."""
    lines = ["[store]", f'backend = "{store}"', f'data_dir = "{tmp_path / "data"}"', ""]
    fallback_urls = pool.pop("fallback_urls", None)
    timeouts = pool.pop("timeouts", None)
    lines += ["[[upstreams]]", 'name = "gpu"', f"models = [{model!r}]", f"base_urls = {list(urls)!r}"]
    if fallback_urls:
        pool["fallback"] = "spare"
    for key, value in pool.items():
        lines.append(f"{key} = {value!r}" if not isinstance(value, bool) else f"{key} = {str(value).lower()}")
    if timeouts:
        lines.append("[upstreams.timeouts]")
        lines += [f"{k} = {v!r}" for k, v in timeouts.items()]
    if fallback_urls:
        lines += ["", "[[upstreams]]", 'name = "spare"', 'models = ["spare-model"]']
        lines.append(
            f"base_urls = {list(fallback_urls)!r}" if len(fallback_urls) > 1 else f"base_url = {fallback_urls[0]!r}"
        )
    path = tmp_path / "pool.toml"
    path.write_text("\n".join(lines).replace("'", '"') + "\n")
    return load_config(path, {})


def error_reply(status: int, headers: dict[str, str] | None = None) -> JSONReply:
    return JSONReply({"error": {"message": f"replica says {status}", "type": "server_error"}}, status, headers or {})


async def ask(client: Any, text: str = "hi", **kwargs: Any) -> tuple[Any, dict[str, str]]:
    """One streamed turn through the SDK: the final Response and the HTTP answer's headers."""
    async with client.responses.with_streaming_response.create(
        model=kwargs.pop("model", MODEL), input=text, stream=True, **kwargs
    ) as raw:
        headers = dict(raw.headers)
        final = None
        async for event in await raw.parse():
            if event.type in ("response.completed", "response.failed", "response.incomplete"):
                final = event.response
    return final, headers


def in_flight(app: Any) -> dict[str, int]:
    """Every replica's calls in flight (the fallbacks' too), by label."""
    pools = list(app[POOLS].values())
    pools += [p.fallback for p in pools if p.fallback is not None]
    return {r.label: r.inflight for p in pools for r in p.replicas}


def dying_then_rest(first: bytes, rest: bytes, *, cut: bool = True) -> Any:
    """Every replica's reply: the pool's first call streams ``first`` and dies (the connection
    dropped, or closed cleanly without a finish); any later call streams ``rest``."""
    calls: list[Recorded] = []

    def reply(recorded: Recorded) -> SSEReply:
        calls.append(recorded)
        return SSEReply(first, cut=cut) if len(calls) == 1 else SSEReply(rest)

    reply.calls = calls  # type: ignore[attr-defined]
    return reply


async def stream(client: Any, **kwargs: Any) -> list[Any]:
    events = []
    async with client.responses.with_streaming_response.create(model=MODEL, input="hi", stream=True, **kwargs) as raw:
        async for event in await raw.parse():
            events.append(event)
    return events


def terminals(events: list[Any]) -> list[str]:
    return [e.type for e in events if e.type in ("response.completed", "response.failed", "response.incomplete")]


async def failed_stream(client: Any, captured: list[Any], **kwargs: Any) -> list[dict[str, Any]]:
    """A stream that fails (the SDK raises at its ``error`` event): its events as the wire had them."""
    with pytest.raises(openai.APIError):
        await stream(client, **kwargs)
    raw = captured[-1].raw
    return [orjson.loads(line[6:]) for line in raw.split(b"\n") if line.startswith(b"data: {")]


def failed_terminals(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events if e["type"].startswith("response.") and e["type"].split(".")[1] in TERMINAL]


TERMINAL = ("completed", "failed", "incomplete")
