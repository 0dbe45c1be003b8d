"""Store outages, from the client's side, on every backend: crossfeed in-process on real sockets,
the official SDK (every stream validated) and aiohttp as clients.

Each backend fails the way it fails in production, through its own code:

- ``sqlite-full``: SQLite's own SQLITE_FULL ("database or disk is full"): the store connection's
  ``max_page_count`` is pinned to the file's size, so no write can grow it;
- ``sqlite-readonly``: SQLITE_READONLY (``query_only`` on the store's connection);
- ``redis-down``: a redis-server of the test's own, stopped (reads fail too) and started again;
- ``redis-readonly``: the same Redis made a replica (``REPLICAOF`` a closed port), as after a
  failover that left crossfeed on the old primary: writes refused (READONLY), reads served;
- ``memory``: its ``save`` made to raise (the memory store has no outage of its own).

Two crossfeed instances sharing one store stand for two workers or replicas. The chaos test with
real processes under load is tests/faults/test_store_chaos.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from crossfeed.proxy.state import store_health
from crossfeed.proxy.state.store.base import StoreError
from crossfeed.proxy.state.store_access import KEEPER, STORE
from tests.fakes.upstream import FakeUpstream
from tests.store.helpers import call, metric, readyz, reply, start
from tests.support.app_server import ProxyHandle
from tests.support.clients import Captured, sdk_client
from tests.support.redis_server import RedisServer, free_port
from tests.support.waiting import wait_until
from tests.support.ws import FrameRecorder, ws_url

pytestmark = pytest.mark.timeout(120)

PAD = "x" * 20_000  # every record needs new pages: a pinned SQLite file cannot take it
KINDS = ["memory", "sqlite-full", "sqlite-readonly", "redis-down", "redis-readonly"]


class Breaker:
    """Makes the saves of a store ``kind`` fail the way they fail in production, and heals it."""

    def __init__(self, kind: str, handles: list[ProxyHandle], redis: RedisServer | None) -> None:
        self.kind, self.handles, self.redis = kind, handles, redis
        self._saved: list[tuple[Any, Any, Any]] = []

    async def _sqlite(self, pragma: str) -> None:
        for h in self.handles:
            store = h.app[STORE]
            await store._run(lambda s=store: s._connect().execute(pragma).fetchall())  # type: ignore[attr-defined]

    async def fail(self) -> None:
        if self.kind == "memory":
            for h in self.handles:

                async def refuse(*_: Any) -> None:
                    raise StoreError("memory: writes refused by the test", backend="memory")

                store = h.app[STORE]
                self._saved.append((store, store.save, store.probe_write))
                store.save = store.probe_write = refuse  # type: ignore[method-assign,assignment]
        elif self.kind == "sqlite-full":
            await self._sqlite("PRAGMA max_page_count = 1")  # (never below the file's size: pinned there)
        elif self.kind == "sqlite-readonly":
            await self._sqlite("PRAGMA query_only = 1")
        elif self.kind == "redis-down":
            assert self.redis is not None
            self.redis.stop()
        elif self.kind == "redis-readonly":
            assert self.redis is not None
            assert self.redis.command("REPLICAOF", "127.0.0.1", str(free_port())).startswith(b"+OK")

    async def heal(self) -> None:
        if self.kind == "memory":
            for store, save, probe in self._saved:
                store.save, store.probe_write = save, probe
        elif self.kind == "sqlite-full":
            await self._sqlite("PRAGMA max_page_count = 4294967294")
        elif self.kind == "sqlite-readonly":
            await self._sqlite("PRAGMA query_only = 0")
        elif self.kind == "redis-down":
            assert self.redis is not None
            self.redis.start()
        elif self.kind == "redis-readonly":
            assert self.redis is not None
            assert self.redis.command("REPLICAOF", "NO", "ONE").startswith(b"+OK")

    @property
    def reads_fail(self) -> bool:
        return self.kind == "redis-down"


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


async def create(handle: ProxyHandle, **body: Any) -> tuple[int, dict[str, Any]]:
    return await call("POST", handle.base_url + "/responses", {"model": "m", "input": PAD, **body})


def kind_param(kind: str) -> Any:
    return pytest.param(kind, marks=[pytest.mark.redis] if kind.startswith("redis") else [])


@pytest.fixture
async def handles(request: pytest.FixtureRequest) -> AsyncIterator[list[ProxyHandle]]:
    opened: list[ProxyHandle] = []
    yield opened
    for h in opened:
        await h.stop()


async def opened(
    handles: list[ProxyHandle], upstream: FakeUpstream, tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> tuple[RedisServer | None, ProxyHandle]:
    redis = request.getfixturevalue("redis") if kind.startswith("redis") else None
    handle = await start(upstream, tmp_path, kind, redis.url if redis else None)
    handles.append(handle)
    return redis, handle


@pytest.mark.parametrize("kind", [kind_param(k) for k in KINDS])
async def test_saves_fail_turns_complete_and_this_process_serves_them_until_the_store_takes_them(
    upstream: FakeUpstream,
    tmp_path: Path,
    kind: str,
    captured: list[Captured],
    handles: list[ProxyHandle],
    request: pytest.FixtureRequest,
) -> None:
    upstream.default = reply
    redis, a = await opened(handles, upstream, tmp_path, kind, request)
    breaker = Breaker(kind, [a], redis)
    client = sdk_client(a.base_url, captured)
    before = await client.responses.create(model="m", input=PAD, stream=False)  # saved while all is well
    await breaker.fail()
    # store: false is untouched; store: true streams and completes, streamed or not
    off = await client.responses.create(model="m", input="no store", store=False, stream=False)
    assert off.output_text == "answer 1"
    stream = await client.responses.create(model="m", input=PAD, stream=True)
    events = [e async for e in stream]
    assert events[-1].type == "response.completed"
    streamed = events[-1].response
    plain = await client.responses.create(model="m", input=PAD, stream=False)
    assert plain.status == "completed"
    assert metric(a, "store_failures", "save") == 2  # (store: false saved nothing)
    assert metric(a, "store_retries", "queued") == 2 and metric(a, "store_retry_queue", "records") == 2
    # this process answers follow-ups to them from its retry queue: nothing is lost
    follow = await client.responses.create(model="m", input="and?", previous_response_id=streamed.id)
    assert follow.output_text == "answer 2"
    assert upstream.requests[-1].body["messages"][:2] == [
        {"role": "user", "content": PAD},
        {"role": "assistant", "content": "answer 1"},
    ]
    assert (await client.responses.retrieve(plain.id)).output_text == "answer 1"
    listed = (await client.responses.input_items.list(plain.id)).data
    assert [i.type for i in listed] == ["message"]
    by_ref = await client.responses.create(
        model="m", input=[{"type": "item_reference", "id": plain.output[0].id}, {"role": "user", "content": "so?"}]
    )
    assert by_ref.output_text == "answer 1" and upstream.requests[-1].body["messages"][0]["content"] == "answer 1"
    gone = await client.responses.delete(by_ref.id)  # queued too (its save failed): deleted from the queue
    assert gone is None or getattr(gone, "deleted", True)
    status, body = await call("GET", f"{a.base_url}/responses/{by_ref.id}")
    assert status in (404, 503) and body["error"]["code"] in ("not_found", "store_unavailable"), body
    # a response saved before the outage: read from the store (or a 503 naming it when reads fail too)
    status, body = await call("GET", f"{a.base_url}/responses/{before.id}")
    if breaker.reads_fail:
        assert status == 503 and body["error"]["code"] == "store_unavailable", body
        assert "response store (redis) is unavailable (unreachable)" in body["error"]["message"]
    else:
        assert status == 200 and body["id"] == before.id
    # /readyz: still ready (turns are served), degraded, and says why
    status, ready = await readyz(a)
    assert status == 200 and ready["status"] == "degraded", ready
    assert "failing saves since" in ready["store"] and "queued for retry" in ready["store"], ready
    if breaker.reads_fail:
        assert "unreachable" in ready["store"]
    # the store comes back: the queue reaches it by itself, within seconds
    await breaker.heal()
    healed = time.monotonic()
    assert await wait_until(lambda: a.app[KEEPER].queue_size == 0, 15), a.app[KEEPER].queue_size
    took = time.monotonic() - healed
    print(f"\n{kind}: queue written {took:.2f}s after the store came back")
    assert took < 6
    assert metric(a, "store_retries", "saved") == 3  # streamed, plain, the follow-up (by_ref was deleted)
    assert await a.app[STORE].get(plain.id) is not None and await a.app[STORE].get(follow.id) is not None
    assert await a.app[STORE].get(by_ref.id) is None
    status, ready = await readyz(a)
    assert (status, ready["status"], ready["store"]) == (200, "ready", "ok"), ready
    await client.close()


@pytest.mark.parametrize(
    "kind", [kind_param(k) for k in ["sqlite-full", "sqlite-readonly", "redis-readonly", "redis-down"]]
)
async def test_another_process_that_misses_it_says_the_save_failed_then_finds_it(
    upstream: FakeUpstream,
    tmp_path: Path,
    kind: str,
    handles: list[ProxyHandle],
    request: pytest.FixtureRequest,
    ws_frames: FrameRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A saves (and fails); B, sharing the store, has saved nothing of late: its miss asks the
    store with a probe write and answers 503 naming the failed saves, on every path; once the
    store is back A's queue reaches it and B finds the response within seconds."""
    upstream.default = reply
    redis, a = await opened(handles, upstream, tmp_path, kind, request)
    b = await start(upstream, tmp_path, kind, redis.url if redis else None)
    handles.append(b)
    breaker = Breaker(kind, [a, b], redis)
    await breaker.fail()
    status, made = await create(a)
    assert status == 200 and a.app[KEEPER].queue_size == 1
    rid, item = made["id"], made["output"][0]["id"]
    word = {"sqlite-full": "disk full", "sqlite-readonly": "read-only", "redis-readonly": "read-only"}.get(kind)
    answers = [
        await create(b, previous_response_id=rid, input="and?"),
        await call("GET", f"{b.base_url}/responses/{rid}"),
        await call("GET", f"{b.base_url}/responses/{rid}/input_items"),
        await call("DELETE", f"{b.base_url}/responses/{rid}"),
        await create(b, input=[{"type": "item_reference", "id": item}, {"role": "user", "content": "so?"}]),
    ]
    for status, body in answers:
        assert status == 503 and body["error"]["code"] == "store_unavailable", body
        message = body["error"]["message"]
        if word is None:  # redis down: the lookup itself fails, and says so
            assert "is unavailable (unreachable): " in message, message
        else:
            assert "was not found: the response store" in message and "has been failing to save since" in message
            assert f"({word}); it may be one whose save failed. Try again when the store recovers." in message
    # WebSocket mode: the same answer as an error frame, and the socket stays open
    async with ws_frames.connect(ws_url(b.url)) as ws:
        turn = await ws.turn(model="m", input="and?", previous_response_id=rid)
        assert turn.errors and turn.errors[0]["status"] == 503, turn.errors
        assert turn.errors[0]["error"]["code"] == "store_unavailable"
        ok = await ws.turn(model="m", input="a fresh start", store=False)
        assert ok.terminal == "response.completed"
    # A itself serves it (from its queue) over HTTP and WebSocket alike
    status, body = await create(a, previous_response_id=rid, input="and?")
    assert status == 200, body
    async with ws_frames.connect(ws_url(a.url)) as ws:
        assert (await ws.turn(model="m", input="and?", previous_response_id=rid)).terminal == "response.completed"
    await breaker.heal()
    healed = time.monotonic()
    found = False
    while time.monotonic() - healed < 15 and not found:
        status, body = await call("GET", f"{b.base_url}/responses/{rid}")
        found = status == 200
        if not found:
            assert status == 503 and body["error"]["code"] == "store_unavailable", body
            await asyncio.sleep(0.1)
    took = time.monotonic() - healed
    print(f"\n{kind}: the other process found it {took:.2f}s after the store came back")
    assert found and took < 6
    status, _ = await create(b, previous_response_id=rid, input="and?")
    assert status == 200
    # For RECOVERY_HINT_SECONDS after recovery a miss still says the saves failed, then a plain 404
    status, body = await call("GET", f"{b.base_url}/responses/resp_unknown")
    assert status == 503 and "failed to save from" in body["error"]["message"], body
    monkeypatch.setattr(store_health, "RECOVERY_HINT_SECONDS", 0.0)
    status, body = await call("GET", f"{b.base_url}/responses/resp_unknown")
    assert status == 404 and body["error"]["message"] == "Response with id 'resp_unknown' not found.", body
    assert ws_frames.validate()[1] == 1


