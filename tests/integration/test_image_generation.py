"""The hosted image_generation tool on a chat backend, served by a configured images backend:
through the official SDK (SSE, JSON and WebSocket), against a fake OpenAI-compatible images API
(tests/fakes/images.py: the real ``/v1/images/generations`` shape, streamed partial images too).

The fake chat backend plays a model that calls the image function first and answers from the
short line it was given, so a passing test proves the round trip: the function offered, the call
hidden from the client, the ``image_generation_call`` item and its events (partial images
included), the image in ``result``, a short text (never the image) fed back, the answer. Every
SSE body and WebSocket frame passes the strict validator.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import orjson
import pytest

from tests.fakes.images import PNG, FakeImages, partial_png
from tests.fakes.upstream import FakeUpstream, JSONReply, Recorded, SSEReply
from tests.support.app_server import ProxyHandle, running_proxy
from tests.support.chat_chunks import DONE, chunk
from tests.support.clients import Captured, validate_captured
from tests.support.validators import validate_responses_sse
from tests.support.ws import FrameRecorder

pytestmark = pytest.mark.timeout(60)

IMAGE = [{"type": "image_generation", "partial_images": 2}]
PROMPT = "a lighthouse at dusk, watercolour"
ANSWER = "Here is your lighthouse."


def call_reply(prompt: str = PROMPT, name: str = "image_generation") -> SSEReply:
    raw = orjson.dumps({"prompt": prompt}).decode()
    body = chunk({"role": "assistant", "content": ""})
    first = {"index": 0, "id": "call_0", "type": "function", "function": {"name": name, "arguments": raw[:7]}}
    body += chunk({"tool_calls": [first]})
    body += chunk({"tool_calls": [{"index": 0, "function": {"arguments": raw[7:]}}]})
    return SSEReply(body + chunk({}, "tool_calls") + chunk(None, usage=(100, 10)) + DONE, max_piece=31)


def answer_reply(text: str) -> SSEReply:
    body = chunk({"role": "assistant", "content": ""}) + chunk({"content": text})
    return SSEReply(body + chunk({}, "stop") + chunk(None, usage=(300, 20)) + DONE)


def as_json(reply: SSEReply) -> JSONReply:
    """The same reply as a non-streamed completion."""
    text, calls = "", []
    for line in reply.data.split(b"\n\n"):
        if not line.startswith(b"data: {"):
            continue
        for c in orjson.loads(line[6:]).get("choices") or ():
            d = c["delta"]
            text += d.get("content") or ""
            for tc in d.get("tool_calls") or ():
                if "id" in tc:
                    calls.append({"id": tc["id"], "type": "function", "function": {**tc["function"], "arguments": ""}})
                calls[tc["index"]]["function"]["arguments"] += tc["function"].get("arguments", "")
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
    usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    return JSONReply(
        {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice], "usage": usage}
    )


def model(req: Recorded) -> SSEReply | JSONReply:
    """Draws once, then answers from what it was told (the tool message)."""
    last = req.body["messages"][-1]
    if last["role"] == "tool":
        out = answer_reply(ANSWER if last["content"].startswith("Image generated") else "The drawing failed, sorry.")
    else:
        out = call_reply()
    return out if req.body.get("stream") else as_json(out)


@pytest.fixture
async def images() -> AsyncIterator[FakeImages]:
    fake = FakeImages()
    await fake.start()
    yield fake
    await fake.close()


@pytest.fixture
def proxy_overrides(images: FakeImages) -> dict[str, Any]:
    return {
        "images.backend_url": images.url,
        "images.model": "flux-schnell",
        "images.stream": True,
        "images.timeout_seconds": 2,
    }


def told(upstream: FakeUpstream) -> str:
    """What the model was told of its call (the tool message of the second leg)."""
    result = upstream.requests[1].body["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "call_0"
    return str(result["content"])


async def test_streamed_with_partial_images(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, images: FakeImages, captured: list[Captured]
) -> None:
    upstream.default = model
    stream = await client.responses.create(model="m", input="Draw a lighthouse.", tools=IMAGE, stream=True)
    events = [e async for e in stream]
    types = [e.type for e in events]
    assert types[:9] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.image_generation_call.in_progress",
        "response.image_generation_call.generating",
        "response.image_generation_call.partial_image",
        "response.image_generation_call.partial_image",
        "response.image_generation_call.completed",
        "response.output_item.done",
    ]
    assert types[-1] == "response.completed" and validate_captured(captured) == 1
    partials = [e for e in events if e.type == "response.image_generation_call.partial_image"]
    assert [(p.partial_image_index, p.partial_image_b64) for p in partials] == [
        (0, partial_png(0)),
        (1, partial_png(1)),
    ]
    final = events[-1].response
    assert [o.type for o in final.output] == ["image_generation_call", "message"]
    call = final.output[0]
    assert call.status == "completed" and call.result == PNG and call.id.startswith("ig_")
    assert call.size == "1024x1024" and call.output_format == "png"
    assert final.output_text == ANSWER
    sent = images.requests[0]
    assert sent.path == "/v1/images/generations"
    assert sent.body == {
        "prompt": PROMPT,
        "n": 1,
        "size": "1024x1024",
        "response_format": "b64_json",
        "model": "flux-schnell",
        "stream": True,
        "partial_images": 2,
    }
    first = upstream.requests[0].body
    assert [t["function"]["name"] for t in first["tools"]] == ["image_generation"]
    assert first["tools"][0]["function"]["parameters"]["required"] == ["prompt"]
    assert told(upstream) == "Image generated (1024x1024) and shown to the user."
    assert PNG not in orjson.dumps(upstream.requests[1].body).decode()


async def test_not_streamed(client: openai.AsyncOpenAI, upstream: FakeUpstream, images: FakeImages) -> None:
    upstream.default = model
    resp = await client.responses.create(model="m", input="Draw a lighthouse.", tools=IMAGE)
    assert [(o.type, o.status) for o in resp.output] == [
        ("image_generation_call", "completed"),
        ("message", "completed"),
    ]
    assert resp.output[0].result == PNG and resp.output[0].revised_prompt == "A revised " + PROMPT
    assert resp.output_text == ANSWER
    assert "stream" not in images.requests[0].body  # no partial images to show: the whole image is asked
    assert resp.usage is not None and resp.usage.total_tokens == 220  # both legs


async def test_over_websocket(proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder) -> None:
    upstream.default = model
    async with ws_frames.connect(proxy.url.replace("http", "ws") + "/v1/responses") as ws:
        turn = await ws.turn(type="response.create", model="m", input="Draw.", tools=IMAGE)
    assert turn.terminal == "response.completed"
    assert [i["type"] for i in turn.response["output"]] == ["image_generation_call", "message"]
    assert turn.types().count("response.image_generation_call.partial_image") == 2


@pytest.mark.parametrize("fault", ["500", "garbage", "slow", "url", "stream_error"])
async def test_a_failed_image_fails_its_item_and_the_response_completes(
    proxy: ProxyHandle, upstream: FakeUpstream, images: FakeImages, fault: str
) -> None:
    images.fail = fault
    upstream.default = model
    async with httpx2.AsyncClient(base_url=proxy.base_url, timeout=30) as http:
        r = await http.post("/responses", json={"model": "m", "input": "q", "tools": IMAGE, "stream": True})
    events = validate_responses_sse(r.content)
    types = [e["type"] for e in events]
    assert "response.image_generation_call.completed" not in types and types[-1] == "response.completed"
    final = events[-1]["response"]
    assert [(o["type"], o["status"]) for o in final["output"]] == [
        ("image_generation_call", "failed"),
        ("message", "completed"),
    ]
    assert (
        final["output"][0]["result"] is None
        and final["output"][1]["content"][0]["text"] == "The drawing failed, sorry."
    )
    assert told(upstream).startswith("The image generation failed: the images backend")
    if fault == "500":
        assert "CUDA out of memory" in told(upstream)
    assert len(images.requests) == 1  # a URL in the answer is never fetched


async def test_a_size_the_operator_does_not_allow_is_a_400(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, images: FakeImages
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await client.responses.create(
            model="m", input="q", tools=[{"type": "image_generation", "size": "4096x4096"}], stream=True
        )
    assert info.value.body["param"] == "tools[0].size"  # type: ignore[index]
    assert "1024x1024" in info.value.message
    assert upstream.requests == [] and images.requests == []


async def test_an_allowed_size_and_the_call_budget(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, images: FakeImages
) -> None:
    """The tool's size is what the backend is asked; ``max_calls`` bounds the images of one
    response: a model that never stops drawing gets its last leg told to answer."""
    upstream.default = lambda req: as_json(call_reply())
    resp = await client.responses.create(
        model="m", input="q", tools=[{"type": "image_generation", "size": "1536x1024"}], max_tool_calls=2
    )
    assert [o.type for o in resp.output] == ["image_generation_call", "image_generation_call"]
    assert resp.status == "incomplete" and [r.body["size"] for r in images.requests] == ["1536x1024"] * 2
    assert upstream.requests[2].body["tool_choice"] == "none"


async def test_not_configured_is_a_400_naming_the_tool(upstream: FakeUpstream, tmp_path: Path) -> None:
    """Without [images] the tool is refused, never dropped silently; nothing reaches the backend."""
    config = {"upstream.base_url": upstream.base_url, "store.data_dir": str(tmp_path)}
    async with running_proxy(config) as handle:
        async with openai.AsyncOpenAI(base_url=handle.base_url, api_key="k", max_retries=0) as c:
            for stream in (False, True):
                with pytest.raises(openai.BadRequestError) as info:
                    await c.responses.create(model="m", input="q", tools=IMAGE, stream=stream)  # type: ignore[call-overload]
                body = info.value.body
                assert isinstance(body, dict) and body["param"] == "tools[0]"
                assert body["code"] == "image_generation_not_configured" and "[images]" in body["message"]
        async with httpx2.AsyncClient() as http:
            r = await http.post(
                handle.base_url + "/responses",
                json={"model": "m", "input": "q", "tools": [{"type": "function", "name": "f"}, *IMAGE]},
            )
        assert r.status_code == 400 and r.json()["error"]["param"] == "tools[1]"
        assert r.json()["error"]["type"] == "invalid_request_error"
    assert upstream.requests == []


async def test_the_images_key_goes_to_the_images_backend_only(
    upstream: FakeUpstream, images: FakeImages, tmp_path: Path
) -> None:
    config = {
        "upstream.base_url": upstream.base_url,
        "store.data_dir": str(tmp_path),
        "images.backend_url": images.url,
        "images.api_key_env": "IMAGES_KEY",
    }
    async with running_proxy(config, {"IMAGES_KEY": "sk-images-secret"}) as handle:
        upstream.default = model
        async with openai.AsyncOpenAI(base_url=handle.base_url, api_key="k", max_retries=0) as c:
            resp = await c.responses.create(model="m", input="q", tools=IMAGE)
    assert resp.output[0].status == "completed"
    assert images.requests[0].headers["Authorization"] == "Bearer sk-images-secret"
    assert "model" not in images.requests[0].body  # no [images] model: the backend's default
    assert all("sk-images-secret" not in str(r.headers) for r in upstream.requests)


CODEX_REQUEST = Path(__file__).resolve().parents[1] / "fixtures" / "codex" / "plain.request.json"
CODEX_IMAGE_TOOL = {"type": "image_generation", "output_format": "png"}  # the shape Codex sends


async def test_codex_shaped_request(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, images: FakeImages, captured: list[Captured]
) -> None:
    """A recorded Codex request (its tools, its top-level keys) with Codex's image_generation
    tool added: the image is made and the turn completes, streamed as Codex reads it."""
    request = orjson.loads(CODEX_REQUEST.read_bytes())
    request["tools"].append(CODEX_IMAGE_TOOL)
    upstream.default = model
    model_name, rest = request.pop("model"), {k: v for k, v in request.items() if k != "stream"}
    events = [e async for e in await client.responses.create(model=model_name, stream=True, extra_body=rest)]
    final = events[-1].response
    assert events[-1].type == "response.completed" and validate_captured(captured) == 1
    assert [o.type for o in final.output] == ["image_generation_call", "message"]
    assert final.output[0].result == PNG and final.output_text == ANSWER
    names = [t["function"]["name"] for t in upstream.requests[0].body["tools"]]
    declared = [t["name"] for t in request["tools"] if t["type"] in ("function", "custom")]
    assert names == [*declared, "tool_search", "image_generation"]  # Codex's own tool_search: offered
    assert "stream" not in images.requests[0].body  # Codex asks no partial images


def images_config(upstream: FakeUpstream, images: FakeImages, tmp_path: Path, **images_settings: Any) -> dict[str, Any]:
    """The settings of a proxy on these fakes, with ``[images]`` settings of the test's own."""
    settings = {"backend_url": images.url, "stream": True, "timeout_seconds": 2, **images_settings}
    return {
        "upstream.base_url": upstream.base_url,
        "store.data_dir": str(tmp_path),
        **{f"images.{k}": v for k, v in settings.items()},
    }


