"""Stored responses through the official SDK: previous_response_id, retrieval, listing, deletion."""

from __future__ import annotations

import asyncio

import httpx2
import openai
import pytest

from tests.fakes.upstream import FakeUpstream, JSONReply, SSEReply
from tests.support.chat_chunks import chunk
from tests.support.chat_replies import TOOLS, call_reply, json_text, text_reply
from tests.support.clients import Captured, TeeTransport, validate_captured
from tests.support.validators import validate_responses_sse


async def test_multi_turn_with_tool_calls(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, captured: list[Captured]
) -> None:
    upstream.reply(json_text("Hi Ann."), call_reply("call_9", "lookup", '{"q":"Ann"}'), text_reply("Ann is 30."))
    first = await client.responses.create(model="m", input="I am Ann.", instructions="Be brief.", stream=False)
    async with client.responses.stream(
        model="m", input="How old am I?", previous_response_id=first.id, tools=TOOLS
    ) as s:
        second = await s.get_final_response()
    call = next(o for o in second.output if o.type == "function_call")
    third = await client.responses.create(
        model="m",
        previous_response_id=second.id,
        tools=TOOLS,
        stream=True,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "30"}],
    )
    events = [e async for e in third]
    assert events[-1].type == "response.completed"
    second_msgs = upstream.requests[1].body["messages"]
    # instructions are not inherited
    assert second_msgs == [
        {"role": "user", "content": "I am Ann."},
        {"role": "assistant", "content": "Hi Ann."},
        {"role": "user", "content": "How old am I?"},
    ]
    third_msgs = upstream.requests[2].body["messages"]
    assert third_msgs[:3] == second_msgs
    assistant = third_msgs[3]
    assert assistant["role"] == "assistant" and assistant["reasoning_content"] == "I should call lookup"
    assert assistant["tool_calls"][0]["id"] == "call_9"
    assert assistant["tool_calls"][0]["function"] == {"name": "lookup", "arguments": '{"q":"Ann"}'}
    assert third_msgs[4] == {"role": "tool", "tool_call_id": "call_9", "content": "30"}
    # Both streamed turns were read through the tee and pass the strict validator.
    assert validate_captured(captured) == 2


async def test_retrieve_list_delete(client: openai.AsyncOpenAI, upstream: FakeUpstream, proxy) -> None:
    upstream.reply(json_text("one"), json_text("two"))
    first = await client.responses.create(model="m", input="a", stream=False)
    second = await client.responses.create(
        model="m", input=[{"role": "user", "content": "b"}], previous_response_id=first.id, stream=False
    )
    got = await client.responses.retrieve(second.id)
    assert got.id == second.id and got.output_text == "two"
    items = await client.responses.input_items.list(second.id, order="asc")
    texts = [i.content[0].text for i in items.data]
    assert texts == ["a", "one", "b"]
    page = await client.responses.input_items.list(second.id, order="asc", limit=1)
    assert len(page.data) == 1 and page.has_more
    page2 = await client.responses.input_items.list(second.id, order="asc", limit=5, after=page.data[0].id)
    assert [i.content[0].text for i in page2.data] == ["one", "b"]
    import aiohttp

    async with aiohttp.ClientSession() as s:
        async with s.get(f"{proxy.base_url}/responses/{second.id}?stream=true") as r:
            replay = validate_responses_sse(await r.read())
    assert replay[-1]["response"]["id"] == second.id
    await client.responses.delete(second.id)
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(second.id)
    with pytest.raises(openai.NotFoundError) as info:
        await client.responses.create(model="m", input="c", previous_response_id=second.id)
    assert info.value.body["param"] == "previous_response_id"


async def test_store_false_saves_nothing(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(json_text("x"))
    r = await client.responses.create(model="m", input="a", store=False, stream=False)
    assert r.store is False
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(r.id)


async def test_failed_response_is_stored_and_continues_without_its_output(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, captured: list[Captured]
) -> None:
    upstream.reply(SSEReply(chunk({"content": "partial"})), json_text("retry ok"))
    stream = await client.responses.create(model="m", input="q", stream=True)
    events = []
    with pytest.raises(openai.APIError, match="closed the stream before it finished"):
        async for e in stream:
            events.append(e)
    rid = events[0].response.id
    assert (await client.responses.retrieve(rid)).status == "failed"
    await client.responses.create(model="m", input="again", previous_response_id=rid, stream=False)
    assert upstream.requests[-1].body["messages"] == [
        {"role": "user", "content": "q"},
        {"role": "user", "content": "again"},
    ]
    # The failed stream the SDK read is itself valid: it ends with `response.failed`.
    assert validate_captured(captured) == 1
    failed = [c for c in captured if "text/event-stream" in c.content_type]
    assert validate_responses_sse(failed[0].raw)[-1]["type"] == "response.failed"


async def test_bad_pagination_param(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(
        JSONReply(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}],
            }
        )
    )
    r = await client.responses.create(model="m", input="a")
    with pytest.raises(openai.BadRequestError) as info:
        await client.responses.input_items.list(r.id, limit=1000)
    assert info.value.body["param"] == "limit"


