"""crossfeed's upstream connection protocol (proxy/runtime/upstream_protocol.py): aiohttp's, without the
resume it makes per chunk read when nothing is paused; and the body the relay reads
(``RelayedBody``), whole buffer at a time.

Against a real aiohttp server on a real port, read through crossfeed's own session
(``new_session``): a stream read in one go resumes nothing, and every way aiohttp pauses a
connection (a buffer past its high-water mark, too many small chunks waiting, a gzip body
decompressed as it is read) still resumes it, with every byte delivered in order, read as
aiohttp reads or as the relay does.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.base_protocol import BaseProtocol
from aiohttp.client_proto import ResponseHandler as AiohttpHandler

from crossfeed.proxy.runtime import upstream_protocol
from crossfeed.proxy.runtime.upstream_protocol import RelayedBody, ResponseHandler, relayed
from crossfeed.proxy.upstream import new_session

pytestmark = pytest.mark.timeout(60)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_get("/stream", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"http://127.0.0.1:{port}/stream"

    yield start
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often the protocol was paused, asked to resume, and passed that on to aiohttp's."""
    seen = {"pause": 0, "resume": 0, "aiohttp_resume": 0}
    ours, theirs, pause = ResponseHandler.resume_reading, AiohttpHandler.resume_reading, AiohttpHandler.pause_reading

    def resume(self: Any, resume_parser: bool = True) -> None:
        seen["resume"] += 1
        ours(self, resume_parser)

    def aiohttp_resume(self: Any, resume_parser: bool = True) -> None:
        seen["aiohttp_resume"] += 1
        theirs(self, resume_parser)

    def paused(self: Any) -> None:
        seen["pause"] += 1
        pause(self)

    monkeypatch.setattr(ResponseHandler, "resume_reading", resume)
    monkeypatch.setattr(AiohttpHandler, "resume_reading", aiohttp_resume)
    monkeypatch.setattr(AiohttpHandler, "pause_reading", paused)
    return seen