async def test_max_calls_bounds_the_images_of_one_response(
    upstream: FakeUpstream, images: FakeImages, tmp_path: Path
) -> None:
    """``[images] max_calls`` without the request's ``max_tool_calls``: a model that draws on every
    leg it may gets two images, then a last leg with ``tool_choice: "none"``, which it answers."""

    def draws_while_it_may(req: Recorded) -> SSEReply | JSONReply:
        out = answer_reply(ANSWER) if req.body.get("tool_choice") == "none" else call_reply()
        return out if req.body.get("stream") else as_json(out)

    upstream.default = draws_while_it_may
    async with running_proxy(images_config(upstream, images, tmp_path, max_calls=2)) as handle:
        async with openai.AsyncOpenAI(base_url=handle.base_url, api_key="k", max_retries=0) as c:
            resp = await c.responses.create(model="m", input="Draw three lighthouses.", tools=IMAGE)
    assert [(o.type, o.status) for o in resp.output] == [
        ("image_generation_call", "completed"),
        ("image_generation_call", "completed"),
        ("message", "completed"),
    ]
    assert resp.status == "completed" and resp.output_text == ANSWER
    assert len(images.requests) == 2 and len(upstream.requests) == 3
    assert [r.body.get("tool_choice") for r in upstream.requests] == [None, None, "none"]


