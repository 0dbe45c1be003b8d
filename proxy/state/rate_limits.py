"""Per-key request and token rates, shared by every process and replica through the store.

A key's limits are its own (``[[server.inbound_keys]]`` ``requests_per_minute``,
``tokens_per_minute``) or the server's defaults (``[server] requests_per_minute_per_key``,
``tokens_per_minute_per_key``; 0: none). Each is a counter of the store per key and minute
(``ResponseStore.count``: one window a minute, aligned on the clock), so two crossfeed replicas on
one Redis, or the workers of one node on its SQLite file, count together.

- Before any backend call: the request is counted; past the key's requests per minute, or with
  the key's tokens of this minute already spent, it is a 429 ``rate_limit_exceeded`` in OpenAI's
  envelope with ``Retry-After`` and the ``x-ratelimit-*`` headers. Each WebSocket turn counts as a
  request of its own (its 429 is an error frame), besides the socket's opening.
- After the request: its tokens (the usage the backend reported, streamed or not; without one, an
  estimate of a quarter of the request's bytes) are added to the key's tokens of the minute.
- A store that cannot count lets the request through (logged): a limiter that fails closed would
  turn a store outage into a full outage.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from crossfeed.proxy.errors import ClientRequestError, error_response
from crossfeed.proxy.keys import CONFIG
from crossfeed.proxy.runtime.config import Config
from crossfeed.proxy.runtime.guard import KEY_NAME
from crossfeed.proxy.runtime.observability import SUMMARY, TurnLog
from crossfeed.proxy.state.store.base import StoreError
from crossfeed.proxy.state.store_access import STORE

log = structlog.get_logger("crossfeed")

WINDOW = 60  # seconds: the limits are per minute
LIMITED = web.RequestKey("rate_limited", dict)  # the x-ratelimit-* headers of a counted request


@dataclass(frozen=True, slots=True)
class Limits:
    requests: int  # per minute; 0: none
    tokens: int


def limits_of(config: Config, key: str | None) -> Limits:
    server = config.server
    own = next((k for k in server.inbound_keys if k.name == key), None)
    requests = own.requests_per_minute if own is not None and own.requests_per_minute is not None else None
    tokens = own.tokens_per_minute if own is not None and own.tokens_per_minute is not None else None
    return Limits(
        server.requests_per_minute_per_key if requests is None else requests,
        server.tokens_per_minute_per_key if tokens is None else tokens,
    )


def any_limits(config: Config) -> bool:
    server = config.server
    return bool(
        server.requests_per_minute_per_key
        or server.tokens_per_minute_per_key
        or any(k.requests_per_minute or k.tokens_per_minute for k in server.inbound_keys)
    )


async def admit(app: web.Application, key: str) -> dict[str, str]:
    """Count one request of ``key``; its ``x-ratelimit-*`` headers, or a 429 ``ClientRequestError``
    (with those headers and ``Retry-After``) when the key is over one of its limits this minute."""
    limits = limits_of(app[CONFIG], key)
    headers: dict[str, str] = {}
    if not limits.requests and not limits.tokens:
        return headers
    store = app[STORE]
    try:
        if limits.requests:
            used, left = await store.count(f"req:{key}", 1, WINDOW)
            headers.update(_headers("requests", limits.requests, used, left))
            if used > limits.requests:
                raise _limited(key, "requests", limits.requests, left, headers)
        if limits.tokens:
            spent, left = await store.count(f"tok:{key}", 0, WINDOW)
            headers.update(_headers("tokens", limits.tokens, spent, left))
            if spent >= limits.tokens:
                raise _limited(key, "tokens", limits.tokens, left, headers)
    except StoreError as exc:
        log.warning("rate_limit.not_counted", key=key, error=str(exc), consequence="the request was let through")
    return headers


async def spend(app: web.Application, key: str, tokens: int) -> None:
    """Add a finished request's tokens to its key's tokens of the minute."""
    if tokens <= 0 or not limits_of(app[CONFIG], key).tokens:
        return
    try:
        await app[STORE].count(f"tok:{key}", tokens, WINDOW)
    except StoreError as exc:
        log.warning("rate_limit.not_counted", key=key, error=str(exc), tokens=tokens)


def _headers(what: str, limit: int, used: int, left: float) -> dict[str, str]:
    return {
        f"x-ratelimit-limit-{what}": str(limit),
        f"x-ratelimit-remaining-{what}": str(max(limit - used, 0)),
        f"x-ratelimit-reset-{what}": f"{math.ceil(left)}s",
    }


def _limited(key: str, what: str, limit: int, left: float, headers: dict[str, str]) -> ClientRequestError:
    wait = max(1, math.ceil(left))
    return ClientRequestError(
        f"Rate limit reached for key '{key}': {limit} {what} per minute. Try again in {wait}s.",
        status=429,
        code="rate_limit_exceeded",
        headers={**headers, "Retry-After": str(wait)},
    )


def tokens_of(request: web.Request) -> int:
    """The tokens a finished request used: the reported usage, else a quarter of its bytes."""
    summary: TurnLog = request[SUMMARY]
    return _tokens(summary, request.content_length or 0)


def turn_tokens(turn_log: Mapping[str, object], body: Any) -> int:
    """The tokens a WebSocket turn used (as ``tokens_of``; its bytes: its ``input``'s)."""
    return _tokens(turn_log, len(str(body.get("input") or "")) if isinstance(body, dict) else 0)


def _tokens(summary: Mapping[str, object], size: int) -> int:
    usage = summary.get("usage")
    if isinstance(usage, dict):
        return int(usage.get("in") or 0) + int(usage.get("out") or 0)
    if summary.get("model"):  # a model call whose backend reported no usage
        return size // 4
    return 0


def middleware() -> Callable[..., Any]:
    """Installed after the auth middleware when any limit is configured."""

    @web.middleware
    async def limit(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        key = KEY_NAME.get()
        if key is None or request.headers.get("Upgrade", "").lower() == "websocket":
            return await handler(request)  # an open path (/healthz...), or a socket: each of its turns counts
        try:
            request[LIMITED] = await admit(request.app, key)
        except ClientRequestError as exc:
            request[SUMMARY]["error"] = "rate_limit_exceeded"
            return error_response(exc)
        try:
            return await handler(request)
        finally:
            await spend(request.app, key, tokens_of(request))

    return limit


async def add_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: a counted request's answer carries its ``x-ratelimit-*`` headers."""
    for name, value in (request.get(LIMITED) or {}).items():
        response.headers.setdefault(name, value)
