"""``run_leg``: the relay runs in a task of its own (in the caller's when the whole stream is
already in), and no exit path leaves the upstream response open."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from crossfeed.proxy.keys import CONFIG
from crossfeed.proxy.streaming.lifecycle import OPEN_STREAMS
from crossfeed.proxy.turns.exchange import run_leg


class _Content:
    def __init__(self, eof: bool) -> None:
        self.eof = eof

    def is_eof(self) -> bool:  # aiohttp's StreamReader: the body's end has arrived
        return self.eof


class _Upstream:
    def __init__(self, eof: bool = False) -> None:
        self.closed = 0
        self.content = _Content(eof)

    def close(self) -> None:
        self.closed += 1


UP = SimpleNamespace(name="u", timeouts=SimpleNamespace(idle=5.0, total=60.0), pooled=False)


class _Turn:
    """What run_leg reads of a turn: the application, the upstream, the log record."""

    def __init__(self, log: dict[str, Any]) -> None:
        self.app: dict[Any, Any] = {
            CONFIG: SimpleNamespace(server=SimpleNamespace(keepalive_seconds=15.0)),
            OPEN_STREAMS: set(),
        }
        self.upstream = UP
        self.log = log


async def test_handler_cancelled_before_the_relay_ran_still_closes_the_upstream() -> None:
    upstream = _Upstream()
    handler = asyncio.create_task(run_leg(_Turn({}), upstream, None, None))  # type: ignore[arg-type]
    await asyncio.sleep(0)  # the handler made the relay task and waits for it; the relay has not run
    handler.cancel()
    with pytest.raises(asyncio.CancelledError):
        await handler
    assert upstream.closed >= 1


async def test_the_relay_runs_in_a_task_of_its_own(monkeypatch: Any) -> None:
    from crossfeed.proxy.turns import exchange

    seen: list[asyncio.Task[Any] | None] = []

    async def fake_relay(*args: Any, **kwargs: Any) -> Any:
        seen.append(asyncio.current_task())
        return SimpleNamespace(ending="ok", events_in=0, events_out=0, error=None, extra={})

    monkeypatch.setattr(exchange, "relay", fake_relay)
    summary: dict[str, Any] = {}
    stats = await run_leg(_Turn(summary), _Upstream(), None, None)  # type: ignore[arg-type]
    assert stats.ending == "ok"
    assert seen and seen[0] is not asyncio.current_task()
    assert summary["ending"] == "ok"


@pytest.mark.parametrize("eof", [False, True])
async def test_a_stream_already_in_runs_in_the_callers_task(monkeypatch: Any, eof: bool) -> None:
    """A stream whose end came with its headers never waits for the upstream: the relay runs in
    the caller's task (no task to start); one still coming gets its own."""
    from crossfeed.proxy.turns import exchange

    seen: list[asyncio.Task[Any] | None] = []

    async def fake_relay(*args: Any, **kwargs: Any) -> Any:
        seen.append(asyncio.current_task())
        return SimpleNamespace(ending="ok", events_in=0, events_out=0, error=None, extra={})

    monkeypatch.setattr(exchange, "relay", fake_relay)
    stats = await run_leg(_Turn({}), _Upstream(eof=eof), None, None)  # type: ignore[arg-type]
    assert stats.ending == "ok"
    assert (seen[0] is asyncio.current_task()) is eof


async def test_a_stream_already_in_closes_the_upstream_when_cancelled(monkeypatch: Any) -> None:
    """Cancelled while it writes (the client hung up), the relay in the caller's task still
    leaves the upstream closed."""
    from crossfeed.proxy.turns import exchange

    started = asyncio.Event()

    async def stuck_relay(*args: Any, **kwargs: Any) -> Any:
        started.set()
        await asyncio.Event().wait()  # a write that never drains

    monkeypatch.setattr(exchange, "relay", stuck_relay)
    upstream = _Upstream(eof=True)
    handler = asyncio.create_task(run_leg(_Turn({}), upstream, None, None))  # type: ignore[arg-type]
    await started.wait()
    handler.cancel()
    with pytest.raises(asyncio.CancelledError):
        await handler
    assert upstream.closed >= 1
