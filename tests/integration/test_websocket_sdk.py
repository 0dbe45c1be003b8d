"""The official Python SDK's WebSocket client (``client.responses.connect()``) against crossfeed.

WebSocket mode on ``GET /v1/responses`` (proxy/http/websocket.py): each ``response.create`` is one
turn, its events one JSON text frame each. The SDK's raw frames are recorded (``recv_bytes``
wrapped, tests/support/ws.py) and every one is validated at teardown by the ``ws_frames``
fixture: each response through the strict stream validator, each request-level error frame for
its exact shape. The fake backend (tests/fakes/upstream.py) streams in realistic pieces and
records what crossfeed sent it, which is what the continuation tests check.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import openai
import orjson
import pytest

from crossfeed.translators.responses.response_object import new_response
from tests.fakes.upstream import FakeUpstream, JSONReply, SSEReply
from tests.support.app_server import ProxyHandle
from tests.support.captures import data_objects, read_capture
from tests.support.ws import SDKWS, FrameRecorder
from tests.support.ws_replies import MODEL, TOOLS, error_reply, midstream_failure, plain, text_reply, tool_reply, user

pytestmark = pytest.mark.timeout(60)


def sent_messages(upstream: FakeUpstream, n: int) -> list[dict[str, Any]]:
    return upstream.requests[n].body["messages"]


@pytest.fixture
async def sdk(proxy: ProxyHandle, ws_frames: FrameRecorder) -> AsyncIterator[Callable[..., Any]]:
    """``async with sdk() as ws``: an SDK connection to crossfeed, every frame recorded."""
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="sk-test-client", max_retries=0)

    @contextlib.asynccontextmanager
    async def connect(label: str = "sdk") -> AsyncIterator[SDKWS]:
        async with client.responses.connect() as conn:
            yield ws_frames.attach(conn, label)

    yield connect
    await client.close()


async def test_text(sdk: Callable[..., Any], upstream: FakeUpstream, ws_frames: FrameRecorder) -> None:
    upstream.reply(text_reply("Hello", ", wörld", " 日本語", "!", usage=(12, 5)))
    async with sdk() as ws:
        turn, parsed = await ws.turn(model=MODEL, input="Say hello")
    assert turn.types()[:2] == ["response.created", "response.in_progress"]
    assert turn.terminal == "response.completed"
    assert turn.text == "Hello, wörld 日本語!"
    final = parsed[-1].response  # the SDK's own model of the terminal event
    assert final.output_text == "Hello, wörld 日本語!" and final.status == "completed"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (12, 5)
    assert [e.type for e in parsed] == turn.types()
    (request,) = upstream.requests
    assert request.path == "/v1/chat/completions"
    assert request.body["stream"] is True and request.body["model"] == MODEL
    assert request.body["messages"] == [user("Say hello")]
    assert not {"type", "generate"} & set(request.body)
    assert ws_frames.validate() == (1, 0)


async def test_tool_call_round_trip(sdk: Callable[..., Any], upstream: FakeUpstream, ws_frames: FrameRecorder) -> None:
    upstream.reply(tool_reply("call_w1", "get_weather", {"city": "Zürich"}), text_reply("It is sunny in Zürich."))
    async with sdk() as ws:
        first, _ = await ws.turn(model=MODEL, input="Weather in Zürich?", tools=TOOLS)
        calls = first.items("function_call")
        assert [(c["call_id"], c["name"], orjson.loads(c["arguments"])) for c in calls] == [
            ("call_w1", "get_weather", {"city": "Zürich"})
        ]
        assert first.response["output"][-1]["call_id"] == "call_w1"
        output = {"type": "function_call_output", "call_id": "call_w1", "output": "sunny, 21 C"}
        second, _ = await ws.turn(model=MODEL, input=[output], tools=TOOLS, previous_response_id=first.response["id"])
    assert second.terminal == "response.completed" and second.text == "It is sunny in Zürich."
    assert len(upstream.requests) == 2
    assert [t["function"]["name"] for t in upstream.requests[0].body["tools"]] == ["get_weather"]
    msgs = sent_messages(upstream, 1)
    assert len(msgs) == 3, msgs
    assert msgs[0] == user("Weather in Zürich?")
    assert msgs[1]["role"] == "assistant"
    assert [
        (c["id"], c["function"]["name"], orjson.loads(c["function"]["arguments"])) for c in msgs[1]["tool_calls"]
    ] == [("call_w1", "get_weather", {"city": "Zürich"})]
    assert msgs[2] == {"role": "tool", "tool_call_id": "call_w1", "content": "sunny, 21 C"}
    assert ws_frames.validate() == (2, 0)


async def test_store_false_continuation_from_connection_memory(
    sdk: Callable[..., Any], upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    upstream.reply(text_reply("Nice to meet you, Ada."), text_reply("Your name is Ada."), text_reply("Ada, again."))
    async with sdk() as ws:
        first, _ = await ws.turn(model=MODEL, input="My name is Ada.", store=False)
        second, _ = await ws.turn(
            model=MODEL, input="What is my name?", store=False, previous_response_id=first.response["id"]
        )
        third, _ = await ws.turn(
            model=MODEL, input="Once more?", store=False, previous_response_id=second.response["id"]
        )
    assert (second.text, third.text) == ("Your name is Ada.", "Ada, again.")
    history = [("user", "My name is Ada."), ("assistant", "Nice to meet you, Ada."), ("user", "What is my name?")]
    assert plain(sent_messages(upstream, 1)) == history
    assert plain(sent_messages(upstream, 2)) == [*history, ("assistant", "Your name is Ada."), ("user", "Once more?")]
    # nothing was stored (store: false): another connection does not know the id
    async with sdk("second socket") as other:
        refused, _ = await other.turn(model=MODEL, input="x", store=False, previous_response_id=second.response["id"])
    assert refused.error["code"] == "previous_response_not_found"
    assert len(upstream.requests) == 3
    assert ws_frames.validate() == (3, 1)


async def test_previous_response_not_found(
    sdk: Callable[..., Any], upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    upstream.reply(text_reply("Still here."))
    async with sdk() as ws:
        refused, parsed = await ws.turn(model=MODEL, input="hi", previous_response_id="resp_unknown123")
        assert upstream.requests == []
        after, _ = await ws.turn(model=MODEL, input="hi")  # the socket stays usable
    error = refused.error
    # status 400, not 404: what Codex takes as "start over with the full input" (proxy/http/websocket.py)
    assert (error["status"], error["code"], error["param"]) == (
        400,
        "previous_response_not_found",
        "previous_response_id",
    )
    assert "resp_unknown123" in error["message"]
    assert parsed[0].type == "error" and parsed[0].status == 400 and parsed[0].error.code == error["code"]
    assert after.text == "Still here." and plain(sent_messages(upstream, 0)) == [("user", "hi")]
    assert ws_frames.validate() == (1, 1)


@pytest.mark.parametrize("failure", ["http_500", "midstream"])
async def test_failed_continuation_evicts_the_remembered_response(
    sdk: Callable[..., Any], upstream: FakeUpstream, ws_frames: FrameRecorder, failure: str
) -> None:
    bad = error_reply(500, "the backend fell over") if failure == "http_500" else midstream_failure("backend broke")
    upstream.reply(text_reply("First answer."), bad)
    async with sdk() as ws:
        first, _ = await ws.turn(model=MODEL, input="one", store=False)
        prev = first.response["id"]
        failed, _ = await ws.turn(model=MODEL, input="two", store=False, previous_response_id=prev)
        retry, _ = await ws.turn(model=MODEL, input="two", store=False, previous_response_id=prev)
    if failure == "http_500":
        assert failed.error["status"] >= 500 and "the backend fell over" in failed.error["message"]
    else:
        assert failed.terminal == "response.failed" and failed.types().count("error") == 1
        assert "backend broke" in failed.response["error"]["message"]
    assert plain(sent_messages(upstream, 1)) == [("user", "one"), ("assistant", "First answer."), ("user", "two")]
    assert retry.error["code"] == "previous_response_not_found"
    assert len(upstream.requests) == 2  # the retry never reached the backend
    assert ws_frames.validate() == ((1, 2) if failure == "http_500" else (2, 1))


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (error_reply(500, "the backend fell over"), "server_error"),  # code null: its type
        (error_reply(400, "bad tool schema"), "invalid_request_error"),
        (JSONReply(None, status=503, raw=b"Service Unavailable", content_type="text/plain"), "server_error"),
        (
            JSONReply({"error": {"message": "slow down", "code": "rate_limit_exceeded"}}, status=429),
            "rate_limit_exceeded",
        ),
    ],
)
async def test_an_upstream_error_frame_always_has_a_string_code(
    sdk: Callable[..., Any], proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder, reply: Any, code: str
) -> None:
    """The backend's error relayed as an error frame: its code, else its type, else the type of
    its status (the Open Responses WebSocketErrorEvent wants a string: the ``ws_frames`` check
    validates it with the schema's model). The same error over HTTP keeps the body as it was."""
    upstream.reply(reply, reply)
    async with sdk() as ws:
        failed, _ = await ws.turn(model=MODEL, input="hi")
    assert (failed.error["status"], failed.error["code"]) == (reply.status, code)
    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.post(proxy.base_url + "/responses", json={"model": MODEL, "input": "hi"})
    assert r.status_code == reply.status
    assert r.json()["error"]["code"] == (code if code == "rate_limit_exceeded" else None)
    assert ws_frames.validate() == (0, 1)


async def test_generate_false_primes_the_connection(
    sdk: Callable[..., Any], upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    upstream.reply(text_reply("Bonjour !"))
    async with sdk() as ws:
        primed, _ = await ws.turn(
            model=MODEL,
            instructions="Answer in French.",
            tools=TOOLS,
            input="I live in Paris.",
            generate=False,
            store=False,
        )
        assert upstream.requests == []  # priming never calls the backend
        answer, _ = await ws.turn(model=MODEL, input="Hello", store=False, previous_response_id=primed.response["id"])
    assert primed.types() == ["response.created", "response.in_progress", "response.completed"]
    assert primed.response["output"] == [] and primed.response["instructions"] == "Answer in French."
    assert answer.text == "Bonjour !" and answer.response["instructions"] == "Answer in French."
    (request,) = upstream.requests
    assert "generate" not in request.body
    assert plain(request.body["messages"]) == [
        ("system", "Answer in French."),
        ("user", "I live in Paris."),
        ("user", "Hello"),
    ]
    assert [t["function"]["name"] for t in request.body["tools"]] == ["get_weather"]
    assert ws_frames.validate() == (2, 0)


# -- a Responses upstream: crossfeed calls it over HTTP/SSE and relays its events -----------------


def responses_sse(rid: str, text: str, pieces: int = 4) -> SSEReply:
    """A Responses backend's stream of one message, numbered its own way (from 100)."""
    base = new_response({}, response_id=rid, created_at=1, model=MODEL)  # every field, as OpenAI sends
    item = {"id": f"msg_{rid}", "type": "message", "status": "in_progress", "role": "assistant", "content": []}
    part = {"type": "output_text", "text": "", "annotations": []}
    scope = {"item_id": item["id"], "output_index": 0, "content_index": 0}
    size = max(1, len(text) // pieces)
    done_part = {**part, "text": text}
    done_item = {**item, "status": "completed", "content": [done_part]}
    usage = {
        "input_tokens": 7,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 3,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 10,
    }
    events = [
        {"type": "response.created", "response": base},
        {"type": "response.in_progress", "response": base},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.content_part.added", **scope, "part": part},
        *(
            {"type": "response.output_text.delta", **scope, "delta": text[i : i + size], "logprobs": []}
            for i in range(0, len(text), size)
        ),
        {"type": "response.output_text.done", **scope, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **scope, "part": done_part},
        {"type": "response.output_item.done", "output_index": 0, "item": done_item},
        {
            "type": "response.completed",
            "response": {**base, "status": "completed", "output": [done_item], "usage": usage},
        },
    ]
    raw = b"".join(
        b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps({**e, "sequence_number": 100 + n}) + b"\n\n"
        for n, e in enumerate(events)
    )
    return SSEReply(raw, seed=7, max_piece=41)


@pytest.mark.parametrize("proxy_overrides", [{"upstream.api": "responses"}])
async def test_responses_upstream_relayed_as_frames(
    sdk: Callable[..., Any], upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    upstream.reply(
        responses_sse("resp_up1", "Relayed from a Responses backend."),
        responses_sse("resp_up2", "Second relayed answer."),
    )
    async with sdk() as ws:
        first, _ = await ws.turn(model=MODEL, input="hi", store=False)
        second, _ = await ws.turn(model=MODEL, input="again", store=False, previous_response_id=first.response["id"])
    assert first.text == "Relayed from a Responses backend." and first.response["id"] == "resp_up1"
    assert second.text == "Second relayed answer." and second.terminal == "response.completed"
    assert [e["sequence_number"] for e in first.events] == list(range(len(first.events)))  # renumbered
    req0, req1 = upstream.requests
    assert req0.path == req1.path == "/v1/responses"
    assert req0.body["stream"] is True and req0.body["input"] == "hi"
    assert not {"type", "generate", "previous_response_id"} & (set(req0.body) | set(req1.body))
    # the backend never saw the remembered response: the whole conversation went to it
    history = req1.body["input"]
    assert [i.get("role") for i in history] == ["user", "assistant", "user"], history
    assert history[1]["content"][0]["text"] == "Relayed from a Responses backend."
    assert orjson.dumps(history[2]).count(b"again") == 1
    assert ws_frames.validate() == (2, 0)


@pytest.mark.parametrize("proxy_overrides", [{"upstream.api": "responses"}])
async def test_responses_upstream_capture_relayed(
    sdk: Callable[..., Any], upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    """A real provider's stream (reasoning, then a function call), relayed frame for frame."""
    name = "responses/openai-gpt5-reasoning-function-call-usage.sse"
    raw = read_capture(name)
    upstream.reply(SSEReply(raw, seed=11, max_piece=29))
    async with sdk() as ws:
        turn, parsed = await ws.turn(model=MODEL, input="weather?", tools=TOOLS)
    expected = data_objects(raw)
    assert turn.types() == [e["type"] for e in expected]
    assert [(i["type"], i.get("call_id"), i.get("arguments")) for i in turn.items()] == [
        (e["item"]["type"], e["item"].get("call_id"), e["item"].get("arguments"))
        for e in expected
        if e["type"] == "response.output_item.done"
    ]
    assert parsed[-1].response.usage.output_tokens == expected[-1]["response"]["usage"]["output_tokens"]
    assert ws_frames.validate() == (1, 0)
