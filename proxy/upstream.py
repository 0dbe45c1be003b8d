"""The upstream HTTP client: one pooled aiohttp session, errors mapped in one place.

``open_upstream`` sends the request and returns the response once its headers are in; a non-2xx
answer is read and raised as ``UpstreamHTTPError`` with the upstream's status and message kept.
Every aiohttp/asyncio failure becomes an ``UpstreamError`` subclass here, so no caller ever sees
a foreign exception.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
import structlog

from crossfeed.proxy.errors import (
    ClientRequestError,
    UpstreamBroken,
    UpstreamError,
    UpstreamHTTPError,
    UpstreamTimeout,
    UpstreamUnavailable,
    upstream_error_body,
)
from crossfeed.proxy.runtime import upstream_call, upstream_protocol
from crossfeed.proxy.runtime.config import Timeouts, Upstream
from crossfeed.proxy.runtime.logs import TRACE
from crossfeed.proxy.runtime.timeout_scope import timeout_after
from crossfeed.proxy.runtime.turn_trace import log_request, log_response, shown_url
from crossfeed.proxy.state import affinity_hints

log = structlog.get_logger("crossfeed")

MAX_ERROR_BODY = 64 * 1024
# Request headers a client may send that mean something to the upstream too.
FORWARDED_HEADERS = ("openai-organization", "openai-project", "x-request-id", "user-agent")


def new_session() -> aiohttp.ClientSession:
    """One pooled session for every client. Its cookie jar keeps nothing: the session is shared,
    so a cookie one upstream answer set (a load balancer's, say) would otherwise ride along on
    every later request, whoever sent it."""
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=30)
    upstream_protocol.install(connector)  # no resume per chunk read (proxy/runtime/upstream_protocol.py)
    session = aiohttp.ClientSession(
        connector=connector,
        auto_decompress=True,
        cookie_jar=aiohttp.DummyCookieJar(),
        json_serialize=lambda o: orjson.dumps(o).decode(),
    )
    upstream_call.adopt(session)  # its POSTs without ClientSession.request's machinery (proxy/runtime/upstream_call.py)
    return session


def upstream_headers(
    up: Upstream, client_headers: Mapping[str, str], api_key: str | None, *, client_key_is_ours: bool = False
) -> dict[str, str]:
    """The headers of an upstream request. The backend key is the configured one; without one,
    the client's ``Authorization`` is passed on (``pass_client_key``), unless the client's key
    is crossfeed's own inbound key (``client_key_is_ours``), which never leaves crossfeed."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    for name in FORWARDED_HEADERS:
        value = client_headers.get(name)
        if value:
            headers[name] = value
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    elif up.pass_client_key and not client_key_is_ours and client_headers.get("authorization"):
        headers["Authorization"] = client_headers["authorization"]
    headers.update(up.headers)
    return headers


def client_timeout(up: Upstream) -> aiohttp.ClientTimeout:
    """aiohttp's part of the timeouts: the connect timeout only.

    The wait for the response headers (``first_byte``) is a timeout scope around the
    request (``send``), and the body's idle and total timeouts are enforced by the relay,
    ``read_body`` and the pass-through, so that each expiry ends the answer properly and names
    itself. aiohttp's ``sock_read`` is not used: it applies to every read of the body too, so a
    pause in a stream longer than ``first_byte`` (when that is set below ``idle``) would end it."""
    return _client_timeout(up.timeouts)


@functools.lru_cache(maxsize=256)
def _client_timeout(t: Timeouts) -> aiohttp.ClientTimeout:  # one per upstream, not one per request
    return aiohttp.ClientTimeout(total=None, connect=t.connect, sock_connect=t.connect)


# What a failed upstream call raises: aiohttp's errors and asyncio's timeouts.
CLIENT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)


def upstream_failure(exc: BaseException, up: Upstream) -> UpstreamError:
    """The one place where aiohttp/asyncio exceptions become ``UpstreamError`` subclasses.

    ``send`` catches ``CLIENT_ERRORS`` around the request and raises what this returns: a plain
    ``except`` costs nothing when nothing fails, unlike an async context manager per request."""
    t = up.timeouts
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return UpstreamTimeout("connect", t.connect)
    if isinstance(exc, TimeoutError):  # the timeout scope around the request (first_byte)
        return UpstreamTimeout("first_byte", t.first_byte)
    if isinstance(exc, aiohttp.ClientConnectorError):
        # The client is told which upstream, not where it is: the address is the operator's (logs, /readyz).
        reason = _connect_reason(exc)
        return UpstreamUnavailable(f"cannot connect to the upstream {up.name!r} ({reason})")
    return UpstreamUnavailable(f"the upstream connection failed: {_describe(exc)}")


