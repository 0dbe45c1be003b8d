"""Soak and shutdown, against crossfeed as a real subprocess (``python -m crossfeed serve``).

Soak: mixed traffic (text, tools, reasoning, expected errors; streamed and not; plus the pass-through
endpoint) at moderate concurrency. Every answer is checked; zero unexpected results; RSS flat in the
second half (after a warm-up); descriptor count stable and back to its baseline. Two minutes behind
``slow``; a short variant runs by default.

Shutdown: SIGTERM with 20 open paced streams. A new request during the drain is refused. Each
stream ends with a proper terminal event: streams that outlive the drain are ended by crossfeed
with its shutdown failure (forward: response.failed; reverse: an error object, both
``server_shutting_down``), streams that end within the drain end normally (response.completed /
a finish_reason then [DONE]); the process exits 0. No check measures speed: the drain and the
streams are seconds apart in both cases, and every wait is a polled condition or a hang guard.

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
import orjson
import pytest

from tests.faults.fault_upstream import ERROR_MESSAGE, FAULTS, REASONING, RETRY_AFTER, TEXT, TOOL, FaultUpstream, paced
from tests.faults.harness import API, ENDPOINT, ProxyProcess, parse_outcome, proxy_process, raw_http, request_body
from tests.support.validators import accumulate_chat, validate_chat_sse, validate_responses_sse
from tests.support.waiting import wait_until

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


def answer_parts(
    direction: str, stream: bool, events: list[dict[str, Any]]
) -> tuple[list[tuple[str, str]], str | None]:
    """(name, arguments) of every function call and the reasoning text, read from the parsed answer,
    never from the raw bytes (a Response echoes the request's tools and always has a ``reasoning`` key)."""
    if direction == "reverse" and stream:
        acc = accumulate_chat(events)
        return [(c["name"], c["arguments"]) for c in acc["tool_calls"]], acc["reasoning"]
    if direction == "reverse":
        message = events[0]["choices"][0]["message"]
        return (
            [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []],
            message.get("reasoning_content"),
        )
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
        async with session.post(url + ENDPOINT[other], json=request_body(other, "fault:ok", True), headers=auth) as r:
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


CHECK_GUARD = 30.0  # seconds: hang guard of one request (each takes milliseconds)
SETTLE = 10.0  # seconds: hang guard of every polled wait for crossfeed to let go of connections
# Descriptors crossfeed may hold at the end beyond its baseline, connections to the upstream not
# counted (its pool keeps idle keep-alive connections, as many as the concurrency needed): 2,
# for descriptors the runtime may open lazily and keep. During the soak, the second half may
# peak 4 above the first (a client connection being replaced, the pool opening one more).
FDS_SLACK = 2
FDS_HALVES_SLACK = 4


async def soak(
    tmp_path: Path,
    direction: str,
    seconds: float,
    workers: int = 8,
    processes: int = 1,
    inspector: Inspector | None = None,
) -> dict[str, Any]:
    """At least ``seconds`` of traffic, and until every scenario ran at least once more after the
    warm-up: on a slow machine the soak takes longer, its checks stay the same. ``workers``:
    concurrent clients; ``processes``: crossfeed's ``--workers``; ``inspector``: crossfeed runs
    with the inspector on, a page follows its live feed all along, and its ring is checked."""
    plan = scenarios(direction)
    env = inspector.env() if inspector else None
    async with (
        FaultUpstream() as up,
        proxy_process(tmp_path, up.base_url, api=API[direction], workers=processes, env=env) as proxy,
    ):
        # warm-up: every scenario, `workers` at a time, so that the allocator and the connection
        # pools have their working size before the first sample; then a baseline of descriptors
        # once crossfeed holds no client connection (polled)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=workers)) as session:
            await asyncio.gather(
                *[asyncio.wait_for(check(session, proxy.url, proxy.auth), CHECK_GUARD) for _, check in plan]
            )
        assert await wait_until(lambda: proxy.client_connections() == 0 and up.inflight == 0, SETTLE), (
            f"after the warm-up: {proxy.client_connections()} client connections, {up.inflight} upstream requests"
        )
        base_fds, base_up = proxy.fds(), up.open_connections

        samples: list[tuple[float, int, int]] = []
        counts: Counter[str] = Counter()
        unexpected: list[str] = []
        start = time.monotonic()
        stop_at = start + seconds
        done = asyncio.Event()

        def more() -> bool:
            return time.monotonic() < stop_at or any(counts[name] == 0 for name, _ in plan)

        async def sampler() -> None:  # the sleep is the sampling period, not a wait for anything
            while not done.is_set():
                samples.append((time.monotonic() - start, proxy.rss_kb(), proxy.fds()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), 0.5)

        async def worker(n: int, session: aiohttp.ClientSession) -> None:
            i = n
            while more() and len(unexpected) < 100:
                name, check = plan[i % len(plan)]
                i += workers
                try:
                    await asyncio.wait_for(check(session, proxy.url, proxy.auth), CHECK_GUARD)
                    counts[name] += 1
                except Exception as exc:
                    unexpected.append(f"{name}: {type(exc).__name__}: {str(exc)[:300]}")

        async def workload(session: aiohttp.ClientSession) -> None:
            try:
                await asyncio.gather(*[worker(n, session) for n in range(workers)])
            finally:
                done.set()

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=workers)) as session:
            watching = [inspector.watch(proxy.url, done)] if inspector else []
            await asyncio.gather(sampler(), workload(session), *watching)
        duration = time.monotonic() - start
        # every client connection let go of and every upstream request closed (polled), then the
        # descriptors beyond the upstream connections back to the baseline
        assert await wait_until(lambda: proxy.client_connections() == 0, SETTLE), (
            f"{proxy.client_connections()} client connections still held after the soak"
        )
        assert await up.wait_idle(SETTLE), "upstream requests left open after the soak"
        assert await wait_until(lambda: proxy.fds() - up.open_connections <= base_fds - base_up + FDS_SLACK, SETTLE), (
            f"descriptors not released: {proxy.fds()} ({up.open_connections} to the upstream), "
            f"baseline {base_fds} ({base_up} to the upstream)"
        )
        final_fds = proxy.fds()
        # the upstream got crossfeed's key, never the client's
        assert up.requests and all(
            r.headers.get("authorization") == f"Bearer {proxy.upstream_key}"
            for r in up.requests
            if r.path.endswith(("/responses", "/completions"))
        )
    proxy.assert_no_secrets()
    half = [s for s in samples if s[0] >= duration / 2]
    first = [s for s in samples if s[0] < duration / 2]
    figures = {
        "direction": direction,
        "seconds": round(duration, 1),
        "requests": sum(counts.values()),
        "unexpected": len(unexpected),
        "rps": round(sum(counts.values()) / duration),
        "rss_start_mb": round(samples[0][1] / 1024, 1),
        "rss_mid_mb": round(half[0][1] / 1024, 1),
        "rss_end_mb": round(samples[-1][1] / 1024, 1),
        "rss_second_half_max_mb": round(max(s[1] for s in half) / 1024, 1),
        "fds_base": base_fds,
        "fds_first_half_max": max(s[2] for s in first),
        "fds_second_half_max": max(s[2] for s in half),
        "fds_final": final_fds,
        "by_scenario": dict(counts),
    }
    if inspector:
        figures["inspector"] = inspector.figures()
    print(f"\nsoak[{direction}, {processes} process(es)]: {figures}")
    assert not unexpected, f"{len(unexpected)} unexpected results, first: {unexpected[:3]}"
    assert all(counts[name] > 0 for name, _ in plan), counts
    return figures


