"""Hostile input against every endpoint: each case gets a 4xx in OpenAI's envelope or a correct
answer, never a 5xx, a framework page, a crash or a traceback.

Requests are written byte by byte on raw sockets, so malformed HTTP (conflicting lengths,
truncated bodies, huge headers, bare line feeds) reaches the server exactly as sent. After every
case crossfeed must still answer ``/healthz``, must not have logged an unexpected exception
(``request.failed``), and the fault upstream must not have received an injected header.

Two crossfeeds: ``forward`` (chat backend: /v1/responses translated, /v1/chat/completions passed
through) and ``reverse`` (Responses backend: /v1/chat/completions translated).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
import structlog

from tests.faults.fault_upstream import FaultUpstream
from tests.faults.harness import check_clean, check_envelope, fault_config, raw_http
from tests.support.app_server import running_proxy


def http(
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    headers: dict[str, str] | None = None,
    content_type: str | None = "application/json",
    length: bool = True,
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    if content_type and body is not None:
        lines.append(f"Content-Type: {content_type}")
    if body is not None and length:
        lines.append(f"Content-Length: {len(body)}")
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def js(obj: Any) -> bytes:
    try:
        return orjson.dumps(obj)
    except TypeError:  # deeper than orjson writes (255 levels)
        import json

        return json.dumps(obj).encode()


@dataclass
class Case:
    id: str
    direction: str  # which crossfeed: forward (chat backend) or reverse (responses backend)
    data: bytes | list[bytes]
    expect: str = "4xx"  # 4xx | ok | any (4xx or a correct answer) | none_or_4xx (connection may just close)
    status: int | None = None
    param: str | None = None  # the envelope's param must start with this
    shutdown_write: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


R = "/v1/responses"
C = "/v1/chat/completions"
GOOD_R = {"model": "fault:ok", "input": "hi"}
GOOD_C = {"model": "fault:ok", "messages": [{"role": "user", "content": "hi"}]}


def post(path: str, obj: Any, **kw: Any) -> bytes:
    return http("POST", path, js(obj), **kw)


def nested_arrays(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def nested_object(depth: int) -> Any:
    root: dict[str, Any] = {}
    node = root
    for _ in range(depth):
        node["a"] = {}
        node = node["a"]
    return root


CASES: list[Case] = [
    # -- bodies that are not a JSON object -------------------------------------------------------
    Case("r-invalid-json", "forward", http("POST", R, b"{not json"), status=400),
    Case("r-array", "forward", http("POST", R, b"[]"), status=400),
    Case("r-null", "forward", http("POST", R, b"null"), status=400),
    Case("r-number", "forward", http("POST", R, b"5"), status=400),
    Case("r-string", "forward", http("POST", R, b'"s"'), status=400),
    Case("r-empty-body", "forward", http("POST", R, b""), status=400),
    Case("r-trailing-garbage", "forward", http("POST", R, js(GOOD_R) + b"\x00garbage"), status=400),
    Case(
        "r-invalid-utf8", "forward", http("POST", R, b'{"model": "fault:ok", "input": "caf\xc3\x28 \xff"}'), status=400
    ),
    Case(
        "r-infinity",
        "forward",
        http("POST", R, b'{"model": "fault:ok", "input": "x", "temperature": 1e400}'),
        status=400,
    ),
    Case("c-invalid-json", "reverse", http("POST", C, b"{not json"), status=400),
    Case("c-array", "reverse", http("POST", C, b"[]"), status=400),
    Case("c-null", "reverse", http("POST", C, b"null"), status=400),
    Case("c-number", "reverse", http("POST", C, b"5"), status=400),
    Case("c-string", "reverse", http("POST", C, b'"s"'), status=400),
    Case("c-invalid-utf8", "reverse", http("POST", C, b'{"model": "fault:ok", "messages": "\xff\xfe"}'), status=400),
    Case("c-passthrough-array", "forward", http("POST", C, b"[]"), status=400),
    # -- model ----------------------------------------------------------------------------------------
    Case("r-missing-model", "forward", post(R, {"input": "x"}), status=400, param="model"),
    Case("r-empty-model", "forward", post(R, {"model": "", "input": "x"}), status=400, param="model"),
    Case("r-model-number", "forward", post(R, {"model": 5, "input": "x"}), status=400, param="model"),
    Case("r-model-object", "forward", post(R, {"model": {"a": 1}, "input": "x"}), status=400, param="model"),
    Case("c-missing-model", "reverse", post(C, {"messages": GOOD_C["messages"]}), status=400, param="model"),
    Case("c-model-list", "reverse", post(C, {**GOOD_C, "model": ["m"]}), status=400, param="model"),
    Case("r-model-crlf", "forward", post(R, {**GOOD_R, "model": "fault:ok\r\nX-Injected: 1"}), expect="any"),
    # -- numbers out of range -----------------------------------------------------------------------------
    Case(
        "r-max-output-negative",
        "forward",
        post(R, {**GOOD_R, "max_output_tokens": -1}),
        status=400,
        param="max_output_tokens",
    ),
    Case(
        "r-max-output-huge",
        "forward",
        http("POST", R, js(GOOD_R)[:-1] + b', "max_output_tokens": 1000000000000000000000000000000}'),
        expect="any",
        param="max_output_tokens",
    ),
    Case(
        "r-max-output-float",
        "forward",
        post(R, {**GOOD_R, "max_output_tokens": 12.5}),
        status=400,
        param="max_output_tokens",
    ),
    Case(
        "r-max-output-2p63",
        "forward",
        post(R, {**GOOD_R, "max_output_tokens": 2**63 - 1}),
        expect="any",
        param="max_output_tokens",
    ),
    Case("c-max-tokens-negative", "reverse", post(C, {**GOOD_C, "max_tokens": -5}), status=400, param="max_tokens"),
    Case(
        "c-max-completion-huge",
        "reverse",
        http("POST", C, js(GOOD_C)[:-1] + b', "max_completion_tokens": 1000000000000000000000000000000}'),
        expect="any",
        param="max_completion_tokens",
    ),
    Case("c-n-zero", "reverse", post(C, {**GOOD_C, "n": 0}), status=400, param="n"),
    # -- sizes and depth ---------------------------------------------------------------------------------
    Case("r-deep-arrays-100k", "forward", http("POST", R, nested_arrays(100_000)), status=400),
    Case("c-deep-arrays-100k", "reverse", http("POST", C, nested_arrays(100_000)), status=400),
    Case(
        "r-deep-input-100k",
        "forward",
        http("POST", R, b'{"model": "fault:ok", "input": ' + nested_arrays(100_000) + b"}"),
        status=400,
    ),
    Case(
        "r-deep-tool-schema-300",
        "forward",
        post(
            R,
            {
                **GOOD_R,
                "tools": [
                    {
                        "type": "function",
                        "name": "f",
                        "parameters": {"type": "object", "properties": nested_object(300)},
                    }
                ],
            },
        ),
        expect="any",
    ),
    Case("r-deep-metadata-300", "forward", post(R, {**GOOD_R, "metadata": nested_object(300)}), expect="any"),
    Case(
        "c-deep-tool-schema-300",
        "reverse",
        post(
            C, {**GOOD_C, "tools": [{"type": "function", "function": {"name": "f", "parameters": nested_object(300)}}]}
        ),
        expect="any",
    ),
    Case(
        "r-body-50mb",
        "forward",
        http("POST", R, b'{"model": "fault:ok", "input": "' + b"x" * (50 << 20) + b'"}'),
        status=413,
    ),
    Case(
        "c-body-50mb",
        "reverse",
        http("POST", C, b'{"model": "fault:ok", "messages": "' + b"x" * (50 << 20) + b'"}'),
        status=413,
    ),
    # -- content types -------------------------------------------------------------------------------------
    Case("r-text-plain", "forward", post(R, GOOD_R, content_type="text/plain"), expect="any"),
    Case("r-no-content-type", "forward", post(R, GOOD_R, content_type=None), expect="any"),
    Case(
        "r-form-urlencoded",
        "forward",
        http("POST", R, b"model=fault%3Aok&input=hi", content_type="application/x-www-form-urlencoded"),
        status=400,
    ),
    Case(
        "c-multipart",
        "reverse",
        http(
            "POST",
            C,
            b"--x\r\nContent-Disposition: form-data; name=model\r\n\r\nm\r\n--x--",
            content_type="multipart/form-data; boundary=x",
        ),
        status=400,
    ),
    # -- unknown paths and methods -------------------------------------------------------------------------
    Case("get-root", "forward", http("GET", "/"), status=404),
    Case("get-v1", "forward", http("GET", "/v1"), status=404),
    Case("get-unknown", "forward", http("GET", "/v1/nope"), status=404),
    Case("post-unknown", "forward", post("/v1/edits", {"model": "m", "input": "x"}), status=404),
    Case("get-responses", "forward", http("GET", R), status=405),
    Case("put-chat", "reverse", post(C, GOOD_C).replace(b"POST", b"PUT", 1), status=405),
    Case("delete-healthz", "forward", http("DELETE", "/healthz"), status=405),
    Case("patch-models", "forward", http("PATCH", "/v1/models", b"{}"), status=405),
    # The HTTP parser itself refuses a method it does not know: 400 in the envelope, before routing.
    Case("brew-responses", "forward", http("BREW", R, js(GOOD_R)), status=400),
    Case("options-responses", "forward", http("OPTIONS", R), expect="any"),
    Case("double-slash", "forward", post("//v1//responses", GOOD_R), expect="any"),
    # Raw invalid UTF-8 in the request line is malformed HTTP for the parser: 400 in the envelope.
    Case(
        "path-invalid-utf8", "forward", b"GET /v1/\xff\xfe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", status=400
    ),
    Case("path-percent-invalid-utf8", "forward", http("GET", "/v1/%ff%fe"), status=404),
    Case("path-nul", "forward", http("GET", "/v1/responses/%00"), expect="4xx"),
    # -- path traversal and stored-response endpoints ---------------------------------------------------
    Case("traversal-dots", "forward", http("GET", "/v1/responses/../../../etc/passwd"), status=404),
    Case("traversal-encoded", "forward", http("GET", "/v1/responses/..%2F..%2F..%2Fetc%2Fpasswd"), status=404),
    Case("traversal-input-items", "forward", http("GET", "/v1/responses/%2e%2e/%2e%2e/input_items"), expect="4xx"),
    Case("get-unknown-response", "forward", http("GET", "/v1/responses/resp_does_not_exist"), status=404),
    Case("get-response-huge-id", "forward", http("GET", "/v1/responses/" + "a" * 6000), expect="4xx"),
    Case("delete-unknown-response", "forward", http("DELETE", "/v1/responses/resp_nope"), status=404),
    Case(
        "input-items-bad-limit", "forward", http("GET", "/v1/responses/resp_nope/input_items?limit=abc"), expect="4xx"
    ),
    Case(
        "input-items-negative-limit",
        "forward",
        http("GET", "/v1/responses/resp_nope/input_items?limit=-1"),
        expect="4xx",
    ),
    Case(
        "input-items-bad-order",
        "forward",
        http("GET", "/v1/responses/resp_nope/input_items?order=sideways"),
        expect="4xx",
    ),
    Case("reverse-get-response", "reverse", http("GET", "/v1/responses/resp_nope"), expect="4xx"),
    Case("models-query-junk", "forward", http("GET", "/v1/models?%ff=%00&a=" + "b" * 2000), expect="ok"),
    Case("healthz", "forward", http("GET", "/healthz"), expect="ok"),
    # -- headers ---------------------------------------------------------------------------------------------
    Case(
        "header-injection-bare-lf",
        "forward",
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nX-Request-Id: a\nX-Injected: 1\r\nContent-Type: application/json"
        b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(js(GOOD_R)) + js(GOOD_R),
        expect="4xx",
    ),
    Case(
        "header-injection-bare-cr",
        "forward",
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nX-Request-Id: a\rX-Injected: 1\r\nContent-Type: application/json"
        b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(js(GOOD_R)) + js(GOOD_R),
        expect="4xx",
    ),
    Case("header-nul", "forward", post(R, GOOD_R, headers={"X-Request-Id": "a\x00b"}), expect="4xx"),
    Case(
        "header-obs-fold",
        "forward",
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nX-Request-Id: a\r\n X-Injected: 1\r\nContent-Type: "
        b"application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(js(GOOD_R)) + js(GOOD_R),
        expect="any",
    ),
    Case(
        "header-non-utf8-forwarded",
        "forward",
        post(R, GOOD_R, headers={"User-Agent": "caf\xe9-\xff", "OpenAI-Organization": "org-\xfe"}),
        expect="any",
    ),
    Case("header-non-utf8-reverse", "reverse", post(C, GOOD_C, headers={"X-Request-Id": "id-\xe9\xff"}), expect="any"),
    Case("header-huge-100k", "forward", post(R, GOOD_R, headers={"X-Big": "a" * 100_000}), expect="4xx"),
    Case(
        "header-many-2000",
        "forward",
        http("POST", R, js(GOOD_R), headers={f"X-H{i}": "v" for i in range(2000)}),
        expect="4xx",
    ),
    Case("url-huge-100k", "forward", http("GET", "/v1/models?x=" + "a" * 100_000), expect="4xx"),
    Case("garbage-request-line", "forward", b"HELLO WORLD\r\n\r\n", expect="4xx"),
    Case(
        "tls-hello-on-plain-port",
        "forward",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,
        expect="none_or_4xx",
    ),
    # -- lengths and framing ---------------------------------------------------------------------------------
    Case(
        "conflicting-content-length",
        "forward",
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n"
        b"Content-Length: 40\r\nConnection: close\r\n\r\n" + js(GOOD_R),
        expect="4xx",
    ),
    Case(
        "content-length-and-chunked",
        "forward",
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n",
        expect="4xx",
    ),
    Case(
        "content-length-not-a-number",
        "forward",
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\nConnection: close\r\n\r\n{}",
        expect="4xx",
    ),
    Case(
        "content-length-negative",
        "forward",
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\nConnection: close\r\n\r\n{}",
        expect="4xx",
    ),
    Case(
        "truncated-body",
        "forward",
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"
        b"Connection: close\r\n\r\n" + js(GOOD_R)[:20],
        expect="none_or_4xx",
        shutdown_write=True,
    ),
    Case(
        "truncated-chunked",
        "reverse",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n40\r\n{"model"',
        expect="none_or_4xx",
        shutdown_write=True,
    ),
    Case(
        "chunked-bad-size",
        "forward",
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked"
        b"\r\nConnection: close\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
        expect="4xx",
    ),
    Case(
        "chunked-valid",
        "forward",
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked"
        b"\r\nConnection: close\r\n\r\n" + b"%x\r\n" % len(js(GOOD_R)) + js(GOOD_R) + b"\r\n0\r\n\r\n",
        expect="ok",
    ),
    Case(
        "http10-no-host",
        "forward",
        b"POST /v1/responses HTTP/1.0\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(js(GOOD_R)) + js(GOOD_R),
        expect="ok",
    ),
    Case("expect-100-continue", "reverse", post(C, GOOD_C, headers={"Expect": "100-continue"}), expect="any"),
]

# wrong types in every field of both request shapes: a 400 naming the field
RESPONSES_FIELDS: dict[str, Any] = {
    "input": 5,
    "instructions": [],
    "stream": "true",
    "temperature": "hot",
    "top_p": {},
    "tools": "x",
    "tool_choice": 5,
    "parallel_tool_calls": "yes",
    "text": "x",
    "reasoning": "high",
    "metadata": [],
    "store": "no",
    "previous_response_id": 5,
    "include": "x",
    "user": 5,
    "truncation": 5,
    "top_logprobs": "x",
    "max_tool_calls": "x",
    "service_tier": 5,
    "background": "x",
    "prompt_cache_key": 5,
    "stream_options": 5,
    "safety_identifier": [],
    "conversation": 5,
    "max_output_tokens": "many",
}
CHAT_FIELDS: dict[str, Any] = {
    "messages": "x",
    "stream": "true",
    "temperature": "hot",
    "top_p": "x",
    "max_tokens": "x",
    "max_completion_tokens": "x",
    "tools": "x",
    "tool_choice": 5,
    "n": "2",
    "stop": 5,
    "presence_penalty": "x",
    "frequency_penalty": [],
    "logit_bias": 5,
    "logprobs": "yes",
    "top_logprobs": "x",
    "response_format": "json",
    "seed": "x",
    "user": 5,
    "stream_options": 5,
    "parallel_tool_calls": "x",
    "reasoning_effort": 5,
    "metadata": [],
    "store": "x",
    "functions": 5,
    "modalities": 5,
    "prediction": 5,
    "service_tier": 5,
}
CASES += [
    Case(f"r-type-{k}", "forward", post(R, {**GOOD_R, k: v}), status=400, param=k) for k, v in RESPONSES_FIELDS.items()
]
CASES += [
    Case(f"r-item-type-{n}", "forward", post(R, {**GOOD_R, "input": [item]}), status=400, param="input")
    for n, item in enumerate(
        [
            5,
            {"type": 5},
            {"role": "user", "content": 5},
            {"type": "function_call_output"},
            {"role": "user", "content": [{"type": "input_text", "text": 5}]},
        ]
    )
]
CASES += [
    Case(f"c-type-{k}", "reverse", post(C, {**GOOD_C, k: v}), status=400, param=k) for k, v in CHAT_FIELDS.items()
]
CASES += [
    Case(f"c-message-{n}", "reverse", post(C, {**GOOD_C, "messages": [m]}), status=400, param="messages")
    for n, m in enumerate(
        [
            5,
            {"role": 5, "content": "x"},
            {"role": "user", "content": 5},
            {"role": "wizard", "content": "x"},
            {"role": "user"},
            {"role": "tool", "content": "x"},
        ]
    )
]
CASES += [Case("c-empty-messages", "reverse", post(C, {**GOOD_C, "messages": []}), status=400, param="messages")]


def _encoded(kind: str, obj: Any) -> bytes:
    import gzip
    import zlib

    from backports import zstd

    raw = js(obj)
    return {"gzip": gzip.compress, "deflate": zlib.compress, "zstd": zstd.compress}[kind](raw)


# Content-Encoding: a body that is what its header says is read; one that lies is a 400 envelope.
CASES += [
    Case(
        f"encoding-{kind}-real-{direction}",
        direction,
        http("POST", path, _encoded(kind, good), headers={"Content-Encoding": kind}),
        expect="ok",
    )
    for kind in ("gzip", "deflate", "zstd")
    for direction, path, good in (("forward", R, GOOD_R), ("reverse", C, GOOD_C))
]
CASES += [
    Case(
        f"encoding-{kind}-lies-{direction}",
        direction,
        http("POST", path, js(good), headers={"Content-Encoding": kind}),
        status=400,
    )
    for kind in ("gzip", "deflate", "zstd")
    for direction, path, good in (("forward", R, GOOD_R), ("reverse", C, GOOD_C))
]
CASES += [
    Case(
        "encoding-gzip-truncated",
        "forward",
        http("POST", R, _encoded("gzip", GOOD_R)[:20], headers={"Content-Encoding": "gzip"}),
        status=400,
    ),
    Case("encoding-unknown", "forward", http("POST", R, js(GOOD_R), headers={"Content-Encoding": "br"}), status=400),
]


@pytest.fixture
async def proxies(fault_upstream: FaultUpstream) -> Any:
    async with (
        running_proxy(fault_config(fault_upstream.base_url, "forward")) as fwd,
        running_proxy(fault_config(fault_upstream.base_url, "reverse")) as rev,
    ):
        yield {"forward": fwd, "reverse": rev}


def _port(handle: Any) -> int:
    return int(handle.url.rsplit(":", 1)[1])


def test_at_least_fifty_cases() -> None:
    assert len(CASES) >= 50
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_hostile(case: Case, proxies: dict[str, Any], fault_upstream: FaultUpstream) -> None:
    port = _port(proxies[case.direction])
    with structlog.testing.capture_logs() as logs:
        resp = await raw_http(port, case.data, timeout=20, shutdown_write=case.shutdown_write)
    where = case.id
    if resp is None:
        assert case.expect == "none_or_4xx", f"{where}: the connection closed without an answer"
    else:
        check_clean(resp.body)
        assert resp.status < 500, f"{where}: HTTP {resp.status} (a 5xx for client input): {resp.body[:300]!r}"
        if resp.status >= 400:
            assert case.expect in ("4xx", "any", "none_or_4xx"), f"{where}: HTTP {resp.status}: {resp.body[:300]!r}"
            assert "application/json" in resp.headers.get("content-type", ""), (
                f"{where}: HTTP {resp.status} is a framework page, not OpenAI's envelope: "
                f"{resp.headers.get('content-type')!r} {resp.body[:200]!r}"
            )
            err = check_envelope(resp.body, resp.status)
            if case.status is not None:
                assert resp.status == case.status, f"{where}: HTTP {resp.status}, expected {case.status}: {err}"
            if case.param is not None:
                assert (err["param"] or "").startswith(case.param), (
                    f"{where}: param {err['param']!r}, expected {case.param!r}: {err['message']}"
                )
            assert "Traceback" not in err["message"]
        else:
            assert case.expect in ("ok", "any"), f"{where}: expected a 4xx, got HTTP {resp.status}: {resp.body[:300]!r}"
            assert 200 <= resp.status < 300 or resp.status == 100
    failed = [
        e
        for e in logs
        if e.get("log_level") in ("error", "critical", "exception") or e.get("event") == "request.failed"
    ]
    assert not failed, f"{where}: crossfeed logged an unexpected failure: {failed[:2]}"
    # no injected header reached the backend
    for seen in fault_upstream.requests:
        assert "x-injected" not in seen.headers, f"{where}: an injected header reached the upstream"
    # crossfeed survived
    health = await raw_http(port, http("GET", "/healthz"), timeout=5)
    assert health is not None and health.status == 200, f"{where}: crossfeed no longer answers /healthz"
