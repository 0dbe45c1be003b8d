"""``TimeoutScope`` (proxy/runtime/timeout_scope.py) against ``asyncio.timeout``: every case run
with both, on asyncio's loop and on uvloop, must end the same way (the exception, whether the
scope says it expired, the task's pending cancellations after it)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import pytest
import uvloop

from crossfeed.proxy.runtime.timeout_scope import TimeoutScope, timeout_after

LONG = 30.0  # never reached: the case ends before
SHORT = 0.01


class _Async:
    """A ``TimeoutScope`` behind ``async with``, so one case body serves both kinds."""

    def __init__(self, seconds: float) -> None:
        self.scope = timeout_after(seconds)

    async def __aenter__(self) -> _Async:
        self.scope.__enter__()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.scope.__exit__(et, e, tb)

    def reschedule(self, when: float) -> None:
        self.scope.reschedule(when)

    def expired(self) -> bool:
        return self.scope.expired()


Make = Callable[[float], Any]


async def _completes(make: Make) -> Any:
    async with make(LONG) as t:
        await asyncio.sleep(0)
    return t.expired()


async def _fires(make: Make) -> Any:
    async with make(SHORT) as t:
        await asyncio.sleep(LONG)
    return t.expired()


async def _fires_caught(make: Make) -> Any:
    t = None
    try:
        async with make(SHORT) as t:
            await asyncio.sleep(LONG)
    except TimeoutError:
        return ("caught", t.expired(), asyncio.current_task().cancelling())  # type: ignore[union-attr]
    return "not raised"


async def _cancelled_from_outside(make: Make) -> Any:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().call_later(SHORT, task.cancel)
    async with make(LONG):
        await asyncio.sleep(LONG)


async def _fires_and_cancelled_too(make: Make) -> Any:
    """The scope's timer and a cancel from elsewhere, both before the task runs again."""
    task = asyncio.current_task()
    assert task is not None
    async with make(0) as t:
        task.cancel()
        await asyncio.sleep(LONG)
    return t.expired()


async def _moved_later(make: Make) -> Any:
    loop = asyncio.get_running_loop()
    async with make(SHORT) as t:
        t.reschedule(loop.time() + LONG)
        await asyncio.sleep(SHORT * 3)
    return t.expired()


async def _moved_sooner(make: Make) -> Any:
    loop = asyncio.get_running_loop()
    async with make(LONG) as t:
        t.reschedule(loop.time() + SHORT)
        await asyncio.sleep(LONG)
    return t.expired()


async def _inner_fires(make: Make) -> Any:
    async with make(LONG) as outer:
        try:
            async with make(SHORT):
                await asyncio.sleep(LONG)
        except TimeoutError:
            pass
        await asyncio.sleep(0)
    return outer.expired()


async def _outer_fires(make: Make) -> Any:
    async with make(SHORT) as outer:
        async with make(LONG) as inner:
            await asyncio.sleep(LONG)
    return outer.expired(), inner.expired()


async def _body_raises(make: Make) -> Any:
    async with make(LONG):
        raise ValueError("the body's own error")


# Each case and how it ends: what it returned or raised, then the task's pending cancellations.
EXPECTED: dict[Callable[[Make], Awaitable[Any]], Any] = {
    _completes: (("returned", False), 0),
    _fires: (("raised", "TimeoutError"), 0),
    _fires_caught: (("returned", ("caught", True, 0)), 0),
    _cancelled_from_outside: (("raised", "CancelledError"), 1),
    _fires_and_cancelled_too: (("raised", "CancelledError"), 1),
    _moved_later: (("returned", False), 0),
    _moved_sooner: (("raised", "TimeoutError"), 0),
    _inner_fires: (("returned", False), 0),
    _outer_fires: (("raised", "TimeoutError"), 0),
    _body_raises: (("raised", "ValueError"), 0),
}
CASES = list(EXPECTED)


def _outcome(case: Callable[[Make], Awaitable[Any]], make: Make, loop_factory: Callable[[], Any]) -> Any:
    async def main() -> Any:
        task = asyncio.current_task()
        assert task is not None
        try:
            result: Any = ("returned", await case(make))
        except BaseException as exc:  # the exception is the outcome compared
            result = ("raised", type(exc).__name__)
        return result, task.cancelling()

    loop = loop_factory()
    try:
        return loop.run_until_complete(loop.create_task(main()))
    finally:
        loop.close()


@pytest.mark.parametrize("loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"])
@pytest.mark.parametrize("case", CASES, ids=[c.__name__.strip("_") for c in CASES])
def test_ends_as_asyncio_timeout_does(case: Callable[[Make], Awaitable[Any]], loop_factory: Callable[[], Any]) -> None:
    ours = _outcome(case, _Async, loop_factory)
    assert ours == _outcome(case, asyncio.timeout, loop_factory) == EXPECTED[case]


def test_outside_a_task_is_an_error() -> None:
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(RuntimeError):
            TimeoutScope(loop, loop.time() + LONG)
    finally:
        loop.close()


def test_the_timer_is_gone_after_the_scope() -> None:
    """A scope that ended leaves no timer behind (a turn opens a few: none may pile up)."""

    async def main() -> int:
        loop = asyncio.get_running_loop()
        before = len(loop._scheduled)  # type: ignore[attr-defined]
        for _ in range(50):
            with timeout_after(LONG):
                await asyncio.sleep(0)
        await asyncio.sleep(0)
        return len([h for h in loop._scheduled if not h.cancelled()]) - before  # type: ignore[attr-defined]

    assert asyncio.run(main()) == 0