@pytest.mark.parametrize("partial_images", [4, -1, True])
@pytest.mark.parametrize("stream", [True, False])
async def test_partial_images_out_of_bounds_is_a_400(
    proxy: ProxyHandle, upstream: FakeUpstream, images: FakeImages, partial_images: Any, stream: bool
) -> None:
    """The Responses API allows 0 to 3 partial images (an integer, not a boolean)."""
    upstream.default = model
    tools = [{"type": "image_generation", "partial_images": partial_images}]
    async with httpx2.AsyncClient(base_url=proxy.base_url, timeout=30) as http:
        r = await http.post("/responses", json={"model": "m", "input": "q", "tools": tools, "stream": stream})
    assert r.status_code == 400
    error = r.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", "tools[0].partial_images")
    assert upstream.requests == [] and images.requests == []


@pytest.mark.parametrize("stream", [True, False])
async def test_an_image_over_max_response_bytes_fails_its_item(
    upstream: FakeUpstream, images: FakeImages, tmp_path: Path, stream: bool
) -> None:
    """An images backend answer longer than ``[images] max_response_bytes`` fails the item (a
    streamed backend's too: partial images asked on a streamed Response); the Response completes."""
    images.image = base64.b64encode(base64.b64decode(PNG) + bytes(4096)).decode()
    upstream.default = model
    async with running_proxy(images_config(upstream, images, tmp_path, max_response_bytes=1024)) as handle:
        async with httpx2.AsyncClient(base_url=handle.base_url, timeout=30) as http:
            r = await http.post("/responses", json={"model": "m", "input": "q", "tools": IMAGE, "stream": stream})
    final = validate_responses_sse(r.content)[-1]["response"] if stream else r.json()
    assert final["status"] == "completed"
    assert [(o["type"], o["status"]) for o in final["output"]] == [
        ("image_generation_call", "failed"),
        ("message", "completed"),
    ]
    assert final["output"][0]["result"] is None
    assert told(upstream) == (
        "The image generation failed: the images backend sent more than 1024 bytes. "
        "Tell the user; do not retry unless asked."
    )
    assert images.requests[0].body.get("stream") is (True if stream else None)
