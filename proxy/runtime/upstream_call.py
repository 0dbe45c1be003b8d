"""A POST to an upstream on aiohttp's own connector, connection and parser, without the request
machinery of ``ClientSession.request`` around them.

``ClientSession.request`` is made for any request: it merges and checks the URL, the session's
headers and cookies, builds a ``ClientRequest`` (its auto headers, body payload, writer) and then
a ``ClientResponse``. For one JSON POST to a configured backend that costs about 175,000
instructions and 27-29 % of the call's CPU time more than this module's call
(bench/client_cost.py): an eighth of a short turn's instructions. Here the call
keeps everything of aiohttp that matters on the wire:

- the connection: ``connector.connect`` (its pool and keep-alive, DNS, TLS, the connect timeout)
  with a ``ClientRequest`` made once per URL, of which the connector reads the connection key;
- the head's bytes: aiohttp's own header serializer (which refuses a CR or LF in a name or
  value), with the headers aiohttp adds by default (Accept, Accept-Encoding, User-Agent) where the
  call has none of its own, ``Host`` and ``Content-Length``;
- the answer: the connection protocol's C parser (chunked bodies, decompression), a genuine
  ``ClientResponse`` filled in as its ``start`` fills it, whose body is aiohttp's ``StreamReader``
  and whose EOF, ``release`` and ``close`` give the connection back or close it as aiohttp does.
  A parser error becomes ``ClientResponseError``, as in ``start``; any failure before the head
  is in closes the connection.

It reads attributes aiohttp keeps private, so it is used only where they are what this module
expects (``USABLE``), and only on the sessions ``proxy/upstream.py`` makes (``adopt``) while
``ClientSession._request`` is aiohttp's own (a test double that replaces it, such as
aioresponses, still sees every call). Anything else goes through ``session.request``.
tests/proxy/runtime/test_upstream_call.py holds both ways to the same answers.
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections.abc import Mapping
from typing import NamedTuple, cast

import aiohttp
from aiohttp import client_exceptions, client_reqrep, http_writer
from aiohttp.abc import AbstractStreamWriter
from aiohttp.helpers import TimerNoop
from aiohttp.http import SERVER_SOFTWARE
from aiohttp.http_exceptions import HttpProcessingError
from multidict import CIMultiDictProxy
from yarl import URL

# Read with getattr: an aiohttp without one of them leaves USABLE false, never a failed import.
# aiohttp's header serializer (C where built): refuses a CR or LF in a name or a value.
_serialize_headers = getattr(http_writer, "_serialize_headers", None)
_DEFAULT_HEADERS = getattr(client_reqrep.ClientRequest, "DEFAULT_HEADERS", None)
# What aiohttp raises for a write to a connection that is closing (3.10 on).
_RESET: type[Exception] = getattr(client_exceptions, "ClientConnectionResetError", aiohttp.ClientConnectionError)
_REQUEST = aiohttp.ClientSession._request  # aiohttp's own, as imported (a test double replaces it)
# What ClientResponse.start sets on a response, which ``post`` sets the same way.
_RESPONSE_FIELDS = ("_closed", "_protocol", "_connection", "_headers", "_raw_headers", "_response_eof", "content")


def _usable() -> bool:
    """aiohttp keeps what this module uses where it expects it (3.14's layout)."""
    try:
        params = inspect.signature(aiohttp.ClientResponse.__init__).parameters
        proto = inspect.signature(aiohttp.client_proto.ResponseHandler.set_response_params).parameters
    except (TypeError, ValueError):
        return False
    return (
        callable(_serialize_headers)
        and {"writer", "continue100", "timer", "request_info", "traces", "loop", "session", "stream_writer"}
        <= set(params)
        and {"read_until_eof", "auto_decompress", "read_bufsize", "max_line_size", "max_field_size"} <= set(proto)
        and set(_RESPONSE_FIELDS) <= set(aiohttp.ClientResponse.start.__code__.co_names)
        and isinstance(_DEFAULT_HEADERS, dict)
        and hasattr(client_reqrep, "RequestInfo")
    )


USABLE = _usable()

# The sessions proxy/upstream.py made (nothing else is set on them that a call would miss here).
_ADOPTED: weakref.WeakSet[aiohttp.ClientSession] = weakref.WeakSet()


def adopt(session: aiohttp.ClientSession) -> None:
    """Let ``post`` make this session's calls (a session made by proxy/upstream.py ``new_session``)."""
    if USABLE:
        _ADOPTED.add(session)


def usable(session: aiohttp.ClientSession) -> bool:
    """``post`` may make this call: an adopted session, open, whose request is aiohttp's own."""
    return session in _ADOPTED and aiohttp.ClientSession._request is _REQUEST and not session.closed


class _Target(NamedTuple):
    url: URL
    request: client_reqrep.ClientRequest  # the connector reads its connection key, nothing else
    line: str  # the request line
    host: str
    info: client_reqrep.RequestInfo  # the ClientResponse's


class _Sent:
    """What a ``ClientResponse`` made after its request was sent reads of the writer."""

    __slots__ = ("output_size",)

    def __init__(self, size: int) -> None:
        self.output_size = size


_TARGETS: dict[str, _Target] = {}
_DEFAULTS: tuple[tuple[str, str], ...] = (
    *(_DEFAULT_HEADERS.items() if isinstance(_DEFAULT_HEADERS, dict) else ()),
    ("User-Agent", SERVER_SOFTWARE),
)


def _target(url: str, loop: asyncio.AbstractEventLoop) -> _Target:
    """The parts of a call to ``url`` that do not change between calls (one per upstream path)."""
    found = _TARGETS.get(url)
    if found is not None and found.request.loop is loop:
        return found
    parsed = URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.raw_host:
        raise aiohttp.InvalidUrlClientError(url)
    request = client_reqrep.ClientRequest("POST", parsed, loop=loop, ssl=True)
    host = getattr(parsed, "host_port_subcomponent", None) or parsed.raw_authority
    info = client_reqrep.RequestInfo(parsed, "POST", CIMultiDictProxy(request.headers), parsed)
    if len(_TARGETS) > 256:  # (a few per upstream: only tests make many)
        _TARGETS.clear()
    found = _TARGETS[url] = _Target(parsed, request, f"POST {parsed.raw_path_qs} HTTP/1.1", host, info)
    return found


def _head(target: _Target, headers: Mapping[str, str], size: int) -> bytes:
    """The request head: ``Host`` (unless the call sets its own, as aiohttp lets it), aiohttp's
    default headers the call does not set, the call's, and the length of the body, said once (a
    length or transfer coding among the call's headers, an operator's upstream headers say, is
    not sent: two framings of one body are how requests get smuggled)."""
    key = (target.host, tuple(headers))  # (the names a call sends are the same call after call)
    found = _ADDED.get(key)
    if found is None:
        if len(_ADDED) > 256:
            _ADDED.clear()
        found = _ADDED[key] = _added(target.host, headers)
    added, framed = found
    if framed:
        headers = {name: value for name, value in headers.items() if name.lower() not in _FRAMING}
    fields = {**added, **headers}
    fields["Content-Length"] = str(size)
    assert _serialize_headers is not None  # (USABLE)
    head: bytes = _serialize_headers(target.line, fields)
    return head


def _added(host: str, headers: Mapping[str, str]) -> tuple[dict[str, str], bool]:
    """The fields aiohttp adds to a call with these header names (``Host`` and its defaults, those
    the call does not set, names compared without case); and whether the call sets a framing."""
    given = {name.lower() for name in headers}
    added = {} if "host" in given else {"Host": host}
    added.update((name, value) for name, value in _DEFAULTS if name.lower() not in given)
    return added, not given.isdisjoint(_FRAMING)


_FRAMING = frozenset({"content-length", "transfer-encoding"})
# The fields added to a call, by its host and header names (a few per upstream).
_ADDED: dict[tuple[str, tuple[str, ...]], tuple[dict[str, str], bool]] = {}


async def post(
    session: aiohttp.ClientSession, url: str, data: bytes, headers: Mapping[str, str], timeout: aiohttp.ClientTimeout
) -> aiohttp.ClientResponse:
    """POST ``data`` to ``url``; the response once its head is in (any status; redirects are
    answers like any other). Raises what ``session.request`` raises for the same failures."""
    loop = asyncio.get_running_loop()
    target = _target(url, loop)
    head = _head(target, headers, len(data))  # (a CR or LF in a header: ValueError, before a connection)
    connector = session.connector
    assert connector is not None
    try:
        conn = await connector.connect(target.request, traces=[], timeout=timeout)
    except TimeoutError as exc:  # the connect bound, as ClientSession.request raises it
        raise aiohttp.ConnectionTimeoutError(f"Connection timeout to host {target.url}") from exc
    try:
        proto, transport = conn.protocol, conn.transport
        if proto is None or transport is None or transport.is_closing():
            raise _RESET("Cannot write to closing transport")
        proto.set_response_params(
            read_until_eof=True,
            auto_decompress=session.auto_decompress,
            read_bufsize=session._read_bufsize,
            timeout_ceil_threshold=connector._timeout_ceil_threshold,
            max_line_size=session._max_line_size,
            max_field_size=session._max_field_size,
        )
        transport.writelines((head, data))
        response = aiohttp.ClientResponse(
            "POST",
            target.url,
            writer=None,
            continue100=None,
            timer=TimerNoop(),
            request_info=target.info,
            traces=[],
            loop=loop,
            session=session,
            stream_writer=cast(AbstractStreamWriter, _Sent(len(head) + len(data))),  # (its output_size only)
        )
        while True:  # as ClientResponse.start: informational answers skipped
            try:
                message, payload = await proto.read()
            except HttpProcessingError as exc:
                raise aiohttp.ClientResponseError(
                    target.info, (), status=exc.code, message=exc.message, headers=exc.headers
                ) from exc
            if message.code < 100 or message.code > 199 or message.code == 101:
                break
    except BaseException as exc:
        conn.close()
        if isinstance(exc, OSError) and not isinstance(exc, aiohttp.ClientError | TimeoutError):
            raise aiohttp.ClientOSError(*exc.args) from exc  # (as ClientSession.request raises it)
        raise
    response._closed = False
    response._protocol = proto
    response._connection = conn
    payload.on_eof(response._response_eof)
    response.version = message.version
    response.status = message.code
    response.reason = message.reason
    response._headers = message.headers
    response._raw_headers = message.raw_headers
    response.content = payload
    return response
