"""The item index of every store backend: ``get_by_item`` finds the newest live record of a key
holding an item (output or input) by its id, in one indexed read, and the index lives and dies
with the records (delete, expiry, eviction, re-save). Fixtures in conftest.py; redis runs when
CROSSFEED_TEST_REDIS_URL is set."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from typing import Any

import pytest

from crossfeed.proxy.runtime.store_config import StoreConfig
from crossfeed.proxy.state.store import open_store
from crossfeed.proxy.state.store.base import StoredResponse, item_ids, owner_tag, stored_item
from crossfeed.proxy.state.store.sqlite import FILENAME
from tests.store.helpers import rec

REDIS_URL = os.environ.get("CROSSFEED_TEST_REDIS_URL")


def owned(rid: str, owner: str | None, **kw: Any) -> StoredResponse:
    return dataclasses.replace(rec(rid, **kw), owner=owner)


def later(rid: str, previous: StoredResponse, owner: str | None = None) -> StoredResponse:
    """A continuation of ``previous``: its input holds previous's input and output items."""
    record = rec(rid)
    items = [*previous.input_items, *previous.response["output"], *record.input_items]
    return dataclasses.replace(record, input_items=items, previous_response_id=previous.id, owner=owner)


async def index_entries(store: Any, backend: str) -> int:
    """How many (item, record) entries the backend's index holds, read from its own storage."""
    if backend == "memory":
        return sum(len(holders) for holders in store._holders.values())
    if backend == "sqlite":
        with sqlite3.connect(store.path) as conn:
            return conn.execute("SELECT count(*) FROM items").fetchone()[0]
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        keys = [k async for k in client.scan_iter(match=store._item_prefix + "*")]
        return sum([await client.zcard(k) for k in keys])
    finally:
        await client.aclose()


# -- pure helpers --------------------------------------------------------------------------------


def test_item_ids_and_stored_item():
    record = rec("resp_1")
    assert item_ids(record) == ["rs_resp_1", "fc_resp_1", "msg_resp_1", "in_resp_1", "fco_resp_1"]
    assert stored_item(record, "msg_resp_1")["content"][0]["text"] == "héllo ✓"
    assert stored_item(record, "fco_resp_1")["output"] == "ok"
    assert stored_item(record, "msg_other") is None and stored_item(None, "msg_resp_1") is None
    twice = later("resp_2", record)  # resp_1's output is in resp_2's input: each id once
    assert len(item_ids(twice)) == len(set(item_ids(twice))) == 3 + 2 + 3 + 2


def test_owner_tags_cannot_spell_each_other():
    assert len({owner_tag(None), owner_tag(""), owner_tag("a"), owner_tag("1=a")}) == 4
    # a name ending in ":1" and an item id starting with "1:" cannot meet in one key
    assert f"{owner_tag('x:1')}:y" != f"{owner_tag('x')}:1:y"


# -- every backend -------------------------------------------------------------------------------


async def test_output_and_input_items_are_found_by_id(make):
    store = make()
    first = rec("resp_1")
    await store.save(first)
    for item_id in ("msg_resp_1", "rs_resp_1", "fc_resp_1", "in_resp_1", "fco_resp_1"):
        assert await store.get_by_item(item_id, None) == first, item_id
    assert await store.get_by_item("msg_unknown", None) is None
    assert await store.get_by_item("resp_1", None) is None  # a response id is not an item id


async def test_index_is_scoped_by_owner(make):
    store = make()
    await store.save(owned("resp_a", "alice"))
    await store.save(owned("resp_b", "x:1"))
    await store.save(
        dataclasses.replace(
            owned("resp_c", "x"),
            input_items=[{"type": "message", "id": "1:in_resp_b", "role": "user", "content": "hi"}],
        )
    )
    assert (await store.get_by_item("msg_resp_a", "alice")).id == "resp_a"
    assert await store.get_by_item("msg_resp_a", "bob") is None
    assert await store.get_by_item("msg_resp_a", None) is None  # no key is not any key
    assert await store.get_by_item("msg_resp_a", "") is None
    assert (await store.get_by_item("in_resp_b", "x:1")).id == "resp_b"
    assert await store.get_by_item("in_resp_b", "x") is None
    assert (await store.get_by_item("1:in_resp_b", "x")).id == "resp_c"
    assert await store.get_by_item("1:in_resp_b", "x:1") is None


