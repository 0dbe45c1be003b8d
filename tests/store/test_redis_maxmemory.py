"""Redis at ``maxmemory`` with ``maxmemory-policy noeviction``: a save is refused (``StoreError``
naming Redis's OOM), kept by the retry queue and written once Redis has memory again; reads and
removals keep working while Redis is full (proxy/state/store/redis.py: script flags, Redis >= 7.0).

Each test runs a redis-server of its own (tests/support/redis_server.py), made full by filler
keys and then a ``CONFIG SET maxmemory`` below what they use; ``CONFIG SET maxmemory 0`` gives it
memory again. Redis older than 7.0 (no script flags) is played by the same server, its version
or its answer to the shebang faked: there the save cannot be refused, which the last test shows
(and so that the fill reproduces the problem the flags fix).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import structlog
from redis.exceptions import OutOfMemoryError, ResponseError

from crossfeed.proxy.runtime.store_config import StoreConfig
from crossfeed.proxy.state.store import open_store
from crossfeed.proxy.state.store.base import StoredResponse, StoreError
from crossfeed.proxy.state.store.redis import RedisStore, script_flags_supported
from crossfeed.proxy.state.store_access import KEEPER
from crossfeed.proxy.state.store_health import short_reason
from tests.fakes.upstream import FakeUpstream
from tests.store.helpers import call, metric, readyz, rec, reply, start
from tests.support.app_server import ProxyHandle
from tests.support.clients import Captured, sdk_client
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)

MAXMEMORY = 2 * 1024 * 1024
OOM = "OOM command not allowed when used memory > 'maxmemory'"
PREFIX = "cf:"


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    server.start()
    assert server.command("CONFIG", "SET", "maxmemory-policy", "noeviction").startswith(b"+OK")
    yield server
    server.stop()


@pytest.fixture
async def client(redis: RedisServer) -> AsyncIterator[aioredis.Redis]:
    c = aioredis.Redis.from_url(redis.url)
    yield c
    await c.aclose()


async def fill(client: aioredis.Redis) -> None:
    """3 MB of filler keys, then ``maxmemory`` 2 MB: Redis is past its limit (and stays there:
    stopping at the first refused write would leave it a hair below once that write's buffer is
    freed). A plain write is refused."""
    for i in range(48):
        await client.set(f"filler:{i}", b"f" * 65536)
    await client.config_set("maxmemory", MAXMEMORY)
    assert (await client.info("memory"))["used_memory"] > MAXMEMORY + 1024 * 1024
    with pytest.raises(OutOfMemoryError):
        await client.set("filler:more", b"f")


async def heal(client: aioredis.Redis) -> None:
    await client.config_set("maxmemory", 0)


def store_on(redis: RedisServer, clock: Any) -> RedisStore:
    store = open_store(StoreConfig(backend="redis", redis_url=redis.url, key_prefix=PREFIX), clock=clock)
    assert isinstance(store, RedisStore)
    return store


def holding(rid: str, previous: StoredResponse) -> StoredResponse:
    """A record whose input holds ``previous``'s items (a continuation of it)."""
    record = rec(rid)
    items = [*previous.input_items, *previous.response["output"], *record.input_items]
    return dataclasses.replace(record, input_items=items, previous_response_id=previous.id)


def test_script_flags_come_with_redis_7() -> None:
    assert not script_flags_supported("6.2.14") and not script_flags_supported("5.0.7")
    assert script_flags_supported("7.0.15") and script_flags_supported("7.2.4") and script_flags_supported(7.0)
    assert script_flags_supported("unknown")  # tried, and fallen back from if refused


