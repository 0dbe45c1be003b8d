"""Shared pieces of the translating handlers: the request body, the upstream key and headers, anomalies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import orjson
import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from crossfeed.proxy.errors import ClientRequestError
from crossfeed.proxy.keys import CONFIG, ENV
from crossfeed.proxy.runtime.config import Upstream
from crossfeed.proxy.runtime.observability import METRICS
from crossfeed.proxy.upstream import upstream_headers
from crossfeed.translators.responses.create_body import decode_create

log = structlog.get_logger("crossfeed")


class Caller(Protocol):
    """What an upstream call's headers are made from: the application (its environment, its
    config) and the client's headers. A ``web.Request`` is one; so is a ``Turn``."""

    @property
    def app(self) -> web.Application: ...
    @property
    def headers(self) -> Mapping[str, str]: ...


def api_key(caller: Caller, backend: Upstream) -> str | None:
    return caller.app[ENV].get(backend.api_key_env) if backend.api_key_env else None


def outbound_headers(caller: Caller, backend: Upstream) -> dict[str, str]:
    """The upstream request's headers for this client request. With inbound keys configured,
    the client's key is crossfeed's own: it is checked here and never passed to a backend."""
    return upstream_headers(
        backend,
        caller.headers,
        api_key(caller, backend),
        client_key_is_ours=bool(caller.app[CONFIG].server.inbound_keys_env),
    )


def secrets(caller: Caller, backend: Upstream) -> tuple[str, ...]:
    """Values that must never reach a client: the configured upstream key."""
    key = api_key(caller, backend)
    return (key,) if key else ()


def note_anomalies(app: web.Application, diagnostics: dict[str, int]) -> None:
    """Translation anomalies: one log line per stream, counted in metrics."""
    if not diagnostics:
        return
    log.info("translation.anomaly", **diagnostics)
    for kind, n in diagnostics.items():
        app[METRICS].anomalies.labels(kind).inc(n)


# A create body this long or longer is read by decode_create: a shorter one costs less in one
# orjson.loads than in msgspec's pass and a value-by-value build (docs/benchmark.md).
RAW_BODY_MIN = 64 * 1024


async def read_body(request: web.Request, *, create: bool = False) -> dict[str, Any]:
    """The request's JSON object, or a 400 that says what is wrong with it. A body compressed as
    its ``Content-Encoding`` says (gzip, deflate, zstd) is read decompressed; one that is not what
    the header says is a 400, not a failure of crossfeed's. A Responses create body (``create``)
    of ``RAW_BODY_MIN`` bytes or more keeps its long tool outputs as JSON
    (translators/responses/create_body.py)."""
    try:
        raw = await body_bytes(request)
    except RequestPayloadError:
        encoding = request.headers.get("Content-Encoding", "")
        raise ClientRequestError(
            f"the request body could not be read as its Content-Encoding ({encoding or 'none'}) says: send it "
            "compressed that way, or without the header",
            code="invalid_body",
        ) from None
    if create and len(raw) >= RAW_BODY_MIN:
        decoded = decode_create(raw)
        if decoded is not None:
            return decoded
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ClientRequestError("the request body is not valid JSON", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ClientRequestError("the request body must be a JSON object", code="invalid_type")
    return body


async def body_bytes(request: web.Request) -> bytes:
    """The whole request body, bounded by the server's ``client_max_size`` (a larger one is
    aiohttp's 413, which the error middleware answers in OpenAI's envelope; a larger declared
    length before any of it is read).

    ``request.read()`` does the same with two more copies of the body (a bytearray grown from
    the reads, then ``bytes`` of it): for a Codex history of a few MiB, resent every turn, those
    copies were a cost of their own (docs/benchmark.md). Here the reads are kept as they come
    and joined once; a body read at once is not copied again."""
    limit = request.client_max_size
    length = request.content_length
    if length is not None and limit and length > limit:
        raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=length)
    content = request.content
    content.set_read_chunk_size(limit)  # fewer, larger reads: as request.read() asks
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk, chunk_end = await content.readchunk()  # one piece as it came: readany joins what waits
        if not chunk:
            if chunk_end:  # the end of a piece of a chunked body: more follows
                continue
            break
        size += len(chunk)
        if limit and size > limit:
            raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=size)
        chunks.append(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
