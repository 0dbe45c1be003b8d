"""Chat Completions stream frames for the fake backends of the tests."""

from __future__ import annotations

from typing import Any

import orjson


def chunk(
    delta: dict[str, Any] | None, finish: str | None = None, usage: tuple[int, int] | None = None, model: str = "m"
) -> bytes:
    """One ``data:`` frame: a choice with ``delta`` (None: no choice, as a usage chunk has), and
    ``usage`` as (prompt, completion) tokens."""
    body: dict[str, Any] = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return b"data: " + orjson.dumps(body) + b"\n\n"
