"""Behaviour suite of the response store, run against every backend (fixtures in conftest.py).

sqlite and memory always run; redis runs against a real redis-server when
CROSSFEED_TEST_REDIS_URL is set (``eval "$(.ci/start-redis.sh)"``; ``.ci/run`` always sets it):
without it the redis tests are skipped locally and fail in CI (``redis_url`` in tests/conftest.py).
Time is a fake clock injected into the store, so TTL tests never sleep.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sqlite3
from pathlib import Path

import pydantic
import pytest

from crossfeed.proxy.runtime.store_config import THIRTY_DAYS, StoreConfig
from crossfeed.proxy.state.store import open_store
from crossfeed.proxy.state.store.base import StoredResponse, StoreError, encode_record
from crossfeed.proxy.state.store.memory import MEMORY_DEFAULT_MAX_COUNT
from crossfeed.proxy.state.store.pagination import InvalidParam, paginate
from crossfeed.proxy.state.store.sqlite import FILENAME
from tests.store.helpers import rec

REDIS_URL = os.environ.get("CROSSFEED_TEST_REDIS_URL")


# -- basic behaviour ------------------------------------------------------------------------


async def test_save_get_roundtrip(make):
    store = make()
    record = rec("resp_1", prev="resp_0")
    await store.save(record)
    assert await store.get("resp_1") == record
    assert await store.get("resp_unknown") is None


async def test_delete(make):
    store = make()
    await store.save(rec("resp_1"))
    await store.save(rec("resp_2"))
    assert await store.delete("resp_1") is True
    assert await store.get("resp_1") is None
    assert await store.delete("resp_1") is False
    assert await store.delete("resp_never") is False
    assert (await store.get("resp_2")).id == "resp_2"


async def test_overwrite_replaces(make):
    store = make()
    await store.save(rec("resp_1"))
    second = rec("resp_1", prev="resp_0", pad=10)
    await store.save(second)
    assert await store.get("resp_1") == second
    assert (await store.stats()).count == 1


async def test_returned_record_is_a_copy(make):
    store = make()
    await store.save(rec("resp_1"))
    got = await store.get("resp_1")
    got.response["status"] = "mutated"
    got.input_items.clear()
    assert await store.get("resp_1") == rec("resp_1")


@pytest.mark.parametrize(
    "record",
    [
        StoredResponse("", 1, {}, [], None),
        StoredResponse("resp_x", 1, {}, [{"type": "message", "role": "user"}], None),
        StoredResponse("resp_x", 1, {"bad": object()}, [], None),
    ],
    ids=["empty-id", "item-without-id", "not-json"],
)
async def test_invalid_record_raises_store_error(make, record):
    store = make()
    with pytest.raises(StoreError):
        await store.save(record)
    assert (await store.stats()).count == 0


async def test_closed_store_raises_store_error(make):
    store = make()
    await store.ping()
    await store.close()
    await store.close()  # idempotent
    for call in (
        store.save(rec("resp_1")),
        store.get("resp_1"),
        store.delete("resp_1"),
        store.stats(),
        store.ping(),
        store.get_by_item("msg_resp_1", None),
    ):
        with pytest.raises(StoreError):
            await call


# -- retention --------------------------------------------------------------------------------


async def test_ttl_expiry(make, clock):
    store = make(ttl_seconds=100)
    await store.save(rec("resp_1"))
    clock.advance(99.5)
    assert await store.get("resp_1") is not None
    clock.advance(0.5)
    assert await store.get("resp_1") is None  # lazily purged
    await store.save(rec("resp_2"))
    clock.advance(100)
    assert await store.delete("resp_2") is False  # expired: nothing live was deleted


async def test_expired_records_are_swept_on_save(make, clock):
    store = make(ttl_seconds=10, sweep_interval_seconds=60)
    for i in range(5):
        await store.save(rec(f"resp_{i}"))
    assert (await store.stats()).count == 5
    clock.advance(61)
    await store.save(rec("resp_new"))  # amortised sweep runs here, nobody read the old ones
    stats = await store.stats()
    assert stats.count == 1
    assert stats.expired == 5


async def test_sweep_work_is_bounded(make, clock):
    store = make(ttl_seconds=10)
    store.SWEEP_BATCH = 3
    for i in range(8):
        await store.save(rec(f"resp_{i}"))
    clock.advance(11)
    assert [await store.sweep() for _ in range(4)] == [3, 3, 2, 0]
    assert (await store.stats()).count == 0


async def test_max_count_evicts_oldest(make):
    store = make(max_count=3)
    for i in range(5):
        await store.save(rec(f"resp_{i}"))
    assert [await store.get(f"resp_{i}") is not None for i in range(5)] == [False, False] + [True] * 3
    stats = await store.stats()
    assert (stats.count, stats.evicted) == (3, 2)
    await store.save(rec("resp_2"))  # re-saving makes it the newest
    await store.save(rec("resp_5"))
    assert await store.get("resp_3") is None
    assert all([await store.get(f"resp_{i}") for i in (2, 4, 5)])


@pytest.mark.parametrize("backend", ["memory", "sqlite"], indirect=True)  # redis: rejected at load
async def test_max_bytes_evicts_oldest(make, backend):  # (test_config_rejects_max_bytes_for_redis)
    size = len(encode_record(rec("resp_0", pad=1000)))
    store = make(max_bytes=int(size * 3.5))
    for i in range(6):
        await store.save(rec(f"resp_{i}", pad=1000))
    assert [await store.get(f"resp_{i}") is not None for i in range(6)] == [False] * 3 + [True] * 3
    assert (await store.stats()).bytes <= size * 3.5
    with pytest.raises(StoreError):  # one record above the limit is refused, nothing is evicted
        await store.save(rec("resp_huge", pad=size * 4))
    assert (await store.stats()).count == 3


# -- concurrency --------------------------------------------------------------------------------


async def test_concurrent_saves(make):
    store = make()
    await asyncio.gather(*(store.save(rec(f"resp_{i}")) for i in range(100)))
    got = await asyncio.gather(*(store.get(f"resp_{i}") for i in range(100)))
    assert [g.id for g in got] == [f"resp_{i}" for i in range(100)]
    assert (await store.stats()).count == 100


async def test_concurrent_saves_respect_max_count(make):
    store = make(max_count=10)
    await asyncio.gather(*(store.save(rec(f"resp_{i}")) for i in range(100)))
    assert (await store.stats()).count == 10
    got = await asyncio.gather(*(store.get(f"resp_{i}") for i in range(100)))
    assert sum(g is not None for g in got) == 10


# -- sqlite specifics -------------------------------------------------------------------------


def sqlite_store(tmp_path: Path, clock, **cfg):
    return open_store(StoreConfig(backend="sqlite", data_dir=tmp_path / "a" / "b", **cfg), clock=clock)


async def test_sqlite_restart_keeps_records(tmp_path, clock):
    store = sqlite_store(tmp_path, clock, max_count=5)
    for i in range(3):
        await store.save(rec(f"resp_{i}"))
    await store.delete("resp_0")
    await store.close()
    store = sqlite_store(tmp_path, clock, max_count=5)
    assert await store.get("resp_0") is None
    assert await store.get("resp_2") == rec("resp_2")
    assert (await store.stats()).count == 2  # totals survive the restart too
    await store.close()


async def test_sqlite_file_created_on_first_use_in_wal_mode(tmp_path, clock):
    store = sqlite_store(tmp_path, clock)
    assert not (tmp_path / "a").exists()  # opening the store touches nothing
    await store.save(rec("resp_1"))
    path = tmp_path / "a" / "b" / FILENAME
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    await store.close()


async def test_sqlite_connection_lives_off_the_event_loop(tmp_path, clock):
    store = sqlite_store(tmp_path, clock)
    await store.ping()
    with pytest.raises(sqlite3.ProgrammingError, match="thread"):
        store._conn.execute("SELECT 1")  # owned by the worker thread, not this one
    await store.close()


async def test_sqlite_unusable_dir_raises_store_error(tmp_path, clock):
    (tmp_path / "a").write_text("a file where the data dir should be")
    store = sqlite_store(tmp_path, clock)
    for call in (store.ping(), store.save(rec("resp_1")), store.get("resp_1")):
        with pytest.raises(StoreError):
            await call
    await store.close()


async def test_sqlite_corrupt_file_or_row_raises_store_error(tmp_path, clock):
    store = sqlite_store(tmp_path, clock)
    await store.save(rec("resp_1"))
    await store.close()
    path = tmp_path / "a" / "b" / FILENAME
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE responses SET data = ? WHERE id = 'resp_1'", (b"{not json",))
    store = sqlite_store(tmp_path, clock)
    with pytest.raises(StoreError, match="corrupt"):
        await store.get("resp_1")
    await store.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.write_bytes(b"this is not a database" * 100)
    store = sqlite_store(tmp_path, clock)
    with pytest.raises(StoreError):
        await store.get("resp_1")
    await store.close()


# -- redis specifics: real server, several replicas ----------------------------------------------


def redis_store(prefix: str, clock, url: str | None = REDIS_URL, **cfg):
    return open_store(StoreConfig(backend="redis", redis_url=url, key_prefix=prefix, **cfg), clock=clock)


@pytest.mark.redis
async def test_redis_two_replicas_share_records(prefix, clock, redis_url):
    a, b = redis_store(prefix, clock, max_count=10), redis_store(prefix, clock, max_count=10)
    await a.save(rec("resp_1"))
    assert await b.get("resp_1") == rec("resp_1")
    await b.save(rec("resp_2", prev="resp_1"))
    assert (await a.get("resp_2")).previous_response_id == "resp_1"
    assert await b.delete("resp_1") is True
    assert await a.get("resp_1") is None
    # max_count holds across replicas writing at the same time
    await asyncio.gather(*(s.save(rec(f"resp_{s is a}_{i}")) for i in range(40) for s in (a, b)))
    assert (await a.stats()).count == (await b.stats()).count == 10
    await a.close()
    await b.close()


@pytest.mark.redis
async def test_redis_records_carry_a_ttl(prefix, clock, redis_url):
    import redis.asyncio as aioredis

    store = redis_store(prefix, clock, ttl_seconds=300)
    await store.save(rec("resp_1"))
    client = aioredis.Redis.from_url(REDIS_URL)
    assert 0 < await client.ttl(f"{prefix}resp:resp_1") <= 300
    assert 0 < await client.ttl(f"{prefix}index") <= 300
    await client.aclose()
    await store.close()


@pytest.mark.redis
async def test_redis_corrupt_record_raises_store_error(prefix, clock, redis_url):
    import redis.asyncio as aioredis

    store = redis_store(prefix, clock)
    await store.save(rec("resp_1"))
    client = aioredis.Redis.from_url(REDIS_URL)
    await client.hset(f"{prefix}resp:resp_1", "data", b"{not json")
    await client.aclose()
    with pytest.raises(StoreError, match="corrupt"):
        await store.get("resp_1")
    await store.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_redis_unreachable_raises_store_error(clock):
    """Every operation against an unreachable Redis ends in a StoreError naming the backend (not
    a raw redis exception, not endless retries). The wait is a hang guard, not a speed limit: a
    refused connection fails at once, and the store's own bound is 1 s per operation."""
    store = redis_store("x:", clock, url=f"redis://127.0.0.1:{closed_port()}/0", redis_timeout_seconds=1)
    calls = {
        "ping": store.ping(),
        "save": store.save(rec("resp_1")),
        "get": store.get("resp_1"),
        "delete": store.delete("resp_1"),
        "stats": store.stats(),
        "sweep": store.sweep(),
        "get_by_item": store.get_by_item("msg_resp_1", None),
    }
    try:
        for name, call in calls.items():
            with pytest.raises(StoreError) as info:
                try:
                    await asyncio.wait_for(call, 60)
                except TimeoutError:
                    pytest.fail(f"{name} against an unreachable redis still running after 60 s")
            assert info.value.backend == "redis", name
    finally:
        for call in calls.values():
            call.close()  # the coroutines not awaited after a failure
        await store.close()


