"""The images backend behind the hosted ``image_generation`` tool: one OpenAI-compatible
``POST {backend_url}/images/generations`` per image (LocalAI, vLLM-omni, a ComfyUI bridge).

  not streamed  {"prompt", "n": 1, "size", "response_format": "b64_json", "model"?}
                -> {"created", "data": [{"b64_json", "revised_prompt"?}], "output_format"?, ...}
  streamed      the same with "stream": true, "partial_images": k (``[images] stream``)
                -> SSE events ``image_generation.partial_image`` {"b64_json", "partial_image_index"}
                   ..., then ``image_generation.completed`` {"b64_json", ...} (OpenAI's images
                   streaming API); an ``error`` event fails the image

What the backend sends is untrusted data: it is read up to ``max_response_bytes``, an image must
be base64, and crossfeed never requests a URL the backend names (an answer with ``url`` instead of
``b64_json`` fails the image): it only ever calls the one endpoint the operator configured. Every
failure (refused, slow, an HTTP error, a body that is not the API's JSON) is an ``ImageFailed``
with a line the model can read.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from crossfeed.proxy.runtime import tracing
from crossfeed.proxy.runtime.images_config import ImagesConfig

USER_AGENT = "crossfeed-images"
# A partial image as it arrives: (its base64, its 0-based index).
OnPartial = Callable[[str, int], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Image:
    b64: str
    revised_prompt: str | None = None
    output_format: str | None = None


class ImageFailed(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


async def generate(
    session: aiohttp.ClientSession,
    cfg: ImagesConfig,
    environ: Mapping[str, str],
    prompt: str,
    *,
    size: str,
    partial_images: int = 0,
    on_partial: OnPartial | None = None,
) -> Image:
    """One image of ``size`` for ``prompt``; partial images (a streaming backend, ``on_partial``
    given and ``partial_images`` > 0) are handed to ``on_partial`` as they come."""
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json", "Content-Type": "application/json"}
    if cfg.api_key_env:
        key = environ.get(cfg.api_key_env)
        if not key:
            raise ImageFailed(f"the images backend is not available (its key, ${cfg.api_key_env}, is not set)")
        headers["Authorization"] = f"Bearer {key}"
    body: dict[str, Any] = {"prompt": prompt, "n": 1, "size": size, "response_format": "b64_json"}
    if cfg.model:
        body["model"] = cfg.model
    streamed = cfg.stream and on_partial is not None and partial_images > 0
    if streamed:
        body |= {"stream": True, "partial_images": partial_images}
    try:
        async with (
            asyncio.timeout(cfg.timeout_seconds),
            session.post(cfg.endpoint, data=orjson.dumps(body), headers=tracing.inject(headers)) as resp,
        ):
            if resp.status >= 400:
                raise ImageFailed(
                    f"the images backend answered HTTP {resp.status}{_reason(await resp.content.read(4096))}"
                )
            if streamed and resp.content_type == "text/event-stream":
                assert on_partial is not None
                return await _streamed(resp, cfg.max_response_bytes, on_partial)
            raw = await _read(resp, cfg.max_response_bytes)
    except TimeoutError:
        raise ImageFailed(f"the images backend did not answer within {cfg.timeout_seconds:g}s") from None
    except (aiohttp.ClientError, OSError):
        raise ImageFailed("the images backend could not be reached") from None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ImageFailed("the images backend answered with something that is not JSON") from None
    return _image(doc)


def _reason(raw: bytes) -> str:
    """``: <message>`` of an error body in OpenAI's envelope, else nothing."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return ""
    error = doc.get("error") if isinstance(doc, dict) else None
    message = error.get("message") if isinstance(error, dict) else error if isinstance(error, str) else None
    return f": {' '.join(message.split())[:300]}" if isinstance(message, str) and message.strip() else ""


async def _read(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    parts, size = [], 0
    async for chunk in resp.content.iter_any():
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            raise ImageFailed(f"the images backend sent more than {limit} bytes")
    return b"".join(parts)


def _b64(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ImageFailed("the images backend answered without the image's b64_json")
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ImageFailed("the images backend's b64_json is not base64") from None
    return value


def _image(doc: Any) -> Image:
    """The first image of a whole answer (``ImagesResponse``)."""
    data = doc.get("data") if isinstance(doc, dict) else None
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else None
    if first is None:
        raise ImageFailed("the images backend answered JSON of an unexpected shape (no data[0])")
    if "b64_json" not in first and isinstance(first.get("url"), str):
        raise ImageFailed("the images backend answered a URL, not b64_json (crossfeed fetches nothing else)")
    revised = first.get("revised_prompt")
    fmt = doc.get("output_format")
    return Image(
        _b64(first.get("b64_json")),
        revised if isinstance(revised, str) else None,
        fmt if isinstance(fmt, str) else None,
    )


async def _streamed(resp: aiohttp.ClientResponse, limit: int, on_partial: OnPartial) -> Image:
    """The events of a streamed generation, until ``image_generation.completed``."""
    buffer, size, seen = b"", 0, 0
    async for chunk in resp.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise ImageFailed(f"the images backend sent more than {limit} bytes")
        buffer = (buffer + chunk).replace(b"\r\n", b"\n")
        *frames, buffer = buffer.split(b"\n\n")
        for frame in frames:
            event = _event(frame)
            if event is None:
                continue
            kind = event.get("type")
            if kind == "image_generation.partial_image":
                await on_partial(_b64(event.get("b64_json")), seen)
                seen += 1
            elif kind == "image_generation.completed":
                fmt = event.get("output_format")
                return Image(_b64(event.get("b64_json")), None, fmt if isinstance(fmt, str) else None)
            elif kind == "error" or "error" in event:
                raise ImageFailed(f"the images backend failed{_reason(orjson.dumps(event))}")
    raise ImageFailed("the images backend's stream ended before image_generation.completed")


def _event(frame: bytes) -> dict[str, Any] | None:
    """One SSE frame's JSON (its ``event:`` name as ``type`` when the data has none)."""
    name, data = None, []
    for line in frame.split(b"\n"):
        if line.startswith(b"event:"):
            name = line[6:].strip().decode("utf-8", "replace")
        elif line.startswith(b"data:"):
            data.append(line[5:].lstrip(b" "))
    if not data or data == [b"[DONE]"]:
        return None
    try:
        doc = orjson.loads(b"\n".join(data))
    except orjson.JSONDecodeError:
        raise ImageFailed("the images backend streamed an event that is not JSON") from None
    if not isinstance(doc, dict):
        raise ImageFailed("the images backend streamed an event of an unexpected shape")
    if name and "type" not in doc:
        doc["type"] = name
    return doc
