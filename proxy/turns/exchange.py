"""Exchanges: one client turn, from the parsed request body to the Response handed to the store.

A transport (HTTP in ``app.py``/``reverse.py``, a WebSocket in ``websocket.py``) decides where the
frames go by giving the exchange a *sink opener*: called once the upstream has answered 2xx, so
an upstream error before the stream is still the transport's own error answer (an HTTP status,
a WebSocket error frame), it returns the sink, or None when the client is already gone.

Each upstream call is a *leg* (``open_leg`` + ``run_leg``): the pure machine driven by the relay
into the sink. The machine's numbering (``sequence_number``, ``output_index``) and its one
terminal event are the exchange's Response; ``run_leg`` records what the leg did on the turn's
summary line and in the metrics, whatever the transport.

  forward_turn    Responses client, chat upstream: ChatToResponsesStream; saved to the store
  relay_turn      Responses client, Responses upstream, events relayed, or normalised when the
                  upstream's profile says so (WebSocket; SSE with normalize_stream)
  reverse_turn    chat client, Responses upstream: ResponsesToChatStream (SSE only)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import aiohttp
import structlog
from aiohttp import web

from crossfeed.proxy.errors import ClientRequestError, ProxyError, UpstreamError
from crossfeed.proxy.keys import CLOCK, CONFIG, IDS, SEAL, SESSION
from crossfeed.proxy.runtime.config import Upstream
from crossfeed.proxy.runtime.guard import KEY_NAME, LIMITS
from crossfeed.proxy.runtime.logs import TRACE
from crossfeed.proxy.runtime.observability import METRICS, SUMMARY, note_upstream_error, usage_counts, usage_summary
from crossfeed.proxy.runtime.turn_trace import TapSink, open_trace
from crossfeed.proxy.state.history import final_saver
from crossfeed.proxy.streaming.lifecycle import OPEN_STREAMS
from crossfeed.proxy.streaming.relay import RelayStats, relay
from crossfeed.proxy.streaming.sinks import Sink
from crossfeed.proxy.turns.common import note_anomalies, outbound_headers, secrets
from crossfeed.proxy.upstream import open_upstream
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.forward.request import MappedRequest, responses_request_to_chat
from crossfeed.translators.forward.web_search_items import search_function_name
from crossfeed.translators.pump import Out, Pump
from crossfeed.translators.responses.normalize import NormalizeResponses
from crossfeed.translators.responses.relay import ResponsesEventRelay
from crossfeed.translators.reverse.machine import ResponsesToChatStream
from crossfeed.translators.reverse.request import include_usage
from crossfeed.translators.sse import Framing

log = structlog.get_logger("crossfeed")

SinkOpener = Callable[[], Awaitable[Sink | None]]
Summary = MutableMapping[str, Any]


def stream_flag(body: dict[str, Any]) -> bool:
    """``stream``: a boolean, or null/absent for false (both APIs take null)."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise ClientRequestError("`stream` must be a boolean", param="stream", code="invalid_type")
    return bool(stream)


def pick_upstream(request: web.Request, body: dict[str, Any], summary: dict[str, Any] | None = None) -> Upstream:
    """The upstream serving the body's model; the turn's summary (the request's by default) gets
    the model and the upstream's name."""
    config = request.app[CONFIG]
    model = body.get("model")
    if model is None or not isinstance(model, str) or not model:
        raise ClientRequestError(
            "you must provide a model parameter (a string)",
            param="model",
            code="missing_required_parameter" if model is None else "invalid_type",
        )
    up = config.route(model)
    (request[SUMMARY] if summary is None else summary).update(model=model, upstream=up.name if up else None)
    if up is None:
        raise ClientRequestError(
            f"the model `{model}` does not exist or is not served here",
            param="model",
            status=404,
            code="model_not_found",
        )
    return up