# -- configuration ------------------------------------------------------------------------------


def test_config_defaults_and_strictness():
    cfg = StoreConfig()
    assert (cfg.backend, cfg.ttl_seconds, cfg.max_count, cfg.max_bytes) == ("sqlite", THIRTY_DAYS, None, None)
    with pytest.raises(pydantic.ValidationError):
        StoreConfig(backnd="redis")
    with pytest.raises(pydantic.ValidationError):
        cfg.ttl_seconds = 5
    for bad in ({"ttl_seconds": 0}, {"max_count": 0}, {"backend": "postgres"}):
        with pytest.raises(pydantic.ValidationError):
            StoreConfig(**bad)


def test_config_rejects_max_bytes_for_redis():
    with pytest.raises(pydantic.ValidationError, match="maxmemory"):
        StoreConfig(backend="redis", max_bytes=1000)


def test_config_redis_url_from_env():
    cfg = StoreConfig(backend="redis", redis_url_env="MY_URL")
    assert cfg.resolved_redis_url({"MY_URL": "redis://h:1/2"}) == "redis://h:1/2"
    assert StoreConfig(redis_url="redis://a").resolved_redis_url({"CROSSFEED_REDIS_URL": "redis://b"}) == "redis://a"
    with pytest.raises(StoreError, match="MY_URL"):
        open_store(cfg, env={})
    with pytest.raises(StoreError, match="url"):
        open_store(StoreConfig(backend="redis", redis_url="http://nope"), env={})


