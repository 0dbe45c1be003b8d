"""A chat backend's replies for the tests that drive crossfeed through a client: streamed text, a call
after reasoning, a non-streamed completion (tests/fakes/upstream.py serves them)."""

from __future__ import annotations

from typing import Any

import orjson

from tests.fakes.upstream import JSONReply, SSEReply
from tests.support.chat_chunks import DONE, chunk, usage_chunk


def text_reply(text: str) -> SSEReply:
    return SSEReply(chunk({"role": "assistant", "content": ""}) + chunk({"content": text}, "stop") + DONE)


def call_reply(call_id: str, name: str, args: str) -> SSEReply:
    return SSEReply(
        chunk({"reasoning_content": "I should call " + name})
        + chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
                ]
            },
            "tool_calls",
        )
        + DONE
    )


def json_text(text: str) -> JSONReply:
    return JSONReply(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        }
    )


TOOLS = [
    {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
]


def reply(text: str) -> JSONReply:
    return JSONReply(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        }
    )


def sse_reply(text: str) -> SSEReply:
    return SSEReply(chunk({"role": "assistant", "content": text}, "stop") + DONE)


REASONING = "The user wants the weather; I should call the tool."


ANSWER = "It is sunny in Paris."


def reasoning_then(text: str | None = None, call: tuple[str, dict[str, Any]] | None = None) -> SSEReply:
    body = chunk({"role": "assistant", "content": None})
    for word in REASONING.split(" "):
        body += chunk({"reasoning_content": word + " "})
    if text:
        for word in text.split(" "):
            body += chunk({"content": word + " "})
    finish = "stop"
    if call:
        args = orjson.dumps(call[1]).decode()
        body += chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_w",
                        "type": "function",
                        "function": {"name": call[0], "arguments": args[:5]},
                    }
                ]
            }
        )
        body += chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[5:]}}]})
        finish = "tool_calls"
    return SSEReply(body + chunk({}, finish) + usage_chunk(11, 7) + DONE, max_piece=17)