def map_forward(
    request: web.Request,
    body: dict[str, Any],
    up: Upstream,
    history: list[dict[str, Any]] | None,
    *,
    mcp_results: dict[str, str] | None = None,
) -> MappedRequest:
    """The chat request for a Responses request (the upstream's model name in it);
    ``mcp_results``: what came of the MCP approvals this input answers (proxy/turns/hosted/mcp.py)."""
    seal = request.app[SEAL]
    owner = KEY_NAME.get() or ""
    searching = request.app[CONFIG].web_search.backend is not None
    mapped = responses_request_to_chat(
        body,
        up.profile,
        history=history,
        reveal_reasoning=seal.open,
        open_summary=lambda token: seal.open_summary(token, owner),
        search_function=search_function_name(body.get("tools")) if searching else None,
        mcp_results=mcp_results,
    )
    mapped.chat["model"] = up.model_map.get(mapped.model, mapped.model)
    if mapped.ignored:
        log.info("request.ignored_fields", model=mapped.model, ignored=list(mapped.ignored))
    return mapped


def reasoning_sealer(request: web.Request, body: dict[str, Any]) -> Any:
    include = body.get("include") or ()
    wanted = isinstance(include, list) and "reasoning.encrypted_content" in include
    return request.app[SEAL].seal if wanted else None


async def open_leg(
    request: web.Request, up: Upstream, path: str, body: dict[str, Any], summary: Summary
) -> aiohttp.ClientResponse:
    """POST one upstream call; returns once its 2xx headers are in (errors raise)."""
    started = time.monotonic()
    upstream = await open_upstream(
        request.app[SESSION], up, path, body, outbound_headers(request, up), secrets=secrets(request, up)
    )
    summary["ttfb"] = time.monotonic() - started
    return upstream


async def run_leg(
    request: web.Request,
    up: Upstream,
    upstream: aiohttp.ClientResponse,
    pump: Pump,
    sink: Sink,
    summary: Summary,
    initial: list[Out] | None = None,
    *,
    close: bool = True,
    before_end: BeforeEnd | None = None,
) -> RelayStats:
    """Run the relay for one leg, registered as open for shutdown (the caller holds its place in
    the stream limits, which the active-streams metric reads).

    The relay runs as its own task. A coroutine that waits for upstream data is resumed through
    every coroutine awaiting it; in the handler's task that is the middlewares, the endpoint
    and the handler, once per upstream read. In its own task the chain is the relay alone: 3-8 %
    less CPU per chunk on short streams and at 256 paced streams (bench A/B). Cancelling the
    caller (the client hung up) cancels the task it awaits, and the relay closes the upstream
    on its way out; if it is cancelled before it ever ran, that is done here."""
    app = request.app
    task = asyncio.get_running_loop().create_task(
        relay(
            upstream,
            pump,
            sink,
            idle=up.timeouts.idle,
            keepalive=app[CONFIG].server.keepalive_seconds,
            total=up.timeouts.total,
            initial=initial,
            registry=app[OPEN_STREAMS],
            close=close,
            before_end=before_end,
        )
    )
    try:
        stats = await task
    except asyncio.CancelledError:
        upstream.close()
        if sink.__class__ is TapSink:  # a traced turn ends here: its trace is written all the same
            sink.trace.close("cancelled")
        raise
    summary.update(ending=stats.ending, events_in=stats.events_in, events_out=stats.events_out)
    if stats.error:
        summary["error"] = stats.error
        if stats.ending.startswith("upstream"):
            app[METRICS].upstream_errors.labels(up.name, stats.ending).inc()
    if "internal_error" in stats.extra:
        log.error("stream.internal_error", detail=stats.extra["internal_error"])
    return stats


# Awaited with the machine before a write that may carry its terminal event (the Response is
# saved there); it may be awaited more than once and acts once (responses_api.final_saver).
BeforeEnd = Callable[[Any], Awaitable[None]]
# After a leg (its machine, the open sink): the next leg's upstream body and the machine its
# stream feeds, or None (the end). It may write events of its own to the sink first.
NextLeg = Callable[[Any, Sink], Awaitable["tuple[dict[str, Any], Any] | None"]]