def test_config_data_dir_resolution(tmp_path):
    assert StoreConfig(data_dir=tmp_path).resolved_data_dir({}) == tmp_path
    assert StoreConfig().resolved_data_dir({"CROSSFEED_DATA_DIR": "/srv/cf"}) == Path("/srv/cf")
    assert StoreConfig().resolved_data_dir({"XDG_STATE_HOME": "/st"}) == Path("/st/crossfeed")
    assert StoreConfig().resolved_data_dir({}).parts[-3:] == (".local", "state", "crossfeed")


async def test_memory_backend_is_always_bounded():
    store = open_store(StoreConfig(backend="memory"))
    assert store._max_count == MEMORY_DEFAULT_MAX_COUNT
    await store.close()


# -- input_items pagination (pure) ----------------------------------------------------------------

ITEMS = [{"id": f"item_{i}", "type": "message"} for i in range(7)]


def ids(page):
    return [item["id"] for item in page["data"]]


def test_pagination_defaults_desc_limit_20():
    page = paginate(ITEMS)
    assert page["object"] == "list"
    assert ids(page) == [f"item_{i}" for i in range(6, -1, -1)]
    assert (page["first_id"], page["last_id"], page["has_more"]) == ("item_6", "item_0", False)
    many = [{"id": f"m{i}"} for i in range(25)]
    assert len(paginate(many)["data"]) == 20 and paginate(many)["has_more"] is True
    assert paginate(ITEMS, limit=7)["has_more"] is False  # a full last page has no more


