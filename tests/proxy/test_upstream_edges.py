"""The upstream client's edges, without a socket (aioresponses): every error status and body shape
an upstream answers with, connect failures and timeouts, no retries of its own.

``open_upstream`` is called directly on crossfeed's own session (``new_session``) and the error it
raises is rendered by ``error_response``, as a handler renders it: what a client would get. The
same faults over real sockets, through a running crossfeed, are in tests/faults; the readiness
probe and the upstream key are in test_upstream_probe_keys.py.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.client_reqrep import ConnectionKey

from crossfeed.proxy.errors import (
    UpstreamError,
    UpstreamHTTPError,
    UpstreamTimeout,
    UpstreamUnavailable,
    error_response,
)
from crossfeed.proxy.runtime.config import Timeouts, Upstream
from crossfeed.proxy.upstream import MAX_ERROR_BODY, new_session, open_upstream, read_body, read_json
from tests.support.mocked_http import MockedHTTP, StalledBody

# aioresponses' body reader takes at most 128 KiB (its transport cannot pause): the huge bodies are below that.
HOST, PORT = "gpu-7.backend.internal", 8123
BASE = f"http://{HOST}:{PORT}/v1"
URL = BASE + "/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def upstream(**timeouts: float) -> Upstream:
    return Upstream(
        name="gpu",
        base_url=BASE,
        timeouts=Timeouts(**{"connect": 0.5, "first_byte": 0.5, "idle": 0.5, "total": 5.0, **timeouts}),
    )


@pytest.fixture
def http() -> Iterator[MockedHTTP]:
    with MockedHTTP() as m:
        yield m


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    s = new_session()
    yield s
    await s.close()


def client_view(exc: UpstreamError) -> tuple[int, dict[str, Any], dict[str, str]]:
    """What the client gets: status, the JSON body, the headers; the backend's address in none of them."""
    resp = error_response(exc)
    assert isinstance(resp.body, bytes)
    raw = resp.body
    text = raw.decode() + repr(dict(resp.headers))
    assert HOST not in text and str(PORT) not in text, text
    body = orjson.loads(raw)
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["message"], "an empty error message"
    return resp.status, body["error"], dict(resp.headers)


async def fails(
    session: aiohttp.ClientSession, http: MockedHTTP, up: Upstream | None = None, **answer: Any
) -> UpstreamError:
    """POST once to an upstream answering ``answer``; the error raised. Exactly one request was made:
    the client never retries on its own."""
    http.post(URL, **answer)
    with pytest.raises(UpstreamError) as info:
        await open_upstream(session, up or upstream(), "/chat/completions", BODY, {})
    assert http.total_calls() == 1 and len(http.calls("POST", URL)) == 1, http.requests
    return info.value


# ---------------------------------------------------------------- every status, kept

TYPE_FOR = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    418: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "server_error",
    503: "server_error",
    504: "server_error",
}


@pytest.mark.parametrize("status", sorted(TYPE_FOR))
async def test_status_and_openai_envelope_kept(status: int, session: aiohttp.ClientSession, http: MockedHTTP) -> None:
    error = {"message": f"backend says {status}", "type": "backend_type", "param": "model", "code": "backend_code"}
    exc = await fails(session, http, status=status, payload={"error": error})
    assert isinstance(exc, UpstreamHTTPError) and exc.message == f"backend says {status}"
    got_status, got, _ = client_view(exc)
    assert got_status == status and got == error


@pytest.mark.parametrize("status", sorted(TYPE_FOR))
async def test_status_kept_and_a_text_body_wrapped_with_the_type_for_the_status(
    status: int, session: aiohttp.ClientSession, http: MockedHTTP
) -> None:
    exc = await fails(session, http, status=status, body="model is busy", content_type="text/plain")
    got_status, got, _ = client_view(exc)
    assert got_status == status
    assert got == {
        "message": f"the upstream answered HTTP {status}: model is busy",
        "type": TYPE_FOR[status],
        "param": None,
        "code": None,
    }


# ---------------------------------------------------------------- every body shape

