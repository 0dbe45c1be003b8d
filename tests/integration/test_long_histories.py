"""A long create body (issue 33): Codex on HTTP resends its whole history every turn, and a body
of ``RAW_BODY_MIN`` bytes or more is read the fast way (translators/responses/create_body.py),
its long tool outputs carried to the backend as the JSON they came in. Through the official SDK,
against the fake backend (every stream validated by the ``captured`` fixture):

  - the backend gets the same chat request as when the same body is read the plain way;
  - a stored response gives its long outputs back as text: in ``input_items`` and in the history
    ``previous_response_id`` replays;
  - what the plain parse refuses in a long output (invalid UTF-8, a lone surrogate) is the same
    400 either way;
  - the credentials the trace redacts are redacted inside a kept output too;
  - a long ``response.create`` frame on a WebSocket (a new socket's first turn resends the
    history) is read the same way, through the SDK's own WebSocket client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from crossfeed.proxy.http import websocket
from crossfeed.proxy.runtime.turn_trace import REDACTED, redact
from crossfeed.proxy.turns import common
from crossfeed.translators.responses.create_body import RAW_OUTPUT_MIN
from tests.fakes.upstream import FakeUpstream, JSONReply
from tests.support.app_server import ProxyHandle
from tests.support.chat_replies import text_reply
from tests.support.ws import FrameRecorder, ws_url

pytestmark = pytest.mark.timeout(60)

TOOLS = [{"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}}]


def listing(k: int) -> str:
    """A tool output past ``RAW_OUTPUT_MIN``: code, non-ASCII text, an emoji, escapes."""
    line = f'{k:04d}  print("héllo ✓ 😀\\t{{x}}")  # 🚀 \\u00e9 \x1b[0m\n'
    return "".join(line for _ in range(RAW_OUTPUT_MIN // 30))


def history(turns: int = 40) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "fix the failing test"}]
    for k in range(turns):
        call = f"call_{k}"
        items.append({"type": "function_call", "call_id": call, "name": "exec_command", "arguments": '{"cmd":"ls"}'})
        items.append({"type": "function_call_output", "call_id": call, "output": listing(k)})
        items.append(
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": f"step {k}"}]}
        )
    items.append({"role": "user", "content": "and now?"})
    return items


def outputs_of(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "tool"]


def taken(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[bool]:
    """Whether each call of the fast read ``module.name`` took the fast way (gave a body)."""
    seen: list[bool] = []
    real: Callable[[Any], Any] = getattr(module, name)

    def spy(raw: Any) -> Any:
        body = real(raw)
        seen.append(body is not None)
        return body

    monkeypatch.setattr(module, name, spy)
    return seen


@pytest.fixture
def fast_reads(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each create was read the fast way (decode_create gave a body)."""
    return taken(monkeypatch, common, "decode_create")


