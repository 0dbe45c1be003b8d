"""Background mode through the official SDK, in one process: ``background: true`` answers at once
and the run goes on without the client; ``retrieve`` polls it, ``retrieve(stream=True,
starting_after=N)`` resumes its events, ``cancel`` ends it (the upstream request is closed) and is
idempotent; what cannot be a background response is refused naming the field."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from tests.fakes.upstream import FakeUpstream, SSEReply
from tests.support.background import WORDS, held, paced
from tests.support.chat_replies import json_text, text_reply
from tests.support.validators import validate_responses_events, validate_responses_sse


async def events_of(stream: Any) -> list[dict[str, Any]]:
    return [e.model_dump(mode="json", exclude_unset=True) async for e in stream]


async def until(predicate: Any, seconds: float = 10.0) -> None:
    async with asyncio.timeout(seconds):
        while not await predicate():
            await asyncio.sleep(0.05)


@pytest.fixture
async def sdk(client: openai.AsyncOpenAI) -> AsyncIterator[openai.AsyncOpenAI]:
    yield client


async def test_a_background_create_answers_at_once_and_completes_without_the_client(
    sdk: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    reply, go = held()
    upstream.reply(reply)
    created = await sdk.responses.create(model="m", input="hi", background=True)
    assert created.background is True and created.status in ("queued", "in_progress")
    polled = await sdk.responses.retrieve(created.id)
    assert polled.status == "in_progress"  # the upstream is held half way
    go.set()

    async def done() -> bool:
        return (await sdk.responses.retrieve(created.id)).status == "completed"

    await until(done)
    final = await sdk.responses.retrieve(created.id)
    assert final.output_text == "".join(WORDS) and final.background is True
    events = await events_of(await sdk.responses.retrieve(created.id, stream=True))
    validate_responses_events(events)
    assert events[-1]["type"] == "response.completed" and events[-1]["response"]["id"] == created.id


async def test_resuming_after_n_gives_exactly_the_events_after_n_mid_run_and_after_the_end(
    sdk: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    reply, go = held()
    upstream.reply(reply)
    created = await sdk.responses.create(model="m", input="hi", background=True)

    assert len(upstream.requests) == 1 and upstream.requests[0].body["stream"] is True  # (the run is a stream)
    mid = asyncio.create_task(events_of(await sdk.responses.retrieve(created.id, stream=True, starting_after=3)))
    await asyncio.sleep(0.3)
    assert not mid.done()  # the run is held: the reader waits for live events
    go.set()
    resumed = await asyncio.wait_for(mid, 10)
    whole = await events_of(await sdk.responses.retrieve(created.id, stream=True))
    validate_responses_events(whole)
    assert [e["sequence_number"] for e in whole] == list(range(len(whole)))
    assert resumed == whole[4:]
    after_end = await events_of(await sdk.responses.retrieve(created.id, stream=True, starting_after=7))
    assert after_end == whole[8:]
    assert [e["type"] for e in after_end].count("response.completed") == 1
    last = whole[-1]["sequence_number"]
    assert await events_of(await sdk.responses.retrieve(created.id, stream=True, starting_after=last)) == []


async def test_a_streamed_background_create_is_a_reader_of_the_log_and_the_run_outlives_it(
    sdk: openai.AsyncOpenAI, upstream: FakeUpstream, captured: list[Any]
) -> None:
    upstream.reply(paced(delay=0.05))
    stream = await sdk.responses.create(model="m", input="hi", background=True, stream=True)
    seen = []
    async for event in stream:
        seen.append(event.model_dump(mode="json", exclude_unset=True))
        if len(seen) == 5:
            break  # the client leaves
    await stream.close()
    validate_responses_events(seen, require_terminal=False)
    captured.clear()  # (the cut stream is checked here, not whole at teardown)
    rid = seen[0]["response"]["id"]

    async def done() -> bool:
        return (await sdk.responses.retrieve(rid)).status == "completed"

    await until(done)
    whole = await events_of(await sdk.responses.retrieve(rid, stream=True))
    validate_responses_events(whole)
    assert whole[:5] == seen
    assert (await sdk.responses.retrieve(rid)).output_text == "".join(WORDS)


async def test_cancel_ends_the_run_cancelled_closes_the_upstream_and_is_idempotent(
    sdk: openai.AsyncOpenAI, upstream: FakeUpstream, proxy: Any
) -> None:
    reply, _ = held()  # never let go: only a cancel ends it
    upstream.reply(reply)
    created = await sdk.responses.create(model="m", input="hi", background=True)
    assert upstream.open_requests == 1
    cancelled = await sdk.responses.cancel(created.id)
    assert cancelled.status == "cancelled" and cancelled.id == created.id

    async def closed() -> bool:
        return upstream.open_requests == 0

    await until(closed, 5)
    assert upstream.cancelled == 1
    again = await sdk.responses.cancel(created.id)
    assert again.model_dump() == cancelled.model_dump()
    events = await events_of(await sdk.responses.retrieve(created.id, stream=True))
    validate_responses_events(events)
    assert events[-1]["type"] == "response.failed" and events[-1]["response"]["status"] == "cancelled"
    assert (await sdk.responses.retrieve(created.id)).status == "cancelled"

    async def counted() -> bool:  # (the run's task ends just after its terminal event is logged)
        async with aiohttp.ClientSession() as http, http.get(f"{proxy.url}/metrics") as r:
            metrics = (await r.text()).splitlines()
        return 'crossfeed_runs_total{status="cancelled"} 1.0' in metrics and "crossfeed_runs_active 0.0" in metrics

    await until(counted, 5)


async def test_cancelling_a_finished_run_answers_it_unchanged(sdk: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(text_reply("done"))
    created = await sdk.responses.create(model="m", input="hi", background=True)

    async def done() -> bool:
        return (await sdk.responses.retrieve(created.id)).status == "completed"

    await until(done)
    answered = await sdk.responses.cancel(created.id)
    assert answered.status == "completed" and answered.output_text == "done"


async def test_what_cannot_be_a_background_response_is_refused_naming_the_field(
    sdk: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await sdk.responses.create(model="m", input="hi", background=True, store=False)
    assert info.value.body["param"] == "store"  # type: ignore[index]
    assert upstream.requests == []
    upstream.reply(json_text("plain"))
    plain = await sdk.responses.create(model="m", input="hi")
    with pytest.raises(openai.BadRequestError) as info:
        await sdk.responses.cancel(plain.id)
    assert info.value.body["param"] == "response_id"  # type: ignore[index]
    assert "background=true" in info.value.message
    with pytest.raises(openai.NotFoundError):
        await sdk.responses.cancel("resp_nope")


async def test_a_backend_failing_mid_run_ends_the_resumed_reader_at_once(
    sdk: openai.AsyncOpenAI, upstream: FakeUpstream, proxy: Any
) -> None:
    upstream.reply(paced(fail=True, delay=0.02))
    created = await sdk.responses.create(model="m", input="hi", background=True)
    seen = []
    async with asyncio.timeout(10):  # the reader does not wait once the run has failed
        with pytest.raises(openai.APIError, match="backend exploded"):  # the SDK raises the error event
            async for event in await sdk.responses.retrieve(created.id, stream=True, starting_after=1):
                seen.append(event.type)
    assert seen and "response.completed" not in seen
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{proxy.base_url}/responses/{created.id}", params={"stream": "true"}) as r:
            events = validate_responses_sse(await r.read())
    assert [e["type"] for e in events][-2:] == ["error", "response.failed"]
    assert (await sdk.responses.retrieve(created.id)).status == "failed"


async def test_an_upstream_refusing_the_create_is_the_creates_own_error(
    sdk: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    from tests.fakes.upstream import JSONReply

    upstream.reply(JSONReply({"error": {"message": "no such model"}}, status=404))
    with pytest.raises(openai.APIStatusError) as info:
        await sdk.responses.create(model="m", input="hi", background=True)
    assert info.value.status_code == 404


def test_log_documents_are_the_sse_payloads() -> None:
    """(The reader frames each logged document as ``event: <type>`` + ``data: <document>``.)"""
    from crossfeed.proxy.state.runs import sse_frame

    doc = orjson.dumps({"type": "response.output_text.delta", "sequence_number": 4, "delta": "x"})
    assert sse_frame(doc) == b"event: response.output_text.delta\ndata: " + doc + b"\n\n"


async def test_a_run_is_scoped_by_inbound_key(upstream: FakeUpstream, tmp_path: Any, captured: list[Any]) -> None:
    """Another key's background response answers as an id that does not exist: GET, resumed
    stream and cancel alike; its own key reads and cancels it."""
    from crossfeed.proxy.runtime.config import load_config
    from tests.support.app_server import running_proxy
    from tests.support.clients import sdk_client

    keys = {"ALICE_KEY": "sk-alice-0f9e8d", "BOB_KEY": "sk-bob-7a6b5c"}
    config = load_config(
        None,
        {},
        {
            "upstream.base_url": upstream.base_url,
            "store.data_dir": str(tmp_path / "data"),
            "server.inbound_keys": [{"name": "alice", "key_env": "ALICE_KEY"}, {"name": "bob", "key_env": "BOB_KEY"}],
        },
    )
    reply, _ = held()
    upstream.reply(reply)
    async with running_proxy(config, dict(keys)) as handle:
        alice, bob = sdk_client(handle.base_url, captured), sdk_client(handle.base_url, captured)
        alice.api_key, bob.api_key = keys["ALICE_KEY"], keys["BOB_KEY"]
        created = await alice.responses.create(model="m", input="hi", background=True)
        for call in (
            bob.responses.retrieve(created.id),
            bob.responses.retrieve(created.id, stream=True),
            bob.responses.cancel(created.id),
        ):
            with pytest.raises(openai.NotFoundError):
                await call
        assert (await alice.responses.retrieve(created.id)).status == "in_progress"
        assert (await alice.responses.cancel(created.id)).status == "cancelled"
        await alice.close()
        await bob.close()


async def test_a_deleted_background_response_is_gone(sdk: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(text_reply("done"))
    created = await sdk.responses.create(model="m", input="hi", background=True)

    async def done() -> bool:
        return (await sdk.responses.retrieve(created.id)).status == "completed"

    await until(done)
    await sdk.responses.delete(created.id)
    for call in (sdk.responses.retrieve(created.id), sdk.responses.cancel(created.id)):
        with pytest.raises(openai.NotFoundError):
            await call


async def test_a_streamed_background_create_read_to_the_end_is_the_whole_stream(
    sdk: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    """(The stream is validated whole at teardown, as every stream the SDK reads.)"""
    upstream.reply(paced(delay=0.01))
    events = await events_of(await sdk.responses.create(model="m", input="hi", background=True, stream=True))
    assert events[0]["type"] == "response.created" and events[0]["response"]["background"] is True
    assert events[-1]["type"] == "response.completed"
    final = await sdk.responses.retrieve(events[0]["response"]["id"])
    assert final.output_text == "".join(WORDS)


async def test_a_poll_mid_run_has_the_output_items_finished_so_far(
    sdk: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    from tests.support.chat_chunks import DONE, chunk

    first = chunk({"role": "assistant", "content": None}) + chunk({"reasoning_content": "thinking it over"})
    first += chunk({"content": "The answer "})  # the reasoning item is done once the text begins
    go = asyncio.Event()
    upstream.reply(SSEReply(first + chunk({"content": "is 4."}, "stop") + DONE, holds={len(first): go}))
    created = await sdk.responses.create(model="m", input="2+2?", background=True)

    async def reasoned() -> bool:
        return bool((await sdk.responses.retrieve(created.id)).output)

    await until(reasoned)
    mid = await sdk.responses.retrieve(created.id)
    assert mid.status == "in_progress" and [item.type for item in mid.output] == ["reasoning"]
    go.set()

    async def done() -> bool:
        return (await sdk.responses.retrieve(created.id)).status == "completed"

    await until(done)
    final = await sdk.responses.retrieve(created.id)
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert final.output_text == "The answer is 4."


async def test_a_bad_cursor_is_a_400_naming_it(sdk: openai.AsyncOpenAI, upstream: FakeUpstream, proxy: Any) -> None:
    upstream.reply(text_reply("done"))
    created = await sdk.responses.create(model="m", input="hi", background=True)
    async with aiohttp.ClientSession() as http:
        url = f"{proxy.base_url}/responses/{created.id}"
        async with http.get(url, params={"stream": "true", "starting_after": "x"}) as r:
            assert r.status == 400
            assert (await r.json())["error"]["param"] == "starting_after"
