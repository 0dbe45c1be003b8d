"""Operator features: auth, stream limits, request ids, metrics, readiness, drain on shutdown."""

from __future__ import annotations

import asyncio
import io
import json
import time
from typing import Any

import aiohttp
import httpx2
import openai
import pytest
import structlog

from crossfeed.proxy.runtime.config import load_config
from crossfeed.proxy.runtime.logs import configure_logging
from crossfeed.proxy.streaming.lifecycle import PROBES
from tests.fakes.upstream import FakeUpstream, SSEReply
from tests.support.app_server import running_proxy, start_proxy
from tests.support.captures import data_objects, read_capture
from tests.support.chat_chunks import DONE, chunk, usage_chunk
from tests.support.clients import Captured, TeeTransport, validate_captured
from tests.support.validators import validate_chat_sse, validate_responses_sse
from tests.support.waiting import wait_until

GUARD = 30.0  # seconds: hang guard of every wait in this file; what is awaited takes milliseconds


SLOW = chunk({"content": "tick "}) * 200 + chunk({}, "stop") + DONE


def config_for(upstream: FakeUpstream, tmp_path, **over: object):
    return load_config(None, {}, {"upstream.base_url": upstream.base_url, "store.backend": "memory", **over})


def sdk_client(base_url: str, captured: list[Captured], **kw: object) -> openai.AsyncOpenAI:
    """An official SDK client whose every response body is recorded (tests/support/clients.py
    ``TeeTransport``): the ``captured`` fixture runs each SSE body through the strict validators."""
    http = httpx2.AsyncClient(transport=TeeTransport(captured), timeout=GUARD)
    return openai.AsyncOpenAI(base_url=base_url, http_client=http, max_retries=0, timeout=GUARD, **kw)  # type: ignore[arg-type]


async def test_inbound_keys(upstream: FakeUpstream, tmp_path, captured) -> None:
    cfg = config_for(upstream, tmp_path, **{"server.inbound_keys_env": "CF_KEYS"})
    async with running_proxy(cfg, environ={"CF_KEYS": "k-one, k-two"}) as handle:
        upstream.default = SSEReply(chunk({"content": "ok"}, "stop") + DONE)
        for key, ok in (("k-two", True), ("k-one", True), ("wrong", False), ("", False)):
            c = sdk_client(
                handle.base_url, captured, api_key=key or "x", default_headers={} if key else {"Authorization": ""}
            )
            if ok:
                s = await c.responses.create(model="m", input="x", stream=True)
                assert [e async for e in s][-1].type == "response.completed"
            else:
                with pytest.raises(openai.AuthenticationError) as info:
                    await c.responses.create(model="m", input="x", stream=True)
                assert info.value.code == "invalid_api_key"
            await c.close()
        async with aiohttp.ClientSession() as s:
            async with s.get(handle.url + "/healthz") as r:
                assert r.status == 200  # probes stay open
    assert validate_captured(captured) == 2  # both accepted streams passed the strict validator
    # inbound keys are crossfeed's own and no backend key is configured: the two accepted
    # requests reach the upstream with no Authorization header at all
    assert len(upstream.requests) == 2
    for r in upstream.requests:
        assert not [k for k in r.headers if k.lower() == "authorization"], f"forwarded: {r.headers}"


async def test_concurrent_stream_limit_429(upstream: FakeUpstream, tmp_path) -> None:
    cfg = config_for(upstream, tmp_path)
    up = cfg.upstreams[0].model_copy(update={"max_concurrent_streams": 1})
    cfg = cfg.model_copy(update={"upstreams": (up,)})
    async with running_proxy(cfg) as handle:
        upstream.reply(SSEReply(SLOW, delay=0.01), SSEReply(chunk({"content": "x"}, "stop") + DONE))
        async with aiohttp.ClientSession() as s:
            async with s.post(
                handle.base_url + "/responses", json={"model": "m", "input": "a", "stream": True}
            ) as first:
                head = await first.content.readany()
                async with s.post(
                    handle.base_url + "/responses", json={"model": "m", "input": "b", "stream": True}
                ) as second:
                    assert second.status == 429
                    assert second.headers["Retry-After"] == "1"
                    assert (await second.json())["error"]["code"] == "rate_limit_exceeded"
                validate_responses_sse(head + await first.read())


