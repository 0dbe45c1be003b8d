"""WebSocket mode: ``GET /v1/responses`` (and ``/responses``) upgraded to a WebSocket.

Each ``{"type": "response.create", ...}`` text frame is one turn, the same exchange as
``POST /v1/responses`` with ``stream: true`` (``proxy.turns.exchange``): forward for a chat upstream,
the upstream's own events relayed for a Responses upstream (called over HTTP/SSE). Every event
goes out as one JSON text frame (``WebSocketSink``), numbered as over SSE, with no ``[DONE]``.

  - Inbound keys are checked in the handshake (the auth middleware): a bad key gets the HTTP 401
    envelope before any upgrade. ``[server] websocket = false`` answers the upgrade with 426.
  - Each lane remembers its last response (resolved input and output), so a turn that
    sends only new items plus ``previous_response_id`` works with ``store: false``; any other id
    is looked up in the store; an unknown one is ``previous_response_not_found``. A continuation
    that fails evicts the remembered response.
  - ``generate: false`` primes the connection: a completed Response with no output, no upstream
    call; a turn continuing from it inherits its ``instructions`` and ``tools`` (when it sends
    none). ``generate`` never goes upstream; ``stream: true`` is accepted (Codex sends it in
    every frame) and dropped, ``stream: false``, ``stream_options`` and ``background`` are refused
    with an error frame naming the param. ``previous_response_not_found`` has status 400.
  - One response in flight on the default lane: a second ``response.create`` without
    ``stream_id`` meanwhile gets an error frame and changes nothing. With a ``stream_id`` a
    create runs on that lane, beside the others (``[server] websocket_max_streams`` at once);
    ``response.cancel`` and ``response.steer``: proxy/http/ws_streams.py. After ``[server] websocket_max_seconds`` (60 minutes) a response in flight
    is ended (``error`` + ``response.failed``, code ``websocket_connection_limit_reached``), then
    an error frame of that code and a clean close (1000).
  - Request errors are in-band ``{"type": "error", "status", "error": {...}}`` frames and the
    socket stays open; ``error.code`` is always a string (an upstream error without one gets its
    type, else the type of its status: ``errors.error_code``); a failure mid-response is
    ``error`` then ``response.failed``, as over SSE.
    Bad frames (not JSON, binary, unknown ``type``, larger than ``max_body_bytes``) get an
    error frame; nothing closes the connection but the client, the lifetime, shutdown and a
    frame over twice ``max_body_bytes`` (1009: aiohttp reads no further, memory stays bounded).
  - The client going away cancels the turn, which closes the upstream request at once.
    Shutdown: from its start a socket takes no new response (error frame
    ``server_shutting_down``); open turns get their terminal event within the drain period (as
    every stream does), then each socket is closed with 1001.
  - Every turn is a request of its own for the summary line and the metrics, on the route
    ``/v1/responses (websocket)``. An idle socket holds no upstream connection and no timer.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import structlog
from aiohttp import WSMsgType, web

from crossfeed.proxy.errors import ClientRequestError, ProxyError, UpstreamError, error_code, error_parts
from crossfeed.proxy.http.ws_streams import Lane, LaneSink, Remembered, StreamsMixin
from crossfeed.proxy.keys import CONFIG, IDS, TRACER
from crossfeed.proxy.runtime.guard import KEY_NAME
from crossfeed.proxy.runtime.logs import ARRIVED, REQUEST_FIELDS
from crossfeed.proxy.runtime.observability import REQUEST_ID, SUMMARY, TurnLog, note_upstream_error, record_request
from crossfeed.proxy.state import affinity, rate_limits
from crossfeed.proxy.state.history import save_before_final
from crossfeed.proxy.streaming.relay import Draining
from crossfeed.proxy.turns.common import RAW_BODY_MIN
from crossfeed.proxy.turns.exchange import relay_turn
from crossfeed.proxy.turns.forward import conversation, respond
from crossfeed.proxy.turns.steering import STEERING, Steer, Steering
from crossfeed.proxy.turns.turn import Turn, new_turn, route
from crossfeed.translators.errors import TranslationError
from crossfeed.translators.responses.create_body import decode_create_frame
from crossfeed.translators.responses.input_items import continued_history, normalize_input
from crossfeed.translators.responses.relay import primed_response_events

log = structlog.get_logger("crossfeed")

ROUTE = "/v1/responses (websocket)"
SOCKETS: web.AppKey[set[Connection]] = web.AppKey("websockets", set)
_NOT_IN_CREATE = ("stream_options", "background")
_INHERITED = ("instructions", "tools", "tool_choice")  # what a primed connection carries forward


def is_upgrade(request: web.Request) -> bool:
    return "websocket" in request.headers.get("Upgrade", "").lower()


async def responses_get(request: web.Request) -> web.StreamResponse:
    """``GET /v1/responses``: WebSocket mode, or 405 for a plain GET."""
    if not is_upgrade(request):
        raise web.HTTPMethodNotAllowed("GET", ["POST"])
    config = request.app[CONFIG]
    if not config.server.websocket:
        raise ClientRequestError(
            "WebSocket mode is turned off on this server; use POST /v1/responses", status=426, code="websocket_disabled"
        )
    # A frame up to max_body_bytes is a request; one up to twice that still gets an error frame
    # and the socket goes on; a larger one is more than aiohttp reads, and closes it with 1009.
    # (aiohttp refuses a message of max_msg_size bytes itself, hence the + 1.)
    ws = web.WebSocketResponse(max_msg_size=2 * config.server.max_body_bytes + 1, autoping=True, compress=False)
    # On a pool the 101 names the socket's session as an x-codex-turn-state (proxy/state/affinity.py).
    token = affinity.socket_token(request.headers, any(u.pooled or u.forwards_affinity for u in config.upstreams))
    if token is not None:
        ws.headers[affinity.TURN_STATE_HEADER] = token
    await ws.prepare(request)
    conn = Connection(request, ws)
    request.app[SOCKETS].add(conn)
    request[SUMMARY]["transport"] = "websocket"
    try:
        await conn.serve()
    finally:
        request.app[SOCKETS].discard(conn)
        request[SUMMARY]["turns"] = conn.turns
    # How the socket ended (a client that drops the connection without a close frame cancels this
    # handler instead: observability logs that as ``client_disconnected``, still 101).
    code = ws.close_code
    request[SUMMARY]["ending"] = "closed" if code not in (None, 1006) else "client_disconnected"
    if code is not None:
        request[SUMMARY]["close_code"] = code
    return ws


async def refuse_new_turns(app: web.Application) -> None:
    """on_shutdown, before the drain: a socket takes no new response (an error frame says why)."""
    for conn in app[SOCKETS]:
        conn.closing = True


async def close_sockets(app: web.Application) -> None:
    """on_shutdown, after the drain: every socket closed with 1001 (going away)."""
    conns: set[Connection] = app[SOCKETS]
    await asyncio.gather(*(c.shut_down() for c in list(conns)), return_exceptions=True)


def _create_flags(body: dict[str, Any]) -> bool:
    """Check (and take out) what a ``response.create`` frame says of streaming; its ``generate``."""
    # Codex sends `stream: true` in every frame: true (or null) says what is so anyway.
    if body.pop("stream", None) not in (True, None):
        raise ClientRequestError(
            "`stream` cannot be false in a WebSocket response.create: every response is streamed as frames",
            param="stream",
            code="unsupported_parameter",
        )
    for key in _NOT_IN_CREATE:
        if key in body:
            raise ClientRequestError(
                f"`{key}` is not allowed in a WebSocket response.create: every response is streamed as frames",
                param=key,
                code="unsupported_parameter",
            )
    generate = body.pop("generate", True)
    if not isinstance(generate, bool):
        raise ClientRequestError("`generate` must be a boolean", param="generate", code="invalid_type")
    body["stream"] = True  # every turn is streamed (as frames): the chat upstream is asked to stream too
    return generate


class Connection(StreamsMixin):
    """One client socket: reads frames, runs each lane's responses in a task of its own."""

    def __init__(self, request: web.Request, ws: web.WebSocketResponse) -> None:
        self.request = request
        self.app = request.app
        self.ws = ws
        self.lanes: dict[str | None, Lane] = {}
        self.busy = 0  # responses running or waiting on the socket, all lanes together
        self.turns = 0
        self.steer_seq = 0
        self.closing = False
        self._limit: asyncio.TimerHandle | None = None
        self._closer: asyncio.Task[None] | None = None  # the lifetime limit's closing

    async def serve(self) -> None:
        config = self.app[CONFIG]
        loop = asyncio.get_running_loop()
        self._limit = loop.call_later(config.server.websocket_max_seconds, self._expire)
        try:
            async for msg in self.ws:
                if msg.type == WSMsgType.TEXT:
                    await self._frame(msg.data)
                elif msg.type == WSMsgType.BINARY:
                    await self._error(
                        400, "binary frames are not accepted; send JSON text frames", code="invalid_frame"
                    )
                elif msg.type == WSMsgType.ERROR:
                    break
        finally:
            self._limit.cancel()
            tasks = [lane.task for lane in self.lanes.values() if lane.running()]
            for task in tasks:
                task.cancel()  # the client went away: the upstream requests are closed
            await asyncio.gather(*tasks, return_exceptions=True)

    async def shut_down(self) -> None:
        """After the drain (which ended every open stream properly): close with 1001."""
        self.closing = True
        await self._settle(Draining())
        await self.ws.close(code=1001, message=b"server shutting down")

    def _expire(self) -> None:
        async def close() -> None:
            self.closing = True
            await self._settle(
                Draining(
                    "websocket_connection_limit_reached",
                    "the WebSocket connection reached its time limit; the response was ended",
                )
            )
            await self._error(
                400,
                "the WebSocket connection reached its time limit; open a new one",
                code="websocket_connection_limit_reached",
            )
            await self.ws.close(code=1000, message=b"connection limit reached")

        self._closer = asyncio.get_running_loop().create_task(close())

    async def _settle(self, reason: Draining) -> None:
        """End every lane's response in flight: a streaming one gets its terminal event
        (``reason``); one still waiting for the upstream's headers has sent nothing and is
        cancelled. Creates still waiting on a lane are dropped (the socket is closing)."""
        for lane in self.lanes.values():
            lane.queue.clear()
        await asyncio.gather(*(self._settle_lane(lane, reason) for lane in self.lanes.values() if lane.running()))

    async def _settle_lane(self, lane: Lane, reason: Draining) -> None:
        turn = lane.task
        stream = lane.sink.open_stream if lane.sink is not None else None
        if stream is not None:
            stream.end(reason)
            done, _ = await asyncio.wait([turn], timeout=5)
            if done:
                return
        turn.cancel()
        await asyncio.gather(turn, return_exceptions=True)

    async def _frame(self, data: str) -> None:
        if len(data) > self.app[CONFIG].server.max_body_bytes:
            await self._error(
                413, "the frame is larger than the configured maximum request size", code="request_too_large"
            )
            return
        # A long create frame (a new socket's first turn may resend a whole history) is read as
        # a long POST body is: its long tool outputs stay JSON (translators/responses/create_body.py).
        event = decode_create_frame(data) if len(data) >= RAW_BODY_MIN else None
        if event is None or event.get("type") != "response.create":
            try:
                event = orjson.loads(data)
            except orjson.JSONDecodeError:
                await self._error(400, "the frame is not valid JSON", code="invalid_json")
                return
        if not isinstance(event, dict):
            await self._error(400, "a frame must be a JSON object", code="invalid_type")
            return
        kind = event.get("type")
        if kind == "response.steer":
            await self._steer(event)
        elif kind == "response.cancel":
            await self._cancel(event)
        elif kind != "response.create":
            await self._error(
                400,
                f"unsupported event type {kind!r}: send 'response.create', 'response.steer' or 'response.cancel'"
                if isinstance(kind, str)
                else "the frame has no string `type`",
                code="invalid_value" if isinstance(kind, str) else "missing_required_parameter",
                param="type",
            )
        else:
            await self._create_frame(event)

    async def _create_frame(self, event: dict[str, Any]) -> None:
        stream_id = event.get("stream_id")
        if self.closing:
            await self._error(
                503,
                "crossfeed is shutting down; open a new connection",
                code="server_shutting_down",
                error_type="server_error",
                stream_id=stream_id if isinstance(stream_id, str) else None,
            )
            return
        if stream_id is not None and (not isinstance(stream_id, str) or not stream_id):
            await self._error(400, "`stream_id` must be a non-empty string", code="invalid_type", param="stream_id")
            return
        lane = self.lanes.get(stream_id)
        if stream_id is None and lane is not None and lane.running():
            await self._error(
                409,
                "a response is already in progress on this connection; wait for its terminal event "
                "(or give each response a `stream_id` to run several at once)",
                code="response_already_in_progress",
            )
            return
        limit = self.app[CONFIG].server.websocket_max_streams
        if self.busy >= limit:
            await self._error(
                429,
                f"this connection already runs or queues {self.busy} responses, the most "
                f"`[server] websocket_max_streams` ({limit}) allows; wait for a terminal event",
                code="websocket_stream_limit_reached",
                param="stream_id",
                stream_id=stream_id,
            )
            return
        if lane is None:
            lane = self.lanes[stream_id] = Lane(stream_id)
        self.turns += 1
        self._enqueue(lane, {k: v for k, v in event.items() if k not in ("type", "stream_id")}, [])

    def _enqueue(self, lane: Lane, body: dict[str, Any], steers: list[Steer]) -> None:
        self.busy += 1
        lane.queue.append((body, self.turns, steers))
        if not lane.running():
            lane.task = asyncio.get_running_loop().create_task(self._run_lane(lane))

    async def _run_lane(self, lane: Lane) -> None:
        while lane.queue:
            body, n, carried = lane.queue.popleft()
            try:
                await self._turn(lane, await self._with_pending(lane, body), n, carried)
            finally:
                self.busy -= 1

    async def _turn(self, lane: Lane, body: dict[str, Any], n: int, carried: list[Steer]) -> None:
        turn_log: TurnLog = {"transport": "websocket"}
        if KEY_NAME.get() is not None:
            turn_log["key"] = KEY_NAME.get()
        if lane.stream_id is not None:
            turn_log["stream_id"] = lane.stream_id
        token = REQUEST_FIELDS.set(
            {"request_id": f"{self.request.get(REQUEST_ID, 'ws')}.{n}", "route": ROUTE, "method": "WS"}
        )
        start = time.monotonic()
        ARRIVED.set(start)
        status = 200
        prev = body.get("previous_response_id")
        sink = lane.sink = LaneSink(self.ws, self.request, lane.stream_id)
        steering = lane.steering = Steering()
        STEERING.set(steering)
        final: dict[str, Any] | None = None
        settings = {k: v for k, v in body.items() if k not in ("input", "previous_response_id")}
        key = KEY_NAME.get()
        try:
            if key is not None:  # a turn is a request of its key's rates (proxy/state/rate_limits.py)
                await rate_limits.admit(self.app, key)
            with self.app[TRACER].turn(self.request.headers, ROUTE, turn_log, body):
                final = await self._create(lane, sink, body, turn_log)
        except (ProxyError, TranslationError) as exc:
            status, envelope, _ = error_parts(exc)
            if isinstance(exc, UpstreamError):
                note_upstream_error(self.app, turn_log, exc.code)
            self._forget(prev)
            if getattr(exc, "code", None) == "previous_response_not_found":
                status = 400  # what Codex takes as "start over with the full input" (docs/codex.md)
            await self._send_error(status, envelope["error"], lane.stream_id)
        except asyncio.CancelledError:
            turn_log.setdefault("terminal", "client_disconnected")
            raise
        except Exception:
            status = 500
            log.exception("request.failed", path=ROUTE)
            self._forget(prev)
            await self._error(
                500,
                "crossfeed failed to handle the request",
                code="internal_error",
                error_type="server_error",
                stream_id=lane.stream_id,
            )
        finally:
            lane.steering = None
            record_request(self.app, ROUTE, turn_log, status, time.monotonic() - start)
            if key is not None and status != 429:
                await rate_limits.spend(self.app, key, rate_limits.turn_tokens(turn_log, body))
            REQUEST_FIELDS.reset(token)
        committed = sink.response_id is not None  # a successor's response.created commits what it carried
        await self._steers_after(lane, final, settings, steering.queued, [] if committed else carried)

    async def _create(
        self, lane: Lane, sink: LaneSink, body: dict[str, Any], turn_log: TurnLog
    ) -> dict[str, Any] | None:
        generate = _create_flags(body)
        turn = new_turn(self.app, self.request.headers, route(self.app[CONFIG], body, turn_log), turn_log, body)
        turn_log["stream"] = True
        prev = body.get("previous_response_id")
        remembered = self._remembered(lane, prev)
        if remembered is not None and remembered.settings:
            for key in _INHERITED:
                if body.get(key) is None and key in remembered.settings:
                    body[key] = remembered.settings[key]
        earlier = None
        if remembered is not None:
            earlier = continued_history(remembered.items, remembered.response)
            affinity.continues(remembered.id, remembered.routed)

        async def open_sink() -> LaneSink | None:
            return None if self.ws.closed else sink

        if not generate:
            return await self._prime(lane, sink, turn, body, earlier)
        if turn.upstream.api == "chat":
            final, history = await respond(turn, body, open_sink, earlier=earlier)
        else:
            # The upstream never saw a remembered response: the whole conversation goes to it.
            # A turn that continued from the upstream's own store is not remembered (its history
            # is the upstream's), so a later turn continues from the upstream too.
            if earlier is not None:
                body = {k: v for k, v in body.items() if k != "previous_response_id"}
                body["input"] = earlier + normalize_input(body.get("input"), turn.ids)
            final = await relay_turn(turn, body, open_sink)
            if prev is not None and earlier is None:
                lane.last = None
                return final
            history = None
        if final is None or final.get("status") == "failed":
            self._forget(prev)
        elif final.get("status") != "cancelled":
            self._remember(lane, body, history, final)
        return final

    async def _prime(
        self, lane: Lane, sink: LaneSink, turn: Turn, body: dict[str, Any], earlier: list[dict[str, Any]] | None
    ) -> dict[str, Any] | None:
        """``generate: false``: a completed Response with no output, saved and remembered; no upstream call."""
        history = await conversation(turn, body, earlier)
        events = primed_response_events(body, ids=turn.ids, now=turn.clock)
        final = events[-1]["response"]
        await save_before_final(self.app, body, final, history, turn.ids)  # before its terminal event
        try:
            await sink.write(sink.render(events))
        except ConnectionResetError:
            turn.log["terminal"] = "client_disconnected"
            return None
        turn.log.update({"terminal": "completed", "primed": True})
        self._remember(lane, body, history, final, primed=True)
        return final

    def _remembered(self, lane: Lane, prev: Any) -> Remembered | None:
        """The remembered response ``prev`` names: the lane's own, else another lane's (a lane
        may fork from a response of another)."""
        if prev is None:
            return None
        for last in (lane.last, *(other.last for other in self.lanes.values() if other is not lane)):
            if last is not None and last.id == prev:
                return last
        return None

    def _remember(
        self,
        lane: Lane,
        body: dict[str, Any],
        history: list[dict[str, Any]] | None,
        response: dict[str, Any],
        *,
        primed: bool = False,
    ) -> None:
        items = (history or []) + normalize_input(body.get("input"), self.app[IDS])
        settings = {k: body[k] for k in _INHERITED if body.get(k) is not None} if primed else None
        rid = str(response.get("id"))
        lane.last = Remembered(rid, items, response, settings, affinity.routing(rid))

    def _forget(self, prev: Any) -> None:
        """A continuation of a remembered response failed: it is not remembered any more."""
        for lane in self.lanes.values():
            if prev is not None and lane.last is not None and lane.last.id == prev:
                lane.last = None

    async def _error(
        self,
        status: int,
        message: str,
        *,
        code: str,
        param: str | None = None,
        error_type: str = "invalid_request_error",
        stream_id: str | None = None,
    ) -> None:
        error = {"type": error_type, "code": code, "message": message, "param": param}
        await self._send_error(status, error, stream_id)

    async def _send_error(self, status: int, error: dict[str, Any], stream_id: str | None = None) -> None:
        frame: dict[str, Any] = {
            "type": "error",
            "status": status,
            "error": {
                "type": error.get("type"),
                "code": error_code(status, error),  # never null: the spec's WebSocket error wants a string
                "message": error.get("message"),
                "param": error.get("param"),
            },
        }
        if stream_id is not None:
            frame["stream_id"] = stream_id
        await self._send(frame)

    async def _send(self, frame: dict[str, Any]) -> None:
        try:
            await self.ws.send_frame(orjson.dumps(frame), WSMsgType.TEXT)
        except (ConnectionResetError, RuntimeError, OSError):
            pass  # the client is gone; nothing to tell