HTML = f"<html><body><h1>502 Bad Gateway</h1><hr>nginx at {HOST}:{PORT}</body></html>"


@pytest.mark.parametrize(
    ("status", "body", "content_type", "message"),
    [
        # OpenAI's envelope with an integer code and a non-string param (llama.cpp's code is the status)
        (
            400,
            b'{"error": {"message": "too long", "type": "invalid_request_error", "code": 400, "param": 3}}',
            "application/json",
            "too long",
        ),
        (404, b'{"error": "model \'x\' not found"}', "application/json", "model 'x' not found"),  # Ollama
        (
            400,
            b'{"object": "error", "message": "max_tokens is too large", "type": "BadRequestError", "code": 400}',
            "application/json",
            "max_tokens is too large",
        ),  # vLLM's older ErrorResponse
        (500, b'{"message": "Internal Server Error"}', "application/json", "Internal Server Error"),
        # FastAPI's {"detail": ...}: not OpenAI's shape, so wrapped; the detail stays readable
        (422, b'{"detail":"Not Found"}', "application/json", 'the upstream answered HTTP 422: {"detail":"Not Found"}'),
        # ... and as a 404 it is a route the backend does not have (vLLM at a base URL without /v1...):
        # the path and the hint, the backend's answer after them
        (
            404,
            b'{"detail":"Not Found"}',
            "application/json",
            "the upstream 'gpu' answered 404 to POST /v1/chat/completions: it does not know that path; is "
            'base_url the root of the backend\'s OpenAI-compatible API? (its answer: {"detail":"Not Found"})',
        ),
        (
            422,
            b'{"detail":[{"loc":["body","model"],"msg":"Field required"}]}',
            "application/json",
            'the upstream answered HTTP 422: {"detail":[{"loc":["body","model"],"msg":"Field required"}]}',
        ),
        (502, HTML.encode(), "text/html", "the upstream answered HTTP 502"),  # HTML is dropped, whatever it says
        (502, HTML.encode(), "text/plain", "the upstream answered HTTP 502"),  # ... even when labelled as text
        (503, b"", "text/plain", "the upstream answered HTTP 503"),
        (503, b"  \n", "application/json", "the upstream answered HTTP 503"),
        (
            500,
            b'{"error": {"message": "cut',
            "application/json",
            'the upstream answered HTTP 500: {"error": {"message": "cut',
        ),
        (500, b"[1, 2]", "application/json", "the upstream answered HTTP 500: [1, 2]"),
        (500, b"null", "application/json", "the upstream answered HTTP 500: null"),
        (500, b"bad \xff\xfe bytes", "text/plain", "the upstream answered HTTP 500: bad \ufffd\ufffd bytes"),
        # an empty message is no message: wrapped instead of answered as ""
        (500, b'{"message": ""}', "application/json", 'the upstream answered HTTP 500: {"message": ""}'),
        (500, b'{"error": " "}', "application/json", 'the upstream answered HTTP 500: {"error": " "}'),
        (
            500,
            b'{"error": {"message": ""}}',
            "application/json",
            'the upstream answered HTTP 500: {"error": {"message": ""}}',
        ),
    ],
)
async def test_body_shapes(
    status: int, body: bytes, content_type: str, message: str, session: aiohttp.ClientSession, http: MockedHTTP
) -> None:
    exc = await fails(session, http, status=status, body=body, content_type=content_type)
    got_status, got, _ = client_view(exc)
    assert got_status == status and got["message"] == message, got


async def test_huge_text_body_is_cut_to_500_characters(session: aiohttp.ClientSession, http: MockedHTTP) -> None:
    exc = await fails(session, http, status=500, body="x" * (MAX_ERROR_BODY + 30_000), content_type="text/plain")
    _, got, _ = client_view(exc)
    assert got["message"] == "the upstream answered HTTP 500: " + "x" * 500


