"""A scriptable fake backend on a real loopback port.

Each request takes the next reply from the script (or the default reply) and is recorded with
its path, headers and JSON body. SSE replies are written in realistic pieces: split at seeded
random byte offsets (inside frames, inside multi-byte characters), with an optional pause
between writes, the way a real server's socket writes arrive.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web


@dataclass
class SSEReply:
    data: bytes
    seed: int = 0
    max_piece: int = 97
    delay: float = 0.0
    content_type: str = "text/event-stream"
    stall_after: int | None = None  # stop writing after this many pieces, keep the socket open
    # byte offset -> event: writing stops there until the event is set (a test lets it go on)
    holds: dict[int, asyncio.Event] = field(default_factory=dict)
    cut: bool = False  # after the data, drop the connection (no end of the chunked body)


@dataclass
class JSONReply:
    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None
    content_type: str = "application/json"


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


# A reply may be computed from the request it answers (a fake model that reads tool results).
Reply = SSEReply | JSONReply | Callable[[Recorded], SSEReply | JSONReply]


class FakeUpstream:
    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.default: Reply | None = None
        self.requests: list[Recorded] = []
        self.open_requests = 0
        self.cancelled = 0
        self.probes = 0
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def reply(self, *replies: Reply) -> None:
        self.script.extend(replies)

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("User-Agent") == "crossfeed-probe":  # readiness probes: answered, not recorded
            self.probes += 1
            return web.json_response({"object": "list", "data": []})
        raw = await request.read()
        try:
            body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = raw
        recorded = Recorded(request.method, request.path, dict(request.headers), body)
        self.requests.append(recorded)
        reply = self.script.popleft() if self.script else self.default
        if callable(reply):
            reply = reply(recorded)
        if reply is None:
            return web.json_response({"error": {"message": "no reply scripted", "type": "test"}}, status=599)
        self.open_requests += 1
        try:
            if isinstance(reply, JSONReply):
                payload = reply.raw if reply.raw is not None else orjson.dumps(reply.body)
                return web.Response(
                    status=reply.status, body=payload, content_type=reply.content_type, headers=reply.headers
                )
            return await self._stream(request, reply)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.open_requests -= 1

    async def _stream(self, request: web.Request, reply: SSEReply) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": reply.content_type, "Cache-Control": "no-cache"})
        await resp.prepare(request)
        rnd = random.Random(reply.seed)
        data, pos, n = reply.data, 0, 0
        while pos < len(data):
            if reply.stall_after is not None and n >= reply.stall_after:
                await asyncio.sleep(3600)
            step = rnd.randint(1, reply.max_piece)
            hold_at = min((at for at in reply.holds if at > pos), default=None)
            if hold_at is not None and hold_at < pos + step:
                step = hold_at - pos
            await resp.write(data[pos : pos + step])
            if pos + step in reply.holds:
                await reply.holds[pos + step].wait()
            pos += step
            n += 1
            if reply.delay:
                await asyncio.sleep(reply.delay)
        if reply.cut and request.transport is not None:
            request.transport.abort()  # the replica dies: the body never ends
            raise asyncio.CancelledError
        await resp.write_eof()
        return resp