def completed_lines(buf: io.StringIO, request_id: str) -> list[dict[str, Any]]:
    """The JSON ``request.completed`` summary lines logged for one request."""
    lines = [json.loads(line) for line in buf.getvalue().splitlines() if line.startswith("{")]
    return [e for e in lines if e.get("event") == "request.completed" and e.get("request_id") == request_id]


async def test_request_id_header_logs_and_metrics(upstream: FakeUpstream, tmp_path) -> None:
    buf = io.StringIO()
    configure_logging("info", "json", stream=buf)
    try:
        async with running_proxy(config_for(upstream, tmp_path)) as handle:
            upstream.reply(SSEReply(chunk({"content": "hi"}, "stop") + usage_chunk(3, 2) + DONE))
            async with aiohttp.ClientSession() as s:
                async with s.post(
                    handle.base_url + "/responses",
                    json={"model": "m", "input": "a", "stream": True},
                    headers={"X-Request-ID": "abc-123", "Authorization": "Bearer sk-secret-value"},
                ) as r:
                    assert r.headers["X-Request-ID"] == "abc-123"
                    validate_responses_sse(await r.read())
                async with s.get(handle.base_url + "/nope") as r:
                    assert r.headers["X-Request-ID"].startswith("req_")
                async with s.get(handle.url + "/metrics") as r:
                    text = await r.text()
    finally:
        structlog.reset_defaults()
    done = completed_lines(buf, "abc-123")
    assert done and done[0]["status"] == 200 and done[0]["terminal"] == "completed" and done[0]["model"] == "m"
    assert done[0]["usage"] == {"in": 3, "out": 2}
    assert "sk-secret-value" not in buf.getvalue()
    assert 'crossfeed_requests_total{key="none",model="m",route="/v1/responses",status="200"} 1.0' in text
    assert 'crossfeed_tokens_total{direction="out",model="m"} 2.0' in text
    assert 'crossfeed_terminal_events_total{route="/v1/responses",terminal="completed"} 1.0' in text
    assert "crossfeed_active_streams" in text and "crossfeed_time_to_first_byte_seconds_bucket" in text
    assert 'python_gc_collections_total{generation="0"}' in text  # the collector's passes (collector.py)


async def test_chat_clients_streams_record_upstream_usage(upstream: FakeUpstream, tmp_path) -> None:
    """Chat client, Responses backend, streamed, the client not asking for usage: the tokens the
    backend's terminal Response reports still reach the summary line and the token counter."""
    name = "responses/openai-gpt5-reasoning-function-call-usage.sse"
    usage = next(e["response"]["usage"] for e in data_objects(read_capture(name)) if e["type"] == "response.completed")
    assert usage["output_tokens"] > 0
    buf = io.StringIO()
    configure_logging("info", "json", stream=buf)
    try:
        async with running_proxy(config_for(upstream, tmp_path, **{"upstream.api": "responses"})) as handle:
            upstream.reply(SSEReply(read_capture(name), seed=3, max_piece=29))
            async with aiohttp.ClientSession() as s:
                async with s.post(
                    handle.base_url + "/chat/completions",
                    headers={"X-Request-ID": "rev-1"},
                    json={"model": "m", "messages": [{"role": "user", "content": "a"}], "stream": True},
                ) as r:
                    validate_chat_sse(await r.read(), expect_usage=False)
                async with s.get(handle.url + "/metrics") as r:
                    text = await r.text()
    finally:
        structlog.reset_defaults()
    done = completed_lines(buf, "rev-1")
    assert done and done[0]["terminal"] == "tool_calls"
    assert done[0]["usage"] == {"in": usage["input_tokens"], "out": usage["output_tokens"]}
    assert f'crossfeed_tokens_total{{direction="out",model="m"}} {float(usage["output_tokens"])}' in text