class Inspector:
    """The inspector on during a soak: a page follows the live feed (every message parsed) and the
    ring's summary is read every half second; each reading must be within the ring's bounds."""

    KEY = "soak-inspector-admin-key-5e1f"

    def __init__(self, turns: int = 20, max_turn_bytes: int = 16384) -> None:
        self.turns, self.max_turn_bytes = turns, max_turn_bytes
        self.readings: list[tuple[int, int, int]] = []  # (turns listed, bytes held, bound)
        self.messages = 0

    def env(self) -> dict[str, str]:
        return {
            "CROSSFEED_INSPECTOR__ENABLED": "true",
            "CROSSFEED_INSPECTOR__ADMIN_KEY_ENV": "CF_SOAK_INSPECTOR_KEY",
            "CF_SOAK_INSPECTOR_KEY": self.KEY,
            "CROSSFEED_INSPECTOR__TURNS": str(self.turns),
            "CROSSFEED_INSPECTOR__MAX_TURN_BYTES": str(self.max_turn_bytes),
        }

    async def watch(self, url: str, done: asyncio.Event) -> None:
        auth = {"Authorization": f"Bearer {self.KEY}"}
        async with aiohttp.ClientSession(headers=auth) as s, s.get(url + "/inspector/api/live") as feed:
            assert feed.status == 200

            async def follow() -> None:
                async for line in feed.content:
                    if line.startswith(b"data: "):
                        orjson.loads(line[6:])
                        self.messages += 1

            follower = asyncio.create_task(follow())
            try:
                while not done.is_set():  # the sleep is the sampling period, not a wait for anything
                    async with s.get(url + "/inspector/api/turns") as r:
                        body = await r.json()
                    self.readings.append((len(body["turns"]), body["held_bytes"], body["bound_bytes"]))
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(done.wait(), 0.5)
            finally:
                follower.cancel()

    def figures(self) -> dict[str, Any]:
        assert self.readings, "the inspector was never read"
        for listed, held, bound in self.readings:
            assert listed <= self.turns and held <= bound, (listed, held, bound)
        return {
            "readings": len(self.readings),
            "max_turns": max(r[0] for r in self.readings),
            "max_held_kb": round(max(r[1] for r in self.readings) / 1024, 1),
            "bound_kb": round(self.readings[0][2] / 1024, 1),
            "live_messages": self.messages,
        }


