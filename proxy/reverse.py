"""The reverse direction: a Chat Completions client in front of a Responses-only backend.

``POST /v1/chat/completions`` is mapped onto the backend's ``POST /v1/responses``
(``translators.chat_request``); the answer comes back as ``chat.completion.chunk`` frames from
``translators.responses_to_chat`` through the same relay as the forward direction, ending with
``data: [DONE]``, or as one ``chat.completion`` when not streaming.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from aiohttp import web

from translators.chat_bodies import response_to_chat_completion
from translators.chat_request import chat_request_to_responses, include_usage
from translators.pump import Pump
from translators.responses_to_chat import ResponsesToChatStream
from translators.sse import DONE_FRAME, render_chat

from .config import Upstream
from .errors import ClientRequestError
from .guard import LIMITS
from .keys import CLOCK, IDS, MAX_NONSTREAM_BODY, SESSION
from .observability import SUMMARY, usage_counts, usage_summary
from .relay import EventStreamResponse
from .streams import log, note_anomalies, outbound_headers, secrets, stream_through
from .upstream import open_upstream, read_json

CHAT_SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache",
                    "X-Accel-Buffering": "no"}


async def reverse_chat(request: web.Request, body: dict[str, Any], up: Upstream) -> web.StreamResponse:
    app = request.app
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise ClientRequestError("`stream` must be a boolean", param="stream", code="invalid_type")
    ignored: list[str] = []
    rbody = chat_request_to_responses(body, up.mapping, ignored=ignored)
    rbody["model"] = up.model_map.get(rbody["model"], rbody["model"])
    rbody["stream"] = bool(stream)
    if ignored:
        log.info("request.ignored_fields", ignored=ignored)
    headers = outbound_headers(request, up)
    summary = request[SUMMARY]
    summary["stream"] = bool(stream)
    started = time.monotonic()
    if not stream:
        upstream = await open_upstream(app[SESSION], up, "/responses", rbody, headers, secrets=secrets(request, up))
        summary["ttfb"] = time.monotonic() - started
        result = await read_json(upstream, up, MAX_NONSTREAM_BODY)
        if not isinstance(result, dict):
            result = {}
        completion = response_to_chat_completion(result, options=up.mapping, ids=app[IDS], now=app[CLOCK])
        summary.update(terminal=completion["choices"][0]["finish_reason"], usage=usage_summary(completion))
        return web.Response(body=orjson.dumps(completion), content_type="application/json")
    with app[LIMITS].admit(up):
        upstream = await open_upstream(app[SESSION], up, "/responses", rbody, headers, secrets=secrets(request, up))
        summary["ttfb"] = time.monotonic() - started
        machine = ResponsesToChatStream(include_usage=include_usage(body), options=up.mapping, ids=app[IDS],
                                        now=app[CLOCK], model=str(body.get("model")), wire=True)
        response = EventStreamResponse(headers=CHAT_SSE_HEADERS)
        try:
            await response.prepare(request)
        except ConnectionResetError:
            upstream.close()
            return response
        stats = await stream_through(request, up, upstream, Pump(machine), response, render_chat, done_frame=DONE_FRAME)
    summary.update(terminal=machine.finish_reason or ("error" if machine.error else stats.ending),
                   usage=usage_counts(machine.usage))
    note_anomalies(request, machine.diagnostics)
    return response
