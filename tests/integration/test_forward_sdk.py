"""The official OpenAI SDK against crossfeed over a real port, with a fake chat backend.

Every streamed body these tests receive is also checked by the strict validator (conftest).
"""

from __future__ import annotations

import asyncio

import aiohttp
import openai
import orjson
import pytest

from tests.fakes.upstream import FakeUpstream, JSONReply, SSEReply
from tests.support.captures import data_objects, read_capture
from tests.support.chat_chunks import DONE, chunk, usage_chunk
from tests.support.validators import accumulate_chat, validate_responses_sse

TERMINAL = {"response.completed", "response.failed", "response.incomplete"}


def capture(name: str, **kw: object) -> SSEReply:
    return SSEReply(read_capture(f"chat/{name}"), **kw)  # type: ignore[arg-type]


def capture_text(name: str) -> str:
    """The answer text of a chat capture, accumulated from its chunks without crossfeed."""
    return accumulate_chat(data_objects(read_capture(f"chat/{name}")))["content"]


async def test_stream_text_create(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(capture("openai-gpt4o-text-usage.sse", seed=3, max_piece=13))
    stream = await client.responses.create(model="gpt-4o", input="Say hello", stream=True)
    types, text = [], []
    async for ev in stream:
        types.append(ev.type)
        if ev.type == "response.output_text.delta":
            text.append(ev.delta)
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert "".join(text) == capture_text("openai-gpt4o-text-usage.sse")
    assert types.count("response.output_item.added") == 1
    sent = upstream.requests[-1].body
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["messages"] == [{"role": "user", "content": "Say hello"}]


async def test_stream_helper_final_response_with_reasoning(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(capture("deepseek-reasoner-reasoning-content.sse", seed=5))
    async with client.responses.stream(model="deepseek-reasoner", input="9.11 or 9.8?") as stream:
        reasoning = [ev.delta async for ev in stream if ev.type == "response.reasoning_text.delta"]
        final = await stream.get_final_response()
    assert final.status == "completed"
    kinds = [item.type for item in final.output]
    assert kinds == ["reasoning", "message"]
    assert final.output[0].content[0].text == "".join(reasoning) and reasoning
    assert final.output_text
    assert final.usage is not None and final.usage.output_tokens_details.reasoning_tokens > 0


async def test_non_streaming(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(
        JSONReply(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "tool_calls",
                        "message": {
                            "role": "assistant",
                            "content": "Let me check.",
                            "reasoning_content": "need weather",
                            "tool_calls": [
                                {
                                    "id": "call_1",
                                    "type": "function",
                                    "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                                }
                            ],
                        },
                    }
                ],
                "usage": {
                    "prompt_tokens": 20,
                    "completion_tokens": 9,
                    "total_tokens": 29,
                    "prompt_tokens_details": {"cached_tokens": 4},
                },
            }
        )
    )
    resp = await client.responses.create(
        model="m",
        input="weather in Oslo?",
        stream=False,
        tools=[
            {
                "type": "function",
                "name": "weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            }
        ],
    )
    assert resp.status == "completed"
    assert [o.type for o in resp.output] == ["reasoning", "message", "function_call"]
    assert resp.output_text == "Let me check."
    call = resp.output[2]
    assert call.call_id == "call_1" and call.name == "weather" and orjson.loads(call.arguments) == {"city": "Oslo"}
    assert resp.usage.input_tokens == 20 and resp.usage.input_tokens_details.cached_tokens == 4
    assert "stream_options" not in upstream.requests[-1].body
    assert upstream.requests[-1].body.get("stream") in (None, False)


async def test_tool_call_round_trip(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(
        capture("openai-gpt4o-parallel-tool-calls.sse", seed=9, max_piece=40),
        SSEReply(
            chunk({"role": "assistant", "content": ""})
            + chunk({"content": "Both done."}, "stop")
            + usage_chunk(10, 5)
            + DONE
        ),
    )
    tools = [
        {"type": "function", "name": n, "parameters": {"type": "object", "properties": {}}}
        for n in ("get_country", "get_product_name")
    ]
    async with client.responses.stream(model="gpt-4o", input="go", tools=tools) as s:
        final = await s.get_final_response()
    calls = [o for o in final.output if o.type == "function_call"]
    assert [c.name for c in calls] == ["get_country", "get_product_name"]
    history = (
        [{"role": "user", "content": "go"}]
        + [c.model_dump(exclude_none=True) for c in calls]
        + [{"type": "function_call_output", "call_id": c.call_id, "output": f"result-{i}"} for i, c in enumerate(calls)]
    )
    second = await client.responses.create(model="gpt-4o", input=history, tools=tools, stream=True)
    events = [e async for e in second]
    assert events[-1].type == "response.completed"
    msgs = upstream.requests[-1].body["messages"]
    assert msgs[0] == {"role": "user", "content": "go"}
    assert msgs[1]["role"] == "assistant"
    assert [tc["id"] for tc in msgs[1]["tool_calls"]] == [c.call_id for c in calls]
    assert [tc["function"]["name"] for tc in msgs[1]["tool_calls"]] == ["get_country", "get_product_name"]
    assert msgs[2:] == [
        {"role": "tool", "tool_call_id": c.call_id, "content": f"result-{i}"} for i, c in enumerate(calls)
    ]


async def test_each_delta_reaches_the_client_while_the_upstream_is_still_writing(
    client: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    """No buffering: after each of its first three chunks the upstream waits until the client has
    read that chunk's delta. A proxy that held events back until more data (or the end) arrived
    would never let it go on, and the guard below fails the test. The first chunk takes the
    relay's first-read path, the later ones its per-chunk loop."""
    words = ["Hello", " there", " world"]
    frames = [chunk({"role": "assistant", "content": words[0]})] + [chunk({"content": w}) for w in words[1:]]
    holds, at = {}, 0
    for frame in frames:
        at += len(frame)
        holds[at] = asyncio.Event()
    upstream.reply(
        SSEReply(b"".join(frames) + chunk({}, "stop") + usage_chunk(10, 5) + DONE, seed=2, max_piece=13, holds=holds)
    )
    releases = iter(holds.values())
    text = []
    try:
        async with asyncio.timeout(20), client.responses.stream(model="m", input="x") as stream:
            async for ev in stream:
                if ev.type == "response.output_text.delta":
                    text.append(ev.delta)
                    next(releases).set()  # this delta arrived while the upstream waited: let it go on
            final = await stream.get_final_response()
    except TimeoutError:
        pytest.fail(f"a delta never reached the client while the upstream waited for it (read: {text})")
    assert text == words and final.output_text == "Hello there world"


async def test_midstream_error_raises_and_ends_with_failed(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, proxy, captured: list
) -> None:
    upstream.reply(
        capture("groq-gptoss-error-event-after-text.sse", seed=2),
        capture("groq-gptoss-error-event-after-text.sse", seed=7),
    )
    stream = await client.responses.create(model="m", input="x", stream=True)
    with pytest.raises(openai.APIError) as info:
        async for _ in stream:
            pass
    assert "Tool choice is required" in str(info.value)
    # The SDK stops reading at the `error` event, so what follows it is read here, in full.
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.base_url + "/responses", json={"model": "m", "input": "x", "stream": True}) as r:
            assert r.status == 200 and r.content_type == "text/event-stream"
            raw = await r.read()
    events = validate_responses_sse(raw)
    types = [e["type"] for e in events]
    assert [t for t in types if t in TERMINAL] == ["response.failed"]  # exactly one terminal event
    assert types.count("error") == 1
    assert types[-2:] == ["error", "response.failed"]  # the failure comes after the error event, and ends it
    # Byte level: the last frame of the body is that response.failed, nothing follows it.
    last_frame = raw.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
    assert last_frame.startswith(b"event: response.failed\ndata: ") and raw.endswith(b"}\n\n")
    error, failed = events[-2], events[-1]["response"]
    assert "Tool choice is required" in error["message"] and error["code"] == "tool_use_failed"
    assert failed["status"] == "failed" and "Tool choice is required" in failed["error"]["message"]
    # The text that had arrived is kept, cut: the message item is incomplete, not completed.
    message = [o for o in failed["output"] if o["type"] == "message"]
    assert [(m["status"], m["content"][0]["text"]) for m in message] == [("incomplete", "maybe")]


@pytest.mark.parametrize(
    ("finish", "status", "detail"),
    [
        ("model_length", "incomplete", "max_output_tokens"),  # Mistral: the model's context length reached
        ("error", "failed", "upstream_error"),  # Mistral, OpenRouter: generation failed
        ("abort", "failed", "upstream_aborted"),  # vLLM, SGLang: the engine aborted the request
    ],
)
async def test_provider_finish_reasons_are_not_reported_as_success(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, proxy, finish: str, status: str, detail: str
) -> None:
    answer = (
        chunk({"role": "assistant", "content": "Once"})
        + chunk({"content": " upon"}, finish)
        + usage_chunk(10, 5)
        + DONE
    )
    upstream.reply(SSEReply(answer, seed=4, max_piece=17), SSEReply(answer, seed=5, max_piece=11))
    if status == "incomplete":
        async with client.responses.stream(model="m", input="x") as stream:
            last = [ev async for ev in stream][-1]
        assert last.type == "response.incomplete"  # (the helper's final response is for completed only)
        assert last.response.incomplete_details.reason == detail and last.response.output_text == "Once upon"
    else:  # the SDK raises at the `error` event, with the reason in words
        with pytest.raises(openai.APIError, match="the upstream"):
            async with client.responses.stream(model="m", input="x") as stream:
                [ev async for ev in stream]
    # The whole body, read past the `error` event: one terminal event, nothing that arrived lost.
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.base_url + "/responses", json={"model": "m", "input": "x", "stream": True}) as r:
            events = validate_responses_sse(await r.read())
    assert [e["type"] for e in events if e["type"] in TERMINAL] == [f"response.{status}"]
    final_body = events[-1]["response"]
    assert final_body["status"] == status and final_body["usage"]["output_tokens"] == 5
    assert [(o["status"], o["content"][0]["text"]) for o in final_body["output"]] == [("incomplete", "Once upon")]
    if status == "failed":
        assert final_body["error"]["code"] == detail and events[-2]["code"] == detail
    # Not streamed: an incomplete answer is a 200 saying so; a failed one an error status.
    upstream.reply(
        JSONReply(
            {
                "id": "c1",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [
                    {"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": "Once upon"}}
                ],
            }
        )
    )
    if status == "incomplete":
        resp = await client.responses.create(model="m", input="x")
        assert resp.status == "incomplete" and resp.incomplete_details.reason == detail
        assert resp.output_text == "Once upon"
    else:
        with pytest.raises(openai.APIStatusError) as info:
            await client.responses.create(model="m", input="x")
        assert info.value.status_code == 502 and info.value.code == detail


async def test_truncated_upstream_gives_failed(proxy, upstream: FakeUpstream, captured: list) -> None:
    upstream.reply(SSEReply(chunk({"content": "half an ans"})))
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.base_url + "/responses", json={"model": "m", "input": "x", "stream": True}) as r:
            body = await r.read()
    events = validate_responses_sse(body)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "upstream_truncated"