async def test_huge_envelope_is_summarised_not_relayed(session: aiohttp.ClientSession, http: MockedHTTP) -> None:
    """Over ``MAX_ERROR_BODY`` the envelope is read cut, so it is no longer JSON: wrapped and cut as text."""
    huge = orjson.dumps({"error": {"message": "y" * (MAX_ERROR_BODY + 10_000), "type": "t"}})
    exc = await fails(session, http, status=400, body=huge)
    _, got, _ = client_view(exc)
    assert got["message"] == "the upstream answered HTTP 400: " + huge.decode()[:500]
    assert got["type"] == "invalid_request_error"


async def test_an_envelope_below_the_limit_is_kept_whole(session: aiohttp.ClientSession, http: MockedHTTP) -> None:
    text = "z" * (MAX_ERROR_BODY // 2)
    exc = await fails(session, http, status=400, payload={"error": {"message": text}})
    assert client_view(exc)[1]["message"] == text


# ---------------------------------------------------------------- headers kept, secrets cut


async def test_retry_headers_kept_and_nothing_else(session: aiohttp.ClientSession, http: MockedHTTP) -> None:
    exc = await fails(
        session,
        http,
        status=429,
        payload={"error": {"message": "slow down"}},
        headers={
            "Retry-After": "7",
            "x-should-retry": "true",
            "X-Upstream-Addr": f"{HOST}:{PORT}",
            "Set-Cookie": "lb=1",
            "Server": "vllm",
        },
    )
    got_status, _, headers = client_view(exc)
    assert got_status == 429 and headers["Retry-After"] == "7" and headers["x-should-retry"] == "true"
    assert not {"X-Upstream-Addr", "Set-Cookie", "Server"} & set(headers), headers


async def test_retry_after_kept_on_a_503_text_body(session: aiohttp.ClientSession, http: MockedHTTP) -> None:
    exc = await fails(
        session, http, status=503, body="loading", content_type="text/plain", headers={"Retry-After": "30"}
    )
    assert client_view(exc)[2]["Retry-After"] == "30"


KEY = "sk-upstream-0123456789abcdef"


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (
            orjson.dumps({"error": {"message": f"Incorrect API key provided: {KEY}", "param": KEY, "code": KEY}}),
            "application/json",
        ),
        (orjson.dumps({"message": f"bad key {KEY}"}), "application/json"),
        (f"invalid key {KEY}".encode(), "text/plain"),
        # the key across the 500-character cut of a text body: none of it may be left
        (("k" * 490 + KEY).encode(), "text/plain"),
        (("k" * 497 + KEY).encode(), "text/plain"),
    ],
)
async def test_upstream_key_quoted_by_the_backend_is_cut(
    body: bytes, content_type: str, session: aiohttp.ClientSession, http: MockedHTTP
) -> None:
    http.post(URL, status=401, body=body, content_type=content_type)
    with pytest.raises(UpstreamHTTPError) as info:
        await open_upstream(session, upstream(), "/chat/completions", BODY, {}, secrets=(KEY,))
    _, got, _ = client_view(info.value)
    assert KEY[:3] not in orjson.dumps(got).decode(), got  # "sk-": not even the start of it


# ---------------------------------------------------------------- connect failures, timeouts

KEY_OF_CONNECTION = ConnectionKey(HOST, PORT, False, True, None, None, None, HOST)


