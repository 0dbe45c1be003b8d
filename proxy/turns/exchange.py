"""Exchanges: one client turn, from the parsed request body to the Response handed to the store.

A transport (HTTP in ``app.py``, a WebSocket in ``websocket.py``) builds the ``Turn``
(proxy/turns/turn.py) and decides where the frames go by giving the exchange a *sink opener*:
called once the upstream has answered 2xx, so an upstream error before the stream is still the
transport's own error answer (an HTTP status, a WebSocket error frame), it returns the sink, or
None when the client is already gone.

Each upstream call is a *leg* (``open_leg`` + ``run_leg``): the pure machine driven by the relay
into the sink. The machine's numbering (``sequence_number``, ``output_index``) and its one
terminal event are the exchange's Response; ``run_leg`` records what the leg did on the turn's
log record (its summary line) and in the metrics, whatever the transport.

  forward_turn    Responses client, chat upstream: ChatToResponsesStream; saved to the store
  relay_turn      Responses client, Responses upstream, events relayed, or normalised when the
                  upstream's profile says so (WebSocket; SSE with normalize_stream)
  reverse_turn    chat client, Responses upstream: ResponsesToChatStream (SSE only)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar, cast

import aiohttp
import structlog

from crossfeed.proxy.errors import (
    ClientRequestError,
    ProxyError,
    UpstreamBroken,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from crossfeed.proxy.keys import CONFIG, MAX_NONSTREAM_BODY, POOLS
from crossfeed.proxy.runtime import tracing
from crossfeed.proxy.runtime.config import Upstream
from crossfeed.proxy.runtime.guard import LIMITS
from crossfeed.proxy.runtime.logs import TRACE
from crossfeed.proxy.runtime.observability import METRICS, note_upstream_error, usage_counts, usage_summary
from crossfeed.proxy.runtime.pool import Replica, hold, release
from crossfeed.proxy.runtime.turn_trace import TapSink, open_trace
from crossfeed.proxy.state import affinity
from crossfeed.proxy.state.conversations import CURRENT as CONVERSATION
from crossfeed.proxy.state.history import final_saver
from crossfeed.proxy.streaming.lifecycle import OPEN_STREAMS
from crossfeed.proxy.streaming.relay import RelayStats, relay
from crossfeed.proxy.streaming.sinks import Sink
from crossfeed.proxy.turns.common import note_anomalies, outbound_headers, secrets
from crossfeed.proxy.turns.continuation import Continuing, continuing, noted
from crossfeed.proxy.turns.turn import Create, Turn
from crossfeed.proxy.upstream import open_upstream, read_json
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.forward.request import MappedRequest, responses_request_to_chat
from crossfeed.translators.options import ToolContext
from crossfeed.translators.pump import Machine, Out, Pump
from crossfeed.translators.responses.normalize import NormalizeResponses
from crossfeed.translators.responses.relay import ResponsesEventRelay
from crossfeed.translators.reverse.machine import ResponsesToChatStream
from crossfeed.translators.reverse.request import include_usage
from crossfeed.translators.sse import Framing

log = structlog.get_logger("crossfeed")

SinkOpener = Callable[[], Awaitable[Sink | None]]


class LegMachine(Machine, Protocol):
    """The machine a leg drives: what the pump feeds (``feed``/``finish``/``fail``/``done``), and
    the upstream quirks it repaired, counted by kind (logged and counted once the turn ends). A
    forward machine also has ``start``: its start events go out with the first upstream data."""

    diagnostics: dict[str, int]


class ResponseMachine(LegMachine, Protocol):
    """A leg machine that assembles a Response: its final state once the terminal event is out."""

    @property
    def final_response(self) -> dict[str, Any] | None: ...


M = TypeVar("M", bound=LegMachine)

# Awaited with the machine before a write that may carry its terminal event (the Response is
# saved there); it may be awaited more than once and acts once (state/history.py final_saver).
BeforeEnd = Callable[[Machine], Awaitable[None]]
# After a leg (its machine, the open sink): the next leg's upstream body and the machine its
# stream feeds, or None (the end). It may write events of its own to the sink first.
NextLeg = Callable[[LegMachine, Sink], Awaitable["tuple[dict[str, Any], LegMachine] | None"]]


def stream_flag(body: dict[str, Any]) -> bool:
    """``stream``: a boolean, or null/absent for false (both APIs take null)."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise ClientRequestError("`stream` must be a boolean", param="stream", code="invalid_type")
    return bool(stream)