@pytest.mark.redis
async def test_a_full_redis_refuses_a_save_with_oom_and_serves_reads_and_removals(
    redis: RedisServer, client: aioredis.Redis, clock: Any
) -> None:
    store = store_on(redis, clock)
    try:
        await store.ping()
        assert store._scripts is store._flagged  # Redis 7: the scripts declare their flags
        first, second = rec("resp_1"), rec("resp_2")
        for record in (first, second, holding("resp_3", first)):
            await store.save(record)
        await client.delete(f"{PREFIX}resp:resp_3")  # as if Redis had expired it: a stale item-set member
        await fill(client)
        keys = sorted(await client.keys(f"{PREFIX}*"))
        seq = await client.get(f"{PREFIX}seq")

        for record in (rec("resp_new", pad=200_000), first):  # a new id, and one saved again (its DEL first)
            with pytest.raises(StoreError) as refused:
                await store.save(record)
            assert str(refused.value) == f"redis: {OOM}.", refused.value
            assert refused.value.retryable and short_reason(refused.value) == "out of memory"
        with pytest.raises(StoreError, match="OOM"):
            await store.probe_write()
        # refused before the script ran: nothing of it was written (nor the record it replaces removed)
        assert sorted(await client.keys(f"{PREFIX}*")) == keys and await client.get(f"{PREFIX}seq") == seq
        assert await store.get("resp_new") is None

        # reads keep working, and so do removals (they free memory)
        assert await store.get("resp_1") == first and await store.get("resp_2") == second
        assert await store.get_by_item("msg_resp_1", None) == first
        assert await client.zrange(f"{PREFIX}item::msg_resp_1", 0, -1) == [b"resp_1"]  # the stale member went
        assert await store.get_by_item("msg_resp_2", None) == second
        assert await store.delete("resp_2") is True
        assert await store.get("resp_2") is None and await store.get_by_item("msg_resp_2", None) is None
        clock.advance(StoreConfig().ttl_seconds + 1)
        assert await store.get("resp_1") is None  # expired: purged on the way, at maxmemory too
        assert await store.sweep() == 1  # resp_3's id, left in the index

        await heal(client)
        await store.save(first)
        assert await store.get("resp_1") == first and await store.get_by_item("msg_resp_1", None) == first
    finally:
        await store.close()


@pytest.mark.redis
async def test_a_turn_at_maxmemory_completes_its_save_is_kept_and_written_once_redis_has_memory(
    upstream: FakeUpstream, tmp_path: Path, redis: RedisServer, client: aioredis.Redis, captured: list[Captured]
) -> None:
    """Two crossfeed processes on one Redis; Redis fills up. A's store:true turn streams to its
    end, its save is refused and queued; reads (previous_response_id, GET, item_reference) are
    served from Redis by either process; B says a miss may be a save that failed (out of memory);
    once Redis has memory A's queue reaches it and B finds the response."""
    upstream.default = reply
    handles: list[ProxyHandle] = []
    try:
        a = await start(upstream, tmp_path, "redis", redis.url)
        handles.append(a)
        b = await start(upstream, tmp_path, "redis", redis.url)
        handles.append(b)
        sdk = sdk_client(a.base_url, captured)
        before = await sdk.responses.create(model="m", input="before", stream=False)  # saved while all is well
        await fill(client)

        with structlog.testing.capture_logs() as logs:
            stream = await sdk.responses.create(model="m", input="at maxmemory", stream=True)
            events = [e async for e in stream]
            assert events[-1].type == "response.completed"
            full = events[-1].response
            assert await wait_until(lambda: a.app[KEEPER].queue_size == 1, 5)
        assert metric(a, "store_failures", "save") == 1 and metric(a, "store_retries", "queued") == 1
        failed = [e for e in logs if e["event"] == "store.failed" and e.get("response_id") == full.id]
        assert failed and OOM in failed[0]["error"], logs
        status, ready = await readyz(a)
        assert status == 200 and ready["status"] == "degraded" and "(out of memory)" in ready["store"], ready

        # reads keep working on a full Redis, in the process that saves and in the other one
        for h in (a, b):
            status, body = await call("GET", f"{h.base_url}/responses/{before.id}")
            assert status == 200 and body["output"][0]["content"][0]["text"] == "answer 1", body
            status, body = await call(
                "POST",
                f"{h.base_url}/responses",
                {"model": "m", "input": "and?", "previous_response_id": before.id, "store": False},
            )
            assert status == 200 and upstream.requests[-1].body["messages"][0]["content"] == "before", body
            reference = [{"type": "item_reference", "id": before.output[0].id}, {"role": "user", "content": "so?"}]
            status, body = await call(
                "POST", f"{h.base_url}/responses", {"model": "m", "input": reference, "store": False}
            )
            assert status == 200 and upstream.requests[-1].body["messages"][0]["content"] == "answer 1", body
        # A serves the queued response; B cannot find it and says why
        assert (await call("GET", f"{a.base_url}/responses/{full.id}"))[0] == 200
        status, body = await call("GET", f"{b.base_url}/responses/{full.id}")
        assert status == 503 and body["error"]["code"] == "store_unavailable", body
        assert "has been failing to save since" in body["error"]["message"]
        assert "(out of memory); it may be one whose save failed" in body["error"]["message"], body

        await heal(client)
        assert await wait_until(lambda: a.app[KEEPER].queue_size == 0, 6), a.app[KEEPER].queue_size
        assert metric(a, "store_retries", "saved") == 1
        status, body = await call(
            "POST", f"{b.base_url}/responses", {"model": "m", "input": "and then?", "previous_response_id": full.id}
        )
        assert status == 200, body
        assert [m["content"] for m in upstream.requests[-1].body["messages"]] == [
            "at maxmemory",
            "answer 1",
            "and then?",
        ]
        assert (await call("GET", f"{b.base_url}/responses/{full.id}"))[0] == 200
        await sdk.close()
    finally:
        for h in handles:
            await h.stop()


