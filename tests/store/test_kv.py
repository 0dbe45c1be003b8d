"""The store's small key-value map (``ResponseStore.remember``/``recall``), which replica of a
pool serves a conversation, on every backend: a value is read back until its time is over, a new
value replaces the old, two stores on the same data (two replicas of crossfeed) agree, and a closed
store refuses."""

from __future__ import annotations

import pytest

from crossfeed.proxy.state.store.base import StoreError


async def test_a_value_is_recalled_and_replaced(make) -> None:
    store = make()
    assert await store.recall("affinity:gpu:conv:1") is None
    await store.remember("affinity:gpu:conv:1", "gpu/1", 60)
    await store.remember("affinity:gpu:conv:2", "gpu/0", 60)
    assert await store.recall("affinity:gpu:conv:1") == "gpu/1"
    await store.remember("affinity:gpu:conv:1", "gpu/2", 60)
    assert await store.recall("affinity:gpu:conv:1") == "gpu/2"
    assert await store.recall("affinity:gpu:conv:2") == "gpu/0"


async def test_a_value_is_gone_when_its_time_is_over(make, backend, clock) -> None:
    if backend == "redis":
        pytest.skip("Redis expires keys on its own clock, not the test's")
    store = make()
    await store.remember("root:resp_1", "resp:resp_1", 30)
    clock.advance(29)
    assert await store.recall("root:resp_1") == "resp:resp_1"
    clock.advance(2)
    assert await store.recall("root:resp_1") is None
    await store.remember("root:resp_1", "again", 30)  # set again after it expired
    assert await store.recall("root:resp_1") == "again"


async def test_two_stores_on_the_same_data_agree(make, backend) -> None:
    if backend == "memory":
        pytest.skip("a memory store is one process's")
    one, two = make(), make()
    await one.remember("affinity:gpu:session:s", "gpu/3", 60)
    assert await two.recall("affinity:gpu:session:s") == "gpu/3"
    await two.remember("affinity:gpu:session:s", "gpu/0", 60)
    assert await one.recall("affinity:gpu:session:s") == "gpu/0"


async def test_a_closed_store_refuses(make) -> None:
    store = make()
    await store.close()
    with pytest.raises(StoreError):
        await store.remember("x", "y", 10)
    with pytest.raises(StoreError):
        await store.recall("x")
