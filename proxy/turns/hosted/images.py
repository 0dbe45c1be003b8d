"""The hosted ``image_generation`` tool on a chat backend: a runner of the tool loop
(proxy/turns/hosted/tool_loop.py), on the images backend of ``[images]``
(proxy/turns/hosted/images_backend.py).

- **Not configured** (no ``[images] backend_url``): a request carrying the tool is a 400 naming
  ``tools[i]``; it is never dropped silently (the client would get text where it asked for an
  image).
- **Bounds**: the tool's ``size`` must be one of ``[images] sizes`` (else a 400 naming
  ``tools[i].size``; ``auto`` or none: ``default_size``); ``partial_images`` is 0 to 3; each
  call makes one image; ``[images] max_calls`` is this runner's budget.
- **Calls**: the model is offered one function (``image_generation``, or
  ``crossfeed_image_generation`` when the client declares a function of that name) taking a
  ``prompt``. Each call becomes an ``image_generation_call`` item:
  ``response.image_generation_call.in_progress``, ``.generating``, then (a streaming backend,
  ``partial_images`` asked, a streamed Response) ``.partial_image`` events as the backend sends
  them, ``.completed`` and ``output_item.done`` with the image (base64) in ``result``. The calls
  of one round run one after the other (an images backend is usually one GPU). A backend that
  fails (an HTTP error, a timeout, a body that is not the API's) fails the item (``status:
  failed``, no event of its own), not the Response: the model is told, and answers.
- The model reads a short line (``Image generated (1024x1024) and shown to the user.``), never
  the image.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import structlog

from crossfeed.proxy.errors import ClientRequestError
from crossfeed.proxy.keys import ENV
from crossfeed.proxy.runtime import tracing
from crossfeed.proxy.runtime.images_config import ImagesConfig
from crossfeed.proxy.streaming.sinks import Sink
from crossfeed.proxy.turns.hosted.images_backend import Image, ImageFailed, generate
from crossfeed.proxy.turns.hosted.tool_loop import write
from crossfeed.proxy.turns.turn import Turn
from crossfeed.translators.forward.image_items import image_function
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.forward.request import MappedRequest

log = structlog.get_logger("crossfeed")

MAX_PARTIAL_IMAGES = 3  # the Responses API's bound on the tool's partial_images
_SPAN = {
    "gen_ai.operation.name": "execute_tool",
    "gen_ai.tool.name": "image_generation",
    "gen_ai.tool.type": "extension",
}


@dataclass(slots=True)
class ImagePlan:
    """What one Response may draw, and how many it has drawn (a ``tool_loop.Runner``)."""

    fn: str
    size: str
    partial_images: int
    budget: int
    forced: str | None
    used: int = 0
    stop: bool = False

    @property
    def names(self) -> frozenset[str]:
        return frozenset({self.fn})

    @property
    def tools(self) -> list[dict[str, Any]]:
        return [image_function(self.fn)]

    def prelude(self, main: ChatToResponsesStream) -> list[Any]:
        return []

    async def run(
        self, turn: Turn, main: ChatToResponsesStream, calls: list[dict[str, str]], sink: Sink | None
    ) -> dict[str, str]:
        results: dict[str, str] = {}
        for call in calls:
            results[call["call_id"]] = await self._draw(turn, main, call, sink)
        return results

    async def _draw(self, turn: Turn, main: ChatToResponsesStream, call: dict[str, str], sink: Sink | None) -> str:
        """One call: its item, its events, the image; what the model is told."""
        prompt = _prompt(call)
        item: dict[str, Any] = {"id": turn.ids.new("ig_"), "type": "image_generation_call", "status": "in_progress"}
        item_id = item["id"]
        events, index = main.begin_item({**item, "result": None}, then="response.image_generation_call.in_progress")
        await write(sink, events + main.item_event("response.image_generation_call.generating", index, item_id))

        async def partial(b64: str, n: int) -> None:
            await write(
                sink,
                main.item_event(
                    "response.image_generation_call.partial_image",
                    index,
                    item_id,
                    partial_image_b64=b64,
                    partial_image_index=n,
                ),
            )

        made = await _run(turn, self, prompt, partial if sink is not None else None)
        if isinstance(made, str):
            await write(sink, main.finish_item(index, {**item, "status": "failed", "result": None}))
            return f"The image generation failed: {made}. Tell the user; do not retry unless asked."
        done = {**item, "status": "completed", "result": made.b64, "revised_prompt": made.revised_prompt or prompt}
        done["size"] = self.size
        if made.output_format:
            done["output_format"] = made.output_format
        events = main.item_event("response.image_generation_call.completed", index, item_id)
        await write(sink, events + main.finish_item(index, done))
        return f"Image generated ({self.size}) and shown to the user."


def image_plan(turn: Turn, mapped: MappedRequest) -> ImagePlan | None:
    """The plan of a request with the ``image_generation`` tool (what it asks: the request
    mapping's ``HostedTools.images``); a 400 when crossfeed has no images backend or the tool
    asks what ``[images]`` does not allow."""
    asked = mapped.hosted.images if mapped.hosted is not None else None
    if asked is None or mapped.compact:
        return None
    cfg: ImagesConfig = turn.config.images
    param = f"tools[{asked.index}]"
    if not cfg.backend_url:
        raise ClientRequestError(
            "the image_generation tool needs an images backend, and this crossfeed has none: the operator "
            "configures one in [images] backend_url (an OpenAI-compatible /v1/images/generations API)",
            param=param,
            code="image_generation_not_configured",
        )
    size = cfg.size if asked.size in (None, "auto") else asked.size
    if size not in cfg.sizes:
        raise ClientRequestError(
            f"image size {asked.size!r} is not one this crossfeed makes: one of {', '.join(cfg.sizes)}, or auto",
            param=f"{param}.size",
            code="invalid_value",
        )
    partial = asked.partial_images if asked.partial_images is not None else 0
    if isinstance(partial, bool) or not isinstance(partial, int) or not 0 <= partial <= MAX_PARTIAL_IMAGES:
        raise ClientRequestError(
            f"partial_images is an integer from 0 to {MAX_PARTIAL_IMAGES}",
            param=f"{param}.partial_images",
            code="invalid_value",
        )
    return ImagePlan(
        fn=asked.function,
        size=size,
        partial_images=partial,
        budget=cfg.max_calls,
        forced=asked.function if asked.forced else None,
    )


def _prompt(call: dict[str, str]) -> str | None:
    try:
        args = orjson.loads(call["arguments"] or "{}")
    except orjson.JSONDecodeError:
        return None
    prompt = args.get("prompt") if isinstance(args, dict) else None
    return prompt.strip()[:4000] if isinstance(prompt, str) and prompt.strip() else None


async def _run(turn: Turn, plan: ImagePlan, prompt: str | None, on_partial: Any) -> Image | str:
    """The image, or why there is none."""
    if prompt is None:
        return 'the call needs its arguments as {"prompt": "..."}'
    cfg = turn.config.images
    with tracing.span("execute_tool image_generation", _SPAN | {"crossfeed.images.size": plan.size}) as span:
        try:
            return await generate(
                turn.session,
                cfg,
                turn.app[ENV],
                prompt,
                size=plan.size,
                partial_images=plan.partial_images,
                on_partial=on_partial,
            )
        except ImageFailed as exc:
            log.warning("image_generation.failed", backend=cfg.backend_url, error=exc.message)
            span.fail(exc.message)
            return exc.message
