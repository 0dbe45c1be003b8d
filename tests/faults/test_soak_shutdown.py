"""Soak and shutdown, against crossfeed as a real subprocess (``python -m proxy serve``).

Soak: mixed traffic (text, tools, reasoning, expected errors; streamed and not; plus the pass-through
endpoint) at moderate concurrency. Every answer is checked; zero unexpected results; RSS flat in the
second half; descriptor count stable. Two minutes behind ``slow``; a short variant runs by default.

Shutdown: SIGTERM with 20 open paced streams. Each stream ends with a proper terminal event
(forward: response.completed/failed/incomplete; reverse: a finish_reason then [DONE], or an error
object) within the drain period, and the process exits 0.

Both run with ``--log-level debug``; no marked secret may reach the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.faults.conftest import (
    API,
    ENDPOINT,
    ProxyProcess,
    parse_outcome,
    proxy_process,
    raw_http,
    request_body,
)
from tests.faults.fault_upstream import ERROR_MESSAGE, REASONING, RETRY_AFTER, TEXT, TOOL, FaultUpstream
from tests.support.validators import accumulate_chat, validate_chat_sse, validate_responses_sse

TOOLS_R = [{"type": "function", "name": TOOL[0], "parameters": {"type": "object", "properties": {}}}]
TOOLS_C = [{"type": "function", "function": {"name": TOOL[0], "parameters": {"type": "object", "properties": {}}}}]

Check = Callable[[aiohttp.ClientSession, str, dict[str, str]], Awaitable[None]]


def scenario(direction: str, model: str, stream: bool, expect: str, **extra: Any) -> Check:
    async def run(session: aiohttp.ClientSession, url: str, auth: dict[str, str]) -> None:
        body = request_body(direction, model, stream, **extra)
        async with session.post(url + ENDPOINT[direction], json=body, headers=auth) as r:
            raw = await r.read()
            out = parse_outcome(direction, stream, r.status, {k.lower(): v for k, v in r.headers.items()}, raw)
        if expect == "429":
            assert out.status == 429 and out.headers.get("retry-after") == RETRY_AFTER, out
            return
        if expect == "failed":
            assert out.kind == "failed" and ERROR_MESSAGE in str(out.error), (out.kind, out.status, out.error)
            return
        assert out.kind == "success", (model, out.kind, out.status, out.error)
        assert out.text == TEXT, (model, out.text)
        calls, reasoning = answer_parts(direction, stream, out.events)
        assert calls == ([TOOL] if expect == "tool" else []), (model, calls)
        assert reasoning == (REASONING if expect == "reasoning" else None), (model, reasoning)
    return run


def answer_parts(direction: str, stream: bool, events: list[dict[str, Any]]) -> tuple[list[tuple[str, str]], str | None]:
    """(name, arguments) of every function call and the reasoning text, read from the parsed answer,
    never from the raw bytes (a Response echoes the request's tools and always has a ``reasoning`` key)."""
    if direction == "reverse" and stream:
        acc = accumulate_chat(events)
        return [(c["name"], c["arguments"]) for c in acc["tool_calls"]], acc["reasoning"]
    if direction == "reverse":
        message = events[0]["choices"][0]["message"]
        return ([(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []],
                message.get("reasoning_content"))
    if stream:
        items = [e["item"] for e in events if e["type"] == "response.output_item.done"]
        texts = [e["delta"] for e in events if e["type"] == "response.reasoning_text.delta"]
    else:
        items = events[0]["output"]
        texts = [p["text"] for i in items if i["type"] == "reasoning" for p in i.get("content") or []]
    calls = [(i["name"], i["arguments"]) for i in items if i["type"] == "function_call"]
    return calls, "".join(texts) if texts else None


def passthrough(direction: str) -> Check:
    """The endpoint of the backend's own API, passed through unchanged."""
    other = "reverse" if direction == "forward" else "forward"

    async def run(session: aiohttp.ClientSession, url: str, auth: dict[str, str]) -> None:
        async with session.post(url + ENDPOINT[other], json=request_body(other, "fault:ok", True),
                                headers=auth) as r:
            raw = await r.read()
        assert r.status == 200
        if other == "reverse":
            validate_chat_sse(raw)
        else:
            validate_responses_sse(raw)
    return run


def scenarios(direction: str) -> list[tuple[str, Check]]:
    tools = {"tools": TOOLS_R if direction == "forward" else TOOLS_C}
    return [
        ("text-stream", scenario(direction, "fault:ok", True, "text")),
        ("text-json", scenario(direction, "fault:ok", False, "text")),
        ("tools-stream", scenario(direction, "fault:tools", True, "tool", **tools)),
        ("reasoning-stream", scenario(direction, "fault:reasoning", True, "reasoning")),
        ("error-429", scenario(direction, "fault:http_429", True, "429")),
        ("error-midstream", scenario(direction, "fault:error_midstream", True, "failed")),
        ("tools-json", scenario(direction, "fault:tools", False, "tool", **tools)),
        ("reasoning-json", scenario(direction, "fault:reasoning", False, "reasoning")),
        ("passthrough-stream", passthrough(direction)),
    ]


async def soak(tmp_path: Path, direction: str, seconds: float, workers: int = 8) -> dict[str, Any]:
    plan = scenarios(direction)
    async with FaultUpstream() as up, proxy_process(tmp_path, up.base_url, api=API[direction]) as proxy:
        samples: list[tuple[float, int, int]] = []
        counts: Counter[str] = Counter()
        unexpected: list[str] = []
        start = time.monotonic()
        stop_at = start + seconds

        async def sampler() -> None:
            while time.monotonic() < stop_at:
                samples.append((time.monotonic() - start, proxy.rss_kb(), proxy.fds()))
                await asyncio.sleep(0.5)

        async def worker(n: int, session: aiohttp.ClientSession) -> None:
            i = n
            while time.monotonic() < stop_at:
                name, check = plan[i % len(plan)]
                i += workers
                try:
                    await asyncio.wait_for(check(session, proxy.url, proxy.auth), 15)
                    counts[name] += 1
                except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
                    unexpected.append(f"{name}: {type(exc).__name__}: {str(exc)[:300]}")

        connector = aiohttp.TCPConnector(limit=workers)
        async with aiohttp.ClientSession(connector=connector) as session:
            await asyncio.gather(sampler(), *[worker(n, session) for n in range(workers)])
        duration = time.monotonic() - start
        await asyncio.sleep(0.5)
        final_fds = proxy.fds()
        assert await up.wait_idle(5), "upstream requests left open after the soak"
        # the upstream got crossfeed's key, never the client's
        assert up.requests and all(r.headers.get("authorization") == f"Bearer {proxy.upstream_key}"
                                   for r in up.requests if r.path.endswith(("/responses", "/completions")))
    proxy.assert_no_secrets()
    half = [s for s in samples if s[0] >= seconds / 2]
    first = [s for s in samples if s[0] < seconds / 2]
    figures = {
        "direction": direction, "seconds": round(duration, 1), "requests": sum(counts.values()),
        "unexpected": len(unexpected), "rps": round(sum(counts.values()) / duration),
        "rss_start_mb": round(samples[0][1] / 1024, 1), "rss_mid_mb": round(half[0][1] / 1024, 1),
        "rss_end_mb": round(samples[-1][1] / 1024, 1), "rss_second_half_max_mb": round(max(s[1] for s in half) / 1024, 1),
        "fds_first_half_max": max(s[2] for s in first), "fds_second_half_max": max(s[2] for s in half),
        "fds_final": final_fds, "by_scenario": dict(counts),
    }
    print(f"\nsoak[{direction}]: {figures}")
    assert not unexpected, f"{len(unexpected)} unexpected results, first: {unexpected[:3]}"
    assert all(counts[name] > 0 for name, _ in plan), counts
    return figures


def assert_flat(figures: dict[str, Any], rss_slack_mb: float) -> None:
    growth = figures["rss_second_half_max_mb"] - figures["rss_mid_mb"]
    assert growth <= rss_slack_mb, f"RSS grew {growth:.1f} MB in the second half: {figures}"
    assert figures["fds_second_half_max"] <= figures["fds_first_half_max"] + 4, f"fd count grew: {figures}"
    assert figures["fds_final"] <= figures["fds_first_half_max"] + 4, f"fds not released: {figures}"


@pytest.mark.parametrize("direction", ["forward", "reverse"])
async def test_soak_short(tmp_path: Path, direction: str) -> None:
    figures = await soak(tmp_path, direction, seconds=4.0)
    assert_flat(figures, rss_slack_mb=12.0)


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("direction", ["forward", "reverse"])
async def test_soak_two_minutes(tmp_path: Path, direction: str) -> None:
    figures = await soak(tmp_path, direction, seconds=120.0, workers=12)
    assert_flat(figures, rss_slack_mb=6.0)


# -- SIGTERM with open streams --------------------------------------------------------------------------------


DRAIN = 2.0


async def open_stream(proxy: ProxyProcess, direction: str, model: str, started: asyncio.Event,
                      opened: list[int]) -> tuple[bytes, float, int]:
    """Read a stream to its end; returns (body, monotonic end time, status)."""
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        try:
            async with s.post(proxy.url + ENDPOINT[direction], json=request_body(direction, model, True),
                              headers=proxy.auth) as r:
                body = b""
                async for chunk in r.content.iter_any():
                    body += chunk
                    if b"delta" in body and not started.is_set():
                        opened.append(1)
                        if len(opened) >= 20:
                            started.set()
                return body, time.monotonic(), r.status
        except aiohttp.ClientPayloadError:  # the connection was cut without a proper end
            return body + b"\n<cut>", time.monotonic(), 200


def check_terminal(direction: str, body: bytes) -> str:
    assert not body.endswith(b"<cut>"), f"stream cut without a terminal event: ...{body[-300:]!r}"
    if direction == "forward":
        events = validate_responses_sse(body)
        return str(events[-1]["type"])
    chunks = validate_chat_sse(body)
    if chunks[-1].get("error"):
        return "error"
    return "finish:" + next(ch["finish_reason"] for c in chunks for ch in c.get("choices") or []
                            if ch.get("finish_reason"))


@pytest.mark.parametrize("model", ["fault:paced", "fault:paced_short"], ids=["streams-outlive-drain",
                                                                            "streams-end-within-drain"])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
async def test_sigterm_with_20_open_streams(tmp_path: Path, direction: str, model: str) -> None:
    async with FaultUpstream() as up:
        proxy = ProxyProcess(tmp_path, up.base_url, api=API[direction], drain=DRAIN)
        await proxy.start()
        try:
            started, opened = asyncio.Event(), []
            tasks = [asyncio.ensure_future(open_stream(proxy, direction, model, started, opened)) for _ in range(20)]
            await asyncio.wait_for(started.wait(), 10)
            assert up.inflight == 20
            t_term = time.monotonic()
            proxy.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            await asyncio.sleep(0.3)
            # a new request during the drain is refused or answered 503, never left hanging
            late = None
            with contextlib.suppress(OSError):
                late = await raw_http(proxy.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                                      timeout=DRAIN + 5)
            assert late is None or late.status in (200, 503), f"request during the drain: {late}"
            results = await asyncio.wait_for(asyncio.gather(*tasks), DRAIN + 15)
            code = await asyncio.wait_for(proxy.proc.wait(), DRAIN + 15)  # type: ignore[union-attr]
            t_exit = time.monotonic()
        finally:
            await proxy.stop(timeout=5)
        endings = Counter()
        for body, ended, status in results:
            assert status == 200
            endings[check_terminal(direction, body)] += 1
            assert ended - t_term <= DRAIN + 3.0, f"a stream ended {ended - t_term:.1f}s after SIGTERM " \
                                                  f"(drain {DRAIN}s)"
        print(f"\nsigterm[{direction}/{model}]: endings {dict(endings)}, exit {code} after {t_exit - t_term:.1f}s")
        assert code == 0, f"crossfeed exited {code} after SIGTERM"
        assert t_exit - t_term <= DRAIN + 6.0
        if model == "fault:paced_short":  # streams that finish within the drain finish normally
            assert set(endings) <= {"response.completed", "finish:stop"}, endings
        assert await up.wait_idle(5), "upstream requests left open after shutdown"
    proxy.assert_no_secrets()
