"""The HTTP server around the application: explicit limits, and malformed HTTP in OpenAI's envelope.

aiohttp answers requests it cannot parse (bad request line, oversized or malformed headers,
conflicting lengths, bad chunked framing) before any middleware runs, with a plain-text page that
can echo the raw bytes, and logs a traceback that can hold the client's headers. Here those
answers are OpenAI's error envelope with a fixed message, aiohttp's own loggers are silenced, and
one structured ``http.malformed`` line (no raw bytes) is logged instead.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
import structlog
from aiohttp import web, web_protocol, web_server

from crossfeed.proxy.runtime.config import Config

log = structlog.get_logger("crossfeed")

_MESSAGES = {
    400: "the HTTP request is malformed",
    413: "the request body is larger than the configured maximum",
    414: "the request line is too long",
    431: "the request headers are too large",
}


class _Handler(web_protocol.RequestHandler):
    def handle_error(
        self, request: Any, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:  # a response already started: the connection is broken
            raise ConnectionError("response already started")
        status = status if status in _MESSAGES else (400 if status < 500 else 500)
        text = _MESSAGES.get(status, "crossfeed failed to handle the request")
        log.info("http.malformed", status=status, error=type(exc).__name__ if exc else None)
        body = {
            "error": {
                "message": text,
                "type": "invalid_request_error" if status < 500 else "server_error",
                "param": None,
                "code": "malformed_http" if status < 500 else "internal_error",
            }
        }
        resp = web.Response(status=status, body=orjson.dumps(body), content_type="application/json")
        resp.force_close()
        return resp


class _Server(web_server.Server):
    def __call__(self) -> web_protocol.RequestHandler:
        return _Handler(self, loop=self._loop, **self._kwargs)


class Runner(web.AppRunner):
    async def _make_server(self) -> web_server.Server:
        server = await super()._make_server()
        server.__class__ = _Server  # same object, our RequestHandler
        return server


def make_runner(app: web.Application, config: Config) -> web.AppRunner:
    for name in ("aiohttp.server", "aiohttp.access", "aiohttp.web", "aiohttp.internal"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    s = config.server
    return Runner(
        app,
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=s.drain_seconds + 5,
        max_line_size=s.max_header_bytes,
        max_field_size=s.max_header_bytes,
        max_headers=s.max_headers,
    )
