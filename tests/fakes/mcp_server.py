"""A real MCP server for the tests, built with the ``mcp`` package's own server side (MCPServer).

    python -m tests.fakes.mcp_server --transport streamable-http|sse --port PORT [--token TOKEN]

Serves ``/mcp`` (streamable HTTP) or ``/sse`` (SSE) on 127.0.0.1; with ``--token`` every request
must carry ``Authorization: Bearer TOKEN`` (else 401), so a test can prove the tool's headers
reach the server. Tools: ``add`` (a + b), ``echo`` (its text), ``lookup`` (read-only), ``slow``
(sleeps), ``meet`` (answers once two calls are in: concurrency), ``fail`` (raises: an MCP error result), ``big`` (a large output), ``traceparent`` (the W3C
``traceparent`` header of the request that called it: tracing's proof). Prints ``LISTENING``
once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

TEST_TOKEN = "mcp-secret-token-7f3a"  # what the tests' streamable HTTP server wants

server = MCPServer("crossfeed-test")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def lookup(key: str) -> str:
    """Look a key up (read-only)."""
    return {"rust": "a systems language"}.get(key, "unknown")


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return "woke up"


_met: list[str] = []
_both = asyncio.Event()


@server.tool()
async def meet(name: str) -> str:
    """Wait (up to 5 s) until a second call of this tool has arrived: proves calls run concurrently."""
    _met.append(name)
    if len(_met) >= 2:
        _both.set()
    try:
        await asyncio.wait_for(_both.wait(), 5)
    except TimeoutError:
        return f"{name}: alone"
    return f"{name}: met"


@server.tool()
def fail() -> str:
    """Always fails."""
    raise ValueError("the fail tool always fails")


@server.tool()
def big(kib: int) -> str:
    """Return kib KiB of text."""
    return "x" * (kib * 1024)


# The traceparent header of the latest HTTP request (SeeTraceparent): the calling request's,
# read by the tool it runs.
SEEN = {"traceparent": ""}


@server.tool()
def traceparent() -> str:
    """The traceparent header the call came with ("" without one)."""
    return SEEN["traceparent"] or "none"


class SeeTraceparent:
    def __init__(self, app) -> None:  # type: ignore[no-untyped-def]
        self.app = app

    async def __call__(self, scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http":
            SEEN["traceparent"] = dict(scope["headers"]).get(b"traceparent", b"").decode()
        await self.app(scope, receive, send)


class RequireToken:
    def __init__(self, app, token: str) -> None:  # type: ignore[no-untyped-def]
        self.app = app
        self.token = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != self.token:
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"missing or wrong token"})
            return
        await self.app(scope, receive, send)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=["streamable-http", "sse"], default="streamable-http")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token")
    args = parser.parse_args()
    app = server.streamable_http_app() if args.transport == "streamable-http" else server.sse_app()
    if args.token:
        app = RequireToken(app, args.token)
    app = SeeTraceparent(app)
    config = uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning")
    uv = uvicorn.Server(config)

    async def run() -> None:
        task = asyncio.create_task(uv.serve())
        while not uv.started:
            await asyncio.sleep(0.05)
        print("LISTENING", flush=True)
        await task

    asyncio.run(run())


if __name__ == "__main__":
    main()
