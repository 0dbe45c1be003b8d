"""item_reference input items: finding and replacing them (translators/forward/input.py, pure)
and the proxy's lookup in the store by item id, scoped by key (proxy/state/history.py)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from aiohttp import web

from crossfeed.proxy.errors import ProxyError
from crossfeed.proxy.runtime.guard import KEY_NAME
from crossfeed.proxy.runtime.observability import METRICS, Metrics
from crossfeed.proxy.runtime.store_config import StoreConfig
from crossfeed.proxy.state.history import KEEPER, SAVING, STORE, resolve_item_references
from crossfeed.proxy.state.store.base import StoredResponse, StoreError
from crossfeed.proxy.state.store.memory import MemoryStore
from crossfeed.proxy.state.store_retry import SaveKeeper
from crossfeed.translators.errors import InvalidRequest, UnsupportedFeature
from crossfeed.translators.forward.input import (
    bare_reasoning,
    fill_reasoning,
    is_item_reference,
    item_references,
    resolve_references,
)
from crossfeed.translators.forward.request import responses_request_to_chat
from crossfeed.translators.options import BackendProfile

ASSISTANT = {
    "id": "msg_a1",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Hi Ann.", "annotations": []}],
}
CALL = {
    "id": "fc_1",
    "type": "function_call",
    "call_id": "call_1",
    "name": "lookup",
    "arguments": "{}",
    "status": "completed",
}
USER = {"role": "user", "content": "I am Ann."}


# -- pure: finding and replacing ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ({"type": "item_reference", "id": "msg_1"}, True),
        ({"id": "msg_1"}, True),
        ({"id": "msg_1", "type": None}, True),
        ({"type": "item_reference"}, True),  # a reference without its id: found, then a 400
        ({"id": "msg_1", "role": "user", "content": "x"}, False),
        ({"id": "msg_1", "content": "x"}, False),
        (CALL, False),
        ("msg_1", False),
    ],
)
def test_is_item_reference(item: Any, expected: bool) -> None:
    assert is_item_reference(item) is expected


def test_item_references_positions() -> None:
    inp = [USER, {"type": "item_reference", "id": "msg_a1"}, {"role": "user", "content": "x"}, {"id": "fc_1"}]
    assert item_references(inp) == [(1, "msg_a1"), (3, "fc_1")]
    assert item_references("hello") == [] and item_references(None) == [] and item_references([USER]) == []


@pytest.mark.parametrize(
    ("ref", "code"),
    [
        ({"type": "item_reference"}, "missing_required_parameter"),
        ({"type": "item_reference", "id": ""}, "missing_required_parameter"),
        ({"type": "item_reference", "id": 7}, "invalid_type"),
        ({"id": ["msg_1"]}, "invalid_type"),
    ],
)
def test_a_bad_id_names_input_i_id(ref: dict[str, Any], code: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        item_references([USER, ref])
    assert (info.value.param, info.value.code, info.value.http_status) == ("input[1].id", code, 400)


def test_resolve_replaces_references_in_a_copy() -> None:
    inp = [USER, {"type": "item_reference", "id": "msg_a1"}, {"id": "msg_a1"}, {"role": "user", "content": "x"}]
    before = copy.deepcopy(inp)
    found = {"msg_a1": ASSISTANT}
    out = resolve_references(inp, found)
    assert out == [USER, ASSISTANT, ASSISTANT, {"role": "user", "content": "x"}]
    assert inp == before  # the client's input is not changed
    out[1]["status"] = "mutated"
    assert ASSISTANT["status"] == "completed" and out[2]["status"] == "completed"  # each a copy


def test_an_unknown_id_is_a_400_saying_what_to_send() -> None:
    inp = [USER, {"type": "item_reference", "id": "msg_a1"}, {"type": "item_reference", "id": "msg_gone"}]
    with pytest.raises(InvalidRequest) as info:
        resolve_references(inp, {"msg_a1": ASSISTANT})
    err = info.value
    assert (err.param, err.code, err.http_status) == ("input[2].id", "item_not_found", 400)
    assert "msg_gone" in err.message
    assert "item itself" in err.message and "previous_response_id" in err.message


def test_resolved_items_map_like_the_items_themselves() -> None:
    profile = BackendProfile()
    sent = {"model": "m", "input": [USER, ASSISTANT, {"role": "user", "content": "Who am I?"}]}
    refs = {
        "model": "m",
        "input": [USER, {"type": "item_reference", "id": "msg_a1"}, {"role": "user", "content": "Who am I?"}],
    }
    resolved = {**refs, "input": resolve_references(refs["input"], {"msg_a1": ASSISTANT})}
    chat = responses_request_to_chat(resolved, profile).chat
    assert chat == responses_request_to_chat(sent, profile).chat
    assert chat["messages"][1] == {"role": "assistant", "content": "Hi Ann."}
    with pytest.raises(UnsupportedFeature) as info:  # never resolved: the mapper refuses it
        responses_request_to_chat(refs, profile)
    assert info.value.param == "input[1]" and "previous_response_id" in info.value.message


# -- proxy: the lookup ----------------------------------------------------------------------------


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

REASONING = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [],
    "content": [{"type": "reasoning_text", "text": "Ann is in the table."}],
}
BARE = {"type": "reasoning", "id": "rs_1", "summary": [], "content": []}


def test_bare_reasoning_is_a_reasoning_item_with_nothing_but_its_id() -> None:
    inp = [
        USER,
        BARE,
        {"type": "reasoning", "id": "rs_2"},
        {**BARE, "id": "rs_3", "encrypted_content": "x"},
        REASONING,
        {"type": "reasoning", "summary": []},
    ]
    assert bare_reasoning(inp) == [(1, "rs_1"), (2, "rs_2")]
    assert bare_reasoning("hi") == []
    filled = fill_reasoning(inp, {"rs_1": REASONING, "rs_2": ASSISTANT})  # a non-reasoning item is not put there
    assert filled[1] == REASONING and filled[1] is not REASONING and filled[2] == inp[2] and inp[1] == BARE


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
