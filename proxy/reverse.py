"""The reverse direction: a Chat Completions client in front of a Responses-only backend.

``POST /v1/chat/completions`` is mapped onto the backend's ``POST /v1/responses``
(``translators.chat_request``); the answer comes back as ``chat.completion.chunk`` frames from
``translators.responses_to_chat`` through the same relay as the forward direction, ending with
``data: [DONE]``, or as one ``chat.completion`` when not streaming.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from translators.chat_bodies import response_to_chat_completion
from translators.chat_request import chat_request_to_responses
from translators.sse import DONE_FRAME, render_chat

from .config import Upstream
from .exchange import open_leg, reverse_turn, stream_flag
from .keys import CLOCK, IDS, MAX_NONSTREAM_BODY
from .observability import SUMMARY, usage_summary
from .sinks import sse_opener
from .streams import log
from .upstream import read_json

async def reverse_chat(request: web.Request, body: dict[str, Any], up: Upstream) -> web.StreamResponse:
    app = request.app
    stream = stream_flag(body)
    ignored: list[str] = []
    rbody = chat_request_to_responses(body, up.profile, ignored=ignored)
    rbody["model"] = up.model_map.get(rbody["model"], rbody["model"])
    rbody["stream"] = stream
    if ignored:
        log.info("request.ignored_fields", ignored=ignored)
    summary = request[SUMMARY]
    summary["stream"] = stream
    if not stream:
        upstream = await open_leg(request, up, "/responses", rbody, summary)
        result = await read_json(upstream, up, MAX_NONSTREAM_BODY)
        if not isinstance(result, dict):
            result = {}
        limit = rbody.get("max_output_tokens")
        completion = response_to_chat_completion(result, options=up.profile, ids=app[IDS], now=app[CLOCK],
                                                 max_output_tokens=limit if isinstance(limit, int) else None)
        summary.update(terminal=completion["choices"][0]["finish_reason"], usage=usage_summary(completion))
        return web.Response(body=orjson.dumps(completion), content_type="application/json")
    response, open_sink = sse_opener(request, render_chat, done_frame=DONE_FRAME)

    await reverse_turn(request, body, rbody, up, open_sink, summary=summary)
    return response