async def test_the_backend_gets_the_same_request_either_way(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, fast_reads: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream.default = text_reply("done")
    items = history()
    assert len(orjson.dumps(items)) > common.RAW_BODY_MIN
    for _ in range(2):
        stream = await client.responses.create(model="m", input=items, tools=TOOLS, stream=True)  # type: ignore[arg-type]
        events = [event async for event in stream]
        assert events[-1].type == "response.completed"
        monkeypatch.setattr(common, "RAW_BODY_MIN", 1 << 40)  # the second one the plain way
    assert fast_reads == [True]
    fast, plain = (r.body for r in upstream.requests)
    assert fast == plain
    assert outputs_of(fast["messages"]) == [listing(k) for k in range(40)]


async def test_a_stored_response_gives_its_long_outputs_back_as_text(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, fast_reads: list[bool]
) -> None:
    upstream.default = text_reply("done")
    items = history()
    stream = await client.responses.create(model="m", input=items, tools=TOOLS, store=True, stream=True)  # type: ignore[arg-type]
    first = [event async for event in stream][-1].response  # type: ignore[union-attr]
    listed = [item async for item in client.responses.input_items.list(first.id, order="asc")]
    outputs = [item for item in listed if item.type == "function_call_output"]
    assert [item.output for item in outputs] == [listing(k) for k in range(40)]  # type: ignore[union-attr]

    stream = await client.responses.create(
        model="m",
        input="go on",
        tools=TOOLS,  # type: ignore[arg-type]
        previous_response_id=first.id,
        stream=True,
    )
    assert [event async for event in stream][-1].type == "response.completed"
    assert fast_reads == [True]  # the second body is short: read the plain way
    replayed = upstream.requests[-1].body["messages"]
    assert outputs_of(replayed) == [listing(k) for k in range(40)]
    assert replayed[-1] == {"role": "user", "content": "go on"}


async def test_compact_of_a_long_history_asks_the_same_either_way(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, fast_reads: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/v1/responses/compact`` (Codex's remote compaction sends the whole history): the backend
    is asked to summarise the same messages, and the compaction answers the same items."""
    upstream.default = JSONReply(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "sum"}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
        }
    )
    answers = []
    for _ in range(2):
        compacted = await client.responses.compact(model="m", input=history())  # type: ignore[arg-type]
        answers.append([o.type for o in compacted.output])
        monkeypatch.setattr(common, "RAW_BODY_MIN", 1 << 40)  # the second one the plain way
    assert fast_reads == [True]
    assert answers[0] == answers[1]
    fast, plain = (r.body for r in upstream.requests)
    assert fast == plain
    assert outputs_of(fast["messages"]) == [listing(k) for k in range(40)]


@pytest.mark.parametrize(
    "bad",
    [b"\xff\xfe", b"\xed\xa0\x80", b"\\ud800", b"\\udc00x"],
    ids=["invalid-utf8", "encoded-surrogate", "lone-high", "lone-low"],
)
@pytest.mark.parametrize("way", ["fast", "plain"])
async def test_what_the_plain_parse_refuses_is_the_same_400(
    proxy: ProxyHandle, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch, bad: bytes, way: str
) -> None:
    if way == "plain":
        monkeypatch.setattr(common, "RAW_BODY_MIN", 1 << 40)
    raw = orjson.dumps({"model": "m", "input": history()})
    at = raw.index("héllo".encode())
    raw = raw[:at] + bad + raw[at:]
    async with aiohttp.ClientSession() as s, s.post(proxy.base_url + "/responses", data=raw) as r:
        assert r.status == 400
        error = (await r.json())["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_json")
    assert upstream.requests == []


@pytest.mark.parametrize("way", ["fast", "plain"])
async def test_nesting_too_deep_is_the_same_400(
    proxy: ProxyHandle, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch, way: str
) -> None:
    if way == "plain":
        monkeypatch.setattr(common, "RAW_BODY_MIN", 1 << 40)
    deep = b"[" * 50_000 + b"]" * 50_000
    raw = orjson.dumps({"model": "m", "input": history()})[:-1] + b',"metadata":' + deep + b"}"
    async with aiohttp.ClientSession() as s, s.post(proxy.base_url + "/responses", data=raw) as r:
        assert r.status == 400
        error = (await r.json())["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_json")
    assert upstream.requests == []


def test_a_kept_output_is_redacted_as_text() -> None:
    from crossfeed.translators.responses.create_body import decode_create

    secret = "sk-live-0123456789abcdef"
    raw = orjson.dumps(
        {
            "model": "m",
            "input": [{"type": "function_call_output", "call_id": "c", "output": f"token={secret}\n" + listing(1)}],
        }
    )
    body = decode_create(raw)
    assert body is not None and isinstance(body["input"][0]["output"], orjson.Fragment)
    shown = redact(body, (secret,), 40)
    assert shown["input"][0]["output"].startswith(f"token={REDACTED}")
    assert secret not in orjson.dumps(shown).decode()


@pytest.fixture
def fast_frames(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each long WebSocket frame was read the fast way (decode_create_frame gave an event)."""
    return taken(monkeypatch, websocket, "decode_create_frame")


async def test_a_long_websocket_create_asks_the_same_either_way(
    proxy: ProxyHandle,
    upstream: FakeUpstream,
    ws_frames: FrameRecorder,
    fast_frames: list[bool],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    upstream.default = text_reply("done")
    items = history()
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="sk-test-client", max_retries=0)
    try:
        async with client.responses.connect() as conn:
            ws = ws_frames.attach(conn)
            first, _ = await ws.turn(model="m", input=items, tools=TOOLS)
            monkeypatch.setattr(websocket, "RAW_BODY_MIN", 1 << 40)  # the second one the plain way
            second, _ = await ws.turn(model="m", input=items, tools=TOOLS)
    finally:
        await client.close()
    assert first.terminal == second.terminal == "response.completed"
    assert fast_frames == [True]
    fast, plain = (r.body for r in upstream.requests)
    assert fast == plain
    assert outputs_of(fast["messages"]) == [listing(k) for k in range(40)]
    assert ws_frames.validate() == (2, 0)


async def test_a_long_frame_the_fast_read_does_not_take_is_served_the_plain_way(
    proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder, fast_frames: list[bool]
) -> None:
    """A field the fast read does not list, a ``stream_id``, and a frame that is not JSON: the
    first is read the plain way (its field ignored, as over HTTP), the second fast, the last is
    the usual in-band 400."""
    upstream.default = text_reply("done")
    items = history()
    async with ws_frames.connect(ws_url(proxy.url)) as ws:
        plain = await ws.turn(model="m", input=items, tools=TOOLS, x_extension={"a": 1})
        lane = await ws.turn(model="m", input=items, tools=TOOLS, stream_id="s1")
        await ws.ws.send_str(orjson.dumps({"type": "response.create", "model": "m", "input": items}).decode()[:-1])
        error = await ws.recv()
    assert plain.terminal == lane.terminal == "response.completed"
    assert error["type"] == "error" and error["status"] == 400 and error["error"]["code"] == "invalid_json"
    assert fast_frames == [False, True, False]
    first, second = (r.body for r in upstream.requests)
    assert "x_extension" not in first and first == second
    assert ws_frames.validate() == (2, 1)
