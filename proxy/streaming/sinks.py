"""Sinks: where a translated stream's frames go, one per client connection.

The relay hands a sink the machine's outputs and never knows the transport. A sink says how
outputs become a payload (``render``), writes one payload (``write``, the per-chunk path: for SSE
it is the response's own bound ``write``, so the hot loop pays no extra call), and owns the
transport's policies:

  - SSE (``SSESink``): ``event:``/``data:`` frames over chunked HTTP. The status line and headers
    wait for the first body write (``EventStreamResponse``); an SSE comment every ``keepalive``
    seconds of upstream silence; the last write carries the end of the chunked body and, for
    chat clients, ``data: [DONE]``.
  - WebSocket (``WebSocketSink``): one JSON text frame per event, no framing text, no ``[DONE]``;
    keepalive is a ping; the end of a response is not the end of the socket.

A payload is ``bytes`` (SSE) or a list of ``bytes`` documents (WebSocket); both add with ``+``,
which is how the relay joins the start events to the first upstream data. ``framing`` is what
the machines put around the delta frames they render themselves (``translators.sse.Framing``).
A client that has gone away makes ``write`` raise ``ConnectionResetError``.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from aiohttp import web

from crossfeed.translators.sse import JSON_FRAMING, SSE_FRAMING, Framing, Out, render_json

# A payload: what ``render`` makes of a machine's outputs and one ``write`` takes. SSE: bytes;
# WebSocket: one document per frame; the n-choice writer (proxy/turns/reverse.py): the outputs as they are.
P = TypeVar("P", bytes, list[bytes], list[Out])


class FrameSink(Protocol[P]):
    """What the relay and the exchange use of a sink, for one payload type ``P``: the relay is
    generic in it, so a render's payload only ever goes to the same sink's write."""

    @property
    def render(self) -> Callable[[list[Out]], P]: ...
    @property
    def write(self) -> Callable[[P], Awaitable[None]]: ...
    @property
    def empty(self) -> P: ...
    @property
    def framing(self) -> Framing: ...

    open_stream: Any  # the relay running into this sink (proxy.streaming.relay.OpenStream)

    async def flush(self) -> None: ...
    async def keepalive(self) -> None: ...
    async def close(self, last: P) -> None: ...
    async def end(self, events: list[Out]) -> None: ...


KEEPALIVE_FRAME = b": keepalive\n\n"
SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


class EventStreamResponse(web.StreamResponse):
    """A streamed answer whose status line and headers wait for the first body write and go out
    in the same socket write: one system call less per stream. The relay writes within its
    first-flush delay of starting (the start events, or the headers alone), so a client never
    waits longer than that for the headers. (aiohttp's own switch for this, the one its
    ``web.Response`` uses; on a version without it the headers simply go out at ``prepare``.)"""

    _send_headers_immediately = False


class SSESink:
    __slots__ = ("response", "render", "write", "done_frame", "empty", "framing", "open_stream")

    def __init__(
        self, response: web.StreamResponse, render: Callable[[list[Any]], bytes], *, done_frame: bytes = b""
    ) -> None:
        self.response = response
        self.render = render
        self.write: Callable[[bytes], Awaitable[None]] = response.write
        self.done_frame = done_frame
        self.empty = b""
        self.framing: Framing = SSE_FRAMING
        self.open_stream: Any = None  # the relay running into this sink (proxy.streaming.relay.OpenStream)

    async def flush(self) -> None:
        """Send what is held back: an empty write sends the headers of an EventStreamResponse."""
        await self.response.write(b"")

    async def keepalive(self) -> None:
        await self.response.write(KEEPALIVE_FRAME)

    async def close(self, last: bytes) -> None:
        await self.response.write_eof(last + self.done_frame)

    async def end(self, events: list[Any]) -> None:
        """Close with these outputs as the last write (the exchange ending a Response)."""
        await self.close(self.render(events) if events else self.empty)


class WebSocketSink:
    """Frames of one response on a socket that outlives it. ``sent`` counts the frames written.

    The frames of one payload (the events of one upstream read) go out in one transport write,
    as SSE frames do: each ``send_frame`` is a socket write of its own, and one per event cost
    far more CPU per chunk than SSE (measured in docs/DESIGN.md). The socket is made without
    compression, so a frame is a 2-10 byte header and the JSON (RFC 6455 5.2; server frames are
    not masked). Flow control is aiohttp's: while the transport has paused writing, the write
    waits on the connection's ``drain``."""

    __slots__ = (
        "ws",
        "request",
        "render",
        "write",
        "empty",
        "framing",
        "sent",
        "open_stream",
        "_transport",
        "_protocol",
    )

    def __init__(self, ws: web.WebSocketResponse, request: web.BaseRequest) -> None:
        self.ws = ws
        self.request = request
        self._transport = request.transport  # the connection's, for its whole life
        self._protocol = request.protocol
        self.render = render_json
        self.write = self._write
        self.empty: list[bytes] = []
        self.framing: Framing = JSON_FRAMING
        self.sent = 0
        self.open_stream: Any = None  # the relay running into this sink (proxy.streaming.relay.OpenStream)

    async def _write(self, frames: list[bytes]) -> None:
        transport = self._transport
        if transport is None or transport.is_closing() or self.ws.closed:
            raise ConnectionResetError("the client's socket is closed")
        if len(frames) == 1:  # the common case on the per-chunk path
            doc = frames[0]
            n = len(doc)
            transport.write(
                (_LEN1(0x81, n) if n < 126 else _LEN2(0x81, 126, n) if n < 65536 else _LEN3(0x81, 127, n)) + doc
            )
        else:
            transport.write(text_frames(frames))
        self.sent += len(frames)
        if self._protocol.writing_paused:
            await self.request.writer.drain()

    async def flush(self) -> None:
        return None

    async def keepalive(self) -> None:
        try:
            await self.ws.ping()
        except (RuntimeError, OSError) as exc:
            raise ConnectionResetError(str(exc)) from None

    async def close(self, last: list[bytes]) -> None:
        if last:
            await self._write(last)

    async def end(self, events: list[Any]) -> None:
        """Close with these outputs as the last write (the exchange ending a Response)."""
        await self.close(self.render(events) if events else self.empty)


_LEN1 = struct.Struct("!BB").pack
_LEN2 = struct.Struct("!BBH").pack
_LEN3 = struct.Struct("!BBQ").pack


def text_frames(docs: list[bytes]) -> bytes:
    """Unmasked, uncompressed, final WebSocket text frames, one per document."""
    parts = []
    for doc in docs:
        n = len(doc)
        parts.append(_LEN1(0x81, n) if n < 126 else _LEN2(0x81, 126, n) if n < 65536 else _LEN3(0x81, 127, n))
        parts.append(doc)
    return b"".join(parts)


# A sink of any payload, where the code at hand passes it on or uses it whole (render then
# write of the same sink); the relay itself takes a ``FrameSink[P]``.
Sink = FrameSink[Any]


# Opens an SSE stream when a turn's stream begins; None when the client has already gone.
SSEOpener = Callable[[], Awaitable[SSESink | None]]


def sse_opener(
    request: web.Request, render: Callable[[list[Any]], bytes], *, done_frame: bytes = b""
) -> tuple[EventStreamResponse, SSEOpener]:
    """An event-stream response and the opener a turn calls when its stream begins: it sends
    the headers then, and gives None when the client has already gone."""
    response = EventStreamResponse(headers=SSE_HEADERS)

    async def open_sink() -> SSESink | None:
        try:
            await response.prepare(request)
        except ConnectionResetError:
            return None
        return SSESink(response, render, done_frame=done_frame)

    return response, open_sink