@pytest.mark.parametrize(
    ("status", "body", "headers", "exc", "message"),
    [
        (
            400,
            {"error": {"message": "bad thing", "type": "invalid_request_error", "param": "messages", "code": None}},
            {},
            openai.BadRequestError,
            "bad thing",
        ),
        (
            401,
            {"error": {"message": "Invalid API key", "type": "invalid_request_error", "code": "invalid_api_key"}},
            {},
            openai.AuthenticationError,
            "Invalid API key",
        ),
        (
            404,
            {"error": {"message": "model not found", "type": "invalid_request_error"}},
            {},
            openai.NotFoundError,
            "model not found",
        ),
        (
            429,
            {"error": {"message": "slow down", "type": "rate_limit_error"}},
            {"Retry-After": "7"},
            openai.RateLimitError,
            "slow down",
        ),
        (500, None, {}, openai.InternalServerError, "HTTP 500"),
        (503, None, {}, openai.InternalServerError, "HTTP 503"),
    ],
)
@pytest.mark.parametrize("stream", [True, False])
async def test_upstream_http_errors_keep_status_and_message(
    client: openai.AsyncOpenAI,
    upstream: FakeUpstream,
    status: int,
    body: dict | None,
    headers: dict,
    exc: type,
    message: str,
    stream: bool,
) -> None:
    if body is None:
        upstream.reply(
            JSONReply(
                None,
                status=status,
                raw=b"<html><body>Bad Gateway</body></html>" if status == 500 else b"",
                content_type="text/html",
            )
        )
    else:
        upstream.reply(JSONReply(body, status=status, headers=headers))
    with pytest.raises(exc) as info:
        await client.responses.create(model="m", input="x", stream=stream)
    assert info.value.status_code == status
    assert message in info.value.message
    assert "<html" not in info.value.message
    if headers:
        assert info.value.response.headers.get("retry-after") == "7"


