"""item_reference input items and reasoning replayed by id only, looked up in the store by item id
and scoped by the request's key (proxy/state/history.py). Finding and replacing them (pure) is
tests/translators/forward/test_input.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

from crossfeed.proxy.errors import ProxyError
from crossfeed.proxy.runtime.guard import KEY_NAME
from crossfeed.proxy.runtime.observability import METRICS, Metrics
from crossfeed.proxy.runtime.store_config import StoreConfig
from crossfeed.proxy.state.history import SAVING, resolve_item_references
from crossfeed.proxy.state.store.base import StoredResponse, StoreError
from crossfeed.proxy.state.store.memory import MemoryStore
from crossfeed.proxy.state.store_access import KEEPER, STORE
from crossfeed.proxy.state.store_retry import SaveKeeper
from crossfeed.translators.errors import InvalidRequest
from tests.support.items import ASSISTANT, BARE, CALL, REASONING, USER


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__(StoreConfig(backend="memory"))
        self.item_reads: list[tuple[str, str | None]] = []
        self.down = False

    async def get_by_item(self, item_id: str, owner: str | None) -> StoredResponse | None:
        if self.down:
            raise StoreError("down", backend="memory")
        self.item_reads.append((item_id, owner))
        return await super().get_by_item(item_id, owner)


def record(rid: str, owner: str | None, output: list[dict[str, Any]], items: list[dict[str, Any]]) -> StoredResponse:
    return StoredResponse(rid, 1, {"id": rid, "status": "completed", "output": output}, items, owner=owner)


@pytest.fixture
async def app() -> web.Application:
    app = web.Application()
    app[STORE] = CountingStore()
    app[SAVING] = {}
    app[METRICS] = Metrics()
    app[KEEPER] = SaveKeeper(app[STORE], StoreConfig(backend="memory"), app[METRICS])
    first_in = {
        "id": "msg_u1",
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "I am Ann."}],
    }
    await app[STORE].save(record("resp_1", "alice", [ASSISTANT], [first_in]))
    await app[STORE].save(record("resp_2", "alice", [CALL], [first_in, ASSISTANT]))
    await app[STORE].save(record("resp_b", "bob", [{**ASSISTANT, "id": "msg_b1"}], []))
    return app


async def test_references_resolve_for_their_key_in_one_read(app: web.Application) -> None:
    token = KEY_NAME.set("alice")
    try:
        refs = [{"type": "item_reference", "id": "msg_u1"}, {"id": "msg_a1"}, {"type": "item_reference", "id": "fc_1"}]
        body = {"model": "m", "input": [*refs, {"type": "function_call_output", "call_id": "call_1", "output": "30"}]}
        sent = body["input"]
        await resolve_item_references(app, body)
    finally:
        KEY_NAME.reset(token)
    assert [item.get("id") for item in body["input"]] == ["msg_u1", "msg_a1", "fc_1", None]
    assert body["input"][1] == ASSISTANT and body["input"][2] == CALL
    assert sent[0] == {"type": "item_reference", "id": "msg_u1"}  # what the client sent is untouched
    # resp_2 (the newest holder of fc_1) holds the two others too: one read for three references
    assert app[STORE].item_reads == [("fc_1", "alice")]


async def test_another_keys_item_is_not_found(app: web.Application) -> None:
    for name in ("alice", None):
        token = KEY_NAME.set(name)
        try:
            with pytest.raises(InvalidRequest) as info:
                await resolve_item_references(app, {"input": [USER, {"type": "item_reference", "id": "msg_b1"}]})
        finally:
            KEY_NAME.reset(token)
        assert info.value.param == "input[1].id", name
    token = KEY_NAME.set("bob")
    try:
        body = {"input": [USER, {"type": "item_reference", "id": "msg_b1"}]}
        await resolve_item_references(app, body)
    finally:
        KEY_NAME.reset(token)
    assert body["input"][1]["id"] == "msg_b1"


async def test_no_references_no_reads(app: web.Application) -> None:
    body = {"input": [USER, ASSISTANT]}
    await resolve_item_references(app, body)
    await resolve_item_references(app, {"input": "hi"})
    assert body["input"] == [USER, ASSISTANT] and app[STORE].item_reads == []


async def test_a_store_down_is_a_503(app: web.Application) -> None:
    app[STORE].down = True
    with pytest.raises(ProxyError) as info:
        await resolve_item_references(app, {"input": [{"type": "item_reference", "id": "msg_a1"}]})
    assert info.value.status == 503 and info.value.code == "store_unavailable"
    assert app[METRICS].store_failures.labels("get")._value.get() == 1


async def test_a_save_still_finishing_is_waited_for(app: web.Application) -> None:
    """A reference to a response whose save (slow store) this process has not finished yet."""
    late = record("resp_3", None, [{**ASSISTANT, "id": "msg_late"}], [])

    async def save_later() -> None:
        await asyncio.sleep(0.05)
        await app[STORE].save(late)

    app[SAVING]["resp_3"] = asyncio.get_running_loop().create_task(save_later())
    body = {"input": [{"type": "item_reference", "id": "msg_late"}]}
    await resolve_item_references(app, body)
    assert body["input"][0]["id"] == "msg_late"
    assert [r[0] for r in app[STORE].item_reads] == ["msg_late", "msg_late"]  # missed, waited, found


# -- reasoning replayed by id only (LangChain's stream merge): filled from the store ---------------


async def test_bare_reasoning_filled_for_its_key_only(app: web.Application) -> None:
    await app[STORE].save(record("resp_r", "alice", [REASONING, CALL], [{**USER, "id": "msg_u9"}]))
    results = {}
    for name in ("alice", "bob"):
        token = KEY_NAME.set(name)
        try:
            body = {"input": [USER, BARE, CALL]}
            await resolve_item_references(app, body)
        finally:
            KEY_NAME.reset(token)
        results[name] = body["input"][1]
    assert results == {"alice": REASONING, "bob": BARE}


async def test_bare_reasoning_with_the_store_down_goes_on_as_it_came(app: web.Application) -> None:
    app[STORE].down = True
    body = {"input": [USER, BARE]}
    await resolve_item_references(app, body)  # no 503: the reasoning is filled when it can be
    assert body["input"] == [USER, BARE]
