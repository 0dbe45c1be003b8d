"""The aiohttp application: routes, middleware and the forward handlers.

Routes:
  GET  /healthz                     liveness
  GET  /readyz                      readiness (config, store, upstream probes)
  GET  /metrics                     Prometheus metrics
  GET  /v1/models                   passed to the upstream unchanged
  POST /v1/responses                chat upstream: translated (exchange.py); responses upstream: passed through
  POST /v1/responses/compact        chat upstream: compacted by crossfeed (compaction.py); responses: passed
  POST /v1/responses/input_tokens   chat upstream: counted (tokenizer or estimate); responses: asked (one leg)
  GET  /v1/responses, /responses    WebSocket mode (websocket.py): the same turns as JSON text frames
  POST /v1/chat/completions         chat upstream: passed through; responses upstream: translated (reverse.py)
  POST /v1/embeddings, /v1/completions, ... (PASSED_BY_MODEL): to the model's upstream, unchanged
  POST /v1/alpha/search             Codex's standalone web search, on [web_search] (standalone_search.py)
  *    /v1/conversations...         the Conversations API, on the response store (state/conversations.py)
  GET  /inspector...                the live translation inspector, on [inspector] (inspector.py)

What is passed through unchanged (pooled or not) is forwarded by http/passthrough.py.

Every error a client sees is OpenAI's envelope; no handler lets an exception escape as a 500
page or a traceback (``error_middleware``).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import orjson
import structlog
from aiohttp import web

from crossfeed.proxy.errors import ClientRequestError, ProxyError, UpstreamError, error_response
from crossfeed.proxy.http import inspector, runs
from crossfeed.proxy.http.codex_catalog import catalog as codex_catalog
from crossfeed.proxy.http.passthrough import PASSED_BY_MODEL, default_upstream, model_endpoint, passthrough
from crossfeed.proxy.http.standalone_search import SESSIONS as SEARCH_SESSIONS
from crossfeed.proxy.http.standalone_search import alpha_search
from crossfeed.proxy.http.websocket import SOCKETS, close_sockets, refuse_new_turns, responses_get
from crossfeed.proxy.keys import CLOCK, CONFIG, ENV, IDS, POOLS, SEAL, SESSION, TRACER
from crossfeed.proxy.runtime import tracing, turn_trace
from crossfeed.proxy.runtime.config import Config, Upstream
from crossfeed.proxy.runtime.guard import (
    LIMITS,
    StreamLimits,
    auth_middleware,
    inbound_keys,
    key_stream_caps,
    metrics_key,
    upstream_keys,
)
from crossfeed.proxy.runtime.ids import RandomIds
from crossfeed.proxy.runtime.observability import (
    METRICS,
    METRICS_KEY,
    STOPPING,
    SUMMARY,
    SUMMARY_LOG,
    Metrics,
    add_request_id_header,
    mark_stopping,
    metrics_endpoint,
    note_upstream_error,
    observe_middleware,
    usage_summary,
)
from crossfeed.proxy.runtime.pool import make_pools
from crossfeed.proxy.state import affinity, conversations, rate_limits
from crossfeed.proxy.state.history import PENDING, SAVING, delete_response, drain_saves, get_response, list_input_items
from crossfeed.proxy.state.reasoning_seal import ReasoningSeal
from crossfeed.proxy.state.runs import LIVE
from crossfeed.proxy.state.store import open_store
from crossfeed.proxy.state.store_access import KEEPER, STORE
from crossfeed.proxy.state.store_retry import SaveKeeper
from crossfeed.proxy.streaming.lifecycle import OPEN_STREAMS, drain, probe_ctx, readiness
from crossfeed.proxy.streaming.sinks import sse_opener
from crossfeed.proxy.turns import detach
from crossfeed.proxy.turns.background import RUNS, end_runs
from crossfeed.proxy.turns.common import outbound_headers, read_body
from crossfeed.proxy.turns.compaction import compact, input_tokens, upstream_count
from crossfeed.proxy.turns.exchange import relay_turn, stream_flag
from crossfeed.proxy.turns.forward import respond
from crossfeed.proxy.turns.reverse import chat_call, reverse_now, reverse_streamed
from crossfeed.proxy.turns.turn import Turn, new_turn, route
from crossfeed.proxy.upstream import new_session
from crossfeed.translators.errors import TranslationError
from crossfeed.translators.ids import IdFactory
from crossfeed.translators.responses.fields import error_status
from crossfeed.translators.sse import DONE_FRAME, render_chat, render_responses

log = structlog.get_logger("crossfeed")


def create_app(
    config: Config, *, environ: Mapping[str, str], ids: IdFactory | None = None, clock: Callable[[], int] | None = None
) -> web.Application:
    keys = inbound_keys(config, environ)
    upstream_keys(config, environ)
    middlewares = [observe_middleware, error_middleware, *([auth_middleware(keys)] if keys else [])]
    if keys and rate_limits.any_limits(config):  # per-key rates (proxy/state/rate_limits.py)
        middlewares.append(rate_limits.middleware())
    app = web.Application(client_max_size=config.server.max_body_bytes, middlewares=middlewares)
    app[CONFIG] = config
    metrics = app[METRICS] = Metrics(
        open_streams=lambda: limits.counts(), shared_dir=environ.get("PROMETHEUS_MULTIPROC_DIR")
    )
    pools = app[POOLS] = make_pools(config, metrics, sleep=asyncio.sleep)
    if pools:
        app.on_response_prepare.append(_replica_headers)
    limits = app[LIMITS] = StreamLimits(
        key_stream_caps(config, tuple(name for _, name in keys)), on_change=metrics.streams_changed
    )
    app[SUMMARY_LOG] = structlog.get_logger("crossfeed").bind()
    app[OPEN_STREAMS] = set()
    app[STOPPING] = asyncio.Event()
    app[IDS] = ids or RandomIds()
    app[CLOCK] = clock or (lambda: int(time.time()))
    app[SEAL] = ReasoningSeal(environ.get(config.reasoning.key_env))
    app[ENV] = environ
    app[PENDING] = set()
    app[SAVING] = {}
    turn_trace.prepare(app, config)  # --log-level debug lines, serve --record
    app[TRACER] = tracing.configure(environ)
    if app[TRACER].on:
        app.on_cleanup.append(_stop_tracing)
    app.cleanup_ctx.append(_session_ctx)
    app.cleanup_ctx.append(_store_ctx)
    app.cleanup_ctx.append(probe_ctx(config, SESSION))
    app.on_response_prepare.append(add_request_id_header)
    if keys and rate_limits.any_limits(config):
        app.on_response_prepare.append(rate_limits.add_headers)
    app[SOCKETS] = set()
    app[SEARCH_SESSIONS] = collections.OrderedDict()
    app.on_shutdown.append(mark_stopping)
    app.on_shutdown.append(refuse_new_turns)
    app.on_shutdown.append(drain)
    app[RUNS], app[LIVE] = set(), {}
    app.on_shutdown.append(end_runs)  # background runs the drain did not end (proxy/turns/background.py)
    app.on_shutdown.append(close_sockets)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if config.server.metrics_port is None:  # else on a listener of its own (metrics_app)
        app.router.add_get("/metrics", metrics_endpoint)
    key = metrics_key(config, environ)
    if key is not None:
        app[METRICS_KEY] = key
    app.router.add_get("/v1/models", models_endpoint)
    app.router.add_post("/v1/responses", _responses_route(forward_response))
    app.router.add_post("/v1/responses/compact", _responses_route(compact_response))
    app.router.add_post("/v1/responses/input_tokens", input_tokens_endpoint)
    app.router.add_post("/v1/alpha/search", alpha_search)
    for path in ("/v1/responses", "/responses"):  # WebSocket mode; some clients drop the /v1
        app.router.add_get(path, responses_get, allow_head=False)
    for method, handler in (("GET", get_response), ("DELETE", delete_response)):
        app.router.add_route(method, "/v1/responses/{response_id}", _stored(handler))
    app.router.add_get("/v1/responses/{response_id}/input_items", _stored(list_input_items))
    app.router.add_post("/v1/responses/{response_id}/cancel", _stored(runs.cancel_response))
    app.router.add_post("/v1/chat/completions", chat_endpoint)
    for path in PASSED_BY_MODEL:
        app.router.add_post(path, model_endpoint)
    conversations.install(app)
    inspector.install(app, config, environ, tuple(key for key, _ in keys))
    return app


def _stored(handler: Callable[[web.Request], Any]) -> Callable[[web.Request], Any]:
    """Stored-response endpoints. A response made through a chat upstream is in crossfeed's store;
    one made through a Responses upstream is kept by that upstream. Where the id lives is not
    known, so the places are asked in turn until one knows it: first the default upstream's
    (crossfeed's store for a chat upstream, else that upstream), then the store if any upstream
    speaks chat, then every other Responses upstream. The first place's answer stands unless it
    is a 404; a later place that fails (unreachable, 5xx) is logged and skipped, so the answer
    is then the first place's 404."""

    async def route(request: web.Request) -> web.StreamResponse:
        config = request.app[CONFIG]
        default = default_upstream(config)
        places: list[Upstream | None] = [None if default.api == "chat" else default]
        if None not in places and any(u.api == "chat" for u in config.upstreams):
            places.append(None)
        places += [u for u in config.upstreams if u.api == "responses" and u is not default]
        not_found: ProxyError | None = None
        for backend in places:
            try:
                if backend is None:
                    return await handler(request)
                return await passthrough(request, upstream=backend)
            except ProxyError as exc:
                if not_found is None and exc.status != 404:
                    raise  # the first place's own answer
                if exc.status == 404:
                    not_found = not_found or exc
                else:
                    log.info("stored.lookup_failed", upstream=backend.name if backend else "store", status=exc.status)
        assert not_found is not None
        raise not_found

    return route


async def _store_ctx(app: web.Application) -> Any:
    store = app[STORE] = open_store(app[CONFIG].store, env=app[ENV])
    if store.backend == "sqlite":
        # A local file that cannot be created now will not appear later: stop at start-up with
        # the store's own explanation (StoreError), not at the first request. (A Redis server
        # may come up after crossfeed: /readyz reports it meanwhile.)
        try:
            await store.ping()
        except BaseException:
            await store.close()
            raise
    keeper = app[KEEPER] = SaveKeeper(store, app[CONFIG].store, app[METRICS])
    keeper.reached = store.backend == "sqlite"  # (pinged above: /readyz calls it degraded, not unready, if it fails)
    keeper.start()  # failed saves are kept and saved again in the background (proxy/state/store_retry.py)
    yield
    await drain_saves(app)
    await keeper.drain()  # the retry queue's last chance, bounded
    await app[STORE].close()


async def _stop_tracing(app: web.Application) -> None:
    """The spans still held are exported (off the event loop; a few seconds at most)."""
    await app[TRACER].close()


async def _session_ctx(app: web.Application) -> Any:
    app[SESSION] = new_session()
    yield
    await app[SESSION].close()


@web.middleware
async def error_middleware(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
    try:
        return await handler(request)
    except (ProxyError, TranslationError) as exc:
        if isinstance(exc, UpstreamError):
            note_upstream_error(request.app, request[SUMMARY], exc.code)
        return error_response(exc)
    except web.HTTPRequestEntityTooLarge:
        return error_response(
            ClientRequestError(
                "the request body is larger than the configured maximum", status=413, code="request_too_large"
            )
        )
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = "not_found" if exc.status == 404 else "method_not_allowed" if exc.status == 405 else None
        message = f"{request.method} {request.path} is not served by crossfeed" if code else exc.reason
        return error_response(
            ClientRequestError(message, status=exc.status, code=code),
            headers={k: v for k, v in exc.headers.items() if k.lower() == "allow"},
        )
    except Exception:
        log.exception("request.failed", path=request.path)
        return error_response(ProxyError("crossfeed failed to handle the request"))


async def _replica_headers(request: web.Request, response: web.StreamResponse) -> None:
    """A pool's answer names the replica that gave it (``x-crossfeed-replica``, its label, never
    its URL); a Responses create's carries it as an opaque ``x-codex-turn-state`` too, which the
    client sends back to reach the same replica (proxy/state/affinity.py)."""
    summary = request.get(SUMMARY)
    label = summary.get("replica") if summary is not None else None
    if label:
        response.headers[affinity.REPLICA_HEADER] = label
        if request.path in ("/v1/responses", "/responses"):
            response.headers[affinity.TURN_STATE_HEADER] = affinity.turn_state(label)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Ready (200) or not (503, with the problems). The store's state is in ``store``: one that
    fails saves or cannot be reached leaves the process ready but ``degraded`` (turns are served,
    follow-ups get a 503 naming the store); only a store never reached since start is a problem."""
    problems = readiness(request.app, request.app[CONFIG])
    reached, store = await request.app[KEEPER].readiness()
    if not reached:
        problems.append(f"the response store does not answer: {store}")
    status = "not ready" if problems else "degraded" if store != "ok" else "ready"
    answer: dict[str, Any] = {"status": status, "problems": problems, "store": store}
    pools = request.app[POOLS]
    if pools:  # each replica's health as this process sees it (proxy/runtime/pool.py)
        answer["pools"] = {name: pool.states() for name, pool in pools.items()}
    return web.json_response(answer, status=503 if problems else 200)


ChatHandler = Callable[[web.Request, dict[str, Any], Turn], Awaitable[web.StreamResponse]]


def _turn(request: web.Request, body: dict[str, Any]) -> Turn:
    """The turn of an HTTP request: the upstream its body's model routes to, the request's log record."""
    log_record = request[SUMMARY]
    return new_turn(request.app, request.headers, route(request.app[CONFIG], body, log_record), log_record, body)


def _responses_route(on_chat: ChatHandler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A Responses endpoint: a Responses upstream gets the request unchanged, a chat upstream
    is served by ``on_chat``."""

    async def endpoint(request: web.Request) -> web.StreamResponse:
        body = await read_body(request, create=True)
        with request.app[TRACER].turn(request.headers, request.path, request[SUMMARY], body):
            turn = _turn(request, body)
            backend = turn.upstream
            if backend.api == "responses":
                if backend.normalize_stream and stream_flag(body):
                    return await normalized_stream(request, body, turn)
                return await passthrough(request, body=body, upstream=backend)
            return await on_chat(request, body, turn)

    return endpoint


async def input_tokens_endpoint(request: web.Request) -> web.StreamResponse:
    """``model`` may be left out here (as in the API): the default upstream counts. Traced as a
    turn of its own (``gen_ai.operation.name`` ``count_tokens``)."""
    body = await read_body(request)
    with request.app[TRACER].turn(request.headers, request.path, request[SUMMARY], body, "count_tokens"):
        given = body.get("model") is not None
        if given:
            turn = _turn(request, body)
        else:
            backend = default_upstream(request.app[CONFIG])
            request[SUMMARY].update({"upstream": backend.name})
            turn = new_turn(request.app, request.headers, backend, request[SUMMARY])
        if turn.upstream.api == "responses":  # the backend's answer, as it came
            answer = await upstream_count(turn, body)
            count, how = answer.get("input_tokens"), "upstream"
        else:
            count, how = await input_tokens(
                turn, {**body, "model": turn.upstream.name} if not given else body, model_given=given
            )
            answer = {"object": "response.input_tokens", "input_tokens": count}
        if isinstance(count, int):
            request[SUMMARY].update({"counted": count, "counted_by": how})
    return web.Response(
        body=orjson.dumps(answer), content_type="application/json", headers={"x-crossfeed-token-count": how}
    )


async def chat_endpoint(request: web.Request) -> web.StreamResponse:
    body = await read_body(request)
    with request.app[TRACER].turn(request.headers, request.path, request[SUMMARY], body):
        return await _chat(request, body)


async def _chat(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
    turn = _turn(request, body)
    if turn.upstream.api == "chat":
        return await passthrough(request, body=body, upstream=turn.upstream)
    call = chat_call(turn, body)
    if not call.stream:
        completion = await reverse_now(turn, call)
        return web.Response(body=orjson.dumps(completion), content_type="application/json")
    response, open_sink = sse_opener(request, render_chat, done_frame=DONE_FRAME)
    await reverse_streamed(turn, call, open_sink)
    return response


async def forward_response(request: web.Request, body: dict[str, Any], turn: Turn) -> web.StreamResponse:
    """``POST /v1/responses`` on a chat upstream: the create decision (proxy/turns/forward.py),
    streamed as SSE or answered whole; ``background``: run by proxy/turns/background.py."""
    if runs.is_background(body):
        return await runs.create(request, body, turn)
    if not stream_flag(body):
        result, _ = await respond(turn, body, None)
        assert result is not None
        turn.log.update({"terminal": result.get("status"), "usage": usage_summary(result)})
        if result.get("status") == "failed":  # an error in a 200 body: answer with an error status
            err = result.get("error") or {}
            code = str(err.get("code") or "upstream_error")
            raise UpstreamError(str(err.get("message") or "the upstream failed"), code=code, status=error_status(code))
        return web.Response(body=orjson.dumps(result), content_type="application/json")
    if detach.wanted(request.app, body):
        return await detach.create(request, body, turn)
    response, open_sink = sse_opener(request, render_responses)
    await respond(turn, body, open_sink)
    return response


async def compact_response(request: web.Request, body: dict[str, Any], turn: Turn) -> web.StreamResponse:
    """``POST /v1/responses/compact`` on a chat upstream (proxy/turns/compaction.py)."""
    return web.Response(body=orjson.dumps(await compact(turn, body)), content_type="application/json")


async def normalized_stream(request: web.Request, body: dict[str, Any], turn: Turn) -> web.StreamResponse:
    """A streamed create on a Responses upstream whose profile says ``normalize_stream``: its
    events re-emitted as a strict stream (translators/responses/normalize.py)."""
    turn.log["stream"] = True
    response, open_sink = sse_opener(request, render_responses)
    await relay_turn(turn, body, open_sink)
    return response


async def models_endpoint(request: web.Request) -> web.StreamResponse:
    """Every upstream's list merged, plus the exact model names the config routes (renamed back
    to the client-facing names), in ``data``; and the catalog Codex reads, in ``models``
    (proxy/http/codex_catalog.py). A lone Responses upstream's list is passed through, as is a lone
    upstream's error."""
    config = request.app[CONFIG]
    if len(config.upstreams) == 1 and config.upstreams[0].api == "responses":
        return await passthrough(request)

    async def fetch(backend: Upstream) -> tuple[int, list[dict[str, Any]]]:
        headers = outbound_headers(request, backend)
        status: int = 0
        body: Any = {}
        try:
            async with request.app[SESSION].get(
                backend.base_url + "/models", headers=headers, timeout=aiohttp.ClientTimeout(total=10)
            ) as r:
                status = r.status
                body = await r.json(content_type=None) if r.status == 200 else {}
        except (aiohttp.ClientError, TimeoutError, ValueError):
            body = {}
        data = body.get("data") if isinstance(body, dict) else None
        back = {v: k for k, v in backend.model_map.items()}
        out = [{**m, "id": back.get(str(m.get("id")), m.get("id"))} for m in data or () if isinstance(m, dict)]
        out += [
            {"id": name, "object": "model", "created": 0, "owned_by": backend.name}
            for name in (*backend.models, *backend.model_map)
            if not any(c in name for c in "*?[")
        ]
        return status, out

    answers = await asyncio.gather(*(fetch(u) for u in config.upstreams))
    if len(config.upstreams) == 1 and answers[0][0] != 200:
        return await passthrough(request)  # the upstream's own error, status and message kept
    merged: dict[str, dict[str, Any]] = {}
    listed: list[tuple[str, Upstream]] = []
    for backend, (_, models) in zip(config.upstreams, answers, strict=True):
        for m in models:
            merged.setdefault(str(m.get("id")), m)
            listed.append((str(m.get("id")), backend))
    return web.json_response({"object": "list", "data": list(merged.values()), "models": codex_catalog(config, listed)})