async def test_active_streams_gauge_counts_open_streams(upstream: FakeUpstream, tmp_path) -> None:
    """The gauge is read from the stream limits at scrape time: 1 while a stream is open, 0 after."""
    async with running_proxy(config_for(upstream, tmp_path)) as handle:
        upstream.reply(SSEReply(SLOW, delay=0.01))
        series = 'crossfeed_active_streams{upstream="default"}'

        async def gauge(s: aiohttp.ClientSession) -> str:
            async with s.get(handle.url + "/metrics") as r:
                return next((line for line in (await r.text()).splitlines() if line.startswith(series)), "")

        async with aiohttp.ClientSession() as s:
            assert await gauge(s) == ""  # no stream yet: the family has no series
            async with s.post(handle.base_url + "/responses", json={"model": "m", "input": "a", "stream": True}) as r:
                head = await r.content.readany()
                assert await gauge(s) == series + " 1.0"
                validate_responses_sse(head + await r.read())
            assert await gauge(s) == series + " 0.0"


async def test_readyz_follows_upstream_probe(upstream: FakeUpstream, tmp_path) -> None:
    async with running_proxy(config_for(upstream, tmp_path)) as handle:
        # the first probe runs at startup: wait (polled) until crossfeed has recorded its answer
        assert await wait_until(lambda: "default" in handle.app[PROBES], GUARD), "no probe answer recorded"
        async with aiohttp.ClientSession() as s, s.get(handle.url + "/readyz") as r:
            assert r.status == 200, await r.text()
        assert upstream.probes >= 1
    with structlog.testing.capture_logs() as logs:
        async with running_proxy({"upstream.base_url": "http://127.0.0.1:9/v1", "store.backend": "memory"}) as dead:
            # not ready because the probe was made and failed (polled), not merely not made yet
            assert await wait_until(lambda: any(e.get("event") == "upstream.probe.failed" for e in logs), GUARD), (
                "the probe of the dead upstream never failed"
            )
            async with aiohttp.ClientSession() as s, s.get(dead.url + "/readyz") as r:
                assert r.status == 503
                problem = (await r.json())["problems"][0]
            # the operator's page names the upstream, its URL and the last error
            assert problem.startswith("upstream 'default' at http://127.0.0.1:9/v1 has not answered a probe")
            assert "cannot connect to the upstream 'default'" in problem
            failed = next(e for e in logs if e.get("event") == "upstream.probe.failed")
            assert failed["url"] == "http://127.0.0.1:9/v1/models" and failed["error"]
            assert "default" not in dead.app[PROBES]


async def test_shutdown_ends_open_streams_with_terminal_event(upstream: FakeUpstream, tmp_path) -> None:
    handle = await start_proxy(config_for(upstream, tmp_path, **{"server.drain_seconds": 0.3}))
    upstream.default = SSEReply(chunk({"content": "tick "}) * 10_000 + DONE, delay=0.02)
    async with aiohttp.ClientSession() as s:

        async def one() -> bytes:
            async with s.post(handle.base_url + "/responses", json={"model": "m", "input": "a", "stream": True}) as r:
                return await r.read()

        tasks = [asyncio.create_task(one()) for _ in range(5)]
        # all five streams open upstream before the shutdown starts (polled); each would last 200 s
        assert await wait_until(lambda: upstream.open_requests == 5, GUARD), f"{upstream.open_requests} open"
        await asyncio.wait_for(handle.stop(), GUARD)
        bodies = await asyncio.wait_for(asyncio.gather(*tasks), GUARD)
    for body in bodies:
        events = validate_responses_sse(body)
        assert events[-1]["type"] == "response.failed"
        assert events[-1]["response"]["error"]["code"] == "server_shutting_down"