@pytest.mark.parametrize(
    ("exception", "message"),
    [
        (
            aiohttp.ClientConnectorError(
                KEY_OF_CONNECTION, ConnectionRefusedError(errno.ECONNREFUSED, f"Connect call failed ('{HOST}', {PORT})")
            ),
            "cannot connect to the upstream 'gpu' (connection refused)",
        ),
        (
            aiohttp.ClientConnectorError(KEY_OF_CONNECTION, OSError(errno.EHOSTUNREACH, f"No route to {HOST}")),
            "cannot connect to the upstream 'gpu' (no route to host)",
        ),
        (
            aiohttp.ClientConnectorError(KEY_OF_CONNECTION, OSError(None, f"unreachable {HOST}")),
            "cannot connect to the upstream 'gpu' (the connection failed)",
        ),
        # getaddrinfo's error numbers (-2) and OpenSSL's (1) are not errnos: no "unknown error -2"
        (
            aiohttp.ClientConnectorDNSError(KEY_OF_CONNECTION, socket.gaierror(-2, "Name or service not known")),
            "cannot connect to the upstream 'gpu' (its host name could not be resolved)",
        ),
        (
            aiohttp.ClientConnectorDNSError(KEY_OF_CONNECTION, OSError(None, f"Domain name not found: {HOST}")),
            "cannot connect to the upstream 'gpu' (its host name could not be resolved)",
        ),  # aiodns' AsyncResolver
        (
            aiohttp.ClientConnectorSSLError(KEY_OF_CONNECTION, ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER]")),
            "cannot connect to the upstream 'gpu' (the TLS handshake failed)",
        ),
        (
            aiohttp.ClientConnectorCertificateError(
                KEY_OF_CONNECTION,
                ssl.SSLCertVerificationError(
                    1, f"certificate verify failed: Hostname mismatch, certificate is not valid for '{HOST}'"
                ),
            ),
            "cannot connect to the upstream 'gpu' (its TLS certificate was not accepted)",
        ),
        (
            aiohttp.ClientOSError(errno.ECONNRESET, f"Connection reset by peer {HOST}:{PORT}"),
            "the upstream connection failed: a network error on the upstream connection",
        ),
        (
            aiohttp.ServerDisconnectedError(f"closed by {HOST}"),
            "the upstream connection failed: the upstream closed the connection",
        ),
        (
            aiohttp.ClientConnectionError(f"Connection refused: POST {URL}"),
            "the upstream connection failed: the connection failed",
        ),
    ],
)
async def test_connect_failures_are_502_naming_the_upstream_not_its_address(
    exception: Exception, message: str, session: aiohttp.ClientSession, http: MockedHTTP
) -> None:
    exc = await fails(session, http, exception=exception)
    assert isinstance(exc, UpstreamUnavailable)
    status, got, _ = client_view(exc)
    assert status == 502 and got == {
        "message": message,
        "type": "upstream_error",
        "param": None,
        "code": "upstream_unavailable",
    }


@pytest.mark.parametrize(
    ("exception", "which", "seconds"),
    [
        (TimeoutError(), "first_byte", 0.5),
        (aiohttp.ServerTimeoutError(f"Timeout on reading data from {HOST}"), "first_byte", 0.5),
        (aiohttp.SocketTimeoutError("sock_read"), "first_byte", 0.5),
        (aiohttp.ConnectionTimeoutError(f"Connection timeout to host {URL}"), "connect", 0.25),
    ],
)
async def test_timeouts_are_504_naming_the_timeout(
    exception: Exception, which: str, seconds: float, session: aiohttp.ClientSession, http: MockedHTTP
) -> None:
    exc = await fails(session, http, upstream(connect=0.25), exception=exception)
    assert isinstance(exc, UpstreamTimeout) and exc.which == which
    status, got, _ = client_view(exc)
    assert status == 504 and got["code"] == f"upstream_{which}_timeout"
    assert got["message"] == f"the upstream did not answer in time ({which} timeout of {seconds:g}s)"


async def test_first_byte_timeout_fires_on_a_slow_upstream(session: aiohttp.ClientSession, http: MockedHTTP) -> None:
    """The real ``asyncio.timeout`` in ``send``: the headers take longer than ``first_byte``."""

    async def slow(url: Any, **kwargs: Any) -> None:
        await asyncio.sleep(10)

    loop = asyncio.get_running_loop()
    started = loop.time()
    exc = await fails(session, http, upstream(first_byte=0.05), callback=slow)
    assert loop.time() - started < 2
    assert isinstance(exc, UpstreamTimeout) and exc.which == "first_byte" and client_view(exc)[0] == 504