async def test_unreachable_upstream_is_502() -> None:
    from crossfeed.proxy.runtime.config import load_config
    from tests.support.app_server import running_proxy

    config = load_config(None, {}, {"upstream.base_url": "http://127.0.0.1:9/v1"})
    async with running_proxy(config) as handle:
        c = openai.AsyncOpenAI(base_url=handle.base_url, api_key="k", max_retries=0)
        with pytest.raises(openai.InternalServerError) as info:
            await c.responses.create(model="m", input="x", stream=True)
        assert info.value.status_code == 502
        assert "cannot connect to the upstream" in info.value.message
        assert "127.0.0.1" not in info.value.message  # the backend's address is the operator's, not the client's
        await c.close()


async def test_first_byte_timeout_is_504(upstream: FakeUpstream) -> None:
    from crossfeed.proxy.runtime.config import load_config
    from tests.support.app_server import running_proxy

    config = load_config(None, {}, {"upstream.base_url": upstream.base_url})
    up = config.upstreams[0].model_copy(
        update={"timeouts": config.upstreams[0].timeouts.model_copy(update={"first_byte": 0.3})}
    )
    config = config.model_copy(update={"upstreams": (up,)})
    upstream.reply(SSEReply(b"", stall_after=0))
    async with running_proxy(config) as handle:
        original = upstream._stream

        async def never_answers(request, reply):
            await asyncio.sleep(10)
            return await original(request, reply)

        upstream._stream = never_answers  # type: ignore[method-assign]
        c = openai.AsyncOpenAI(base_url=handle.base_url, api_key="k", max_retries=0)
        with pytest.raises(openai.APIStatusError) as info:
            await c.responses.create(model="m", input="x", stream=True)
        assert info.value.status_code == 504
        assert "first_byte timeout" in info.value.message
        await c.close()


