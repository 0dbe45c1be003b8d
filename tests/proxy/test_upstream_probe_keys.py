"""The readiness probe and the upstream key, without a socket (aioresponses).

The probe (``probe_loop``: ``GET <base_url>/models``) runs against a mocked upstream and
``readiness`` is read as ``/readyz`` reads it. The headers of an upstream request are built as a
handler builds them (``outbound_headers``) and sent through ``open_upstream``; aioresponses
records what went out. Over real sockets: tests/integration/test_operations.py (``/readyz``) and
tests/faults/test_secrets.py (the key sent upstream).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.client_reqrep import ConnectionKey
from aiohttp.test_utils import make_mocked_request

from crossfeed.proxy.errors import ConfigError
from crossfeed.proxy.keys import CONFIG, ENV, SESSION
from crossfeed.proxy.runtime.config import Config, Server, Upstream
from crossfeed.proxy.runtime.guard import upstream_keys
from crossfeed.proxy.streaming import lifecycle
from crossfeed.proxy.streaming.lifecycle import (
    PROBE_ERRORS,
    PROBE_HEADERS,
    PROBE_NOT_FOUND,
    PROBES,
    probe_loop,
    readiness,
)
from crossfeed.proxy.turns.common import outbound_headers, secrets
from crossfeed.proxy.upstream import new_session, open_upstream, upstream_headers
from tests.support.mocked_http import MockedHTTP

BASE = "http://gpu-7.backend.internal:8123/v1"
OTHER = "http://cpu-1.backend.internal:8124/v1"
REFUSED = aiohttp.ClientConnectorError(
    ConnectionKey("gpu-7.backend.internal", 8123, False, True, None, None, None, "gpu-7.backend.internal"),
    ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed"),
)
NOT_PROBED = "upstream '{name}' at {url} has not answered a probe (GET /models) in the last 60s"


@pytest.fixture
def http() -> Iterator[MockedHTTP]:
    with MockedHTTP() as m:
        yield m


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    s = new_session()
    yield s
    await s.close()


def config(*upstreams: Upstream) -> Config:
    return Config(upstreams=upstreams or (Upstream(name="gpu", base_url=BASE, default=True),))


def probed_app(session: aiohttp.ClientSession) -> web.Application:
    app = web.Application()
    app[SESSION] = session
    app[PROBES] = {}
    app[PROBE_ERRORS] = {}
    return app


async def probe(app: web.Application, cfg: Config, done: Callable[[], bool]) -> None:
    """Run the probe loop until ``done()`` (a hang guard of 2 s), then stop it."""
    task = asyncio.get_running_loop().create_task(probe_loop(app, cfg, SESSION))
    try:
        for _ in range(200):
            if done():
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"the probe recorded nothing: {app[PROBES]}, {app[PROBE_ERRORS]}")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# ---------------------------------------------------------------- readiness probe


@pytest.mark.parametrize("status", [200, 401, 500, 503])
async def test_any_http_answer_counts_as_up(status: int, session: aiohttp.ClientSession, http: MockedHTTP) -> None:
    """lifecycle's docstring: any HTTP answer but a 404 counts, the backend is up (a 401 is a key
    problem, not a dead one)."""
    app, cfg = probed_app(session), config()
    http.get(BASE + "/models", status=status, payload={"data": []})
    await probe(app, cfg, lambda: "gpu" in app[PROBES])
    assert app[PROBE_ERRORS] == {} and readiness(app, cfg) == []
    (call,) = http.calls("GET", BASE + "/models")
    assert call.kwargs["headers"] == PROBE_HEADERS and call.kwargs["timeout"].total == 5


@pytest.mark.parametrize(
    ("base", "v1_status", "hint"),
    [
        # the base URL has its /v1: the backend serves no model listing there
        (BASE, None, "is base_url the root of the backend's OpenAI-compatible API?"),
        # no /v1, and <base>/v1/models answers: the URL that would do
        (
            "http://gpu-7.backend.internal:8123",
            200,
            "does base_url need /v1? (http://gpu-7.backend.internal:8123/v1/models answers: set base_url to "
            "http://gpu-7.backend.internal:8123/v1)",
        ),
        # no /v1, and that is not it either
        ("http://gpu-7.backend.internal:8123/api", 404, "does base_url need /v1?"),
    ],
)
async def test_a_model_listing_404_is_not_ready_with_a_hint(
    base: str, v1_status: int | None, hint: str, session: aiohttp.ClientSession, http: MockedHTTP
) -> None:
    app, cfg = probed_app(session), config(Upstream(name="gpu", base_url=base, default=True))
    http.get(base + "/models", status=404, body="404 page not found", repeat=True)
    if v1_status is not None:
        http.get(base + "/v1/models", status=v1_status, payload={"data": []}, repeat=True)
    await probe(app, cfg, lambda: "gpu" in app.get(PROBE_NOT_FOUND, {}))
    assert "gpu" not in app[PROBES] and app[PROBE_ERRORS] == {}
    assert readiness(app, cfg) == [
        f"upstream 'gpu' at {base} answered 404 to its model listing (GET {base}/models): {hint}"
    ]
    # the next probe that gets an answer makes it ready again
    http.clear()
    http.get(base + "/models", payload={"data": []}, repeat=True)
    await probe(app, cfg, lambda: "gpu" in app[PROBES])
    assert readiness(app, cfg) == [] and app[PROBE_NOT_FOUND] == {}


@pytest.mark.parametrize(
    ("exception", "error"),
    [
        (REFUSED, "cannot connect to the upstream 'gpu' (connection refused)"),
        (
            aiohttp.ClientConnectorDNSError(REFUSED._conn_key, socket.gaierror(-2, "Name or service not known")),
            "cannot connect to the upstream 'gpu' (its host name could not be resolved)",
        ),
        (aiohttp.ServerDisconnectedError(), "the upstream connection failed: the upstream closed the connection"),
        (TimeoutError(), "no answer within 5s"),
        (aiohttp.ServerTimeoutError("Timeout on reading data from socket"), "no answer within 5s"),
        (aiohttp.ConnectionTimeoutError("Connection timeout"), "no answer within 5s"),
    ],
)
async def test_a_failed_probe_records_the_error_readyz_shows(
    exception: Exception, error: str, session: aiohttp.ClientSession, http: MockedHTTP
) -> None:
    app, cfg = probed_app(session), config()
    http.get(BASE + "/models", exception=exception)
    await probe(app, cfg, lambda: "gpu" in app[PROBE_ERRORS])
    assert "gpu" not in app[PROBES] and app[PROBE_ERRORS]["gpu"] == error
    assert readiness(app, cfg) == [NOT_PROBED.format(name="gpu", url=BASE) + f": {error}"]


async def test_not_probed_yet(session: aiohttp.ClientSession) -> None:
    app, cfg = probed_app(session), config()
    assert readiness(app, cfg) == [NOT_PROBED.format(name="gpu", url=BASE) + " (not probed yet)"]


async def test_a_recent_answer_keeps_it_ready_until_it_is_stale(
    session: aiohttp.ClientSession, http: MockedHTTP
) -> None:
    """A failed probe after an answer leaves it ready for 3 x the interval; then /readyz shows the error."""
    app, cfg = probed_app(session), config()
    app[PROBES]["gpu"] = seen = time.monotonic()
    http.get(BASE + "/models", exception=REFUSED)
    await probe(app, cfg, lambda: "gpu" in app[PROBE_ERRORS])
    assert app[PROBES]["gpu"] == seen and readiness(app, cfg) == []
    app[PROBES]["gpu"] = time.monotonic() - 3 * lifecycle.PROBE_INTERVAL - 1
    assert readiness(app, cfg) == [
        NOT_PROBED.format(name="gpu", url=BASE) + ": cannot connect to the upstream 'gpu' (connection refused)"
    ]


async def test_an_answer_after_a_failure_clears_the_error(
    session: aiohttp.ClientSession, http: MockedHTTP, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lifecycle, "PROBE_INTERVAL", 0.01)
    app, cfg = probed_app(session), config()
    http.get(BASE + "/models", exception=REFUSED)
    http.get(BASE + "/models", status=200, payload={"data": []}, repeat=True)
    await probe(app, cfg, lambda: "gpu" in app[PROBES])
    assert app[PROBE_ERRORS] == {}
    assert len(http.calls("GET", BASE + "/models")) >= 2


async def test_each_upstream_is_probed_on_its_own(session: aiohttp.ClientSession, http: MockedHTTP) -> None:
    """One upstream down neither stops the probe of the next nor makes it look down."""
    app = probed_app(session)
    cfg = config(Upstream(name="gpu", base_url=BASE, default=True), Upstream(name="cpu", base_url=OTHER))
    http.get(BASE + "/models", exception=REFUSED)
    http.get(OTHER + "/models", status=200, payload={"data": []})
    await probe(app, cfg, lambda: "cpu" in app[PROBES])
    assert app[PROBES].keys() == {"cpu"} and app[PROBE_ERRORS].keys() == {"gpu"}
    assert readiness(app, cfg) == [
        NOT_PROBED.format(name="gpu", url=BASE) + ": cannot connect to the upstream 'gpu' (connection refused)"
    ]


# ---------------------------------------------------------------- the upstream key

CLIENT = {
    "Authorization": "Bearer sk-client",
    "X-Api-Key": "sk-client",
    "Cookie": "session=sk-client",
    "OpenAI-Organization": "org-1",
    "OpenAI-Project": "proj-1",
    "X-Request-Id": "req-1",
    "User-Agent": "sdk/1",
    "Host": "crossfeed.example",
    "X-Custom": "x",
}


def handler_request(up: Upstream, environ: dict[str, str], *, inbound_keys_env: str | None = None) -> web.Request:
    app = web.Application()
    app[CONFIG] = Config(upstreams=(up,), server=Server(inbound_keys_env=inbound_keys_env))
    app[ENV] = environ
    return make_mocked_request("POST", "/v1/responses", headers=CLIENT, app=app)


async def sent_headers(
    session: aiohttp.ClientSession, http: MockedHTTP, up: Upstream, headers: dict[str, str]
) -> dict[str, str]:
    http.post(up.base_url + "/chat/completions", status=200, body=b"data: [DONE]\n\n", content_type="text/event-stream")
    resp = await open_upstream(session, up, "/chat/completions", {"model": "m"}, headers)
    resp.close()
    (call,) = http.calls("POST", up.base_url + "/chat/completions")
    return dict(call.kwargs["headers"])


async def test_the_configured_key_is_sent_and_the_clients_is_not(
    session: aiohttp.ClientSession, http: MockedHTTP
) -> None:
    up = Upstream(name="gpu", base_url=BASE, api_key_env="GPU_KEY")
    request = handler_request(up, {"GPU_KEY": "sk-upstream"})
    sent = await sent_headers(session, http, up, outbound_headers(request, up))
    assert sent["Authorization"] == "Bearer sk-upstream"
    assert not any("sk-client" in v for v in sent.values()), sent
    assert secrets(request, up) == ("sk-upstream",)
    # what is forwarded besides: the OpenAI routing headers, nothing else of the client's
    assert {k.lower(): v for k, v in sent.items() if k not in ("Content-Type", "Accept", "Authorization")} == {
        "openai-organization": "org-1",
        "openai-project": "proj-1",
        "x-request-id": "req-1",
        "user-agent": "sdk/1",
    }


@pytest.mark.parametrize(
    ("pass_client_key", "inbound_keys_env", "expected"),
    [
        (True, None, "Bearer sk-client"),  # no key of its own: the client's goes through
        (False, None, None),  # pass_client_key = false: none
        (True, "CROSSFEED_KEYS", None),  # the client's key is crossfeed's own inbound key: never forwarded
    ],
)
async def test_without_a_configured_key(
    pass_client_key: bool,
    inbound_keys_env: str | None,
    expected: str | None,
    session: aiohttp.ClientSession,
    http: MockedHTTP,
) -> None:
    up = Upstream(name="gpu", base_url=BASE, pass_client_key=pass_client_key)
    request = handler_request(up, {"CROSSFEED_KEYS": "sk-client"}, inbound_keys_env=inbound_keys_env)
    sent = await sent_headers(session, http, up, outbound_headers(request, up))
    assert sent.get("Authorization") == expected
    assert "X-Api-Key" not in sent and "Cookie" not in sent and secrets(request, up) == ()


def test_configured_headers_win_over_the_clients() -> None:
    """``[[upstreams]] headers`` are added last. A name that differs only in case stays a second
    key of the dict; aiohttp sends one header per name, the last: the configured one."""
    up = Upstream(name="gpu", base_url=BASE, headers={"X-Tenant": "t1", "User-Agent": "crossfeed"})
    headers = upstream_headers(up, {"user-agent": "sdk/1"}, "sk-upstream")
    on_the_wire = {k.lower(): v for k, v in headers.items()}
    assert on_the_wire["user-agent"] == "crossfeed" and on_the_wire["x-tenant"] == "t1"
    assert on_the_wire["authorization"] == "Bearer sk-upstream"


@pytest.mark.parametrize("environ", [{}, {"GPU_KEY": ""}])
def test_an_unset_key_variable_refuses_to_start(environ: dict[str, str]) -> None:
    """Without this check an empty key would fall back to passing the client's key to that backend."""
    cfg = config(Upstream(name="gpu", base_url=BASE, api_key_env="GPU_KEY", default=True))
    with pytest.raises(ConfigError, match=r"upstreams\.0\.api_key_env \(upstream 'gpu'\) names \$GPU_KEY"):
        upstream_keys(cfg, environ)
    upstream_keys(cfg, {"GPU_KEY": "sk-upstream"})
