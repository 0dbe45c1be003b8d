"""Reverse direction: what a chat client asks for that the Responses API lacks, done by crossfeed.

The official SDK's chat client against crossfeed, in front of a fake Responses backend:
``stop`` (the content cut, the upstream request closed at the cut), ``n`` > 1 (n upstream calls
merged as choices), ``drop_params`` and the penalties.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import openai
import orjson
import pytest
import structlog

from tests.fakes.upstream import FakeUpstream, JSONReply, SSEReply
from tests.support.app_server import ProxyHandle
from tests.support.clients import Captured, TeeTransport
from tests.support.responses_replies import answer, event_frame, final_response
from tests.support.validators import accumulate_chat, sse_frames, validate_chat_chunks
from tests.support.waiting import wait_until

GUARD = 10.0
MESSAGES = [{"role": "user", "content": "Say something"}]


@pytest.fixture
def proxy_overrides() -> dict[str, object]:
    return {"upstream.api": "responses"}


@pytest.fixture
async def multi_client(proxy: ProxyHandle) -> AsyncIterator[tuple[openai.AsyncOpenAI, list[Captured]]]:
    """An SDK client whose bodies are kept but not checked by the n=1 validator (the shared
    ``client`` fixture checks every chat stream as one choice): n-choice tests check them with
    ``choice_streams``."""
    seen: list[Captured] = []
    http = httpx2.AsyncClient(transport=TeeTransport(seen), timeout=30)
    c = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="sk-test-client", http_client=http, max_retries=0)
    yield c, seen
    await c.close()


# ---------------------------------------------------------------- a Responses backend's answers


def held_after(frames: list[bytes], count: int) -> tuple[SSEReply, asyncio.Event]:
    """The stream's first ``count`` frames, then nothing until the event is set (never, here):
    only crossfeed can end such a stream, by closing the request."""
    gate = asyncio.Event()
    return SSEReply(b"".join(frames), seed=3, max_piece=13, holds={len(b"".join(frames[:count])): gate}), gate


def failed_stream(message: str = "the backend broke") -> bytes:
    base = {"id": "resp_f", "object": "response", "created_at": 5, "model": "up-model"}
    return event_frame(
        {"type": "response.created", "response": {**base, "status": "in_progress", "output": []}}
    ) + event_frame(
        {
            "type": "response.failed",
            "response": {
                **base,
                "status": "failed",
                "output": [],
                "error": {"code": "server_error", "message": message},
            },
        }
    )


def choice_streams(raw: bytes) -> tuple[dict[int, list[dict]], list[dict]]:
    """An n-choice chat stream split per choice (each re-indexed 0, with the final usage chunk),
    every part checked by the strict chat validator; and all chunks in order."""
    frames = sse_frames(raw)
    assert frames[-1] == (None, b"[DONE]") and sum(data == b"[DONE]" for _, data in frames) == 1
    chunks = [orjson.loads(data) for _, data in frames[:-1]]
    if chunks[-1].get("error"):
        return {}, chunks
    assert len({(c["id"], c["created"], c["model"]) for c in chunks}) == 1, "one identity for every chunk"
    usage_chunks = [c for c in chunks if not c["choices"]]
    assert len(usage_chunks) <= 1 and (not usage_chunks or usage_chunks[0] is chunks[-1])
    per: dict[int, list[dict]] = {}
    for c in chunks:
        if c["choices"]:
            assert len(c["choices"]) == 1
            index = c["choices"][0]["index"]
            per.setdefault(index, []).append({**c, "choices": [{**c["choices"][0], "index": 0}]})
    for part in per.values():
        validate_chat_chunks(part + usage_chunks, expect_usage=bool(usage_chunks))
    return per, chunks


def chat_body(captured: list[Captured]) -> bytes:
    return next(c.raw for c in reversed(captured) if c.path.endswith("/chat/completions"))


# ---------------------------------------------------------------- stop


async def test_stop_spanning_deltas_streamed(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(
        SSEReply(b"".join(answer(["The answer is 4", "2.<|e", "nd|> and then more text"])), seed=5, max_piece=7)
    )
    stream = await client.chat.completions.create(
        model="m", messages=MESSAGES, stream=True, stop=["<|end|>", "###"], stream_options={"include_usage": True}
    )
    chunks = [c async for c in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "The answer is 42."
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert "stop" not in upstream.requests[-1].body  # the Responses API has no stop


async def test_stop_closes_the_upstream_request(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    """The stream ends at the stop sequence: crossfeed closes the upstream request, whose rest
    (held back here, never sent) is not waited for."""
    frames = answer(["First line.\nSTOP", "and much more"])
    reply, _gate = held_after(frames, 3)  # created, item added, the delta with the stop sequence
    upstream.reply(reply)
    stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True, stop="\nSTOP")
    async with asyncio.timeout(GUARD):
        chunks = [c async for c in stream]  # ends: the client got [DONE] while the upstream still holds
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "First line."
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert await wait_until(lambda: upstream.cancelled == 1 and upstream.open_requests == 0, GUARD), (
        "the upstream request was not closed"
    )


async def test_stop_not_streamed(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(JSONReply(final_response("Cut here: STOP and not this")))
    r = await client.chat.completions.create(model="m", messages=MESSAGES, stop=["STOP"])
    assert r.choices[0].message.content == "Cut here: " and r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == 2  # the upstream's own count of what it generated
    assert "stop" not in upstream.requests[-1].body


async def test_stop_that_never_comes_changes_nothing(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(SSEReply(b"".join(answer(["ends with S", "TO"])), seed=2, max_piece=5))
    stream = await client.chat.completions.create(
        model="m", messages=MESSAGES, stream=True, stop=["STOP"], stream_options={"include_usage": True}
    )
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "ends with STO"
    assert chunks[-1].usage.prompt_tokens == 9  # the upstream's usage: its stream ran to the end


# ---------------------------------------------------------------- n


async def test_n_streamed_merges_choices_and_sums_usage(multi_client: Any, upstream: FakeUpstream) -> None:
    client, seen = multi_client
    upstream.reply(
        SSEReply(b"".join(answer(["Alpha ", "one"], tokens=(9, 2))), seed=1, max_piece=11, delay=0.001),
        SSEReply(b"".join(answer(["Beta ", "two"], tokens=(9, 3))), seed=2, max_piece=9, delay=0.001),
    )
    async with client.chat.completions.stream(
        model="m", messages=MESSAGES, n=2, stream_options={"include_usage": True}
    ) as stream:
        final = await stream.get_final_completion()
    assert sorted(c.message.content for c in final.choices) == ["Alpha one", "Beta two"]
    assert [c.index for c in final.choices] == [0, 1] and {c.finish_reason for c in final.choices} == {"stop"}
    assert (final.usage.prompt_tokens, final.usage.completion_tokens, final.usage.total_tokens) == (18, 5, 23)
    assert final.usage.prompt_tokens_details.cached_tokens == 2
    per, _ = choice_streams(chat_body(seen))
    assert sorted(per) == [0, 1]
    assert len(upstream.requests) == 2 and all("n" not in r.body for r in upstream.requests)


async def test_n_streamed_without_usage(multi_client: Any, upstream: FakeUpstream) -> None:
    client, seen = multi_client
    upstream.reply(*(SSEReply(b"".join(answer([f"choice {i}"])), seed=i) for i in range(3)))
    stream = await client.chat.completions.create(model="m", messages=MESSAGES, n=3, stream=True)
    chunks = [c async for c in stream]
    assert all(c.usage is None for c in chunks)
    per, _ = choice_streams(chat_body(seen))
    assert sorted(accumulate_chat(part)["content"] for part in per.values()) == ["choice 0", "choice 1", "choice 2"]


async def test_n_not_streamed(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(
        JSONReply(final_response("first", tokens=(9, 2))), JSONReply(final_response("second", tokens=(9, 4)))
    )
    r = await client.chat.completions.create(model="m", messages=MESSAGES, n=2)
    assert [c.index for c in r.choices] == [0, 1]
    assert sorted(c.message.content for c in r.choices) == ["first", "second"]
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (18, 6, 24)
    assert len(upstream.requests) == 2


async def test_n_with_stop_cuts_each_choice(multi_client: Any, upstream: FakeUpstream) -> None:
    client, seen = multi_client
    upstream.reply(
        SSEReply(b"".join(answer(["a1 E", "ND a2"])), seed=1, max_piece=5),
        SSEReply(b"".join(answer(["b1 END b2"])), seed=2, max_piece=5),
    )
    stream = await client.chat.completions.create(
        model="m", messages=MESSAGES, n=2, stream=True, stop="END", stream_options={"include_usage": True}
    )
    [c async for c in stream]
    per, chunks = choice_streams(chat_body(seen))
    assert sorted(accumulate_chat(part)["content"] for part in per.values()) == ["a1 ", "b1 "]
    assert chunks[-1]["usage"]["prompt_tokens"] > 0  # two estimates (both cut before their usage), summed


async def test_one_of_n_failing_mid_stream_ends_with_one_error(multi_client: Any, upstream: FakeUpstream) -> None:
    """One call fails after the stream began: its error frame, once, then [DONE]; the SDK raises."""
    client, seen = multi_client
    upstream.reply(
        SSEReply(b"".join(answer(["partial ", "answer"])), delay=0.2),
        SSEReply(failed_stream("the backend broke"), delay=0.05),
    )
    stream = await client.chat.completions.create(model="m", messages=MESSAGES, n=2, stream=True)
    with pytest.raises(openai.APIError) as info:
        async with asyncio.timeout(GUARD):
            [c async for c in stream]
    assert "the backend broke" in info.value.message
    _, chunks = choice_streams(chat_body(seen))
    assert [c for c in chunks if c.get("error")] == [chunks[-1]]


async def test_one_of_n_failing_closes_the_others(proxy: ProxyHandle, upstream: FakeUpstream) -> None:
    """The other call, still running (held here, it would never end), has its upstream request
    closed by crossfeed: the client keeps its connection open, so nothing else can end it."""
    held, _gate = held_after(answer(["partial ", "answer"]), 3)
    upstream.reply(held, SSEReply(failed_stream("the backend broke"), delay=0.05))
    async with httpx2.AsyncClient(base_url=proxy.base_url, timeout=GUARD) as http:
        r = await http.post("/chat/completions", json={"model": "m", "messages": MESSAGES, "n": 2, "stream": True})
        _, chunks = choice_streams(r.content)
        assert chunks[-1]["error"]["message"] == "the backend broke"
        assert await wait_until(lambda: upstream.open_requests == 0 and upstream.cancelled >= 1, GUARD), (
            "the other choice's upstream request was not closed"
        )


async def test_one_of_n_refused_up_front_is_the_requests_error(
    client: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    """A call refused before any stream began: the request gets that HTTP error, as with n = 1."""
    held, _gate = held_after(answer(["never sent"]), 1)
    upstream.reply(
        JSONReply(
            {"error": {"message": "slow down", "type": "rate_limit_error", "code": "rate_limit_exceeded"}}, status=429
        ),
        held,
    )
    with pytest.raises(openai.RateLimitError) as info:
        await client.chat.completions.create(model="m", messages=MESSAGES, n=2, stream=True)
    assert "slow down" in info.value.message
    assert await wait_until(lambda: upstream.open_requests == 0, GUARD), "the other call was not closed"


async def test_one_of_n_failing_not_streamed(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(
        JSONReply(final_response("fine")),
        JSONReply(final_response("", status="failed", error={"code": "server_error", "message": "boom"})),
    )
    with pytest.raises(openai.APIStatusError) as info:
        await client.chat.completions.create(model="m", messages=MESSAGES, n=2)
    assert info.value.status_code == 502 and "boom" in info.value.message


@pytest.mark.parametrize("n", [0, 9])
async def test_n_out_of_range_names_n(client: openai.AsyncOpenAI, n: int) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await client.chat.completions.create(model="m", messages=MESSAGES, n=n)
    assert info.value.param == "n"


# ---------------------------------------------------------------- drop_params, penalties


async def test_seed_without_drop_params_is_refused(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await client.chat.completions.create(model="m", messages=MESSAGES, seed=42)
    assert info.value.param == "seed" and "drop_params" in info.value.message
    assert upstream.requests == []


@pytest.mark.parametrize("proxy_overrides", [{"upstream.api": "responses", "upstream.drop_params": ["seed", "top_k"]}])
async def test_drop_params_drops_seed_and_logs_it(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(JSONReply(final_response("ok")))
    with structlog.testing.capture_logs() as logs:
        r = await client.chat.completions.create(model="m", messages=MESSAGES, seed=42, extra_body={"top_k": 5})
    assert r.choices[0].message.content == "ok"
    sent = upstream.requests[-1].body
    assert "seed" not in sent and "top_k" not in sent
    lines = [e for e in logs if e["event"] == "request.ignored_fields"]
    assert len(lines) == 1  # once per request
    assert lines[0]["log_level"] == "warning" and lines[0]["dropped"] == ["seed", "top_k"]


async def test_penalties_are_mapped(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(JSONReply(final_response("ok")))
    await client.chat.completions.create(model="m", messages=MESSAGES, presence_penalty=0.5, frequency_penalty=-0.25)
    sent = upstream.requests[-1].body
    assert (sent["presence_penalty"], sent["frequency_penalty"]) == (0.5, -0.25)
