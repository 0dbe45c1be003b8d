"""item_reference input items through the official SDK: the Vercel AI SDK's default multi-turn
path (store on) replays earlier output as ``{"type": "item_reference", "id": ...}``; crossfeed
puts the stored items in their place before mapping, so the chat backend gets the conversation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from crossfeed.proxy.runtime.config import load_config
from crossfeed.translators.ids import SequentialIds
from tests.fakes.upstream import FakeUpstream
from tests.support.app_server import ProxyHandle, running_proxy
from tests.support.chat_replies import TOOLS, call_reply, json_text, text_reply
from tests.support.clients import Captured, validate_captured
from tests.support.ws import FrameRecorder, ws_url

USER = {"role": "user", "content": "I am Ann."}
ASK = {"role": "user", "content": "Who am I?"}


@pytest.mark.parametrize("proxy_overrides", [{}, {"store.backend": "memory"}], ids=["sqlite", "memory"])
async def test_a_reference_replays_the_stored_assistant_message(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, captured: list[Captured], proxy_overrides
) -> None:
    upstream.reply(json_text("Hi Ann."), text_reply("You are Ann."), json_text("Still Ann."))
    first = await client.responses.create(model="m", input=[USER], stream=False)
    assert first.output[0].type == "message"
    stream = await client.responses.create(
        model="m", stream=True, input=[USER, {"type": "item_reference", "id": first.output[0].id}, ASK]
    )
    events = [e async for e in stream]
    assert events[-1].type == "response.completed"
    assert upstream.requests[1].body["messages"] == [
        {"role": "user", "content": "I am Ann."},
        {"role": "assistant", "content": "Hi Ann."},
        {"role": "user", "content": "Who am I?"},
    ]
    # The second response keeps the item itself, not the reference: its own listing shows it.
    second = events[-1].response
    listed = (await client.responses.input_items.list(second.id, order="asc")).data
    assert [(i.type, getattr(i, "role", None)) for i in listed] == [
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
    ]
    assert listed[1].id == first.output[0].id and listed[1].content[0].text == "Hi Ann."
    # Input items stored with a response resolve too, and so does the untyped shape {"id": ...}.
    first_input = (await client.responses.input_items.list(first.id)).data[0]
    await client.responses.create(
        model="m",
        stream=False,
        input=[
            {"id": first_input.id},
            {"type": "item_reference", "id": first.output[0].id},
            {"type": "item_reference", "id": second.output[0].id},
            ASK,
        ],
    )
    assert upstream.requests[2].body["messages"] == [
        {"role": "user", "content": "I am Ann."},
        {"role": "assistant", "content": "Hi Ann.\nYou are Ann."},
        {"role": "user", "content": "Who am I?"},
    ]
    assert validate_captured(captured) == 1


async def test_references_to_reasoning_and_a_tool_call(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    """A reasoning model's turn replayed by reference, as the AI SDK does: reasoning, call, output."""
    upstream.reply(call_reply("call_9", "lookup", '{"q":"Ann"}'), json_text("Ann is 30."))
    async with client.responses.stream(model="m", input="How old is Ann?", tools=TOOLS) as s:
        first = await s.get_final_response()
    assert [o.type for o in first.output] == ["reasoning", "function_call"]
    await client.responses.create(
        model="m",
        tools=TOOLS,
        stream=False,
        input=[
            {"role": "user", "content": "How old is Ann?"},
            *({"type": "item_reference", "id": o.id} for o in first.output),
            {"type": "function_call_output", "call_id": "call_9", "output": "30"},
        ],
    )
    messages = upstream.requests[1].body["messages"]
    assert messages[1]["role"] == "assistant" and messages[1]["reasoning_content"] == "I should call lookup"
    assert messages[1]["tool_calls"][0]["id"] == "call_9"
    assert messages[1]["tool_calls"][0]["function"] == {"name": "lookup", "arguments": '{"q":"Ann"}'}
    assert messages[2] == {"role": "tool", "tool_call_id": "call_9", "content": "30"}


def bare(item_id: str) -> dict[str, Any]:
    """A reasoning item replayed by its id only, as LangChain's stream merge sends it."""
    return {"type": "reasoning", "id": item_id, "summary": [], "content": []}


def tool_turn(reasoning_id: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "How old is Ann?"},
        bare(reasoning_id),
        {"type": "function_call", "call_id": "call_9", "name": "lookup", "arguments": '{"q":"Ann"}'},
        {"type": "function_call_output", "call_id": "call_9", "output": "30"},
    ]