async def test_client_disconnect_cancels_upstream(proxy, upstream: FakeUpstream) -> None:
    slow = chunk({"content": "tick "}) * 400 + DONE
    upstream.reply(SSEReply(slow, max_piece=60, delay=0.05))
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.base_url + "/responses", json={"model": "m", "input": "x", "stream": True}) as r:
            async for _ in r.content.iter_any():
                break  # hang up after the first bytes
    for _ in range(100):
        if upstream.open_requests == 0:
            break
        await asyncio.sleep(0.05)
    assert upstream.open_requests == 0
    assert upstream.cancelled == 1


@pytest.mark.parametrize(
    ("payload", "status", "param", "code"),
    [
        (b"{not json", 400, None, "invalid_json"),
        (b"[]", 400, None, "invalid_type"),
        (b"null", 400, None, "invalid_type"),
        (b'{"input": "x"}', 400, "model", "missing_required_parameter"),
        (b'{"model": 5, "input": "x"}', 400, "model", "invalid_type"),
        (b'{"model": "m", "input": "x", "stream": "yes"}', 400, "stream", None),
        (b'{"model": "m", "input": "x", "temperature": "hot"}', 400, "temperature", None),
    ],
)
async def test_bad_requests_get_envelope_with_param(
    proxy, payload: bytes, status: int, param: str | None, code: str | None
) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.post(
            proxy.base_url + "/responses", data=payload, headers={"Content-Type": "application/json"}
        ) as r:
            assert r.status == status
            body = await r.json()
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["param"] == param
    if code:
        assert err["code"] == code
    assert "Traceback" not in err["message"] and "Error(" not in err["message"]


async def test_unknown_path_and_method_get_envelope(proxy) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.get(proxy.url + "/v1/nope") as r:
            assert r.status == 404
            assert (await r.json())["error"]["code"] == "not_found"
        async with s.delete(proxy.url + "/v1/chat/completions") as r:
            assert r.status == 405
            assert (await r.json())["error"]["type"] == "invalid_request_error"
        async with s.get(proxy.url + "/healthz") as r:
            assert r.status == 200


async def test_chat_and_models_pass_through(client: openai.AsyncOpenAI, upstream: FakeUpstream, captured: list) -> None:
    raw = read_capture("chat/openai-gpt4o-text-usage.sse")
    models_body = {"object": "list", "data": [{"id": "m1", "object": "model", "created": 0, "owned_by": "x"}]}
    upstream.reply(JSONReply(models_body), SSEReply(raw, seed=4))
    models = await client.models.list()
    assert [m.id for m in models.data] == ["m1"]
    stream = await client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == capture_text("openai-gpt4o-text-usage.sse")
    assert upstream.requests[-1].path == "/v1/chat/completions"
    assert upstream.requests[-1].body["messages"] == [{"role": "user", "content": "hi"}]
    # The chat stream is passed through byte for byte; the model list keeps the upstream's entries
    # and adds Codex's catalog beside them (proxy/http/codex_catalog.py).
    assert [c.path for c in captured] == ["/v1/models", "/v1/chat/completions"]
    listed = orjson.loads(captured[0].raw)
    assert listed["data"] == models_body["data"] and [m["slug"] for m in listed["models"]] == ["m1"]
    assert "text/event-stream" in captured[1].content_type
    assert captured[1].raw == raw