async def stream_turn(
    request: web.Request,
    up: Upstream,
    path: str,
    upstream_body: dict[str, Any],
    make_machine: Callable[[Framing], Any],
    open_sink: SinkOpener,
    summary: Summary,
    *,
    then: NextLeg | None = None,
    before_end: BeforeEnd | None = None,
    client: dict[str, Any] | None = None,
) -> tuple[Any, RelayStats] | None:
    """The streamed exchange every direction and transport shares: admission to the upstream's
    stream limit, one leg (upstream call, sink, machine, relay), and the turn's summary fields.
    ``make_machine`` gets the sink's framing; a machine with ``start`` (the forward one) has its
    start events go out with the first upstream data. ``then``: more legs of the same Response
    on the same sink (a compaction, then the answer). ``before_end``: awaited with the machine
    before the terminal event goes out. ``client``: the client's request, for a recorded turn
    (proxy/runtime/turn_trace.py). None: the client left before the stream."""
    app = request.app
    trace = None
    with app[LIMITS].admit(up):
        upstream = await open_leg(request, up, path, upstream_body, summary)
        try:
            sink = await open_sink()
        except BaseException:
            upstream.close()
            raise
        if sink is None:
            upstream.close()
            summary["terminal"] = "client_disconnected"
            return None
        if TRACE.on:  # debug lines or a recorded turn: read once per turn, never per chunk
            trace = open_trace(request, up, path, upstream_body, client, secrets(request, up))
            if trace is not None:
                sink = trace.sink(sink)
        machine = make_machine(sink.framing)
        start = getattr(machine, "start", None)  # the forward machines open the Response themselves
        initial = start() if start is not None else None
        stats = await run_leg(
            request,
            up,
            upstream,
            Pump(machine) if trace is None else trace.pump(machine, upstream),
            sink,
            summary,
            initial=initial,
            close=then is None,
            before_end=before_end,
        )
        if then is not None:
            stats = await _later_legs(request, up, path, machine, sink, summary, stats, then, before_end)
    if machine.diagnostics:
        note_anomalies(request, machine.diagnostics)
    if trace is not None:
        trace.close(stats.ending)
    return machine, stats


async def _later_legs(
    request: web.Request,
    up: Upstream,
    path: str,
    machine: Any,
    sink: Sink,
    summary: Summary,
    stats: RelayStats,
    then: NextLeg,
    before_end: BeforeEnd | None,
) -> RelayStats:
    """Run the legs after the first one into the open sink, then close it. An upstream that
    fails to answer a later leg, or a failure of crossfeed's own between two legs (a bug in a
    tool runner), ends the Response with ``response.failed``: the stream began, so it still ends
    with exactly one terminal event."""
    try:
        while stats.ending == "ok" and not machine.done:
            try:
                nxt = await then(machine, sink)
            except (ConnectionResetError, asyncio.CancelledError):
                raise
            except Exception as exc:
                log.error("stream.internal_error", detail=repr(exc), where="between legs")
                summary["ending"] = "internal_error"
                end = (
                    [] if machine.done else machine.fail("internal_error", "crossfeed failed between two backend calls")
                )
                await _end(sink, machine, end, before_end)
                return stats
            if nxt is None:
                break
            body, machine = nxt
            try:
                upstream = await open_leg(request, up, path, body, summary)
            except ProxyError as exc:
                if isinstance(exc, UpstreamError):
                    note_upstream_error(request.app, summary, exc.code)
                summary["ending"] = exc.code
                await _end(sink, machine, machine.fail(str(exc.code), exc.message), before_end)
                return stats
            pump = Pump(machine) if sink.__class__ is not TapSink else sink.trace.pump(machine, upstream)
            stats = await run_leg(request, up, upstream, pump, sink, summary, close=False, before_end=before_end)
        if stats.ending != "client_disconnected":
            await _end(sink, machine, [], before_end)
    except ConnectionResetError:
        stats.ending = "client_disconnected"
    return stats