def assert_flat(figures: dict[str, Any], rss_slack_mb: float) -> None:
    """RSS measured after a warm-up: the second half of the soak may not grow past its first
    sample by more than ``rss_slack_mb`` (a correct proxy: well under 1 MB on a 2-core machine)."""
    growth = figures["rss_second_half_max_mb"] - figures["rss_mid_mb"]
    assert growth <= rss_slack_mb, f"RSS grew {growth:.1f} MB in the second half: {figures}"
    assert figures["fds_second_half_max"] <= figures["fds_first_half_max"] + FDS_HALVES_SLACK, (
        f"fd count grew: {figures}"
    )


@pytest.mark.parametrize("direction", ["forward", "reverse"])
@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "two-workers"])
async def test_soak_short(tmp_path: Path, direction: str, workers: int) -> None:
    figures = await soak(tmp_path, direction, seconds=4.0, processes=workers)
    # 1,200 (machine loaded) to 4,500 requests in the second half on a 2-core machine: a leak of
    # 10 KB or more per request fails. A slower machine runs fewer: a weaker check, never a flakier one.
    assert_flat(figures, rss_slack_mb=12.0)


async def test_soak_short_with_the_inspector(tmp_path: Path) -> None:
    """The inspector on, a page following it: the ring stays within its bounds (it is full after
    the warm-up, so every later turn forgets one) and RSS stays flat as without it."""
    inspector = Inspector()
    figures = await soak(tmp_path, "forward", seconds=4.0, inspector=inspector)
    assert figures["inspector"]["max_turns"] == inspector.turns and figures["inspector"]["live_messages"] > 100
    assert_flat(figures, rss_slack_mb=12.0)


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("direction", ["forward", "reverse"])
async def test_soak_two_minutes(tmp_path: Path, direction: str) -> None:
    figures = await soak(tmp_path, direction, seconds=120.0, workers=12)
    assert_flat(figures, rss_slack_mb=6.0)


@pytest.mark.slow
@pytest.mark.timeout(400)
async def test_soak_two_minutes_two_workers(tmp_path: Path) -> None:
    """``serve --workers 2``: the same soak (forward), RSS and descriptors summed over the
    supervisor and both workers."""
    figures = await soak(tmp_path, "forward", seconds=120.0, workers=12, processes=2)
    assert_flat(figures, rss_slack_mb=8.0)


# -- SIGTERM with open streams --------------------------------------------------------------------------------


# Two cases, each far from the boundary whatever the machine's speed:
# - streams that outlive the drain: `fault:paced` lasts 30 s, the drain 2 s; crossfeed must end
#   every stream itself with its shutdown failure (server_shutting_down), not wait for the upstream
# - streams that end within the drain: `paced_5s` (below) lasts about 5 s, the drain 60 s; every
#   stream must end normally, crossfeed ending none of them itself.
CASES = {"fault:paced": 2.0, "fault:paced_5s": 60.0}  # model -> drain_seconds
GUARD = 30.0  # seconds: hang guard of each wait, beyond the drain (every one ends within about 5 s)