def frames(n: int, size: int = 40) -> list[bytes]:
    return [b"data: " + (b"%08d" % i) * (size // 8) + b"\n\n" for i in range(n)]


async def read_all(url: str, *, every: int = 0, wait: float = 0.002, relay: bool = False) -> tuple[bytes, type]:
    """The body read with ``readany``, waiting ``wait`` seconds every ``every`` reads (0:
    never); with ``relay``, as the relay reads it: a ``RelayedBody``, ``read_nowait`` first."""
    session = new_session()
    try:
        async with session.get(url) as resp:
            assert resp.connection is not None
            protocol = type(resp.connection.protocol)
            got = []
            reads = 0
            if relay:
                relayed(resp.content)
                assert type(resp.content) is RelayedBody
                got.append(resp.content.read_nowait())
            while chunk := await resp.content.readany():
                got.append(chunk)
                reads += 1
                if every and reads % every == 0:
                    await asyncio.sleep(wait)  # a slow client: the buffer fills meanwhile
            return b"".join(got), protocol
    finally:
        await session.close()


def test_installed_with_the_aiohttp_the_project_runs_on() -> None:
    """aiohttp 3.14 keeps the flags this reads on its base protocol: the protocol is installed.
    An aiohttp without them (before 3.14, whose reads resume only a paused connection) keeps its
    own protocol."""
    expected = {"_reading_paused", "_buffer_paused", "_upgraded"} <= set(BaseProtocol.__slots__)

    async def made() -> object:
        session = new_session()
        try:
            assert session.connector is not None
            return session.connector._factory()
        finally:
            await session.close()

    assert (type(asyncio.run(made())) is ResponseHandler) is expected
    assert expected or tuple(map(int, aiohttp.__version__.split(".")[:2])) < (3, 14)  # .ci/run's has them


def test_the_relay_reads_whole_bodies_with_the_aiohttp_the_project_runs_on() -> None:
    """``RelayedBody`` reads attributes aiohttp keeps private: they are all where it expects."""
    assert upstream_protocol.BODY_USABLE


async def test_another_factory_is_left_alone() -> None:
    connector = aiohttp.TCPConnector()
    try:
        connector._factory = functools.partial(AiohttpHandler, loop=asyncio.get_running_loop(), extra=1)  # type: ignore[call-arg]
        assert not upstream_protocol.install(connector)
        connector._factory = functools.partial(ResponseHandler, loop=asyncio.get_running_loop())
        assert not upstream_protocol.installable(connector)
    finally:
        await connector.close()


async def test_a_stream_read_at_once_resumes_nothing(
    serve: Callable[[Handler], Awaitable[str]], calls: dict[str, int]
) -> None:
    sent = frames(200)

    async def stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for frame in sent:
            await resp.write(frame)  # a chunk each, as a chat server writes its frames
        await resp.write_eof()
        return resp

    body, protocol = await read_all(await serve(stream), every=1_000_000)
    assert protocol is ResponseHandler
    assert body == b"".join(sent)
    assert calls["resume"] >= 200  # one per chunk taken out of the buffer
    assert calls["pause"] == calls["aiohttp_resume"] == 0  # never paused: nothing passed on


@pytest.mark.parametrize("relay", [False, True], ids=["aiohttp-reads", "relay-reads"])
@pytest.mark.parametrize(
    ("count", "size", "wait"),
    [(20_000, 24, 0.05), (64, 96 * 1024, 0.002)],
    ids=["many-small-chunks", "past-the-high-water-mark"],
)
async def test_a_paused_stream_is_resumed_and_arrives_whole(
    serve: Callable[[Handler], Awaitable[str]], calls: dict[str, int], count: int, size: int, wait: float, relay: bool
) -> None:
    """Over 16,384 chunks waiting (under the bytes' high-water mark), or over 512 KiB waiting."""
    sent = frames(count, size)

    async def stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for frame in sent:
            await resp.write(frame)
        await resp.write_eof()
        return resp

    body, _ = await read_all(await serve(stream), every=1 if wait > 0.01 else 3, wait=wait, relay=relay)
    assert body == b"".join(sent)
    if relay and size < 1024:
        return  # a relayed body notes no chunk ends: many small chunks alone never pause it
    assert calls["pause"] > 0  # aiohttp paused the connection...
    assert calls["aiohttp_resume"] > 0  # ...and its own resume ran


@pytest.mark.parametrize("relay", [False, True], ids=["aiohttp-reads", "relay-reads"])
async def test_a_gzip_stream_decompressed_as_it_is_read_arrives_whole(
    serve: Callable[[Handler], Awaitable[str]], calls: dict[str, int], relay: bool
) -> None:
    """aiohttp decompresses a gzip body a block at a time as the reader drains it (the parser
    holds the rest back): that wait is a pause too."""
    sent = b"".join(frames(150_000, 48))
    packed = gzip.compress(sent, compresslevel=9)

    async def stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Content-Encoding": "gzip"})
        await resp.prepare(request)
        for at in range(0, len(packed), 4096):
            await resp.write(packed[at : at + 4096])
        await resp.write_eof()
        return resp

    body, _ = await read_all(await serve(stream), every=2, relay=relay)
    assert len(sent) > 20 * len(packed)  # (compressed well: far more out than in)
    assert body == sent
    assert calls["pause"] > 0 and calls["aiohttp_resume"] > 0


def sse_stream(sent: list[bytes], *, hold: asyncio.Event | None = None) -> Handler:
    async def stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for frame in sent:
            await resp.write(frame)  # a chunk each
        if hold is not None:
            await hold.wait()
        await resp.write_eof()
        return resp

    return stream


async def until_buffered(content: aiohttp.StreamReader, size: int) -> None:
    for _ in range(2_000):
        if content.total_bytes >= size:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{content.total_bytes} of {size} bytes arrived")


async def test_a_relayed_body_hands_out_all_its_chunks_in_one_read(
    serve: Callable[[Handler], Awaitable[str]], calls: dict[str, int]
) -> None:
    """200 chunks waiting: aiohttp's reader hands out one per ``readany``; the relay's takes
    them all at once, and asks the protocol to resume once for the read, not once a chunk."""
    sent = frames(200)
    hold = asyncio.Event()
    session = new_session()
    try:
        async with session.get(await serve(sse_stream(sent, hold=hold))) as resp:
            await until_buffered(resp.content, len(b"".join(sent)))
            relayed(resp.content)
            before = calls["resume"]
            assert await resp.content.readany() == b"".join(sent)
            assert resp.content.read_nowait() == b""  # nothing left behind, nothing twice
            assert calls["resume"] - before == 1
            hold.set()
            assert await resp.content.readany() == b""  # EOF
            assert resp.content.is_eof()
    finally:
        await session.close()


async def test_a_relayed_body_read_in_part_first_goes_on_where_that_read_stopped(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    """A read of ``n`` bytes, or one after ``unread_data``, leaves a piece cut: aiohttp's own
    read takes over for that, and the bytes still come in order, each once."""
    sent = frames(30)
    session = new_session()
    try:
        async with session.get(await serve(sse_stream(sent))) as resp:
            await until_buffered(resp.content, len(b"".join(sent)))
            relayed(resp.content)
            head = resp.content.read_nowait(7)
            rest = [resp.content.read_nowait()]
            while chunk := await resp.content.readany():
                rest.append(chunk)
            assert head + b"".join(rest) == b"".join(sent)
    finally:
        await session.close()


async def test_a_relayed_body_raises_the_error_that_ended_it() -> None:
    body = aiohttp.StreamReader(protocol=BaseProtocol(asyncio.get_running_loop()), limit=2**16)
    relayed(body)
    body.feed_data(b"data: 1\n\n")
    assert await body.readany() == b"data: 1\n\n"
    body.set_exception(aiohttp.ClientPayloadError("cut short"))
    with pytest.raises(aiohttp.ClientPayloadError, match="cut short"):
        await body.readany()
    with pytest.raises(aiohttp.ClientPayloadError, match="cut short"):
        body.read_nowait()


def test_only_aiohttp_s_own_reader_becomes_a_relayed_body() -> None:
    class Other(aiohttp.StreamReader):
        __slots__ = ()

    loop = asyncio.new_event_loop()
    try:
        other = Other(protocol=BaseProtocol(loop), limit=2**16, loop=loop)
        relayed(other)
        assert type(other) is Other
    finally:
        loop.close()


def test_a_reader_without_the_slots_the_read_uses_stays_aiohttp_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upstream_protocol, "BODY_USABLE", False)
    loop = asyncio.new_event_loop()
    try:
        body = aiohttp.StreamReader(protocol=BaseProtocol(loop), limit=2**16, loop=loop)
        relayed(body)
        assert type(body) is aiohttp.StreamReader
    finally:
        loop.close()
