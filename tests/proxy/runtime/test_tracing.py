"""Tracing's switch (proxy/runtime/tracing.py): when the OTEL_* variables turn it on, and that a
crossfeed untraced (or traced without the extra installed) imports no ``opentelemetry`` module,
even while it serves a turn whose client sent a ``traceparent``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest
import structlog.testing

from crossfeed.proxy.runtime import tracing
from tests.support.paths import ROOT


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
    ],
)
def test_the_variables_that_turn_it_on(environ: dict[str, str], on: bool) -> None:
    assert tracing.wanted(environ) is on


def test_the_content_opt_in() -> None:
    assert tracing.capture_content({"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"})
    assert not tracing.capture_content({})


async def test_the_hooks_do_nothing_outside_a_traced_turn() -> None:
    headers = {"a": "b"}
    assert tracing.inject(headers) is headers
    tracing.leg_start(None, "/x", {}, headers, ())
    tracing.leg_end(error=RuntimeError("x"))
    with tracing.span("s", {}) as span:
        span.fail("why")
        span.set({"k": 1})
    with tracing.Tracer().turn({}, "/v1/responses", {}, {}):
        pass
    assert headers == {"a": "b"}


PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def test_untraced_the_client_trace_context_is_passed_within_its_turn_only() -> None:
    sent = {"traceparent": PARENT, "tracestate": "a=1"}
    with tracing.Tracer().turn(sent, "/v1/responses", {}, {}):
        assert tracing.inject({"x": "y"}) == {"x": "y", **sent}
        headers = {"x": "y"}
        tracing.leg_start(None, "/x", {}, headers, ())
        assert headers == {"x": "y", **sent}
    headers = {"x": "y"}
    assert tracing.inject(headers) is headers  # the turn is over


@pytest.mark.parametrize(
    ("sent", "passed"),
    [
        ({"traceparent": PARENT, "tracestate": "a=1,b=2"}, {"traceparent": PARENT, "tracestate": "a=1,b=2"}),
        ({"traceparent": PARENT, "tracestate": "a=" + "x" * 511}, {"traceparent": PARENT}),
        ({"traceparent": PARENT, "tracestate": "a=1\x00"}, {"traceparent": PARENT}),
        ({"traceparent": PARENT.upper()}, None),
        ({"traceparent": PARENT[:-1]}, None),
        ({"traceparent": "ff" + PARENT[2:]}, None),
        ({"tracestate": "a=1"}, None),
        ({}, None),
    ],
)
def test_which_client_trace_context_is_passed(sent: dict[str, str], passed: dict[str, str] | None) -> None:
    assert tracing.client_context(sent) == passed


def test_a_tracestate_sent_twice_is_one_list() -> None:
    from multidict import CIMultiDict

    sent = CIMultiDict([("traceparent", PARENT), ("tracestate", "a=1"), ("TraceState", "b=2")])
    assert tracing.client_context(sent) == {"traceparent": PARENT, "tracestate": "a=1,b=2"}


SERVE_ONE_TURN = """
import asyncio, sys, tempfile
{block}
import aiohttp
from tests.fakes.upstream import FakeUpstream, SSEReply
from tests.support.app_server import running_proxy
from tests.support.chat_chunks import DONE, chunk

async def main():
    up = FakeUpstream()
    await up.start()
    up.default = SSEReply(chunk({{"role": "assistant", "content": "hi"}}, "stop") + chunk(None, usage=(1, 1)) + DONE)
    settings = {{"upstream.base_url": up.base_url, "store.data_dir": tempfile.mkdtemp()}}
    async with running_proxy(settings, environ={environ!r}) as proxy, aiohttp.ClientSession() as s:
        headers = {{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
        body = {{"model": "m", "input": "hi", "stream": True}}
        async with s.post(proxy.url + "/v1/responses", json=body, headers=headers) as r:
            assert r.status == 200 and b"response.completed" in await r.read()
    await up.close()
    print("OTEL", sorted(m for m, v in sys.modules.items() if m.split(".")[0] == "opentelemetry" and v is not None))

asyncio.run(main())
"""


def serve_one_turn(environ: dict[str, str], block: str = "") -> subprocess.CompletedProcess[str]:
    script = SERVE_ONE_TURN.format(block=block, environ=environ)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_untraced_nothing_of_opentelemetry_is_imported() -> None:
    done = serve_one_turn({})
    assert "OTEL []" in done.stdout


def test_asked_for_without_the_extra_it_warns_and_runs_untraced() -> None:
    # the extra "not installed": its package refuses to import
    done = serve_one_turn(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, block="sys.modules['opentelemetry'] = None"
    )
    assert "OTEL []" in done.stdout
    assert "tracing.unavailable" in done.stdout + done.stderr


class _SlowExport:
    def __init__(self) -> None:
        self.stopped = threading.Event()

    def start_turn(self, *args: object) -> None:
        raise AssertionError

    def shutdown(self) -> None:
        self.stopped.wait(5)


async def test_a_collector_that_does_not_answer_does_not_hold_up_the_stop() -> None:
    live = _SlowExport()
    started = time.monotonic()
    await tracing.Tracer(live).close(wait=0.2)  # type: ignore[arg-type]
    assert time.monotonic() - started < 2
    live.stopped.set()


def test_a_protocol_other_than_http_protobuf_is_named_in_a_warning() -> None:
    pytest.importorskip("opentelemetry.sdk")
    with structlog.testing.capture_logs() as logs:
        tracer = tracing.configure({"OTEL_TRACES_EXPORTER": "console", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    try:
        assert tracer.on
        assert [e["event"] for e in logs] == ["tracing.protocol_unsupported"]
    finally:
        tracer.shutdown()