# aiohttp >= 3.10.10 raises ClientConnectorDNSError for a name that does not resolve.
_DNS_ERROR: Any = getattr(aiohttp, "ClientConnectorDNSError", socket.gaierror)


def _connect_reason(exc: aiohttp.ClientConnectorError) -> str:
    """Why the connection failed, without the address. A DNS or TLS failure's errno is not an
    errno (getaddrinfo's -2, OpenSSL's 1): ``os.strerror`` would say "unknown error -2" or
    "operation not permitted"."""
    if isinstance(exc, _DNS_ERROR) or isinstance(exc.os_error, socket.gaierror):
        return "its host name could not be resolved"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return "its TLS certificate was not accepted"
    if isinstance(exc, aiohttp.ClientSSLError):
        return "the TLS handshake failed"
    return os.strerror(exc.errno).lower() if exc.errno else "the connection failed"


_DATA_HEADERS = {"data", "headers"}  # a call ``upstream_call.post`` can make (bytes and a headers dict)


async def send(
    session: aiohttp.ClientSession, up: Upstream, method: str, url: str, **kwargs: Any
) -> aiohttp.ClientResponse:
    """Make the request and return once the response headers are in, within ``first_byte``
    seconds; every failure is raised as an ``UpstreamError`` (see ``upstream_failure``)."""
    try:
        with timeout_after(up.timeouts.first_byte):
            # Redirects are not followed: a POST would turn into a GET without its body, and the
            # request would go to an address the operator never configured.
            if method == "POST" and kwargs.keys() == _DATA_HEADERS and upstream_call.usable(session):
                resp = await upstream_call.post(session, url, kwargs["data"], kwargs["headers"], client_timeout(up))
            else:
                resp = await session.request(method, url, timeout=client_timeout(up), allow_redirects=False, **kwargs)
    except CLIENT_ERRORS as exc:
        raise upstream_failure(exc, up) from None
    if 300 <= resp.status < 400:
        resp.release()
        log.warning("upstream.redirect", upstream=up.name, status=resp.status, location=resp.headers.get("Location"))
        raise UpstreamHTTPError(
            502,
            {
                "error": {
                    "message": f"upstream '{up.name}' answered HTTP {resp.status} (a redirect), which crossfeed does not "
                    "follow: its base_url should be the backend's final address",
                    "type": "server_error",
                    "param": None,
                    "code": "upstream_redirect",
                }
            },
        )
    return resp


async def open_upstream(
    session: aiohttp.ClientSession,
    up: Upstream,
    path: str,
    body: dict[str, Any],
    headers: dict[str, str],
    *,
    secrets: tuple[str, ...] = (),
) -> aiohttp.ClientResponse:
    """POST ``body`` and return the response once its headers are in (2xx only).

    A non-2xx answer is read whole (bounded) and raised as ``UpstreamHTTPError``; ``secrets``
    (the upstream key) are cut out of its message, since some servers quote the key they got.
    """
    url = up.base_url + path
    if up.forwards_affinity:  # a router's sticky-session hint (proxy/state/affinity_hints.py)
        body, headers = await affinity_hints.with_hint(up, body, headers)
    debug = TRACE.debug  # read once per call; never on the per-chunk path
    if debug:
        log_request(up, url, body, headers, secrets)
    resp = await send(session, up, "POST", url, data=encode_body(body), headers=headers)
    if debug:
        log_response(up, url, resp.status, resp.headers)
    if resp.status >= 400 or resp.status < 200:
        try:
            raw = await read_body(resp, up, MAX_ERROR_BODY, truncate=True)
        except UpstreamError:
            raw = b""
        body_out = upstream_error_body(resp.status, raw, resp.headers.get("Content-Type", ""), secrets=secrets)
        if resp.status == 404:
            body_out = unknown_path(up, "POST", url, body_out)
        keep = {k: v for k, v in resp.headers.items() if k.lower() in ("retry-after", "x-should-retry")}
        raise UpstreamHTTPError(resp.status, body_out, keep)
    return resp