async def _end(sink: Sink, machine: Any, events: list[Any], before_end: BeforeEnd | None) -> None:
    if before_end is not None and machine.done:
        await before_end(machine)
    await sink.end(events)


async def forward_turn(
    request: web.Request,
    body: dict[str, Any],
    up: Upstream,
    open_sink: SinkOpener,
    *,
    history: list[dict[str, Any]] | None,
    summary: Summary,
    mapped: MappedRequest | None = None,
) -> dict[str, Any] | None:
    """A streamed Responses turn on a chat upstream. Returns the final Response (None when the
    client left before the stream began); it is handed to the store here."""
    app = request.app
    plan = mapped or map_forward(request, body, up, history)
    sealer = reasoning_sealer(request, body)

    def machine(framing: Framing) -> ChatToResponsesStream:
        return ChatToResponsesStream(
            body,
            ids=app[IDS],
            now=app[CLOCK],
            tools=plan.tools,
            seal_reasoning=sealer,
            profile=up.profile,
            wire=framing,
        )

    ran = await stream_turn(
        request,
        up,
        "/chat/completions",
        plan.chat,
        machine,
        open_sink,
        summary,
        # a Response the client asked not to store has nothing to hand to the store
        before_end=None if body.get("store") is False else final_saver(app, body, history),
        client=body,
    )
    if ran is None:
        return None
    final = ran[0].final_response
    summary.update(terminal=final.get("status") if final else ran[1].ending, usage=usage_summary(final))
    return final


async def relay_turn(
    request: web.Request, body: dict[str, Any], up: Upstream, open_sink: SinkOpener, *, summary: Summary
) -> dict[str, Any] | None:
    """A streamed Responses turn on a Responses upstream: its events checked and relayed."""
    app = request.app
    rbody = {**body, "stream": True}
    if isinstance(body.get("model"), str):
        rbody["model"] = up.model_map.get(body["model"], body["model"])

    def machine(framing: Framing) -> ResponsesEventRelay | NormalizeResponses:
        if up.profile.normalize_stream:
            limit = body.get("max_output_tokens")
            return NormalizeResponses(
                ids=app[IDS],
                now=app[CLOCK],
                model=str(body.get("model") or ""),
                max_output_tokens=limit if isinstance(limit, int) else None,
            )
        return ResponsesEventRelay(model=str(body.get("model") or ""), ids=app[IDS], now=app[CLOCK], request=body)

    ran = await stream_turn(request, up, "/responses", rbody, machine, open_sink, summary, client=body)
    if ran is None:
        return None
    final = ran[0].final_response
    summary.update(terminal=final.get("status") if final else ran[1].ending, usage=usage_summary(final))
    return final


async def reverse_turn(
    request: web.Request,
    body: dict[str, Any],
    rbody: dict[str, Any],
    up: Upstream,
    open_sink: SinkOpener,
    *,
    summary: Summary,
) -> None:
    """A streamed chat turn on a Responses upstream."""
    app = request.app

    def machine(framing: Framing) -> ResponsesToChatStream:
        limit = rbody.get("max_output_tokens")
        return ResponsesToChatStream(
            include_usage=include_usage(body),
            options=up.profile,
            ids=app[IDS],
            now=app[CLOCK],
            model=str(body.get("model")),
            wire=framing,
            max_output_tokens=limit if isinstance(limit, int) else None,
        )

    ran = await stream_turn(request, up, "/responses", rbody, machine, open_sink, summary, client=body)
    if ran is not None:
        m, stats = ran
        summary.update(terminal=m.finish_reason or ("error" if m.error else stats.ending), usage=usage_counts(m.usage))