async def test_an_error_body_that_stalls_still_gives_the_status(
    session: aiohttp.ClientSession, http: MockedHTTP
) -> None:
    """The error body never ends: after ``idle`` the status goes out without it."""
    exc = await fails(
        session, http, upstream(idle=0.05), status=503, body=b'{"error": {"mess', response_class=StalledBody
    )
    status, got, _ = client_view(exc)
    assert status == 503 and got["message"] == "the upstream answered HTTP 503"


@pytest.mark.parametrize(("timeouts", "which"), [({"idle": 0.05}, "idle"), ({"idle": 5.0, "total": 0.05}, "total")])
async def test_a_json_body_that_stalls_is_a_named_timeout(
    timeouts: dict[str, float], which: str, session: aiohttp.ClientSession, http: MockedHTTP
) -> None:
    up = upstream(**timeouts)
    http.post(URL, status=200, body=b'{"id": "chatcmpl-1"', response_class=StalledBody)
    resp = await open_upstream(session, up, "/chat/completions", BODY, {})
    with pytest.raises(UpstreamTimeout) as info:
        await read_json(resp, up, 1 << 20)
    assert info.value.which == which and client_view(info.value)[0] == 504


async def test_a_2xx_body_not_json_or_too_large(session: aiohttp.ClientSession, http: MockedHTTP) -> None:
    up = upstream()
    http.post(URL, status=200, body=b"<html>ok</html>", content_type="text/html")
    http.post(URL, status=200, body=b"x" * 2048)
    with pytest.raises(UpstreamUnavailable, match=r"^the upstream answered with a body that is not JSON$"):
        await read_json(await open_upstream(session, up, "/chat/completions", BODY, {}), up, 1 << 20)
    with pytest.raises(UpstreamUnavailable, match=r"^the upstream answer is larger than the configured limit$"):
        await read_body(await open_upstream(session, up, "/chat/completions", BODY, {}), up, 1024)
    assert len(http.calls("POST", URL)) == 2


# ---------------------------------------------------------------- no retries of its own


@pytest.mark.parametrize(
    "answer",
    [
        {"status": 500, "payload": {"error": {"message": "boom"}}},
        {"status": 502, "body": HTML, "content_type": "text/html"},
        {"status": 503, "body": "", "headers": {"Retry-After": "0"}},
        {"status": 429, "payload": {"error": {"message": "slow down"}}, "headers": {"Retry-After": "0"}},
        {"exception": aiohttp.ClientConnectorError(KEY_OF_CONNECTION, ConnectionRefusedError(errno.ECONNREFUSED, "x"))},
        {"exception": aiohttp.ServerDisconnectedError()},
        {"exception": TimeoutError()},
    ],
)
async def test_a_failed_post_is_never_retried(
    answer: dict[str, Any], session: aiohttp.ClientSession, http: MockedHTTP
) -> None:
    """A retry would find the same answer registered again (repeat) and succeed: exactly one call."""
    http.post(URL, **answer)
    http.post(URL, status=200, body=b"data: [DONE]\n\n", content_type="text/event-stream", repeat=True)
    with pytest.raises(UpstreamError):
        await open_upstream(session, upstream(), "/chat/completions", BODY, {})
    assert http.total_calls() == 1, http.requests
    (call,) = http.calls("POST", URL)
    assert orjson.loads(call.kwargs["data"]) == BODY


# ---------------------------------------------------------------- redirects are not followed


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_is_a_502_and_is_not_followed(
    session: aiohttp.ClientSession, http: MockedHTTP, status: int
) -> None:
    """Following it would send the POST (as a GET, without its body, for 301-303) to an address
    the operator never configured: crossfeed answers 502 naming the upstream, not its address."""
    elsewhere = "http://elsewhere.example:9/v1/chat/completions"
    http.post(elsewhere, payload={"unexpected": True})
    exc = await fails(session, http, status=status, headers={"Location": elsewhere})
    code, error, _ = client_view(exc)
    assert code == 502 and error["code"] == "upstream_redirect", error
    assert f"HTTP {status}" in error["message"] and "'gpu'" in error["message"]
    assert "elsewhere" not in error["message"]
    assert not http.calls("POST", elsewhere) and not http.calls("GET", elsewhere)