def base_url_hint(up: Upstream) -> str:
    """What to check when the backend does not know crossfeed's paths (a 404 on a call, or on
    the readiness probe's model listing): most often a base URL without its ``/v1``."""
    if lacks_v1(up):
        return "does base_url need /v1?"
    return "is base_url the root of the backend's OpenAI-compatible API?"


def lacks_v1(up: Upstream) -> bool:
    return not urlsplit(up.base_url).path.rstrip("/").endswith("/v1")


# The codes a 404 for an unknown route comes with (llama.cpp: 404; most servers: none).
_GENERIC_404 = frozenset({"404", "not_found", "notfound", "not_found_error"})


def unknown_path(up: Upstream, method: str, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """A backend's 404 to a call: logged with the URL that answered it. When it is the path the
    backend does not know (not a model or an id it does not know: its error names no param, has
    no code of its own and its message names no model or response), the client's message says
    which path, with ``base_url_hint``; never the backend's host or port (a backend that quotes
    them in its own message has them cut out)."""
    err = body.get("error") or {}
    message = str(err.get("message") or "")
    parts = urlsplit(url)
    log.warning("upstream.not_found", upstream=up.name, method=method, url=shown_url(url), message=message[:300])
    lowered = message.lower()
    named = err.get("param") is not None or str(err.get("code") or "404").lower() not in _GENERIC_404
    if named or "model" in lowered or "response" in lowered:  # about something the request named
        return body
    message = message.removeprefix("the upstream answered HTTP 404").lstrip(": ")  # a body that was no error object
    host = parts.hostname or ""
    places = {parts.netloc, parts.netloc.rsplit("@", 1)[-1], host if len(host) >= 4 else ""} - {""}
    for where in sorted(places, key=len, reverse=True):  # the longest first: host:port before host
        message = message.replace(where, "[upstream]")
    answer = f" (its answer: {message})" if message else ""
    return {
        "error": {
            **err,
            "message": f"the upstream {up.name!r} answered 404 to {method} {parts.path}: it does not know that "
            f"path; {base_url_hint(up)}{answer}",
            "code": err.get("code") or "upstream_path_not_found",
        }
    }


def encode_body(body: Any) -> bytes:
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:  # deeper than orjson writes (255 levels)
        raise ClientRequestError(
            "the request nests JSON too deeply (at most 255 levels)", code="invalid_json"
        ) from None


async def read_body(resp: aiohttp.ClientResponse, up: Upstream, limit: int, *, truncate: bool = False) -> bytes:
    """The whole body (not just what is buffered), bounded by ``limit`` and the idle timeout."""
    chunks: list[bytes] = []
    size = 0
    idle, total = up.timeouts.idle, up.timeouts.total
    loop = asyncio.get_running_loop()
    end = loop.time() + total
    try:
        while True:
            wait = min(idle, end - loop.time())
            try:
                with timeout_after(wait):
                    chunk = await resp.content.readany()
            except TimeoutError:
                if loop.time() >= end:
                    raise UpstreamTimeout("total", total) from None
                raise UpstreamTimeout("idle", idle) from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                if truncate:
                    break
                raise UpstreamUnavailable("the upstream answer is larger than the configured limit")
    except aiohttp.ClientError as exc:
        raise UpstreamBroken(f"the upstream connection failed mid-answer ({_describe(exc)})") from None
    finally:
        resp.close()
    return b"".join(chunks)[:limit] if truncate else b"".join(chunks)


async def read_json(resp: aiohttp.ClientResponse, up: Upstream, limit: int) -> Any:
    """Read a non-streaming JSON body; errors mapped like the rest of this module."""
    raw = await read_body(resp, up, limit)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise UpstreamBroken("the upstream answered with a body that is not JSON") from None


_DESCRIPTIONS: tuple[tuple[type[BaseException], str], ...] = (
    (aiohttp.ServerDisconnectedError, "the upstream closed the connection"),
    (aiohttp.ClientPayloadError, "the upstream sent a malformed or truncated body"),
    (aiohttp.ClientResponseError, "the upstream sent a malformed HTTP response"),
    (aiohttp.ClientOSError, "a network error on the upstream connection"),
)


def _describe(exc: BaseException) -> str:
    """A fixed phrase per failure: aiohttp's own texts can quote raw upstream bytes."""
    log.info("upstream.error_detail", error=type(exc).__name__, detail=str(exc)[:300])
    for kind, text in _DESCRIPTIONS:
        if isinstance(exc, kind):
            return text
    return "the connection failed"
