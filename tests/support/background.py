"""Chat backends' replies for the background-mode tests: a paced stream, one held half way."""

from __future__ import annotations

import asyncio

from tests.fakes.upstream import SSEReply
from tests.support.chat_chunks import DONE, chunk, usage_chunk

WORDS = [f"w{i} " for i in range(12)]


def paced(words: list[str] = WORDS, *, delay: float = 0.05, fail: bool = False) -> SSEReply:
    """A chat stream of ``words``, one piece per chunk with a pause between writes; ``fail``:
    the backend stops in the middle with an error frame."""
    body = chunk({"role": "assistant", "content": ""})
    for i, word in enumerate(words):
        body += chunk({"content": word})
        if fail and i == len(words) // 2:
            return SSEReply(body + b'data: {"error": {"message": "backend exploded", "code": 500}}\n\n', delay=delay)
    body += chunk({}, "stop") + usage_chunk(3, len(words)) + DONE
    return SSEReply(body, delay=delay, max_piece=40)


def held(words: list[str] = WORDS) -> tuple[SSEReply, asyncio.Event]:
    """A chat stream that stops after its first half until the event is set."""
    first = chunk({"role": "assistant", "content": ""}) + b"".join(chunk({"content": w}) for w in words[:6])
    rest = b"".join(chunk({"content": w}) for w in words[6:]) + chunk({}, "stop") + usage_chunk(3, 12) + DONE
    go = asyncio.Event()
    return SSEReply(first + rest, holds={len(first): go}), go
