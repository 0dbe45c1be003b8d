"""Official SDK clients whose every body is recorded and checked: ``sdk_client`` gives the SDK an HTTP
transport that tees each response body into ``Captured`` records, and ``validate_captured`` passes
every ``text/event-stream`` body from ``/v1/responses`` through ``validate_responses_sse``, every
one from ``/v1/chat/completions`` through ``validate_chat_sse``, and every Response answered as
JSON through the Open Responses check (the ``captured`` fixture does it at teardown)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai
import orjson

from tests.support.open_responses import check_response
from tests.support.validators import validate_chat_sse, validate_responses_sse


@dataclass
class Captured:
    path: str
    content_type: str
    chunks: list[bytes] = field(default_factory=list)

    @property
    def raw(self) -> bytes:
        return b"".join(self.chunks)


class _TeeStream(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, sink: Captured) -> None:
        self._inner = inner
        self._sink = sink

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._sink.chunks.append(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class TeeTransport(httpx2.AsyncBaseTransport):
    """Records every response body while passing it through unchanged."""

    def __init__(self, captured: list[Captured]) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self.captured = captured

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        sink = Captured(request.url.path, response.headers.get("content-type", ""))
        self.captured.append(sink)
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_TeeStream(response.stream, sink),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def validate_captured(captured: list[Captured]) -> int:
    """Validate every SSE body seen, and every Response object answered as JSON (non-streamed
    creates, GET /v1/responses/{id}) against the Open Responses schema; returns how many were
    checked."""
    checked = 0
    for c in captured:
        if "application/json" in c.content_type and c.chunks and "/responses" in c.path:
            try:
                body = orjson.loads(c.raw)
            except orjson.JSONDecodeError:
                continue
            if isinstance(body, dict) and body.get("object") == "response":
                check_response(body, c.path)  # (not counted: the count is of streams)
            continue
        if "text/event-stream" not in c.content_type or not c.chunks:
            continue
        if c.path.endswith("/responses"):
            validate_responses_sse(c.raw)
        elif c.path.endswith("/chat/completions"):
            validate_chat_sse(c.raw)
        checked += 1
    return checked


def sdk_client(base_url: str, captured: list[Captured], *, timeout: float = 30) -> openai.AsyncOpenAI:
    """The official SDK on ``base_url``, every body it reads recorded in ``captured`` (validated
    at teardown by the ``captured`` fixture)."""
    http = httpx2.AsyncClient(transport=TeeTransport(captured), timeout=timeout)
    return openai.AsyncOpenAI(base_url=base_url, api_key="sk-test-client", http_client=http, max_retries=0)