async def _refuse_info(*_: Any, **__: Any) -> Any:
    raise ResponseError("unknown command 'INFO'")


@pytest.mark.redis
@pytest.mark.parametrize("older", ["by-version", "by-its-answer"])
async def test_redis_before_7_gets_the_scripts_without_flags_and_cannot_refuse_a_save_at_maxmemory(
    redis: RedisServer, client: aioredis.Redis, clock: Any, older: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Played by Redis 7: ``INFO server`` says 6.2, or INFO is refused and the shebang is
    answered the way Redis 6 answers it (its Lua compiler at line 1)."""
    store = store_on(redis, clock)
    if older == "by-version":

        async def info(*_: Any, **__: Any) -> dict[str, Any]:
            return {"redis_version": "6.2.14"}

        monkeypatch.setattr(store._client, "info", info)
    else:
        load = store._client.script_load

        async def script_load(script: Any) -> Any:
            if str(script).startswith("#!"):
                raise ResponseError("Error compiling script (new function): user_script:1: unexpected symbol near '#'")
            return await load(script)

        monkeypatch.setattr(store._client, "info", _refuse_info)
        monkeypatch.setattr(store._client, "script_load", script_load)
    try:
        first = rec("resp_1")
        with structlog.testing.capture_logs() as logs:
            await store.save(first)
            await store.save(holding("resp_2", first))
        assert store._scripts is store._plain
        warned = [e for e in logs if e["event"] == "store.redis_without_script_flags"]
        assert len(warned) == 1 and "maxmemory" in warned[0]["consequence"], logs
        assert ("6.2.14" if older == "by-version" else "near '#'") in warned[0]["reason"]
        assert (await store.get_by_item("msg_resp_1", None)).id == "resp_2"  # type: ignore[union-attr]
        assert await store.delete("resp_2") is True and await store.sweep() == 0

        await fill(client)
        await store.save(rec("resp_3", pad=200_000))  # taken: Redis grows past maxmemory (documented)
        assert (await store.get("resp_3")) is not None
        assert (await client.info("memory"))["used_memory"] > MAXMEMORY + 150_000
    finally:
        await store.close()
