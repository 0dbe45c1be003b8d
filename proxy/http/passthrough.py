"""Pass-through: a request forwarded unchanged, pooled or not, its answer streamed back as it arrives.

A Responses upstream's ``/v1/responses`` (and its stored-response GET/DELETE), a chat upstream's
``/v1/chat/completions``, a lone Responses upstream's ``/v1/models``, and the rest of a backend's
API (``PASSED_BY_MODEL``: ``/v1/embeddings``, ``/v1/completions``, ...) are not translated: the body
goes out as the client sent it (the model renamed by the upstream's ``model_map``), the answer's
bytes come back as they arrive, bounded by the upstream's idle and total timeouts. On a pool a POST
goes to the turn's replica and fails over before the first byte (proxy/runtime/pool.py).

An upstream with ``affinity_header``/``affinity_field`` gets the turn's hashed affinity key on a
pass-through POST as on a translated call (proxy/state/affinity_hints.py): the request's turn was
begun from its body and headers (conversation, ``previous_response_id``, Codex's session header,
``prompt_cache_key``), and a Responses create's answer names its Response, so that the next turn of
its chain carries the same key. A bodiless GET or DELETE (a stored response, the model list) begins
no turn and has no key: it carries no hint.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiohttp
import structlog
from aiohttp import web

from crossfeed.proxy import upstream as upstream_client
from crossfeed.proxy.errors import UpstreamHTTPError, upstream_error_body
from crossfeed.proxy.keys import CONFIG, POOLS, SESSION, TRACER
from crossfeed.proxy.runtime import tracing, turn_trace
from crossfeed.proxy.runtime.config import Config, Upstream
from crossfeed.proxy.runtime.guard import LIMITS
from crossfeed.proxy.runtime.logs import TRACE
from crossfeed.proxy.runtime.observability import SUMMARY
from crossfeed.proxy.runtime.pool import hold, release
from crossfeed.proxy.runtime.upstream_protocol import relayed
from crossfeed.proxy.state import affinity, affinity_hints
from crossfeed.proxy.streaming.deadline import Deadline
from crossfeed.proxy.turns.common import outbound_headers, read_body, secrets
from crossfeed.proxy.turns.exchange import fallback_model
from crossfeed.proxy.turns.turn import new_turn, route
from crossfeed.proxy.upstream import encode_body, send

log = structlog.get_logger("crossfeed")


# The rest of an OpenAI-compatible backend's API: JSON bodies with a ``model``, routed as a create is
# and passed through unchanged (the model renamed by the upstream's model_map), answered unbuffered.
PASSED_BY_MODEL = (
    "/v1/embeddings",
    "/v1/completions",
    "/v1/moderations",
    "/v1/rerank",
    "/v1/score",
    "/v1/images/generations",
    "/v1/audio/speech",
)


async def model_endpoint(request: web.Request) -> web.StreamResponse:
    """``POST /v1/embeddings`` and the others of ``PASSED_BY_MODEL``: to the upstream the body's
    model routes to, whatever API it speaks, unchanged."""
    body = await read_body(request)
    with request.app[TRACER].turn(request.headers, request.path, request[SUMMARY], body):
        log_record = request[SUMMARY]
        backend = route(request.app[CONFIG], body, log_record)
        new_turn(request.app, request.headers, backend, log_record, body)  # its affinity (a pool's)
        return await passthrough(request, body=body, upstream=backend)


async def passthrough(
    request: web.Request, *, body: dict[str, Any] | None = None, upstream: Upstream | None = None
) -> web.StreamResponse:
    """Forward a request unchanged and stream the answer back as it arrives."""
    app = request.app
    backend = upstream or default_upstream(app[CONFIG])
    if body is None and backend.pooled and request.match_info.get("response_id"):
        backend = await _replica_storing(app, backend, request.match_info["response_id"])
    headers = tracing.inject(outbound_headers(request, backend))
    path = request.path[len("/v1") :] if request.path.startswith("/v1") else request.path
    if body is not None and backend.model_map and isinstance(body.get("model"), str):
        body = {**body, "model": backend.model_map.get(body["model"], body["model"])}
    # A streamed answer takes a place in the upstream's max_concurrent_streams, as a translated
    # stream does; a non-streaming request is not a stream and is not counted.
    streaming = body is not None and body.get("stream") is True
    with app[LIMITS].admit(backend) if streaming else contextlib.nullcontext():
        if body is None or not backend.pooled:
            resp = await _send_unchanged(request, backend, backend.base_url + path, body, headers)
            return await _relay_unchanged(request, backend, resp, _sniffer(app, path) if body is not None else None)
        return await _pooled_unchanged(request, backend, path, body, headers)


async def _replica_storing(app: web.Application, backend: Upstream, response_id: str) -> Upstream:
    """The replica of a pooled Responses backend that made ``response_id`` (it stores it), as the
    affinity map has it; else the pool's first replica."""
    found = app[POOLS][backend.name].replica(await affinity.replica_of(app, backend.name, response_id))
    return found.upstream if found is not None else backend


