"""The background runs' part of every store backend (store/base.py): the event log read after a
cursor and waited on, the run's state, the lease only one holder has at a time, the cancel flag.
Two stores made in one test share their data, as two replicas sharing the store do."""

from __future__ import annotations

import asyncio

import orjson
import pytest


def pair(make, backend: str):
    """Two stores on the same data (a memory store is per process: the same one twice)."""
    a = make()
    return a, (a if backend == "memory" else make())


def ev(seq: int, kind: str = "response.output_text.delta") -> tuple[int, bytes]:
    return seq, orjson.dumps({"type": kind, "sequence_number": seq})


async def test_events_are_read_after_the_cursor_in_order(make) -> None:
    store = make()
    await store.append_events("resp_1", [ev(0), ev(1)])
    await store.append_events("resp_1", [ev(2)])
    assert [s for s, _ in await store.read_events("resp_1", -1, 0)] == [0, 1, 2]
    assert await store.read_events("resp_1", 0, 0) == [ev(1), ev(2)]
    assert await store.read_events("resp_1", 2, 0) == []
    assert await store.read_events("resp_other", -1, 0) == []


async def test_a_waiting_reader_gets_the_events_written_by_another_store(make, backend) -> None:
    writer, reader = pair(make, backend)
    await writer.append_events("resp_2", [ev(0)])
    waiting = asyncio.create_task(reader.read_events("resp_2", 0, 3.0))
    await asyncio.sleep(0.2)
    assert not waiting.done()  # nothing after 0 yet: it waits
    await writer.append_events("resp_2", [ev(1), ev(2)])
    got = await asyncio.wait_for(waiting, 3.0)
    assert [s for s, _ in got] == [1, 2]


async def test_a_wait_with_nothing_written_answers_empty(make) -> None:
    store = make()
    await store.append_events("resp_3", [ev(0)])
    assert await store.read_events("resp_3", 0, 0.3) == []


async def test_run_state_is_replaced_and_read_by_another_store(make, backend) -> None:
    a, b = pair(make, backend)
    assert await a.get_run("resp_4") is None
    await a.put_run("resp_4", {"status": "queued", "owner": None})
    await a.put_run("resp_4", {"status": "in_progress", "owner": "k1", "last": 3})
    assert await b.get_run("resp_4") == {"status": "in_progress", "owner": "k1", "last": 3}


async def test_a_lease_has_one_holder_until_it_expires(make, backend, clock) -> None:
    a, b = pair(make, backend)
    assert await a.lease("resp_5") is None
    assert await a.renew_lease("resp_5", "A", 10)
    assert await a.renew_lease("resp_5", "A", 10)  # its own: renewed
    assert not await b.renew_lease("resp_5", "B", 10)  # A's is live
    holder, until = await b.lease("resp_5")
    assert holder == "A" and until == clock.now + 10
    clock.advance(11)
    assert await b.renew_lease("resp_5", "B", 10)  # A's ran out: B takes it
    assert not await a.renew_lease("resp_5", "A", 10)  # and A has lost it
    assert (await a.lease("resp_5"))[0] == "B"


async def test_the_cancel_flag_is_seen_by_another_store(make, backend) -> None:
    a, b = pair(make, backend)
    await a.put_run("resp_6", {"status": "in_progress"})
    assert not await b.cancel_requested("resp_6")
    await b.request_cancel("resp_6")
    assert await a.cancel_requested("resp_6")
    assert await a.get_run("resp_6") == {"status": "in_progress"}  # the flag leaves the state alone


async def test_runs_expire_with_the_response_retention(make, clock) -> None:
    store = make(ttl_seconds=100)
    await store.put_run("resp_7", {"status": "completed"})
    await store.append_events("resp_7", [ev(0)])
    clock.advance(101)
    if store.backend != "redis":  # (Redis expires keys by its own clock; its TTL is set, see below)
        assert await store.get_run("resp_7") is None
        assert await store.read_events("resp_7", -1, 0) == []
    else:
        ttl = await store._client.ttl(store._run_key("resp_7") + ":events")
        assert 0 < ttl <= 100


async def test_a_raised_cancel_flag_ends_the_wait(make, backend) -> None:
    a, b = pair(make, backend)
    await a.put_run("resp_8", {"status": "in_progress"})
    assert not await a.wait_cancel("resp_8", 0.1)
    await b.request_cancel("resp_8")
    assert await a.wait_cancel("resp_8", 0.1)


@pytest.mark.redis
async def test_redis_tells_the_waiter_of_a_cancel_at_once(redis_url: str, prefix: str) -> None:
    """(The other backends' wait is a check of the flag and a sleep.)"""
    from crossfeed.proxy.runtime.store_config import StoreConfig
    from crossfeed.proxy.state.store import open_store

    config = StoreConfig(backend="redis", redis_url=redis_url, key_prefix=prefix)
    a, b = open_store(config), open_store(config)
    try:
        await a.put_run("resp_9", {"status": "in_progress"})
        waiting = asyncio.create_task(a.wait_cancel("resp_9", 30))
        await asyncio.sleep(0.3)  # subscribed meanwhile
        assert not waiting.done()
        await b.request_cancel("resp_9")
        assert await asyncio.wait_for(waiting, 10)  # long before its 30 s
    finally:
        await a.close()
        await b.close()


async def test_closing_a_memory_store_drops_its_runs_and_wakes_their_readers(make, backend) -> None:
    from crossfeed.proxy.state.store.base import StoreError

    if backend != "memory":
        pytest.skip("the memory store's own close")
    store = make()
    await store.append_events("resp_c", [ev(0)])
    await store.put_run("resp_c", {"status": "in_progress", "owner": None})
    await store.remember("turn:x", "resp_c", 60)
    waiting = asyncio.create_task(store.read_events("resp_c", 0, 30.0))
    await asyncio.sleep(0.05)
    await store.close()
    with pytest.raises(StoreError):
        await asyncio.wait_for(waiting, 2.0)  # woken at once, not after its 30 s
    assert store._runs == {} and "_kv" not in store.__dict__
