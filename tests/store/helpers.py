"""What the store tests share: a realistic stored record, and crossfeed started on one store backend
with a chat backend that answers every turn, read back through its API, /readyz and its metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from crossfeed.proxy.runtime.observability import METRICS
from crossfeed.proxy.state.store.base import StoredResponse
from tests.fakes.upstream import FakeUpstream, Recorded
from tests.support.app_server import ProxyHandle, start_proxy
from tests.support.chat_replies import json_text, text_reply


def rec(rid: str, *, prev: str | None = None, pad: int = 0) -> StoredResponse:
    """A realistic record: reasoning, a function call and its output, and a message."""
    output = [
        {
            "type": "reasoning",
            "id": f"rs_{rid}",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "think… " + "x" * pad}],
        },
        {
            "type": "function_call",
            "id": f"fc_{rid}",
            "call_id": f"call_{rid}",
            "name": "shell",
            "arguments": '{"cmd": ["ls"]}',
            "status": "completed",
        },
        {
            "type": "message",
            "id": f"msg_{rid}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "héllo ✓", "annotations": []}],
        },
    ]
    response = {
        "id": rid,
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "completed",
        "output": output,
        "previous_response_id": prev,
        "usage": {"input_tokens": 3, "output_tokens": 5, "total_tokens": 8},
    }
    items = [
        {"type": "message", "id": f"in_{rid}", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "function_call_output", "id": f"fco_{rid}", "call_id": "call_0", "output": "ok"},
    ]
    return StoredResponse(rid, 1_700_000_000, response, items, prev)


def reply(req: Recorded) -> Any:
    n = len([m for m in req.body.get("messages", []) if m.get("role") == "user"])
    text = f"answer {n}"
    return text_reply(text) if req.body.get("stream") else json_text(text)


async def start(upstream: FakeUpstream, tmp_path: Path, kind: str, redis_url: str | None, **store: Any) -> ProxyHandle:
    overrides: dict[str, Any] = {
        "upstream.base_url": upstream.base_url,
        "store.backend": kind.split("-")[0],
        "store.operation_timeout_seconds": 3.0,
        **{f"store.{k}": v for k, v in store.items()},
    }
    if kind.startswith("sqlite"):
        overrides["store.data_dir"] = str(tmp_path / "data")
    if kind.startswith("redis"):
        overrides.update({"store.redis_url": redis_url, "store.redis_timeout_seconds": 1.0})
    return await start_proxy(overrides)


async def call(method: str, url: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s,
        s.request(method, url, json=body) as r,
    ):
        return r.status, await r.json(content_type=None)


def metric(handle: ProxyHandle, name: str, *labels: str) -> float:
    family = getattr(handle.app[METRICS], name)
    return float(family.labels(*labels)._value.get())


async def readyz(handle: ProxyHandle) -> tuple[int, dict[str, Any]]:
    return await call("GET", handle.url + "/readyz")
