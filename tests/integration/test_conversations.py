"""The Conversations API through the official SDK, on crossfeed's store (SQLite here; the same
record kind on Redis in tests/store), and ``conversation`` on ``responses.create``:

- create with items and metadata, retrieve, update, items list (pages, order, after) / create /
  retrieve / delete, delete; another key's conversation is not found, a response id is no
  conversation and a conversation id is no response;
- a create with ``conversation`` has its items as history and appends its input and output when
  it completes (``store: false`` too, streamed and not); with ``previous_response_id``: 400
  naming ``conversation``; an unknown one: 404 naming it;
- the Agents SDK's ``OpenAIConversationsSession`` across two ``Runner.run`` calls: the second run's
  backend request carries the first run's exchange.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from agents import Agent, OpenAIConversationsSession, OpenAIResponsesModel, RunConfig, Runner, set_tracing_disabled

from tests.fakes.upstream import FakeUpstream, Recorded, SSEReply
from tests.support.app_server import running_proxy
from tests.support.chat_chunks import DONE, chunk
from tests.support.chat_replies import json_text

pytestmark = pytest.mark.timeout(60)


def said(text: str) -> SSEReply:
    return SSEReply(chunk({"role": "assistant", "content": ""}) + chunk({"content": text}, "stop", usage=(7, 3)) + DONE)


said_json = json_text


def contents(req: Recorded) -> list[tuple[str, str]]:
    out = []
    for m in req.body["messages"]:
        c = m.get("content")
        text = c if isinstance(c, str) else "".join(p.get("text", "") for p in c or ())
        out.append((m["role"], text))
    return out


async def test_conversation_endpoints(client: openai.AsyncOpenAI) -> None:
    conv = await client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "I am Ada."}], metadata={"topic": "intro"}
    )
    assert conv.id.startswith("conv_") and conv.object == "conversation" and conv.metadata == {"topic": "intro"}
    again = await client.conversations.retrieve(conv.id)
    assert again.id == conv.id and again.created_at == conv.created_at
    updated = await client.conversations.update(conv.id, metadata={"topic": "greetings"})
    assert updated.metadata == {"topic": "greetings"}
    added = await client.conversations.items.create(
        conv.id,
        items=[
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello Ada."}]},
            {"type": "message", "role": "user", "content": "Bye."},
        ],
    )
    assert len(added.data) == 2
    listed = [i async for i in client.conversations.items.list(conv.id, order="asc")]
    assert [i.role for i in listed] == ["user", "assistant", "user"]  # type: ignore[union-attr]
    page = await client.conversations.items.list(conv.id, order="asc", limit=1)
    assert len(page.data) == 1 and page.has_more
    after = await client.conversations.items.list(conv.id, order="asc", after=page.data[0].id)
    assert [i.id for i in after.data] == [i.id for i in listed[1:]]
    one = await client.conversations.items.retrieve(listed[1].id, conversation_id=conv.id)
    assert one.id == listed[1].id
    left = await client.conversations.items.delete(listed[1].id, conversation_id=conv.id)
    assert left.id == conv.id
    assert [i.id async for i in client.conversations.items.list(conv.id, order="asc")] == [listed[0].id, listed[2].id]
    with pytest.raises(openai.NotFoundError):
        await client.conversations.items.retrieve(listed[1].id, conversation_id=conv.id)
    with pytest.raises(openai.BadRequestError) as bad:
        await client.conversations.create(metadata={"n": 1})  # type: ignore[dict-item]
    assert bad.value.body["param"] == "metadata"  # type: ignore[index]
    deleted = await client.conversations.delete(conv.id)
    assert deleted.deleted and deleted.id == conv.id
    with pytest.raises(openai.NotFoundError) as gone:
        await client.conversations.retrieve(conv.id)
    assert gone.value.body["param"] == "conversation_id"  # type: ignore[index]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_responses_in_a_conversation(client: openai.AsyncOpenAI, upstream: FakeUpstream, stream: bool) -> None:
    conv = await client.conversations.create(items=[{"type": "message", "role": "user", "content": "I am Ada."}])
    upstream.reply(*(said(t) if stream else said_json(t) for t in ("Hello Ada.", "You are Ada.")))

    async def ask(text: str, **more: Any) -> Any:
        if not stream:
            return await client.responses.create(model="m", input=text, conversation=conv.id, **more)
        async with client.responses.stream(model="m", input=text, conversation={"id": conv.id}, **more) as s:
            async for _ in s:
                pass
            return await s.get_final_response()

    first = await ask("Hi!")
    assert first.output_text == "Hello Ada."
    second = await ask("Who am I?", store=False)
    assert second.output_text == "You are Ada."
    assert contents(upstream.requests[1]) == [
        ("user", "I am Ada."),
        ("user", "Hi!"),
        ("assistant", "Hello Ada."),
        ("user", "Who am I?"),
    ]
    items = [i async for i in client.conversations.items.list(conv.id, order="asc")]
    texts = [(i.role, i.content[0].text) for i in items]  # type: ignore[union-attr]
    assert texts == [
        ("user", "I am Ada."),
        ("user", "Hi!"),
        ("assistant", "Hello Ada."),
        ("user", "Who am I?"),
        ("assistant", "You are Ada."),
    ]
    # the output items are the response's own
    assert items[2].id == first.output[0].id
    # a conversation is not a response, and a response not a conversation
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(conv.id)
    with pytest.raises(openai.NotFoundError):
        await client.conversations.retrieve(first.id)


async def test_conversation_errors(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    conv = await client.conversations.create()
    upstream.reply(said_json("One."))
    first = await client.responses.create(model="m", input="x", store=True)
    with pytest.raises(openai.BadRequestError) as both:
        await client.responses.create(model="m", input="y", conversation=conv.id, previous_response_id=first.id)
    assert both.value.body["param"] == "conversation"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError) as unknown:
        await client.responses.create(model="m", input="y", conversation="conv_nope")
    assert unknown.value.body["param"] == "conversation"  # type: ignore[index]
    assert len(upstream.requests) == 1  # neither reached the backend


async def test_another_key_does_not_find_it(upstream: FakeUpstream, tmp_path: Any) -> None:
    settings = {
        "upstream.base_url": upstream.base_url,
        "store.data_dir": str(tmp_path / "data"),
        "server.inbound_keys_env": "CF_CONV_KEYS",
    }
    async with running_proxy(settings, environ={"CF_CONV_KEYS": "sk-conv-one,sk-conv-two"}) as handle:
        one = openai.AsyncOpenAI(base_url=handle.base_url, api_key="sk-conv-one", max_retries=0)
        two = openai.AsyncOpenAI(base_url=handle.base_url, api_key="sk-conv-two", max_retries=0)
        conv = await one.conversations.create(metadata={"k": "v"})
        assert (await one.conversations.retrieve(conv.id)).metadata == {"k": "v"}
        for call in (
            two.conversations.retrieve(conv.id),
            two.conversations.items.list(conv.id),
            two.conversations.delete(conv.id),
            two.responses.create(model="m", input="x", conversation=conv.id),
        ):
            with pytest.raises(openai.NotFoundError):
                await call
        assert (await one.conversations.retrieve(conv.id)).id == conv.id


async def test_agents_sdk_conversations_session(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    set_tracing_disabled(True)
    agent = Agent(name="memory", instructions="Be brief.", model=OpenAIResponsesModel(model="m", openai_client=client))
    session = OpenAIConversationsSession(openai_client=client)
    upstream.reply(said_json("Nice to meet you, Ada."), said_json("Your name is Ada."))
    config = RunConfig(tracing_disabled=True)
    first = await Runner.run(agent, "My name is Ada.", session=session, run_config=config)
    assert first.final_output == "Nice to meet you, Ada."
    second = await Runner.run(agent, "What is my name?", session=session, run_config=config)
    assert second.final_output == "Your name is Ada."
    sent = contents(upstream.requests[-1])
    assert ("user", "My name is Ada.") in sent and ("assistant", "Nice to meet you, Ada.") in sent
    assert sent[-1] == ("user", "What is my name?")
    conv_id = await session._get_session_id()
    stored = [i async for i in client.conversations.items.list(conv_id, order="asc")]
    assert len(stored) == 4  # both runs' input and output, added by the session