async def test_the_newest_holder_answers_and_an_older_one_remains(make, backend):
    store = make()
    first = rec("resp_1")
    second = later("resp_2", first)
    await store.save(first)
    await store.save(second)
    assert (await store.get_by_item("msg_resp_1", None)).id == "resp_2"
    assert (await store.get_by_item("in_resp_1", None)).id == "resp_2"
    assert await index_entries(store, backend) == 5 + 10
    assert await store.delete("resp_2") is True  # deleted with the record: back to the older one
    assert await index_entries(store, backend) == 5
    assert (await store.get_by_item("msg_resp_1", None)).id == "resp_1"
    assert await store.get_by_item("msg_resp_2", None) is None
    assert await store.delete("resp_1") is True
    assert await store.get_by_item("msg_resp_1", None) is None
    assert await index_entries(store, backend) == 0


async def test_index_expires_with_the_records(make, backend, clock):
    store = make(ttl_seconds=100, sweep_interval_seconds=0)
    first = rec("resp_1")
    await store.save(first)
    clock.advance(60)
    await store.save(later("resp_2", first))
    clock.advance(50)  # resp_1 expired, resp_2 not: its copy of resp_1's items still answers
    assert (await store.get_by_item("msg_resp_1", None)).id == "resp_2"
    assert await store.get_by_item("in_resp_1", None) is not None
    clock.advance(50)
    for item_id in ("msg_resp_1", "in_resp_1", "msg_resp_2"):
        assert await store.get_by_item(item_id, None) is None, item_id
    await store.save(rec("resp_3"))  # the sweep on save purges the expired records, index too
    assert await index_entries(store, backend) == 5


async def test_eviction_takes_the_index_along(make, backend):
    store = make(max_count=2)
    for i in range(4):
        await store.save(rec(f"resp_{i}"))
    assert [await store.get_by_item(f"msg_resp_{i}", None) is not None for i in range(4)] == [False, False, True, True]
    assert await index_entries(store, backend) == 2 * 5


async def test_resaving_an_id_replaces_its_index_entries(make, backend):
    store = make()
    await store.save(rec("resp_1"))
    changed = dataclasses.replace(
        rec("resp_1"), input_items=[{"type": "message", "id": "in_new", "role": "user", "content": "hi"}]
    )
    await store.save(changed)
    assert await store.get_by_item("in_resp_1", None) is None
    assert await store.get_by_item("in_new", None) == changed
    assert await index_entries(store, backend) == 4  # 3 output items + the new input item


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("redis", marks=pytest.mark.redis)], indirect=True)
async def test_replicas_share_the_index(make, backend):  # (a memory store is per process)
    a, b = make(), make()
    await a.save(owned("resp_1", "alice"))
    assert (await b.get_by_item("msg_resp_1", "alice")).id == "resp_1"
    assert await b.delete("resp_1") is True
    assert await a.get_by_item("msg_resp_1", "alice") is None


# -- backend specifics -----------------------------------------------------------------------------


async def test_sqlite_file_without_the_index_gets_it(tmp_path, clock):
    """A file written before the index existed opens: its records are found by response id only,
    and new saves are indexed."""
    cfg = StoreConfig(backend="sqlite", data_dir=tmp_path)
    store = open_store(cfg, clock=clock)
    await store.save(rec("resp_old"))
    await store.close()
    with sqlite3.connect(tmp_path / FILENAME) as conn:
        conn.executescript("DROP TRIGGER responses_items_del; DROP TABLE items;")
    store = open_store(cfg, clock=clock)
    assert (await store.get("resp_old")).id == "resp_old"
    assert await store.get_by_item("msg_resp_old", None) is None
    await store.save(rec("resp_new"))
    assert (await store.get_by_item("msg_resp_new", None)).id == "resp_new"
    assert await store.delete("resp_new") is True
    assert await store.get_by_item("msg_resp_new", None) is None
    await store.close()


@pytest.mark.redis
@pytest.mark.parametrize("backend", ["redis"], indirect=True)
async def test_redis_item_sets_carry_a_ttl_and_lose_stale_members(make, backend, prefix):
    import redis.asyncio as aioredis

    store = make(ttl_seconds=300)
    first = rec("resp_1")
    await store.save(first)
    await store.save(later("resp_2", first))
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        key = f"{prefix}item::msg_resp_1"
        assert 0 < await client.ttl(key) <= 300
        assert await client.zrange(key, 0, -1) == [b"resp_1", b"resp_2"]
        await client.delete(f"{prefix}resp:resp_2")  # as if Redis had expired it by itself
        assert (await store.get_by_item("msg_resp_1", None)).id == "resp_1"
        assert await client.zrange(key, 0, -1) == [b"resp_1"]  # the stale member went on the way
    finally:
        await client.aclose()
