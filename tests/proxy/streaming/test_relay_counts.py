"""The summary line counts every event or chunk sent, where a machine writes a run of them as one
output (an SSE run's frames are one bytes: translators/reverse/text_runs.py,
translators/forward/content_writer.py; Pump.packed counts the others)."""

from __future__ import annotations

import io
import json

import aiohttp
import orjson
import structlog

from crossfeed.proxy.runtime.logs import configure_logging
from tests.fakes.upstream import FakeUpstream, SSEReply
from tests.support.app_server import start_proxy


def event(obj: dict) -> bytes:
    return b"event: " + obj["type"].encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


def responses_stream(n: int) -> bytes:
    text = [f"w{i} " for i in range(n)]
    head = {"id": "resp_1", "object": "response", "created_at": 1, "model": "m", "status": "in_progress", "output": []}
    done = {**head, "status": "completed", "usage": {"input_tokens": 3, "output_tokens": n, "total_tokens": n + 3}}
    message = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed"}
    part = {"type": "output_text", "text": "".join(text), "annotations": []}
    frames = [
        event({"type": "response.created", "sequence_number": 0, "response": head}),
        event({"type": "response.in_progress", "sequence_number": 1, "response": head}),
        event(
            {
                "type": "response.output_item.added",
                "sequence_number": 2,
                "output_index": 0,
                "item": {**message, "status": "in_progress", "content": []},
            }
        ),
        event(
            {
                "type": "response.content_part.added",
                "sequence_number": 3,
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "part": {**part, "text": ""},
            }
        ),
    ]
    for i, t in enumerate(text):
        frames.append(
            event(
                {
                    "type": "response.output_text.delta",
                    "sequence_number": 4 + i,
                    "item_id": "msg_1",
                    "output_index": 0,
                    "content_index": 0,
                    "delta": t,
                    "logprobs": [],
                }
            )
        )
    seq = 4 + n
    frames += [
        event(
            {
                "type": "response.output_text.done",
                "sequence_number": seq,
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "text": part["text"],
                "logprobs": [],
            }
        ),
        event(
            {
                "type": "response.content_part.done",
                "sequence_number": seq + 1,
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "part": part,
            }
        ),
        event(
            {
                "type": "response.output_item.done",
                "sequence_number": seq + 2,
                "output_index": 0,
                "item": {**message, "content": [part]},
            }
        ),
        event(
            {
                "type": "response.completed",
                "sequence_number": seq + 3,
                "response": {**done, "output": [{**message, "content": [part]}]},
            }
        ),
    ]
    return b"".join(frames)


async def test_events_out_counts_each_chunk_of_a_run(upstream: FakeUpstream) -> None:
    buf = io.StringIO()
    configure_logging("info", "json", stream=buf)
    handle = await start_proxy(
        {"upstream.base_url": upstream.base_url, "upstream.api": "responses", "store.backend": "memory"}
    )
    try:
        body = responses_stream(60)
        upstream.reply(SSEReply(body, max_piece=len(body)))  # one write: the relay reads runs
        async with aiohttp.ClientSession() as s:
            payload = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            async with s.post(handle.url + "/v1/chat/completions", json=payload) as r:
                assert r.status == 200
                sent = (await r.read()).split(b"\n\n")
    finally:
        await handle.stop()
        structlog.reset_defaults()
    chunks = [f for f in sent if f.startswith(b"data: {")]
    assert b"".join(
        json.loads(c[6:])["choices"][0]["delta"].get("content", "").encode()
        for c in chunks
        if json.loads(c[6:])["choices"]
    ) == b"".join(b"w%d " % i for i in range(60))
    lines = [json.loads(line) for line in buf.getvalue().splitlines() if line.startswith("{")]
    summary = [e for e in lines if "events_out" in e]
    assert len(summary) == 1, lines
    assert summary[0]["events_out"] == len(chunks) > 60
    assert summary[0]["events_in"] == body.count(b"\n\n")


def chat_stream(n: int) -> bytes:
    def chunk(delta: dict, finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [choice]}
        return b"data: " + orjson.dumps(body) + b"\n\n"

    frames = [chunk({"role": "assistant", "content": ""})]
    frames += [chunk({"content": f"w{i} "}) for i in range(n)]
    frames += [chunk({}, "stop"), b"data: [DONE]\n\n"]
    return b"".join(frames)


async def test_events_out_counts_each_event_of_a_run(upstream: FakeUpstream) -> None:
    buf = io.StringIO()
    configure_logging("info", "json", stream=buf)
    handle = await start_proxy({"upstream.base_url": upstream.base_url, "store.backend": "memory"})
    try:
        body = chat_stream(60)
        upstream.reply(SSEReply(body, max_piece=len(body)))  # one write: the relay reads runs
        async with aiohttp.ClientSession() as s:
            payload = {"model": "m", "input": "hi", "stream": True}
            async with s.post(handle.url + "/v1/responses", json=payload) as r:
                assert r.status == 200
                sent = [f for f in (await r.read()).split(b"\n\n") if f.startswith(b"event: ")]
    finally:
        await handle.stop()
        structlog.reset_defaults()
    deltas = [
        json.loads(f.split(b"\ndata: ", 1)[1]) for f in sent if f.startswith(b"event: response.output_text.delta")
    ]
    assert "".join(d["delta"] for d in deltas) == "".join(f"w{i} " for i in range(60))
    lines = [json.loads(line) for line in buf.getvalue().splitlines() if line.startswith("{")]
    summary = [e for e in lines if "events_out" in e]
    assert len(summary) == 1, lines
    assert summary[0]["events_out"] == len(sent) > 60
