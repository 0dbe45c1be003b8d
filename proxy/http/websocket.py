"""WebSocket mode: ``GET /v1/responses`` (and ``/responses``) upgraded to a WebSocket.

Each ``{"type": "response.create", ...}`` text frame is one turn, the same exchange as
``POST /v1/responses`` with ``stream: true`` (``proxy.turns.exchange``): forward for a chat upstream,
the upstream's own events relayed for a Responses upstream (called over HTTP/SSE). Every event
goes out as one JSON text frame (``WebSocketSink``), numbered as over SSE, with no ``[DONE]``.

  - Inbound keys are checked in the handshake (the auth middleware): a bad key gets the HTTP 401
    envelope before any upgrade. ``[server] websocket = false`` answers the upgrade with 426.
  - The connection remembers its last response (resolved input and output), so a turn that
    sends only new items plus ``previous_response_id`` works with ``store: false``; any other id
    is looked up in the store; an unknown one is ``previous_response_not_found``. A continuation
    that fails evicts the remembered response.
  - ``generate: false`` primes the connection: a completed Response with no output, no upstream
    call; a turn continuing from it inherits its ``instructions`` and ``tools`` (when it sends
    none). ``generate`` never goes upstream; ``stream: true`` is accepted (Codex sends it in
    every frame) and dropped, ``stream: false``, ``stream_options`` and ``background`` are refused
    with an error frame naming the param. ``previous_response_not_found`` has status 400.
  - One response in flight: a second ``response.create`` meanwhile gets an error frame and
    changes nothing. After ``[server] websocket_max_seconds`` (60 minutes) a response in flight
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
from crossfeed.proxy.keys import CONFIG, IDS, TRACER
from crossfeed.proxy.runtime.guard import KEY_NAME
from crossfeed.proxy.runtime.logs import ARRIVED, REQUEST_FIELDS
from crossfeed.proxy.runtime.observability import REQUEST_ID, SUMMARY, TurnLog, note_upstream_error, record_request
from crossfeed.proxy.state.history import save_before_final
from crossfeed.proxy.streaming.relay import Draining
from crossfeed.proxy.streaming.sinks import WebSocketSink
from crossfeed.proxy.turns.exchange import relay_turn
from crossfeed.proxy.turns.forward import conversation, respond
from crossfeed.proxy.turns.turn import Turn, new_turn, route
from crossfeed.translators.errors import TranslationError
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


class _Remembered:
    __slots__ = ("id", "items", "response", "settings")

    def __init__(
        self, rid: str, items: list[dict[str, Any]], response: dict[str, Any], settings: dict[str, Any] | None
    ) -> None:
        self.id = rid
        self.items = items  # the whole resolved input of that response
        self.response = response
        self.settings = settings  # a primed response's instructions and tools


class Connection:
    """One client socket: reads frames, runs one turn at a time in a task of its own."""

    def __init__(self, request: web.Request, ws: web.WebSocketResponse) -> None:
        self.request = request
        self.app = request.app
        self.ws = ws
        self.sink = WebSocketSink(ws, request)
        self.turn: asyncio.Task[None] | None = None
        self.turns = 0
        self.last: _Remembered | None = None
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
            if self.turn is not None and not self.turn.done():
                self.turn.cancel()  # the client went away: the upstream request is closed
                await asyncio.gather(self.turn, return_exceptions=True)

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
        """End the turn in flight, if any: a streaming response gets its terminal event
        (``reason``); one still waiting for the upstream's headers has sent nothing and is
        cancelled."""
        turn = self.turn
        if turn is None or turn.done():
            return
        stream = self.sink.open_stream
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
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            await self._error(400, "the frame is not valid JSON", code="invalid_json")
            return
        if not isinstance(event, dict):
            await self._error(400, "a frame must be a JSON object", code="invalid_type")
            return
        kind = event.get("type")
        if kind != "response.create":
            await self._error(
                400,
                f"unsupported event type {kind!r}: send 'response.create'"
                if isinstance(kind, str)
                else "the frame has no string `type`",
                code="invalid_value" if isinstance(kind, str) else "missing_required_parameter",
                param="type",
            )
            return
        if self.closing:
            await self._error(
                503,
                "crossfeed is shutting down; open a new connection",
                code="server_shutting_down",
                error_type="server_error",
            )
            return
        if self.turn is not None and not self.turn.done():
            await self._error(
                409,
                "a response is already in progress on this connection; wait for its terminal event",
                code="response_already_in_progress",
            )
            return
        body = {k: v for k, v in event.items() if k != "type"}
        self.turns += 1
        self.turn = asyncio.get_running_loop().create_task(self._turn(body, self.turns))

    async def _turn(self, body: dict[str, Any], n: int) -> None:
        turn_log: TurnLog = {"transport": "websocket"}
        if KEY_NAME.get() is not None:
            turn_log["key"] = KEY_NAME.get()
        token = REQUEST_FIELDS.set(
            {"request_id": f"{self.request.get(REQUEST_ID, 'ws')}.{n}", "route": ROUTE, "method": "WS"}
        )
        start = time.monotonic()
        ARRIVED.set(start)
        status = 200
        prev = body.get("previous_response_id")
        try:
            with self.app[TRACER].turn(self.request.headers, ROUTE, turn_log, body):
                await self._create(body, turn_log)
        except (ProxyError, TranslationError) as exc:
            status, envelope, _ = error_parts(exc)
            if isinstance(exc, UpstreamError):
                note_upstream_error(self.app, turn_log, exc.code)
            self._forget(prev)
            if getattr(exc, "code", None) == "previous_response_not_found":
                status = 400  # what Codex takes as "start over with the full input" (docs/codex.md)
            await self._send_error(status, envelope["error"])
        except asyncio.CancelledError:
            turn_log.setdefault("terminal", "client_disconnected")
            raise
        except Exception:
            status = 500
            log.exception("request.failed", path=ROUTE)
            self._forget(prev)
            await self._error(
                500, "crossfeed failed to handle the request", code="internal_error", error_type="server_error"
            )
        finally:
            record_request(self.app, ROUTE, turn_log, status, time.monotonic() - start)
            REQUEST_FIELDS.reset(token)

    async def _create(self, body: dict[str, Any], turn_log: TurnLog) -> None:
        generate = _create_flags(body)
        turn = new_turn(self.app, self.request.headers, route(self.app[CONFIG], body, turn_log), turn_log)
        turn_log["stream"] = True
        prev = body.get("previous_response_id")
        remembered = self.last if self.last is not None and prev is not None and self.last.id == prev else None
        if remembered is not None and remembered.settings:
            for key in _INHERITED:
                if body.get(key) is None and key in remembered.settings:
                    body[key] = remembered.settings[key]
        earlier = continued_history(remembered.items, remembered.response) if remembered is not None else None
        if not generate:
            await self._prime(turn, body, earlier)
            return
        if turn.upstream.api == "chat":
            final, history = await respond(turn, body, self._open_sink, earlier=earlier)
        else:
            # The upstream never saw a remembered response: the whole conversation goes to it.
            # A turn that continued from the upstream's own store is not remembered (its history
            # is the upstream's), so a later turn continues from the upstream too.
            if earlier is not None:
                body = {k: v for k, v in body.items() if k != "previous_response_id"}
                body["input"] = earlier + normalize_input(body.get("input"), turn.ids)
            final = await relay_turn(turn, body, self._open_sink)
            if prev is not None and earlier is None:
                self.last = None
                return
            history = None
        if final is None or final.get("status") == "failed":
            self._forget(prev)
        else:
            self._remember(body, history, final)

    async def _prime(self, turn: Turn, body: dict[str, Any], earlier: list[dict[str, Any]] | None) -> None:
        """``generate: false``: a completed Response with no output, saved and remembered; no upstream call."""
        history = await conversation(turn, body, earlier)
        events = primed_response_events(body, ids=turn.ids, now=turn.clock)
        final = events[-1]["response"]
        await save_before_final(self.app, body, final, history, turn.ids)  # before its terminal event
        try:
            await self.sink.write(self.sink.render(events))
        except ConnectionResetError:
            turn.log["terminal"] = "client_disconnected"
            return
        turn.log.update({"terminal": "completed", "primed": True})
        self._remember(body, history, final, primed=True)

    def _remember(
        self,
        body: dict[str, Any],
        history: list[dict[str, Any]] | None,
        response: dict[str, Any],
        *,
        primed: bool = False,
    ) -> None:
        items = (history or []) + normalize_input(body.get("input"), self.app[IDS])
        settings = {k: body[k] for k in _INHERITED if body.get(k) is not None} if primed else None
        self.last = _Remembered(str(response.get("id")), items, response, settings)

    def _forget(self, prev: Any) -> None:
        """A continuation of the remembered response failed: it is not remembered any more."""
        if prev is not None and self.last is not None and self.last.id == prev:
            self.last = None

    async def _open_sink(self) -> WebSocketSink | None:
        return None if self.ws.closed else self.sink

    async def _error(
        self,
        status: int,
        message: str,
        *,
        code: str,
        param: str | None = None,
        error_type: str = "invalid_request_error",
    ) -> None:
        await self._send_error(status, {"type": error_type, "code": code, "message": message, "param": param})

    async def _send_error(self, status: int, error: dict[str, Any]) -> None:
        frame = {
            "type": "error",
            "status": status,
            "error": {
                "type": error.get("type"),
                "code": error_code(status, error),  # never null: the spec's WebSocket error wants a string
                "message": error.get("message"),
                "param": error.get("param"),
            },
        }
        try:
            await self.ws.send_frame(orjson.dumps(frame), WSMsgType.TEXT)
        except (ConnectionResetError, RuntimeError, OSError):
            pass  # the client is gone; nothing to tell
