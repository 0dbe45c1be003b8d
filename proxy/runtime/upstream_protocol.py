"""The protocol of crossfeed's upstream connections: aiohttp's, without a resume per chunk read;
and the body the relay reads (``RelayedBody``): aiohttp's, read whole instead of a chunk a call.

An upstream stream arrives as HTTP chunks, one SSE frame each, and aiohttp's ``StreamReader``
keeps each chunk as a piece of its buffer. From aiohttp 3.14 on, taking a piece out
(``readany``, ``read_nowait``: one call per piece) calls the connection protocol's
``resume_reading`` whenever the buffer is under its low-water mark, paused or not; and
``resume_reading`` feeds the HTTP parser an empty ``data_received(b"")`` and resumes the
transport. For a connection whose reading was never paused that does nothing, at a cost of
five Python calls per upstream frame: about 4,700 instructions a frame, 6 to 7 % of a short turn
(docs/benchmark.md, "No resume per chunk read, and the forward machine's fixed cost").

``ResponseHandler`` here is aiohttp's, but for a ``resume_reading`` that returns at once when
there is nothing to resume: reading not paused (``_reading_paused``: every pause aiohttp makes,
for a full buffer, too many chunks or a decompression that has to wait, goes through
``pause_reading``, which sets it; the parser holds input back only while it is set), no buffer
hold (``_buffer_paused``), and no upgraded or WebSocket parser. Any other call is aiohttp's own.

It reads attributes aiohttp keeps private, so it is installed only where they are what this
module expects (``installable``: aiohttp's ``ResponseHandler`` as the connector's factory, the
flags where 3.14 keeps them); anywhere else the connector keeps aiohttp's protocol. A body
becomes a ``RelayedBody`` only where ``StreamReader`` keeps, in its slots, the attributes its
read uses (``BODY_USABLE``). tests/proxy/runtime/test_upstream_protocol.py checks that both are
used with the aiohttp .ci/run installs, and that paused streams (a full buffer, many small
chunks, a gzip body) still arrive whole, read either way.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

import aiohttp
from aiohttp.base_protocol import BaseProtocol
from aiohttp.client_proto import ResponseHandler as AiohttpHandler
from aiohttp.streams import StreamReader

_FLAGS = ("_reading_paused", "_buffer_paused", "_upgraded")

# A no-op in C: ``NoneType()`` returns ``None``.
_NOTHING: Callable[[], None] = type(None)


class ResponseHandler(AiohttpHandler):
    def resume_reading(self, resume_parser: bool = True) -> None:
        if self._reading_paused or self._buffer_paused or self._upgraded or self._payload_parser is not None:
            super().resume_reading(resume_parser)


def _handler(loop: asyncio.AbstractEventLoop) -> AiohttpHandler:
    return ResponseHandler(loop)


def installable(connector: aiohttp.BaseConnector) -> bool:
    """The connector makes aiohttp's ``ResponseHandler``, whose flags are where this expects them."""
    factory = getattr(connector, "_factory", None)
    return (
        isinstance(factory, functools.partial)
        and factory.func is AiohttpHandler
        and not factory.args
        and set(factory.keywords) == {"loop"}
        and all(flag in BaseProtocol.__slots__ for flag in _FLAGS)
        and "_payload_parser" in AiohttpHandler.__init__.__code__.co_names
    )


def install(connector: aiohttp.BaseConnector) -> bool:
    """Have ``connector`` open its connections with this module's protocol, where it can."""
    if not installable(connector):
        return False
    connector._factory = functools.partial(_handler, **connector._factory.keywords)
    return True


# What ``RelayedBody``'s read uses of aiohttp's ``StreamReader`` (its slots in 3.14).
_BODY_SLOTS = (
    "_buffer",
    "_buffer_offset",
    "_cursor",
    "_eof",
    "_exception",
    "_http_chunk_splits",
    "_low_water",
    "_protocol",
    "_size",
    "_timer",
    "_waiter",
)
BODY_USABLE = set(_BODY_SLOTS) <= set(StreamReader.__slots__)


class RelayedBody(StreamReader):
    """An upstream body that the relay alone reads, all of what is in at each read.

    aiohttp's ``StreamReader`` keeps each HTTP chunk (one SSE frame) as a piece of its buffer,
    notes where each chunk ended (for ``readchunk``) and hands the pieces out one call each:
    three Python calls per upstream frame besides ``feed_data``. The relay reads with
    ``read_nowait()`` and ``readany()`` only, so here the chunk ends are not noted and a read
    joins the whole buffer at once. Everything else (``feed_data``, its pause at the high-water
    mark, EOF, errors, the waiter) is aiohttp's; a read that is not of the whole buffer, or one
    made while another waits, or after an error, is aiohttp's own too. ``readchunk`` and
    ``iter_chunks`` do not see chunk ends on such a body: only the relay and the pass-through's
    copy loop (``iter_any``, which is ``readany``) read it.
    """

    __slots__ = ()

    # aiohttp's HTTP parser calls these around every upstream chunk. Here nothing is noted, and
    # the call is to ``NoneType``, a C callable whose result is ``None``: no Python frame per chunk.
    begin_http_chunk_receiving = end_http_chunk_receiving = staticmethod(_NOTHING)

    def read_nowait(self, n: int = -1) -> bytes:
        waiter = self._waiter
        if n != -1 or self._buffer_offset or self._exception is not None or (waiter is not None and not waiter.done()):
            return super().read_nowait(n)
        self._timer.assert_timeout()
        buffer = self._buffer
        if not buffer:
            return b""
        data = buffer.popleft() if len(buffer) == 1 else b"".join(buffer)
        buffer.clear()
        size = len(data)
        self._size -= size
        self._cursor += size
        splits = self._http_chunk_splits  # chunk ends noted before the body became this class
        if splits:
            splits.clear()
        if self._size < self._low_water:
            self._protocol.resume_reading()
        return data

    async def readany(self) -> bytes:
        if self._exception is not None:
            raise self._exception
        while not self._buffer and not self._eof:
            await self._wait("readany")
        return self.read_nowait()


def relayed(body: aiohttp.StreamReader) -> None:
    """Make an upstream body that the relay or the pass-through is about to stream a ``RelayedBody`` (only aiohttp's
    own ``StreamReader``, whose slots it shares, and where those hold what its read uses; any
    other reader is left as it is)."""
    if type(body) is StreamReader and BODY_USABLE:
        body.__class__ = RelayedBody