async def test_store_failure_never_breaks_the_stream(upstream: FakeUpstream, tmp_path) -> None:
    """Redis down: the client still gets its whole response; the failure is counted and logged."""
    import aiohttp

    from crossfeed.proxy.runtime.config import load_config
    from tests.support.app_server import running_proxy

    cfg = load_config(
        None,
        {},
        {
            "upstream.base_url": upstream.base_url,
            "store.backend": "redis",
            "store.redis_url": "redis://127.0.0.1:9/0",
            "store.redis_timeout_seconds": 0.5,
        },
    )
    async with running_proxy(cfg) as handle:
        upstream.reply(text_reply("still delivered"))
        captured: list[Captured] = []
        http = httpx2.AsyncClient(transport=TeeTransport(captured), timeout=30)
        async with openai.AsyncOpenAI(base_url=handle.base_url, api_key="k", max_retries=0, http_client=http) as c:
            stream = await c.responses.create(model="m", input="x", stream=True)
            events = [e async for e in stream]
            assert events[-1].type == "response.completed"
            assert events[-1].response.output_text == "still delivered"
            for _ in range(50):
                async with aiohttp.ClientSession() as s:
                    async with s.get(handle.url + "/metrics") as r:
                        metrics = await r.text()
                if 'crossfeed_store_failures_total{operation="save"} 1.0' in metrics:
                    break
                await asyncio.sleep(0.1)
            assert 'crossfeed_store_failures_total{operation="save"} 1.0' in metrics
            # its save failed: this process keeps it for retry and answers from there
            assert (await c.responses.retrieve(events[-1].response.id)).output_text == "still delivered"
            with pytest.raises(openai.APIStatusError) as info:  # any other lookup says the store is down
                await c.responses.retrieve("resp_not_kept_here")
            assert info.value.status_code == 503
    # The stream delivered while the store was down passes the strict validator.
    assert validate_captured(captured) == 1


@pytest.mark.parametrize("proxy_overrides", [{"store.save_timeout_seconds": 0.2}])
async def test_a_slow_store_does_not_hold_the_answer(
    client: openai.AsyncOpenAI, proxy, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch, proxy_overrides
) -> None:
    """The terminal event waits for the save only up to save_timeout_seconds: a slower store gets
    the save finished in the background (counted as save_late), and the response is found then."""
    from crossfeed.proxy.runtime.observability import METRICS
    from crossfeed.proxy.state.store_access import STORE

    store = proxy.app[STORE]
    real_save = store.save
    release = asyncio.Event()

    async def slow_save(record):  # held until the client has its answer
        await release.wait()
        await real_save(record)

    monkeypatch.setattr(store, "save", slow_save)
    upstream.reply(text_reply("Eventually stored."))
    stream = await client.responses.create(model="m", input="hi", stream=True)
    final = [e async for e in stream][-1].response
    assert final.status == "completed" and final.output_text == "Eventually stored."
    late = proxy.app[METRICS].store_failures.labels("save_late")._value.get()
    assert late == 1
    assert await store.get(final.id) is None  # not yet: the answer did not wait for it
    release.set()
    # the save goes on in the background; a GET in this process waits for it
    assert (await client.responses.retrieve(final.id)).output_text == "Eventually stored."
    assert await store.get(final.id) is not None


async def test_assistant_phase_survives_in_the_stored_conversation(
    client: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    """``phase`` on an assistant input message (Codex and Open Responses send it) is accepted,
    dropped only on the chat request (chat has no such field), and kept in the stored items."""
    upstream.reply(
        JSONReply(
            {
                "id": "c",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [
                    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Done."}}
                ],
            }
        )
    )
    resp = await client.responses.create(
        model="m",
        input=[
            {"role": "user", "content": "Plan it."},
            {
                "type": "message",
                "role": "assistant",
                "phase": "commentary",
                "content": [{"type": "output_text", "text": "I will look first."}],
            },
            {"role": "user", "content": "Go on."},
        ],
    )
    assert resp.status == "completed"
    assert upstream.requests[-1].body["messages"][1] == {"role": "assistant", "content": "I will look first."}
    items = [i async for i in client.responses.input_items.list(resp.id)]
    assistant = next(i for i in items if getattr(i, "role", None) == "assistant")
    assert assistant.to_dict().get("phase") == "commentary"


@pytest.mark.parametrize("proxy_overrides", [{"store.save_timeout_seconds": 0}])
async def test_save_timeout_zero_never_waits_and_this_process_still_finds_it(
    client: openai.AsyncOpenAI, proxy, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch, proxy_overrides
) -> None:
    """``save_timeout_seconds = 0``: the terminal event goes out without waiting for the save (not
    counted as late: nothing waited), and a follow-up to this process waits for the save."""
    from crossfeed.proxy.runtime.observability import METRICS
    from crossfeed.proxy.state.store_access import STORE

    store = proxy.app[STORE]
    real_save = store.save
    release = asyncio.Event()

    async def slow_save(record):
        await release.wait()
        await real_save(record)

    monkeypatch.setattr(store, "save", slow_save)
    upstream.reply(text_reply("Saved afterwards."), text_reply("Continued."))
    stream = await client.responses.create(model="m", input="hi", stream=True)
    final = [e async for e in stream][-1].response
    assert final.status == "completed" and await store.get(final.id) is None
    assert proxy.app[METRICS].store_failures.labels("save_late")._value.get() == 0

    async def follow_up() -> str:
        more = await client.responses.create(model="m", input="more", previous_response_id=final.id, stream=True)
        return [e async for e in more][-1].response.output_text

    follow = asyncio.ensure_future(follow_up())
    await asyncio.sleep(0.05)
    assert not follow.done()  # it waits for the save still on its way
    release.set()
    assert await follow == "Continued."
    sent = upstream.requests[-1].body["messages"]
    assert [m["content"] for m in sent if m["role"] == "assistant"] == ["Saved afterwards."]