def map_forward(turn: Turn, body: dict[str, Any], history: list[dict[str, Any]] | None) -> MappedRequest:
    """The chat request for a Responses request (the upstream's model name in it), and all the
    plans need of the request: they read the mapping, not the body (request.MappedRequest)."""
    seal = turn.seal
    owner = turn.owner
    mapped = responses_request_to_chat(
        body,
        turn.upstream.profile,
        history=history,
        reveal_reasoning=seal.open,
        open_summary=lambda token: seal.open_summary(token, owner),
        web_search=turn.config.web_search.backend is not None,
    )
    mapped.chat["model"] = turn.upstream.model_map.get(mapped.model, mapped.model)
    if mapped.ignored:
        log.info("request.ignored_fields", model=mapped.model, ignored=list(mapped.ignored))
    return mapped


def reasoning_sealer(turn: Turn, mapped: MappedRequest) -> Callable[[str, list[dict[str, Any]] | None], str] | None:
    """The seal of the reasoning items' ``encrypted_content``, when the request's include asks for it."""
    return turn.seal.seal if "reasoning.encrypted_content" in mapped.include else None


def forward_machine(
    turn: Turn,
    body: dict[str, Any],
    mapped: MappedRequest,
    framing: Framing | bool = False,
    tools: ToolContext | None = None,
) -> ChatToResponsesStream:
    """The forward machine of a create: ``body`` is what its Response echoes, ``mapped`` its
    request mapping; ``framing``: the sink's, for a streamed turn (False: a whole completion is
    fed); ``tools``: the mapping's with the hosted functions, for the tool loop."""
    return ChatToResponsesStream(
        answered_body(turn, body),
        ids=turn.ids,
        now=turn.clock,
        tools=mapped.tools if tools is None else tools,
        seal_reasoning=reasoning_sealer(turn, mapped),
        profile=turn.upstream.profile,
        wire=framing,
        events=turn.config.server.event_names(turn.owner),
    )


async def open_leg(turn: Turn, path: str, body: dict[str, Any]) -> aiohttp.ClientResponse:
    """POST one upstream call; returns once its 2xx headers are in (errors raise). A traced turn
    opens the call's span here (its ``traceparent`` goes in the headers); ``run_leg`` (a stream)
    or ``read_leg`` (a whole answer) ends it. A pooled upstream's replica is chosen here, once
    per call (``pooled_leg``)."""
    started = time.monotonic()
    backend = turn.upstream
    if backend.pooled:
        response = await pooled_leg(turn, path, body)
    else:
        response = await _call(turn, backend, path, body)
    turn.log["ttfb"] = time.monotonic() - started
    return response


async def _call(turn: Turn, backend: Upstream, path: str, body: dict[str, Any]) -> aiohttp.ClientResponse:
    headers, hidden = outbound_headers(turn, backend), secrets(turn, backend)
    tracing.leg_start(backend, path, body, headers, hidden)
    try:
        return await open_upstream(turn.session, backend, path, body, headers, secrets=hidden)
    except BaseException as exc:
        tracing.leg_end(error=exc)
        raise


