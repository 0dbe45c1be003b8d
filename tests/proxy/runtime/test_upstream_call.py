"""proxy/runtime/upstream_call.py: an upstream POST on aiohttp's connector and parser, held to
what ``ClientSession.request`` sends and answers, over a real loopback socket to a raw server
that records every request head and connection."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Callable, Mapping

import aiohttp
import pytest
from aioresponses import aioresponses

from crossfeed.proxy.runtime import upstream_call
from crossfeed.proxy.upstream import new_session

pytestmark = pytest.mark.asyncio

BODY = b'{"model":"m","messages":[]}'
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "x-request-id": "r1"}
CHUNKED_OK = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"6\r\ndata: \r\n4\r\n{}\n\n\r\n0\r\n\r\n"
)


class RawServer:
    """Answers each request on a connection with the next of ``answers`` (bytes, or a callable of
    the request head); records the heads and counts the connections."""

    def __init__(self, answers: list[bytes | Callable[[bytes], bytes]]) -> None:
        self.answers = answers
        self.heads: list[bytes] = []
        self.bodies: list[bytes] = []
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                self.heads.append(head)
                self.bodies.append(await reader.readexactly(length))
                answer = self.answers.pop(0)
                writer.write(answer(head) if callable(answer) else answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/chat/completions"


def fields(head: bytes) -> tuple[bytes, dict[bytes, bytes]]:
    """The request line and the header fields (names lowered) of a head."""
    line, *rest = head.rstrip(b"\r\n").split(b"\r\n")
    return line, {k.strip().lower(): v.strip() for k, v in (f.split(b":", 1) for f in rest)}


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    s = new_session()
    yield s
    await s.close()


TIMEOUT = aiohttp.ClientTimeout(total=None, connect=5, sock_connect=5)


async def read_all(resp: aiohttp.ClientResponse) -> bytes:
    out = b""
    while chunk := await resp.content.readany():
        out += chunk
    return out


async def test_the_request_and_answer_are_those_of_session_request(session: aiohttp.ClientSession) -> None:
    assert upstream_call.usable(session)
    async with RawServer([CHUNKED_OK, CHUNKED_OK]) as server:
        lean = await upstream_call.post(session, server.url, BODY, HEADERS, TIMEOUT)
        lean_body = await read_all(lean)
        full = await session.request("POST", server.url, data=BODY, headers=HEADERS, timeout=TIMEOUT)
        full_body = await read_all(full)
    assert lean.status == full.status == 200 and lean.reason == full.reason == "OK"
    assert lean_body == full_body == b"data: {}\n\n"
    assert dict(lean.headers) == dict(full.headers)
    assert server.bodies == [BODY, BODY]
    (lean_line, lean_fields), (full_line, full_fields) = map(fields, server.heads)
    assert lean_line == full_line == b"POST /v1/chat/completions HTTP/1.1"
    assert lean_fields == full_fields  # Host, Content-Length, the defaults (Accept-Encoding, User-Agent), the call's
    assert lean_fields[b"content-length"] == str(len(BODY)).encode() and lean_fields[b"x-request-id"] == b"r1"
    assert server.connections == 1  # the second call reused the first one's connection: EOF gave it back


async def test_a_header_of_the_call_replaces_the_default(session: aiohttp.ClientSession) -> None:
    async with RawServer([CHUNKED_OK]) as server:
        resp = await upstream_call.post(session, server.url, BODY, {**HEADERS, "user-agent": "codex/1"}, TIMEOUT)
        await read_all(resp)
    head = server.heads[0].lower()
    assert head.count(b"user-agent:") == 1 and b"user-agent: codex/1\r\n" in head


async def test_a_line_break_in_a_header_is_refused_before_any_connection(session: aiohttp.ClientSession) -> None:
    async with RawServer([CHUNKED_OK]) as server:
        with pytest.raises(ValueError):
            await upstream_call.post(session, server.url, BODY, {**HEADERS, "x-request-id": "a\r\nX-Evil: 1"}, TIMEOUT)
        await asyncio.sleep(0.05)
    assert server.connections == 0 and server.heads == []


async def test_a_body_not_read_whole_closes_its_connection(session: aiohttp.ClientSession) -> None:
    endless = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"  # never ends
    async with RawServer([endless, CHUNKED_OK]) as server:
        first = await upstream_call.post(session, server.url, BODY, HEADERS, TIMEOUT)
        assert await first.content.readany() == b"hello"
        first.release()  # (the relay's end of a stream the client left)
        second = await upstream_call.post(session, server.url, BODY, HEADERS, TIMEOUT)
        assert await read_all(second) == b"data: {}\n\n"
    assert server.connections == 2


async def test_informational_answers_are_skipped_and_bodies_decompressed(session: aiohttp.ClientSession) -> None:
    packed = gzip.compress(b'{"ok":true}')
    answer = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
        b"Content-Length: %d\r\n\r\n" % len(packed) + packed
    )
    async with RawServer([answer]) as server:
        resp = await upstream_call.post(session, server.url, BODY, HEADERS, TIMEOUT)
        assert resp.status == 200
        assert await resp.json() == {"ok": True}


async def test_an_error_status_is_an_answer_and_a_broken_head_an_error(session: aiohttp.ClientSession) -> None:
    missing = b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot here!"
    async with RawServer([missing, b"HTTP/1.1 abc\r\n\r\n"]) as server:
        resp = await upstream_call.post(session, server.url, BODY, HEADERS, TIMEOUT)
        assert (resp.status, await resp.read()) == (404, b"not here!")
        with pytest.raises(aiohttp.ClientResponseError):
            await upstream_call.post(session, server.url, BODY, HEADERS, TIMEOUT)


async def test_a_refused_connection_raises_what_session_request_raises(session: aiohttp.ClientSession) -> None:
    async with RawServer([]) as server:
        url = server.url
    with pytest.raises(aiohttp.ClientConnectorError):
        await upstream_call.post(session, url, BODY, HEADERS, TIMEOUT)


async def test_only_adopted_sessions_with_aiohttps_own_request() -> None:
    # With the aiohttp .ci/run installs, every internal the call reads is where it expects it: an
    # update that moves one fails here, not silently back to the slower session.request.
    assert upstream_call.USABLE, f"aiohttp {aiohttp.__version__} does not keep what upstream_call reads"
    plain = aiohttp.ClientSession()
    ours = new_session()
    try:
        assert not upstream_call.usable(plain)
        assert upstream_call.usable(ours)
        with aioresponses():  # a test double in place of ClientSession._request: it sees every call
            assert not upstream_call.usable(ours)
        assert upstream_call.usable(ours)
    finally:
        await plain.close()
        await ours.close()
    assert not upstream_call.usable(ours)  # closed


async def test_the_upstream_clients_posts_take_it_and_other_calls_do_not(
    session: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crossfeed.proxy import upstream
    from crossfeed.proxy.runtime.config import Upstream

    made: list[str] = []
    post = upstream_call.post

    async def spy(
        s: aiohttp.ClientSession, url: str, data: bytes, headers: Mapping[str, str], timeout: aiohttp.ClientTimeout
    ) -> aiohttp.ClientResponse:
        made.append("post")
        return await post(s, url, data, headers, timeout)

    monkeypatch.setattr(upstream_call, "post", spy)
    async with RawServer([CHUNKED_OK, CHUNKED_OK]) as server:
        up = Upstream(name="u", base_url=f"http://127.0.0.1:{server.port}/v1")
        resp = await upstream.open_upstream(session, up, "/chat/completions", {"model": "m"}, dict(HEADERS))
        assert await read_all(resp) == b"data: {}\n\n"
        assert made == ["post"]
        resp = await upstream.send(session, up, "POST", server.url, data=BODY, headers=HEADERS, params={"a": "1"})
        assert await read_all(resp) == b"data: {}\n\n"
    assert made == ["post"]  # (a call with anything else, here a query, is session.request's)
    assert fields(server.heads[1])[0] == b"POST /v1/chat/completions?a=1 HTTP/1.1"


async def test_a_host_header_of_the_call_is_the_only_one(session: aiohttp.ClientSession) -> None:
    headers = {**HEADERS, "host": "backend.internal"}  # (an upstream's configured headers may name one)
    async with RawServer([CHUNKED_OK, CHUNKED_OK]) as server:
        await read_all(await upstream_call.post(session, server.url, BODY, headers, TIMEOUT))
        await read_all(await session.request("POST", server.url, data=BODY, headers=headers, timeout=TIMEOUT))
    assert [h.lower().count(b"\r\nhost:") for h in server.heads] == [1, 1]
    assert fields(server.heads[0]) == fields(server.heads[1])


async def test_the_body_is_framed_once_whatever_the_headers_say(session: aiohttp.ClientSession) -> None:
    headers = {**HEADERS, "content-length": "5", "Transfer-Encoding": "chunked"}  # (an upstream's configured headers)
    async with RawServer([CHUNKED_OK, CHUNKED_OK]) as server:
        for _ in range(2):  # (the second call's head from what the first one's learned)
            await read_all(await upstream_call.post(session, server.url, BODY, headers, TIMEOUT))
    for head in server.heads:
        _, found = fields(head)
        assert found[b"content-length"] == str(len(BODY)).encode() and b"transfer-encoding" not in found
        assert head.lower().count(b"\r\ncontent-length:") == 1
    assert server.bodies == [BODY, BODY]


async def test_the_connect_bound_raises_what_session_request_raises(session: aiohttp.ClientSession) -> None:
    import socket

    listener = socket.socket()  # never accepts; its queue filled, a further connect hangs in SYN
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = [socket.socket() for _ in range(8)]
    try:
        for f in fillers:
            f.setblocking(False)
            f.connect_ex(("127.0.0.1", port))
        quick = aiohttp.ClientTimeout(total=None, connect=0.3, sock_connect=0.3)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        with pytest.raises(aiohttp.ConnectionTimeoutError):
            await session.request("POST", url, data=BODY, headers=HEADERS, timeout=quick)
        with pytest.raises(aiohttp.ConnectionTimeoutError):
            await upstream_call.post(session, url, BODY, HEADERS, quick)
    finally:
        for f in fillers:
            f.close()
        listener.close()
