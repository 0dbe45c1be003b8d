"""The upstream HTTP client: one pooled aiohttp session, errors mapped in one place.

``open_upstream`` sends the request and returns the response once its headers are in; a non-2xx
answer is read and raised as ``UpstreamHTTPError`` with the upstream's status and message kept.
Every aiohttp/asyncio failure becomes an ``UpstreamError`` subclass here, so no caller ever sees
a foreign exception.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import orjson

from .config import Upstream
from .errors import UpstreamHTTPError, UpstreamTimeout, UpstreamUnavailable, upstream_error_body

MAX_ERROR_BODY = 64 * 1024
# Request headers a client may send that mean something to the upstream too.
FORWARDED_HEADERS = ("openai-organization", "openai-project", "x-request-id", "user-agent")


def new_session() -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=30)
    return aiohttp.ClientSession(connector=connector, auto_decompress=True, json_serialize=lambda o: orjson.dumps(o).decode())


def upstream_headers(up: Upstream, client_headers: Mapping[str, str], api_key: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    for name in FORWARDED_HEADERS:
        value = client_headers.get(name)
        if value:
            headers[name] = value
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    elif up.pass_client_key and client_headers.get("authorization"):
        headers["Authorization"] = client_headers["authorization"]
    headers.update(up.headers)
    return headers


@contextlib.asynccontextmanager
async def map_client_errors(up: Upstream) -> AsyncIterator[None]:
    """The one place where aiohttp/asyncio exceptions become ``UpstreamError`` subclasses."""
    t = up.timeouts
    try:
        yield
    except aiohttp.ConnectionTimeoutError:
        raise UpstreamTimeout("connect", t.connect) from None
    except (aiohttp.ServerTimeoutError, asyncio.TimeoutError):
        raise UpstreamTimeout("first_byte", t.first_byte) from None
    except aiohttp.ClientConnectorError as exc:
        raise UpstreamUnavailable(f"cannot connect to the upstream at {up.base_url} ({exc.strerror or 'refused'})") from None
    except aiohttp.ClientError as exc:
        raise UpstreamUnavailable(f"the upstream connection failed: {_describe(exc)}") from None


async def open_upstream(session: aiohttp.ClientSession, up: Upstream, path: str, body: dict[str, Any],
                        headers: dict[str, str]) -> aiohttp.ClientResponse:
    t = up.timeouts
    timeout = aiohttp.ClientTimeout(total=t.total, connect=t.connect, sock_connect=t.connect, sock_read=t.first_byte)
    async with map_client_errors(up):
        resp = await session.post(up.base_url + path, data=orjson.dumps(body), headers=headers, timeout=timeout)
    if resp.status >= 400 or resp.status < 200:
        try:
            raw = await resp.content.read(MAX_ERROR_BODY)
        except (aiohttp.ClientError, asyncio.TimeoutError):
            raw = b""
        finally:
            resp.close()
        body_out = upstream_error_body(resp.status, raw, resp.headers.get("Content-Type", ""))
        keep = {k: v for k, v in resp.headers.items() if k.lower() in ("retry-after", "x-should-retry")}
        raise UpstreamHTTPError(resp.status, body_out, keep)
    return resp


async def read_json(resp: aiohttp.ClientResponse, up: Upstream, limit: int) -> Any:
    """Read a non-streaming JSON body; errors mapped like the rest of this module."""
    try:
        raw = await resp.content.read(limit + 1)
    except (aiohttp.ServerTimeoutError, asyncio.TimeoutError):
        raise UpstreamTimeout("total", up.timeouts.total) from None
    except aiohttp.ClientError as exc:
        raise UpstreamUnavailable(f"the upstream connection failed mid-answer: {_describe(exc)}") from None
    finally:
        resp.close()
    if len(raw) > limit:
        raise UpstreamUnavailable("the upstream answer is larger than the configured limit")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise UpstreamUnavailable("the upstream answered with a body that is not JSON") from None


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return text[:200] if text else "connection closed"