@pytest.mark.parametrize("kind", ["sqlite-full", "sqlite-readonly"])
async def test_a_miss_after_the_store_came_back_before_the_queue_was_written_is_a_503(
    upstream: FakeUpstream, tmp_path: Path, kind: str, handles: list[ProxyHandle], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A's save fails; the store comes back before A's retry writes its queue; B, whose saves never
    failed, is asked for the response then. Its probe write goes through, so its own health says
    nothing: the failure A noted beside the SQLite file makes the miss a 503 naming it, never a
    404 for a response that exists in A's queue."""
    from crossfeed.proxy.state import store_retry

    monkeypatch.setattr(store_retry, "BACKOFF_FIRST", 30.0)  # A's queue waits
    upstream.default = reply
    a = await start(upstream, tmp_path, kind, None)
    handles.append(a)
    b = await start(upstream, tmp_path, kind, None)
    handles.append(b)
    breaker = Breaker(kind, [a], None)
    await breaker.fail()
    status, made = await create(a)
    assert status == 200 and a.app[KEEPER].queue_size == 1
    await breaker.heal()
    status, body = await call("GET", f"{b.base_url}/responses/{made['id']}")
    assert b.app[KEEPER].health.failing_since is None and b.app[KEEPER].health.recovered_at is None
    assert status == 503 and body["error"]["code"] == "store_unavailable", body
    message = body["error"]["message"]
    assert "was not found: the response store (sqlite) failed a save in another crossfeed process at " in message
    assert a.app[KEEPER].queue_size == 1  # (still queued: the answer was not a race won by A's retry)


@pytest.mark.parametrize("kind", [kind_param(k) for k in ["sqlite-full", "redis-readonly"]])
async def test_a_miss_right_after_a_good_save_still_asks_the_store(
    upstream: FakeUpstream, tmp_path: Path, kind: str, handles: list[ProxyHandle], request: pytest.FixtureRequest
) -> None:
    """B saved a moment ago; then the store stops taking writes and A's save fails. B's fresh
    success is older than A's failure, so B's miss does not take it for an answer: it asks the
    store with a probe write and answers 503, never a 404 for a response that exists in A's queue."""
    upstream.default = reply
    redis, a = await opened(handles, upstream, tmp_path, kind, request)
    b = await start(upstream, tmp_path, kind, redis.url if redis else None)
    handles.append(b)
    status, _ = await create(b)
    assert status == 200 and b.app[KEEPER].health.failing_since is None  # B's save went through just now
    breaker = Breaker(kind, [a, b], redis)
    await breaker.fail()
    status, made = await create(a)
    assert status == 200 and a.app[KEEPER].queue_size == 1
    status, body = await call("GET", f"{b.base_url}/responses/{made['id']}")
    assert status == 503 and body["error"]["code"] == "store_unavailable", body
    assert "has been failing to save since" in body["error"]["message"], body
    await breaker.heal()


async def test_the_retry_queue_is_bounded_and_a_response_given_up_says_its_save_failed(
    upstream: FakeUpstream, tmp_path: Path, handles: list[ProxyHandle]
) -> None:
    upstream.default = reply
    a = await start(upstream, tmp_path, "memory", None, retry_max_records=2, retry_max_bytes=100_000)
    handles.append(a)
    breaker = Breaker("memory", [a], None)
    await breaker.fail()
    with structlog.testing.capture_logs() as logs:
        ids = [(await create(a))[1]["id"] for _ in range(3)]
        status, big = await create(a, input="y" * 120_000)  # larger than the whole queue: given up at once
    assert status == 200
    assert metric(a, "store_lost", "queue_full") == 2 and metric(a, "store_retry_queue", "records") == 2
    lost = [e for e in logs if e["event"] == "store.save_lost"]
    assert [e["response_id"] for e in lost] == [ids[0], big["id"]], lost
    for rid in (ids[0], big["id"]):
        status, body = await create(a, previous_response_id=rid, input="and?")
        assert status == 404 and body["error"]["code"] == "previous_response_not_found", body
        assert body["error"]["message"].startswith(f"Previous response with id '{rid}' was not saved: the response")
        assert "crossfeed gave it up (the retry queue" in body["error"]["message"]
        status, body = await call("GET", f"{a.base_url}/responses/{rid}")
        assert status == 404 and "was not saved" in body["error"]["message"], body
    for rid in ids[1:]:  # the two newest are kept and served
        assert (await call("GET", f"{a.base_url}/responses/{rid}"))[0] == 200
    status, ready = await readyz(a)
    assert status == 200 and "2 queued for retry, 2 lost since start" in ready["store"], ready


@pytest.mark.redis
async def test_a_hung_store_is_a_503_within_the_operation_timeout_never_a_hang(
    upstream: FakeUpstream, tmp_path: Path, redis: RedisServer, handles: list[ProxyHandle], ws_frames: FrameRecorder
) -> None:
    """Redis paused (SIGSTOP: connections accepted, nothing answers): every path that needs the
    store answers 503 within ``operation_timeout_seconds``; turns that do not need it are served."""
    upstream.default = reply
    a = await start(
        upstream,
        tmp_path,
        "redis",
        redis.url,
        operation_timeout_seconds=1.0,
        redis_timeout_seconds=30.0,
        save_timeout_seconds=0.5,
    )
    handles.append(a)
    status, made = await create(a)
    assert status == 200
    redis.pause()
    try:
        started = time.monotonic()
        status, body = await create(a, input="no store", store=False)
        assert status == 200 and time.monotonic() - started < 1, body
        started = time.monotonic()
        status, saved = await create(a)  # waits save_timeout_seconds, then the save goes on behind
        assert status == 200 and time.monotonic() - started < 2
        checks = {
            "previous_response_id": lambda: create(a, previous_response_id=made["id"], input="x"),
            "GET": lambda: call("GET", f"{a.base_url}/responses/{made['id']}"),
            "input_items": lambda: call("GET", f"{a.base_url}/responses/{made['id']}/input_items"),
            "DELETE": lambda: call("DELETE", f"{a.base_url}/responses/{made['id']}"),
            "item_reference": lambda: create(a, input=[{"type": "item_reference", "id": made["output"][0]["id"]}]),
            "compact": lambda: call(
                "POST", f"{a.base_url}/responses/compact", {"model": "m", "previous_response_id": made["id"]}
            ),
        }
        for name, check in checks.items():
            started = time.monotonic()
            status, body = await check()
            took = time.monotonic() - started
            assert status == 503 and body["error"]["code"] == "store_unavailable", (name, body)
            assert "The response store (redis) is unavailable (timed out)" in body["error"]["message"], (name, body)
            assert took < 3, (name, took)
        async with ws_frames.connect(ws_url(a.url)) as ws:
            started = time.monotonic()
            turn = await ws.turn(model="m", input="x", previous_response_id=made["id"])
            assert turn.errors[0]["status"] == 503 and time.monotonic() - started < 3, turn.errors
        # the save that timed out is kept, and served here
        assert await wait_until(lambda: a.app[KEEPER].queue_size == 1, 5)
        assert (await call("GET", f"{a.base_url}/responses/{saved['id']}"))[0] == 200
    finally:
        redis.resume()
    assert await wait_until(lambda: a.app[KEEPER].queue_size == 0, 10)
    assert (await call("GET", f"{a.base_url}/responses/{made['id']}"))[0] == 200


@pytest.mark.parametrize("heal", [True, False], ids=["store-back", "store-still-full"])
async def test_shutdown_drains_the_queue_within_bounds(
    upstream: FakeUpstream, tmp_path: Path, heal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crossfeed.proxy.state import store_retry

    monkeypatch.setattr(store_retry, "BACKOFF_FIRST", 30.0)  # the loop waits: only the shutdown drain writes them
    upstream.default = reply
    a = await start(upstream, tmp_path, "sqlite-full", None)
    breaker = Breaker("sqlite-full", [a], None)
    await breaker.fail()
    ids = [(await create(a))[1]["id"] for _ in range(2)]
    assert a.app[KEEPER].queue_size == 2
    if heal:
        await breaker.heal()
    started = time.monotonic()
    with structlog.testing.capture_logs() as logs:
        await a.stop()
    took = time.monotonic() - started
    assert took < store_retry.DRAIN_SECONDS + 2, took
    b = await start(upstream, tmp_path, "sqlite", None)  # a new process on the same file
    try:
        answers = [await call("GET", f"{b.base_url}/responses/{rid}") for rid in ids]
        if not heal:
            # B cannot tell a response A gave up on from one still in A's queue: while A's failed
            # saves are recent (noted beside the file) its miss is a 503, then a plain 404
            monkeypatch.setattr(store_health, "RECOVERY_HINT_SECONDS", 0.0)
            later = [(await call("GET", f"{b.base_url}/responses/{rid}"))[0] for rid in ids]
    finally:
        await b.stop()
    found = [status for status, _ in answers]
    if heal:
        assert found == [200, 200]
    else:
        assert found == [503, 503], answers
        for _, body in answers:
            assert "failed a save in another crossfeed process at" in body["error"]["message"], body
        assert later == [404, 404]
        assert metric(a, "store_lost", "shutdown") == 2
        assert any(e["event"] == "store.retry_abandoned" and e["queued"] == 2 for e in logs), logs


@pytest.mark.redis
async def test_readyz_not_ready_until_the_store_is_first_reached_then_degraded_never_unready(
    upstream: FakeUpstream, tmp_path: Path, handles: list[ProxyHandle]
) -> None:
    """A Redis never reached since start (a wrong URL, or not up yet) keeps the pod out of
    rotation; one lost later leaves it in (turns are served), degraded, saying why."""
    redis = RedisServer(tmp_path / "redis")  # not started yet
    a = await start(upstream, tmp_path, "redis", redis.url)
    handles.append(a)
    status, ready = await readyz(a)
    assert status == 503 and ready["status"] == "not ready", ready
    assert "the response store does not answer: not reached since start" in ready["problems"], ready
    redis.start()
    try:
        for _ in range(50):  # (the upstream's first probe may still be on its way)
            status, ready = await readyz(a)
            if status == 200:
                break
            await asyncio.sleep(0.1)
        assert (status, ready["status"], ready["store"]) == (200, "ready", "ok"), ready
    finally:
        redis.stop()
    status, ready = await readyz(a)
    assert (status, ready["status"], ready["problems"]) == (200, "degraded", []), ready
    assert ready["store"] == "degraded: unreachable, 0 queued for retry", ready
    upstream.default = reply
    status, _ = await create(a)  # a turn is served; its save is kept
    assert status == 200
    status, ready = await readyz(a)
    assert ready["store"].startswith("degraded: unreachable, failing saves since "), ready
    assert ready["store"].endswith(" (unreachable), 1 queued for retry"), ready
