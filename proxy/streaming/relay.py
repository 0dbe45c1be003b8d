"""The one streaming loop: upstream bytes -> SSE events -> translator -> sink -> client.

For each upstream read, the pure ``Pump`` (SSE decode, one orjson parse per event, the stream
machine) returns the translated outputs, which the sink renders and writes in one write (one
payload: SSE bytes, or WebSocket text frames; see ``proxy.streaming.sinks``). ``[DONE]`` (chat upstreams)
or the machine's terminal state ends reading: nothing after it leaks through. Failures map to
exactly one ending:

  - invalid JSON / an SSE line over the size cap     -> handled inside the pump (fail)
  - no upstream bytes for ``idle`` seconds           -> pump.fail("upstream_idle_timeout")
  - the connection drops or the total timeout fires  -> pump.fail(...)
  - clean EOF without [DONE]                         -> pump.finish(): the machine decides
  - ``Draining`` raised into the read (``OpenStream``) -> pump.fail(...); its ``Cancelled`` ->
    pump.cancel(...), its ``Steered`` -> pump.steer(...) (a WebSocket client's asking)

While the upstream is silent, the sink's keepalive (an SSE comment, a WebSocket ping) goes out
every ``keepalive`` seconds, so clients and intermediaries do not time out during long reasoning.
A client that disconnects cancels this task (aiohttp handler cancellation, or the socket's
reader); the upstream response is closed on the way out, which closes the upstream connection at
once. The idle and total bounds are a ``Deadline`` (proxy/streaming/deadline.py), as on pass-through routes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import aiohttp

from crossfeed.proxy.runtime.timeout_scope import timeout_after
from crossfeed.proxy.runtime.upstream_protocol import relayed
from crossfeed.proxy.streaming.deadline import Deadline
from crossfeed.proxy.streaming.sinks import FrameSink, P
from crossfeed.translators.pump import Machine, Out, Pump

# How long the start events wait for the first upstream data to share its write.
FIRST_FLUSH = 0.05


class Draining(Exception):
    """Raised into a relay's upstream read to end its stream now, properly: the server's drain
    period is over, or the client's connection reached its lifetime."""

    how = ""  # how the stream ends: failed (""), or as the client asked ("cancelled", "steered")

    def __init__(
        self,
        code: str = "server_shutting_down",
        message: str = "crossfeed is shutting down; the stream was ended before the upstream finished",
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Cancelled(Draining):
    """Raised into a relay's upstream read when the client cancelled its response (a WebSocket's
    ``response.cancel``): the stream ends with ``response.failed`` carrying status ``cancelled``."""

    how = "cancelled"

    def __init__(self) -> None:
        super().__init__("cancelled", "the client cancelled the response")


class Steered(Draining):
    """Raised into a relay's upstream read when the client steered its response (a WebSocket's
    ``response.steer``) while the machine was at a safe boundary (``OpenStream.steer``): the
    stream ends with ``response.incomplete``, reason ``steered``."""

    how = "steered"

    def __init__(self) -> None:
        super().__init__("steered", "the client steered the response")


class OpenStream:
    """A handle on one running relay, so shutdown can end it with a proper terminal event."""

    __slots__ = ("upstream", "pump")

    def __init__(self, upstream: aiohttp.ClientResponse, pump: Pump | None = None) -> None:
        self.upstream = upstream
        self.pump = pump

    def end(self, reason: Draining | None = None) -> None:
        self.upstream.content.set_exception(reason or Draining())

    def steer(self) -> bool:
        """End the stream for steering input if its machine is at a safe boundary now (between
        two text or reasoning deltas, no call open): ``Steered`` is raised into the relay's next
        read, before any more upstream data is fed (the machine's state is the one checked)."""
        if self.pump is None or not self.pump.steerable:
            return False
        self.end(Steered())
        return True


@dataclass(slots=True)
class RelayStats:
    chunks_in: int = 0
    events_in: int = 0
    events_out: int = 0
    ending: str = ""
    error: str | None = None
    first_data: float = 0.0  # the loop's time when the first upstream data came (0: none came)
    extra: dict[str, Any] = field(default_factory=dict)


async def relay(
    upstream: aiohttp.ClientResponse,
    pump: Pump,
    sink: FrameSink[P],
    *,
    idle: float,
    keepalive: float,
    total: float,
    initial: list[Out] | None = None,
    stats: RelayStats | None = None,
    registry: set[OpenStream] | None = None,
    close: bool = True,
    before_end: Callable[[Machine], Awaitable[None]] | None = None,
) -> RelayStats:
    """Pump one upstream stream into ``sink`` (open, nothing written yet).

    ``initial`` (the start events) goes out with the first upstream data, or alone after
    ``FIRST_FLUSH`` seconds of upstream silence, so a fast answer costs one write, not two (three
    with the headers of a plain ``StreamResponse``; see ``sinks.EventStreamResponse``). The last
    write is the sink's ``close`` (for SSE it ends the chunked body and adds ``[DONE]``), unless
    ``close`` is false: a leg another leg of the same Response follows leaves the sink open, and
    the exchange closes it once the Response has ended. ``before_end(machine)`` is awaited before
    the write that carries the terminal event (the exchange saves the Response there).
    """
    stats = stats or RelayStats()
    handle = sink.open_stream = OpenStream(upstream, pump)
    if registry is not None:
        registry.add(handle)
    loop = asyncio.get_running_loop()
    render = sink.render
    raw_write = sink.write
    empty: P = sink.empty
    pending: P = render(initial) if initial else empty
    stats.events_out += len(initial) if initial else 0  # (the start events are sent too)
    ended = False  # the sink's close ran

    async def write(data: P, *, last: bool = False, flush: bool = False) -> None:
        nonlocal pending, ended
        if last and before_end is not None and pump.machine.done:
            await before_end(pump.machine)
        if pending:
            data, pending = pending + data, empty
        try:
            if last:
                ended = True
                if close:
                    await sink.close(data)
                elif data:
                    await raw_write(data)
            elif data:
                await raw_write(data)
            elif flush:  # an SSE sink still holds its headers
                await sink.flush()
        except ConnectionResetError:
            raise _ClientGone from None

    relayed(upstream.content)  # read whole: no call per HTTP chunk (proxy/runtime/upstream_protocol.py)
    readany = upstream.content.readany
    feed = pump.feed
    deadline = Deadline(loop, idle=idle, total=total, tick=keepalive)
    try:
        first: bytes | None = upstream.content.read_nowait()  # a fast answer is often in already
        if not first:
            try:
                with timeout_after(FIRST_FLUSH):
                    first = await readany()
            except TimeoutError:
                first = None
                await write(empty, flush=True)  # the start events, or the headers alone
        if first:
            stats.first_data = loop.time()
            stats.chunks_in += 1
            out = feed(first)
            stats.events_out += len(out)
            await write(render(out) if out else empty, last=pump.done)
        last_data = deadline.last  # locals on the per-chunk path; the deadline reads them when it fires
        while not pump.done:
            try:
                with deadline.arm():
                    # Before the first data, 0: the first chunk takes the branch that moves the
                    # deadline, where its time is kept (nothing more is done per chunk).
                    move_at = deadline.move_at if stats.chunks_in else 0.0
                    while True:
                        chunk = await readany()
                        if not chunk:
                            break
                        last_data = now = loop.time()
                        if now > move_at:  # move the deadline at most once a second: cheap
                            deadline.move(now)
                            move_at = deadline.move_at
                            if not stats.first_data:
                                stats.first_data = now
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
                deadline.last = last_data
                why = deadline.lapsed()
                if why == "total":
                    raise _TotalTimeout from None
                if why == "idle":
                    raise _IdleTimeout(idle) from None
                try:
                    await sink.keepalive()
                except ConnectionResetError:
                    raise _ClientGone from None
        if not ended:
            out = pump.finish()
            stats.events_out += len(out)
            await write(render(out) if out else empty, last=True)
        stats.ending = "ok"
    except _ClientGone:
        stats.ending = "client_disconnected"
        return stats
    except Draining as exc:
        await _fail(pump, write, sink, stats, exc.code, exc.message, how=exc.how)
    except _IdleTimeout as exc:
        await _fail(
            pump,
            write,
            sink,
            stats,
            "upstream_idle_timeout",
            f"the upstream sent nothing for {exc.seconds:g}s (idle timeout)",
        )
    except (_TotalTimeout, TimeoutError):  # asyncio.TimeoutError is TimeoutError (3.11)
        await _fail(
            pump,
            write,
            sink,
            stats,
            "upstream_timeout",
            f"the upstream did not finish within the total timeout of {total:g}s",
        )
    except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
        await _fail(
            pump,
            write,
            sink,
            stats,
            "upstream_disconnected",
            "the upstream connection closed in the middle of the stream",
        )
    except Exception as exc:  # a translator bug must still end the stream properly
        stats.extra["internal_error"] = repr(exc)
        try:
            await _fail(pump, write, sink, stats, "internal_error", "crossfeed could not translate the upstream stream")
        except Exception:
            stats.ending = "internal_error"
    finally:
        upstream.close()
        stats.events_in = pump.events_in
        stats.events_out += pump.packed
        if registry is not None:
            registry.discard(handle)
        sink.open_stream = None
    return stats


class _ClientGone(Exception):
    pass


class _TotalTimeout(Exception):
    pass


class _IdleTimeout(Exception):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


_P_in = TypeVar("_P_in", bytes, list[bytes], list[Out], contravariant=True)


class _Write(Protocol[_P_in]):
    """The relay's write: ``data`` after what is pending; ``last`` closes the sink."""

    def __call__(self, data: _P_in, *, last: bool = False, flush: bool = False) -> Awaitable[None]: ...


async def _fail(
    pump: Pump, write: _Write[P], sink: FrameSink[P], stats: RelayStats, code: str, message: str, *, how: str = ""
) -> None:
    """End the stream on ``code``: failed, or ``how`` the client asked (``cancelled``, ``steered``)."""
    stats.ending = code
    if how == "cancelled":
        out, stats.error = pump.cancel(message), None
    elif how == "steered":
        out, stats.error = pump.steer(message), None
    else:
        out, stats.error = pump.fail(code, message), message
    stats.events_out += len(out)
    try:
        await write(sink.render(out) if out else sink.empty, last=True)
    except _ClientGone:
        stats.ending = "client_disconnected"