async def pooled_leg(
    turn: Turn, path: str, body: dict[str, Any], avoid: Replica | None = None
) -> aiohttp.ClientResponse:
    """One call on a pool (proxy/runtime/pool.py): to the turn's replica (its affinity), failing
    over before the first byte; the replica that answered goes on the turn's log (and the HTTP
    answer's ``x-crossfeed-replica``), and its key keeps it (proxy/state/affinity.py).
    ``avoid``: a continuation's dead replica, not asked (nor the fallback: another model)."""
    app, primary = turn.app, turn.upstream
    pool = app[POOLS][primary.name]
    aff = affinity.CURRENT.get()
    prefer = None
    if aff is not None and aff.upstream == primary.name:  # (no await when there is nothing to look up)
        prefer = await affinity.preferred(app, aff) if affinity.unresolved(aff) else aff.pinned or aff.replica

    # The first attempt awaited here (most calls have no other): pool.call's loop only after it failed.
    first = pool.first(prefer, avoid)
    after: tuple[Replica, BaseException] | None = None
    if first is not None:
        replica, lease = first
        try:
            response = await _call(turn, replica.upstream, path, body)
        except BaseException as exc:
            pool.attempt_failed(replica, lease, exc)
            after = (replica, exc)
        else:
            answered = pool.answered(replica, lease, prefer)
    if first is None or after is not None:  # (the closure made only here: most calls never fail over)

        async def attempt(up: Upstream) -> aiohttp.ClientResponse:
            if up.name == primary.name:
                return await _call(turn, up, path, body)
            model = fallback_model(up, str(turn.log.get("model") or body.get("model") or ""))
            turn.log["answered_model"] = model
            return await _call(turn, up, path, {**body, "model": up.model_map.get(model, model)})

        response, answered = await pool.call(attempt, prefer, avoid=avoid, fallback=avoid is None, after=after)
    replica = answered.replica
    turn.log["replica"] = replica.label
    hold(response, answered.lease)
    if aff is not None and replica.upstream.name == primary.name:
        if answered.moved:
            pool.moved()
        if affinity.changed(aff, replica.label):
            await affinity.served(app, aff, replica.label)
        aff.replica = replica.label
    return response


def leg_upstream(turn: Turn) -> Upstream:
    """The upstream the turn's last call went to: the pool's replica that answered it (or the
    fallback's), else the turn's upstream."""
    up = turn.upstream
    label = turn.log.get("replica") if up.pooled else None
    if label:
        pool = turn.app[POOLS][up.name]
        found = pool.replica(label) or (pool.fallback.replica(label) if pool.fallback is not None else None)
        if found is not None:
            return found.upstream
    return up


def fallback_model(up: Upstream, model: str) -> str:
    """The model a fallback upstream is asked for: the client's, when it serves it; else the
    first model it names."""
    if model in up.models or model in up.model_map or up.matches_pattern(model):
        return model
    named = [m for m in up.models if not any(c in m for c in "*?[")]
    return named[0] if named else model


