"""Polling instead of sleeping: wait for the condition a test needs, with a hang guard."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.05) -> bool:
    """True as soon as ``predicate()`` is truthy; False if it is still falsy after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if predicate():
            return True
        await asyncio.sleep(interval)
    return bool(predicate())
