"""The store's counters (``ResponseStore.count``), the per-key rate limits' memory, on every backend:
totals add up within a window and start again in the next one, the seconds left are the window's,
and two stores on the same data (two replicas) count together; many concurrent additions lose none."""

from __future__ import annotations

import asyncio

import pytest


async def test_counts_add_up_within_a_window_and_restart_in_the_next(make, clock) -> None:
    store = make()
    clock.now = 6_000_000.0 + 10  # 10 s into a minute
    assert await store.count("req:a", 1, 60) == (1, 50.0)
    assert (await store.count("req:a", 1, 60))[0] == 2
    assert (await store.count("req:b", 5, 60))[0] == 5  # another counter
    assert (await store.count("req:a", 0, 60))[0] == 2  # adding nothing reads it
    clock.now += 55  # 5 s into the next minute
    total, left = await store.count("req:a", 1, 60)
    assert (total, left) == (1, 55.0)


async def test_two_stores_on_the_same_data_count_together(make, backend, clock) -> None:
    if backend == "memory":
        pytest.skip("a memory store is one process's")
    one, two = make(), make()
    clock.now = 6_000_000.0
    await one.count("tok:k", 30, 60)
    assert (await two.count("tok:k", 12, 60))[0] == 42
    assert (await one.count("tok:k", 0, 60))[0] == 42


async def test_concurrent_additions_lose_none(make, clock) -> None:
    store = make()
    clock.now = 6_000_000.0
    await asyncio.gather(*(store.count("req:many", 1, 60) for _ in range(200)))
    assert (await store.count("req:many", 0, 60))[0] == 200