async def test_routing_by_model_and_merged_models(tmp_path, captured) -> None:
    from tests.fakes.upstream import JSONReply

    a, b = FakeUpstream(), FakeUpstream()
    await a.start()
    await b.start()
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text(f"""
[[upstreams]]
name = "a"
base_url = "{a.base_url}"
models = ["qwen-*", "exact-one"]
model_map = {{ "exact-one" = "backend-one" }}
[[upstreams]]
name = "b"
base_url = "{b.base_url}"
models = ["deepseek-*"]
[store]
backend = "memory"
""")
    from pathlib import Path

    try:
        async with running_proxy(load_config(Path(cfg_file), {})) as handle:
            a.default = SSEReply(chunk({"content": "from a"}, "stop") + DONE)
            b.default = SSEReply(chunk({"content": "from b"}, "stop") + DONE)
            c = sdk_client(handle.base_url, captured, api_key="k")
            for model, expect in (("qwen-7b", "from a"), ("deepseek-chat", "from b"), ("exact-one", "from a")):
                s = await c.responses.create(model=model, input="x", stream=True)
                events = [e async for e in s]
                assert events[-1].response.output_text == expect
            assert a.requests[-1].body["model"] == "backend-one"
            with pytest.raises(openai.NotFoundError) as info:
                await c.responses.create(model="gpt-9", input="x")
            assert info.value.code == "model_not_found"
            a.reply(
                JSONReply(
                    {
                        "object": "list",
                        "data": [{"id": "backend-one", "object": "model", "created": 0, "owned_by": "a"}],
                    }
                )
            )
            b.reply(
                JSONReply(
                    {
                        "object": "list",
                        "data": [{"id": "deepseek-chat", "object": "model", "created": 0, "owned_by": "b"}],
                    }
                )
            )
            ids = sorted(m.id for m in (await c.models.list()).data)
            assert ids == ["deepseek-chat", "exact-one"]
            await c.close()
    finally:
        await a.close()
        await b.close()
    assert validate_captured(captured) == 3  # the three streams passed the strict validator


def test_inbound_keys_never_fail_open() -> None:
    from crossfeed.proxy.app import create_app
    from crossfeed.proxy.errors import ConfigError

    cfg = load_config(None, {}, {"server.inbound_keys_env": "CF_KEYS", "store.backend": "memory"})
    with pytest.raises(ConfigError, match="refusing to start"):
        create_app(cfg, environ={})
    with pytest.raises(ConfigError, match="refusing to start"):
        create_app(cfg, environ={"CF_KEYS": " , "})


def _with_timeouts(cfg, **t):
    up = cfg.upstreams[0]
    return cfg.model_copy(update={"upstreams": (up.model_copy(update={"timeouts": up.timeouts.model_copy(update=t)}),)})


async def test_total_timeout_ends_stream_naming_it(upstream: FakeUpstream, tmp_path) -> None:
    cfg = _with_timeouts(config_for(upstream, tmp_path), total=1.0, idle=5.0)
    async with running_proxy(cfg) as handle:
        upstream.reply(SSEReply(chunk({"content": "tick "}) * 100 + DONE, max_piece=40, delay=0.05))
        async with aiohttp.ClientSession() as s:
            async with s.post(handle.base_url + "/responses", json={"model": "m", "input": "a", "stream": True}) as r:
                body = await asyncio.wait_for(r.read(), GUARD)
    events = validate_responses_sse(body)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "upstream_timeout"
    assert "total timeout of 1s" in events[-1]["response"]["error"]["message"]


