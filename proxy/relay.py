"""The one streaming loop: upstream bytes -> SSE events -> translator -> SSE frames -> client.

For each upstream read, the pure ``Pump`` (SSE decode, one orjson parse per event, the stream
machine) returns the translated outputs, which are rendered and written in one write.
``[DONE]`` (chat upstreams) or the machine's terminal state ends reading: nothing after it leaks
through. Failures map to exactly one ending:

  - invalid JSON / an SSE line over the size cap     -> handled inside the pump (fail)
  - no upstream bytes for ``idle`` seconds           -> pump.fail("upstream_idle_timeout")
  - the connection drops or the total timeout fires  -> pump.fail(...)
  - clean EOF without [DONE]                         -> pump.finish(): the machine decides

While the upstream is silent, an SSE comment (``: keepalive``) goes to the client every
``keepalive`` seconds, so clients and intermediaries do not time out during long reasoning.
A client that disconnects cancels this task (aiohttp handler cancellation); the upstream response
is closed on the way out, which closes the upstream connection at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from translators.pump import Pump

KEEPALIVE_FRAME = b": keepalive\n\n"
# How long the start events wait for the first upstream data to share its write.
FIRST_FLUSH = 0.05


class EventStreamResponse(web.StreamResponse):
    """A streamed answer whose status line and headers wait for the first body write and go out
    in the same socket write: one system call less per stream. The relay writes within
    ``FIRST_FLUSH`` of starting (the start events, or the headers alone), so a client never
    waits longer than that for the headers. (aiohttp's own switch for this, the one its
    ``web.Response`` uses; on a version without it the headers simply go out at ``prepare``.)"""

    _send_headers_immediately = False


class Draining(Exception):
    """Raised into a relay's upstream read when the server's drain period is over."""


class OpenStream:
    """A handle on one running relay, so shutdown can end it with a proper terminal event."""

    __slots__ = ("upstream",)

    def __init__(self, upstream: aiohttp.ClientResponse) -> None:
        self.upstream = upstream

    def end(self) -> None:
        self.upstream.content.set_exception(Draining())


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
    pump: Pump,
    response: web.StreamResponse,
    render: Callable[[list[dict[str, Any]]], bytes],
    *,
    idle: float,
    keepalive: float,
    total: float,
    initial: bytes = b"",
    done_frame: bytes = b"",
    stats: RelayStats | None = None,
    registry: set[OpenStream] | None = None,
) -> RelayStats:
    """Pump one upstream stream into ``response`` (prepared, nothing written yet).

    ``initial`` (the start events) goes out with the first upstream data, or alone after
    ``FIRST_FLUSH`` seconds of upstream silence, so a fast answer costs one write, not two (three
    with the headers of a plain ``StreamResponse``; see ``EventStreamResponse``). The last
    write carries the end of the chunked body too (``write_eof(data)``), and ``done_frame``
    (``data: [DONE]`` for chat clients) is appended to it.
    """
    stats = stats or RelayStats()
    handle = OpenStream(upstream)
    if registry is not None:
        registry.add(handle)
    loop = asyncio.get_running_loop()
    raw_write = response.write
    pending = initial
    ended = False  # the chunked body is closed

    async def write(data: bytes, *, last: bool = False, flush: bool = False) -> None:
        nonlocal pending, ended
        if pending:
            data, pending = pending + data, b""
        try:
            if last:
                ended = True
                await response.write_eof(data + done_frame)
            elif data or flush:  # an empty write sends headers still held by an EventStreamResponse
                await raw_write(data)
        except ConnectionResetError:
            raise _ClientGone from None

    readany = upstream.content.readany
    feed = pump.feed
    tick = min(idle, keepalive, total)
    last_data = loop.time()
    end = last_data + total
    try:
        first: bytes | None = upstream.content.read_nowait()  # a fast answer is often in already
        if not first:
            try:
                async with asyncio.timeout(FIRST_FLUSH):
                    first = await readany()
            except TimeoutError:
                first = None
                await write(b"", flush=True)  # the start events, or the headers alone
        if first is not None:
            await _first(first, pump, stats, render, write)
        while not pump.done:
            try:
                async with asyncio.timeout_at(min(loop.time() + tick, end)) as deadline:
                    next_check = loop.time() + 1.0
                    while True:
                        chunk = await readany()
                        if not chunk:
                            break
                        now = loop.time()
                        last_data = now
                        if now > next_check:  # move the deadline at most once a second: cheap
                            deadline.reschedule(min(now + tick, end))
                            next_check = now + 1.0
                        stats.chunks_in += 1
                        out = feed(chunk)
                        if pump.done:
                            stats.events_out += len(out)
                            await write(render(out), last=True)
                            break
                        if out:
                            stats.events_out += len(out)
                            try:  # inline, not write(): this is the per-chunk path
                                await raw_write(render(out))
                            except ConnectionResetError:
                                raise _ClientGone from None
                break  # EOF, [DONE] or a terminal event
            except TimeoutError:
                now = loop.time()
                if now >= end:
                    raise _TotalTimeout from None
                if now - last_data >= idle:
                    raise _IdleTimeout(idle) from None
                await write(KEEPALIVE_FRAME)
        if not ended:
            out = pump.finish()
            stats.events_out += len(out)
            await write(render(out) if out else b"", last=True)
        stats.ending = "ok"
    except _ClientGone:
        stats.ending = "client_disconnected"
        return stats
    except Draining:
        await _fail(pump, write, render, stats, "server_shutting_down",
                    "crossfeed is shutting down; the stream was ended before the upstream finished")
    except _IdleTimeout as exc:
        await _fail(pump, write, render, stats, "upstream_idle_timeout",
                    f"the upstream sent nothing for {exc.seconds:g}s (idle timeout)")
    except (_TotalTimeout, TimeoutError):  # asyncio.TimeoutError is TimeoutError (3.11)
        await _fail(pump, write, render, stats, "upstream_timeout",
                    f"the upstream did not finish within the total timeout of {total:g}s")
    except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
        await _fail(pump, write, render, stats, "upstream_disconnected",
                    "the upstream connection closed in the middle of the stream")
    except Exception as exc:  # a translator bug must still end the stream properly
        stats.extra["internal_error"] = repr(exc)
        try:
            await _fail(pump, write, render, stats, "internal_error",
                        "crossfeed could not translate the upstream stream")
        except Exception:
            stats.ending = "internal_error"
    finally:
        upstream.close()
        stats.events_in = pump.events_in
        if registry is not None:
            registry.discard(handle)
    return stats


async def _first(chunk: bytes, pump: Pump, stats: RelayStats, render: Callable[[list[dict[str, Any]]], bytes],
                 write: Callable[..., Any]) -> None:
    """The first upstream read: its events go out together with the start events."""
    if not chunk:
        return
    stats.chunks_in += 1
    out = pump.feed(chunk)
    stats.events_out += len(out)
    await write(render(out) if out else b"", last=pump.done)


class _ClientGone(Exception):
    pass


class _TotalTimeout(Exception):
    pass


class _IdleTimeout(Exception):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


async def _fail(pump: Pump, write: Callable[..., Any], render: Callable[[list[dict[str, Any]]], bytes],
                stats: RelayStats, code: str, message: str) -> None:
    stats.ending = code
    stats.error = message
    out = pump.fail(code, message)
    stats.events_out += len(out)
    try:
        await write(render(out) if out else b"", last=True)
    except _ClientGone:
        stats.ending = "client_disconnected"