async def _pooled_unchanged(
    request: web.Request, backend: Upstream, path: str, body: dict[str, Any], headers: dict[str, str]
) -> web.StreamResponse:
    """A pass-through POST on a pool: to the turn's replica, failing over before the first byte."""
    app = request.app
    aff = affinity.CURRENT.get()
    prefer = await affinity.preferred(app, aff) if aff is not None and aff.upstream == backend.name else None
    log_record = request[SUMMARY]

    async def attempt(up: Upstream) -> aiohttp.ClientResponse:
        sent = body
        if up.name != backend.name:  # the fallback upstream: its own model
            model = fallback_model(up, str(log_record.get("model") or ""))
            sent = {**body, "model": up.model_map.get(model, model)}
        return await _send_unchanged(request, up, up.base_url + path, sent, headers)

    resp, answered = await app[POOLS][backend.name].call(attempt, prefer)
    log_record["replica"] = answered.replica.label
    hold(resp, answered.lease)
    if aff is not None and answered.replica.upstream.name == backend.name:
        await affinity.served(app, aff, answered.replica.label)
    sniff = _sniffer(app, path)
    try:
        return await _relay_unchanged(request, answered.replica.upstream, resp, sniff)
    finally:
        release(resp)


def _sniffer(app: web.Application, path: str) -> affinity.ResponseIdSniffer | None:
    """A Responses create's answer, read for its Response's id when the turn has an affinity (a
    pool's, or a hinted upstream's): its chain's next turns then find the same key and replica."""
    if affinity.CURRENT.get() is None or not path.endswith("/responses"):
        return None
    return affinity.ResponseIdSniffer(app)


async def _send_unchanged(
    request: web.Request, backend: Upstream, url: str, body: dict[str, Any] | None, headers: dict[str, str]
) -> aiohttp.ClientResponse:
    """Send the request; a 2xx answer's response (its headers in), else the error raised."""
    app = request.app
    if body is None:
        resp = await send(app[SESSION], backend, request.method, url, headers=headers, params=request.query)
    else:
        if backend.forwards_affinity:  # the turn's hashed key, as on a translated call
            body, headers = await affinity_hints.with_hint(backend, body, headers)
        if TRACE.debug:  # passed through unchanged: the debug lines of a translated call all the same
            turn_trace.log_request(backend, url, body, headers, secrets(request, backend))
        resp = await send(app[SESSION], backend, "POST", url, data=encode_body(body), headers=headers)
    if TRACE.debug:
        turn_trace.log_response(backend, url, resp.status, resp.headers)
    if resp.status >= 400:  # errors in OpenAI's envelope even when the upstream sent HTML or nothing
        raw = await upstream_client.read_body(resp, backend, 64 * 1024, truncate=True)
        keep = {k: v for k, v in resp.headers.items() if k.lower() in ("retry-after", "x-should-retry")}
        error = upstream_error_body(
            resp.status, raw, resp.headers.get("Content-Type", ""), secrets=secrets(request, backend)
        )
        if resp.status == 404 and body is not None:  # a POST the backend has no route for: say which path
            error = upstream_client.unknown_path(backend, "POST", url, error)
        raise UpstreamHTTPError(resp.status, error, keep)
    return resp


async def _relay_unchanged(
    request: web.Request,
    backend: Upstream,
    resp: aiohttp.ClientResponse,
    sniff: affinity.ResponseIdSniffer | None = None,
) -> web.StreamResponse:
    out = web.StreamResponse(status=resp.status)
    for name in ("Content-Type", "Retry-After", "x-should-retry"):
        if name in resp.headers:
            out.headers[name] = resp.headers[name]
    loop = asyncio.get_running_loop()
    deadline = Deadline(loop, idle=backend.timeouts.idle, total=backend.timeouts.total)
    relayed(resp.content)  # read whole, as the relay reads (proxy/runtime/upstream_protocol.py)
    try:
        await out.prepare(request)
        # Idle and total bound the body, as in the translating relay (proxy/streaming/deadline.py).
        while True:
            try:
                with deadline.arm():
                    async for chunk in resp.content.iter_any():
                        if sniff is not None and await sniff.feed(chunk):  # a pool's Responses answer
                            sniff = None
                        await out.write(chunk)
                        now = loop.time()
                        deadline.last = now
                        if now > deadline.move_at:
                            deadline.move(now)
                break
            except TimeoutError:
                if not deadline.expired() or deadline.lapsed() is not None:
                    raise  # idle or total is over (or the timeout was not this deadline's)
    except (ConnectionResetError, aiohttp.ClientError, TimeoutError) as exc:
        # Headers are sent: a pass-through can only end the body here, as the upstream did.
        log.info("passthrough.ended_early", path=request.path, reason=type(exc).__name__)
    finally:
        resp.close()
    return out


def default_upstream(config: Config) -> Upstream:
    """The upstream marked ``default``, else the first."""
    return next((u for u in config.upstreams if u.default), config.upstreams[0])