@pytest.fixture
def paced_5s(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream that ends normally after about 5 s: 20 text events 0.25 s apart."""
    monkeypatch.setitem(FAULTS, "paced_5s", paced(0.25, 20))


async def open_stream(
    proxy: ProxyProcess, direction: str, model: str, started: asyncio.Event, opened: list[int]
) -> tuple[bytes, int]:
    """Read a stream to its end; returns (body, status)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as s:  # guarded by the caller
        body = b""
        try:
            async with s.post(
                proxy.url + ENDPOINT[direction], json=request_body(direction, model, True), headers=proxy.auth
            ) as r:
                async for chunk in r.content.iter_any():
                    body += chunk
                    if b"delta" in body and not started.is_set():
                        opened.append(1)
                        if len(opened) >= 20:
                            started.set()
                return body, r.status
        except aiohttp.ClientPayloadError:  # the connection was cut without a proper end
            return body + b"\n<cut>", 200


def check_terminal(direction: str, body: bytes) -> str:
    """The stream's ending: its terminal event (forward) or finish_reason (reverse), with the
    error code when it failed."""
    assert not body.endswith(b"<cut>"), f"stream cut without a terminal event: ...{body[-300:]!r}"
    if direction == "forward":
        events = validate_responses_sse(body)
        last = events[-1]
        error = last["response"].get("error") or {}
        return str(last["type"]) + (f":{error.get('code')}" if last["type"] == "response.failed" else "")
    chunks = validate_chat_sse(body)
    if chunks[-1].get("error"):
        return f"error:{chunks[-1]['error'].get('code')}"
    return "finish:" + next(
        ch["finish_reason"] for c in chunks for ch in c.get("choices") or [] if ch.get("finish_reason")
    )


async def new_connection_refused(port: int) -> bool:
    """A new request once the drain has begun: refused (the listener is closed first,
    proxy/streaming/lifecycle.py) or answered 503; False when it is accepted and served, or left unanswered."""
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except ConnectionRefusedError:
        return True
    writer.close()
    late = await raw_http(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout=GUARD)
    return late is not None and late.status == 503


@pytest.mark.timeout(300)  # above the sum of the hang guards, so that they report first
@pytest.mark.parametrize("model", list(CASES), ids=["streams-outlive-drain", "streams-end-within-drain"])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "two-workers"])
async def test_sigterm_with_20_open_streams(
    tmp_path: Path, direction: str, model: str, workers: int, paced_5s: None
) -> None:
    """With ``--workers 2`` the SIGTERM goes to the supervisor, which passes it on: each worker
    drains its own streams, and the supervisor exits 0 once both did."""
    drain = CASES[model]
    async with FaultUpstream() as up:
        proxy = ProxyProcess(tmp_path, up.base_url, api=API[direction], drain=drain, workers=workers)
        await proxy.start()
        started, opened = asyncio.Event(), []
        tasks = [asyncio.ensure_future(open_stream(proxy, direction, model, started, opened)) for _ in range(20)]
        try:
            try:
                await asyncio.wait_for(started.wait(), GUARD)
            except TimeoutError:
                raise AssertionError(f"only {len(opened)} of 20 streams started within {GUARD:g}s") from None
            assert up.inflight == 20, f"{up.inflight} upstream streams open at SIGTERM, expected all 20"
            proxy.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            # the drain has begun once crossfeed logs it (polled; it closed its listener before);
            # a new request from then on is refused, never served nor left hanging
            # (every worker: 20 streams spread over two workers leave none empty but once in 2^19)
            assert await wait_until(lambda: proxy.logs().count('"server.draining"') == workers, GUARD), (
                "crossfeed did not log server.draining after SIGTERM"
            )
            assert await new_connection_refused(proxy.port), "a new request was accepted during the drain"
            try:
                results = await asyncio.wait_for(asyncio.gather(*tasks), drain + GUARD)
                code = await asyncio.wait_for(proxy.proc.wait(), drain + GUARD)  # type: ignore[union-attr]
            except TimeoutError:
                raise AssertionError(
                    f"streams or process still running {drain + GUARD:g}s after SIGTERM (drain {drain:g}s)"
                ) from None
        finally:
            for task in tasks:
                task.cancel()
            await proxy.stop(timeout=5)
        endings = Counter()
        for body, status in results:
            assert status == 200
            endings[check_terminal(direction, body)] += 1
        print(f"\nsigterm[{direction}/{model}]: endings {dict(endings)}, exit {code}")
        assert code == 0, f"crossfeed exited {code} after SIGTERM"
        ended_streams = '"server.ending_streams"' in proxy.logs()  # crossfeed's log: the drain ran out
        if model == "fault:paced":  # the upstream would go on for 30 s: crossfeed ended every stream itself
            assert set(endings) == {
                "response.failed:server_shutting_down" if direction == "forward" else "error:server_shutting_down"
            }, endings
            assert ended_streams, "streams outlived the drain, yet crossfeed did not log ending them"
        else:  # streams that finish within the drain finish normally
            assert set(endings) == {"response.completed" if direction == "forward" else "finish:stop"}, endings
            assert not ended_streams, "crossfeed ended streams that would have finished within the drain"
        assert await up.wait_idle(SETTLE), "upstream requests left open after shutdown"
    proxy.assert_no_secrets()
