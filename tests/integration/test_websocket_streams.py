"""Several responses on one socket (``stream_id`` lanes), ``response.cancel`` and ``response.steer``,
through the official Python SDK's ``client.responses.connect()`` (proxy/http/ws_streams.py).

Every frame is recorded and validated at teardown (tests/support/ws.py): each lane's responses
separately through the strict stream validator, every frame of a lane and every steering event
against the SDK's own pydantic models (``ResponsesServerEvent``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from crossfeed.translators.ids import SequentialIds
from tests.fakes.search import FakeSearch
from tests.fakes.upstream import FakeUpstream, Recorded, SSEReply
from tests.support.app_server import ProxyHandle, running_proxy
from tests.support.chat_chunks import DONE, chunk
from tests.support.waiting import wait_until
from tests.support.ws import SDKWS, FrameRecorder
from tests.support.ws_replies import MODEL, TOOLS, plain, text_reply, tool_reply

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def sdk(proxy: ProxyHandle, ws_frames: FrameRecorder) -> AsyncIterator[Callable[..., Any]]:
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="sk-test-client", max_retries=0)

    @contextlib.asynccontextmanager
    async def connect(label: str = "sdk") -> AsyncIterator[SDKWS]:
        async with client.responses.connect() as conn:
            yield ws_frames.attach(conn, label)

    yield connect
    await client.close()


def held(reply: SSEReply, at: int | None = None) -> tuple[SSEReply, asyncio.Event]:
    """``reply`` stopping after ``at`` bytes (default: half) until the event is set."""
    gate = asyncio.Event()
    reply.holds[at if at is not None else len(reply.data) // 2] = gate
    return reply, gate


def frame_end(reply: SSEReply, frames: int) -> int:
    """The byte offset right after the first ``frames`` SSE frames of ``reply``."""
    return sum(len(f) + 2 for f in reply.data.split(b"\n\n")[:frames])


def by_input(replies: dict[str, SSEReply]) -> Callable[[Recorded], SSEReply]:
    """A fake model answering each request by the text of its last user message."""

    def reply(req: Recorded) -> SSEReply:
        last = [m for m in req.body["messages"] if m["role"] == "user"][-1]["content"]
        return replies[last if isinstance(last, str) else last[0]["text"]]

    return reply


async def until(ws: SDKWS, done: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """Frames up to (and with) the first one ``done`` says yes to."""
    frames = []
    while True:
        await ws.recv()
        frames.append(ws.log.frames[-1])
        if done(frames[-1]):
            return frames


def terminal(stream_id: str | None = None) -> Callable[[dict[str, Any]], bool]:
    kinds = {"response.completed", "response.failed", "response.incomplete"}
    return lambda f: f["type"] in kinds and f.get("stream_id") == stream_id


def text_of(frames: list[dict[str, Any]], stream_id: str | None) -> str:
    return "".join(
        f["delta"] for f in frames if f["type"] == "response.output_text.delta" and f.get("stream_id") == stream_id
    )


async def test_two_responses_at_once_on_one_socket(
    sdk: Callable[..., Any], upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    a, gate_a = held(text_reply("Alpha ", "one, ", "alpha ", "two."))
    b, gate_b = held(text_reply("Beta ", "one, ", "beta ", "two."))
    upstream.default = by_input({"first": a, "second": b})
    async with sdk() as ws:
        await ws.conn.response.create(model=MODEL, input="first", stream_id="lane-a")
        await ws.conn.response.create(model=MODEL, input="second", stream_id="lane-b")
        frames = await until(ws, lambda f: f["type"] == "response.created")
        frames += await until(ws, lambda f: f["type"] == "response.created")
        assert {f["stream_id"] for f in frames} == {"lane-a", "lane-b"}  # both began: neither waits
        gate_a.set()
        gate_b.set()
        frames += await until(ws, terminal("lane-a" if not any(terminal("lane-a")(f) for f in frames) else "lane-b"))
        while not (any(terminal("lane-a")(f) for f in frames) and any(terminal("lane-b")(f) for f in frames)):
            frames += await until(ws, lambda f: f["type"] == "response.completed")
    assert all("stream_id" in f for f in frames)
    lanes = [f["stream_id"] for f in frames]
    assert sum(1 for x, y in itertools.pairwise(lanes) if x != y) >= 1  # interleaved
    assert (text_of(frames, "lane-a"), text_of(frames, "lane-b")) == ("Alpha one, alpha two.", "Beta one, beta two.")
    assert len(upstream.requests) == 2
    assert ws_frames.validate() == (2, 0)


async def test_continuation_is_per_lane(
    sdk: Callable[..., Any], upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    upstream.default = by_input(
        {"I am Ada.": text_reply("Hi Ada."), "I am Bob.": text_reply("Hi Bob."), "Who am I?": text_reply("You said.")}
    )
    async with sdk() as ws:
        ids = {}
        for lane, text in (("a", "I am Ada."), ("b", "I am Bob.")):
            await ws.conn.response.create(model=MODEL, input=text, store=False, stream_id=lane)
            ids[lane] = (await until(ws, terminal(lane)))[-1]["response"]["id"]
        for lane in ("b", "a"):
            await ws.conn.response.create(
                model=MODEL, input="Who am I?", store=False, stream_id=lane, previous_response_id=ids[lane]
            )
            await until(ws, terminal(lane))
    assert plain(upstream.requests[2].body["messages"]) == [
        ("user", "I am Bob."),
        ("assistant", "Hi Bob."),
        ("user", "Who am I?"),
    ]
    assert plain(upstream.requests[3].body["messages"])[0] == ("user", "I am Ada.")
    assert ws_frames.validate() == (4, 0)


@pytest.mark.parametrize("proxy_overrides", [{"server.websocket_max_streams": 2}])
async def test_over_the_bound_a_create_gets_an_error_frame_naming_it(
    sdk: Callable[..., Any], upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    a, gate_a = held(text_reply("A."))
    b, gate_b = held(text_reply("B."))
    upstream.default = by_input({"a": a, "b": b})
    async with sdk() as ws:
        for lane in ("a", "b", "c"):
            await ws.conn.response.create(model=MODEL, input=lane, stream_id=lane)
        frames = await until(ws, lambda f: f["type"] == "error")
        refused = frames[-1]
        assert refused["stream_id"] == "c" and refused["status"] == 429
        assert refused["error"]["code"] == "websocket_stream_limit_reached"
        assert "websocket_max_streams" in refused["error"]["message"] and "(2)" in refused["error"]["message"]
        gate_a.set()
        gate_b.set()
        frames += await until(ws, terminal("a") if not any(terminal("a")(f) for f in frames) else terminal("b"))
        while sum(1 for f in frames if f["type"] == "response.completed") < 2:
            frames += await until(ws, lambda f: f["type"] == "response.completed")
    assert len(upstream.requests) == 2
    assert ws_frames.validate() == (2, 1)


async def test_cancel_ends_one_response_and_closes_its_upstream_request(
    sdk: Callable[..., Any], upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    doomed, _ = held(text_reply("This ", "will ", "never ", "end."))
    fine, gate = held(text_reply("This ", "one ", "completes."))
    upstream.default = by_input({"stop me": doomed, "keep me": fine})
    async with sdk() as ws:
        await ws.conn.response.create(model=MODEL, input="stop me", stream_id="x")
        await ws.conn.response.create(model=MODEL, input="keep me", stream_id="y")
        frames = await until(ws, lambda f: f["type"] == "response.created" and f["stream_id"] == "x")
        rid = next(f["response"]["id"] for f in frames if f["type"] == "response.created" and f["stream_id"] == "x")
        await ws.conn.send_raw(orjson.dumps({"type": "response.cancel", "response_id": rid}).decode())
        frames += await until(ws, terminal("x"))
        cancelled = frames[-1]
        assert cancelled["type"] == "response.failed" and cancelled["response"]["status"] == "cancelled"
        assert cancelled["response"]["error"] is None
        assert await wait_until(lambda: upstream.cancelled == 1, 5)
        gate.set()
        frames += await until(ws, terminal("y"))
        assert frames[-1]["type"] == "response.completed" and text_of(frames, "y") == "This one completes."
        # cancelling it again: it is over
        await ws.conn.send_raw(orjson.dumps({"type": "response.cancel", "response_id": rid}).decode())
        again = (await until(ws, lambda f: f["type"] == "error"))[-1]
    assert (
        again["status"] == 404 and again["error"]["code"] == "response_not_found" and rid in again["error"]["message"]
    )
    assert not any(f["type"] == "error" and "sequence_number" in f for f in frames)  # no error event: a cancel
    assert ws_frames.validate() == (2, 1)


async def test_steer_without_a_lane_becomes_a_successor_response(
    sdk: Callable[..., Any], upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    # The steer comes after the backend's finish_reason (on the last text chunk): the answer is
    # over, so it completes and the successor follows (no early end).
    body = chunk({"role": "assistant", "content": ""}) + chunk({"content": "Paris "}) + chunk({"content": "is "})
    body += chunk({"content": "big."}, "stop") + chunk(None, usage=(11, 4)) + DONE
    reply = SSEReply(body, seed=1, max_piece=17)
    first, gate = held(reply, frame_end(reply, 4))
    upstream.reply(first, text_reply("Lyon ", "too."))
    async with sdk() as ws:
        await ws.conn.response.create(model=MODEL, input="Tell me about Paris", store=False)
        frames = await until(ws, lambda f: f["type"] == "response.output_text.delta" and f["delta"] == "big.")
        rid = frames[0]["response"]["id"]
        await ws.conn.response.steer(input="Mention Lyon as well", previous_response_id=rid)
        accepted = (await until(ws, lambda f: f["type"].startswith("response.steer.")))[-1]
        assert accepted["type"] == "response.steer.accepted" and accepted["steer"]["previous_response_id"] == rid
        gate.set()
        await until(ws, terminal())
        successor = await until(ws, terminal())
    created = successor[0]["response"]
    assert successor[0]["type"] == "response.created" and created["previous_response_id"] == rid
    assert plain(upstream.requests[1].body["messages"]) == [
        ("user", "Tell me about Paris"),
        ("assistant", "Paris is big."),
        ("user", "Mention Lyon as well"),
    ]
    assert ws_frames.validate() == (2, 0)


async def test_steer_is_pending_while_the_client_runs_its_tool(
    sdk: Callable[..., Any], upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    reply = tool_reply("call_1", "get_weather", {"city": "Bern"})
    call, gate = held(reply, frame_end(reply, 3))  # inside the call's arguments
    upstream.reply(call, text_reply("Sunny; and in Celsius."))
    async with sdk() as ws:
        await ws.conn.response.create(model=MODEL, input="Weather in Bern?", tools=TOOLS, stream_id="w")
        frames = await until(ws, lambda f: f["type"] == "response.function_call_arguments.delta")
        rid = frames[0]["response"]["id"]
        await ws.conn.response.steer(input="Use Celsius", previous_response_id=rid)
        await until(ws, lambda f: f["type"] == "response.steer.accepted")
        gate.set()
        await until(ws, terminal("w"))
        pending = (await until(ws, lambda f: f["type"].startswith("response.steer.")))[-1]
        assert pending["type"] == "response.steer.pending" and pending["stream_id"] == "w"
        assert pending["reason"] == "waiting_for_required_input"
        assert pending["required_input"] == [
            {"type": "function_call_output", "call_id": "call_1", "name": "get_weather"}
        ]
        output = {"type": "function_call_output", "call_id": "call_1", "output": "21 C"}
        await ws.conn.response.create(model=MODEL, input=[output], tools=TOOLS, stream_id="w", previous_response_id=rid)
        await until(ws, terminal("w"))
    msgs = upstream.requests[1].body["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "user"]
    assert msgs[3]["content"] in ("Use Celsius", [{"type": "text", "text": "Use Celsius"}])
    assert ws_frames.validate() == (2, 0)


async def test_steer_fails_with_its_input_when_it_cannot_be_applied(
    sdk: Callable[..., Any], upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    upstream.reply(text_reply("Done."))
    async with sdk() as ws:
        await ws.conn.response.create(model=MODEL, input="hi")
        rid = (await until(ws, terminal()))[-1]["response"]["id"]
        await ws.conn.response.steer(input="too late", previous_response_id=rid)
        late = (await until(ws, lambda f: f["type"] == "response.steer.failed"))[-1]
        await ws.conn.response.steer(input=[{"role": "user", "content": "who?"}], previous_response_id="resp_nope")
        unknown = (await until(ws, lambda f: f["type"] == "response.steer.failed"))[-1]
    assert late["error"]["code"] == "response_already_completed"
    assert late["steer"] == {"previous_response_id": rid, "input": "too late"}
    assert unknown["error"]["code"] == "response_not_found"
    assert unknown["steer"]["input"] == [{"type": "message", "role": "user", "content": "who?"}]
    assert ws_frames.validate() == (1, 0)


async def test_steer_is_applied_after_a_hosted_search_round(
    upstream: FakeUpstream, ws_frames: FrameRecorder, tmp_path: Any
) -> None:
    search = FakeSearch(pages={"*": [("https://blog.rust-lang.org/", "Rust 1.80", "LazyCell is stable.")]})
    await search.start()
    try:
        overrides = {
            "upstream.base_url": upstream.base_url,
            "store.data_dir": str(tmp_path / "data"),
            "web_search.backend": "searxng",
            "web_search.url": search.url,
        }
        async with running_proxy(overrides, ids=SequentialIds()) as proxy:
            search_call = {"index": 0, "id": "call_s", "type": "function"}
            search_call["function"] = {"name": "web_search", "arguments": '{"query": "rust 1.80"}'}
            calls = chunk({"role": "assistant", "content": ""}) + chunk({"tool_calls": [search_call]})
            searching, gate = held(SSEReply(calls + chunk({}, "tool_calls") + DONE, max_piece=29))
            upstream.reply(searching, text_reply("Rust 1.80, ", "briefly."))
            client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="sk-test-client", max_retries=0)
            async with client.responses.connect() as conn:
                ws = ws_frames.attach(conn)
                await conn.response.create(model=MODEL, input="What is new in Rust?", tools=[{"type": "web_search"}])
                rid = (await until(ws, lambda f: f["type"] == "response.created"))[-1]["response"]["id"]
                await conn.response.steer(input="Keep it brief", previous_response_id=rid)
                await until(ws, lambda f: f["type"] == "response.steer.accepted")
                gate.set()
                final = (await until(ws, terminal()))[-1]["response"]
            await client.close()
    finally:
        await search.close()
    assert final["status"] == "completed"
    assert [i["type"] for i in final["output"]] == ["web_search_call", "message"]
    msgs = upstream.requests[1].body["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "user"]
    assert msgs[-1]["content"] in ("Keep it brief", [{"type": "text", "text": "Keep it brief"}])
    assert len(upstream.requests) == 2  # applied inside the Response: no successor
    assert not [f for f in ws.log.frames if f["type"] in ("response.steer.pending", "response.steer.failed")]
    assert ws_frames.validate() == (1, 0)


async def test_steer_ends_a_streaming_answer_at_a_safe_boundary_and_a_successor_continues(
    sdk: Callable[..., Any], upstream: FakeUpstream, ws_frames: FrameRecorder, proxy: ProxyHandle
) -> None:
    reply = text_reply("Once ", "upon ", "a ", "time.")
    first, _ = held(reply, frame_end(reply, 3))  # "Once upon " streamed; the rest never comes
    upstream.reply(first, text_reply("Lyon ", "it is."))
    async with sdk() as ws:
        await ws.conn.response.create(model=MODEL, input="Tell me a story", stream_id="s")
        frames = await until(ws, lambda f: f["type"] == "response.output_text.delta" and f["delta"] == "upon ")
        rid = frames[0]["response"]["id"]
        await ws.conn.response.steer(input="Set it in Lyon", previous_response_id=rid)
        steered = await until(ws, terminal("s"))
        successor = await until(ws, terminal("s"))
    assert [f["type"] for f in steered] == [
        "response.steer.accepted",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    final = steered[-1]["response"]
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "steered"}
    assert [(i["type"], i["status"]) for i in final["output"]] == [("message", "incomplete")]
    assert final["output"][0]["content"][0]["text"] == "Once upon "
    assert await wait_until(lambda: upstream.cancelled == 1, 5)  # its backend request was closed
    created = successor[0]
    assert created["type"] == "response.created" and created["stream_id"] == "s"
    assert created["response"]["previous_response_id"] == rid
    assert successor[-1]["type"] == "response.completed" and text_of(successor, "s") == "Lyon it is."
    assert plain(upstream.requests[1].body["messages"]) == [
        ("user", "Tell me a story"),
        ("assistant", "Once upon "),
        ("user", "Set it in Lyon"),
    ]
    async with aiohttp.ClientSession() as session:  # stored as any other response
        got = await session.get(f"{proxy.base_url}/responses/{rid}", headers={"Authorization": "Bearer sk-test-client"})
        stored = await got.json()
    assert stored["status"] == "incomplete" and stored["incomplete_details"] == {"reason": "steered"}
    assert not [f for f in ws.log.frames if f["type"] in ("response.steer.pending", "response.steer.failed")]
    assert ws_frames.validate() == (2, 0)


async def test_steer_never_cuts_a_call_but_ends_the_text_after_its_output(
    sdk: Callable[..., Any], upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    call = tool_reply("call_1", "get_weather", {"city": "Bern"})
    calling, gate = held(call, frame_end(call, 3))  # the call's arguments are streaming
    answer = text_reply("In ", "Bern ", "it is ", "21 C.")
    answering, _ = held(answer, frame_end(answer, 3))  # "In Bern " streamed
    upstream.reply(calling, answering, text_reply("Tomorrow too."))
    async with sdk() as ws:
        await ws.conn.response.create(model=MODEL, input="Weather in Bern?", tools=TOOLS, stream_id="w")
        frames = await until(ws, lambda f: f["type"] == "response.function_call_arguments.delta")
        rid = frames[0]["response"]["id"]
        await ws.conn.response.steer(input="Use Celsius", previous_response_id=rid)
        await until(ws, lambda f: f["type"] == "response.steer.accepted")
        gate.set()
        done = (await until(ws, terminal("w")))[-1]["response"]
        pending = (await until(ws, lambda f: f["type"].startswith("response.steer.")))[-1]
        # the call ran to its end, whole: the steer waits for its output
        assert done["status"] == "completed" and upstream.cancelled == 0
        assert [(i["type"], i["status"], i["arguments"]) for i in done["output"]] == [
            ("function_call", "completed", '{"city":"Bern"}')
        ]
        assert pending["type"] == "response.steer.pending"
        output = {"type": "function_call_output", "call_id": "call_1", "output": "21 C"}
        await ws.conn.response.create(model=MODEL, input=[output], tools=TOOLS, stream_id="w", previous_response_id=rid)
        frames = await until(ws, lambda f: f["type"] == "response.output_text.delta" and f["delta"] == "Bern ")
        rid2 = frames[0]["response"]["id"]
        # the answer after the tool output is text: a steer ends it there
        await ws.conn.response.steer(input="And tomorrow?", previous_response_id=rid2)
        steered = (await until(ws, terminal("w")))[-1]["response"]
        successor = await until(ws, terminal("w"))
    assert steered["status"] == "incomplete" and steered["incomplete_details"] == {"reason": "steered"}
    assert steered["output"][0]["content"][0]["text"] == "In Bern "
    assert successor[0]["response"]["previous_response_id"] == rid2 and successor[-1]["type"] == "response.completed"
    assert plain(upstream.requests[2].body["messages"])[-3:] == [
        ("user", "Use Celsius"),
        ("assistant", "In Bern "),
        ("user", "And tomorrow?"),
    ]
    assert await wait_until(lambda: upstream.cancelled == 1, 5)
    assert ws_frames.validate() == (3, 0)
