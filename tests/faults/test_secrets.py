"""Secrets: a marked key sent by the client (``Authorization``, ``X-Api-Key``) and the upstream key
(the environment variable named by ``--upstream-api-key-env``) never appear in any log line at
debug level, whatever fails; and no error body echoes a request header, even when the backend's
own error message quotes the key it was sent.

The soak, SIGTERM and disconnect tests run crossfeed the same way and check their logs too.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from crossfeed.proxy.runtime.config import Timeouts
from tests.faults.fault_upstream import FaultUpstream
from tests.faults.harness import API, ENDPOINT, ProxyProcess, raw_http, request_body

FAULTS = [
    "ok",
    "http_401",
    "http_429",
    "http_502_html",
    "reset_before",
    "close_before",
    "slow_first_byte",
    "stall_mid",
    "cut_rst",
    "cut_fin",
    "invalid_utf8",
    "unparsable",
    "error_midstream",
    "bad_shape",
    "wrong_type_html",
    "eof_no_finish",
    "echo_auth_401",
    "refuse",
]
TIMEOUT_FAULTS = {"slow_first_byte", "stall_mid"}  # 1-1.5 s each: one stream mode is enough
MARKER = "HEADER-MARKER-7f3a"


@pytest.mark.parametrize("direction", ["forward", "reverse"])
async def test_secrets_never_logged_nor_echoed(tmp_path: Path, direction: str) -> None:
    async with FaultUpstream() as up:
        proxy = ProxyProcess(
            tmp_path,
            up.base_url,
            api=API[direction],
            timeouts=Timeouts(connect=1.0, first_byte=1.5, idle=1.0, total=30.0),
        )
        await proxy.start()
        echoed: list[str] = []
        try:
            headers = {
                "Authorization": f"Bearer {proxy.client_key}",
                "X-Api-Key": proxy.client_key,
                "X-Request-Id": MARKER,
                "OpenAI-Organization": MARKER,
                "X-Custom": MARKER,
            }
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:
                for fault in FAULTS:
                    for stream in (True,) if fault in TIMEOUT_FAULTS else (True, False):
                        body = request_body(direction, f"fault:{fault}", stream)
                        async with s.post(proxy.url + ENDPOINT[direction], json=body, headers=headers) as r:
                            raw = await r.read()
                        for secret in (proxy.client_key, proxy.upstream_key, MARKER):
                            if secret.encode() in raw:
                                echoed.append(
                                    f"{fault}/{'stream' if stream else 'json'} HTTP {r.status} echoes "
                                    f"{'the upstream key' if secret == proxy.upstream_key else 'a request header'}"
                                )
                for path in ("/v1/nope", "/v1/responses/resp_missing"):
                    async with s.get(proxy.url + path, headers=headers) as r:
                        raw = await r.read()
                        assert proxy.client_key.encode() not in raw and MARKER.encode() not in raw
                async with s.post(proxy.url + ENDPOINT[direction], data=b"{not json", headers=headers) as r:
                    raw = await r.read()
                    assert r.status == 400 and proxy.client_key.encode() not in raw
            # malformed HTTP carrying the secret: the server's own error path must not log it either
            for auth, extra in (
                (f"Bearer {proxy.client_key}", f"X-Big: {'a' * 20000}\r\n"),
                (f"Bearer {proxy.client_key}", "X-Bad: a\x00b\r\n"),
                (f"Bearer {proxy.client_key}\x00", ""),  # the key's own header is malformed
                (f"Bearer {proxy.client_key}{'k' * 9000}", ""),
            ):  # an over-long key
                data = (
                    f"POST {ENDPOINT[direction]} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}"
                    f"\r\n{extra}Content-Length: 2\r\nConnection: close\r\n\r\n{{}}"
                ).encode("latin-1")
                resp = await raw_http(proxy.port, data, timeout=5)
                if resp is not None and proxy.client_key.encode() in resp.body:
                    echoed.append(
                        f"malformed request ({auth[-12:]!r}, {extra[:8]!r}): HTTP {resp.status} "
                        f"{resp.headers.get('content-type')} body echoes the Authorization header"
                    )
            # the upstream got crossfeed's own key, never the client's
            sent = {r.headers.get("authorization") for r in up.requests if r.method == "POST"}
            assert sent == {f"Bearer {proxy.upstream_key}"}, sent
        finally:
            code = await proxy.stop(timeout=10)
        assert code == 0
        logged = []
        try:
            proxy.assert_no_secrets()
        except AssertionError as exc:
            logged.append(str(exc)[:400])
        assert not (echoed or logged), {"echoed in bodies": echoed, "in the log": logged}
        assert "request.completed" in proxy.logs(), "crossfeed logged nothing: the check saw nothing"