def test_pagination_walks_the_whole_list_with_after():
    for order, expected in (("asc", ITEMS), ("desc", ITEMS[::-1])):
        seen, after = [], None
        while True:
            page = paginate(ITEMS, limit="3", order=order, after=after)
            seen += ids(page)
            if not page["has_more"]:
                break
            after = page["last_id"]
        assert seen == [item["id"] for item in expected]


def test_pagination_before_and_window():
    assert ids(paginate(ITEMS, order="asc", before="item_3")) == ["item_0", "item_1", "item_2"]
    assert ids(paginate(ITEMS, order="desc", before="item_3")) == ["item_6", "item_5", "item_4"]
    page = paginate(ITEMS, order="asc", after="item_1", before="item_5", limit=2)
    assert (ids(page), page["has_more"]) == (["item_2", "item_3"], True)
    empty = paginate(ITEMS, order="asc", after="item_5", before="item_2")
    assert (empty["data"], empty["first_id"], empty["last_id"], empty["has_more"]) == ([], None, None, False)
    assert paginate([])["data"] == []
    assert ids(paginate(ITEMS, limit=1, order="asc", after="", before="")) == ["item_0"]


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "2.5"}, "limit"),
        ({"limit": True}, "limit"),
        ({"order": "up"}, "order"),
        ({"after": "item_99"}, "after"),
        ({"before": "nope"}, "before"),
        ({"after": 3}, "after"),
    ],
)
def test_pagination_bad_params_name_the_param(kwargs, param):
    with pytest.raises(InvalidParam) as info:
        paginate(ITEMS, **kwargs)
    assert info.value.param == param
    assert isinstance(info.value, ValueError) and param in info.value.message
