"""The client's event dialect over a real socket: ``[server] event_dialect`` and a named key's own
``event_dialect``. A chat backend streams reasoning; a client of the Open Responses dialect gets
``response.reasoning.delta``/``.done`` over SSE, over WebSocket and in a replay of the stored
response, every stream valid under the strict validator and the Open Responses schema; a client
of the default dialect gets OpenAI's names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from crossfeed.proxy.runtime.config import load_config
from crossfeed.translators.ids import SequentialIds
from tests.fakes.upstream import FakeUpstream, SSEReply
from tests.support.app_server import ProxyHandle, running_proxy
from tests.support.chat_chunks import DONE, chunk
from tests.support.validators import validate_responses_sse
from tests.support.ws import FrameRecorder, ws_url

pytestmark = pytest.mark.timeout(60)

KEYS = {"OR_KEY": "sk-or-5e4d3c", "SDK_KEY": "sk-sdk-9a8b7c"}
REASONING_EVENTS = {
    "openai": ["response.reasoning_text.delta", "response.reasoning_text.delta", "response.reasoning_text.done"],
    "open_responses": ["response.reasoning.delta", "response.reasoning.delta", "response.reasoning.done"],
}


def thinking(_: Any) -> SSEReply:
    return SSEReply(
        chunk({"role": "assistant", "reasoning_content": "Let me "})
        + chunk({"reasoning_content": "think."})
        + chunk({"content": "Hi"})
        + chunk({}, "stop", usage=(3, 4))
        + DONE,
        max_piece=11,
    )


def reasoning_types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events if e["type"].startswith(("response.reasoning.", "response.reasoning_text."))]


def proxy_with(upstream: FakeUpstream, tmp_path: Path, **settings: Any) -> Any:
    upstream.default = thinking
    config = load_config(
        None, {}, {"upstream.base_url": upstream.base_url, "store.data_dir": str(tmp_path / "data"), **settings}
    )
    return running_proxy(config, dict(KEYS), ids=SequentialIds())


async def sse_and_replay(proxy: ProxyHandle, dialect: str, key: str | None = None) -> None:
    """A streamed create, then its replay (GET ?stream=true): both in ``dialect``."""
    headers = {"Authorization": f"Bearer {KEYS[key]}"} if key else {}
    async with aiohttp.ClientSession(headers=headers) as http:
        body = {"model": "m", "input": "hi", "stream": True}
        async with http.post(proxy.base_url + "/responses", json=body) as r:
            assert r.status == 200
            events = validate_responses_sse(await r.read(), dialect=dialect)
        assert reasoning_types(events) == REASONING_EVENTS[dialect]
        final = events[-1]["response"]
        assert final["output"][0]["content"] == [{"type": "reasoning_text", "text": "Let me think."}]
        async with http.get(f"{proxy.base_url}/responses/{final['id']}", params={"stream": "true"}) as r:
            replayed = validate_responses_sse(await r.read(), dialect=dialect)
        assert reasoning_types(replayed) == [REASONING_EVENTS[dialect][0], REASONING_EVENTS[dialect][2]]


async def over_websocket(proxy: ProxyHandle, ws_frames: FrameRecorder, dialect: str, key: str | None = None) -> None:
    headers = {"Authorization": f"Bearer {KEYS[key]}"} if key else None
    async with ws_frames.connect(ws_url(proxy.url), headers=headers, dialect=dialect) as ws:
        turn = await ws.turn(model="m", input="hi")
    assert turn.terminal == "response.completed"
    assert reasoning_types(turn.events) == REASONING_EVENTS[dialect]
    ws_frames.validate()  # strict validator in the dialect, and the Open Responses schema


async def test_server_wide_open_responses_dialect(
    upstream: FakeUpstream, tmp_path: Path, ws_frames: FrameRecorder
) -> None:
    async with proxy_with(upstream, tmp_path, **{"server.event_dialect": "open_responses"}) as proxy:
        await sse_and_replay(proxy, "open_responses")
        await over_websocket(proxy, ws_frames, "open_responses")


async def test_a_keys_own_dialect_overrides_the_servers(
    upstream: FakeUpstream, tmp_path: Path, ws_frames: FrameRecorder
) -> None:
    keys = [
        {"name": "conformance", "key_env": "OR_KEY", "event_dialect": "open_responses"},
        {"name": "sdk", "key_env": "SDK_KEY"},
    ]
    async with proxy_with(upstream, tmp_path, **{"server.inbound_keys": keys}) as proxy:
        await sse_and_replay(proxy, "open_responses", "OR_KEY")
        await over_websocket(proxy, ws_frames, "open_responses", "OR_KEY")
        await sse_and_replay(proxy, "openai", "SDK_KEY")  # the server's default: OpenAI's names
        await over_websocket(proxy, ws_frames, "openai", "SDK_KEY")
