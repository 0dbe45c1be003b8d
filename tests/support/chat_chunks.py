"""Chat Completions stream chunks and frames for the fake backends of the tests: one builder for
every test (``chat_chunk`` the object, ``chunk`` its ``data:`` frame, ``DONE`` the last frame)."""

from __future__ import annotations

from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"

_ABSENT: Any = object()


def chat_chunk(
    delta: dict[str, Any] | None,
    finish: str | None = None,
    usage: tuple[int, int] | dict[str, Any] | None = None,
    model: str = "m",
    *,
    id: str = "c",
    logprobs: Any = _ABSENT,
    null_usage: bool = False,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``: a choice with ``delta`` (None: no choice, as a usage chunk
    has) and ``finish``; ``usage`` as (prompt, completion) tokens, or the usage object itself. ``logprobs``, when given, is the
    choice's ``logprobs``; ``null_usage`` writes ``"usage": null`` on a chunk without usage."""
    choice: dict[str, Any] = {"index": 0, "delta": delta}
    if logprobs is not _ABSENT:
        choice["logprobs"] = logprobs
    choice["finish_reason"] = finish
    body: dict[str, Any] = {
        "id": id,
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [] if delta is None else [choice],
    }
    if isinstance(usage, dict):
        body["usage"] = usage
    elif usage:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    elif null_usage:
        body["usage"] = None
    return body


def frame(body: Any) -> bytes:
    """``body`` as one ``data:`` frame."""
    return b"data: " + orjson.dumps(body) + b"\n\n"


def chunk(
    delta: dict[str, Any] | None,
    finish: str | None = None,
    usage: tuple[int, int] | dict[str, Any] | None = None,
    model: str = "m",
    **options: Any,
) -> bytes:
    """``chat_chunk``'s chunk as one ``data:`` frame (``options``: its keyword options)."""
    return frame(chat_chunk(delta, finish, usage, model, **options))


def usage_chunk(prompt: int, completion: int, **options: Any) -> bytes:
    """The frame of the last chunk of a stream with ``stream_options.include_usage``: no choice,
    the usage."""
    return chunk(None, usage=(prompt, completion), **options)
