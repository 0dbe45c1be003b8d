"""Shared fixtures: a fake backend on a real port, crossfeed on a real port, and official SDK
clients whose every streamed body is validated by the strict stream validators.

The SDK clients get an HTTP transport that tees each response body: at the end of the test every
``text/event-stream`` body from ``/v1/responses`` must pass ``validate_responses_sse`` and every
one from ``/v1/chat/completions`` must pass ``validate_chat_sse``. No test can produce a stream
that escapes the validators.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai
import orjson
import pytest

from crossfeed.translators.ids import SequentialIds
from tests.fakes.upstream import FakeUpstream
from tests.support.app_server import ProxyHandle, running_proxy
from tests.support.open_responses import check_response
from tests.support.validators import validate_chat_sse, validate_responses_sse
from tests.support.ws import FrameRecorder


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


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    up = FakeUpstream()
    await up.start()
    yield up
    await up.close()


@pytest.fixture
def proxy_overrides() -> dict[str, Any]:
    """Override in a test module to change the proxy's configuration."""
    return {}


@pytest.fixture
async def proxy(upstream: FakeUpstream, proxy_overrides: dict[str, Any], tmp_path: Any) -> AsyncIterator[ProxyHandle]:
    overrides = {"upstream.base_url": upstream.base_url, "store.data_dir": str(tmp_path / "data"), **proxy_overrides}
    async with running_proxy(overrides, ids=SequentialIds(), clock=lambda: 1_700_000_000) as handle:
        yield handle


@pytest.fixture
async def captured() -> AsyncIterator[list[Captured]]:
    seen: list[Captured] = []
    yield seen
    validate_captured(seen)


@pytest.fixture
async def ws_frames() -> AsyncIterator[FrameRecorder]:
    """The WebSocket counterpart of ``captured``: every frame a test's sockets receive is
    validated at teardown (tests/support/ws.py)."""
    recorder = FrameRecorder()
    yield recorder
    recorder.validate()


def sdk_client(base_url: str, captured: list[Captured], *, timeout: float = 30) -> openai.AsyncOpenAI:
    """The official SDK on ``base_url``, every body it reads recorded in ``captured`` (validated
    at teardown by the ``captured`` fixture)."""
    http = httpx2.AsyncClient(transport=TeeTransport(captured), timeout=timeout)
    return openai.AsyncOpenAI(base_url=base_url, api_key="sk-test-client", http_client=http, max_retries=0)


@pytest.fixture
async def client(proxy: ProxyHandle, captured: list[Captured]) -> AsyncIterator[openai.AsyncOpenAI]:
    c = sdk_client(proxy.base_url, captured)
    yield c
    await c.close()


@pytest.fixture(scope="session")
def mcp_urls() -> Iterator[dict[str, str]]:
    """Two real MCP servers (tests/fakes/mcp_server.py) on loopback for the whole session:
    ``http`` (streamable HTTP, wants ``TEST_TOKEN``) and ``sse``."""
    import socket
    import subprocess
    import sys
    from pathlib import Path

    from tests.fakes.mcp_server import TEST_TOKEN

    root = Path(__file__).resolve().parents[1]
    procs, urls = [], {}
    try:
        for name, transport, path, extra in (
            ("http", "streamable-http", "/mcp", ["--token", TEST_TOKEN]),
            ("sse", "sse", "/sse", []),
        ):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.fakes.mcp_server", "--transport", transport, "--port", str(port), *extra],
                cwd=root,
                stdout=subprocess.PIPE,
                text=True,
            )
            procs.append(proc)
            assert proc.stdout is not None and proc.stdout.readline().strip() == "LISTENING", f"{name} MCP server"
            urls[name] = f"http://127.0.0.1:{port}{path}"
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)


def require_service(name: str, hint: str) -> None:
    """Skip locally when an external service is missing; in CI its absence is a failure."""
    if os.environ.get("CI"):
        pytest.fail(f"{name} is required in CI but is not available: {hint}")
    pytest.skip(f"{name} not available: {hint}")


@pytest.fixture
def redis_url() -> str:
    url = os.environ.get("CROSSFEED_TEST_REDIS_URL")
    if not url:
        require_service("redis", 'run eval "$(bash .ci/start-redis.sh)" first')
    return url  # type: ignore[return-value]
