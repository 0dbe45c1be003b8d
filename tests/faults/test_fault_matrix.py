"""Every upstream fault x direction (forward, reverse) x stream (true, false).

For each case the client must get, within a bound: an HTTP error in OpenAI's envelope before any
stream byte, or a well-formed stream with exactly one terminal event, last (reverse: one
finish_reason then ``[DONE]``, or an error object). Success only when the upstream really
succeeded, with exactly its text (nothing sent after its end leaks). The body is valid UTF-8 with
no Python exception text. The upstream request is closed within seconds, and the next normal
request through the same crossfeed succeeds.

crossfeed runs in-process (tests/faults/harness.py ``fault_config``) with generous timeouts
(first byte 30 s, idle 20 s), except for the two faults whose expected outcome is a timeout:
``slow_first_byte`` (first byte 1 s) and ``stall_mid`` (idle 0.75 s), each routed by its model name
to an upstream with only that timeout small. No answer that must succeed depends on the speed of
the machine; every other fault must end on its own, long before a generous timeout could end it.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from tests.faults.fault_upstream import (
    ERROR_MESSAGE,
    HUGE_TEXT,
    LEAK,
    RETRY_AFTER,
    STALL_SECONDS,
    TEXT,
    TINY_TEXT,
    FaultUpstream,
)
from tests.faults.harness import (
    DIRECTIONS,
    ENDPOINT,
    GENEROUS_TIMEOUTS,
    TIMEOUT_FAULT_TIMEOUTS,
    Outcome,
    fault_config,
    parse_outcome,
    request_body,
)
from tests.support.app_server import running_proxy

SUCCESS, FAIL, EITHER = "success", "fail", "either"
# Hang guards, not speed limits: a correct answer takes milliseconds (the timeout faults about
# one second), so these are orders of magnitude away. BOUND stays below the generous idle (20 s)
# and first-byte (30 s) timeouts on purpose: a fault that crossfeed failed to notice, ended only
# by one of those, must fail here rather than pass as a "clean failure".
BOUND = 15.0
BIG_BOUND = 60.0  # 10 MB line, 100,000 chunks: a few seconds here, far more on a loaded CI machine
assert min(GENEROUS_TIMEOUTS.idle, GENEROUS_TIMEOUTS.first_byte) > BOUND
# The upstream request must be closed by crossfeed, not by the fault upstream itself ending its
# 30 s stall (STALL_SECONDS): a polled wait, well below that, generous for a slow machine.
UPSTREAM_CLOSED_WITHIN = 10.0
assert UPSTREAM_CLOSED_WITHIN < STALL_SECONDS

# fault -> (expectation, HTTP status when the answer must be an HTTP error, message fragment kept)
HTTP_FAULTS = {
    "http_400": (400, "fault: this request is invalid"),
    "http_400_split": (400, "fault: this request is invalid"),  # the error body arrives in 3 writes
    "http_401": (401, "fault: incorrect API key provided"),
    "http_404": (404, "fault: the model does not exist"),
    "http_429": (429, "fault: rate limit reached"),
    "http_500": (500, "fault: the server had an error"),
    "http_502_html": (502, None),
    "http_503_empty": (503, None),
    "refuse": (502, None),
    "reset_before": (502, None),
    "close_before": (502, None),
    "slow_first_byte": (504, None),
}
OTHER_FAULTS = [
    "stall_mid",
    "cut_fin",
    "cut_rst",
    "invalid_utf8",
    "split_multibyte",
    "crlf",
    "huge_line",
    "error_midstream",
    "eof_finish_no_done",
    "eof_no_finish",
    "after_done",
    "tiny_chunks",
    "unparsable",
    "wrong_type_json",
    "wrong_type_html",
    "bad_shape",
]
ALL_FAULTS = [*HTTP_FAULTS, *OTHER_FAULTS]
TIMEOUT_FAULTS = {"stall_mid"}  # besides slow_first_byte (an HTTP fault: 504): the answer is a timeout
assert TIMEOUT_FAULTS | {"slow_first_byte"} == set(TIMEOUT_FAULT_TIMEOUTS), (
    "every fault that must time out has its small timeout in fault_config, and only those"
)


def expectation(fault: str, direction: str, stream: bool) -> str:
    if fault in HTTP_FAULTS:
        return "http"
    if fault in ("split_multibyte", "crlf", "tiny_chunks", "huge_line"):
        return SUCCESS  # huge_line: 10 MB is under both caps (16 MB SSE event, 64 MB body)
    if fault == "after_done":
        # streams: nothing after [DONE] / the terminal event may leak. Not streamed: bytes past
        # Content-Length break HTTP framing, so a clean 502 is as good as the exact answer.
        return SUCCESS if stream else EITHER
    if fault == "eof_finish_no_done":
        # chat: finish_reason seen, only [DONE] missing -> the answer is complete. Responses: no
        # terminal event -> a failure. Not streamed: a whole body delimited by the close -> success.
        return FAIL if (stream and direction == "reverse") else SUCCESS
    if fault in ("wrong_type_json", "bad_shape"):
        return EITHER  # relayed exactly (bad_shape: the malformed piece skipped), or a clean failure
    return FAIL


def expected_text(fault: str, stream: bool) -> str:
    return {"huge_line": HUGE_TEXT, "tiny_chunks": TINY_TEXT}.get(fault, TEXT)


async def call(
    session: aiohttp.ClientSession, url: str, direction: str, model: str, stream: bool, bound: float
) -> tuple[Outcome, float]:
    start = time.monotonic()

    async def go() -> Outcome:
        async with session.post(
            url + ENDPOINT[direction],
            json=request_body(direction, model, stream),
            headers={"Authorization": "Bearer sk-fault-client"},
        ) as r:
            raw = await r.read()
            return parse_outcome(direction, stream, r.status, {k.lower(): v for k, v in r.headers.items()}, raw)

    try:
        outcome = await asyncio.wait_for(go(), bound)
    except TimeoutError:
        raise AssertionError(f"{model}: no complete answer within {bound:g}s") from None
    return outcome, time.monotonic() - start


def assert_expected(fault: str, direction: str, stream: bool, out: Outcome) -> None:
    exp = expectation(fault, direction, stream)
    where = f"{fault}/{direction}/{'stream' if stream else 'json'}"
    assert LEAK.encode() not in out.raw, f"{where}: data sent after the upstream's end leaked through"
    if exp == "http":
        status, fragment = HTTP_FAULTS[fault]
        assert out.kind == "http_error", (
            f"{where}: expected HTTP {status} before any stream byte, got {out.kind} {out.status}: {out.raw[:300]!r}"
        )
        assert out.status == status, f"{where}: HTTP {out.status}, expected {status}: {out.error}"
        assert out.error is not None
        if fragment:
            assert fragment in out.error["message"], f"{where}: upstream message lost: {out.error}"
        assert "<html" not in out.error["message"].lower()
        if fault == "http_429":
            assert out.headers.get("retry-after") == RETRY_AFTER, f"{where}: Retry-After not passed on"
        return
    if exp == SUCCESS:
        assert out.kind == "success", (
            f"{where}: expected success, got {out.kind} {out.status}: {out.error or out.raw[:300]!r}"
        )
        assert out.text == expected_text(fault, stream), (
            f"{where}: text differs from the upstream's ({len(out.text or '')} chars)"
        )
        return
    if exp == EITHER and out.kind == "success":
        assert out.text == expected_text(fault, stream), f"{where}: success claimed with different text"
        return
    # a failure: an HTTP error envelope (never a 2xx body that looks like an answer), or a stream
    # that ends with its failure event
    if out.kind == "http_error":
        # 502 / 504 name the upstream's fault; a 500 would mean crossfeed itself broke
        assert out.status in (502, 503, 504), f"{where}: upstream fault answered HTTP {out.status}: {out.error}"
        if fault in TIMEOUT_FAULTS:
            assert out.status == 504, f"{where}: a stalled upstream is a timeout (504), got {out.status}: {out.error}"
    else:
        assert stream, f"{where}: a non-streamed failure must be an HTTP error, got 200 {out.kind}: {out.raw[:300]!r}"
        assert out.kind == "failed", (
            f"{where}: expected a failure, got a stream ending {out.kind} "
            f"(text {out.text[:60] if out.text else out.text!r})"
        )
        assert out.error and out.error.get("message"), f"{where}: failure without an error message"
        assert out.error.get("code") != "internal_error", (
            f"{where}: the stream failed as crossfeed's own internal error, not the upstream's fault: {out.error}"
        )
    if fault == "error_midstream":
        assert ERROR_MESSAGE in str(out.error), f"{where}: the upstream's error message was lost: {out.error}"


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("fault", ALL_FAULTS)
async def test_fault(fault: str, direction: str, stream: bool, fault_upstream: FaultUpstream) -> None:
    config = fault_config(fault_upstream.base_url, direction)
    bound = BIG_BOUND if fault in ("huge_line", "tiny_chunks") else BOUND
    async with running_proxy(config) as proxy, aiohttp.ClientSession() as session:
        out, _ = await call(session, proxy.url, direction, f"fault:{fault}", stream, bound)  # fails past `bound`
        assert_expected(fault, direction, stream, out)
        # the upstream request is closed within seconds once the client has its answer
        assert await fault_upstream.wait_idle(UPSTREAM_CLOSED_WITHIN), (
            f"upstream request still open {UPSTREAM_CLOSED_WITHIN}s after the answer ({fault_upstream.inflight})"
        )
        if fault != "refuse":
            assert fault_upstream.requests and fault_upstream.requests[-1].fault == fault
        # and the next normal request succeeds
        nxt, _ = await call(session, proxy.url, direction, "fault:ok", stream, BOUND)
        assert nxt.kind == "success" and nxt.text == TEXT, (
            f"next normal request: {nxt.kind} {nxt.status} {nxt.error or nxt.raw[:200]!r}"
        )
        assert await fault_upstream.wait_idle(UPSTREAM_CLOSED_WITHIN)


@pytest.mark.parametrize("direction", DIRECTIONS)
async def test_upstream_401_does_not_poison_later_requests(direction: str, fault_upstream: FaultUpstream) -> None:
    """After an upstream 401 (and a 429), healthy requests are not blocked or rate limited."""
    async with (
        running_proxy(fault_config(fault_upstream.base_url, direction)) as proxy,
        aiohttp.ClientSession() as session,
    ):
        for model in ("fault:http_401", "fault:http_429", "fault:http_401"):
            out, _ = await call(session, proxy.url, direction, model, True, BOUND)
            assert out.kind == "http_error"
        results = await asyncio.gather(
            *[call(session, proxy.url, direction, "fault:ok", s, BOUND) for s in (True, False) * 5]
        )
        assert all(o.kind == "success" and o.text == TEXT for o, _ in results)


PASSTHROUGH_FAULTS = [
    "refuse",
    "reset_before",
    "close_before",
    "slow_first_byte",
    "http_429",
    "http_502_html",
    "http_503_empty",
]


@pytest.mark.parametrize("fault", PASSTHROUGH_FAULTS)
@pytest.mark.parametrize("direction", DIRECTIONS)
async def test_passthrough_endpoint_faults_before_the_stream(
    fault: str, direction: str, fault_upstream: FaultUpstream
) -> None:
    """The endpoint of the backend's own API is passed through unchanged; a fault before the first
    byte must still reach the client as OpenAI's envelope with the upstream's status."""
    other = "reverse" if direction == "forward" else "forward"  # the client speaks the backend's API
    async with (
        running_proxy(fault_config(fault_upstream.base_url, direction)) as proxy,
        aiohttp.ClientSession() as session,
    ):
        out, _ = await call(session, proxy.url, other, f"fault:{fault}", True, BOUND)
        status, fragment = HTTP_FAULTS[fault]
        assert out.kind == "http_error" and out.status == status, (out.status, out.raw[:200])
        if fragment:
            assert fragment in out.error["message"]
        if fault == "http_429":
            assert out.headers.get("retry-after") == RETRY_AFTER
        assert await fault_upstream.wait_idle(UPSTREAM_CLOSED_WITHIN)
        nxt, _ = await call(session, proxy.url, other, "fault:ok", True, BOUND)
        assert nxt.kind == "success" and nxt.text == TEXT