def answered_body(turn: Turn, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the Response echoes it: with the model that answered, when a fallback upstream did."""
    model = turn.log.get("answered_model")
    return body if model is None else {**body, "model": model}


async def read_leg(turn: Turn, response: aiohttp.ClientResponse) -> Any:
    """The whole JSON answer of a call ``open_leg`` opened without ``stream``."""
    try:
        result = await read_json(response, turn.upstream, MAX_NONSTREAM_BODY)
    except BaseException as exc:
        tracing.leg_end(error=exc)
        raise
    finally:
        if turn.upstream.pooled:
            release(response)
    tracing.leg_end(result=result)
    return result


async def whole_leg(turn: Turn, path: str, body: dict[str, Any]) -> Any:
    """One call whose answer is read whole (``open_leg`` then ``read_leg``). On a pool with
    ``continue_on_failure`` a replica that dies after its 2xx headers, before its body is whole
    (the connection fails, the body is not JSON, the idle timeout), is asked no more: the same
    request goes to another healthy replica (``pooled_leg(avoid=...)``), counted against the
    turn's ``max_continuations`` (outcome ``retried``; continuation.noted). The client saw
    nothing, so that replica's whole answer is the answer. A body of valid JSON, an error
    status, the total timeout, an answer over the size limit: never asked again."""
    response = await open_leg(turn, path, body)
    up = turn.upstream
    while True:
        try:
            return await read_leg(turn, response)
        except (UpstreamBroken, UpstreamTimeout) as exc:
            if not up.pooled or not up.continue_on_failure or getattr(exc, "which", "idle") != "idle":
                raise
            pool = turn.app[POOLS][up.name]
            dead = pool.replica(turn.log.get("replica"))  # None: the fallback's replica (not asked again)
            if dead is None or turn.log.get("retried", 0) + turn.log.get("continued", 0) >= up.max_continuations:
                raise
            pool.failed(dead, exc)
            try:
                response = await pooled_leg(turn, path, body, avoid=dead)
            except ProxyError as again:
                log.info("pool.continuation_unavailable", upstream=up.name, error=again.message)
                noted(turn, "failed", str(exc.code), dead.label)
                raise exc from None
            noted(turn, "retried", str(exc.code), dead.label)


async def run_leg(
    turn: Turn,
    response: aiohttp.ClientResponse,
    pump: Pump,
    sink: Sink,
    initial: list[Out] | None = None,
    *,
    close: bool = True,
    before_end: BeforeEnd | None = None,
) -> RelayStats:
    """Run the relay for one leg, registered as open for shutdown (the caller holds its place in
    the stream limits, which the active-streams metric reads); what it did goes on the turn's log.

    The relay runs as its own task. A coroutine that waits for upstream data is resumed through
    every coroutine awaiting it; in the handler's task that is the middlewares, the endpoint
    and the handler, once per upstream read. In its own task the chain is the relay alone, which
    costs less CPU per chunk (measured in docs/DESIGN.md). A stream whose end is already in
    (a short answer that came with its headers) never waits for the upstream, so it runs in the
    caller's task: no task to start and no two turns of the event loop to wait for it. Cancelling
    the caller (the client hung up) cancels the task it awaits, and the relay closes the upstream
    on its way out; if it is cancelled before it ever ran, that is done here."""
    app, backend, turn_log = turn.app, turn.upstream, turn.log
    pooled = backend.pooled
    if pooled:  # its timeouts and metrics: the replica's (a fallback upstream's own)
        backend = leg_upstream(turn)
    running = relay(
        response,
        pump,
        sink,
        idle=backend.timeouts.idle,
        keepalive=app[CONFIG].server.keepalive_seconds,
        total=backend.timeouts.total,
        initial=initial,
        registry=app[OPEN_STREAMS],
        close=close,
        before_end=before_end,
    )
    try:
        stats = await (running if response.content.is_eof() else asyncio.get_running_loop().create_task(running))
    except asyncio.CancelledError:
        response.close()
        if pooled:
            release(response)
        if sink.__class__ is TapSink:  # a traced turn ends here: its trace is written all the same
            sink.trace.close("cancelled")
        raise
    tracing.leg_end(pump=pump, stats=stats)
    turn_log.update({"ending": stats.ending, "events_in": stats.events_in, "events_out": stats.events_out})
    if stats.error:
        turn_log["error"] = stats.error
        if stats.ending.startswith("upstream"):
            app[METRICS].upstream_errors.labels(backend.name, stats.ending).inc()
    if "internal_error" in stats.extra:
        log.error("stream.internal_error", detail=stats.extra["internal_error"])
    if pooled:
        release(response)
    return stats


async def stream_turn(
    turn: Turn,
    path: str,
    upstream_body: dict[str, Any],
    make_machine: Callable[[Framing], M],
    open_sink: SinkOpener,
    *,
    then: NextLeg | None = None,
    before_end: BeforeEnd | None = None,
    client: dict[str, Any] | None = None,
) -> tuple[M, RelayStats] | None:
    """The streamed exchange every direction and transport shares: admission to the upstream's
    stream limit, one leg (upstream call, sink, machine, relay), and the turn's log fields.
    ``make_machine`` gets the sink's framing; a machine with ``start`` (the forward one) has its
    start events go out with the first upstream data. ``then``: more legs of the same Response
    on the same sink (a compaction, then the answer). ``before_end``: awaited with the machine
    before the terminal event goes out. ``client``: the client's request, for a recorded turn
    (proxy/runtime/turn_trace.py). None: the client left before the stream."""
    backend = turn.upstream
    trace = None
    with turn.app[LIMITS].admit(backend):
        response = await open_leg(turn, path, upstream_body)
        try:
            sink = await open_sink()
        except BaseException:
            response.close()
            raise
        if sink is None:
            response.close()
            turn.log["terminal"] = "client_disconnected"
            return None
        if TRACE.on:  # debug lines or a recorded turn: read once per turn, never per chunk
            answered = leg_upstream(turn)  # (a pool's replica: the URL the trace shows)
            trace = open_trace(turn.app, turn.headers, answered, path, upstream_body, client, secrets(turn, answered))
            if trace is not None:
                sink = trace.sink(sink)
        machine = make_machine(sink.framing)
        start = getattr(machine, "start", None)  # the forward machines open the Response themselves
        initial = start() if start is not None else None
        cont = continuing(turn, machine) if then is None else None  # a pool's, when it continues answers
        driven: LegMachine = machine if cont is None else cont
        stats = await run_leg(
            turn,
            response,
            Pump(driven) if trace is None else trace.pump(driven, response, turn.log.get("ttfb", 0.0)),
            sink,
            initial=initial,
            close=then is None and cont is None,
            before_end=before_end if cont is None else cont.guard(before_end),
        )
        if cont is not None:
            stats = await continue_legs(turn, path, upstream_body, cont, sink, stats, before_end)
        if then is not None:
            stats = await _later_legs(turn, path, machine, sink, stats, then, before_end)
    if machine.diagnostics:
        note_anomalies(turn.app, machine.diagnostics)
    if trace is not None:
        trace.close(stats.ending)
    return machine, stats


async def _later_legs(
    turn: Turn,
    path: str,
    machine: LegMachine,
    sink: Sink,
    stats: RelayStats,
    then: NextLeg,
    before_end: BeforeEnd | None,
) -> RelayStats:
    """Run the legs after the first one into the open sink, then close it. An upstream that
    fails to answer a later leg, or a failure of crossfeed's own between two legs (a bug in a
    tool runner), ends the Response with ``response.failed``: the stream began, so it still ends
    with exactly one terminal event."""
    turn_log = turn.log
    try:
        while stats.ending == "ok" and not machine.done:
            try:
                nxt = await then(machine, sink)
            except (ConnectionResetError, asyncio.CancelledError):
                raise
            except Exception as exc:
                log.error("stream.internal_error", detail=repr(exc), where="between legs")
                turn_log["ending"] = "internal_error"
                end = (
                    [] if machine.done else machine.fail("internal_error", "crossfeed failed between two backend calls")
                )
                await _end(sink, machine, end, before_end)
                return stats
            if nxt is None:
                break
            body, machine = nxt
            try:
                response = await open_leg(turn, path, body)
            except ProxyError as exc:
                if isinstance(exc, UpstreamError):
                    note_upstream_error(turn.app, turn_log, exc.code)
                turn_log["ending"] = exc.code
                await _end(sink, machine, machine.fail(str(exc.code), exc.message), before_end)
                return stats
            pump = (
                Pump(machine)
                if sink.__class__ is not TapSink
                else sink.trace.pump(machine, response, turn.log.get("ttfb", 0.0))
            )
            stats = await run_leg(turn, response, pump, sink, close=False, before_end=before_end)
        if stats.ending != "client_disconnected":
            await _end(sink, machine, [], before_end)
    except ConnectionResetError:
        stats.ending = "client_disconnected"
    return stats


async def continue_legs(
    turn: Turn,
    path: str,
    body: dict[str, Any],
    cont: Continuing,
    sink: Sink,
    stats: RelayStats,
    before_end: BeforeEnd | None,
) -> RelayStats:
    """After a leg whose stream broke in the middle of text or reasoning (``cont.broken``;
    continuation.py): the same request with the partial output as prefill, on another healthy
    replica of the pool, its stream into the same machine; then the sink is closed. No replica
    to take it: the failure the machine would have ended with."""
    pool = turn.app[POOLS][turn.upstream.name]
    try:
        while cont.broken is not None and stats.ending != "client_disconnected":
            code, message = cont.broken
            dead = pool.replica(turn.log.get("replica"))  # None: the fallback's replica (not continued)
            response = None
            if dead is not None:
                pool.failed(dead, UpstreamUnavailable(message))
                try:
                    response = await pooled_leg(turn, path, cont.request(body, turn.upstream), avoid=dead)
                except ProxyError as exc:
                    log.info("pool.continuation_unavailable", upstream=pool.upstream.name, error=exc.message)
            noted(turn, "failed" if response is None else "continued", code, dead.label if dead else None)
            if response is None:
                stats.ending, stats.error = code, message  # (a close without a finish: the relay said ok)
                turn.log.update({"ending": code, "error": message})
                await _end(sink, cont.machine, cont.give_up(), before_end)
                return stats
            cont.resume()
            turn.log.pop("error", None)
            pump = Pump(cont) if sink.__class__ is not TapSink else sink.trace.pump(cont, response)
            stats = await run_leg(turn, response, pump, sink, close=False, before_end=cont.guard(before_end))
        if stats.ending != "client_disconnected":
            await _end(sink, cont.machine, [], before_end)
    except ConnectionResetError:
        stats.ending = "client_disconnected"
    return stats


async def _end(sink: Sink, machine: Machine, events: list[Any], before_end: BeforeEnd | None) -> None:
    if before_end is not None and machine.done:
        await before_end(machine)
    await sink.end(events)


def ended(turn: Turn, ran: tuple[ResponseMachine, RelayStats] | None) -> dict[str, Any] | None:
    """A streamed Response's end on the turn's log (its terminal status, its usage): the final
    Response, or None when the client left before the stream."""
    if ran is None:
        return None
    final = ran[0].final_response
    turn.log.update({"terminal": final.get("status") if final else ran[1].ending, "usage": usage_summary(final)})
    return final


async def forward_turn(turn: Turn, create: Create, open_sink: SinkOpener) -> dict[str, Any] | None:
    """A streamed Responses turn on a chat upstream. Returns the final Response (None when the
    client left before the stream began); it is handed to the store here."""
    body, mapped = create.body, create.mapped
    ran = await stream_turn(
        turn,
        "/chat/completions",
        mapped.chat,
        lambda framing: forward_machine(turn, body, mapped, framing),
        open_sink,
        # a Response the client asked not to store has nothing to hand to the store
        before_end=None
        if mapped.store is False and CONVERSATION.get() is None
        else final_saver(turn.app, body, create.history),
        client=body,
    )
    return ended(turn, ran)


async def relay_turn(turn: Turn, body: dict[str, Any], open_sink: SinkOpener) -> dict[str, Any] | None:
    """A streamed Responses turn on a Responses upstream: its events checked and relayed."""
    backend = turn.upstream
    rbody = {**body, "stream": True}
    if isinstance(body.get("model"), str):
        rbody["model"] = backend.model_map.get(body["model"], body["model"])

    def machine(framing: Framing) -> ResponseMachine:
        made: ResponsesEventRelay | NormalizeResponses
        if backend.profile.normalize_stream:
            limit = body.get("max_output_tokens")
            made = NormalizeResponses(
                ids=turn.ids,
                now=turn.clock,
                model=str(body.get("model") or ""),
                max_output_tokens=limit if isinstance(limit, int) else None,
            )
        else:
            made = ResponsesEventRelay(model=str(body.get("model") or ""), ids=turn.ids, now=turn.clock, request=body)
        # Their outputs are typed list[dict] (events only), the pump's list[Out]: a list is
        # invariant, so the machine is named for what it does here.
        return cast(ResponseMachine, made)

    return ended(turn, await stream_turn(turn, "/responses", rbody, machine, open_sink, client=body))


async def reverse_turn(turn: Turn, body: dict[str, Any], rbody: dict[str, Any], open_sink: SinkOpener) -> None:
    """A streamed chat turn on a Responses upstream."""

    def machine(framing: Framing) -> ResponsesToChatStream:
        limit = rbody.get("max_output_tokens")
        return ResponsesToChatStream(
            include_usage=include_usage(body),
            options=turn.upstream.profile,
            ids=turn.ids,
            now=turn.clock,
            model=str(body.get("model")),
            wire=framing,
            max_output_tokens=limit if isinstance(limit, int) else None,
        )

    ran = await stream_turn(turn, "/responses", rbody, machine, open_sink, client=body)
    if ran is not None:
        chat_ended(turn, *ran)


def chat_ended(turn: Turn, machine: ResponsesToChatStream, stats: RelayStats) -> None:
    """A streamed chat answer's end on the turn's log: its finish reason (or how it ended), its usage."""
    turn.log.update(
        {
            "terminal": machine.finish_reason or ("error" if machine.error else stats.ending),
            "usage": usage_counts(machine.usage),
        }
    )
