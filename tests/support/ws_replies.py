"""A chat backend's replies for the WebSocket tests (the SDK's, the Node client's, the faults'): text and
a tool call streamed in realistic pieces, an error before the stream and one in the middle, and the
messages crossfeed sent, read back as (role, text)."""

from __future__ import annotations

from typing import Any

import orjson

from tests.fakes.upstream import JSONReply, SSEReply
from tests.support.chat_chunks import DONE, chunk

MODEL = "gpt-4o"


TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]


def text_reply(*pieces: str, usage: tuple[int, int] = (11, 4), seed: int = 1) -> SSEReply:
    body = chunk({"role": "assistant", "content": ""}) + b"".join(chunk({"content": p}) for p in pieces)
    return SSEReply(body + chunk({}, "stop") + chunk(None, usage=usage) + DONE, seed=seed, max_piece=17)


def tool_reply(call_id: str, name: str, args: dict[str, Any]) -> SSEReply:
    raw = orjson.dumps(args).decode()
    body = chunk({"role": "assistant", "content": None})
    body += chunk(
        {
            "tool_calls": [
                {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": raw[:5]}}
            ]
        }
    )
    for k in range(5, len(raw), 6):
        body += chunk({"tool_calls": [{"index": 0, "function": {"arguments": raw[k : k + 6]}}]})
    return SSEReply(body + chunk({}, "tool_calls") + chunk(None, usage=(30, 9)) + DONE, seed=2, max_piece=23)


def error_reply(status: int, message: str) -> JSONReply:
    return JSONReply(
        {
            "error": {
                "message": message,
                "type": "server_error" if status >= 500 else "invalid_request_error",
                "param": None,
                "code": None,
            }
        },
        status=status,
    )


def midstream_failure(message: str) -> SSEReply:
    """Some text, then the backend's error object in the stream (no finish_reason)."""
    body = chunk({"role": "assistant", "content": ""}) + chunk({"content": "Partial "})
    return SSEReply(
        body + b"data: " + orjson.dumps({"error": {"message": message, "type": "server_error"}}) + b"\n\n",
        seed=4,
        max_piece=19,
    )


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def plain(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(role, text) of each message; assistant content may be a string or a list of parts."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content)
        out.append((m["role"], content or ""))
    return out