async def test_a_reasoning_item_sent_by_id_only_is_filled_from_the_store(
    client: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    """OpenAI fills it from its store; so does crossfeed: the backend's tool turn gets its
    reasoning, and the new response's stored input holds the item whole. An id the store does
    not hold stays as it came (nothing to send; the turn goes on)."""
    upstream.reply(call_reply("call_9", "lookup", '{"q":"Ann"}'), json_text("Ann is 30."), json_text("Ann is 30."))
    async with client.responses.stream(model="m", input="How old is Ann?", tools=TOOLS) as s:
        first = await s.get_final_response()
    reasoning = first.output[0]
    assert reasoning.type == "reasoning"
    second = await client.responses.create(model="m", tools=TOOLS, stream=False, input=tool_turn(reasoning.id))
    messages = upstream.requests[1].body["messages"]
    assert messages[1]["role"] == "assistant" and messages[1]["reasoning_content"] == "I should call lookup"
    assert messages[1]["tool_calls"][0]["id"] == "call_9"
    listed = (await client.responses.input_items.list(second.id, order="asc")).data
    assert listed[1].id == reasoning.id and listed[1].model_dump(exclude_none=True) == reasoning.model_dump(
        exclude_none=True
    )
    await client.responses.create(model="m", tools=TOOLS, stream=False, input=tool_turn("rs_unknown"))
    assert "reasoning_content" not in upstream.requests[2].body["messages"][1]


async def test_a_reasoning_item_sent_by_id_only_over_websocket(
    proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    upstream.reply(call_reply("call_9", "lookup", '{"q":"Ann"}'), text_reply("Ann is 30."))
    async with ws_frames.connect(ws_url(proxy.url)) as ws:
        first = await ws.turn(model="m", input="How old is Ann?", tools=TOOLS)
        reasoning_id = first.response["output"][0]["id"]
        done = await ws.turn(model="m", input=tool_turn(reasoning_id), tools=TOOLS)
    assert done.text == "Ann is 30."
    assert upstream.requests[1].body["messages"][1]["reasoning_content"] == "I should call lookup"
    assert ws_frames.validate() == (2, 0)


async def test_an_unknown_id_is_a_400_naming_it(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await client.responses.create(model="m", input=[USER, {"type": "item_reference", "id": "msg_nope"}])
    err = info.value.body
    assert err["param"] == "input[1].id" and err["code"] == "item_not_found" and err["type"] == "invalid_request_error"
    assert "msg_nope" in err["message"] and "previous_response_id" in err["message"]
    assert upstream.requests == []  # nothing was sent to the backend


async def test_a_deleted_response_takes_its_items_along(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(json_text("Hi Ann."))
    first = await client.responses.create(model="m", input=[USER], stream=False)
    await client.responses.delete(first.id)
    with pytest.raises(openai.BadRequestError) as info:
        await client.responses.create(model="m", input=[USER, {"type": "item_reference", "id": first.output[0].id}])
    assert info.value.body["param"] == "input[1].id"


KEYS = {"ALICE_KEY": "sk-alice-0f9e8d", "BOB_KEY": "sk-bob-7a6b5c"}


@pytest.fixture
async def scoped(upstream: FakeUpstream, tmp_path: Path) -> Any:
    config = load_config(
        None,
        {},
        {
            "upstream.base_url": upstream.base_url,
            "store.data_dir": str(tmp_path / "data"),
            "server.inbound_keys": [{"name": "alice", "key_env": "ALICE_KEY"}, {"name": "bob", "key_env": "BOB_KEY"}],
        },
    )
    async with running_proxy(config, dict(KEYS), ids=SequentialIds()) as handle:
        yield handle


async def test_another_keys_items_are_not_there(scoped: Any, upstream: FakeUpstream) -> None:
    upstream.reply(json_text("Hi Ann."), json_text("ok"))
    http = httpx2.AsyncClient(timeout=30)
    async with (
        openai.AsyncOpenAI(
            base_url=scoped.base_url, api_key=KEYS["ALICE_KEY"], max_retries=0, http_client=http
        ) as alice,
        openai.AsyncOpenAI(base_url=scoped.base_url, api_key=KEYS["BOB_KEY"], max_retries=0, http_client=http) as bob,
    ):
        first = await alice.responses.create(model="m", input=[USER], stream=False)
        ref = {"type": "item_reference", "id": first.output[0].id}
        with pytest.raises(openai.BadRequestError) as info:
            await bob.responses.create(model="m", input=[USER, ref])
        unknown = info.value.body
        assert unknown["param"] == "input[1].id" and unknown["code"] == "item_not_found"
        await alice.responses.create(model="m", input=[USER, ref], stream=False)
    assert upstream.requests[1].body["messages"][1] == {"role": "assistant", "content": "Hi Ann."}


async def test_another_keys_reasoning_is_not_filled(scoped: Any, upstream: FakeUpstream) -> None:
    upstream.reply(call_reply("call_9", "lookup", '{"q":"Ann"}'), json_text("ok"), json_text("ok"))
    http = httpx2.AsyncClient(timeout=30)
    async with (
        openai.AsyncOpenAI(
            base_url=scoped.base_url, api_key=KEYS["ALICE_KEY"], max_retries=0, http_client=http
        ) as alice,
        openai.AsyncOpenAI(base_url=scoped.base_url, api_key=KEYS["BOB_KEY"], max_retries=0, http_client=http) as bob,
    ):
        async with alice.responses.stream(model="m", input="How old is Ann?", tools=TOOLS) as s:
            first = await s.get_final_response()
        await bob.responses.create(model="m", tools=TOOLS, stream=False, input=tool_turn(first.output[0].id))
        await alice.responses.create(model="m", tools=TOOLS, stream=False, input=tool_turn(first.output[0].id))
    assert "reasoning_content" not in upstream.requests[1].body["messages"][1]
    assert upstream.requests[2].body["messages"][1]["reasoning_content"] == "I should call lookup"
