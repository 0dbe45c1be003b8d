"""Fixtures of the store suite: a fake clock and stores of every backend, cleaned up after."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from crossfeed.proxy.runtime.store_config import StoreConfig
from crossfeed.proxy.state.store import open_store

REDIS_URL = os.environ.get("CROSSFEED_TEST_REDIS_URL")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def drop_redis_keys(prefix: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(REDIS_URL)
    keys = [k async for k in client.scan_iter(match=prefix + "*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def prefix():
    """A Redis key prefix unique to the test; its keys are deleted afterwards."""
    prefix = f"cf-test:{uuid.uuid4().hex}:"
    yield prefix
    if REDIS_URL:
        await drop_redis_keys(prefix)


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "redis":
        # tests/conftest.py `redis_url`: without CROSSFEED_TEST_REDIS_URL, skip locally, fail in CI
        request.getfixturevalue("redis_url")
    return request.param


@pytest.fixture
async def make(backend: str, tmp_path: Path, clock: FakeClock, prefix: str):
    """``make(**config)`` opens a store of the current backend; all are closed at teardown.
    Stores made in one test share their data (same dir / Redis prefix), like replicas."""
    opened = []

    def _make(**overrides):
        cfg = {"backend": backend, "data_dir": tmp_path / "data", "redis_url": REDIS_URL, "key_prefix": prefix}
        cfg.update(overrides)
        store = open_store(StoreConfig(**cfg), clock=clock)
        opened.append(store)
        return store

    yield _make
    for store in opened:
        await store.close()
