"""The request body as crossfeed reads it (proxy/turns/common.py ``body_bytes``), over a real
socket: a body of a declared length, a chunked one and a compressed one are each read whole,
however many pieces they arrive in; each over ``max_body_bytes`` is a 413 in OpenAI's envelope,
a declared one before any of it is read."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest

from tests.support.app_server import running_proxy

LIMIT = 256 * 1024


def body_of(size: int) -> bytes:
    """A Responses create of about ``size`` bytes whose last field is of the wrong type: a 400
    naming it comes only once the body was read whole and parsed."""
    filler = "x" * max(0, size - 60)
    return orjson.dumps({"model": "m", "input": filler, "temperature": "hot"})


async def post(url: str, data: object, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s, s.post(url, data=data, headers=headers or {}) as r:  # type: ignore[arg-type]
        return r.status, await r.json(content_type=None)


async def pieces(raw: bytes, n: int) -> AsyncIterator[bytes]:
    """``raw`` in ``n`` pieces with a pause between them: chunked transfer, many reads."""
    step = -(-len(raw) // n)
    for i in range(0, len(raw), step):
        yield raw[i : i + step]
        await asyncio.sleep(0.005)


@pytest.fixture
async def proxy_url() -> AsyncIterator[str]:
    async with running_proxy({"server.max_body_bytes": LIMIT}) as p:
        yield p.base_url + "/responses"


def assert_read_whole(status: int, body: dict) -> None:
    assert status == 400, body
    assert body["error"]["param"] == "temperature"


async def test_a_declared_length_body_in_many_reads(proxy_url: str) -> None:
    raw = body_of(LIMIT - 100)
    status, body = await post(proxy_url, raw)
    assert_read_whole(status, body)


async def test_a_chunked_body_in_many_pieces(proxy_url: str) -> None:
    status, body = await post(proxy_url, pieces(body_of(LIMIT - 100), 40))
    assert_read_whole(status, body)


async def test_a_compressed_body(proxy_url: str) -> None:
    status, body = await post(proxy_url, gzip.compress(body_of(LIMIT - 100)), {"Content-Encoding": "gzip"})
    assert_read_whole(status, body)


@pytest.mark.parametrize("how", ["declared", "chunked", "gzip-bomb"])
async def test_over_the_limit_is_413(proxy_url: str, how: str) -> None:
    raw = body_of(LIMIT + 1000)
    if how == "declared":
        status, body = await post(proxy_url, raw)
    elif how == "chunked":
        status, body = await post(proxy_url, pieces(raw, 20))
    else:  # small on the wire, over the limit once decompressed
        compressed = gzip.compress(body_of(LIMIT * 8))
        assert len(compressed) < LIMIT
        status, body = await post(proxy_url, compressed, {"Content-Encoding": "gzip"})
    assert status == 413, body
    assert body["error"]["code"] == "request_too_large"


async def test_bodies_one_after_another_on_one_connection(proxy_url: str) -> None:
    """A body already waiting when its handler starts (the reader paused on it) is read all the same."""
    raw = body_of(LIMIT - 100)
    async with aiohttp.ClientSession() as s:
        for _ in range(4):
            async with s.post(proxy_url, data=raw, timeout=aiohttp.ClientTimeout(total=10)) as r:
                assert_read_whole(r.status, await r.json())
