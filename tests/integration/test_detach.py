"""``[runs] detach_on_disconnect``: a streamed stored create outlives its client and is resumed
with ``retrieve(id, stream=True, starting_after=N)``; an identical resend joins the first turn's
run (the backend sees one request). Off, the plain streamed path keeps nothing of the kind."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import openai
import pytest

from crossfeed.proxy.state.runs import LIVE
from crossfeed.proxy.state.store_access import STORE
from tests.fakes.upstream import FakeUpstream
from tests.support.app_server import ProxyHandle
from tests.support.background import WORDS, held, paced
from tests.support.chat_replies import json_text, text_reply
from tests.support.validators import validate_responses_events

DETACHED = {"runs.detach_on_disconnect": True}


async def events_of(stream: Any) -> list[dict[str, Any]]:
    return [e.model_dump(mode="json", exclude_unset=True) async for e in stream]


async def first_events(stream: Any, n: int) -> list[dict[str, Any]]:
    """The first ``n`` events, then the client leaves."""
    seen = []
    async for event in stream:
        seen.append(event.model_dump(mode="json", exclude_unset=True))
        if len(seen) == n:
            break
    await stream.close()
    return seen


async def until_done(sdk: openai.AsyncOpenAI, rid: str) -> None:
    async with asyncio.timeout(10):
        while (await sdk.responses.retrieve(rid)).status != "completed":
            await asyncio.sleep(0.05)


async def test_off_by_default_a_streamed_turn_keeps_no_run(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, proxy: ProxyHandle
) -> None:
    upstream.reply(text_reply("plain"))
    events = await events_of(await client.responses.create(model="m", input="hi", stream=True))
    rid = events[0]["response"]["id"]
    assert events[-1]["type"] == "response.completed"
    assert await proxy.app[STORE].get_run(rid) is None and proxy.app[LIVE] == {}
    assert not proxy.config.runs.detach_on_disconnect


@pytest.mark.parametrize("proxy_overrides", [DETACHED])
async def test_a_detached_turn_outlives_its_client_and_is_resumed_after_n(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, captured: list[Any]
) -> None:
    upstream.reply(paced(delay=0.02))
    seen = await first_events(await client.responses.create(model="m", input="hi", stream=True), 5)
    validate_responses_events(seen, require_terminal=False)
    captured.clear()  # (the cut stream is checked here, not whole at teardown)
    rid = seen[0]["response"]["id"]
    assert seen[0]["response"]["background"] is False
    resumed = await events_of(await client.responses.retrieve(rid, stream=True, starting_after=4))
    await until_done(client, rid)
    whole = await events_of(await client.responses.retrieve(rid, stream=True))
    validate_responses_events(whole)
    assert whole[:5] == seen and resumed == whole[5:]
    final = await client.responses.retrieve(rid)
    assert final.output_text == "".join(WORDS) and final.background is False
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("proxy_overrides", [DETACHED])
async def test_a_detached_turn_read_to_the_end_is_an_ordinary_stream(
    client: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    """(Validated whole at teardown, as every stream the SDK reads.)"""
    upstream.reply(paced(delay=0.01))
    events = await events_of(await client.responses.create(model="m", input="hi", stream=True))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed" and events[-1]["response"]["background"] is False
    upstream.reply(json_text("again"))
    rid = events[0]["response"]["id"]
    nxt = await client.responses.create(model="m", input="more", previous_response_id=rid)
    assert nxt.output_text == "again"
    sent = upstream.requests[-1].body["messages"]
    assert any("".join(WORDS) in str(m.get("content")) for m in sent)  # the detached turn was stored


@pytest.mark.parametrize("proxy_overrides", [DETACHED])
async def test_an_identical_resend_joins_the_running_turn_and_the_backend_sees_one_request(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, captured: list[Any], proxy: ProxyHandle
) -> None:
    reply, go = held()
    upstream.reply(reply)
    turn = {"model": "m", "input": [{"role": "user", "content": "hi"}], "instructions": "be brief"}
    seen = await first_events(await client.responses.create(**turn, stream=True), 3)
    captured.clear()
    rid = seen[0]["response"]["id"]
    resend = asyncio.create_task(events_of(await client.responses.create(**turn, stream=True)))
    await asyncio.sleep(0.2)
    go.set()
    joined = await asyncio.wait_for(resend, 10)
    validate_responses_events(joined)
    assert joined[0]["response"]["id"] == rid and joined[:3] == seen
    assert len(upstream.requests) == 1
    await until_done(client, rid)
    again = await events_of(await client.responses.create(**turn, stream=True))
    assert again == joined and len(upstream.requests) == 1  # just finished: still joined
    upstream.reply(text_reply("other"))
    other = await events_of(await client.responses.create(**{**turn, "input": "else"}, stream=True))
    assert other[0]["response"]["id"] != rid and len(upstream.requests) == 2
    wanted = {
        "crossfeed_runs_active 0.0",
        'crossfeed_runs_total{status="completed"} 2.0',
        "crossfeed_runs_joined_total 2.0",
    }
    async with asyncio.timeout(5), aiohttp.ClientSession() as http:  # (a run's task ends just after its last event)
        while True:
            async with http.get(f"{proxy.url}/metrics") as r:
                if wanted <= set((await r.text()).splitlines()):
                    break
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("proxy_overrides", [DETACHED])
async def test_a_resend_before_the_first_turn_began_waits_for_it(
    client: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    from tests.fakes.upstream import SSEReply

    go = asyncio.Event()
    body = paced(delay=0.0).data
    upstream.reply(SSEReply(body, holds={0: go}))  # the backend answers nothing yet
    first = asyncio.create_task(events_of(await client.responses.create(model="m", input="hi", stream=True)))
    await asyncio.sleep(0.2)
    second = asyncio.create_task(events_of(await client.responses.create(model="m", input="hi", stream=True)))
    await asyncio.sleep(0.2)
    go.set()
    a, b = await asyncio.wait_for(asyncio.gather(first, second), 10)
    assert a == b and len(upstream.requests) == 1


@pytest.mark.parametrize("proxy_overrides", [DETACHED])
async def test_a_failed_turn_is_not_joined(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(paced(fail=True, delay=0.0))
    with pytest.raises(openai.APIError):
        await events_of(await client.responses.create(model="m", input="hi", stream=True))
    upstream.reply(text_reply("fresh"))
    events = await events_of(await client.responses.create(model="m", input="hi", stream=True))
    assert events[-1]["type"] == "response.completed" and len(upstream.requests) == 2


@pytest.mark.parametrize("proxy_overrides", [DETACHED])
async def test_a_detached_turn_cannot_be_cancelled_as_a_background_one(
    client: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    upstream.reply(text_reply("done"))
    events = await events_of(await client.responses.create(model="m", input="hi", stream=True))
    with pytest.raises(openai.BadRequestError) as info:
        await client.responses.cancel(events[0]["response"]["id"])
    assert "background=true" in info.value.message


async def test_a_resend_to_another_process_on_the_same_store_joins_and_another_key_does_not(
    upstream: FakeUpstream, tmp_path: Any, captured: list[Any]
) -> None:
    """Two instances on one SQLite file: the resend reaching the other one joins the turn from
    the store (its log, not this process's memory); another inbound key's identical turn runs."""
    from tests.support.app_server import running_proxy
    from tests.support.clients import sdk_client

    keys = {"ALICE_KEY": "sk-alice-0f9e8d", "BOB_KEY": "sk-bob-7a6b5c"}
    settings = {
        "upstream.base_url": upstream.base_url,
        "store.data_dir": str(tmp_path / "data"),
        "runs.detach_on_disconnect": True,
        "server.inbound_keys": [{"name": "alice", "key_env": "ALICE_KEY"}, {"name": "bob", "key_env": "BOB_KEY"}],
    }
    reply, go = held()
    upstream.reply(reply)
    async with running_proxy(settings, dict(keys)) as one, running_proxy(settings, dict(keys)) as two:
        first, second = sdk_client(one.base_url, captured), sdk_client(two.base_url, captured)
        bob = sdk_client(two.base_url, captured)
        first.api_key = second.api_key = keys["ALICE_KEY"]
        bob.api_key = keys["BOB_KEY"]
        seen = await first_events(await first.responses.create(model="m", input="hi", stream=True), 3)
        captured.clear()
        joined = asyncio.create_task(events_of(await second.responses.create(model="m", input="hi", stream=True)))
        await asyncio.sleep(0.3)
        assert not joined.done() and two.app[LIVE] == {}  # a reader of one's run, from the store
        go.set()
        events = await asyncio.wait_for(joined, 10)
        validate_responses_events(events)
        assert events[:3] == seen and len(upstream.requests) == 1
        upstream.reply(text_reply("bob's own"))
        own = await events_of(await bob.responses.create(model="m", input="hi", stream=True))
        assert own[0]["response"]["id"] != seen[0]["response"]["id"] and len(upstream.requests) == 2
        for c in (first, second, bob):
            await c.close()


@pytest.mark.parametrize("proxy_overrides", [DETACHED])
async def test_a_backend_refusing_the_turn_is_its_own_error_and_the_resend_runs(
    client: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    from tests.fakes.upstream import JSONReply

    upstream.reply(JSONReply({"error": {"message": "no such model"}}, status=404))
    with pytest.raises(openai.APIStatusError) as info:
        await client.responses.create(model="m", input="hi", stream=True)
    assert info.value.status_code == 404
    upstream.reply(text_reply("now"))
    events = await events_of(await client.responses.create(model="m", input="hi", stream=True))
    assert events[-1]["type"] == "response.completed" and len(upstream.requests) == 2


@pytest.mark.parametrize("proxy_overrides", [{**DETACHED, "runs.join_seconds": 1}])
async def test_a_running_turn_is_joined_however_long_it_runs_and_an_ended_one_for_join_seconds(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, captured: list[Any]
) -> None:
    reply, go = held()
    upstream.reply(reply)
    seen = await first_events(await client.responses.create(model="m", input="hi", stream=True), 3)
    captured.clear()
    await asyncio.sleep(1.5)  # past join_seconds, still running
    joined = asyncio.create_task(events_of(await client.responses.create(model="m", input="hi", stream=True)))
    await asyncio.sleep(0.1)
    go.set()
    assert (await asyncio.wait_for(joined, 10))[:3] == seen and len(upstream.requests) == 1
    await asyncio.sleep(1.5)  # past join_seconds after its end
    upstream.reply(text_reply("fresh"))
    fresh = await events_of(await client.responses.create(model="m", input="hi", stream=True))
    assert fresh[0]["response"]["id"] != seen[0]["response"]["id"] and len(upstream.requests) == 2