async def test_client_key_passed_when_no_upstream_key(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(SSEReply(chunk({"content": "ok"}, "stop") + DONE))
    s = await client.responses.create(model="m", input="x", stream=True)
    [e async for e in s]
    assert upstream.requests[-1].headers["Authorization"] == "Bearer sk-test-client"


async def test_thought_signatures_go_back_to_the_backend_on_the_next_turn(
    client: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    """Codex's way (store false, encrypted reasoning included) in front of Gemini 3 via OpenRouter:
    the backend's reasoning_details reach it again on the turn that answers its tool calls."""
    name = "openrouter-gemini31-reasoning-details-parallel-tools.sse"
    sent_details = [
        d
        for c in data_objects(read_capture(f"chat/{name}"))
        if isinstance(c, dict)
        for ch in c.get("choices") or ()
        for d in (ch.get("delta") or {}).get("reasoning_details") or ()
    ]
    assert sent_details
    tools = [
        {"type": "function", "name": n, "parameters": {"type": "object", "properties": {}}} for n in ("add", "multiply")
    ]
    upstream.reply(
        capture(name, seed=6, max_piece=23),
        SSEReply(chunk({"role": "assistant", "content": "5 and 6."}, "stop") + usage_chunk(10, 5) + DONE),
    )
    first = await client.responses.create(
        model="m",
        input="Add and multiply 2 and 3",
        tools=tools,
        stream=True,
        store=False,
        include=["reasoning.encrypted_content"],
    )
    final = [ev async for ev in first][-1].response
    kinds = [item.type for item in final.output]
    assert kinds == ["reasoning", "function_call", "function_call"] and final.output[0].encrypted_content
    history = [item.model_dump(exclude_none=True) for item in final.output]
    outputs = [
        {"type": "function_call_output", "call_id": item.call_id, "output": "ok"}
        for item in final.output
        if item.type == "function_call"
    ]
    second = await client.responses.create(
        model="m",
        input=[{"role": "user", "content": "Add and multiply 2 and 3"}, *history, *outputs],
        tools=tools,
        stream=True,
        store=False,
        include=["reasoning.encrypted_content"],
    )
    assert [ev async for ev in second][-1].response.output_text == "5 and 6."
    turn = upstream.requests[-1].body["messages"][1]
    assert turn["role"] == "assistant" and turn["reasoning_details"] == sent_details
    assert [tc["id"] for tc in turn["tool_calls"]] == [item.call_id for item in final.output[1:]]


@pytest.mark.parametrize("route", ["/responses", "/chat/completions"])
async def test_stream_null_is_false_and_a_string_is_refused_in_both_directions(
    route: str, upstream: FakeUpstream, tmp_path
) -> None:
    """One rule for ``stream`` in both directions (exchange.stream_flag): null is not streamed,
    anything but a boolean or null is a 400 naming ``stream``."""
    from crossfeed.proxy.runtime.config import load_config
    from tests.support.app_server import running_proxy

    api = "chat" if route == "/responses" else "responses"
    async with running_proxy(
        load_config(
            None,
            {},
            {"upstream.base_url": upstream.base_url, "upstream.api": api, "store.data_dir": str(tmp_path / "d")},
        )
    ) as handle:
        if api == "chat":
            reply = {
                "id": "c",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "plain"}, "finish_reason": "stop"}
                ],
            }
            body: dict = {"model": "m", "input": "x"}
        else:
            reply = {
                "id": "resp_1",
                "object": "response",
                "created_at": 1,
                "status": "completed",
                "model": "m",
                "output": [
                    {
                        "type": "message",
                        "id": "msg_1",
                        "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": "plain", "annotations": []}],
                    }
                ],
            }
            body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        upstream.reply(JSONReply(reply))
        async with aiohttp.ClientSession() as s:
            async with s.post(handle.base_url + route, json={**body, "stream": None}) as r:
                assert r.status == 200 and r.content_type == "application/json"
                assert "plain" in await r.text()
            async with s.post(handle.base_url + route, json={**body, "stream": "yes"}) as r:
                assert r.status == 400 and (await r.json())["error"]["param"] == "stream"
        assert upstream.requests[0].body["stream"] is False
        assert len(upstream.requests) == 1
