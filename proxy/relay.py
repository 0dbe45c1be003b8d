"""The one streaming loop: upstream bytes -> SSE events -> translator -> SSE frames -> client.

Order of work for each upstream read: decode SSE, parse each event's JSON once (orjson), feed
the machine, render its outputs and write them to the client in one write. ``[DONE]`` (chat
upstreams) or the machine's own terminal state ends reading: nothing after it leaks through.
Failures map to exactly one ending:

  - invalid JSON / an SSE line over the size cap     -> machine.fail("upstream_protocol_error")
  - no upstream bytes for ``idle`` seconds           -> machine.fail("upstream_idle_timeout")
  - the connection drops or the total timeout fires  -> machine.fail(...)
  - clean EOF without [DONE]                         -> machine.finish(clean=False) decides

While the upstream is silent, an SSE comment (``: keepalive``) goes to the client every
``keepalive`` seconds, so clients and intermediaries do not time out during long reasoning.
A client that disconnects cancels this task (aiohttp handler cancellation); the upstream response
is closed on the way out, which closes the upstream connection at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import orjson
from aiohttp import web

from translators.errors import UpstreamProtocolError
from translators.sse import SSEDecoder

KEEPALIVE_FRAME = b": keepalive\n\n"
_DONE = b"[DONE]"


class Machine(Protocol):
    @property
    def done(self) -> bool: ...
    def feed(self, item: dict[str, Any]) -> list[dict[str, Any]]: ...
    def finish(self, *, clean: bool = True) -> list[dict[str, Any]]: ...
    def fail(self, code: str, message: str) -> list[dict[str, Any]]: ...


@dataclass(slots=True)
class RelayStats:
    chunks_in: int = 0
    events_in: int = 0
    events_out: int = 0
    ending: str = ""
    error: str | None = None
    first_byte_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


async def relay(
    upstream: aiohttp.ClientResponse,
    machine: Machine,
    response: web.StreamResponse,
    render: Callable[[list[dict[str, Any]]], bytes],
    *,
    idle: float,
    keepalive: float,
    total: float,
    done_frame: bytes | None = None,
    stats: RelayStats | None = None,
) -> RelayStats:
    stats = stats or RelayStats()
    loop = asyncio.get_running_loop()
    decoder = SSEDecoder()
    loads = orjson.loads
    raw_write = response.write

    async def write(data: bytes) -> None:
        try:
            await raw_write(data)
        except ConnectionResetError:
            raise _ClientGone from None

    readany = upstream.content.readany
    tick = min(idle, keepalive)
    last_data = loop.time()
    clean = False
    try:
        while not machine.done:
            try:
                async with asyncio.timeout(tick) as deadline:
                    next_check = loop.time() + 1.0
                    while True:
                        chunk = await readany()
                        if not chunk:
                            break
                        now = loop.time()
                        last_data = now
                        if now > next_check:  # move the deadline at most once a second: cheap
                            deadline.reschedule(now + tick)
                            next_check = now + 1.0
                        stats.chunks_in += 1
                        out: list[dict[str, Any]] = []
                        for ev in decoder.feed(chunk):
                            data = ev.data
                            if data == _DONE:
                                clean = True
                                break
                            stats.events_in += 1
                            out += machine.feed(_parse(loads, ev.event, data))
                            if machine.done:
                                break
                        if out:
                            stats.events_out += len(out)
                            await write(render(out))
                        if clean or machine.done:
                            break
                break  # EOF, [DONE] or a terminal event
            except TimeoutError:
                silent = loop.time() - last_data
                if silent >= idle:
                    raise _IdleTimeout(idle) from None
                await write(KEEPALIVE_FRAME)
        if not machine.done:
            if not clean:
                for ev in decoder.finish():
                    if ev.data == _DONE:
                        clean = True
                        break
                    out = machine.feed(_parse(loads, ev.event, ev.data))
                    if out:
                        await write(render(out))
                    if machine.done:
                        break
            if not machine.done:
                out = machine.finish(clean=clean)
                stats.events_out += len(out)
                await write(render(out))
        stats.ending = "ok"
    except _ClientGone:
        stats.ending = "client_disconnected"
        return stats
    except UpstreamProtocolError as exc:
        await _fail(machine, response, render, stats, "upstream_protocol_error", exc.message)
    except _IdleTimeout as exc:
        await _fail(machine, response, render, stats, "upstream_idle_timeout",
                    f"the upstream sent nothing for {exc.seconds:g}s (idle timeout)")
    except (aiohttp.ServerTimeoutError, asyncio.TimeoutError):
        await _fail(machine, response, render, stats, "upstream_timeout",
                    f"the upstream did not finish within the total timeout of {total:g}s")
    except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
        await _fail(machine, response, render, stats, "upstream_disconnected",
                    "the upstream connection closed in the middle of the stream")
    except Exception as exc:  # a translator bug must still end the stream properly
        stats.extra["internal_error"] = repr(exc)
        try:
            await _fail(machine, response, render, stats, "internal_error",
                        "crossfeed could not translate the upstream stream")
        except Exception:
            stats.ending = "internal_error"
    finally:
        upstream.close()
    if done_frame is not None:
        try:
            await raw_write(done_frame)
        except ConnectionResetError:
            stats.ending = "client_disconnected"
    return stats


class _ClientGone(Exception):
    pass


class _IdleTimeout(Exception):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


def _parse(loads: Callable[[bytes], Any], event: str | None, data: bytes) -> dict[str, Any]:
    try:
        obj = loads(data)
    except orjson.JSONDecodeError:
        raise UpstreamProtocolError("the upstream sent an event that is not valid JSON") from None
    if not isinstance(obj, dict):
        raise UpstreamProtocolError("the upstream sent an event that is not a JSON object")
    if event == "error" and "error" not in obj and "type" not in obj:
        obj = {"error": obj}
    return obj


async def _fail(machine: Machine, response: web.StreamResponse, render: Callable[[list[dict[str, Any]]], bytes],
                stats: RelayStats, code: str, message: str) -> None:
    stats.ending = code
    stats.error = message
    if machine.done:
        return
    out = machine.fail(code, message)
    stats.events_out += len(out)
    try:
        await response.write(render(out))
    except ConnectionResetError:
        stats.ending = "client_disconnected"



_TYPE_BYTES: dict[str, bytes] = {}


def render_responses(events: list[dict[str, Any]]) -> bytes:
    """Responses frames: ``event: <type>`` + ``data: <json>`` (wire-spec 1.1)."""
    dumps = orjson.dumps
    parts = []
    for ev in events:
        t = ev["type"]
        tb = _TYPE_BYTES.get(t)
        if tb is None:
            tb = _TYPE_BYTES[t] = b"event: " + t.encode() + b"\ndata: "
        parts.append(tb)
        parts.append(dumps(ev))
        parts.append(b"\n\n")
    return b"".join(parts)


def render_chat(chunks: list[dict[str, Any]]) -> bytes:
    """Chat frames: ``data: <json>`` only (wire-spec 2.1)."""
    dumps = orjson.dumps
    return b"".join([b"data: " + dumps(c) + b"\n\n" for c in chunks])