async def _stream_through(handle: Any, route: str) -> bytes:
    """One streamed request on a translated (Responses client) or passed-through (chat client)
    route; the whole body. The proxy is stopped afterwards."""
    path, body = (
        ("/responses", {"model": "m", "input": "a", "stream": True})
        if route == "translated"
        else ("/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "a"}], "stream": True})
    )
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(handle.base_url + path, json=body) as r:
                assert r.status == 200
                return await asyncio.wait_for(r.read(), GUARD)
    finally:
        await handle.stop()


def _assert_whole(route: str, got: bytes, data: bytes, text: str) -> None:
    """The client received the whole answer: ``text`` translated, or ``data`` byte for byte."""
    if route == "translated":
        events = validate_responses_sse(got)
        assert events[-1]["type"] == "response.completed"
        assert events[-1]["response"]["output"][0]["content"][0]["text"] == text
    else:
        assert got == data


@pytest.mark.parametrize("route", ["translated", "passthrough"])
async def test_a_pause_longer_than_first_byte_does_not_end_the_stream(
    upstream: FakeUpstream, tmp_path, route: str
) -> None:
    """`first_byte` bounds the wait for the response headers only: with it set below `idle`, a
    stream whose chunks come 3 s apart (longer than first_byte, shorter than idle) completes.

    first_byte (2 s) is generous for the headers, which the fake sends at once with its first
    write; the pause (3 s) is longer still, so a first_byte applied to the body would end it."""
    cfg = _with_timeouts(config_for(upstream, tmp_path), first_byte=2.0, idle=30.0)
    async with running_proxy(cfg) as handle:
        data = chunk({"content": "slow "}) + chunk({"content": "answer"}, "stop") + DONE
        # seed 0 with max_piece len - 1: two writes (99 + 82 bytes, the pause inside the second
        # event), each followed by the pause
        upstream.reply(SSEReply(data, seed=0, max_piece=len(data) - 1, delay=3.0))
        got = await _stream_through(handle, route)
        _assert_whole(route, got, data, "slow answer")


@pytest.mark.parametrize("route", ["translated", "passthrough"])
async def test_a_stream_that_trickles_outlives_idle(upstream: FakeUpstream, tmp_path, route: str) -> None:
    """`idle` is a silence, not a duration: a stream whose pieces come 0.15 s apart runs well past
    an idle of 0.5 s and completes (the deadline moves with the data, at most once a second)."""
    cfg = _with_timeouts(config_for(upstream, tmp_path), idle=0.5)
    async with running_proxy(cfg) as handle:
        data = b"".join(chunk({"content": f"piece {i} "}) for i in range(4)) + chunk({"content": "end"}, "stop") + DONE
        upstream.reply(SSEReply(data, seed=0, max_piece=len(data) // 5, delay=0.15))  # ~10 pieces
        started = time.monotonic()
        got = await _stream_through(handle, route)
        assert time.monotonic() - started > 1.0  # the stream lasted twice the idle timeout
        _assert_whole(route, got, data, "piece 0 piece 1 piece 2 piece 3 end")


async def test_passthrough_stream_ends_after_idle_silence(upstream: FakeUpstream, tmp_path) -> None:
    """A passed-through stream whose upstream goes silent is ended after `idle` seconds, with what
    had arrived delivered, and the reason logged."""
    buf = io.StringIO()
    configure_logging("info", "json", stream=buf)
    cfg = _with_timeouts(config_for(upstream, tmp_path), idle=0.5)
    try:
        async with running_proxy(cfg) as handle:
            data = chunk({"content": "partial"}) + chunk({"content": " never"}, "stop") + DONE
            upstream.reply(SSEReply(data, max_piece=len(data), seed=1, stall_after=1))
            body = {"model": "m", "messages": [{"role": "user", "content": "a"}], "stream": True}
            async with aiohttp.ClientSession() as s:
                async with s.post(handle.base_url + "/chat/completions", json=body) as r:
                    assert r.status == 200
                    got = await asyncio.wait_for(r.read(), GUARD)
    finally:
        structlog.reset_defaults()
    assert got and data.startswith(got) and got != data
    lines = [json.loads(line) for line in buf.getvalue().splitlines() if line.startswith("{")]
    assert any(e.get("event") == "passthrough.ended_early" and e.get("reason") == "TimeoutError" for e in lines)


async def test_connect_timeout_is_504_naming_it(tmp_path, captured) -> None:
    import socket

    # A listener that never accepts, its queue filled: further connects hang in SYN.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    fillers = []
    for _ in range(8):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        fillers.append(c)
    cfg = _with_timeouts(
        load_config(None, {}, {"upstream.base_url": f"http://127.0.0.1:{port}/v1", "store.backend": "memory"}),
        connect=0.5,
    )
    try:
        async with running_proxy(cfg) as handle:
            async with sdk_client(handle.base_url, captured, api_key="k") as c:
                with pytest.raises(openai.APIStatusError) as info:
                    await c.responses.create(model="m", input="x", stream=True)
            assert info.value.status_code == 504
            assert info.value.code == "upstream_connect_timeout"
            assert "connect timeout of 0.5s" in info.value.message
    finally:
        for c in fillers:
            c.close()
        srv.close()


async def test_keepalive_comments_during_upstream_silence(upstream: FakeUpstream, tmp_path, captured) -> None:
    """A long silent phase (a reasoning model thinking) sends SSE comments; clients ignore them."""
    cfg = config_for(upstream, tmp_path, **{"server.keepalive_seconds": 0.2})
    async with running_proxy(cfg) as handle:
        first = chunk({"reasoning_content": "thinking"})
        upstream.reply(SSEReply(first + chunk({"content": "done"}, "stop") + DONE, max_piece=len(first), delay=0.9))
        async with sdk_client(handle.base_url, captured, api_key="k") as c:
            stream = await c.responses.create(model="m", input="x", stream=True)
            events = [e async for e in stream]
        assert events[-1].type == "response.completed" and events[-1].response.output_text == "done"
    raw = b"".join(c.raw for c in captured)
    assert raw.count(b": keepalive\n\n") >= 2
    assert validate_captured(captured) == 1


@pytest.mark.parametrize("direction", ["forward", "reverse"])
async def test_headers_arrive_while_the_upstream_is_silent(upstream: FakeUpstream, tmp_path, direction) -> None:
    """Headers of a stream share the first body write; a silent upstream must not hold them back:
    the client gets them (and, forward, `response.created`) before the upstream sends a byte."""
    over = {"server.keepalive_seconds": 120, **({"upstream.api": "responses"} if direction == "reverse" else {})}
    async with running_proxy(config_for(upstream, tmp_path, **over)) as handle:
        upstream.reply(SSEReply(b"data: never sent\n\n", stall_after=0))
        path, body = (
            ("/v1/responses", {"model": "m", "input": "x", "stream": True})
            if direction == "forward"
            else (
                "/v1/chat/completions",
                {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True},
            )
        )
        async with aiohttp.ClientSession() as s:
            async with asyncio.timeout(20):
                async with s.post(handle.url + path, json=body) as r:
                    assert r.status == 200
                    assert r.headers["Content-Type"].startswith("text/event-stream")
                    assert r.headers["X-Request-ID"]
                    if direction == "forward":
                        line = await r.content.readline()
                        assert line == b"event: response.created\n"
        assert upstream.requests  # the upstream was called and never answered


async def test_upstream_cookies_are_not_kept_between_requests(upstream: FakeUpstream, tmp_path) -> None:
    """The upstream session is shared by every client: a Set-Cookie from one answer must not be
    sent on the next request (nor reach the client of a translated answer). The upstream is
    named `localhost`: a cookie jar ignores cookies from bare IP addresses."""
    from tests.fakes.upstream import JSONReply

    completion = {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}],
    }
    cfg = config_for(upstream, tmp_path, **{"upstream.base_url": f"http://localhost:{upstream.port}/v1"})
    async with running_proxy(cfg) as handle:
        upstream.reply(JSONReply(completion, headers={"Set-Cookie": "sticky=user-a; Path=/"}), JSONReply(completion))
        async with aiohttp.ClientSession() as s:
            for _ in range(2):
                async with s.post(handle.base_url + "/responses", json={"model": "m", "input": "x"}) as r:
                    assert r.status == 200 and "Set-Cookie" not in r.headers
                    assert (await r.json())["status"] == "completed"
    assert len(upstream.requests) == 2
    assert "Cookie" not in upstream.requests[1].headers


async def test_metrics_have_no_created_series_nor_empty_labels(proxy, upstream: FakeUpstream) -> None:
    """A request the upstream never saw (no model) and one whose model is not routed leave no
    empty label behind, and no series carries a creation timestamp."""
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/v1/responses", json={"input": "no model"}) as r:
            assert r.status == 400
        async with s.get(proxy.url + "/v1/nothing-here") as r:
            assert r.status == 404
        async with s.get(proxy.url + "/metrics") as r:
            text = await r.text()
    assert "crossfeed_requests_total{" in text
    assert "_created" not in text and '=""' not in text, [x for x in text.splitlines() if '=""' in x or "_created" in x]
