"""Shared fixtures: a fake backend on a real port, crossfeed on a real port, and official SDK
clients whose every streamed body is validated by the strict stream validators.

The SDK clients (tests/support/clients.py) get an HTTP transport that tees each response body: at
the end of the test every ``text/event-stream`` body from ``/v1/responses`` must pass
``validate_responses_sse`` and every one from ``/v1/chat/completions`` must pass
``validate_chat_sse``. No test can produce a stream that escapes the validators. The helpers live
in tests/support/; this file only makes fixtures of them.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest

from crossfeed.translators.ids import SequentialIds
from tests.fakes.upstream import FakeUpstream
from tests.support.app_server import ProxyHandle, running_proxy
from tests.support.clients import Captured, sdk_client, validate_captured
from tests.support.services import require_service
from tests.support.ws import FrameRecorder


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


@pytest.fixture
def redis_url() -> str:
    url = os.environ.get("CROSSFEED_TEST_REDIS_URL")
    if not url:
        require_service("redis", 'run eval "$(bash .ci/start-redis.sh)" first')
    return url  # type: ignore[return-value]
