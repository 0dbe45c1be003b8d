"""A fake OpenAI-compatible images backend (LocalAI, vLLM-omni, a ComfyUI bridge all speak this
shape) on a real loopback port, for crossfeed's hosted ``image_generation`` tool.

  POST /v1/images/generations {"prompt", "n", "size", "response_format": "b64_json", "model"?}
      -> {"created", "data": [{"b64_json", "revised_prompt"}], "size", "output_format", "usage"}
  ... with "stream": true, "partial_images": k
      -> text/event-stream: k events ``image_generation.partial_image`` {"type", "b64_json",
         "partial_image_index", "background", "created_at", "output_format", "quality", "size"},
         then ``image_generation.completed`` {"type", "b64_json", ..., "usage"}
         (openai.types.ImageGenPartialImageEvent / ImageGenCompletedEvent)

It answers ``image`` (a 1x1 PNG unless a test sets a larger one), records every request and can be
told to fail: ``fail`` = "500", "garbage", "slow", "url"
(an answer with a URL instead of b64_json), "stream_error" (an ``error`` event mid-stream).
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

# A 1x1 PNG, and the partial images (distinct bytes, so a test can tell them apart).
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"


def partial_png(n: int) -> str:
    return base64.b64encode(base64.b64decode(PNG) + bytes([n])).decode()


@dataclass
class ImagesRequest:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeImages:
    fail: str | None = None
    image: str = PNG  # the base64 of the image it makes
    delay: float = 0.0
    requests: list[ImagesRequest] = field(default_factory=list)
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        """The base URL crossfeed is configured with (``[images] backend_url``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> None:
        app = web.Application(client_max_size=1024 * 1024)
        app.router.add_post("/v1/images/generations", self._generate)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.requests.append(ImagesRequest(request.path, dict(request.headers), body))
        if self.delay or self.fail == "slow":
            await asyncio.sleep(self.delay or 30)
        if self.fail == "500":
            error = {"message": "CUDA out of memory", "type": "server_error", "param": None, "code": None}
            return web.json_response({"error": error}, status=500)
        if self.fail == "garbage":
            return web.Response(text="<html>bad gateway</html>", content_type="text/html")
        size = body.get("size") or "1024x1024"
        if self.fail == "url":
            return web.json_response({"created": 1, "data": [{"url": "http://127.0.0.1:9/image.png"}]})
        if body.get("stream"):
            return await self._stream(request, body, size)
        return web.json_response(
            {
                "created": 1_700_000_000,
                "data": [{"b64_json": self.image, "revised_prompt": "A revised " + body["prompt"]}],
                "size": size,
                "output_format": "png",
                "quality": "medium",
                "background": "opaque",
                "usage": _usage(),
            }
        )

    async def _stream(self, request: web.Request, body: dict[str, Any], size: str) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        common = {"background": "opaque", "created_at": 1_700_000_000, "output_format": "png", "quality": "medium"}
        for n in range(int(body.get("partial_images") or 0)):
            event = {"type": "image_generation.partial_image", "b64_json": partial_png(n), "partial_image_index": n}
            await resp.write(_frame({**event, **common, "size": size}))
            if self.fail == "stream_error" and n == 0:
                error = {"type": "error", "error": {"message": "the sampler diverged", "type": "server_error"}}
                await resp.write(_frame(error))
                await resp.write_eof()
                return resp
        done = {"type": "image_generation.completed", "b64_json": self.image, **common, "size": size, "usage": _usage()}
        await resp.write(_frame(done))
        await resp.write_eof()
        return resp


def _frame(event: dict[str, Any]) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def _usage() -> dict[str, Any]:
    return {
        "input_tokens": 12,
        "input_tokens_details": {"image_tokens": 0, "text_tokens": 12},
        "output_tokens": 272,
        "total_tokens": 284,
    }
